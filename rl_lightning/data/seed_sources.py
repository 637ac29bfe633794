"""The data of a ``num_seeds > 1`` run: every seed's own source (envs, generators, rollout or replay buffer,
normaliser, episode tracker), pulled in lock-step, one batch of each per update (``rl_lightning.algos._seeds``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import cached_property
from typing import Any

import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch import Tensor
from torch.utils.data import IterableDataset

from rl_lightning.data._fused_collection import fuses_together, play_fused_together
from rl_lightning.data.rollout import RolloutTensors
from rl_lightning.data.source import EnvSource
from rl_lightning.per_seed import call_per_seed, per_seed


class SeedBatches(tuple):
    """One update's batches, one per seed (seed 0's first)."""


class SeedSources(IterableDataset):
    """The sources of every seed as one dataset: each item is a :class:`SeedBatches`, one batch of each source.

    The clock (``env_steps``) is one seed's: the seeds step in lock-step, so every one of them has taken that many
    env steps (the run as a whole ``num_seeds`` times as many). An on-policy seed whose rollout is stopped early
    (PPO's ``target_kl``: :meth:`freeze`) is not pulled again until the others' rollout ends; its last batch stands
    in, and the module gives it no gradient.

    Args:
        sources: the seeds' sources, seed 0's first, each built as a one-seed run builds its own.
    """

    def __init__(self, sources: Sequence[EnvSource]):
        super().__init__()
        self.sources = list(sources)
        #: Seeds whose rest of the current rollout is skipped (on-policy).
        self.frozen = [False] * len(self.sources)
        #: The index of the newest batch in the current rollout, across the seeds (on-policy).
        self.position = -1
        self._last: list[Any] = [None] * len(self.sources)

    # -- what the module reads of its source ----------------------------------------------------------

    @property
    def envs(self) -> Any:
        return self.sources[0].envs

    @property
    def device(self) -> torch.device:
        return self.sources[0].device

    @property
    def env_steps(self) -> int:
        return self.sources[0].env_steps

    @property
    def env_steps_before_batch(self) -> int:
        return self.sources[0].env_steps_before_batch

    @property
    def episodes(self) -> SeedEpisodes:
        return SeedEpisodes([source.episodes for source in self.sources])

    @property
    def should_stop(self) -> Callable[[], bool]:
        return self.sources[0].should_stop

    @should_stop.setter
    def should_stop(self, value: Callable[[], bool]) -> None:
        for source in self.sources:
            source.should_stop = value

    @property
    def collection(self) -> Any:
        """An on-policy seed's newest collection that is still being trained on (for ``update_in_rollout``)."""
        active = [source for source, frozen in zip(self.sources, self.frozen, strict=True) if not frozen]
        return (active or self.sources)[0].collection

    @property
    def batches_per_rollout(self) -> int:
        return self.sources[0].batches_per_rollout

    def __len__(self) -> int:
        return len(self.sources[0])

    def __iter__(self) -> Iterator[SeedBatches]:
        for _ in range(len(self)):
            yield self.next_batch()

    # -- pulling ----------------------------------------------------------------------------------------

    def next_batch(self) -> SeedBatches:
        """Every seed's next batch (a frozen seed's last one). Where a seed's pull collects (a rollout, a stop heard
        in it), the seeds pulled before it go back too, so a checkpoint then holds every seed before this batch."""
        if all(self.frozen):
            self.frozen = [False] * len(self.sources)
        snapshot = self._snapshot() if self._collects_next() else None
        try:
            batches = self._pull()
        except SIGTERMException:
            if snapshot is not None:
                for source, state in zip(self.sources, snapshot, strict=True):
                    source.load_state_dict(state)
            raise
        return SeedBatches(batches)

    def _pull(self) -> list[Any]:
        if self._collects_next() and self._fuses_together:  # every seed's rollout in lock-step, one call per chunk
            for source in self.sources:
                source.check_stop()
            play_fused_together(self.sources, self._call_per_seed)
            for source in self.sources:
                source.collect(played=True)
            self.frozen = [False] * len(self.sources)
        for index, source in enumerate(self.sources):
            if not self.frozen[index]:
                self._last[index] = source.next_batch()
        collection = getattr(self.sources[0], "collection", None)
        if collection is None:  # replay sources: never frozen
            return list(self._last)
        new_rollout = any(
            source.collection.position == 0
            for source, frozen in zip(self.sources, self.frozen, strict=True)
            if not frozen
        )
        if new_rollout:
            self.position = 0
            for index, source in enumerate(self.sources):
                if self.frozen[index]:  # its skipped rollout is over: it collects with the others
                    self._last[index] = source.next_batch()
            self.frozen = [False] * len(self.sources)
        else:
            self.position += 1
        # A seed frozen when a checkpoint was written has no last batch: any batch stands in (it gets no gradient).
        stand_in = next(batch for batch in self._last if batch is not None)
        return [stand_in if batch is None else batch for batch in self._last]

    @cached_property
    def _fuses_together(self) -> bool:
        return len(self.sources) > 1 and fuses_together(self.sources)

    def _call_per_seed(self, function: Callable[..., Any], calls: list[tuple[Any, ...]]) -> Any:
        """``call_per_seed``, through seed 0's ``compile`` where it is on."""
        compiled = getattr(self.sources[0], "compiled", None)
        if compiled is None or not compiled.enabled:
            return call_per_seed(function, calls)
        return compiled.own_copy(per_seed(function), f"{function.__name__}_per_seed")(calls)

    def _collects_next(self) -> bool:
        """Whether the next pull collects a rollout (on-policy sources; a replay source collects a few steps at a
        time and restores itself)."""
        collection = getattr(self.sources[0], "collection", False)
        if collection is False:
            return False
        return self.position + 1 >= self.batches_per_rollout or collection is None

    def _snapshot(self) -> list[dict[str, Any]] | None:
        if not all(source.envs.restorable for source in self.sources):
            return None
        return [source.state_dict() for source in self.sources]

    def freeze(self, seeds: Sequence[int]) -> None:
        """Skip the rest of the current rollout for ``seeds`` (PPO's ``target_kl``)."""
        for index in seeds:
            if not self.frozen[index]:
                self.sources[index].skip_rest_of_rollout()
                self.frozen[index] = True

    @property
    def all_frozen(self) -> bool:
        return all(self.frozen)

    def skip_rest_of_rollout(self) -> int:
        """Every seed skips the rest of the rollout: the next pull collects a new one. Returns the batches skipped."""
        skipped = max(self.batches_per_rollout - 1 - self.position, 0)
        for index, source in enumerate(self.sources):
            if not self.frozen[index]:
                source.skip_rest_of_rollout()
            self.frozen[index] = True
        self.position = max(self.position, self.batches_per_rollout - 1)
        return skipped

    # -- checkpoints -------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "seeds": [source.state_dict() for source in self.sources],
            "frozen": list(self.frozen),
            "position": self.position,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        seeds = state.get("seeds")
        if not isinstance(seeds, list) or len(seeds) != len(self.sources):
            found = len(seeds) if isinstance(seeds, list) else "no"
            raise ValueError(
                f"the checkpoint holds the data of {found} seeds, this run trains {len(self.sources)}: resume with "
                "the num_seeds it was saved with"
            )
        for source, seed_state in zip(self.sources, seeds, strict=True):
            source.load_state_dict(seed_state)
        self.frozen = list(state["frozen"])
        self.position = int(state["position"])
        self._last = [None] * len(self.sources)


class SeedEpisodes:
    """The seeds' episode trackers read together: :meth:`pop` gives ``(3, num_seeds)``."""

    def __init__(self, trackers: Sequence[Any]):
        self.trackers = list(trackers)

    def pop(self) -> Tensor:
        """Each seed's (return sum, length sum, episodes) since the last pop, as columns."""
        return torch.stack([tracker.pop() for tracker in self.trackers], dim=1)


def latest_rollout_of(sources: Sequence[Any]) -> RolloutTensors | None:
    """The newest rollout of one source, or of several seeds' the first env of each (None: a replay source's, or
    none collected yet)."""
    collections = [getattr(source, "collection", None) for source in sources]
    if any(collection is None for collection in collections):
        return None
    if len(collections) == 1:
        return collections[0].rollout
    firsts = [collection.rollout.select_envs(slice(0, 1)) for collection in collections]
    return RolloutTensors(*(None if field[0] is None else torch.cat(field) for field in zip(*firsts, strict=True)))
