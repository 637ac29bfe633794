"""On-policy data for actor-critic methods (PPO): the seeds' ``rollout.py`` in torch.

The rollout keeps the seed's layout: observations, values and dones are one step longer than the
rewards, so the last step bootstraps from the value of the observation after it. ``dones[:, t]``
says that the observation at t starts a new episode. The source collects one rollout with the
current policy, computes generalized advantages, then yields ``update_epochs x num_minibatches``
shuffled minibatches of ``(env, timestep)`` entries (the seed's ``batches``), each one optimizer
step, before it collects the next rollout.
"""

from __future__ import annotations

import math
import time
from typing import Any, NamedTuple

import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch import Tensor

from rl_lightning._checks import check_float, check_int
from rl_lightning.data.normalization import ObservationNormalizer, Reduce, RewardScaler
from rl_lightning.data.rollout import RolloutTensors
from rl_lightning.data.source import EnvSource
from rl_lightning.envs.base import VectorEnv
from rl_lightning.envs.spaces import as_tree, plain
from rl_lightning.losses import compute_gae
from rl_lightning.nets import ActorCritic


class ActorCriticRolloutTensors(NamedTuple):
    """One rollout of ``num_envs`` envs and ``num_steps`` steps, env-major.

    ``obs``, ``values`` and ``dones`` have ``num_steps + 1`` steps (the seed's layout), the rest
    ``num_steps``. ``terminated[:, t]`` marks the steps that ended an episode by termination
    (``dones[:, t + 1]`` marks every end), ``final_values[:, t]`` is V of the step's
    ``info["final_observation"]``, the bootstrap of a truncated episode.
    """

    obs: Tensor  # (num_envs, num_steps + 1, *obs_shape), what the policy saw (normalised if asked)
    actions: Tensor  # (num_envs, num_steps, *action_shape), as sampled (unclipped)
    logprobs: Tensor  # (num_envs, num_steps)
    values: Tensor  # (num_envs, num_steps + 1)
    rewards: Tensor  # (num_envs, num_steps), as trained on (scaled if asked)
    dones: Tensor  # bool (num_envs, num_steps + 1)
    terminated: Tensor  # bool (num_envs, num_steps)
    final_values: Tensor  # (num_envs, num_steps)


class PPOBatch(NamedTuple):
    """A minibatch of ``(env, timestep)`` entries, each field ``(batch, ...)``."""

    obs: Tensor
    actions: Tensor
    logprobs: Tensor  # at collection
    values: Tensor  # at collection
    advantages: Tensor
    returns: Tensor  # advantages + values: the value targets


def shuffled_minibatches(num_entries: int, batch_size: int, count: int, generator: torch.Generator) -> Tensor:
    """``count`` minibatches of ``batch_size`` entry indices, int64 ``(count, batch_size)``, cut
    from an endless stream of shuffled passes over ``range(num_entries)`` (the seed's ``entries``
    and ``batches``): with ``batch_size * k == num_entries`` every k consecutive minibatches cover
    every entry exactly once."""
    check_int("batch_size", batch_size, 1)
    needed = batch_size * check_int("count", count, 1)
    passes = math.ceil(needed / num_entries)
    device = generator.device
    stream = torch.cat([torch.randperm(num_entries, generator=generator, device=device) for _ in range(passes)])
    return stream[:needed].view(count, batch_size)


