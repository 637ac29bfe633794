"""Experience replay for DQN: a preallocated ring buffer and the IterableDataset that fills it.

``ReplayBuffer`` stores ``(s_t, a_t, r_{t+1}, terminated_{t+1}, s_{t+1})`` for a whole batch of
envs per ``add`` into tensors allocated once on one device (O(1) per add, whatever the fill).
``ReplaySource`` owns the envs and the buffer: per item it plays ``steps_per_train`` vectorised
env steps epsilon-greedy with the live Q-network and yields one sampled batch.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn
from torch.utils.data import IterableDataset

from rl_lightning._checks import check_int
from rl_lightning.envs.base import VectorEnv


class ReplayBufferSamples(NamedTuple):
    """A batch of transitions ``(s_t, a_t, r_{t+1}, terminated_{t+1}, s_{t+1})``.

    ``terminated`` is *not* ``done``: a time-limit truncation is not a terminal state, so the TD
    target still bootstraps there.
    """

    obs: Tensor  # float32 (batch, *obs_shape)
    actions: Tensor  # int64 (batch,)
    rewards: Tensor  # float32 (batch,)
    terminated: Tensor  # bool (batch,)
    next_obs: Tensor  # float32 (batch, *obs_shape): the true last obs where an episode ended


_FIELDS = ReplayBufferSamples._fields


class ReplayBuffer:
    """Ring buffer of the newest ``buffer_size`` transitions, preallocated on ``device``.

    Args:
        buffer_size: capacity in transitions.
        obs_shape: shape of one observation, e.g. ``(4,)``.
        num_envs: transitions per ``add`` (one per env); at most ``buffer_size``.
        seed: seed of the private generator used by ``sample``.
        device: where the tensors live.
        action_shape: shape of one action: ``()`` (a discrete action index, stored as int64),
            the only kind the envs have; accepted so that the seeds' keyword call works.
    """

    def __init__(
        self,
        buffer_size: int,
        obs_shape: Sequence[int],
        num_envs: int,
        seed: int = 0,
        device: torch.device | str = "cpu",
        action_shape: Sequence[int] = (),
    ):
        if tuple(action_shape) != ():
            raise ValueError(f"action_shape must be () (one discrete action index per env), got {action_shape!r}")
        check_int("buffer_size", buffer_size, 1)
        check_int("num_envs", num_envs, 1)
        if num_envs > buffer_size:
            raise ValueError(f"num_envs ({num_envs}) must be <= buffer_size ({buffer_size})")
        self.buffer_size = buffer_size
        self.obs_shape = tuple(int(size) for size in obs_shape)
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self._specs = {
            "obs": (self.obs_shape, torch.float32),
            "actions": ((), torch.int64),
            "rewards": ((), torch.float32),
            "terminated": ((), torch.bool),
            "next_obs": (self.obs_shape, torch.float32),
        }
        # Allocated once; ``add`` writes rows in place. Slots ``[size:]`` hold zeros until filled.
        self.obs = torch.zeros((buffer_size, *self.obs_shape), dtype=torch.float32, device=self.device)
        self.actions = torch.zeros(buffer_size, dtype=torch.int64, device=self.device)
        self.rewards = torch.zeros(buffer_size, dtype=torch.float32, device=self.device)
        self.terminated = torch.zeros(buffer_size, dtype=torch.bool, device=self.device)
        self.next_obs = torch.zeros((buffer_size, *self.obs_shape), dtype=torch.float32, device=self.device)
        self._storage = {name: getattr(self, name) for name in _FIELDS}
        # Host-side ints: the ring position never needs a device sync.
        self.pos = 0  # where the next transition goes
        self.size = 0  # how many slots hold data

    def __len__(self) -> int:
        return self.size

    @property
    def nbytes(self) -> int:
        """Bytes held by the storage tensors (all ``buffer_size`` slots)."""
        return sum(t.nbytes for t in self._storage.values())

    @property
    def bytes_per_transition(self) -> int:
        return self.nbytes // self.buffer_size

    def add(self, obs: Tensor, actions: Tensor, rewards: Tensor, terminated: Tensor, next_obs: Tensor) -> None:
        """Write one transition per env, overwriting the oldest when full.

        Args:
            obs: float32 ``(num_envs, *obs_shape)``, s_t.
            actions: int64 ``(num_envs,)``, a_t.
            rewards: float32 ``(num_envs,)``, r_{t+1}.
            terminated: bool ``(num_envs,)``, whether s_{t+1} is terminal (not truncated).
            next_obs: float32 ``(num_envs, *obs_shape)``, s_{t+1}: the true final obs for envs that
                just finished (``info["final_observation"]``), not the auto-reset one.
        """
        values = (obs, actions, rewards, terminated, next_obs)
        # Checked field by field: a silent dtype promotion (int rewards, float actions) or a
        # missing env dimension would otherwise corrupt the buffer without an error.
        for name, value in zip(_FIELDS, values, strict=True):
            shape, dtype = self._specs[name]
            if not isinstance(value, Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
            if value.shape != (self.num_envs, *shape):
                raise ValueError(f"{name} must have shape {(self.num_envs, *shape)}, got {tuple(value.shape)}")
            if value.dtype != dtype:
                raise TypeError(f"{name} must have dtype {dtype}, got {value.dtype}")
        start, end = self.pos, self.pos + self.num_envs
        first = min(end, self.buffer_size) - start  # rows that fit before the ring wraps
        for name, value in zip(_FIELDS, values, strict=True):
            storage = self._storage[name]
            storage[start : start + first] = value[:first]
            if first < self.num_envs:
                storage[: self.num_envs - first] = value[first:]
        self.pos = end % self.buffer_size
        self.size = min(self.size + self.num_envs, self.buffer_size)

    def sample(self, batch_size: int) -> ReplayBufferSamples:
        """``batch_size`` transitions drawn uniformly with replacement from the filled part."""
        if self.size == 0:
            raise RuntimeError("cannot sample from an empty ReplayBuffer: add transitions first")
        indices = torch.randint(0, self.size, (batch_size,), generator=self.generator, device=self.device)
        # index_select is ~2x faster than advanced indexing (tensor[indices]) for row gathers on CPU.
        return ReplayBufferSamples(*(self._storage[name].index_select(0, indices) for name in _FIELDS))

    def state_dict(self) -> dict[str, Any]:
        """Contents (filled slots only), ring position, fill count and generator state."""
        state: dict[str, Any] = {name: self._storage[name][: self.size].clone() for name in _FIELDS}
        state.update(pos=self.pos, size=self.size, buffer_size=self.buffer_size)
        state["generator"] = self.generator.get_state()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved (the buffer must have the same size)."""
        if state["buffer_size"] != self.buffer_size:
            raise ValueError(
                f"state_dict is from a buffer of size {state['buffer_size']}, this one has {self.buffer_size}"
            )
        size = int(state["size"])
        for name in _FIELDS:
            self._storage[name][:size] = state[name].to(self.device)
        self.pos, self.size = int(state["pos"]), size
        self.generator.set_state(state["generator"])


