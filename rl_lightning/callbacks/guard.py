"""``RunGuard``: what every rl_lightning run needs from the Trainer, in one callback ``RLModule`` adds.

- the Trainer settings the modules cannot honour are refused (a precision other than float32 or
  mixed, gradient accumulation: ``check_trainer_settings``, which the command line also calls);
- checkpoints are written atomically (``AtomicCheckpointIO``), unless the Trainer was given its own
  ``CheckpointIO``;
- TensorBoard gets no placeholder ``hp_metric = -1`` curve;
- a loss or weight that stops being finite stops the run with a clear error, before any checkpoint
  of it is written;
- Lightning's warnings about what the modules do on purpose are silenced while the Trainer runs the
  module (setup to teardown), never on import.
"""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym
import lightning as L
import numpy as np
import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.loggers import TensorBoardLogger

from rl_lightning.callbacks.updates import UpdateCallback
from rl_lightning.checkpoints import AtomicCheckpointIO

SUPPORTED_PRECISIONS = ("32-true", "32", "bf16-mixed", "16-mixed")
#: Finite action bounds beyond this name the bounds in the NaN guard's advice instead of the learning rate.
LARGE_ACTION_BOUND = 1e3

# The data sources define __len__ (a length Lightning does not prefetch, which keeps on-policy data
# on-policy; they run in the main process, so its multi-worker caveat does not apply), on-policy epochs
# can be shorter than log_every_n_steps (their charts are logged per epoch), validation is empty during
# fit (greedy evaluation is the Evaluation callback's), Lightning 2.6's own pytree helper trips torch
# >= 2.10's LeafSpec deprecation on every run (nothing a user can act on), and Lightning calls the
# training_step(self, dataloader_iter) form, which the layers' loops use by design, experimental (twice per run).
EXPECTED_WARNINGS = (
    r"Found `dataloader_iter` argument in the `training_step`",
    r"You are using the `dataloader_iter` step flavor",
    r"Your `IterableDataset` has `__len__` defined",
    r"The number of training batches \(\d+\) is smaller than the logging interval",
    r"Total length of `list` across ranks is zero",
    r"`isinstance\(treespec, LeafSpec\)` is deprecated",
    # under DDP the charts, losses and evaluations are reduced over the ranks before they are logged
    r"It is recommended to use `self.log\('(charts/|losses/|eval/|test/|step'|env_steps'|SPS'|return')",
)
# validate / test of a checkpoint play greedy episodes: the training callbacks' states it holds (and
# where its checkpoints were written) do not matter there.
EXPECTED_EVALUATION_WARNINGS = (
    r"Be aware that when using `ckpt_path`, callbacks used to create the checkpoint need to be provided",
    r"The dirpath has changed from",
)


def disable_default_hp_metric(logger: Any) -> None:
    """No placeholder ``hp_metric = -1`` from a ``TensorBoardLogger`` (Lightning adds one unless built with
    ``default_hp_metric=False``; a logger the user built is told here). The one place that sets
    Lightning's private attribute: ``tests/callbacks/test_guard.py`` fails if Lightning renames it."""
    if isinstance(logger, TensorBoardLogger):
        logger._default_hp_metric = False  # Lightning 2.6: TensorBoardLogger has no public setter


def check_trainer_settings(trainer: L.Trainer) -> None:
    """Refuse the Trainer settings the modules cannot honour (``RunGuard`` at setup; the command line right
    after it builds the Trainer, as a usage error): a precision other than float32 or mixed, gradient
    accumulation."""
    precision = str(trainer.precision)
    if precision not in SUPPORTED_PRECISIONS:
        raise ValueError(
            f"Trainer(precision={precision!r}) is not supported: the envs produce float32 observations for "
            f"float32 networks; use precision='32-true', or 'bf16-mixed' / '16-mixed' for mixed precision"
        )
    if trainer.accumulate_grad_batches != 1:
        raise ValueError(
            f"Trainer(accumulate_grad_batches={trainer.accumulate_grad_batches}) is not supported: every batch is "
            "fresh experience and the schedules count env steps per optimizer step; use accumulate_grad_batches=1, "
            "and for bigger updates raise num_envs, num_steps_per_rollout or batch_size instead"
        )


