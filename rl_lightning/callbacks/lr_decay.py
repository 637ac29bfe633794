"""Linear learning-rate decay keyed on environment steps."""

from __future__ import annotations

from typing import Any

import lightning as L

from rl_lightning._checks import check_float, check_int
from rl_lightning.callbacks.schedule import linear_schedule, planned_env_steps
from rl_lightning.callbacks.updates import UpdateCallback
from rl_lightning.protocols import RLModuleProtocol, require


class LinearLRDecay(UpdateCallback):
    """Set every param group's LR from its initial ``lr`` to ``lr_end`` over the first
    ``lr_frac`` of the run's environment steps, then hold ``lr_end``.

    An update's progress is ``pl_module.env_steps_before_batch / total_env_steps``: the env steps
    taken before its data was collected, so the first update uses ``lr``, the k-th VPG rollout's
    update the value after k - 1 rollouts (a ``scheduler.step()`` after each
    ``optimizer.step()``), and every minibatch of PPO's k-th rollout that value too (CleanRL's
    per-iteration annealing). ``total_env_steps`` defaults to the module's planned env steps for
    the Trainer's run (``schedule.planned_env_steps``).

    Args:
        lr_end: final learning rate.
        lr_frac: fraction of the total env steps over which to decay, in (0, 1].
        total_env_steps: the run's length in env steps (None: derived from the Trainer).
    """

    def __init__(self, lr_end: float, lr_frac: float, total_env_steps: int | None = None):
        self.lr_end = check_float("lr_end", lr_end, 0.0)
        self.lr_frac = check_float("lr_frac", lr_frac, 0.0, 1.0, low_open=True)
        self.total_env_steps = None if total_env_steps is None else check_int("total_env_steps", total_env_steps, 1)
        self._initial_lrs: list[float] = []

    def _total(self, trainer: L.Trainer, pl_module: L.LightningModule) -> float:
        if self.total_env_steps is not None:
            return float(self.total_env_steps)
        return planned_env_steps(trainer, pl_module, "LinearLRDecay")

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        require(pl_module, RLModuleProtocol, "LinearLRDecay")
        if not self._initial_lrs:  # restored from a checkpoint when resuming: the optimizer's lr is decayed
            self._initial_lrs = [group.get("initial_lr", group["lr"]) for group in trainer.optimizers[0].param_groups]
        self._total_env_steps = self._total(trainer, pl_module)

    def state_dict(self) -> dict[str, Any]:
        return {"initial_lrs": list(self._initial_lrs)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._initial_lrs = list(state_dict["initial_lrs"])

    def on_update_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Before every update, its data collected (``rl_lightning.callbacks.updates``)."""
        progress = pl_module.env_steps_before_batch / self._total_env_steps
        for group, lr in zip(trainer.optimizers[0].param_groups, self._initial_lrs, strict=True):
            group["lr"] = linear_schedule(lr, self.lr_end, self.lr_frac, progress)
