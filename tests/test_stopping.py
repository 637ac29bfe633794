"""CollectiveStop: a SIGTERM outside DDP is Lightning's own flag; the private signal connector it reads
exists (this test fails if Lightning renames it)."""

import lightning as L

from rl_lightning.stopping import CollectiveStop, _signal_connector


def test_lightning_still_has_the_signal_connector_collective_stop_uses():
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False)
    connector = _signal_connector(trainer)
    assert connector is not None and hasattr(connector, "received_sigterm")
    assert isinstance(getattr(connector, "_original_handlers", {}), dict)


def test_one_process_uses_the_trainers_own_flag():
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False)
    stop = CollectiveStop()
    stop.install(trainer)
    assert not stop.active  # not distributed: Lightning's handler stays
    assert stop.requested(trainer) is False
    _signal_connector(trainer).received_sigterm = True
    assert stop.requested(trainer) is True


def test_an_agreed_stop_disarms_lightnings_child_process_observer():
    """Lightning's observer SIGKILLs every rank once a child rank exits non-zero: a stopping run's child exiting 143
    first would turn the launching rank's 143 into -9. The stop disarms it (the thread keeps running, killing
    nothing)."""
    import threading

    from lightning.fabric.strategies.launchers.subprocess_script import _ChildProcessObserver

    from rl_lightning.stopping import disarm_child_process_observer

    killed = []
    observer = _ChildProcessObserver(main_pid=-1, child_processes=[], sleep_period=1)
    assert observer.name == "child-process-observer"  # the name disarm_child_process_observer looks for
    observer._terminate_all = lambda: killed.append(True)
    release = threading.Event()
    observer.run = release.wait  # alive (enumerated) without polling anything
    observer.start()
    try:
        assert disarm_child_process_observer() == 1
        observer._terminate_all()
        assert killed == []
    finally:
        release.set()
        observer.join()
