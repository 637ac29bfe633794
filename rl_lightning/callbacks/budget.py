"""A run's length in environment steps (SB3's ``total_timesteps``) instead of optimizer steps."""

from __future__ import annotations

import lightning as L

from rl_lightning._checks import check_int
from rl_lightning.protocols import EnvStepBudgetProtocol, require


class EnvStepBudget(L.Callback):
    """Train for ``total_env_steps`` environment steps (all processes, random warm-up included).

    When fitting starts it sets the Trainer's ``max_steps`` to the fewest optimizer steps whose env
    steps reach the budget (``pl_module.optimizer_steps_for``: whole rollouts, so a run may end a
    little past it), so the progress bar, ``LinearLRDecay``, ``EpsilonDecay`` and everything else
    that plans over the run's env steps plans over this budget. ``max_steps`` counts updates,
    which mean different amounts of experience for each algorithm; this is the same for all.

    The Trainer must not set a length of its own: ``Trainer(max_steps=...)`` is a ``ValueError``,
    and ``max_epochs`` must be ``-1`` or large enough for the budget (Lightning's default of 1000
    epochs is ~512k env steps for PPO's defaults, one rollout per epoch).

    Args:
        total_env_steps: the run's env steps.
    """

    def __init__(self, total_env_steps: int):
        self.total_env_steps = check_int("total_env_steps", total_env_steps, 1)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        require(pl_module, EnvStepBudgetProtocol, "EnvStepBudget")
        if trainer.max_steps != -1:
            raise ValueError(
                f"EnvStepBudget(total_env_steps={self.total_env_steps}) sizes the run in env steps, but the Trainer "
                f"also has max_steps={trainer.max_steps}: give one of the two"
            )
        self._optimizer_steps = pl_module.optimizer_steps_for(self.total_env_steps)
        # Lightning (2.6) has no public setter for max_steps; the epoch loop's attribute is what it reads.
        trainer.fit_loop.epoch_loop.max_steps = self._optimizer_steps

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # The epoch length is known once the data source exists.
        # Updates per epoch: an rl_lightning module's training step runs several (len(source) per epoch).
        source = getattr(pl_module, "source", None)
        max_epochs = trainer.max_epochs
        per_epoch = len(source) if source is not None else trainer.num_training_batches
        if max_epochs in (None, -1) or not isinstance(per_epoch, int) or per_epoch < 1:
            return
        epochs_needed = -(-self._optimizer_steps // per_epoch)
        if epochs_needed > max_epochs:
            raise ValueError(
                f"Trainer(max_epochs={max_epochs}) would end the run before EnvStepBudget's "
                f"{self.total_env_steps:,} env steps ({self._optimizer_steps} optimizer steps in {epochs_needed} "
                "epochs): pass max_epochs=-1"
            )
