"""A replay buffer for frame-stack observations that keeps each frame once (the Nature DQN / Dopamine
layout): 1M Atari transitions of ``(4, 84, 84)`` uint8 stacks take ~6.7 GiB, where ``ReplayBuffer``
stores obs and next_obs whole (~53 GiB).

``FrameStackReplayBuffer`` has ``ReplayBuffer``'s interface and gives the same samples: the same slot
layout (one ``add`` writes ``num_envs`` consecutive slots), the same draws from a generator of the
same seed, the same n-step sums, and stacks rebuilt from the stored frames that equal those the env
gave, which every ``add`` checks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from rl_lightning._checks import SettingsError, check_choice, check_int, check_sizes
from rl_lightning.data.replay_buffer import ReplayBufferBase, ReplayBufferSamples, action_bytes, lazy_zeros
from rl_lightning.envs.base import VectorEnv
from rl_lightning.envs.spaces import MAX_IMAGE_CHANNELS, image_layout

#: How a stack is filled before an episode's first frame: ``"reset"`` repeats the first frame
#: (gymnasium's ``FrameStackObservation``), ``"zero"`` puts zero frames there (SB3's ``VecFrameStack``);
#: ``"auto"`` takes the first of the two that an episode start shows.
PADDINGS = ("auto", "reset", "zero")
#: The initial store of episode-end frames holds one per this many transitions (it doubles when full).
_STEPS_PER_END_RESERVED = 64
_PLAIN_BUFFER = (
    "FrameStackReplayBuffer keeps one frame per step and rebuilds the stacks, so it needs stacks that shift "
    "by one frame per step; store whole observations in the plain ReplayBuffer instead (frame_replay=False)"
)


def frame_stack_axis(obs_shape: Sequence[int] | dict[str, Sequence[int]], dtype: Any) -> int | None:
    """The axis of a frame stack ``FrameStackReplayBuffer`` can hold, None for any other observation.

    A uint8 image (:func:`~rl_lightning.envs.spaces.image_layout`) is a stack of K grey frames when it
    is ``(K, H, W)`` (axis 0) or ``(H, W, K)`` (axis -1) with K in 2..16 but not 3 (three channels are
    an RGB image), and a stack of K frames of 1 or 3 channels when it is ``(K, H, W, C)`` with K >= 2
    (axis 0). Whether the frames really shift by one per step is checked by the buffer's ``add``.
    """
    if isinstance(obs_shape, dict):
        return None
    is_uint8 = dtype == torch.uint8 if isinstance(dtype, torch.dtype) else np.dtype(dtype) == np.uint8
    if not is_uint8:
        return None
    shape = tuple(obs_shape)
    try:
        layout = image_layout(gym.spaces.Box(0, 255, shape, np.uint8))
    except ValueError:  # a uint8 shape of no layout: no stack either
        return None
    if layout == "KHWC":
        return 0 if shape[0] >= 2 else None
    axis = {"CHW": 0, "HWC": -1}.get(layout or "")
    if axis is None or not 2 <= shape[axis] <= MAX_IMAGE_CHANNELS or shape[axis] == 3:
        return None
    return axis


def _frame_bytes(obs_shape: tuple[int, ...], stack_axis: int, obs_dtype: torch.dtype) -> int:
    frame_shape = obs_shape[:stack_axis] + obs_shape[stack_axis + 1 :]
    return math.prod(frame_shape) * torch.empty((), dtype=obs_dtype).element_size()


def _rows_differ(a: Tensor, b: Tensor) -> Tensor:
    """Per row (dim 0): whether ``a`` and ``b`` differ anywhere, bit for bit (uint8 compared 8 bytes at a
    time where the rows allow: a uint8 reduction is ~3x slower on CPU)."""
    a, b = a.reshape(len(a), -1), b.reshape(len(b), -1)
    if a.dtype == torch.float32:
        a, b = a.view(torch.int32), b.view(torch.int32)
    elif all(
        t.shape[1] % 8 == 0 and t.stride(1) == 1 and t.stride(0) % 8 == 0 and t.storage_offset() % 8 == 0
        for t in (a, b)
    ):
        a, b = a.view(torch.int64), b.view(torch.int64)
    return (a != b).any(dim=1)


def _host_mask_is_free(device: torch.device) -> bool:
    """Whether reading a mask's values on the host costs no device sync."""
    return device.type == "cpu"