class RunGuard(UpdateCallback):
    """Refuse the Trainer settings the modules cannot honour, write checkpoints atomically, drop the
    placeholder ``hp_metric``, stop a run whose loss or weights became NaN, and silence Lightning's
    expected warnings, from setup to teardown."""

    def __init__(self) -> None:
        self._warnings: warnings.catch_warnings | None = None
        self._finite: torch.Tensor | None = None  # whether losses and weights stayed finite since the last read
        self._weights: list[torch.Tensor] = []  # detached views of the module's parameters (they update in place)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        check_trainer_settings(trainer)
        self.enter_warning_scope(trainer)
        if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:  # not a CheckpointIO the user chose
            trainer.strategy.checkpoint_io = AtomicCheckpointIO()
        for logger in trainer.loggers:
            disable_default_hp_metric(logger)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._leave_warning_scope()

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._leave_warning_scope()

    def enter_warning_scope(self, trainer: L.Trainer) -> None:
        """Silence Lightning's expected warnings (``EXPECTED_WARNINGS``; validate / test also
        ``EXPECTED_EVALUATION_WARNINGS``) until teardown. The module enters it as it hands the guard to the Trainer
        (``configure_callbacks``), before Lightning checks the loop; ``setup`` enters it for a guard given otherwise."""
        if self._warnings is not None:  # left in teardown (or on_exception)
            return
        self._warnings = warnings.catch_warnings()
        self._warnings.__enter__()
        evaluating = str(getattr(trainer.state.fn, "value", trainer.state.fn)) in ("validate", "test")
        for message in EXPECTED_WARNINGS + (EXPECTED_EVALUATION_WARNINGS if evaluating else ()):
            warnings.filterwarnings("ignore", message=message)

    def _leave_warning_scope(self) -> None:
        if self._warnings is not None:
            self._warnings.__exit__(None, None, None)
            self._warnings = None

    # -- the NaN guard: every step on the CPU; elsewhere accumulated on the device and read at log steps
    # -- and before a checkpoint is written (a read is a device sync)

    def on_train_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        self._weights = [p.detach() for p in pl_module.parameters()]

    def on_update_end(self, trainer: L.Trainer, pl_module: Any, loss: Any) -> None:
        """After every update (``rl_lightning.callbacks.updates``): the loss and the weights still finite."""
        if loss is None:
            return
        # One reduction: a sum with any NaN or infinite term (a weight's norm, the loss) is not finite.
        finite = torch.isfinite(torch.stack(torch._foreach_norm(self._weights)).sum() + loss.detach())
        self._finite = finite if self._finite is None else self._finite & finite
        if pl_module.device.type == "cpu" or pl_module.should_log():
            self._raise_if_not_finite(pl_module)

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        # Never write a checkpoint of weights that are no longer finite: the previous one is the good one.
        if not all(bool(torch.isfinite(p).all()) for p in pl_module.parameters()):
            self._finite = torch.zeros((), dtype=torch.bool)
        self._raise_if_not_finite(pl_module, before=", before a checkpoint could be written")

    def _raise_if_not_finite(self, pl_module: Any, before: str = "") -> None:
        if self._finite is None:
            return
        finite, self._finite = bool(self._finite), None
        if finite:
            return
        bad = [name for name, p in pl_module.named_parameters() if not bool(torch.isfinite(p).all())]
        what = f"the weights ({', '.join(bad[:3])}{', ...' if len(bad) > 3 else ''})" if bad else "the loss"
        bound = _largest_action_bound(pl_module)
        if bound > LARGE_ACTION_BOUND:
            # SAC's and TD3's actions are scaled to the bounds and the critics take them as inputs: actions of
            # that size overflow float32 whatever the learning rate.
            advice = (
                f"The env's action bounds reach {bound:.3g} (sensible: about [-1, 1], at most a few hundred), and "
                "actions that large likely overflow the networks' float32: rescale the env's actions to [-1, 1] "
                "(env_kwargs={'wrappers': [{'class_path': 'gymnasium.wrappers.RescaleAction', 'init_args': "
                "{'min_action': -1.0, 'max_action': 1.0}}]}), then check the env's rewards and observations for NaN"
            )
        else:
            advice = (
                f"Try a lower learning rate (lr={pl_module.hparams.get('lr')}), gradient clipping (max_grad_norm / "
                "Trainer(gradient_clip_val=...)), or check the env's rewards and observations for NaN"
            )
        raise FloatingPointError(
            f"{type(pl_module).__name__}: {what} became NaN or infinite at optimizer step {pl_module.global_step} "
            f"(env step {pl_module.env_steps:,}){before}. {advice}; the run stopped before saving it, so the last "
            "checkpoint is the last good one"
        )


def _largest_action_bound(pl_module: Any) -> float:
    """The largest finite magnitude of the module's ``Box`` action bounds (0 without a ``Box``)."""
    space = getattr(pl_module, "action_space", None)
    if not isinstance(space, gym.spaces.Box):
        return 0.0
    bounds = np.abs(np.concatenate([np.ravel(space.low), np.ravel(space.high)]).astype(np.float64))
    bounds = bounds[np.isfinite(bounds)]
    return float(bounds.max()) if bounds.size else 0.0
