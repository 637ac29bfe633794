"""The replay ring buffer of the off-policy algorithms: ``ReplayBuffer`` and its samples, and what every
replay buffer shares (``rl_lightning.data.frame_replay``, ``rl_lightning.data.prioritized``): the check of its
settings, storage whose CPU pages are touched only when written, and ``ReplayBufferBase``, the slot ring's
``add`` checks and sampling.

``ReplayBuffer`` stores ``(s_t, a_t, r_{t+1}, terminated_{t+1}, s_{t+1})`` for a whole batch of
envs per ``add`` into tensors allocated once on one device (O(1) per add, whatever the fill), and
samples one-step or n-step transitions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor

from rl_lightning._checks import SettingsError, check_float, check_int, check_seed, check_sizes
from rl_lightning.envs.base import VectorEnv, resolve_device
from rl_lightning.envs.spaces import TensorTree, as_tree, plain
from rl_lightning.losses import compute_n_step_returns


def lazy_zeros(shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> Tensor:
    """``torch.zeros(shape, dtype=dtype, device=device)`` whose CPU pages are only touched when written:
    ``torch.zeros`` writes every byte at once, so a 1M-transition Atari buffer would hold all its ~7 GiB
    resident from the first step. On the CPU the memory comes from numpy's ``calloc`` (zero pages from
    the OS, mapped in as rows are written); other devices and numpy-less dtypes use ``torch.zeros``."""
    if device.type == "cpu":
        try:
            np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
        except TypeError:  # bfloat16 and the like: numpy has no such dtype
            pass
        else:
            return torch.from_numpy(np.zeros(tuple(shape), dtype=np_dtype))
    return torch.zeros(tuple(shape), dtype=dtype, device=device)


def check_buffer_settings(buffer_size: int, num_envs: int, n_step: int, gamma: float) -> None:
    """The one check of a replay buffer's settings (``ReplayBuffer`` and ``OffPolicyModule`` take them):
    ``buffer_size`` transitions hold a step of every env and an n-step sample's chain."""
    check_int("num_envs", num_envs, 1)
    check_int("buffer_size", buffer_size, 1)
    if num_envs > buffer_size:
        raise ValueError(f"buffer_size ({buffer_size}) must hold a step of every env: >= num_envs ({num_envs})")
    check_int("n_step", n_step, 1)
    check_float("gamma", gamma, 0.0, 1.0)
    if (n_step - 1) * num_envs >= buffer_size:
        raise ValueError(
            f"buffer_size ({buffer_size}) must hold more than (n_step - 1) * num_envs = {(n_step - 1) * num_envs} "
            "transitions: an n-step sample needs its chain in the buffer"
        )


def action_dtype(action_shape: Sequence[int]) -> torch.dtype:
    """The dtype a buffer stores actions in: int64 for a discrete action index (shape ``()``), float32 for a
    ``Box`` action."""
    return torch.int64 if tuple(action_shape) == () else torch.float32


def action_bytes(action_shape: Sequence[int]) -> int:
    """The bytes of one stored action (:func:`action_dtype`)."""
    return math.prod(action_shape) * action_dtype(action_shape).itemsize


class ReplayBufferSamples(NamedTuple):
    """A batch of transitions ``(s_t, a_t, r_{t+1}, terminated_{t+1}, s_{t+1})``.

    ``terminated`` is *not* ``done``: a time-limit truncation is not a terminal state, so the TD
    target still bootstraps there. With n-step returns, ``rewards`` is the discounted sum of up to
    n rewards (cut where the episode ended), ``next_obs`` and ``terminated`` are those of the last
    step summed, and ``discounts`` is gamma^(steps summed), the factor of the bootstrap.

    A prioritized buffer's samples also carry their importance ``weights`` (for the loss) and the
    ``indices`` of their slots (for ``update_priorities``); a uniform buffer's leave both None.
    """

    obs: Tensor  # (batch, *obs_shape), the env's obs dtype (float32, or uint8 images)
    actions: Tensor  # int64 (batch,) for Discrete actions, float32 (batch, *action_shape) for Box
    rewards: Tensor  # float32 (batch,)
    terminated: Tensor  # bool (batch,)
    next_obs: Tensor  # (batch, *obs_shape): the true last obs where an episode ended
    discounts: Tensor | None = None  # float32 (batch,) gamma^k for n-step samples; None: one step (gamma)
    weights: Tensor | None = None  # float32 (batch,) importance weights in (0, 1] (prioritized); None: uniform
    indices: Tensor | None = None  # int64 (batch,) the samples' slots (prioritized); None: uniform


