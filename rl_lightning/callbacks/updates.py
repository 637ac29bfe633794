"""The per-update hooks: how a callback acts between two updates inside one training step.

An rl_lightning module runs several updates per Lightning training step (its layer's loop,
``OnPolicyModule.run_updates`` / ``RLModule.run_updates``: a rollout's minibatches, or ``updates_per_step``
collections and updates, each through ``RLModule.update``), so Lightning's
``on_train_batch_start`` / ``on_train_batch_end`` run once per *training step*. A callback that must act
at every update subclasses :class:`UpdateCallback` and overrides either or both of

    on_update_start(trainer, pl_module)        after the update's batch was collected / sampled, before its loss
    on_update_end(trainer, pl_module, loss)    after its optimizer step (``trainer.global_step`` counts it)

and the module's loop calls them, in the Trainer's callback order, at every update. On a LightningModule
without that loop (yours, with automatic optimisation: there a training step is one update) the batch hooks
call them instead. The rl_lightning callbacks that act per update (``TargetNetworkSync``, ``LinearLRDecay``,
``EpsilonDecay``, ``GridVideoLogger`` and the NaN guard) are ``UpdateCallback``s. (A plain ``L.Callback`` that
defines the two methods is called by the loop too, with no fallback elsewhere.)
"""

from __future__ import annotations

from typing import Any

import lightning as L


def runs_update_hooks(pl_module: Any) -> bool:
    """Whether ``pl_module``'s training step calls the per-update hooks (every ``RLModule`` does)."""
    return bool(getattr(pl_module, "runs_update_hooks", False))


class UpdateCallback(L.Callback):
    """A Lightning callback that acts at every update: override :meth:`on_update_start` and/or
    :meth:`on_update_end` (a subclass that also overrides ``on_train_batch_start`` / ``on_train_batch_end``
    calls ``super()`` there, which is where a module without the loop reaches the per-update hooks)."""

    def on_update_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        """Before an update, its data collected or sampled."""

    def on_update_end(self, trainer: L.Trainer, pl_module: Any, loss: Any) -> None:
        """After an update's optimizer step (``loss``: the update's loss, detached; None where there was none)."""

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if not runs_update_hooks(pl_module):  # a module of yours: one update per training step
            self.on_update_start(trainer, pl_module)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if not runs_update_hooks(pl_module):  # the loss, as the loop gives it (Lightning's outputs: {"loss": ...})
            loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
            self.on_update_end(trainer, pl_module, loss)


def update_hook_owners(callbacks: list[Any], name: str) -> list[Any]:
    """The callbacks whose per-update hook ``name`` does something: an ``UpdateCallback`` that overrides it, or
    any other callback that defines it (the loop calls only these, in this order)."""
    default = getattr(UpdateCallback, name)
    return [c for c in callbacks if callable(getattr(c, name, None)) and getattr(type(c), name, None) is not default]
