"""What Lightning iterates over: one item per training step, each a request for several updates.

An algorithm's update loop lives in its training step (``RLModule.training_step``): a whole rollout's
epochs and minibatches (VPG, PPO) or ``updates_per_step`` collections and updates (DQN, SAC, TD3). The data
of each update comes from the source's stream (``EnvSource.next_batch``), pulled inside the loop, after the
previous update: the next collection must act with the weights that update left. So the DataLoader yields no
data, only :class:`TrainingStep` tickets, ``len(source)`` updates' worth per epoch.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from torch.utils.data import IterableDataset

from rl_lightning._checks import check_int
from rl_lightning.data.source import EnvSource


@dataclass(frozen=True)
class TrainingStep:
    """One training step's ticket: the module runs its updates on ``source``'s next batches."""

    source: EnvSource


class TrainingSteps(IterableDataset):
    """``ceil(len(source) / updates_per_step)`` :class:`TrainingStep` tickets per epoch: an epoch keeps the
    source's ``len(source)`` updates (the last training step of an epoch may hold fewer).

    Args:
        source: the data source whose stream the updates consume.
        updates_per_step: updates per training step (the last of an epoch or of the run may hold fewer).
    """

    def __init__(self, source: EnvSource, updates_per_step: int):
        super().__init__()
        self.source = source
        self.updates_per_step = check_int("updates_per_step", updates_per_step, 1)

    def __len__(self) -> int:
        return math.ceil(len(self.source) / self.updates_per_step)

    def __iter__(self) -> Iterator[TrainingStep]:
        ticket = TrainingStep(self.source)
        for _ in range(len(self)):
            yield ticket
