"""Prioritized experience replay (Schaul et al. 2016, proportional variant): a sum tree over the slots'
priorities, on the buffer's device, and the buffers that sample by it.

    add:       new transitions get the largest priority so far (every one is replayed at least once)
    sample:    P(i) = p_i^alpha / sum_k p_k^alpha (a descent of the tree, the whole batch one level at a time)
    weights:   w_i = (N P(i))^-beta / max_k w_k = (p_i^alpha / min_k p_k^alpha)^-beta, in (0, 1]
    update:    p_i = |TD error_i| + eps, after the update that sampled i

``PrioritizedReplayBuffer`` and ``PrioritizedFrameStackReplayBuffer`` are ``ReplayBuffer`` and
``FrameStackReplayBuffer`` with this sampling: the same storage, n-step chains and state, plus the priorities.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from rl_lightning._checks import SettingsError, check_float
from rl_lightning.data.frame_replay import FrameStackReplayBuffer
from rl_lightning.data.replay_buffer import ReplayBuffer, ReplayBufferBase, ReplayBufferSamples

#: Added to every |TD error| so that no transition's priority is zero (SB3's and TorchRL's value).
PRIORITY_EPS = 1e-6


class SumTree:
    """Sums and minima of ``capacity`` non-negative values, kept in two complete binary trees on ``device``.

    Node 1 is the root, node n's children are 2n and 2n + 1, and the leaves are nodes ``[leaves, 2 * leaves)``
    (``leaves``: ``capacity`` rounded up to a power of two). Every internal node holds the sum (the minimum) of
    its children, recomputed from them whenever a leaf below it changes: the trees are a function of their
    leaves alone, whatever the order of the updates. The minimum tree ignores zero leaves (values that cannot be
    drawn). float64: a sum of a million priorities keeps the small ones distinguishable.

    Args:
        capacity: number of values (leaves), all zero at first.
        device: where the trees live.
    """

    def __init__(self, capacity: int, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float64):
        self.capacity = capacity
        self.depth = max(1, math.ceil(math.log2(capacity)))  # levels below the root
        self.leaves = 1 << self.depth
        self.sums = torch.zeros(2 * self.leaves, dtype=dtype, device=device)
        self.mins = torch.full((2 * self.leaves,), math.inf, dtype=dtype, device=device)

    @staticmethod
    def bytes_needed(capacity: int) -> int:
        return 2 * 2 * (1 << max(1, math.ceil(math.log2(capacity)))) * 8

    @property
    def total(self) -> Tensor:
        """The sum of all values (0-dim, on the device)."""
        return self.sums[1]

    @property
    def min(self) -> Tensor:
        """The smallest non-zero value (0-dim; ``inf`` while all are zero)."""
        return self.mins[1]

    def values(self, index: Tensor | None = None) -> Tensor:
        """The values at ``index`` (int64), or all ``capacity`` of them."""
        if index is None:
            return self.sums[self.leaves : self.leaves + self.capacity]
        return self.sums.index_select(0, index + self.leaves)

    def update(self, index: Tensor, values: Tensor) -> None:
        """Set the values at ``index`` (int64 ``(k,)``; an index given twice must have the same value both times)
        and recompute their ancestors, the ``k`` of each level at once (``depth`` steps, no loop over ``k``)."""
        nodes = index + self.leaves
        values = values.to(self.sums.dtype)
        self.sums.index_copy_(0, nodes, values)
        self.mins.index_copy_(0, nodes, torch.where(values > 0, values, math.inf))
        for _ in range(self.depth):
            nodes = nodes >> 1
            left = nodes << 1
            right = left + 1
            self.sums.index_copy_(0, nodes, self.sums.index_select(0, left) + self.sums.index_select(0, right))
            self.mins.index_copy_(
                0, nodes, torch.minimum(self.mins.index_select(0, left), self.mins.index_select(0, right))
            )

    def update_range(self, start: int, values: Tensor) -> None:
        """:meth:`update` of the consecutive leaves ``[start, start + len(values))`` (within ``capacity``), the same
        arithmetic on slices: a level's nodes above a range are a range."""
        values = values.to(self.sums.dtype)
        low, high = start + self.leaves, start + self.leaves + len(values)  # nodes [low, high)
        self.sums[low:high] = values
        self.mins[low:high] = torch.where(values > 0, values, math.inf)
        for _ in range(self.depth):
            low, high = low >> 1, ((high - 1) >> 1) + 1
            left, right = slice(2 * low, 2 * high, 2), slice(2 * low + 1, 2 * high, 2)
            torch.add(self.sums[left], self.sums[right], out=self.sums[low:high])
            torch.minimum(self.mins[left], self.mins[right], out=self.mins[low:high])

    def rebuild(self, values: Tensor) -> None:
        """Set all ``capacity`` values and rebuild every level (a loaded state)."""
        self.sums.zero_()
        self.mins.fill_(math.inf)
        values = values.to(self.sums.dtype)
        self.sums[self.leaves : self.leaves + self.capacity] = values
        self.mins[self.leaves : self.leaves + self.capacity] = torch.where(values > 0, values, math.inf)
        size = self.leaves
        while size > 1:  # the same arithmetic as update's, a level at a time
            left, right = slice(size, 2 * size, 2), slice(size + 1, 2 * size, 2)
            self.sums[size // 2 : size] = self.sums[left] + self.sums[right]
            self.mins[size // 2 : size] = torch.minimum(self.mins[left], self.mins[right])
            size //= 2

    def find(self, targets: Tensor) -> Tensor:
        """The leaf of each target prefix sum: the smallest ``i`` with ``targets < values[:i + 1].sum()``.

        With ``targets`` uniform in ``[0, total)``, leaf ``i`` is drawn with probability ``values[i] / total``.
        The whole batch descends one level per step; a subtree summing to zero is never entered (a target that
        rounding put past a node's sum stays in its last non-empty subtree).

        Args:
            targets: float64 ``(batch,)`` in ``[0, total)``.

        Returns:
            int64 ``(batch,)`` leaf indices in ``[0, capacity)``.
        """
        nodes = torch.ones(targets.shape, dtype=torch.int64, device=targets.device)
        for _ in range(self.depth):
            left = nodes << 1
            left_sums = self.sums.index_select(0, left)
            go_right = (targets >= left_sums) & (self.sums.index_select(0, left + 1) > 0)
            targets = torch.where(go_right, targets - left_sums, targets)
            nodes = left + go_right
        return nodes - self.leaves


class _Prioritized(ReplayBufferBase):
    """The prioritized sampling both prioritized buffers share (listed before the buffer in their bases): their
    arguments are the buffer's, then ``alpha``, ``beta`` and ``priority_eps``.

    The slots' priorities (``p^alpha``) live in ``priorities``; the tree holds them for the slots that can start
    a sample, and zero for the others (empty slots, and with ``n_step > 1`` the newest ``(n - 1) * num_envs``,
    whose chains are not complete yet). Each ``add`` refreshes the slots it wrote and those it completed.
    """

    def _init_priorities(self, alpha: float, beta: float, priority_eps: float) -> None:
        """The prioritized buffers' own settings, checked, and their priorities and trees (after the buffer's
        ``__init__``)."""
        self.alpha = check_float("alpha", alpha, 0.0, 1.0)  # the paper's range: beyond 1 a few transitions take all
        self.beta = check_float("beta", beta, 0.0, 1.0)
        self.priority_eps = check_float("priority_eps", priority_eps, 0.0, low_open=True)
        self.tree = SumTree(self.buffer_size, self.device)
        #: ``p^alpha`` of every slot (float64), also of the slots the tree holds zero for.
        self.priorities = torch.zeros(self.buffer_size, dtype=torch.float64, device=self.device)
        # The largest p^alpha so far, on the device (read back never): new transitions get it.
        self._max_priority = torch.ones((), dtype=torch.float64, device=self.device)

    @classmethod
    def bytes_needed(cls, *args: Any, **kwargs: Any) -> int:
        """The buffer's ``bytes_needed`` (its arguments) plus the priorities and the trees."""
        buffer_size = args[0] if args else kwargs["buffer_size"]
        buffer = super().bytes_needed(*args, **kwargs)  # type: ignore[misc]
        return buffer + 8 * buffer_size + SumTree.bytes_needed(buffer_size)

    @property
    def nbytes(self) -> int:
        """The buffer's ``nbytes`` plus the priorities and the trees."""
        return super().nbytes + self.priorities.nbytes + self.tree.sums.nbytes + self.tree.mins.nbytes

    @property
    def max_priority(self) -> Tensor:
        """The largest ``p^alpha`` so far (1 before the first update): new transitions' priority."""
        return self._max_priority

    def _sampleable(self, slots: Tensor) -> Tensor:
        """Whether each slot holds a transition that starts a complete chain."""
        window = self.size - (self.n_step - 1) * self.num_envs
        return (slots - self._oldest) % self.buffer_size < window

    def _refresh(self, slots: Tensor) -> None:
        self.tree.update(slots, torch.where(self._sampleable(slots), self.priorities.index_select(0, slots), 0.0))

    def _refresh_range(self, start: int, count: int) -> None:
        """:meth:`_refresh` of the ``count`` slots from ``start`` on, around the ring: one or two ranges."""
        start %= self.buffer_size
        while count > 0:
            length = min(count, self.buffer_size - start)
            slots = torch.arange(start, start + length, device=self.device)
            self.tree.update_range(
                start, torch.where(self._sampleable(slots), self.priorities[start : start + length], 0.0)
            )
            start, count = 0, count - length

    def _write(self, values: dict[str, Any]) -> None:
        """The buffer's write of an ``add``; its transitions get the largest priority so far."""
        start = self.pos
        super()._write(values)
        end = start + self.num_envs
        self.priorities[start : min(end, self.buffer_size)] = self._max_priority
        self.priorities[: max(end - self.buffer_size, 0)] = self._max_priority
        # The slots written, and those whose chains this add completed (span slots back).
        self._refresh_range(start, self.num_envs)
        span = (self.n_step - 1) * self.num_envs
        if span > 0:
            self._refresh_range(start - span, self.num_envs)

    def sample(self, batch_size: int, beta: float | None = None) -> ReplayBufferSamples:
        """``batch_size`` transitions drawn with replacement by priority, with their importance ``weights``
        (``beta``: None for the buffer's ``beta``) and slot ``indices``."""
        self._check_can_sample()
        beta = self.beta if beta is None else beta
        tree = self.tree
        targets = torch.rand(batch_size, generator=self.generator, device=self.device, dtype=torch.float64)
        slots = tree.find(targets * tree.total)
        samples = self._samples_at(slots)
        weights = (tree.values(slots) / tree.min).pow(-beta).float()
        return samples._replace(weights=weights, indices=slots)

    @torch.no_grad()
    def update_priorities(self, indices: Tensor, td_errors: Tensor) -> None:
        """Set the priorities of the samples at ``indices`` (a sample's ``indices``) to ``(|td_errors| + eps)^alpha``.

        Args:
            indices: int64 ``(batch,)`` slots, possibly repeated (a transition drawn twice keeps its larger new
                priority, whatever the order: the same on every device).
            td_errors: ``(batch,)`` the samples' TD errors.
        """
        if indices.shape != td_errors.shape or indices.dim() != 1:
            raise ValueError(
                f"indices and td_errors must both be (batch,), got {tuple(indices.shape)} and {tuple(td_errors.shape)}"
            )
        indices = indices.to(self.device)
        values = (td_errors.detach().to(self.device, torch.float64).abs() + self.priority_eps).pow(self.alpha)
        self.priorities.index_fill_(0, indices, 0.0).scatter_reduce_(0, indices, values, "amax")
        torch.maximum(self._max_priority, values.max(), out=self._max_priority)
        self._refresh(indices)

    def state_dict(self) -> dict[str, Any]:
        """The buffer's state, its held slots' priorities and the largest priority (the tree follows from them)."""
        state = super().state_dict()  # type: ignore[misc]
        state["priorities"] = self.priorities[: self.size].clone()
        state["max_priority"] = self._max_priority.clone()
        state["alpha"] = self.alpha
        state["beta"] = self.beta
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` (a uniform buffer's too: its transitions then get priority 1)."""
        if "priorities" in state and state["alpha"] != self.alpha:
            raise SettingsError(
                f"state_dict is from a buffer with alpha={state['alpha']}, this one has {self.alpha}: its "
                f"priorities are p^alpha of the other alpha (a resumed run: keep prioritized_alpha={state['alpha']})"
            )
        super().load_state_dict(state)  # type: ignore[misc]
        self.priorities.zero_()
        if "priorities" in state:
            self.priorities[: self.size] = state["priorities"].to(self.device, torch.float64)
            self._max_priority.copy_(state["max_priority"])
            self.beta = float(state["beta"])
        else:
            self.priorities[: self.size] = 1.0
            self._max_priority.fill_(1.0)
        slots = torch.arange(self.buffer_size, device=self.device)
        self.tree.rebuild(torch.where(self._sampleable(slots), self.priorities, 0.0))


class PrioritizedReplayBuffer(_Prioritized, ReplayBuffer):
    """:class:`~rl_lightning.data.replay_buffer.ReplayBuffer` sampling by priority (module docstring).

    Args:
        buffer_size, obs_shape, num_envs, seed, device, action_shape, obs_dtype, n_step, gamma: ``ReplayBuffer``'s.
        alpha: how much the priorities count, in [0, 1] (0: uniform).
        beta: the importance weights' exponent in [0, 1] (1: full correction); ``sample`` takes another.
        priority_eps: added to every |TD error| (> 0).
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
        alpha: float = 0.6,
        beta: float = 0.4,
        priority_eps: float = PRIORITY_EPS,
    ):
        super().__init__(buffer_size, obs_shape, num_envs, seed, device, action_shape, obs_dtype, n_step, gamma)
        self._init_priorities(alpha, beta, priority_eps)


class PrioritizedFrameStackReplayBuffer(_Prioritized, FrameStackReplayBuffer):
    """:class:`~rl_lightning.data.frame_replay.FrameStackReplayBuffer` (each frame once) sampling by priority.

    Args:
        buffer_size, obs_shape, num_envs, seed, device, action_shape, obs_dtype, n_step, gamma, stack_axis,
            padding: ``FrameStackReplayBuffer``'s.
        alpha, beta, priority_eps: :class:`PrioritizedReplayBuffer`'s.
    """

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
        alpha: float = 0.6,
        beta: float = 0.4,
        priority_eps: float = PRIORITY_EPS,
    ):
        super().__init__(
            buffer_size, obs_shape, num_envs, seed, device, action_shape, obs_dtype, n_step, gamma, stack_axis, padding
        )
        self._init_priorities(alpha, beta, priority_eps)
