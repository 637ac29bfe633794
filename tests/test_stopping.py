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
