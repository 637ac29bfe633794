"""EnvStepBudget: a run's length in env steps, the same meaning for every algorithm."""

import lightning as L
import pytest

from rl_lightning import DQNModule, PPOModule, VPGModule
from rl_lightning.callbacks import EnvStepBudget


def _fit(module, budget, **trainer_kwargs):
    trainer = L.Trainer(
        callbacks=[budget],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **{"max_epochs": -1, **trainer_kwargs},
    )
    trainer.fit(module)
    return trainer


@pytest.mark.parametrize(
    ("module", "total", "env_steps", "updates"),
    [
        # whole rollouts of 8 x 25 = 200 env steps: 1,000 -> 5 rollouts, one update each
        (VPGModule(num_envs=8, num_steps_per_rollout=25), 1_000, 1_000, 5),
        # 16 x 32 = 512 per rollout, 16 updates each: 1,100 -> 3 rollouts
        (PPOModule(), 1_100, 1_536, 48),
        # 1,008 random warm-up steps (1,000 rounded to whole steps of 16 envs), then 16 per update
        (DQNModule(buffer_size=2_000), 1_500, 1_504, 31),
    ],
    ids=["vpg", "ppo", "dqn"],
)
def test_the_budget_is_the_fewest_whole_collections_that_reach_it(module, total, env_steps, updates):
    assert module.optimizer_steps_for(total) == updates
    assert module.planned_env_steps(updates) == env_steps
    trainer = _fit(module, EnvStepBudget(total))
    assert module.env_steps == env_steps and trainer.global_step == updates


def test_a_budget_and_max_steps_together_are_an_error():
    with pytest.raises(ValueError, match=r"also has max_steps=5: give one of the two"):
        _fit(VPGModule(num_envs=2, num_steps_per_rollout=5), EnvStepBudget(100), max_steps=5)


def test_max_epochs_that_would_cut_the_budget_short_is_an_error():
    with pytest.raises(ValueError, match=r"Trainer\(max_epochs=2\) would end the run.*pass max_epochs=-1"):
        _fit(VPGModule(num_envs=2, num_steps_per_rollout=5), EnvStepBudget(100), max_epochs=2)


def test_bad_budgets_are_refused():
    with pytest.raises(ValueError, match="total_env_steps"):
        EnvStepBudget(0)
    with pytest.raises(TypeError, match="total_env_steps"):
        EnvStepBudget(1e5)
