from types import SimpleNamespace

import pytest
from fake_module import FakeModule

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
    module = FakeModule(env_steps=0, env_steps_per_training_step=10)
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
    module = FakeModule(env_steps=0, env_steps_per_training_step=10)
    with pytest.raises(ValueError, match="total_env_steps"):
        EpsilonDecay().on_train_start(trainer, module)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"start": 1.5}, ValueError),
        ({"end": -0.1}, ValueError),
        ({"fraction": 2.0}, ValueError),
        ({"total_env_steps": 0}, ValueError),
        ({"start": "1"}, TypeError),
        ({"fraction": float("nan")}, ValueError),
    ],
)
def test_validation(kwargs, error):
    with pytest.raises(error, match=next(iter(kwargs))):
        EpsilonDecay(**kwargs)


def test_a_module_without_epsilon_is_refused_naming_what_is_missing():
    from rl_lightning import VPGModule

    with pytest.raises(TypeError, match=r"EpsilonDecay.*EpsilonGreedyProtocol.*VPGModule lacks epsilon"):
        EpsilonDecay(total_env_steps=10).on_train_start(None, VPGModule(env_id="Probe1-v0"))


def test_decay_spans_the_run_including_the_random_warm_up():
    """DQN's run = learning_starts random env steps + one vectorised step per update, so with
    fraction 1 epsilon reaches its end exactly at the run's last env step."""
    import lightning as L

    from rl_lightning import DQNModule

    module = DQNModule(env_id="Probe1-v0", num_envs=4, learning_starts=30, batch_size=8, steps_per_epoch=5)
    seen = []

    class Spy(L.Callback):
        def on_update_end(self, trainer, pl_module, loss):  # every update, after EpsilonDecay's
            seen.append((pl_module.env_steps, pl_module.epsilon))

    decay = EpsilonDecay(start=1.0, end=0.0, fraction=1.0)
    module.configure_callbacks = lambda: [decay, Spy()]
    trainer = L.Trainer(max_steps=10, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(module)
    assert module.planned_env_steps(10) == 32 + 10 * 4  # warm-up rounded up to whole vector steps
    assert seen[-1] == (72, pytest.approx(0.0))
    assert seen[0] == (36, pytest.approx(1.0 - 36 / 72))
