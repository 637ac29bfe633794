"""``evaluate_policy``: complete greedy episodes of a policy (a module, an exported policy, any callable) on any env,
and their returns. ``Evaluation`` (``rl_lightning.callbacks.evaluation``) runs it during training."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from rl_lightning._checks import check_int
from rl_lightning.deprecations import renamed_keywords
from rl_lightning.envs import make_envs
from rl_lightning.envs.base import VectorEnv
from rl_lightning.envs.gym_adapter import NO_TIME_LIMIT_EVAL_STEPS, encode_observations
from rl_lightning.envs.spaces import (
    ACTION_MASK_KEY,
    OBSERVATION_KEY,
    TensorTree,
    as_bool_mask,
    encode_leaf,
    flat_parts,
    flat_values,
    is_structured,
)
from rl_lightning.playing import play_greedy


class EvalResult(NamedTuple):
    """Undiscounted return and length of each evaluation episode, and (as SB3's ``evaluate_policy``
    gives them) the mean and the standard deviation of the returns."""

    returns: Tensor
    lengths: Tensor

    @property
    def mean(self) -> float:
        """The mean return."""
        return self.returns.float().mean().item()

    @property
    def std(self) -> float:
        """The standard deviation of the returns (over the episodes, not an estimate's: numpy's and SB3's)."""
        return self.returns.float().std(correction=0).item()


@renamed_keywords(act="policy", env_id="env")  # the first release's names
@torch.no_grad()
def evaluate_policy(
    policy: Callable[[Tensor], Tensor] | Any,
    env: str | VectorEnv | gym.Env,
    num_episodes: int = 32,
    seed: int = 0,
    device: torch.device | str = "cpu",
    max_episode_steps: int | None = None,
    every_64_steps: Callable[[int], bool] | None = None,
    seed_index: int | str | None = None,
) -> EvalResult:
    """Run ``num_episodes`` complete episodes with a greedy policy and return their returns.

    Args:
        policy: an rl_lightning module (its greedy ``act``), an exported policy, or any callable
            obs ``(batch, *obs_shape)`` -> actions.
        env: an env id (native, or any gymnasium id: a fresh instance of ``num_episodes`` copies is
            built on ``device``, so training envs are untouched), a ``VectorEnv`` (one episode per
            copy), or a gymnasium ``Env`` instance (``num_episodes`` episodes one after another). A
            module's actions are stepped in gymnasium's values there (``start + k`` for a
            ``Discrete(n, start)`` or a ``MultiDiscrete`` with ``start``); a callable's, as an exported
            policy gives them, are the env's own values and stepped as they are.
        num_episodes: episodes to run (with an env id or a gymnasium env).
        seed: the evaluation envs' seed (the same seed gives the same start states).
        max_episode_steps: the cap on an episode's length; None: the env's time limit, or
            ``NO_TIME_LIMIT_EVAL_STEPS`` (1,000) for an env without one (a warning says when
            episodes were cut there: their returns are partial).
        every_64_steps: :func:`~rl_lightning.playing.play_greedy`'s hook (progress, a stop: ``PlayStopped``).
        seed_index: a ``num_seeds > 1`` module's seed that plays (an index or ``"best"``; None: seed 0).

    Returns:
        float32 ``(num_episodes,)`` returns and lengths of each episode; ``.mean`` and ``.std`` of
        the returns as floats.
    """
    if seed_index is not None:
        policy = policy.seed_module(seed_index)
    if max_episode_steps is not None:
        check_int("max_episode_steps", max_episode_steps, 1)
    act = _greedy(policy)
    if isinstance(env, gym.Env):  # episodes one after another, seeded once
        num_episodes = check_int("num_episodes", num_episodes, 1)
        indices = callable(getattr(policy, "greedy_actor", None))  # a module answers tensors in our indices
        envs, reset_seed = _OneGymnasiumEnv(env, num_episodes, indices), seed
    elif isinstance(env, VectorEnv):  # one episode per copy
        envs, reset_seed, num_episodes = env, seed, 1
    elif isinstance(env, str):  # a fresh instance, seeded when built
        envs = make_envs(env, check_int("num_episodes", num_episodes, 1), seed=seed, device=device)
        reset_seed, num_episodes = None, 1
    else:
        raise TypeError(f"env must be an env id, a VectorEnv or a gymnasium Env, got {type(env).__name__}")
    if max_episode_steps is None:  # one past the env's own limit: it ends the episode first
        limit = getattr(envs, "max_episode_steps", None)
        max_episode_steps = limit + 1 if isinstance(limit, int) and limit > 0 else NO_TIME_LIMIT_EVAL_STEPS
    try:
        played = play_greedy(
            act,
            envs,
            reset_seed,
            episodes_per_env=num_episodes,
            max_episode_steps=max_episode_steps,
            every_64_steps=every_64_steps,
        )
    finally:
        if isinstance(env, str):
            envs.close()
    _warn_if_cut(int(played.cut.sum()), max_episode_steps)
    return EvalResult(played.returns.flatten(), played.lengths.flatten())


def _warn_if_cut(cut: int, max_episode_steps: int) -> None:
    """Say so when evaluation episodes were still running at the cap (never silently partial returns)."""
    if cut:
        warnings.warn(
            f"evaluation episodes were cut at max_episode_steps={max_episode_steps} before they ended: their "
            "returns are partial (pass max_episode_steps=N to evaluate_policy / Evaluation, or "
            "--eval_max_episode_steps N to the scripts)",
            stacklevel=2,
        )


def _greedy(policy: Any) -> Callable[..., Tensor]:
    """``act(obs, episode_start)``: a module's greedy actor (carrying a recurrent state), or a callable."""
    greedy_actor = getattr(policy, "greedy_actor", None)
    if callable(greedy_actor):
        return greedy_actor()
    if not callable(policy):
        raise TypeError(
            f"policy must be an rl_lightning module or a callable obs -> actions, got {type(policy).__name__}"
        )
    return lambda obs, episode_start=None: policy(obs)


def _as_adapter_observation(space: gym.Space, obs: Any, info: dict[str, Any]) -> Any:
    """One gymnasium observation as a batch of one in the adapter's form: a Discrete index one-hot, a
    Dict / Tuple one a dict of batched leaves, and ``info["action_mask"]`` beside it where the env
    gives its masks there."""
    if is_structured(space):
        parts = flat_parts(space)
        values = flat_values(space, obs)
        batch: Any = TensorTree(
            {key: encode_leaf(part, np.asarray(values[key])[None], key) for key, part in parts.items()}
        )
    else:
        batch = encode_observations(space, obs)
        batch = batch if isinstance(space, gym.spaces.Discrete) else batch.unsqueeze(0)
    if isinstance(info, dict) and ACTION_MASK_KEY in info and not (is_structured(space) and ACTION_MASK_KEY in batch):
        mask = torch.as_tensor(as_bool_mask(np.asarray(info[ACTION_MASK_KEY]), "info['action_mask']")).reshape(1, -1)
        batch = TensorTree({**(batch if isinstance(batch, dict) else {OBSERVATION_KEY: batch}), ACTION_MASK_KEY: mask})
    return batch


class _OneGymnasiumEnv:
    """A single gymnasium env as a vector env of one copy for :func:`play_greedy`: observations in the
    adapter's form, tensors on the CPU, and the next episode started (``env.reset()``) when one ends,
    as long as episodes are left, so the env is reset exactly once per episode played. With
    ``indices``, actions are our indices ``k`` and step the env as its ``start + k`` (a ``Discrete`` or
    ``MultiDiscrete`` space with a start)."""

    num_envs = 1
    device = torch.device("cpu")

    def __init__(self, env: gym.Env, num_episodes: int, indices: bool = True):
        self.env = env
        self.episodes_left = num_episodes
        space = env.action_space
        shifted = isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)) and np.any(space.start != 0)
        self._action_space = space if indices and shifted else None
        self.max_episode_steps = env.spec.max_episode_steps if env.spec is not None else None

    def reset(self, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        self.episodes_left -= 1
        obs, info = self.env.reset(seed=seed)
        return _as_adapter_observation(self.env.observation_space, obs, info), {}

    def step(self, actions: Tensor) -> tuple[Any, Tensor, Tensor, Tensor, dict[str, Any]]:
        action = actions.squeeze(0).cpu().numpy()
        if self._action_space is not None:  # our index k is gymnasium's start + k
            action = (action + self._action_space.start).astype(self._action_space.dtype)
        obs, reward, terminated, truncated, info = self.env.step(action.item() if action.ndim == 0 else action)
        if (terminated or truncated) and self.episodes_left > 0:
            obs, _ = self.reset()
        else:
            obs = _as_adapter_observation(self.env.observation_space, obs, info)
        flags = torch.tensor([bool(terminated)]), torch.tensor([bool(truncated)])
        return obs, torch.tensor([float(reward)]), *flags, {}
