"""Linear epsilon decay for epsilon-greedy exploration, keyed on environment steps."""

from __future__ import annotations

from typing import Any

import lightning as L

from rl_lightning._checks import check_float, check_int
from rl_lightning.callbacks.schedule import linear_schedule, planned_env_steps
from rl_lightning.callbacks.updates import UpdateCallback
from rl_lightning.protocols import EpsilonGreedyProtocol, require


class EpsilonDecay(UpdateCallback):
    """Sets ``pl_module.epsilon`` (:class:`~rl_lightning.protocols.EpsilonGreedyProtocol`) from
    ``pl_module.env_steps``: linear from ``start`` to ``end`` over the first ``fraction`` of the
    run's env steps, then ``end``.

    The value is set at the start of training and after every update, i.e. before the env steps
    of the next one.

    Args:
        start: epsilon at env step 0, in [0, 1].
        end: epsilon after the decay, in [0, 1].
        fraction: part of the run's env steps the decay spans, in [0, 1] (0: ``end`` at once).
        total_env_steps: the run's env steps; None: the module's planned env steps for the
            Trainer's run, random warm-up included (``schedule.planned_env_steps``).
    """

    def __init__(
        self, start: float = 1.0, end: float = 0.05, fraction: float = 0.5, total_env_steps: int | None = None
    ):
        self.start = check_float("start", start, 0.0, 1.0)
        self.end = check_float("end", end, 0.0, 1.0)
        self.fraction = check_float("fraction", fraction, 0.0, 1.0)
        self.total_env_steps = None if total_env_steps is None else check_int("total_env_steps", total_env_steps, 1)

    def value(self, env_steps: int, total_env_steps: int | float | None = None) -> float:
        """Epsilon after ``env_steps`` env steps of a run of ``total_env_steps``."""
        total = self.total_env_steps if total_env_steps is None else total_env_steps
        if total is None:
            raise ValueError("total_env_steps is unknown: pass it here or to EpsilonDecay(total_env_steps=...)")
        return linear_schedule(self.start, self.end, self.fraction, env_steps / total)

    def on_train_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        require(pl_module, EpsilonGreedyProtocol, "EpsilonDecay")
        if self.total_env_steps is None:
            self._run_env_steps = planned_env_steps(trainer, pl_module, "EpsilonDecay")
        else:
            self._run_env_steps = self.total_env_steps
        # A resumed run keeps the epsilon its checkpoint holds: the one the next collection would have
        # used. (Recomputing it from the restored env steps differs when the run stopped inside a
        # collection, e.g. a SIGTERM during the random warm-up, whose collection started at epsilon_start.)
        if getattr(trainer, "ckpt_path", None) is None:
            pl_module.epsilon = self.value(pl_module.env_steps, self._run_env_steps)

    def on_update_end(self, trainer: L.Trainer, pl_module: Any, loss: Any) -> None:
        """After every update, before the next collection (``rl_lightning.callbacks.updates``)."""
        pl_module.epsilon = self.value(pl_module.env_steps, self._run_env_steps)