def _initial_ends(buffer_size: int, num_envs: int) -> int:
    return max(2 * num_envs, buffer_size // _STEPS_PER_END_RESERVED)


class FrameStackReplayBuffer(ReplayBufferBase):
    """Ring buffer of the newest ``buffer_size`` frame-stack transitions, one frame per transition.

    Storage (``g`` counts transitions from the first ``add``; slot ``g % buffer_size`` holds transition
    ``g``'s action, reward, flags as in ``ReplayBuffer``):

    - a ring of ``buffer_size + K * num_envs`` frames: frame ``g`` is the newest frame of obs ``g``,
      frame ``g + num_envs`` (the env's next) that of next_obs ``g``, written by the same ``add`` (and
      checked equal when the next ``add`` brings it as obs), so every stored transition can be
      sampled. The ``K * num_envs`` frames beyond ``buffer_size`` keep the older frames of the oldest
      stacks: the whole ``buffer_size`` transitions can be sampled, as in ``ReplayBuffer``;
    - per transition, the frames of obs since its episode's start (clamped to K - 1, uint8): a
      stack's frame k steps back is frame ``g - k * num_envs``, or the padding (the episode's first
      frame, or zeros) where that is before the episode;
    - the newest frame of next_obs where that frame is not the env's next obs: an episode's end
      (the next obs starts the next episode) or an obs the env brought without a done (its envs
      were reset outside ``step``, e.g. a resumed run's fresh episodes). This store holds one frame
      per ``64`` transitions at first (episodes of 64+ steps fit) and doubles when more are held.

    ``add`` checks every stack against what the buffer rebuilds (one host sync per ``add``, two where
    an episode starts): obs continues the previous next_obs, or starts an episode padded as ``padding``
    says, and next_obs is obs shifted by one frame; any other stack is a ``ValueError`` naming the env
    and the ``add``, before anything is written. The first ``add`` takes any stacks (shifted ones):
    their older frames are stored behind it.

    Args:
        buffer_size: capacity in transitions.
        obs_shape: shape of one stacked observation, e.g. ``(4, 84, 84)`` or ``(84, 84, 4)``.
        num_envs: transitions per ``add`` (one per env); at most ``buffer_size``.
        seed: seed of the private generator used by ``sample``.
        device: where the tensors live.
        action_shape: ``()`` for a discrete action index (int64), ``(k, ...)`` for a ``Box`` action (float32).
        obs_dtype: ``torch.uint8`` (images) or ``torch.float32``.
        n_step: transitions summed per sample (1: one-step TD).
        gamma: the discount of the n-step sums.
        stack_axis: the axis of ``obs_shape`` along which the K frames are stacked, oldest first (0 for
            ``(K, H, W)`` and ``(K, H, W, C)``, -1 for ``(H, W, K)``); :func:`frame_stack_axis` finds it.
        padding: one of :data:`PADDINGS`.
    """

    _dones_needed = "FrameStackReplayBuffer.add needs dones (terminated | truncated): they end the stacks"

    def __init__(
        self,
        buffer_size: int,
        obs_shape: Sequence[int],
        num_envs: int,
        seed: int = 0,
        device: torch.device | str = "cpu",
        action_shape: Sequence[int] = (),
        obs_dtype: torch.dtype = torch.uint8,
        n_step: int = 1,
        gamma: float = 0.99,
        stack_axis: int = 0,
        padding: str = "auto",
    ):
        super().__init__(buffer_size, num_envs, seed, device, action_shape, n_step, gamma)
        if isinstance(obs_shape, dict):
            raise TypeError(
                f"FrameStackReplayBuffer holds one frame-stack tensor, not a dict observation; {_PLAIN_BUFFER}"
            )
        if obs_dtype not in (torch.uint8, torch.float32):
            raise TypeError(f"obs_dtype must be torch.uint8 or torch.float32, got {obs_dtype!r}")
        self.obs_shape = check_sizes("obs_shape", tuple(obs_shape))
        rank = len(self.obs_shape)
        check_int("stack_axis", stack_axis, -rank if rank else 0, rank - 1)
        self.stack_axis = stack_axis % rank
        self.stack_size = check_int(
            f"obs_shape[{stack_axis}] (the frames of a stack)", self.obs_shape[stack_axis], 2, 255
        )
        self.padding = check_choice("padding", padding, PADDINGS)
        self.obs_dtype = obs_dtype
        self._specs = self._field_specs(self.obs_shape, obs_dtype, dones=True)  # dones end the stacks
        frame_shape = self.obs_shape[: self.stack_axis] + self.obs_shape[self.stack_axis + 1 :]
        self.frame_shape: tuple[int, ...] = frame_shape
        self._num_frames = buffer_size + self.stack_size * num_envs

        def zeros(rows: int, shape: tuple[int, ...], dtype: torch.dtype) -> Tensor:
            return lazy_zeros((rows, *shape), dtype, self.device)

        # Row _num_frames stays zero: the frame a zero-padded stack gathers before its episode.
        self._frames = zeros(self._num_frames + 1, frame_shape, obs_dtype)
        self._ends = zeros(_initial_ends(buffer_size, num_envs), frame_shape, obs_dtype)
        self.actions = zeros(buffer_size, self.action_shape, self._specs["actions"][1])
        self.rewards = zeros(buffer_size, (), torch.float32)
        self.terminated = zeros(buffer_size, (), torch.bool)
        self.dones = zeros(buffer_size, (), torch.bool)
        self._ages = zeros(buffer_size, (), torch.uint8)  # frames of obs since its episode's start, <= K - 1
        self._end_numbers = torch.full((buffer_size,), -1, dtype=torch.int64, device=self.device)  # -1: in the ring
        self._env_offsets = torch.arange(num_envs, device=self.device)
        self._backs = torch.arange(self.stack_size - 1, -1, -1, device=self.device)  # steps back of each frame
        # Host-side: the age obs of the next add will have per env (0: an episode starts), the counters.
        self._next_ages = [0] * num_envs
        self._added = 0  # transitions added ever (g of the next one)
        self._ends_added = 0  # frames put in the ends store ever (its next number; position: number % capacity)
        # The ends store's number at each add (a ring over the adds that still hold a transition):
        # the frames numbered before that of the oldest such add are no longer needed.
        self._ends_at_add = np.zeros(math.ceil(buffer_size / num_envs) + 1, dtype=np.int64)

    @classmethod
    def for_env(
        cls,
        envs: VectorEnv,
        buffer_size: int,
        seed: int = 0,
        n_step: int = 1,
        gamma: float = 0.99,
        padding: str = "auto",
        **options: Any,
    ) -> FrameStackReplayBuffer:
        """A buffer for ``envs``' frame-stack observations (:func:`frame_stack_axis`) on its device;
        a ``ValueError`` for any other observation. ``options``: a subclass's own arguments
        (``PrioritizedFrameStackReplayBuffer``'s ``alpha``)."""
        axis = frame_stack_axis(envs.obs_shape, envs.obs_dtype)
        if axis is None:
            raise ValueError(
                f"the observation ({envs.obs_shape}, {envs.obs_dtype}) is no frame stack: (K, H, W), (H, W, K) or "
                f"(K, H, W, C) uint8 with K >= 2 frames; {_PLAIN_BUFFER}"
            )
        return cls(
            buffer_size,
            envs.obs_shape,  # type: ignore[arg-type]  # a tuple: frame_stack_axis refuses dicts
            envs.num_envs,
            seed=seed,
            device=envs.device,
            action_shape=() if envs.action_kind == "discrete" else envs.action_shape,
            obs_dtype=envs.obs_dtype,  # type: ignore[arg-type]
            n_step=n_step,
            gamma=gamma,
            stack_axis=axis,
            padding=padding,
            **options,
        )

    @staticmethod
    def bytes_needed(
        buffer_size: int,
        obs_shape: Sequence[int],
        num_envs: int,
        action_shape: Sequence[int] = (),
        obs_dtype: torch.dtype = torch.uint8,
        n_step: int = 1,
        stack_axis: int = 0,
    ) -> int:
        """The ``nbytes`` such a buffer allocates, without allocating it (``n_step`` changes nothing: the
        episode ends are always kept). The ends store may double later with episodes under 64 steps."""
        obs_shape = tuple(obs_shape)
        axis = stack_axis % len(obs_shape)
        frame = _frame_bytes(obs_shape, axis, obs_dtype)
        frames = buffer_size + obs_shape[axis] * num_envs + 1 + _initial_ends(buffer_size, num_envs)
        per_slot = action_bytes(action_shape) + 4 + 1 + 1 + 1 + 8  # action, reward, terminated, done, age, end number
        return frames * frame + buffer_size * per_slot

    @property
    def size(self) -> int:
        """How many transitions are held (all can be sampled)."""
        return min(self._added, self.buffer_size)

    @property
    def pos(self) -> int:
        """The slot the next transition goes to."""
        return self._added % self.buffer_size

    @property
    def nbytes(self) -> int:
        """Bytes held by the storage tensors."""
        tensors = (self._frames, self._ends, self.actions, self.rewards, self.terminated, self.dones)
        return sum(t.nbytes for t in (*tensors, self._ages, self._end_numbers))

    def _write(self, values: dict[str, Any]) -> None:
        """Check the stacks of ``add``'s checked ``values`` (the class docstring), then write their newest frames
        (the first add: all of them) and the transitions."""
        num_envs, stack = self.num_envs, self.stack_size
        obs_frames = values["obs"].to(self.device).movedim(1 + self.stack_axis, 1)  # (num_envs, K, *frame_shape)
        next_frames = values["next_obs"].to(self.device).movedim(1 + self.stack_axis, 1)
        dones = values["dones"].to(self.device)
        first = self._added == 0
        envs = self._added + self._env_offsets  # g of each env's transition
        # First the checks every add needs (one host sync): next_obs shifts obs by a frame, obs is the
        # stack the buffer rebuilds (none on the first add: its stacks' older frames go behind it).
        shifts = _rows_differ(next_frames[:, :-1], obs_frames[:, 1:])
        if first:
            not_rebuilt = torch.zeros_like(shifts)
        else:
            not_rebuilt = _rows_differ(self._stack_frames(envs, self._tensor(self._next_ages)), obs_frames)
        not_shifted, not_continued, ended_now = torch.stack([shifts, not_rebuilt, dones]).tolist()
        # Then, where an episode may start (after a done, or obs that is not the continuation), whether
        # obs is padded with its first frame or with zeros: a second sync, once per episode and env.
        reset_like = zero_like = [False] * num_envs
        if not first and (any(not_continued) or 0 in self._next_ages):
            older = obs_frames[:, :-1]
            reset_like, zero_like = (
                ~torch.stack([_rows_differ(older, obs_frames[:, -1:].expand_as(older)), _rows_differ(older, 0 * older)])
            ).tolist()
        starts, self.padding = self._check_stacks(not_shifted, not_continued, reset_like, zero_like, first)
        # Checked: from here on the add writes. An env starting an episode without a done before
        # (its envs were reset outside step) had its previous next frame where obs's goes: keep it apart.
        restarted = [env for env in starts if self._next_ages[env] != 0]
        ended = [env for env in range(num_envs) if ended_now[env]]
        self._reserve_ends(len(restarted) + len(ended))
        if restarted:
            index = self._tensor(restarted)
            self._end_numbers[(self._added - num_envs + index) % self.buffer_size] = self._keep_apart(
                self._frames[(self._added + index) % self._num_frames]
            )
        frame_slots = envs % self._num_frames
        if first:
            for back in range(stack):
                self._frames[(envs - back * num_envs) % self._num_frames] = obs_frames[:, stack - 1 - back]
            ages = [stack - 1] * num_envs
        else:
            self._frames[frame_slots] = obs_frames[:, -1]
            ages = [0 if env in starts else age for env, age in enumerate(self._next_ages)]
        self._frames[(frame_slots + num_envs) % self._num_frames] = next_frames[:, -1]
        end_numbers = torch.full((num_envs,), -1, dtype=torch.int64, device=self.device)
        if ended:
            index = self._tensor(ended)
            end_numbers[index] = self._keep_apart(next_frames[index, -1])
        slots = envs % self.buffer_size
        self.actions[slots] = values["actions"].to(self.device)
        self.rewards[slots] = values["rewards"].to(self.device)
        self.terminated[slots] = values["terminated"].to(self.device)
        self.dones[slots] = dones
        self._ages[slots] = self._tensor(ages).to(torch.uint8)
        self._end_numbers[slots] = end_numbers
        self._next_ages = [0 if done else min(age + 1, stack - 1) for done, age in zip(ended_now, ages, strict=True)]
        self._added += num_envs

    def _tensor(self, values: list[int]) -> Tensor:
        return torch.tensor(values, dtype=torch.int64, device=self.device)

    def _keep_apart(self, frames: Tensor) -> Tensor:
        """Put ``frames`` in the ends store; their numbers there."""
        numbers = self._ends_added + torch.arange(len(frames), device=self.device)
        self._ends[numbers % len(self._ends)] = frames
        self._ends_added += len(frames)
        return numbers

    def _check_stacks(
        self,
        not_shifted: list[bool],
        not_continued: list[bool],
        reset_like: list[bool],
        zero_like: list[bool],
        first: bool,
    ) -> tuple[list[int], str]:
        """The envs whose obs starts an episode and the padding (decided where it was ``"auto"``), or a
        ``ValueError`` for a stack the buffer cannot rebuild."""
        padding, starts = self.padding, []
        for env in range(self.num_envs):
            where = f"env {env} at add {self._added // self.num_envs} (add 0 is the buffer's first)"
            if not_shifted[env]:
                raise ValueError(
                    f"{where}: next_obs is not obs shifted by one frame along axis {self.stack_axis} (next_obs's "
                    f"frames [:-1] must be obs's [1:]); {_PLAIN_BUFFER}"
                )
            episode_ended = not first and self._next_ages[env] == 0
            if first or not (not_continued[env] or episode_ended):
                continue
            if padding == "auto" and reset_like[env] != zero_like[env]:
                padding = "reset" if reset_like[env] else "zero"  # the first episode start that tells
            if padding == "auto":
                start_ok = reset_like[env] or zero_like[env]
            else:
                start_ok = reset_like[env] if padding == "reset" else zero_like[env]
            if not start_ok:
                after = "its episode ended at the previous add" if episode_ended else "obs is not the previous next_obs"
                filler = {"reset": "its first frame", "zero": "zeros"}.get(padding, "its first frame or zeros")
                raise ValueError(
                    f"{where}: {after}, and obs is not an episode's first stack padded with {filler} "
                    f"(padding={padding!r}); {_PLAIN_BUFFER}"
                )
            starts.append(env)
        return starts, padding

    def _reserve_ends(self, new: int) -> None:
        """Make room in the ends store for ``new`` frames numbered from ``_ends_added`` (doubling it
        where the frames that transitions still need would not fit)."""
        add = self._added // self.num_envs
        self._ends_at_add[add % len(self._ends_at_add)] = self._ends_added
        oldest_add = max(0, self._added + self.num_envs - self.buffer_size) // self.num_envs
        lowest = int(self._ends_at_add[oldest_add % len(self._ends_at_add)])
        needed, capacity = self._ends_added + new - lowest, len(self._ends)
        if needed <= capacity:
            return
        grown = lazy_zeros((max(2 * capacity, needed), *self.frame_shape), self.obs_dtype, self.device)
        numbers = torch.arange(lowest, self._ends_added, device=self.device)
        grown[numbers % len(grown)] = self._ends[numbers % capacity]
        self._ends = grown

    def _stack_frames(self, envs: Tensor, ages: Tensor) -> Tensor:
        """The stacks ``(batch, K, *frame_shape)`` whose newest frame is ring frame ``envs`` (global
        numbers), ``ages`` (int64) frames into their episodes."""
        backs = self._backs
        within = torch.minimum(backs, ages.unsqueeze(1))  # "reset" padding: the episode's first frame
        index = (envs.unsqueeze(1) - within * self.num_envs) % self._num_frames
        if self.padding == "zero":
            index = torch.where(backs > ages.unsqueeze(1), self._num_frames, index)
        return self._frames.index_select(0, index.flatten()).view(*index.shape, *self.frame_shape)

    def _as_obs(self, frames: Tensor) -> Tensor:
        return frames if self.stack_axis == 0 else frames.movedim(1, 1 + self.stack_axis).contiguous()

    def _samples_at(self, slots: Tensor) -> ReplayBufferSamples:
        """The samples whose first transition is in ``slots`` (int64 ``(batch,)``), drawn by ``sample`` exactly as
        ``ReplayBuffer`` draws them: their stacks rebuilt from the frames."""
        oldest = self._oldest
        first, last, returns, discounts = self._chains(slots, self.dones)
        base = self._added - self.size  # g of the oldest slot
        first_envs = base + (first - oldest) % self.buffer_size
        last_envs = base + (last - oldest) % self.buffer_size
        obs = self._stack_frames(first_envs, self._ages.index_select(0, first).long())
        last_ages = self._ages.index_select(0, last).long()
        next_frames = self._stack_frames(last_envs + self.num_envs, (last_ages + 1).clamp(max=self.stack_size - 1))
        # next_obs's newest frame from the ends store where it is kept apart.
        end_numbers = self._end_numbers.index_select(0, last)
        apart = end_numbers >= 0
        if _host_mask_is_free(self.device):  # a few rows: gather those (torch.where is slow on uint8 on CPU)
            rows = apart.nonzero().squeeze(1)
            kept = self._ends.index_select(0, end_numbers.index_select(0, rows) % len(self._ends))
            next_frames[rows, -1] = kept
        else:  # no host sync on an accelerator
            kept = self._ends.index_select(0, end_numbers % len(self._ends))
            newest = next_frames[:, -1]
            next_frames[:, -1] = torch.where(apart.view(-1, *[1] * len(self.frame_shape)), kept, newest)
        return ReplayBufferSamples(
            self._as_obs(obs),
            self.actions.index_select(0, first),
            returns,
            self.terminated.index_select(0, last),
            self._as_obs(next_frames),
            discounts,
        )

    def state_dict(self) -> dict[str, Any]:
        """The frames and transitions still needed, the counters and the generator state."""
        size, added, stack, num_envs = self.size, self._added, self.stack_size, self.num_envs
        frame_numbers = torch.arange(added - size - (stack - 1) * num_envs, added + num_envs, device=self.device)
        oldest_add = max(0, added - self.buffer_size) // num_envs
        lowest_end = int(self._ends_at_add[oldest_add % len(self._ends_at_add)]) if added else 0
        end_numbers = torch.arange(lowest_end, self._ends_added, device=self.device)
        adds = np.arange(oldest_add, added // num_envs)
        return {
            "buffer_size": self.buffer_size,
            "num_envs": num_envs,
            "obs_shape": self.obs_shape,
            "stack_axis": self.stack_axis,
            "padding": self.padding,
            "added": added,
            "ends_added": self._ends_added,
            "frames": self._frames[frame_numbers % self._num_frames].clone() if added else self._frames[:0].clone(),
            "ends_from": lowest_end,
            "ends": self._ends[end_numbers % len(self._ends)].clone(),
            "ends_at_add": torch.from_numpy(self._ends_at_add[adds % len(self._ends_at_add)].copy()),
            **{name: getattr(self, name)[:size].clone() for name in ("actions", "rewards", "terminated", "dones")},
            "ages": self._ages[:size].clone(),
            "end_numbers": self._end_numbers[:size].clone(),
            "next_ages": list(self._next_ages),
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved (a buffer of the same size, envs and observation shape)."""
        if "frames" not in state:
            raise SettingsError(
                "state_dict is not a FrameStackReplayBuffer's (a ReplayBuffer's holds whole observations)"
            )
        for name in ("buffer_size", "num_envs", "obs_shape", "stack_axis"):
            saved, own = state[name], getattr(self, name)
            if (tuple(saved) if name == "obs_shape" else saved) != own:
                raise SettingsError(f"state_dict is from a buffer with {name}={saved}, this one has {own}")
        if state["padding"] != self.padding and "auto" not in (state["padding"], self.padding):
            raise SettingsError(
                f"state_dict is from a buffer with padding={state['padding']!r}, this one has {self.padding!r}"
            )
        added, num_envs, stack = int(state["added"]), self.num_envs, self.stack_size
        size = min(added, self.buffer_size)
        self._added, self._ends_added = added, int(state["ends_added"])
        if state["padding"] != "auto":
            self.padding = state["padding"]
        if added:
            frame_numbers = torch.arange(added - size - (stack - 1) * num_envs, added + num_envs, device=self.device)
            self._frames[frame_numbers % self._num_frames] = state["frames"].to(self.device)
        ends = state["ends"].to(self.device)
        if len(ends) > len(self._ends):
            self._ends = torch.zeros((len(ends), *self.frame_shape), dtype=self.obs_dtype, device=self.device)
        end_numbers = torch.arange(int(state["ends_from"]), self._ends_added, device=self.device)
        self._ends[end_numbers % len(self._ends)] = ends
        oldest_add = max(0, added - self.buffer_size) // num_envs
        adds = np.arange(oldest_add, added // num_envs)
        self._ends_at_add[adds % len(self._ends_at_add)] = state["ends_at_add"].numpy()
        for name in ("actions", "rewards", "terminated", "dones"):
            getattr(self, name)[:size] = state[name].to(self.device)
        self._ages[:size] = state["ages"].to(self.device)
        self._end_numbers[:size] = state["end_numbers"].to(self.device)
        self._next_ages = [int(age) for age in state["next_ages"]]
        self.generator.set_state(state["generator"])
