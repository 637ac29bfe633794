"""On-policy data for VPG: the ``Rollout`` buffer and the ``RolloutSource`` dataset."""

from __future__ import annotations

import math
import time
from typing import Any, NamedTuple

import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch import Tensor, nn

from rl_lightning._checks import check_bool, check_int
from rl_lightning.data.source import EnvSource
from rl_lightning.envs.base import VectorEnv
from rl_lightning.envs.spaces import as_tree, plain
from rl_lightning.nets import sample_categorical

# The seeds' name for categorical sampling, kept.
sample_actions = sample_categorical


class RolloutTensors(NamedTuple):
    """A rollout (or a batch of its envs), every field ``(num_envs, num_steps, ...)``.

    ``dones[:, t]`` is True where the episode ended on step t (terminated or truncated): the
    obs at t + 1 then starts a new episode. ``actions`` are what the policy sampled (for a
    ``Box`` space unclipped, ``(num_envs, num_steps, *action_shape)``).
    """

    obs: Tensor
    actions: Tensor
    logprobs: Tensor
    rewards: Tensor
    dones: Tensor


class Rollout:
    """Per-step tensors of ``num_envs`` trajectories, stacked once when read.

    Args:
        max_steps: the most timesteps it holds; ``add_step`` past that raises ``ValueError``.
    """

    def __init__(self, max_steps: int):
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"max_steps must be a positive int, got {max_steps!r}")
        self.max_steps = max_steps
        # Appending references and stacking once is cheaper than five indexed writes per step
        # into a preallocated buffer; each step's tensors are fresh, so references are safe.
        self._steps: list[tuple[Tensor, Tensor, Tensor, Tensor, Tensor]] = []

    @property
    def timestep(self) -> int:
        """Number of steps stored."""
        return len(self._steps)

    def add_step(self, obs: Tensor, actions: Tensor, logprobs: Tensor, rewards: Tensor, dones: Tensor) -> None:
        """Store one timestep of every env.

        Args:
            obs: ``(num_envs, *obs_shape)`` the obs the agent acted on.
            actions: ``(num_envs, *action_shape)`` the actions taken (int for Discrete).
            logprobs: ``(num_envs,)`` log pi(a_t | o_t) under the policy that acted.
            rewards: ``(num_envs,)`` the reward for that action.
            dones: bool ``(num_envs,)`` whether the episode ended on this step.

        Raises:
            ValueError: if the rollout already holds ``max_steps`` steps, or the shapes
                disagree on ``num_envs``.
        """
        if self.timestep >= self.max_steps:
            raise ValueError(f"Rollout is full: it already holds max_steps={self.max_steps} steps")
        num_envs = obs.shape[0] if isinstance(obs, Tensor) else actions.shape[0]  # a dict observation: by its actions
        if actions.shape[:1] != (num_envs,):
            raise ValueError(f"actions must have shape ({num_envs}, ...) like obs, got {tuple(actions.shape)}")
        for name, value in (("logprobs", logprobs), ("rewards", rewards), ("dones", dones)):
            if value.shape != (num_envs,):
                raise ValueError(f"{name} must have shape ({num_envs},) like obs, got {tuple(value.shape)}")
        self._steps.append((obs, actions, logprobs, rewards, dones))

    def reset(self) -> None:
        """Empty the rollout."""
        self._steps.clear()

    def get(self) -> RolloutTensors:
        """All stored steps as ``(num_envs, timestep, ...)`` tensors (rewards float32)."""
        if not self._steps:
            raise ValueError("Rollout is empty: add_step() at least once before get()")
        obs, actions, logprobs, rewards, dones = zip(*self._steps, strict=True)
        return RolloutTensors(
            torch.stack(obs, dim=1),
            torch.stack(actions, dim=1),
            torch.stack(logprobs, dim=1),
            torch.stack(rewards, dim=1).float(),
            torch.stack(dones, dim=1),
        )

    def get_batches(self, batch_size: int) -> list[RolloutTensors]:
        """Split the rollout along envs into batches of ``batch_size`` whole trajectories."""
        return split_rollout(self.get(), batch_size)


def split_rollout(rollout: RolloutTensors, batch_size: int) -> list[RolloutTensors]:
    """Split ``rollout`` along envs into batches of ``batch_size`` whole trajectories (views)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    splits = [torch.split(field, batch_size, dim=0) for field in rollout]
    return [RolloutTensors(*fields) for fields in zip(*splits, strict=True)]


class EpisodeStats(NamedTuple):
    """Undiscounted return and length of each env's first episode in a rollout."""

    returns: Tensor
    lengths: Tensor


def first_episode_stats(rewards: Tensor, dones: Tensor) -> EpisodeStats:
    """Return and length of each env's first episode (cut at the window if it never ends).

    Args:
        rewards: ``(num_envs, num_steps)``; dones: bool ``(num_envs, num_steps)``.
    """
    dones = dones.int()
    in_first = (dones.cumsum(dim=1) - dones) == 0  # no done strictly before this step
    return EpisodeStats((rewards.float() * in_first).sum(dim=1), in_first.sum(dim=1).float())


