"""Several collection steps as one pure function, what an on-policy source's ``compile`` compiles where its env's step
is one (a native env with ``compile``: ``ClassicControlEnv.fuses_step``): the policy's forward pass and sampling from
drawn numbers, the env's step (dynamics, time limit, auto-reset, observations) and the storing, for
``RolloutSource.fused_steps_per_call`` steps at a time."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from rl_lightning.nets import CategoricalHead, GaussianHead


def fused_collection_steps(
    act: Callable[..., tuple[Tensor, Tensor, Tensor | None]],
    act_arguments: tuple[Any, ...],
    env_step: Callable[..., tuple[Any, tuple[Tensor, ...]]],
    env_arguments: tuple[Any, ...],
    carry: Any,
    obs: Tensor,
    noises: Sequence[Tensor],
    reset_draws: Sequence[Tensor],
) -> tuple[Any, Tensor, tuple[Tensor | None, ...]]:
    """``len(noises)`` collection steps of every env as one pure function.

    Args:
        act: the acting step, ``act(*act_arguments, obs, noise) -> (actions, logprobs, values or None)``
            (``rollout.policy_acting``, ``actor_critic.actor_critic_step``).
        env_step, env_arguments, carry, reset_draws: the env's fused step, what it takes before the carry and the
            carry and reset draws it starts from (``ClassicControlEnv.fused_steps_arguments``).
        obs: ``(num_envs, *obs_shape)`` the observations the first step acts on.
        noises: each step's random numbers for the policy's sampling, drawn beforehand from the source's generator.

    Returns:
        ``(carry, next_obs, steps)``: the env's carry after the last step (for ``finish_fused_steps``), the
        observations after it, and the steps as ``(count, num_envs, ...)`` tensors in ``Rollout.add_step``'s order
        ``(obs, actions, logprobs, rewards, terminated, truncated, values, final_obs)`` (values None without a critic;
        the flags as ``compiled_flags`` leaves them).
    """
    steps = []
    for noise, reset_draw in zip(noises, reset_draws, strict=True):
        actions, logprobs, values = act(*act_arguments, obs, noise)
        carry, outputs = env_step(*env_arguments, carry, reset_draw, actions)
        next_obs, final_obs, rewards, terminated, truncated = outputs
        steps.append((obs, actions, logprobs, rewards, terminated, truncated, values, final_obs))
        obs = next_obs
    stacked = tuple(None if column[0] is None else torch.stack(column) for column in zip(*steps, strict=True))
    return carry, obs, stacked


def _noise_draw(head: nn.Module | None) -> tuple[Callable[..., Tensor], tuple[int, ...]] | None:
    """How ``head.sample`` draws its random numbers for one observation (torch.rand or torch.randn, and the
    shape after the batch's; the compiled step hands them to ``head.sample(params, noise=...)``), or None for
    a head whose sampling is not replayed from drawn numbers."""
    if type(head) is CategoricalHead and not head.masked:
        return torch.rand, (1,)
    if type(head) is GaussianHead:
        return torch.randn, head.action_shape
    return None


def replays_sampling(head: nn.Module | None) -> bool:
    """Whether a compiled acting step can sample as ``head.sample`` does, from numbers drawn beforehand."""
    return _noise_draw(head) is not None


def fuses_together(sources: Sequence[Any]) -> bool:
    """Whether the on-policy ``sources`` (one per seed) can collect together, each chunk of steps of every seed as
    one call (:func:`play_fused_together`): a native env whose whole step is one pure function, and a policy head
    whose sampling replays drawn numbers."""
    source = sources[0]
    envs = source.envs
    fused_at = getattr(type(envs), "fuses_step_at", None)
    return (
        getattr(source, "fuses_acting_with_env", False)
        and replays_sampling(source._policy_head)
        and fused_at is not None
        and fused_at(envs.num_envs, envs.device)
    )


@torch.inference_mode()
def play_fused_together(sources: Sequence[Any], call: Callable[..., Any]) -> None:
    """Every seed's rollout, as ``RolloutSource._play_fused`` plays one source's, in lock-step: each chunk of
    ``fused_steps_per_call`` steps of every seed is ONE ``call(fused_collection_steps, calls)``
    (``algos._seeds.call_per_seed``, compiled with ``compile``) of each source's own policy, env state, reset draws
    and sampling numbers (from its own generators). The steps land in each source's ``rollout``; the caller then
    finishes each collection (``collect(played=True)``)."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    first = sources[0]
    count = max(d for d in range(1, first.fused_steps_per_call + 1) if first.num_steps % d == 0)
    observations = [source.reset_envs() if source.full_reset else source.obs for source in sources]
    modes = [source.policy.training for source in sources]
    for source in sources:
        source.rollout.reset()
        source.policy.eval()
        source.env_steps_before_batch = source.env_steps
    keep_final = first.keeps_final_observations
    try:
        for start in range(0, first.num_steps, count):
            calls = []
            for source, obs in zip(sources, observations, strict=True):
                act, act_arguments = source._fused_acting()
                env_step, env_arguments, carry, reset_draws = source.envs.fused_steps_arguments(count)
                noises = source._draw_noise(count)
                calls.append((act, act_arguments, env_step, env_arguments, carry, obs, noises, reset_draws))
            carries, next_obs, steps = call(fused_collection_steps, calls)
            for index, source in enumerate(sources):
                source.envs.finish_fused_steps(type(carries)(*(field[index] for field in carries)), count)
                acted_on, actions, logprobs, rewards, terminated, truncated, values, final_obs = (
                    None if column is None else column[index] for column in steps
                )
                terminated, truncated = terminated.bool(), truncated.bool()
                for t in range(count):
                    value, final = None if values is None else values[t], final_obs[t] if keep_final else None
                    source.rollout.add_step(
                        acted_on[t], actions[t], logprobs[t], rewards[t], terminated[t], truncated[t], value, final
                    )
                observations[index] = next_obs[index]
                source._obs, source._episode_start = next_obs[index], terminated[-1] | truncated[-1]
            if any(first.stop_requested_in_rollout(t) for t in range(start, start + count)):
                raise SIGTERMException()
    finally:
        for source, mode in zip(sources, modes, strict=True):
            source.policy.train(mode)
