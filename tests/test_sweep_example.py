import importlib.util
import math
import sys
from pathlib import Path

import pytest

optuna = pytest.importorskip("optuna")

_EXAMPLE = Path(__file__).parents[1] / "examples" / "sweep_optuna.py"
_spec = importlib.util.spec_from_file_location("sweep_optuna", _EXAMPLE)
sweep = importlib.util.module_from_spec(_spec)
sys.modules["sweep_optuna"] = sweep  # the NamedTuple's module, for pickling and repr
_spec.loader.exec_module(sweep)

# 10 steps per rollout: rollouts of 80 to 640 env steps, evaluations at 640, 1280 and 1920 env steps.
TINY = sweep.SweepSettings(num_steps_per_rollout=10, budget_env_steps=1920, num_eval_episodes=4, seed=3)
EVAL_POINTS = [640, 1280, 1920]


def _quiet_optuna():
    optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_tiny_settings_evaluate_every_trial_at_the_same_env_steps():
    assert TINY.eval_every_n_env_steps == 640  # 64 envs x 10 steps: a multiple of every rollout size
    assert TINY.eval_points == EVAL_POINTS
    with pytest.raises(ValueError, match="budget_env_steps"):
        sweep.objective(optuna.trial.FixedTrial({}), TINY._replace(budget_env_steps=600))


def test_study_completes_trials_that_report_each_evaluation():
    _quiet_optuna()
    study = sweep.make_study(TINY)

    study.optimize(lambda trial: sweep.objective(trial, TINY), n_trials=3)

    assert study.direction == optuna.study.StudyDirection.MAXIMIZE
    assert isinstance(study.sampler, optuna.samplers.TPESampler)
    assert isinstance(study.pruner, optuna.pruners.MedianPruner)
    assert [trial.state for trial in study.trials] == [optuna.trial.TrialState.COMPLETE] * 3
    for trial in study.trials:
        assert 1e-4 <= trial.params["lr"] <= 1e-1
        assert trial.params["num_envs"] in (8, 16, 32, 64)
        assert 0.9 <= trial.params["gamma"] <= 0.999
        # One report per evaluation point, in env steps; the objective is their mean.
        assert sorted(trial.intermediate_values) == EVAL_POINTS
        assert math.isfinite(trial.value) and 0.0 < trial.value <= 500.0
        assert trial.value == pytest.approx(sum(trial.intermediate_values.values()) / 3)
        assert trial.user_attrs["env_steps"] == 1920
    # The sampler is seeded: a new study proposes the same first trial.
    assert sweep.suggest_hyperparameters(sweep.make_study(TINY).ask()) == study.trials[0].params


def test_a_trial_the_pruner_stops_ends_at_its_first_evaluation():
    _quiet_optuna()
    # Prunes any trial at its first report (no completed trials needed, unlike the median).
    study = optuna.create_study(direction="maximize", pruner=optuna.pruners.ThresholdPruner(lower=1e9))

    study.optimize(lambda trial: sweep.objective(trial, TINY), n_trials=1)

    (trial,) = study.trials
    assert trial.state == optuna.trial.TrialState.PRUNED
    assert list(trial.intermediate_values) == [640]
    assert trial.user_attrs["env_steps"] == 640  # training stopped there, not at the budget


def test_a_solved_trial_stops_and_keeps_its_return_for_the_points_it_skipped():
    _quiet_optuna()
    study = optuna.create_study(direction="maximize")
    solved_at_once = TINY._replace(solved_return=0.0)

    study.optimize(lambda trial: sweep.objective(trial, solved_at_once), n_trials=1)

    (trial,) = study.trials
    assert trial.user_attrs["env_steps_to_solve"] == trial.user_attrs["env_steps"] == 640
    first_return = trial.intermediate_values[640]
    assert trial.intermediate_values == {640: first_return, 1280: first_return, 1920: first_return}
    assert trial.value == pytest.approx(first_return)


def test_cli_keeps_the_study_in_its_storage(tmp_path, capsys):
    storage = f"sqlite:///{tmp_path / 'sweep.db'}"
    args = ["--n_trials", "1", "--budget_env_steps", "32000", "--storage", storage, "--seed", "5"]

    sweep.main(args)
    sweep.main(args)  # resumes the same study

    output = capsys.readouterr().out
    assert "1 trials in" in output and "2 trials in" in output and "best trial" in output
    study = optuna.load_study(study_name="vpg_cartpole", storage=storage)
    assert [trial.state for trial in study.trials] == [optuna.trial.TrialState.COMPLETE] * 2
    assert all(list(trial.intermediate_values) == [32_000] for trial in study.trials)
