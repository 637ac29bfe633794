"""Stop requests (SIGTERM) that every DDP rank agrees on.

Lightning's own SIGTERM handler broadcasts from inside the signal handler: a rank interrupted while
the others are in a backward pass waits forever (4 of 11 SIGTERMs to ``train_ppo.py --devices 2
--strategy ddp`` hung). ``CollectiveStop`` replaces it under DDP with one that only notes the request
(and, on the launching rank, forwards the signal to the others, as Lightning's does); ``requested``
turns it into a stop every rank agrees on, by an all-reduce at points every rank reaches.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

import lightning as L
import torch


def _signal_connector(trainer: L.Trainer) -> Any:
    """Lightning's private signal connector (``received_sigterm``, ``_original_handlers``): the one place
    that reaches it; ``tests/test_stopping.py`` fails if Lightning renames it."""
    return getattr(trainer, "_signal_connector", None)


class CollectiveStop:
    """The stop flag of one run: ``install`` at the start of training, ``requested`` at the points every
    rank calls it (the sources' checks, each batch's start)."""

    def __init__(self) -> None:
        self.active = False  # installed: DDP with more than one process
        self._pending = False  # a SIGTERM noted here, not yet agreed on

    def install(self, trainer: L.Trainer) -> None:
        self.active, self._pending = False, False
        connector = _signal_connector(trainer)
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        if not distributed or trainer.world_size <= 1 or connector is None:
            return
        if threading.current_thread() is not threading.main_thread():
            return
        original = getattr(connector, "_original_handlers", {}).get(signal.SIGTERM)
        forwarded = []

        def note_sigterm(signum: int, frame: Any) -> None:
            self._pending = True
            launcher = trainer.strategy.launcher
            if not forwarded and launcher is not None and callable(getattr(launcher, "kill", None)):
                forwarded.append(True)
                launcher.kill(signum)
            if callable(original):  # the script's own handler (run_script's)
                original(signum, frame)

        signal.signal(signal.SIGTERM, note_sigterm)  # Lightning's teardown restores the original
        self.active = True

    def requested(self, trainer: L.Trainer) -> bool:
        """Whether the run was asked to stop; under DDP agreed by all ranks (every rank must call it)."""
        if not self.active:
            return trainer.received_sigterm
        flag = torch.tensor([int(self._pending or trainer.received_sigterm)], device=trainer.strategy.root_device)
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        if flag.item():
            _signal_connector(trainer).received_sigterm = True  # Lightning's own checks agree too
            disarm_child_process_observer()
        return bool(flag.item())


#: The name of Lightning's thread that watches a launching rank's child ranks (``_ChildProcessObserver``).
_OBSERVER_THREAD = "child-process-observer"


def disarm_child_process_observer() -> int:
    """Keep Lightning's child-process observer (a launching rank's thread that SIGKILLs every rank, itself included,
    once a child rank exits with a non-zero code) from killing a run that is stopping as agreed: a rank that exits 143
    a moment before the launching rank would otherwise turn the launching rank's 143 into -9 (SIGKILL) now and then.
    ``run_script`` still kills ranks that do not stop within its timeout. Returns the observers disarmed."""
    disarmed = 0
    for thread in threading.enumerate():
        if thread.name == _OBSERVER_THREAD and callable(getattr(thread, "_terminate_all", None)):
            thread._terminate_all = lambda: None
            disarmed += 1
    return disarmed
