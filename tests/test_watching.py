"""Watching a run: env steps as TensorBoard's x-axis, evaluation written only when it ran, no
hp_metric, and one progress bar over the run's env steps."""

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rl_lightning import DQNModule, PPOModule, VPGModule
from rl_lightning.callbacks import Evaluation
from rl_lightning.progress import RLProgressBar


def _scalars(log_dir: str) -> dict[str, list[tuple[int, float]]]:
    events = EventAccumulator(log_dir, size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def _fit(module, tmp_path, max_steps, **kwargs):
    logger = TensorBoardLogger(tmp_path, name="run")
    trainer = L.Trainer(
        max_steps=max_steps,
        logger=logger,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **kwargs,
    )
    trainer.fit(module)
    return trainer, _scalars(logger.log_dir)


def test_vpg_curves_are_plotted_against_env_steps(tmp_path):
    module = VPGModule(env_id="Probe3-v0", num_envs=4, num_steps_per_rollout=10)
    _, scalars = _fit(module, tmp_path, 3, log_every_n_steps=1)
    # one point per rollout (an epoch), at the env steps after it: 40, 80, 120
    assert [step for step, _ in scalars["charts/episodic_return"]] == [40, 80, 120]
    assert [value for _, value in scalars["charts/env_steps"]] == [40.0, 80.0, 120.0]
    assert [step for step, _ in scalars["losses/policy_objective"]] == [40, 80, 120]
    assert "hp_metric" not in scalars and "epoch" not in scalars


def test_dqn_step_and_epoch_curves_use_env_steps_and_eval_is_written_only_when_it_ran(tmp_path):
    module = DQNModule(env_id="Probe3-v0", num_envs=4, learning_starts=8, batch_size=8, steps_per_epoch=5)
    evaluation = Evaluation(every_n_env_steps=40, num_eval_episodes=4)
    _, scalars = _fit(module, tmp_path, 20, log_every_n_steps=5, callbacks=[evaluation])
    # warm-up 8 env steps, then 4 per update: a log every 5 updates is at 8 + 4 * 5k
    assert [step for step, _ in scalars["losses/td_loss"]] == [28, 48, 68, 88]
    # epochs end at 28, 48, 68, 88; evaluations at 28 (first), then once 40 more env steps passed: 68
    assert [step for step, _ in scalars["eval/episodic_return"]] == [28, 68, 88]  # 88: at train end
    assert [env_steps for env_steps, _ in evaluation.history] == [28, 68, 88]
    assert all(value == 1.0 for _, value in scalars["eval/episodic_return"])


def test_ppo_curves_use_env_steps_in_a_csv_logger_too(tmp_path):
    module = PPOModule(env_id="Probe1-v0", num_envs=4, num_steps_per_rollout=4, update_epochs=1, num_minibatches=2)
    trainer = L.Trainer(
        max_steps=4,
        logger=CSVLogger(tmp_path),
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,
    )
    trainer.fit(module)
    import csv

    with open(trainer.logger.experiment.metrics_file_path) as file:
        rows = list(csv.DictReader(file))
    steps = sorted({int(row["step"]) for row in rows if row.get("losses/policy_loss")})
    assert steps == [16, 32]  # two rollouts of 4 x 4 env steps


def test_the_progress_bar_replaces_lightnings_and_spans_the_run_in_env_steps(capsys):
    module = VPGModule(env_id="Probe3-v0", num_envs=4, num_steps_per_rollout=10)
    trainer = L.Trainer(max_steps=3, logger=False, enable_checkpointing=False, enable_model_summary=False)
    trainer.fit(module)
    bars = [callback for callback in trainer.callbacks if isinstance(callback, RLProgressBar)]
    assert len(bars) == 1 and trainer.progress_bar_callback is bars[0]
    assert bars[0]._total == 120
    out = capsys.readouterr().out  # stdout is not a terminal under pytest: status lines, no bar
    assert "env steps 120/120 (100%)" in out and "return 1.0" in out
    assert "\r" not in out and "Epoch 0" not in out


@pytest.mark.parametrize("rich_installed", [False, True])
def test_lightnings_default_bar_is_replaced_whether_it_is_tqdm_or_rich(rich_installed, monkeypatch):
    # Lightning's default bar is Rich where the rich package is installed (minari's dependencies install it)
    from lightning.pytorch.trainer.connectors import callback_connector

    monkeypatch.setattr(callback_connector, "_RICH_AVAILABLE", rich_installed)
    trainer = L.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_model_summary=False)
    trainer.fit(VPGModule(env_id="Probe1-v0", num_envs=2, num_steps_per_rollout=2))
    assert type(trainer.progress_bar_callback) is RLProgressBar


def test_status_line_has_eta_and_the_same_fields_for_every_algorithm():
    bar = RLProgressBar()
    bar._total, bar._start_env_steps = 1000, 0
    line = bar.status_line(250, 5.0, {"SPS": "50", "return": "20.0", "eval": "30.0"})
    assert line == "env steps 250/1,000 (25%), 5.0 s, ETA 15.0 s, SPS 50, return 20.0, eval 30.0"


def test_a_progress_bar_of_the_users_is_kept():
    from lightning.pytorch.callbacks import TQDMProgressBar

    class UsersBar(TQDMProgressBar):
        pass

    user_bar = UsersBar()
    trainer = L.Trainer(max_steps=1, logger=False, enable_checkpointing=False, callbacks=[user_bar])
    trainer.fit(VPGModule(env_id="Probe1-v0", num_envs=2, num_steps_per_rollout=2))
    assert trainer.progress_bar_callback is user_bar


def test_env_steps_before_batch_is_what_per_update_schedules_see():
    module = DQNModule(env_id="Probe1-v0", num_envs=4, learning_starts=8, batch_size=8, steps_per_epoch=3)
    L.Trainer(max_steps=3, logger=False, enable_checkpointing=False, enable_progress_bar=False).fit(module)
    assert module.env_steps == 8 + 3 * 4 and module.env_steps_before_batch == 8 + 2 * 4
    assert torch.is_tensor(torch.tensor(module.env_steps))
