"""What the env-step-keyed schedules share: a linear ramp and the run's planned env steps."""

from __future__ import annotations

import math

import lightning as L

from rl_lightning.protocols import RLModuleProtocol


def linear_schedule(start: float, end: float, fraction: float, progress: float) -> float:
    """Value of a linear ramp from ``start`` to ``end`` over the first ``fraction`` of a run.

    Args:
        progress: fraction of the run done, in [0, 1] (clamped).
    """
    if fraction <= 0:
        return end
    ramp = min(1.0, max(progress, 0.0) / fraction)
    return start + ramp * (end - start)


def planned_updates(trainer: L.Trainer, pl_module: object) -> float:
    """The run's optimizer updates (``inf``: unbounded): ``max_steps``, or ``max_epochs`` epochs of an rl_lightning
    module's ``len(source)`` updates (Lightning's ``estimated_stepping_batches`` counts training steps, each of
    which runs several updates); for another module, Lightning's estimate."""
    if not getattr(pl_module, "runs_update_hooks", False):
        return trainer.estimated_stepping_batches
    trainer.estimated_stepping_batches  # noqa: B018 (builds the data source where it is not built yet)
    by_steps = math.inf if trainer.max_steps == -1 else trainer.max_steps
    epochs = trainer.max_epochs
    source = getattr(pl_module, "source", None)  # None: an offline module, whose datamodule's loader sets the epoch
    per_epoch = len(source) if source is not None else trainer.num_training_batches
    by_epochs = math.inf if epochs in (None, -1) else epochs * per_epoch
    return float(min(by_steps, by_epochs))


def planned_env_steps(trainer: L.Trainer, pl_module: RLModuleProtocol, who: str) -> float:
    """The run's environment steps, all processes: ``pl_module.planned_env_steps`` of the Trainer's
    optimizer steps (random warm-up included).

    Raises:
        ValueError: for a run without ``max_steps`` or ``max_epochs`` (naming the callback ``who``).
    """
    optimizer_steps = planned_updates(trainer, pl_module)
    if not math.isfinite(optimizer_steps):
        raise ValueError(
            f"{who} needs the run's length: set Trainer(max_steps=...) or max_epochs, "
            f"or pass {who}(total_env_steps=...)"
        )
    return float(pl_module.planned_env_steps(int(optimizer_steps)))
