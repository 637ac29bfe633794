"""Target-network updates for DQN-style modules, keyed on environment steps."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from torch import nn


@torch.no_grad()
def update_target_network(target: nn.Module, online: nn.Module, tau: float) -> None:
    """target <- tau * online + (1 - tau) * target (tau = 1: a hard copy). Buffers are copied."""
    target_params = list(target.parameters())
    online_params = list(online.parameters())
    if tau >= 1.0:
        torch._foreach_copy_(target_params, online_params)
    else:
        torch._foreach_lerp_(target_params, online_params, tau)
    for target_buffer, online_buffer in zip(target.buffers(), online.buffers(), strict=True):
        target_buffer.copy_(online_buffer)


class TargetNetworkSync(L.Callback):
    """Moves ``pl_module.target_network`` towards ``pl_module.q_network`` after optimizer steps.

    Every ``every_n_env_steps`` environment steps (``pl_module.env_steps``, not
    ``trainer.global_step``) the target becomes ``tau * online + (1 - tau) * target``:
    ``tau=1`` is DQN's hard copy, a small ``tau`` with ``every_n_env_steps=None`` (after every
    training step) is Polyak averaging.

    Args:
        every_n_env_steps: update period in env steps; None updates after every training step.
        tau: interpolation weight in (0, 1]; 1.0 copies.
        online_attr, target_attr: names of the two networks on the LightningModule.
    """

    def __init__(
        self,
        every_n_env_steps: int | None = 500,
        tau: float = 1.0,
        online_attr: str = "q_network",
        target_attr: str = "target_network",
    ):
        if every_n_env_steps is not None and (
            isinstance(every_n_env_steps, bool) or not isinstance(every_n_env_steps, int)
        ):
            raise TypeError(f"every_n_env_steps must be an int or None, got {every_n_env_steps!r}")
        if every_n_env_steps is not None and every_n_env_steps < 1:
            raise ValueError(f"every_n_env_steps must be >= 1 or None, got {every_n_env_steps}")
        if not isinstance(tau, (int, float)) or isinstance(tau, bool) or not 0.0 < tau <= 1.0:
            raise ValueError(f"tau must be a float in (0, 1], got {tau!r}")
        self.every_n_env_steps = every_n_env_steps
        self.tau = float(tau)
        self.online_attr = online_attr
        self.target_attr = target_attr
        self.num_updates = 0
        self._last_period: int | None = None  # env_steps // every_n_env_steps at the last check

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.every_n_env_steps is not None and self._last_period is None:
            self._last_period = pl_module.env_steps // self.every_n_env_steps

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self.every_n_env_steps is not None:
            period = pl_module.env_steps // self.every_n_env_steps
            if period == self._last_period:
                return
            self._last_period = period
        update_target_network(getattr(pl_module, self.target_attr), getattr(pl_module, self.online_attr), self.tau)
        self.num_updates += 1

    def state_dict(self) -> dict[str, Any]:
        return {"num_updates": self.num_updates, "last_period": self._last_period}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.num_updates = state_dict["num_updates"]
        self._last_period = state_dict["last_period"]
