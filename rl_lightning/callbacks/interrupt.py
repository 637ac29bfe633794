"""Leave a resumable checkpoint when a run is asked to stop (SIGTERM, Ctrl-C)."""

from __future__ import annotations

from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException


class CheckpointOnStop(L.Callback):
    """When a run is stopped by SIGTERM (a cluster's pre-emption, ``kill``) or Ctrl-C, write the file
    of every unmonitored ``ModelCheckpoint`` (e.g. ``last.ckpt``) before the run ends, so
    ``--ckpt_path last`` resumes from the moment it stopped (between two training steps: resume is
    exact). Errors (a NaN, a crash) write nothing: the last checkpoint stays the last good one."""

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if not isinstance(exception, (SIGTERMException, KeyboardInterrupt)):
            return
        for callback in trainer.checkpoint_callbacks:
            if isinstance(callback, ModelCheckpoint) and callback.monitor is None and callback.dirpath:
                name = (callback.filename or "last").replace("{", "").replace("}", "")
                trainer.save_checkpoint(Path(callback.dirpath) / f"{name}{callback.FILE_EXTENSION}")
