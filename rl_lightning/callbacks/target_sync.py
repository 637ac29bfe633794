"""Target-network updates (DQN, SAC, TD3), every N env steps or every N training steps."""

from __future__ import annotations

import warnings
from typing import Any

import lightning as L
import torch
from torch import nn

from rl_lightning._checks import check_float, check_int
from rl_lightning.callbacks.updates import UpdateCallback
from rl_lightning.deprecations import RLLightningDeprecationWarning
from rl_lightning.protocols import TargetNetworkProtocol, require


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


class TargetNetworkSync(UpdateCallback):
    """Moves each target network towards its online network after training steps (the pairs of
    ``pl_module.target_network_pairs()``, :class:`~rl_lightning.protocols.TargetNetworkProtocol`).

    The target becomes ``tau * online + (1 - tau) * target`` every ``every_n_env_steps`` environment
    steps (``pl_module.env_steps``: DQN's hard copy), or every ``every_n_train_steps`` training steps
    (TD3's delayed Polyak update), or, with neither, after every training step (SAC's Polyak
    averaging). ``tau=1`` copies.

    Args:
        every_n_env_steps: update period in env steps.
        tau: interpolation weight in (0, 1]; 1.0 copies.
        every_n_train_steps: update period in training steps (updates), instead of env steps.
        online_attr, target_attr: deprecated (the first release's): the names of one online and one target
            network on the module (defaults ``"q_network"``, ``"target_network"``), moved instead of
            ``target_network_pairs()``'s; give the module ``target_network_pairs()`` instead.

    A module that compiles its whole update (``compile=True``, ``rl_lightning.compiling``) moves
    the targets of a sync that acts after every update inside that function, with the sync's ``tau`` and its own
    ``target_network_pairs()``: the callback then keeps its schedule and counts its updates, and leaves the moving to
    the module's compiled update (``WholeUpdate.moves_targets_of``).
    """

    def __init__(
        self,
        every_n_env_steps: int | None = 500,
        tau: float = 1.0,
        every_n_train_steps: int | None = None,
        *,
        online_attr: str | None = None,
        target_attr: str | None = None,
    ):
        if every_n_env_steps is not None:
            check_int("every_n_env_steps", every_n_env_steps, 1)
        if every_n_train_steps is not None:
            check_int("every_n_train_steps", every_n_train_steps, 1)
            if every_n_env_steps is not None:
                raise ValueError(
                    f"give TargetNetworkSync one period: every_n_env_steps={every_n_env_steps} or "
                    f"every_n_train_steps={every_n_train_steps}, not both"
                )
        self.every_n_env_steps = every_n_env_steps
        self.every_n_train_steps = every_n_train_steps
        self.tau = check_float("tau", tau, 0.0, 1.0, low_open=True)
        #: The deprecated attribute names (None, None: the module's ``target_network_pairs()``).
        self.online_attr: str | None = None
        self.target_attr: str | None = None
        if online_attr is not None or target_attr is not None:
            for name, value in (("online_attr", online_attr), ("target_attr", target_attr)):
                if value is not None and not isinstance(value, str):
                    raise TypeError(f"{name} must be an attribute name (a str) or None, got {value!r}")
            warnings.warn(
                "TargetNetworkSync(online_attr=..., target_attr=...) is deprecated: use the module's "
                "target_network_pairs() (rl_lightning.protocols.TargetNetworkProtocol)",
                RLLightningDeprecationWarning,
                stacklevel=2,
            )
            self.online_attr, self.target_attr = online_attr or "q_network", target_attr or "target_network"
        self.num_updates = 0
        self._last_period: int | None = None  # env_steps // every_n_env_steps at the last check
        self._handed_over = False  # code that took the targets' moving over (hand_over) moves them

    def on_train_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        if self.online_attr is None:
            require(pl_module, TargetNetworkProtocol, "TargetNetworkSync")
        else:
            names = (self.online_attr, self.target_attr)
            missing = [name for name in names if not isinstance(getattr(pl_module, name, None), nn.Module)]
            if missing:
                raise TypeError(
                    f"TargetNetworkSync(online_attr={self.online_attr!r}, target_attr={self.target_attr!r}): "
                    f"{type(pl_module).__name__} has no network {' or '.join(map(repr, missing))}"
                )
        if self.every_n_env_steps is not None and self._last_period is None:
            self._last_period = pl_module.env_steps // self.every_n_env_steps

    def on_update_end(self, trainer: L.Trainer, pl_module: Any, loss: Any) -> None:
        """After every update (``rl_lightning.callbacks.updates``)."""
        if self.every_n_env_steps is not None:
            period = pl_module.env_steps // self.every_n_env_steps
            if period == self._last_period:
                return
            self._last_period = period
        elif self.every_n_train_steps is not None and trainer.global_step % self.every_n_train_steps != 0:
            return  # global_step counts the training steps done, this one included
        whole_update = getattr(getattr(pl_module, "compiled", None), "whole_update", None)
        if not self._handed_over and getattr(whole_update, "moves_targets_of", None) is not self:
            for target, online in self._pairs(pl_module):
                update_target_network(target, online, self.tau)
        self.num_updates += 1

    @property
    def every_update(self) -> bool:
        """Whether it acts after every update (no period in env steps, a period of at most one update)."""
        return self.every_n_env_steps is None and (self.every_n_train_steps or 1) == 1

    def hand_over(self, pl_module: Any) -> tuple[list[torch.Tensor], list[torch.Tensor], float] | None:
        """The target and online parameters and ``tau``, for code that moves the targets itself, if this sync acts
        after every update on parameters alone (else None: it keeps acting itself). Until :meth:`take_back`, the
        callback counts its updates without moving the targets. (rl_lightning's compiled whole update no longer
        asks: it takes the module's own ``polyak_parameters()``.)"""
        if not self.every_update or self.tau >= 1.0:
            return None  # a copy stays update_target_network's (exact)
        pairs = self._pairs(pl_module)
        if any(next(target.buffers(), None) is not None for target, _ in pairs):
            return None  # buffers are copied, not interpolated: update_target_network's work
        targets = [p for target, _ in pairs for p in target.parameters()]
        onlines = [p for _, online in pairs for p in online.parameters()]
        self._handed_over = True
        return targets, onlines, self.tau

    def take_back(self) -> None:
        """Move the targets itself again (after :meth:`hand_over`)."""
        self._handed_over = False

    def _pairs(self, pl_module: Any) -> list[tuple[nn.Module, nn.Module]]:
        if self.online_attr is None:  # every seed's, with num_seeds > 1
            modules = pl_module.seed_modules() if hasattr(pl_module, "seed_modules") else [pl_module]
            return [pair for module in modules for pair in module.target_network_pairs()]
        return [(getattr(pl_module, self.target_attr), getattr(pl_module, self.online_attr))]

    def state_dict(self) -> dict[str, Any]:
        return {"num_updates": self.num_updates, "last_period": self._last_period}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.num_updates = state_dict["num_updates"]
        self._last_period = state_dict["last_period"]