class RolloutSource(EnvSource):
    """Yields on-policy rollouts of ``policy`` on ``envs``, one training batch per item.

    Each rollout gives ``num_batches * rollout_use_count`` batches; an epoch is
    ``rollouts_per_epoch`` rollouts' worth. A rollout is collected only when the first of its
    batches is requested, with the policy's weights at that moment. The dataset has a length, so
    Lightning does not prefetch: the rollout used by training step k is generated by the weights
    after update k - 1.

    Args:
        envs: the vector env (on the policy's device).
        policy: a :class:`~rl_lightning.nets.PolicyNetwork` (anything with
            ``sample(obs, generator) -> (actions, logprobs)``).
        num_steps: steps per env per rollout.
        num_batches: batches per rollout (split along envs).
        rollout_use_count: how many times each rollout's batches are yielded.
        rollouts_per_epoch: rollouts per ``__iter__``.
        full_reset: reset every env at the start of each rollout (so each env's first
            episode starts at step 0 and the first-episode return is a real episode return).
        seed: seed of the action-sampling generator.
        world_size: processes each running their own source (``env_steps`` counts them all).
        env_steps: env steps already taken (a resumed run).
    """

    def __init__(
        self,
        envs: VectorEnv,
        policy: nn.Module,
        num_steps: int,
        num_batches: int = 1,
        rollout_use_count: int = 1,
        rollouts_per_epoch: int = 1,
        full_reset: bool = True,
        seed: int = 0,
        world_size: int = 1,
        env_steps: int = 0,
    ):
        super().__init__(envs, seed=seed, world_size=world_size, env_steps=env_steps)
        check_int("num_steps", num_steps, 1)
        check_int("num_batches", num_batches, 1)
        if envs.num_envs % num_batches != 0:
            raise ValueError(f"num_batches ({num_batches}) must divide num_envs ({envs.num_envs}) so batches are equal")
        self.policy = policy
        self.rollout = Rollout(num_steps)
        self.num_steps = num_steps
        self.num_batches = num_batches
        self.rollout_use_count = check_int("rollout_use_count", rollout_use_count, 1)
        self.rollouts_per_epoch = check_int("rollouts_per_epoch", rollouts_per_epoch, 1)
        self.full_reset = check_bool("full_reset", full_reset)
        #: Number of rollouts collected so far.
        self.num_rollouts = 0
        #: Index of the newest batch among its rollout's ``num_batches * rollout_use_count`` (0: the
        #: first batch of a rollout just collected).
        self.batch_in_rollout = -1
        #: The most recent rollout, stacked.
        self.last_rollout: RolloutTensors | None = None
        #: Seconds spent collecting the most recent rollout.
        self.last_collect_seconds = math.nan

    def __len__(self) -> int:
        return self.rollouts_per_epoch * self.num_batches * self.rollout_use_count

    @property
    def batches_per_rollout(self) -> int:
        return self.num_batches * self.rollout_use_count

    def state_dict(self) -> dict[str, Any]:
        # Mid-rollout (a checkpoint between two of its batches) the rollout is saved too.
        mid_rollout = 0 <= self.batch_in_rollout < self.batches_per_rollout - 1
        return {
            **super().state_dict(),
            "num_rollouts": self.num_rollouts,
            "batch_in_rollout": self.batch_in_rollout,
            # A plain dict: checkpoints load with torch.load(weights_only=True), which knows no NamedTuple.
            "rollout": {name: plain(field) for name, field in self.last_rollout._asdict().items()}
            if mid_rollout
            else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.num_rollouts = state["num_rollouts"]
        self.batch_in_rollout = state["batch_in_rollout"]
        rollout = state["rollout"]
        if rollout is not None:
            rollout = RolloutTensors(**{name: as_tree(tensor).to(self.device) for name, tensor in rollout.items()})
        self.last_rollout = rollout
        if self.last_rollout is None:
            self.batch_in_rollout = -1  # the next batch starts a new rollout

    def next_batch(self) -> RolloutTensors:
        if self.last_rollout is None or self.batch_in_rollout + 1 >= self.batches_per_rollout:
            self.collect()
            self.batch_in_rollout = 0
        else:
            self.batch_in_rollout += 1
        batch_size = self.envs.num_envs // self.num_batches
        index = self.batch_in_rollout % self.num_batches
        return RolloutTensors(*(field[index * batch_size : (index + 1) * batch_size] for field in self.last_rollout))

    def collect(self) -> RolloutTensors:
        """Step every env ``num_steps`` times with actions sampled from the current policy."""
        snapshot = self.rollout_snapshot()
        start = time.perf_counter()
        self.env_steps_before_batch = self.env_steps
        try:
            self._play()
        except SIGTERMException:  # heard in the middle of the rollout: back to its start
            self.restore_snapshot(snapshot)
            raise
        self.count(self.num_steps)
        self.num_rollouts += 1
        # Stacked outside inference mode, so the rollout is an ordinary tensor that the loss
        # can feed through the policy with autograd.
        rollout = self.rollout.get()
        self.episodes.update(rollout.rewards, rollout.dones)  # once per rollout, not per step
        self.last_rollout = rollout
        self.last_collect_seconds = time.perf_counter() - start
        return rollout

    @torch.inference_mode()  # ~15% less per-op overhead than no_grad for these tiny ops
    def _play(self) -> None:
        obs = self.reset_envs() if self.full_reset else self.obs
        self.rollout.reset()
        was_training = self.policy.training
        self.policy.eval()
        sample, step, add_step, generator = self.policy.sample, self.envs.step, self.rollout.add_step, self.generator
        try:
            for t in range(self.num_steps):
                actions, logprobs = sample(obs, generator)
                next_obs, rewards, terminated, truncated, _ = step(actions)
                # An episode boundary is either flag: the env auto-reset on both.
                add_step(obs, actions, logprobs, rewards, terminated | truncated)
                obs = next_obs
                if self.stop_requested_in_rollout(t):
                    raise SIGTERMException()
        finally:
            self.policy.train(was_training)
        self._obs = obs
