"""Leave a resumable checkpoint when a run is asked to stop (SIGTERM, Ctrl-C, SLURM's requeue signal)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException

#: Lightning's name for a SLURM requeue checkpoint in ``default_root_dir``; its ``fit`` resumes from the highest
#: number there when it runs under SLURM and is given no ``ckpt_path``.
_HPC_CHECKPOINT = re.compile(r"hpc_ckpt_(\d+)\.ckpt")


class CheckpointOnStop(L.Callback):
    """When a run is stopped by SIGTERM (a cluster's pre-emption, ``kill``) or Ctrl-C, write the file
    of every unmonitored ``ModelCheckpoint`` (e.g. ``last.ckpt``) before the run ends, so
    ``--ckpt_path last`` resumes from the moment it stopped (between two training steps: resume is
    exact). Errors (a NaN, a crash) write nothing: the last checkpoint stays the last good one; so does
    a stop before training started (the module is not yet restored: a file then would lose the run).

    Under SLURM with requeueing (Lightning's ``SLURMEnvironment``, detected from the ``SLURM_*`` variables, with
    ``auto_requeue=True``, its default), the requeue signal (``SIGUSR1``; ``#SBATCH --signal=SIGUSR1@90``) is
    such a stop too: every rank stops at the same step, the run writes ``last.ckpt`` and Lightning's
    ``<default_root_dir>/hpc_ckpt_N.ckpt``, and rank 0 calls ``scontrol requeue <job id>``. The requeued job (the
    same command) resumes from that file exactly: Lightning's ``fit`` picks it under SLURM when no ``ckpt_path``
    is given. Lightning's own handler, which this one replaces, saves from inside the signal handler wherever
    the run is (mid-rollout: not an exact resume; under DDP a collective that can hang) and trains on.
    """

    def __init__(self) -> None:
        # "setup" (restoring, starting DDP), "started" (on_train_start: restored), "training" (a step began), "idle"
        self._phase = "idle"
        self._requeue_signal: int | None = None  # installed for this fit
        self._previous_handler: Any = None
        self._requeue_requested = False  # the requeue signal reached this process
        self._deferred = False  # ... before training started: the stop is asked for at the first step

    # -- SLURM's requeue signal -------------------------------------------------------------------

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._phase, self._requeue_requested, self._deferred = "setup", False, False
        requeue_signal = _requeue_signal(trainer) if stage == "fit" else None
        if requeue_signal is None or threading.current_thread() is not threading.main_thread():
            return
        current = signal.getsignal(requeue_signal)
        if isinstance(getattr(current, "__self__", None), CheckpointOnStop):  # this one's, or one of an earlier fit
            current = current.__self__._previous_handler
        elif current not in (signal.SIG_DFL, None):
            return  # the user's own handler: Lightning would keep it too
        # Installed before Lightning registers its handlers, which then leaves the signal to this one.
        self._previous_handler, self._requeue_signal = current, requeue_signal
        signal.signal(requeue_signal, self._on_requeue_signal)

    def _on_requeue_signal(self, signum: int, frame: Any) -> None:
        if self._phase == "idle" or self._requeue_requested:
            return  # after the fit (nothing to requeue), or a stop is under way already
        self._requeue_requested = True
        if self._phase == "training":
            _request_stop(signum, frame)
        else:
            # Setting up (DDP, restoring) or starting: the run's collective stop is not in place yet.
            self._deferred = True  # stopped at the first step

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._phase = "started"

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._phase = "training"
        if self._deferred:
            self._deferred = False
            _request_stop(self._requeue_signal or signal.SIGTERM, None)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._phase = "idle"
        self._restore_handler(trainer)

    def _restore_handler(self, trainer: L.Trainer) -> None:
        """Put back the requeue signal's handler from before the fit (also where Lightning keeps it, to restore
        when a fit ends by an exception: after this callback's hooks)."""
        if self._requeue_signal is None or threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(self._requeue_signal) == self._on_requeue_signal:
            signal.signal(self._requeue_signal, self._previous_handler)
        saved = getattr(getattr(trainer, "_signal_connector", None), "_original_handlers", None)
        if isinstance(saved, dict) and saved.get(self._requeue_signal) == self._on_requeue_signal:
            saved[self._requeue_signal] = self._previous_handler
        self._requeue_signal = None

    # -- the stop ---------------------------------------------------------------------------------

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        training, self._phase = self._phase in ("started", "training"), "idle"  # a later requeue signal is ignored
        try:
            if isinstance(exception, (SIGTERMException, KeyboardInterrupt)) and training:
                self._save_stop_checkpoints(trainer, requeue=isinstance(exception, SIGTERMException))
        finally:
            self._restore_handler(trainer)

    def _save_stop_checkpoints(self, trainer: L.Trainer, requeue: bool) -> None:
        for callback in trainer.checkpoint_callbacks:
            if isinstance(callback, ModelCheckpoint) and callback.monitor is None and callback.dirpath:
                name = (callback.filename or "last").replace("{", "").replace("}", "")
                trainer.save_checkpoint(Path(callback.dirpath) / f"{name}{callback.FILE_EXTENSION}")
        # Every rank stopped at this step (a SIGTERMException is agreed on): all learn whether one was asked to requeue.
        if (
            requeue
            and self._requeue_signal is not None
            and trainer.strategy.reduce_boolean_decision(self._requeue_requested, all=False)
        ):
            path = hpc_checkpoint_path(trainer.default_root_dir)
            trainer.save_checkpoint(path)  # every rank: the data sources' states are gathered
            if trainer.is_global_zero:
                print(_requeue(path), file=sys.stderr, flush=True)


def _requeue_signal(trainer: L.Trainer) -> int | None:
    """The requeue signal of the Trainer's ``SLURMEnvironment`` if it requeues (None otherwise)."""
    from lightning.fabric.plugins.environments import SLURMEnvironment

    # Lightning's signal connector reads the same (private) attribute.
    environment = getattr(getattr(trainer, "_accelerator_connector", None), "cluster_environment", None)
    if isinstance(environment, SLURMEnvironment) and environment.auto_requeue:
        return environment.requeue_signal
    return None


def _request_stop(signum: int, frame: Any) -> None:
    """Ask the run to stop as a SIGTERM does (at the next step every rank agrees on), saying ``signum``: the run's
    SIGTERM handler is called (Lightning's, the module's collective one, the script's) rather than a SIGTERM
    sent, so the script reports the signal that came."""
    handler = signal.getsignal(signal.SIGTERM)
    if callable(handler):
        handler(signum, frame)
    else:
        os.kill(os.getpid(), signal.SIGTERM)


def hpc_checkpoint_path(root_dir: str | Path) -> Path:
    """``<root_dir>/hpc_ckpt_<N + 1>.ckpt``, N the highest number there (0 if none): the file Lightning's requeue
    writes and, under SLURM with no ``ckpt_path``, ``Trainer.fit`` resumes from."""
    numbers = [
        int(match[1])
        for path in Path(root_dir).glob("hpc_ckpt_*.ckpt")
        if (match := _HPC_CHECKPOINT.fullmatch(path.name))
    ]
    return Path(root_dir) / f"hpc_ckpt_{max(numbers, default=0) + 1}.ckpt"


def _requeue(checkpoint: Path) -> str:
    """Requeue this SLURM job (``scontrol requeue``, as Lightning does); what happened, in one line."""
    array_job = os.environ.get("SLURM_ARRAY_JOB_ID")
    job = os.environ.get("SLURM_JOB_ID", "")
    if array_job:
        job = f"{array_job}_{os.environ.get('SLURM_ARRAY_TASK_ID', '')}"
    said = f"SLURM requeue signal: checkpoint {checkpoint}; "
    if not re.fullmatch(r"[0-9_]+", job):
        return said + f"no job to requeue (SLURM_JOB_ID={job!r})"
    try:
        result = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        return said + f"`scontrol requeue {job}` failed ({error}): resubmit the job"
    if result.returncode != 0:
        reason = (result.stderr or result.stdout).strip().splitlines()[-1:] or [f"exit status {result.returncode}"]
        return said + f"`scontrol requeue {job}` failed ({reason[0]}): resubmit the job"
    return said + f"job {job} requeued: it resumes from there"
