"""Hindsight experience replay (Andrychowicz et al. 2017): goal-conditioned transitions relabelled at sample time.

A goal-conditioned env gives Dict observations with the keys ``"achieved_goal"`` (what the state reached) and
``"desired_goal"`` (what the episode asks for), besides ``"observation"`` (gymnasium-robotics' convention; the
gymnasium adapter keeps a Dict's keys), and computes the reward of any batch of goals: ``compute_reward(achieved_goal,
desired_goal, info)``, and, where the goal decides termination, ``compute_terminated(achieved_goal, desired_goal,
info)`` (:func:`goal_functions`). ``info`` is passed as None: the buffer keeps no infos.

:class:`HindsightReplayBuffer` stores transitions as :class:`~rl_lightning.data.replay_buffer.ReplayBuffer` does, plus
the episode each belongs to. Of every sampled batch, the first ``batch_size * k // (k + 1)`` transitions get a new
desired goal (SB3's ``n_sampled_goal = k``: k relabelled per real one), the ``next_obs["achieved_goal"]`` of a
transition of the same episode:

- ``"future"``: one at or after the transition itself, uniformly (the current one included, as in SB3);
- ``"final"``: the episode's last;
- ``"episode"``: any of the episode's still held.

Their reward becomes ``compute_reward(next_obs["achieved_goal"], new goal)`` and, with ``compute_terminated``, their
``terminated`` too (an env without it keeps the stored one: right where the goal does not end an episode, as in
gymnasium-robotics' Fetch tasks). An episode still running counts up to its newest transition; one whose oldest
transitions the ring has overwritten counts from its oldest held.

Bookkeeping: the transitions of one ``add`` sit at slots ``(t * num_envs + e) % buffer_size`` (``t``: the add's count,
``e``: the env), so a slot's ``t`` and ``e`` follow from the count of adds. Each slot keeps the ``t`` its episode
started at; an episode's end is the last ``t`` of its env with that start, found by bisection (start counts rise with
``t``), so nothing is rewritten when an episode ends and an overwritten episode needs no care.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from rl_lightning._checks import SettingsError, check_choice, check_int
from rl_lightning.data.replay_buffer import ReplayBuffer, ReplayBufferSamples, lazy_zeros
from rl_lightning.envs.base import VectorEnv

#: The keys of a goal-conditioned observation that relabelling reads and writes.
ACHIEVED_GOAL_KEY, DESIRED_GOAL_KEY = "achieved_goal", "desired_goal"
#: How a relabelled goal is chosen (module docstring).
STRATEGIES = ("future", "final", "episode")


@dataclass(frozen=True)
class HERSettings:
    """Hindsight relabelling of the replay buffer (``her=`` of the off-policy modules; ``rl_lightning.data.her``).

    Args:
        strategy: where a new goal comes from: ``"future"`` (a transition at or after the sampled one in its
            episode), ``"final"`` (its episode's last) or ``"episode"`` (any of its episode's).
        k: relabelled transitions per real one: ``k / (k + 1)`` of each batch gets a new goal (SB3's
            ``n_sampled_goal``).
    """

    strategy: str = "future"
    k: int = 4

    def __post_init__(self) -> None:
        check_choice("her.strategy", self.strategy, STRATEGIES)
        check_int("her.k", self.k, 1)

    @classmethod
    def of(cls, value: Any) -> HERSettings | None:
        """``value`` (a ``HERSettings``, a dict of its fields, or None) as settings; anything else is a
        ``TypeError``, an unknown field a ``ValueError`` naming the fields."""
        if value is None or isinstance(value, HERSettings):
            return value
        if type(value).__name__ == "Namespace" and hasattr(value, "as_dict"):  # from the command line
            value = value.as_dict()
        if not isinstance(value, Mapping):
            raise TypeError(
                f"her must be None, a HERSettings or a dict such as {{'strategy': 'future', 'k': 4}}, got "
                f"{type(value).__name__} {value!r}"
            )
        unknown = sorted(set(value) - {"strategy", "k"})
        if unknown:
            raise ValueError(f"her has unknown field(s) {unknown}: its fields are 'strategy' and 'k'")
        return cls(**value)

    def as_dict(self) -> dict[str, Any]:
        """Plain values (hyper-parameters, checkpoints, the Hub's config)."""
        return asdict(self)


def check_her_settings(n_step: int, frame_replay: bool | None, prioritized: bool) -> None:
    """The replay settings hindsight relabelling (``her``) cannot work with, refused with what to change."""
    if n_step != 1:
        raise ValueError(
            f"her relabels one-step transitions: n_step={n_step} would need every reward of an n-step sum "
            "recomputed for each new goal; use n_step=1 with her"
        )
    if frame_replay:
        raise ValueError(
            "her with frame_replay=True: goal-conditioned observations are Dicts of vectors, not frame stacks; "
            "use frame_replay=None (or False)"
        )
    if prioritized:
        raise ValueError(
            "her with prioritized=True is not supported: a relabelled transition's TD error belongs to its new "
            "goal, not to the slot's priority; use prioritized=False with her"
        )


class GoalFunctions(NamedTuple):
    """A goal-conditioned env's reward (float32 ``(batch,)``) and termination (bool ``(batch,)``, None: the env's
    termination does not depend on the goal) of ``(batch, *goal_shape)`` achieved and desired goals."""

    compute_reward: Callable[[Tensor, Tensor], Tensor]
    compute_terminated: Callable[[Tensor, Tensor], Tensor] | None


def check_goal_space(space: gym.Space, env_id: str) -> None:
    """A ``ValueError`` unless ``space`` (our form: a Dict with flat keys) has ``"achieved_goal"`` and
    ``"desired_goal"`` keys of one shape."""
    keys = sorted(space.spaces) if isinstance(space, gym.spaces.Dict) else None
    if keys is None or ACHIEVED_GOAL_KEY not in keys or DESIRED_GOAL_KEY not in keys:
        got = f"a Dict with keys {keys}" if keys is not None else f"{type(space).__name__} observations"
        raise ValueError(
            f"her needs a goal-conditioned env: Dict observations with the keys 'observation', 'achieved_goal' and "
            f"'desired_goal' (gymnasium-robotics' convention) and a compute_reward; {env_id!r} gives {got}: use "
            "her=None"
        )
    achieved, desired = space[ACHIEVED_GOAL_KEY], space[DESIRED_GOAL_KEY]
    if achieved.shape != desired.shape or achieved.dtype != desired.dtype:
        raise ValueError(
            f"her: {env_id!r}'s 'achieved_goal' {achieved!r} and 'desired_goal' {desired!r} must have one shape "
            "and dtype (a relabelled desired goal is an achieved one)"
        )


def goal_functions(envs: VectorEnv) -> GoalFunctions:
    """``envs``' :class:`GoalFunctions`: a native env's own ``compute_reward`` / ``compute_terminated`` (torch), or
    those of the unwrapped env of gymnasium's sync vector env behind the adapter (numpy, vectorised, as
    gymnasium-robotics' envs have them: a wrapper that changes the goals' values is not seen by it); anything else is a
    ``SettingsError`` saying what is needed."""
    name = getattr(envs, "env_id", type(envs).__name__)
    check_goal_space(envs.single_observation_space, name)
    if callable(getattr(envs, "compute_reward", None)):  # a native env: torch in, torch out
        terminated = getattr(envs, "compute_terminated", None)
        return GoalFunctions(
            lambda achieved, desired: envs.compute_reward(achieved, desired, None),
            None if not callable(terminated) else lambda achieved, desired: terminated(achieved, desired, None),
        )
    gymnasium_envs = getattr(envs, "gymnasium_envs", None)
    copies = getattr(gymnasium_envs, "envs", None)  # gymnasium's SyncVectorEnv holds its envs in this process
    if gymnasium_envs is not None and not copies:
        raise SettingsError(
            f"her with {name!r}: the env's compute_reward is called in this process, which gymnasium's async vector "
            "env (subprocesses) does not allow: use env_kwargs={'vectorization_mode': 'sync'}"
        )
    env = copies[0].unwrapped if copies else None
    if env is None or not callable(getattr(env, "compute_reward", None)):
        raise SettingsError(
            f"her needs the env's compute_reward(achieved_goal, desired_goal, info) to recompute rewards of "
            f"relabelled goals: {name!r} ({type(envs).__name__}) has none (a native env defines it in torch; a "
            "gymnasium env through the adapter, env_backend='gymnasium', on its unwrapped env, as gymnasium-robotics' "
            "do): use her=None"
        )
    return GoalFunctions(
        _numpy_goal_function(env.compute_reward, np.float32),
        _numpy_goal_function(env.compute_terminated, np.bool_)
        if callable(getattr(env, "compute_terminated", None))
        else None,
    )


def _numpy_goal_function(function: Callable[..., Any], dtype: Any) -> Callable[[Tensor, Tensor], Tensor]:
    """``function(achieved, desired, None)`` of a gymnasium env (numpy, batched) as a torch function: the values
    broadcast to ``(batch,)`` (Fetch's ``compute_terminated`` gives one ``False``) of ``dtype``."""

    def call(achieved: Tensor, desired: Tensor) -> Tensor:
        values = function(achieved.cpu().numpy(), desired.cpu().numpy(), None)
        values = np.broadcast_to(np.asarray(values, dtype=dtype), achieved.shape[:1])
        return torch.from_numpy(values.copy()).to(achieved.device)

    return call


class HindsightReplayBuffer(ReplayBuffer):
    """:class:`~rl_lightning.data.replay_buffer.ReplayBuffer` of goal-conditioned transitions whose samples are
    relabelled with hindsight goals (module docstring). ``add`` needs ``dones`` (they end the episodes).

    Args:
        buffer_size, obs_shape, num_envs, seed, device, action_shape, obs_dtype, gamma: ``ReplayBuffer``'s
            (``obs_shape``: a dict with ``"achieved_goal"`` and ``"desired_goal"`` keys of one shape).
        n_step: 1 only (an n-step sum would need every reward of its chain recomputed).
        her: the strategy and ``k`` (:class:`HERSettings`).
        goals: the env's reward (and termination) of goals (:func:`goal_functions`).
    """

    def __init__(
        self,
        buffer_size: int,
        obs_shape: dict[str, Sequence[int]],
        num_envs: int,
        seed: int = 0,
        device: torch.device | str = "cpu",
        action_shape: Sequence[int] = (),
        obs_dtype: dict[str, torch.dtype] | torch.dtype = torch.float32,
        n_step: int = 1,
        gamma: float = 0.99,
        *,
        her: HERSettings,
        goals: GoalFunctions,
    ):
        check_her_settings(n_step, frame_replay=False, prioritized=False)
        if not isinstance(obs_shape, dict) or not {ACHIEVED_GOAL_KEY, DESIRED_GOAL_KEY} <= set(obs_shape):
            raise ValueError(
                f"a HindsightReplayBuffer needs dict observations with 'achieved_goal' and 'desired_goal' keys, got "
                f"obs_shape {obs_shape!r}"
            )
        super().__init__(buffer_size, obs_shape, num_envs, seed, device, action_shape, obs_dtype, n_step, gamma)
        self.her = her
        self.goals = goals
        # Each slot's episode's first add (t); each env's current episode's first add; adds so far (host int).
        self.episode_starts = lazy_zeros((buffer_size,), torch.int64, self.device)
        self._current_starts = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        self.adds = 0
        # Halvings that narrow [t, newest add] (at most buffer_size / num_envs + 1 adds) to one add.
        self._bisections = max(1, (buffer_size // num_envs + 2).bit_length())

    @classmethod
    def for_env(  # type: ignore[override]
        cls, envs: VectorEnv, buffer_size: int, seed: int = 0, n_step: int = 1, gamma: float = 0.99, **options: Any
    ) -> HindsightReplayBuffer:
        """A buffer for ``envs`` (``ReplayBuffer.for_env``), its goals' reward from ``envs`` (:func:`goal_functions`);
        ``options``: ``her``."""
        return super().for_env(envs, buffer_size, seed, n_step, gamma, goals=goal_functions(envs), **options)

    @staticmethod
    def bytes_needed(
        buffer_size: int,
        obs_shape: Sequence[int] | dict[str, Sequence[int]],
        num_envs: int,
        action_shape: Sequence[int] = (),
        obs_dtype: torch.dtype | dict[str, torch.dtype] = torch.float32,
        n_step: int = 1,
    ) -> int:
        """``ReplayBuffer.bytes_needed`` plus each slot's episode start (int64)."""
        return ReplayBuffer.bytes_needed(buffer_size, obs_shape, num_envs, action_shape, obs_dtype, n_step) + (
            8 * buffer_size
        )

    @property
    def nbytes(self) -> int:
        return super().nbytes + self.episode_starts.nbytes

    def add(
        self,
        obs: Tensor,
        actions: Tensor,
        rewards: Tensor,
        terminated: Tensor,
        next_obs: Tensor,
        dones: Tensor | None = None,
    ) -> None:
        """``ReplayBuffer.add``; ``dones`` (bool ``(num_envs,)``, terminated or truncated) are required: they end
        the episodes."""
        if dones is None:
            raise ValueError("a HindsightReplayBuffer needs dones (terminated | truncated) in add: they end episodes")
        self._check_field("dones", dones, (), torch.bool)
        slots = (self.pos + torch.arange(self.num_envs, device=self.device)) % self.buffer_size
        super().add(obs, actions, rewards, terminated, next_obs, dones)
        self.episode_starts[slots] = self._current_starts
        self.adds += 1
        self._current_starts = torch.where(dones, self.adds, self._current_starts)

    # -- sampling -----------------------------------------------------------------------------------------

    def num_relabelled(self, batch_size: int) -> int:
        """The transitions of a batch of ``batch_size`` that get a new goal: ``batch_size * k // (k + 1)``."""
        return batch_size * self.her.k // (self.her.k + 1)

    def _slot(self, t: Tensor, env: Tensor) -> Tensor:
        return (t * self.num_envs + env) % self.buffer_size

    def goal_slots(self, slots: Tensor) -> Tensor:
        """For the transitions in ``slots`` (int64 ``(batch,)``, filled), the slots of the transitions whose next
        achieved goal becomes their new goal (``her.strategy``; draws from the buffer's generator)."""
        written = self.adds * self.num_envs  # transitions ever written: the newest is number written - 1
        index = written - 1 - (written - 1 - slots) % self.buffer_size  # each slot's transition's number
        t, env = index // self.num_envs, index % self.num_envs
        start = self.episode_starts.index_select(0, slots)
        # The episode's last held add: the last t of this env whose slot has the same start (bisection).
        low, high = t, torch.full_like(t, self.adds - 1)
        for _ in range(self._bisections):
            middle = (low + high + 1) // 2
            same = self.episode_starts.index_select(0, self._slot(middle, env)) == start
            low, high = torch.where(same, middle, low), torch.where(same, high, middle - 1)
        end = low
        strategy = self.her.strategy
        if strategy == "final":
            return self._slot(end, env)
        if strategy == "future":
            first = t
        else:  # "episode": from its oldest transition still held (the ring may have overwritten older ones)
            oldest = (written - self.size - env + self.num_envs - 1) // self.num_envs
            first = torch.maximum(start, oldest)
        uniform = torch.rand(len(slots), generator=self.generator, device=self.device)
        offsets = (uniform * (end - first + 1)).long().clamp_(max=end - first)  # uniform in [0, end - first]
        return self._slot(first + offsets, env)

    def _samples_at(self, slots: Tensor) -> ReplayBufferSamples:
        """``ReplayBuffer``'s samples, the first :meth:`num_relabelled` with hindsight goals, rewards and (where the
        env has ``compute_terminated``) terminations."""
        samples = super()._samples_at(slots)
        count = self.num_relabelled(len(slots))
        if count == 0:
            return samples
        goals = self.next_obs[ACHIEVED_GOAL_KEY].index_select(0, self.goal_slots(slots[:count]))
        obs, next_obs = samples.obs, samples.next_obs  # fresh tensors (index_select): written in place
        obs[DESIRED_GOAL_KEY][:count] = goals
        next_obs[DESIRED_GOAL_KEY][:count] = goals
        achieved = next_obs[ACHIEVED_GOAL_KEY][:count]
        rewards, terminated = samples.rewards, samples.terminated
        rewards[:count] = self.goals.compute_reward(achieved, goals).to(rewards.dtype)
        if self.goals.compute_terminated is not None:
            terminated[:count] = self.goals.compute_terminated(achieved, goals).to(torch.bool)
        return samples

    # -- checkpoints --------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """``ReplayBuffer.state_dict`` plus the episode bookkeeping."""
        state = super().state_dict()
        state["her"] = {
            "episode_starts": self.episode_starts[: self.size].clone(),
            "current_starts": self._current_starts.clone(),
            "adds": self.adds,
        }
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` (one without the bookkeeping, a buffer saved without ``her``, is refused)."""
        if "her" not in state:
            raise SettingsError(
                "state_dict lacks the episode bookkeeping of hindsight relabelling: it is from a buffer without her"
            )
        super().load_state_dict(state)
        her = state["her"]
        self.episode_starts[: self.size] = her["episode_starts"].to(self.device)
        self._current_starts = her["current_starts"].to(self.device).clone()
        self.adds = int(her["adds"])


def describe(her: HERSettings) -> str:
    """``"hindsight goals: future, k=4"`` (the buffer's log line)."""
    return f"hindsight goals: {her.strategy}, k={her.k} ({math.floor(100 * her.k / (her.k + 1))}% relabelled)"
