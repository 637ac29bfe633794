"""LinearLRDecay alone: the ramp keyed on env_steps_before_batch, the run's length, its state."""

from types import SimpleNamespace

import pytest
import torch
from fake_module import FakeModule

from rl_lightning.callbacks.lr_decay import LinearLRDecay


def _trainer(lrs, estimated_stepping_batches=100):
    parameters = [torch.nn.Parameter(torch.zeros(1)) for _ in lrs]
    groups = [{"params": [parameter], "lr": lr} for parameter, lr in zip(parameters, lrs, strict=True)]
    return SimpleNamespace(
        optimizers=[torch.optim.SGD(groups)], estimated_stepping_batches=estimated_stepping_batches, global_step=0
    )


def _lrs(trainer):
    return [group["lr"] for group in trainer.optimizers[0].param_groups]


def test_every_group_ramps_from_its_own_lr_to_lr_end_over_lr_frac_of_the_env_steps():
    trainer = _trainer([1e-2, 4e-2])
    module = FakeModule(env_steps=0, env_steps_per_training_step=10)  # 100 steps x 10 -> 1000 env steps
    decay = LinearLRDecay(lr_end=0.0, lr_frac=0.5)
    decay.on_train_start(trainer, module)
    for before_batch, expected in ((0, 1.0), (250, 0.5), (500, 0.0), (900, 0.0)):
        module.env_steps_before_batch = before_batch
        decay.on_train_batch_start(trainer, module, None, 0)
        assert _lrs(trainer) == pytest.approx([1e-2 * expected, 4e-2 * expected])


def test_the_schedule_keys_on_env_steps_before_the_batch_not_on_global_step():
    trainer = _trainer([1.0])
    module = FakeModule(env_steps=0, env_steps_per_training_step=10)
    decay = LinearLRDecay(lr_end=0.5, lr_frac=1.0, total_env_steps=100)
    decay.on_train_start(trainer, module)
    module.env_steps, module.env_steps_before_batch = 90, 40  # a rollout's minibatch: the clock before it
    trainer.global_step = 77
    decay.on_train_batch_start(trainer, module, None, 0)
    assert _lrs(trainer) == pytest.approx([1.0 - 0.5 * 0.4])


def test_a_resumed_run_ramps_from_the_initial_lr_it_saved():
    trainer = _trainer([1.0])
    module = FakeModule(env_steps=0, env_steps_per_training_step=10)
    decay = LinearLRDecay(lr_end=0.0, lr_frac=1.0, total_env_steps=1000)
    decay.on_train_start(trainer, module)
    state = decay.state_dict()
    assert state == {"initial_lrs": [1.0]}
    resumed_trainer = _trainer([0.3])  # the optimizer restored mid-decay
    resumed = LinearLRDecay(lr_end=0.0, lr_frac=1.0, total_env_steps=1000)
    resumed.load_state_dict(state)
    resumed.on_train_start(resumed_trainer, module)
    module.env_steps_before_batch = 500
    resumed.on_train_batch_start(resumed_trainer, module, None, 0)
    assert _lrs(resumed_trainer) == pytest.approx([0.5])


def test_an_unbounded_run_needs_total_env_steps():
    module = FakeModule(env_steps=0, env_steps_per_training_step=10)
    with pytest.raises(ValueError, match="total_env_steps"):
        LinearLRDecay(lr_end=0.0, lr_frac=1.0).on_train_start(_trainer([1.0], float("inf")), module)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"lr_end": -1.0, "lr_frac": 0.5}, ValueError, "lr_end"),
        ({"lr_end": 0.0, "lr_frac": 0.0}, ValueError, "lr_frac"),
        ({"lr_end": 0.0, "lr_frac": 1.5}, ValueError, "lr_frac"),
        ({"lr_end": 0.0, "lr_frac": 0.5, "total_env_steps": 0}, ValueError, "total_env_steps"),
        ({"lr_end": "0", "lr_frac": 0.5}, TypeError, "lr_end"),
    ],
)
def test_settings_are_checked(kwargs, error, match):
    with pytest.raises(error, match=match):
        LinearLRDecay(**kwargs)