def epsilon_greedy(q_values: Tensor, epsilon: float, generator: torch.Generator | None = None) -> Tensor:
    """Per row: argmax Q with probability 1 - epsilon, else a uniformly random action.

    Args:
        q_values: ``(num_envs, num_actions)``.
        epsilon: probability of a random action, in [0, 1].
        generator: source of the exploration draws (torch's global RNG if None).

    Returns:
        int64 ``(num_envs,)``.
    """
    greedy = q_values.argmax(dim=-1)
    if epsilon <= 0.0:
        return greedy
    num_envs, num_actions = q_values.shape
    explore = torch.rand(num_envs, generator=generator, device=q_values.device) < epsilon
    random_actions = torch.randint(0, num_actions, (num_envs,), generator=generator, device=q_values.device)
    return torch.where(explore, random_actions, greedy)


class ReplaySource(IterableDataset):
    """Envs + replay buffer as a torch ``IterableDataset`` of ``ReplayBufferSamples``.

    Iterating first fills the buffer with random actions until ``env_steps >= learning_starts``
    (:meth:`fill`), then each item plays ``steps_per_train`` vectorised env steps epsilon-greedy
    with the live ``q_network`` (:meth:`collect`) and yields one batch sampled from the buffer.
    ``len(source)`` is the number of items per epoch: with a length, Lightning does not prefetch,
    so the env steps of training step k use the network after update k-1.

    Args:
        envs: the vector env (its device is the buffer's device).
        buffer: the replay buffer (``num_envs`` matching ``envs``).
        q_network: maps obs ``(num_envs, *obs_shape)`` to Q-values ``(num_envs, num_actions)``.
        batch_size: transitions per sampled batch.
        learning_starts: env steps of random play before the first batch.
        steps_per_train: vectorised env steps per yielded batch.
        num_batches: items per epoch (``len``).
        seed: seed of the exploration generator.
        epsilon: initial exploration rate (the owner updates ``source.epsilon``).
        world_size: number of processes each running their own source; ``env_steps`` counts
            every process's steps (``num_envs * world_size`` per vectorised step).
        env_steps: env steps already taken (when resuming).
    """

    def __init__(
        self,
        envs: VectorEnv,
        buffer: ReplayBuffer,
        q_network: nn.Module,
        batch_size: int,
        learning_starts: int,
        steps_per_train: int,
        num_batches: int,
        seed: int = 0,
        epsilon: float = 1.0,
        world_size: int = 1,
        env_steps: int = 0,
    ):
        super().__init__()
        if buffer.num_envs != envs.num_envs:
            raise ValueError(f"buffer.num_envs ({buffer.num_envs}) must equal envs.num_envs ({envs.num_envs})")
        check_int("batch_size", batch_size, 1)
        check_int("learning_starts", learning_starts, 0)
        check_int("steps_per_train", steps_per_train, 1)
        check_int("num_batches", num_batches, 1)
        check_int("world_size", world_size, 1)
        self.envs = envs
        self.buffer = buffer
        self.q_network = q_network
        self.batch_size = batch_size
        self.learning_starts = learning_starts
        self.steps_per_train = steps_per_train
        self.num_batches = num_batches
        self.epsilon = float(epsilon)
        self.world_size = world_size
        self.env_steps = env_steps
        self.device = envs.device
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self._obs: Tensor | None = None  # envs are reset on the first step, not at construction
        num_envs = envs.num_envs
        self._episode_returns = torch.zeros(num_envs, device=self.device)
        self._episode_lengths = torch.zeros(num_envs, device=self.device)
        # sum of returns, sum of lengths, count of episodes completed since the last pop
        self._completed = torch.zeros(3, device=self.device)

    def __len__(self) -> int:
        return self.num_batches

    def __iter__(self) -> Iterator[ReplayBufferSamples]:
        for _ in range(self.num_batches):
            yield self.next_batch()

    def state_dict(self, include_buffer: bool = True) -> dict[str, Any]:
        """Envs, RNG, counters, the current obs and (optionally) the buffer's contents."""
        return {
            "envs": self.envs.state_dict(),
            "generator": self.generator.get_state(),
            "env_steps": self.env_steps,
            "obs": None if self._obs is None else self._obs.clone(),
            "episode_returns": self._episode_returns.clone(),
            "episode_lengths": self._episode_lengths.clone(),
            "completed": self._completed.clone(),
            "buffer": self.buffer.state_dict() if include_buffer else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict`; without a saved buffer the buffer stays as it is."""
        device = self.device
        self.envs.load_state_dict(state["envs"])
        self.generator.set_state(state["generator"])
        self.env_steps = state["env_steps"]
        self._obs = None if state["obs"] is None else state["obs"].to(device)
        self._episode_returns = state["episode_returns"].to(device)
        self._episode_lengths = state["episode_lengths"].to(device)
        self._completed = state["completed"].to(device)
        if state["buffer"] is not None:
            self.buffer.load_state_dict(state["buffer"])

    def next_batch(self) -> ReplayBufferSamples:
        """Fill if needed, play ``steps_per_train`` epsilon-greedy steps, sample a batch."""
        self.fill()
        self.collect(self.steps_per_train)
        return self.buffer.sample(self.batch_size)

    def fill(self) -> None:
        """Random actions until ``env_steps >= learning_starts`` (nothing once it is). An empty
        buffer past that point (a run resumed without its buffer) is refilled the same way."""
        done_already = self.env_steps if self.buffer.size > 0 else 0
        missing = self.learning_starts - done_already
        if missing > 0:
            self._play(math.ceil(missing / (self.envs.num_envs * self.world_size)), random_actions=True)

    @torch.no_grad()
    def collect(self, num_steps: int) -> None:
        """``num_steps`` vectorised env steps epsilon-greedy with ``q_network`` into the buffer."""
        self._play(num_steps, random_actions=False)

    def pop_episode_stats(self) -> Tensor:
        """``[sum of returns, sum of lengths, count]`` of episodes completed since the last pop."""
        stats = self._completed.clone()
        self._completed.zero_()
        return stats

    def _play(self, num_steps: int, random_actions: bool) -> None:
        envs = self.envs
        if self._obs is None:
            self._obs, _ = envs.reset()
        obs = self._obs
        for _ in range(num_steps):
            if random_actions:
                actions = torch.randint(
                    0, envs.num_actions, (envs.num_envs,), generator=self.generator, device=self.device
                )
            else:
                actions = epsilon_greedy(self.q_network(obs), self.epsilon, self.generator)
            next_obs, rewards, terminated, truncated, info = envs.step(actions)
            # For an env that just finished, next_obs is the first obs of its next episode; the
            # transition must end in the obs the episode really reached, which the env contract
            # puts in info["final_observation"] for every env (equal to next_obs where no reset).
            self.buffer.add(obs, actions, rewards, terminated, info["final_observation"])
            self._track_episodes(rewards, terminated | truncated)
            obs = next_obs
        self._obs = obs
        self.env_steps += num_steps * envs.num_envs * self.world_size

    def _track_episodes(self, rewards: Tensor, done: Tensor) -> None:
        self._episode_returns += rewards
        self._episode_lengths += 1
        done_f = done.float()
        completed = torch.stack([self._episode_returns @ done_f, self._episode_lengths @ done_f, done_f.sum()])
        self._completed += completed
        keep = 1.0 - done_f
        self._episode_returns *= keep
        self._episode_lengths *= keep
