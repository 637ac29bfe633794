"""The per-update hooks: how a callback acts between two updates inside one training step.

An rl_lightning module runs several updates per Lightning training step (``RLModule.training_step``: a
rollout's minibatches, or ``updates_per_step`` collections and updates), so Lightning's
``on_train_batch_start`` / ``on_train_batch_end`` run once per *training step*. A callback that must act
at every update defines either or both of

    on_update_start(trainer, pl_module)        after the update's batch was collected / sampled, before its loss
    on_update_end(trainer, pl_module, loss)    after its optimizer step (``trainer.global_step`` counts it)

and the module's loop calls them, in the Trainer's callback order, at every update. The rl_lightning callbacks
that act per update (``TargetNetworkSync``, ``LinearLRDecay``, ``EpsilonDecay``, ``GridVideoLogger`` and the NaN
guard) use them, and fall back to the batch hooks on a module without the loop (a LightningModule of yours
with automatic optimisation: there a training step is one update).
"""

from __future__ import annotations

from typing import Any


def runs_update_hooks(pl_module: Any) -> bool:
    """Whether ``pl_module``'s training step calls the per-update hooks (every ``RLModule`` does)."""
    return bool(getattr(pl_module, "runs_update_hooks", False))
