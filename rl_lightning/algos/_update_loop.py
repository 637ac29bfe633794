"""What ``RLModule.training_step``'s update loop needs around it: how many updates one training step holds, how
skipped updates count in ``global_step``, and a former-style subclass's ``training_step`` adopted as its
``update_loss``. The loop itself is ``RLModule.training_step``; what a run sets up for it is ``_run``.
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Callable
from typing import Any

import lightning as L
from torch import Tensor

from rl_lightning.deprecations import RLLightningDeprecationWarning


def is_update_loop(training_step: Callable[..., Any]) -> bool:
    """Whether ``training_step`` is an update loop (it pulls its batches: ``training_step(self, dataloader_iter)``,
    as the layers' are), not a former-style one-update ``training_step(self, batch, batch_idx)``."""
    return "dataloader_iter" in inspect.signature(training_step).parameters


def adopt_training_step_as_update_loss(cls: type, training_step: Callable[..., Any]) -> None:
    """A subclass written before the update loop moved into the training step overrides ``training_step(batch,
    batch_idx)`` as the algorithm's update (calling ``super().training_step(batch, batch_idx)`` for the parent's
    loss): it keeps working, as that class's ``update_loss`` (``batch_idx``: the update's index in its epoch), with
    a ``DeprecationWarning`` saying what to write instead; the class's ``training_step`` becomes ``training_step``
    (the base's update loop)."""
    step = vars(cls)["training_step"]
    warnings.warn(
        f"{cls.__name__}.training_step(batch, batch_idx) as the algorithm's update is deprecated: define "
        "update_loss(batch) instead (and call super().update_loss(batch) for the parent's loss); a training step now "
        "runs several updates (rl_lightning.callbacks.updates)",
        RLLightningDeprecationWarning,
        stacklevel=3,
    )

    def update_loss(self: Any, batch: Any) -> Tensor:
        previous = self.__dict__.get("_legacy_update_loss")
        object.__setattr__(self, "_legacy_update_loss", super(cls, self).update_loss)
        try:
            index = self.trainer.global_step % len(self.source) if self._attached and self.source is not None else 0
            return step(self, batch, index)
        finally:
            object.__setattr__(self, "_legacy_update_loss", previous)

    cls.update_loss = update_loss
    cls.training_step = training_step


def count_optimizer_steps(trainer: L.Trainer, count: int) -> None:
    """Count ``count`` optimizer steps in Lightning's manual-optimisation counter (what ``global_step`` reads): an
    update the loop stepped itself (``RLModule.optimize``'s direct and compiled paths) or skipped slots
    (``RLModule.skip_updates``). The one place that reaches it: ``tests/algos/test_update_loop.py`` fails if
    Lightning renames it."""
    # Lightning 2.6: only LightningOptimizer.step counts a step; the direct path steps the torch optimizer itself.
    trainer.fit_loop.epoch_loop.manual_optimization.optim_step_progress.increment_by(count)


def updates_per_step_for(trainer: L.Trainer, updates_per_step: int) -> int:
    """The updates one training step of this run holds: ``updates_per_step``, lowered to its greatest common
    divisor with every ``ModelCheckpoint(every_n_train_steps=N)``'s N (with a warning): Lightning checks N after
    training steps, so a save that fell inside one would be skipped."""
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.utilities import rank_zero_warn

    chosen = updates_per_step
    for callback in trainer.checkpoint_callbacks:
        # Lightning 2.6: ModelCheckpoint keeps every_n_train_steps in a private attribute only.
        every = getattr(callback, "_every_n_train_steps", 0) if isinstance(callback, ModelCheckpoint) else 0
        if every and every % chosen:
            lowered = math.gcd(chosen, every)
            rank_zero_warn(
                f"ModelCheckpoint(every_n_train_steps={every}) saves after training steps: {chosen} updates per "
                f"training step would skip its saves, so this run holds {lowered} (the same run, more of Lightning's "
                f"per-step cost); a multiple of {chosen} (or every_n_epochs) keeps {chosen}"
            )
            chosen = lowered
    return chosen
