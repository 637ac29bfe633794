"""The tests' short fits: a Trainer that writes no logs or checkpoints and prints no bar or summary."""

import lightning as L
from lightning.pytorch.callbacks import EarlyStopping

from rl_lightning.callbacks import Evaluation

QUIET = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False}


def quiet_trainer(**kwargs) -> L.Trainer:
    """``L.Trainer(**kwargs)`` with :data:`QUIET`'s settings unless ``kwargs`` sets them."""
    return L.Trainer(**{**QUIET, **kwargs})


def quiet_fit(module: L.LightningModule, max_steps: int) -> L.Trainer:
    """Fit ``module`` for ``max_steps`` optimizer steps with a :func:`quiet_trainer`; returns the Trainer."""
    trainer = quiet_trainer(max_steps=max_steps)
    trainer.fit(module)
    return trainer


def fit_until_solved(
    module: L.LightningModule,
    threshold: float,
    max_steps: int,
    every: int = 4_000,
    monitor: str = "eval/episodic_return",
) -> Evaluation:
    """The learning tests' fit: a greedy evaluation of 32 episodes every ``every`` env steps, stopping once ``monitor``
    reaches ``threshold`` or after ``max_steps`` updates; returns the evaluation (its ``last_metrics``, ``history``)."""
    evaluation = Evaluation(every_n_env_steps=every, num_eval_episodes=32)
    stop = EarlyStopping(
        monitor=monitor, stopping_threshold=threshold, mode="max", patience=10**9, check_on_train_epoch_end=True
    )
    quiet_trainer(max_steps=max_steps, callbacks=[evaluation, stop]).fit(module)
    return evaluation
