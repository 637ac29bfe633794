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
