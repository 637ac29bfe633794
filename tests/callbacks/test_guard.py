"""RunGuard: the Trainer settings refused, the atomic CheckpointIO, no placeholder hp_metric, and the
one private Lightning attribute it sets (this test fails if Lightning renames it)."""

import warnings

import lightning as L
import pytest
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.loggers import TensorBoardLogger

from rl_lightning import VPGModule
from rl_lightning.callbacks.guard import RunGuard, disable_default_hp_metric
from rl_lightning.checkpoints import AtomicCheckpointIO


def test_lightning_still_has_the_hp_metric_attribute_the_guard_sets(tmp_path):
    logger = TensorBoardLogger(tmp_path)
    assert logger._default_hp_metric is True  # Lightning's default: a placeholder hp_metric = -1
    disable_default_hp_metric(logger)
    assert logger._default_hp_metric is False
    disable_default_hp_metric(object())  # not a TensorBoardLogger: nothing to do


def _fit(tmp_path, **trainer_kwargs):
    module = VPGModule(num_envs=4, num_steps_per_rollout=8)
    trainer = L.Trainer(
        max_steps=2,
        default_root_dir=tmp_path,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        **trainer_kwargs,
    )
    trainer.fit(module)
    return trainer


def test_a_run_writes_no_hp_metric_and_checkpoints_atomically(tmp_path):
    trainer = _fit(tmp_path, logger=TensorBoardLogger(tmp_path))
    assert type(trainer.strategy.checkpoint_io) is AtomicCheckpointIO
    events = list(tmp_path.rglob("events.out.tfevents.*"))
    assert events and not any(b"hp_metric" in path.read_bytes() for path in events)


def test_a_checkpoint_io_the_user_chose_is_kept(tmp_path):
    class Mine(TorchCheckpointIO):
        pass

    trainer = _fit(tmp_path, logger=False, plugins=[Mine()])
    assert type(trainer.strategy.checkpoint_io) is Mine


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"precision": "64-true"}, r"precision='64-true'"),
        ({"accumulate_grad_batches": 2}, r"accumulate_grad_batches=2"),
    ],
)
def test_unsupported_trainer_settings_are_refused(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        _fit(tmp_path, logger=False, **kwargs)


def test_the_expected_warnings_are_silenced_only_while_the_trainer_runs(tmp_path):
    before = list(warnings.filters)
    trainer = _fit(tmp_path, logger=False)
    [guard] = [callback for callback in trainer.callbacks if isinstance(callback, RunGuard)]  # RLModule's
    assert warnings.filters == before and guard._warnings is None