class ActorCriticSource(EnvSource):
    """Collects a rollout with ``model``, then yields its shuffled minibatches (``PPOBatch``).

    The dataset's length is ``update_epochs * num_minibatches``: one epoch is one rollout and its
    updates. The next rollout is collected only when its first minibatch is requested, with the
    weights after the last update of the previous one (``minibatch_in_rollout`` says where in its
    rollout the newest minibatch is).

    Args:
        envs: the vector env.
        model: the :class:`~rl_lightning.nets.ActorCritic` that acts and values.
        num_steps: steps per env per rollout.
        update_epochs: passes over the rollout.
        num_minibatches: minibatches per pass (must divide ``num_envs * num_steps``).
        gamma, gae_lambda: discount and GAE lambda.
        seed: seed of the generator for actions and shuffling.
        world_size: processes each running their own source (``env_steps`` counts them all).
        env_steps: env steps already taken (a resumed run).
        obs_normalizer: normalise observations with running statistics (updated per rollout).
        reward_scaler: scale rewards by the running std of the discounted return.
        reduce: sums a tensor over all processes (for the running statistics under DDP).
    """

    def __init__(
        self,
        envs: VectorEnv,
        model: ActorCritic,
        num_steps: int,
        update_epochs: int = 4,
        num_minibatches: int = 4,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        seed: int = 0,
        world_size: int = 1,
        env_steps: int = 0,
        obs_normalizer: ObservationNormalizer | None = None,
        reward_scaler: RewardScaler | None = None,
        reduce: Reduce | None = None,
    ):
        super().__init__(envs, seed=seed, world_size=world_size, env_steps=env_steps)
        self.model = model
        self.num_steps = check_int("num_steps", num_steps, 1)
        self.update_epochs = check_int("update_epochs", update_epochs, 1)
        self.num_minibatches = check_int("num_minibatches", num_minibatches, 1)
        entries = envs.num_envs * num_steps
        if entries % num_minibatches != 0:
            raise ValueError(
                f"num_minibatches ({num_minibatches}) must divide num_envs * num_steps_per_rollout ({entries})"
            )
        self.minibatch_size = entries // num_minibatches
        self.gamma = check_float("gamma", gamma, 0.0, 1.0)
        self.gae_lambda = check_float("gae_lambda", gae_lambda, 0.0, 1.0)
        self.obs_normalizer = obs_normalizer
        self.reward_scaler = reward_scaler
        self.reduce = reduce or (lambda tensor: tensor)
        self.num_rollouts = 0
        #: Index of the newest minibatch among its rollout's ``update_epochs * num_minibatches``
        #: (0: the first of a rollout just collected).
        self.minibatch_in_rollout = -1
        self._entries: dict[str, Tensor] | None = None  # the newest rollout's (env, t) entries
        self._indices: Tensor | None = None  # its minibatches' entry indices
        #: The newest rollout (what training uses) and, for videos, its raw observations.
        self.last_rollout: ActorCriticRolloutTensors | None = None
        self.last_raw_rollout: RolloutTensors | None = None
        #: The newest rollout's advantages.
        self.last_advantages: Tensor | None = None
        self.last_collect_seconds = math.nan
        # Whether the current obs of each env starts an episode (the seed's dones[0]).
        self._starts = torch.ones(envs.num_envs, dtype=torch.bool, device=self.device)
        self._discounted_returns = torch.zeros(envs.num_envs, device=self.device)

    def __len__(self) -> int:
        return self.update_epochs * self.num_minibatches

    def reset_envs(self) -> Tensor:
        self._starts.fill_(True)
        self._discounted_returns.zero_()
        return super().reset_envs()

    @property
    def minibatches_per_rollout(self) -> int:
        return self.update_epochs * self.num_minibatches

    def state_dict(self) -> dict[str, Any]:
        # Mid-rollout (a checkpoint between two of its minibatches) its entries are saved too.
        mid_rollout = 0 <= self.minibatch_in_rollout < self.minibatches_per_rollout - 1
        return {
            **super().state_dict(),
            "num_rollouts": self.num_rollouts,
            "starts": self._starts.clone(),
            "discounted_returns": self._discounted_returns.clone(),
            "minibatch_in_rollout": self.minibatch_in_rollout,
            "entries": {name: plain(field) for name, field in self._entries.items()} if mid_rollout else None,
            "indices": self._indices if mid_rollout else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.num_rollouts = state["num_rollouts"]
        if self.envs.restorable:
            self._starts = state["starts"].to(self.device)
            self._discounted_returns = state["discounted_returns"].to(self.device)
        self.minibatch_in_rollout = state["minibatch_in_rollout"]
        if state["entries"] is None:
            self._entries, self._indices, self.minibatch_in_rollout = None, None, -1
        else:
            self._entries = {name: as_tree(field).to(self.device) for name, field in state["entries"].items()}
            self._indices = state["indices"].to(self.device)

    def next_batch(self) -> PPOBatch:
        if self._entries is None or self.minibatch_in_rollout + 1 >= self.minibatches_per_rollout:
            self._prepare_rollout()
            self.minibatch_in_rollout = 0
        else:
            self.minibatch_in_rollout += 1
        indices = self._indices[self.minibatch_in_rollout]
        return PPOBatch(**{name: field.index_select(0, indices) for name, field in self._entries.items()})

    def _prepare_rollout(self) -> None:
        """Collect a rollout, compute its advantages and shuffle its entries into minibatches."""
        rollout = self.collect()
        advantages = compute_gae(
            rollout.rewards,
            rollout.values,
            rollout.dones,
            self.gamma,
            self.gae_lambda,
            terminated=rollout.terminated,
            final_values=rollout.final_values,
        )
        self.last_advantages = advantages
        self._entries = self._training_entries(rollout, advantages)
        num_entries = len(self._entries["advantages"])
        self._indices = shuffled_minibatches(
            num_entries, self.minibatch_size, self.minibatches_per_rollout, self.generator
        )

    def _training_entries(self, rollout: ActorCriticRolloutTensors, advantages: Tensor) -> dict[str, Tensor]:
        """What minibatches are cut from: one entry per ``(env, t)``."""
        values = rollout.values[:, :-1]
        return {
            "obs": rollout.obs[:, :-1].flatten(0, 1),
            "actions": rollout.actions.flatten(0, 1),
            "logprobs": rollout.logprobs.flatten(),
            "values": values.flatten(),
            "advantages": advantages.flatten(),
            "returns": (advantages + values).flatten(),
        }

    def collect(self) -> ActorCriticRolloutTensors:
        """Step every env ``num_steps`` times with actions sampled from the current policy."""
        snapshot = self.rollout_snapshot()
        start = time.perf_counter()
        self.env_steps_before_batch = self.env_steps
        try:
            steps, starts, last_obs, last_value = self._play()
        except SIGTERMException:  # heard in the middle of the rollout: back to its start
            self.restore_snapshot(snapshot)
            raise
        self.count(self.num_steps)
        self.num_rollouts += 1
        # Stacked outside inference mode: ordinary tensors the loss can feed through autograd.
        fields = list(zip(*steps, strict=True))
        obs, actions, logprobs, values, rewards, terminated, final_obs = (torch.stack(f, dim=1) for f in fields[1:])
        raw_obs = obs if self.obs_normalizer is None else torch.stack(fields[0], dim=1)
        rewards, dones = rewards.float(), torch.stack(starts, dim=1)
        with torch.no_grad():
            # V of every step's final observation in one batched pass; used only where an
            # episode was truncated (elsewhere it is the next value, or the episode terminated).
            normalize = self.obs_normalizer
            final_values = self._final_values(final_obs if normalize is None else normalize(final_obs))
        raw = RolloutTensors(raw_obs, actions, logprobs, rewards, dones[:, 1:])
        self.episodes.update(raw.rewards, raw.dones)  # raw rewards: the real episode returns
        if self.reward_scaler is not None:
            rewards, self._discounted_returns = self.reward_scaler.scale(
                raw.rewards, raw.dones, self._discounted_returns, self.reduce
            )
        if self.obs_normalizer is not None:  # after the rollout: its statistics were fixed during it
            self.obs_normalizer.update(raw_obs, self.reduce)
        self.last_rollout = ActorCriticRolloutTensors(
            torch.cat([obs, last_obs.unsqueeze(1)], dim=1),
            actions,
            logprobs,
            torch.cat([values, last_value.unsqueeze(1)], dim=1),
            rewards,
            dones,
            terminated,
            final_values,
        )
        self.last_raw_rollout = raw
        self.last_collect_seconds = time.perf_counter() - start
        return self.last_rollout

    def _final_values(self, final_obs: Tensor) -> Tensor:
        """V of every step's final observation ``(num_envs, num_steps, *obs_shape)``."""
        return self.model.value(final_obs)

    @torch.inference_mode()
    def _play(self) -> tuple[list[tuple[Tensor, ...]], list[Tensor], Tensor, Tensor]:
        """The per-step tensors of one rollout, the episode-start flags, and the last obs and value."""
        model, step, generator, normalize = self.model, self.envs.step, self.generator, self.obs_normalizer
        raw_obs = self.obs
        starts = [self._starts]
        steps: list[tuple[Tensor, ...]] = []
        was_training = model.training
        model.eval()
        try:
            for t in range(self.num_steps):
                obs = raw_obs if normalize is None else normalize(raw_obs)
                actions, logprobs, values = model.sample(obs, generator)
                next_obs, rewards, terminated, truncated, info = step(actions)
                steps.append((raw_obs, obs, actions, logprobs, values, rewards, terminated, info["final_observation"]))
                starts.append(terminated | truncated)
                raw_obs = next_obs
                if self.stop_requested_in_rollout(t):
                    raise SIGTERMException()
            last_obs = raw_obs if normalize is None else normalize(raw_obs)
            last_value = model.value(last_obs)
        finally:
            model.train(was_training)
        self._obs, self._starts = raw_obs, starts[-1]
        return steps, starts, last_obs, last_value


class RecurrentPPOBatch(NamedTuple):
    """A minibatch of whole env sequences, each field ``(batch_envs, num_steps, ...)``, with the
    recurrent state each sequence started from and where its episodes start."""

    obs: Tensor
    actions: Tensor
    logprobs: Tensor
    values: Tensor
    advantages: Tensor
    returns: Tensor
    states: Tensor  # (num_state, batch_envs, core_size): the state before the rollout's first step
    episode_starts: Tensor  # bool (batch_envs, num_steps): the state is zeroed before these steps


class RecurrentActorCriticSource(ActorCriticSource):
    """``ActorCriticSource`` for a :class:`~rl_lightning.nets.RecurrentActorCritic`: the state is carried
    across env steps (zeroed where an episode starts), the state at every step is kept (the seed's
    ``states``, one step longer than the rewards), and a minibatch is a group of envs with their
    whole sequences, replayed in training from their stored initial state with the same masking,
    so the first update's log-probabilities equal the recorded ones. ``num_minibatches`` must
    divide ``num_envs``."""

    def __init__(self, envs: VectorEnv, model: Any, num_steps: int, num_minibatches: int = 4, **kwargs: Any):
        if envs.num_envs % num_minibatches != 0:
            raise ValueError(
                f"num_minibatches ({num_minibatches}) must divide num_envs ({envs.num_envs}): a recurrent "
                "policy trains on groups of whole env sequences"
            )
        super().__init__(envs, model, num_steps, num_minibatches=num_minibatches, **kwargs)
        self.minibatch_size = envs.num_envs // num_minibatches
        #: The live recurrent state of every env, and the state at every step of the newest rollout.
        self.state = model.initial_state(envs.num_envs, self.device)
        self.last_states: Tensor | None = None  # (num_envs, num_steps + 1, num_state, core_size)

    def reset_envs(self) -> Tensor:
        self.state = self.state.zero_() if self.state is not None else None
        return super().reset_envs()

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "state": self.state.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if self.envs.restorable:
            self.state = state["state"].to(self.device)
        else:
            self.state.zero_()

    @torch.inference_mode()
    def _play(self) -> tuple[list[tuple[Tensor, ...]], list[Tensor], Tensor, Tensor]:
        model, step, generator, normalize = self.model, self.envs.step, self.generator, self.obs_normalizer
        raw_obs, state = self.obs, self.state
        starts = [self._starts]
        states = [state]
        steps: list[tuple[Tensor, ...]] = []
        was_training = model.training
        model.eval()
        try:
            for t in range(self.num_steps):
                obs = raw_obs if normalize is None else normalize(raw_obs)
                actions, logprobs, values, state = model.sample(obs, state, starts[-1], generator)
                next_obs, rewards, terminated, truncated, info = step(actions)
                steps.append((raw_obs, obs, actions, logprobs, values, rewards, terminated, info["final_observation"]))
                starts.append(terminated | truncated)
                states.append(state)
                raw_obs = next_obs
                if self.stop_requested_in_rollout(t):
                    raise SIGTERMException()
            last_obs = raw_obs if normalize is None else normalize(raw_obs)
            last_value = model.value(last_obs, state, starts[-1])
        finally:
            model.train(was_training)
        self._obs, self._starts, self.state = raw_obs, starts[-1], state
        self._step_states = states
        return steps, starts, last_obs, last_value

    def _final_values(self, final_obs: Tensor) -> Tensor:
        # V(final obs of step t) from the state after step t: the episode's memory, not reset.
        states = torch.stack(self._step_states[1:], dim=2)  # (num_state, num_envs, num_steps, core)
        self.last_states = torch.stack(self._step_states, dim=1).transpose(0, 2)  # (envs, steps + 1, state, core)
        num_envs, num_steps = self.envs.num_envs, len(self._step_states) - 1
        flat_states = states.flatten(1, 2)
        no_start = torch.zeros(num_envs * num_steps, dtype=torch.bool, device=self.device)
        values = self.model.value(final_obs.flatten(0, 1), flat_states, no_start)
        return values.view(num_envs, num_steps)

    def _training_entries(self, rollout: ActorCriticRolloutTensors, advantages: Tensor) -> dict[str, Tensor]:
        """One entry per env: its whole sequence, its initial state and where its episodes start."""
        values = rollout.values[:, :-1]
        return {
            "obs": rollout.obs[:, :-1],
            "actions": rollout.actions,
            "logprobs": rollout.logprobs,
            "values": values,
            "advantages": advantages,
            "returns": advantages + values,
            "states": self.last_states[:, 0].transpose(0, 1).contiguous(),  # (num_state, num_envs, core)
            "episode_starts": rollout.dones[:, :-1],
        }

    def next_batch(self) -> RecurrentPPOBatch:
        if self._entries is None or self.minibatch_in_rollout + 1 >= self.minibatches_per_rollout:
            self._prepare_rollout()
            self.minibatch_in_rollout = 0
        else:
            self.minibatch_in_rollout += 1
        indices = self._indices[self.minibatch_in_rollout]
        fields = {name: field.index_select(0, indices) for name, field in self._entries.items() if name != "states"}
        return RecurrentPPOBatch(**fields, states=self._entries["states"].index_select(1, indices))