_FIELDS = ReplayBufferSamples._fields[:5]


class ReplayBufferBase:
    """What every replay buffer shares (``ReplayBuffer``, ``FrameStackReplayBuffer`` and their prioritized
    subclasses): its settings, checked here once; ``add``'s check of every argument against ``_specs``; and the
    sampling of the slot ring, where the transitions of one ``add`` (one per env) sit ``num_envs`` slots after
    those of the previous one, so that an env's next transition is ``num_envs`` slots on (an n-step chain).

    A subclass stores the transitions: it sets ``_specs`` (:meth:`_field_specs`), holds ``rewards`` (float32, a
    slot each), ``size``, ``pos`` and ``nbytes``, and defines :meth:`_write` and :meth:`_samples_at`.
    """

    rewards: Tensor
    size: int  # how many slots hold data
    pos: int  # where the next transition goes
    nbytes: int  # bytes held by the storage tensors
    #: The shape (per env) and dtype of each of ``add``'s arguments, in their order; ``dones`` where it is needed.
    _specs: dict[str, tuple[Any, Any]]
    #: ``add``'s error without the ``dones`` the buffer needs (``{n_step}``: the buffer's).
    _dones_needed = "a buffer with n_step={n_step} needs dones (terminated | truncated) in add"

    def __init__(
        self,
        buffer_size: int,
        num_envs: int,
        seed: int,
        device: torch.device | str,
        action_shape: Sequence[int],
        n_step: int,
        gamma: float,
    ):
        check_buffer_settings(buffer_size, num_envs, n_step, gamma)
        self.n_step, self.gamma, self.buffer_size, self.num_envs = n_step, gamma, buffer_size, num_envs
        self.action_shape = check_sizes("action_shape", tuple(action_shape))
        self.device = resolve_device(device)
        self.generator = torch.Generator(device=self.device).manual_seed(check_seed("seed", seed))

    def _field_specs(self, obs_shape: Any, obs_dtype: Any, dones: bool) -> dict[str, tuple[Any, Any]]:
        """``_specs`` for observations of ``obs_shape`` and ``obs_dtype`` (dicts of them for a Dict observation),
        with ``dones`` where the buffer needs them."""
        specs: dict[str, tuple[Any, Any]] = {
            "obs": (obs_shape, obs_dtype),
            "actions": (self.action_shape, action_dtype(self.action_shape)),
            "rewards": ((), torch.float32),
            "terminated": ((), torch.bool),
            "next_obs": (obs_shape, obs_dtype),
        }
        if dones:
            specs["dones"] = ((), torch.bool)
        return specs

    def __len__(self) -> int:
        return self.size

    @property
    def bytes_per_transition(self) -> int:
        return self.nbytes // self.buffer_size

    def add(
        self,
        obs: Tensor,
        actions: Tensor,
        rewards: Tensor,
        terminated: Tensor,
        next_obs: Tensor,
        dones: Tensor | None = None,
    ) -> None:
        """Write one transition per env, overwriting the oldest when full; every argument is checked first (and a
        ``FrameStackReplayBuffer``'s stacks: its class docstring).

        Args:
            obs: ``(num_envs, *obs_shape)``, s_t (a frame-stack buffer's: the previous add's next_obs, or an
                episode's first stack).
            actions: ``(num_envs, *action_shape)``, a_t (int64 for discrete actions, else float32).
            rewards: float32 ``(num_envs,)``, r_{t+1}.
            terminated: bool ``(num_envs,)``, whether s_{t+1} is terminal (not truncated).
            next_obs: ``(num_envs, *obs_shape)``, s_{t+1}: the true final obs for envs that
                just finished (``info["final_observation"]``), not the auto-reset one.
            dones: bool ``(num_envs,)``, terminated or truncated: needed with ``n_step > 1`` (they cut the sums)
                and always by a ``FrameStackReplayBuffer`` (they end the stacks).
        """
        values = {
            "obs": as_tree(obs),
            "actions": actions,
            "rewards": rewards,
            "terminated": terminated,
            "next_obs": as_tree(next_obs),
        }
        if "dones" in self._specs:
            if dones is None:
                raise ValueError(self._dones_needed.format(n_step=self.n_step))
            values["dones"] = dones
        # Checked field by field: a silent dtype promotion (int rewards, float actions) or a
        # missing env dimension would otherwise corrupt the buffer without an error.
        for name, value in values.items():
            shape, dtype = self._specs[name]
            if isinstance(shape, dict):
                if not isinstance(value, dict) or set(value) != set(shape):
                    raise TypeError(
                        f"{name} must be a dict of tensors with keys {sorted(shape)}, got {type(value).__name__}"
                    )
                for key in shape:
                    self._check_field(f"{name}[{key!r}]", value[key], shape[key], dtype[key])
            else:
                self._check_field(name, value, shape, dtype)
        self._write(values)

    def _check_field(self, name: str, value: Any, shape: tuple[int, ...], dtype: torch.dtype) -> None:
        if not isinstance(value, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
        if value.shape != (self.num_envs, *shape):
            raise ValueError(f"{name} must have shape {(self.num_envs, *shape)}, got {tuple(value.shape)}")
        if value.dtype != dtype:
            raise TypeError(f"{name} must have dtype {dtype}, got {value.dtype}")

    def _write(self, values: dict[str, Any]) -> None:
        """Store ``add``'s checked ``values`` (by name, ``obs`` and ``next_obs`` as trees where they are dicts)."""
        raise NotImplementedError

    def sample(self, batch_size: int) -> ReplayBufferSamples:
        """``batch_size`` transitions drawn uniformly with replacement from the filled part (with
        ``n_step > 1``: chains of n, so the newest ``(n - 1) * num_envs`` slots start none)."""
        span = self._check_can_sample()
        offsets = torch.randint(0, self.size - span, (batch_size,), generator=self.generator, device=self.device)
        # With one step every filled slot starts a sample (offsets are slots); n-step chains start from the oldest.
        return self._samples_at(offsets if self.n_step == 1 else (self._oldest + offsets) % self.buffer_size)

    @property
    def _oldest(self) -> int:
        """The slot of the oldest transition held (0 until the ring is full, then the next one written)."""
        return (self.pos - self.size) % self.buffer_size

    def _check_can_sample(self) -> int:
        """The newest slots that start no sample (``(n_step - 1) * num_envs``); a ``RuntimeError`` where no slot
        can start one."""
        span = (self.n_step - 1) * self.num_envs
        if self.size <= span:
            if self.size == 0:
                raise RuntimeError(f"cannot sample from an empty {type(self).__name__}: add transitions first")
            raise RuntimeError(
                f"cannot sample from a {type(self).__name__} holding {self.size} transitions: n_step={self.n_step} "
                f"needs more than {span}"
            )
        return span

    def _samples_at(self, slots: Tensor) -> ReplayBufferSamples:
        """The samples whose first transition is in ``slots`` (int64 ``(batch,)``)."""
        raise NotImplementedError

    def _chains(self, slots: Tensor, dones: Tensor | None) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        """The first and last slots of the samples starting at ``slots``, their rewards and their discounts.

        With one step: ``slots`` both, their rewards, and None (gamma). With ``n_step > 1``: each sample's chain is
        its env's next n slots (``num_envs`` apart), its reward the discounted sum up to the episode's end
        (``dones``: the buffer's stored ones; None only in a one-step buffer, which keeps none), its last slot that
        of the last step summed, its discount gamma^(steps summed).
        """
        # index_select is ~2x faster than advanced indexing (tensor[indices]) for row gathers on CPU.
        if self.n_step == 1:
            return slots, slots, self.rewards.index_select(0, slots), None
        batch_size = len(slots)
        steps = self.num_envs * torch.arange(self.n_step, device=self.device)
        chains = (slots.unsqueeze(1) + steps) % self.buffer_size  # (batch, n): an env's next n slots
        flat = chains.flatten()
        rewards = self.rewards.index_select(0, flat).view(batch_size, self.n_step)
        dones = dones.index_select(0, flat).view(batch_size, self.n_step)  # type: ignore[union-attr]
        returns, last_step, discounts = compute_n_step_returns(rewards, dones, self.gamma)
        return chains[:, 0], chains.gather(1, last_step.unsqueeze(1)).squeeze(1), returns, discounts


class ReplayBuffer(ReplayBufferBase):
    """Ring buffer of the newest ``buffer_size`` transitions, preallocated on ``device``.

    Transitions of one ``add`` (one per env) sit ``num_envs`` slots after those of the previous
    one, so an env's next transition is ``num_envs`` slots on: n-step samples follow that chain.

    Args:
        buffer_size: capacity in transitions.
        obs_shape: shape of one observation, e.g. ``(4,)``.
        num_envs: transitions per ``add`` (one per env); at most ``buffer_size``.
        seed: seed of the private generator used by ``sample``.
        device: where the tensors live.
        action_shape: shape of one action: ``()`` for a discrete action index (stored as int64),
            ``(k, ...)`` for a ``Box`` action (stored as float32).
        obs_dtype: ``torch.float32`` or ``torch.uint8`` (images stay uint8: 4x less memory).
        n_step: transitions summed per sample (1: one-step TD); above 1 the buffer also keeps
            each transition's ``done`` (1 byte) to cut the sums at an episode's end.
        gamma: the discount of the n-step sums.
    """

    def __init__(
        self,
        buffer_size: int,
        obs_shape: Sequence[int] | dict[str, Sequence[int]],
        num_envs: int,
        seed: int = 0,
        device: torch.device | str = "cpu",
        action_shape: Sequence[int] = (),
        obs_dtype: torch.dtype | dict[str, torch.dtype] = torch.float32,
        n_step: int = 1,
        gamma: float = 0.99,
    ):
        super().__init__(buffer_size, num_envs, seed, device, action_shape, n_step, gamma)
        structured = isinstance(obs_shape, dict)
        dtypes = obs_dtype if structured else {"": obs_dtype}
        if structured and (not isinstance(obs_dtype, dict) or set(obs_dtype) != set(obs_shape)):
            raise TypeError("a dict obs_shape needs a dict obs_dtype with the same keys")
        for dtype in dtypes.values():
            if dtype not in (torch.float32, torch.uint8, torch.bool):
                raise TypeError(f"obs_dtype must be torch.float32, torch.uint8 or torch.bool, got {dtype!r}")
        if structured:
            self.obs_shape: Any = {
                key: check_sizes(f"obs_shape[{key!r}]", tuple(shape)) for key, shape in obs_shape.items()
            }
        else:
            self.obs_shape = check_sizes("obs_shape", tuple(obs_shape))
        self._specs = self._field_specs(self.obs_shape, obs_dtype, dones=n_step > 1)

        def zeros(shape: Any, dtype: Any) -> Tensor | TensorTree:
            if isinstance(shape, dict):  # a Dict observation: one tensor per key, each of its own dtype
                return TensorTree({key: zeros(shape[key], dtype[key]) for key in shape})
            return lazy_zeros((buffer_size, *shape), dtype, self.device)

        # Allocated once; ``add`` writes rows in place. Slots ``[size:]`` hold zeros until filled.
        self._storage = {name: zeros(shape, dtype) for name, (shape, dtype) in self._specs.items()}
        self.obs, self.actions, self.rewards, self.terminated, self.next_obs = (self._storage[name] for name in _FIELDS)
        # Host-side ints: the ring position never needs a device sync.
        self.pos = 0  # where the next transition goes
        self.size = 0  # how many slots hold data

    @classmethod
    def for_env(
        cls, envs: VectorEnv, buffer_size: int, seed: int = 0, n_step: int = 1, gamma: float = 0.99, **options: Any
    ) -> ReplayBuffer:
        """A buffer for ``envs``' spaces on its device: its observation shape and dtype (uint8
        images kept; a Dict observation one tensor per key, its action mask included, so a sample's
        ``next_obs`` has the next state's mask), int64 ``Discrete`` actions or float32 ``Box`` ones,
        one slot row per env. ``options``: a subclass's own arguments (``PrioritizedReplayBuffer``'s ``alpha``)."""
        action_shape = () if envs.action_kind == "discrete" else envs.action_shape
        return cls(
            buffer_size,
            envs.obs_shape,
            envs.num_envs,
            seed=seed,
            device=envs.device,
            action_shape=action_shape,
            obs_dtype=envs.obs_dtype,
            n_step=n_step,
            gamma=gamma,
            **options,
        )

    @staticmethod
    def bytes_needed(
        buffer_size: int,
        obs_shape: Sequence[int] | dict[str, Sequence[int]],
        num_envs: int,
        action_shape: Sequence[int] = (),
        obs_dtype: torch.dtype | dict[str, torch.dtype] = torch.float32,
        n_step: int = 1,
    ) -> int:
        """The ``nbytes`` such a buffer allocates, without allocating it."""
        shapes = obs_shape if isinstance(obs_shape, dict) else {"": obs_shape}
        dtypes = obs_dtype if isinstance(obs_dtype, dict) else dict.fromkeys(shapes, obs_dtype)
        obs = sum(math.prod(shape) * torch.empty((), dtype=dtypes[key]).element_size() for key, shape in shapes.items())
        return buffer_size * (2 * obs + action_bytes(action_shape) + 4 + 1 + (1 if n_step > 1 else 0))

    @property
    def nbytes(self) -> int:
        """Bytes held by the storage tensors (all ``buffer_size`` slots)."""
        leaves = [leaf for t in self._storage.values() for leaf in (t.values() if isinstance(t, dict) else [t])]
        return sum(leaf.nbytes for leaf in leaves)

    def _write(self, values: dict[str, Any]) -> None:
        """Write the rows in place, the ring wrapping around within one ``add`` where it must."""
        start, end = self.pos, self.pos + self.num_envs
        first = min(end, self.buffer_size) - start  # rows that fit before the ring wraps
        for name, value in values.items():
            storage = self._storage[name]
            storage[start : start + first] = value[:first]
            if first < self.num_envs:
                storage[: self.num_envs - first] = value[first:]
        self.pos = end % self.buffer_size
        self.size = min(self.size + self.num_envs, self.buffer_size)

    def _samples_at(self, slots: Tensor) -> ReplayBufferSamples:
        """The samples whose first transition is in ``slots`` (int64 ``(batch,)``)."""
        first, last, returns, discounts = self._chains(slots, self._storage.get("dones"))
        return ReplayBufferSamples(
            self.obs.index_select(0, first),
            self.actions.index_select(0, first),
            returns,
            self.terminated.index_select(0, last),
            self.next_obs.index_select(0, last),
            discounts,
        )

    @property
    def rng(self) -> torch.Generator:
        """The seeds' name of :attr:`generator`, the buffer's sampling generator."""
        return self.generator

    def state_dict(self) -> dict[str, Any]:
        """Contents (filled slots only), ring position, fill count and generator state."""
        state: dict[str, Any] = {name: plain(self._storage[name][: self.size].clone()) for name in self._storage}
        state.update(pos=self.pos, size=self.size, buffer_size=self.buffer_size)
        state["generator"] = self.generator.get_state()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved (the buffer must have the same size)."""
        if state["buffer_size"] != self.buffer_size:
            raise SettingsError(
                f"state_dict is from a buffer of size {state['buffer_size']}, this one has {self.buffer_size}"
            )
        missing = sorted(set(self._storage) - set(state))
        if missing:
            raise SettingsError(f"state_dict lacks {missing}: it is from a buffer with another n_step")
        size = int(state["size"])
        for name in self._storage:
            self._storage[name][:size] = as_tree(state[name]).to(self.device)
        self.pos, self.size = int(state["pos"]), size
        self.generator.set_state(state["generator"])
