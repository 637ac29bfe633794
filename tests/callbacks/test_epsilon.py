from types import SimpleNamespace

import pytest

from rl_lightning.callbacks.epsilon import EpsilonDecay


def test_linear_schedule_values():
    schedule = EpsilonDecay(start=1.0, end=0.05, fraction=0.5, total_env_steps=1000)
    assert schedule.value(0) == 1.0
    assert schedule.value(250) == pytest.approx(0.525)
    assert schedule.value(500) == pytest.approx(0.05)
    assert schedule.value(900) == pytest.approx(0.05)
    assert schedule.value(100, total_env_steps=2000) == pytest.approx(1.0 - 0.95 * 0.1)


def test_zero_fraction_is_end_at_once():
    assert EpsilonDecay(start=1.0, end=0.1, fraction=0.0, total_env_steps=10).value(0) == 0.1


def test_callback_keys_on_env_steps_and_estimates_the_run_length():
    trainer = SimpleNamespace(estimated_stepping_batches=100, global_step=0)
    module = SimpleNamespace(env_steps=0, env_steps_per_training_step=10, epsilon=None)
    callback = EpsilonDecay(start=1.0, end=0.0, fraction=0.5)  # 100 steps x 10 -> 1000 env steps
    callback.on_train_start(trainer, module)
    assert module.epsilon == 1.0
    module.env_steps = 250  # global_step stays 0: only env steps count
    callback.on_train_batch_end(trainer, module, None, None, 0)
    assert module.epsilon == pytest.approx(0.5)
    module.env_steps = 5000
    callback.on_train_batch_end(trainer, module, None, None, 0)
    assert module.epsilon == 0.0


def test_unbounded_run_needs_total_env_steps():
    trainer = SimpleNamespace(estimated_stepping_batches=float("inf"))
    module = SimpleNamespace(env_steps=0, env_steps_per_training_step=10, epsilon=None)
    with pytest.raises(ValueError, match="total_env_steps"):
        EpsilonDecay().on_train_start(trainer, module)


@pytest.mark.parametrize(
    "kwargs",
    [{"start": 1.5}, {"end": -0.1}, {"fraction": 2.0}, {"total_env_steps": 0}, {"start": "1"}],
)
def test_validation(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        EpsilonDecay(**kwargs)
