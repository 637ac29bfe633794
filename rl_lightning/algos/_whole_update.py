"""``compile={"whole_update": True}`` for a run: hand the optimizer, the clipping and the per-update Polyak syncs to
one compiled function per update (``rl_lightning.compiling.WholeUpdate``) when the run starts, and give the syncs
their work back when it ends. (Here, not in ``rl_lightning.compiling``: it reads ``TargetNetworkSync``, whose
package imports ``compiling``.)
"""

from __future__ import annotations

from typing import Any

from rl_lightning.compiling import WholeUpdate


def start_whole_updates(module: Any) -> None:
    """``compile={"whole_update": True}``: hand the optimizer, the clipping and the per-update Polyak syncs to
    one compiled function per update (``WholeUpdate``, in ``module.compiled.whole_update``), where the loop steps the
    optimizer itself and the module's update is an rl_lightning algorithm's; else say why only the loss is
    compiled."""
    from lightning.pytorch.utilities import rank_zero_warn

    from rl_lightning.callbacks.target_sync import TargetNetworkSync

    update_loss = type(module).update_loss  # an algorithm's own (not a subclass's, nor an adopted training_step)
    own_update = update_loss.__module__.startswith("rl_lightning.algos.") and "<locals>" not in update_loss.__qualname__
    optimizer = module.optimizers().optimizer
    why = None
    if not module._direct_steps:
        why = (
            "it needs one device in float32, with no callback or module hook on backward or the optimizer step "
            "(Lightning's manual-optimisation path runs here)"
        )
    elif not own_update:
        why = "its update_loss is overridden (the compiled function would miss what the override adds)"
    elif WholeUpdate.unsupported(optimizer):
        why = WholeUpdate.unsupported(optimizer)
    if why is not None:
        rank_zero_warn(f"compile={{'whole_update': True}}: this run compiles the update's loss only: {why}")
        return
    syncs = [c for c in module.trainer.callbacks if isinstance(c, TargetNetworkSync)]
    handed = [polyak for polyak in (sync.hand_over(module) for sync in syncs) if polyak is not None]
    polyak = None
    if len(handed) == 1:
        polyak = handed[0]
    elif handed:  # more than one: the callbacks keep moving their targets
        for sync in syncs:
            sync.take_back()
    clipping = module._gradient_clipping
    if clipping is None and module.hparams.get("max_grad_norm") is not None:
        clipping = (float(module.hparams.max_grad_norm), "norm")
    module.compiled.whole_update = WholeUpdate(optimizer, clipping, polyak, module.compiled.compile_arguments)


def end_whole_updates(module: Any) -> None:
    """Give the syncs back the work :func:`start_whole_updates` took."""
    from rl_lightning.callbacks.target_sync import TargetNetworkSync

    whole, module.compiled.whole_update = module.compiled.whole_update, None
    if whole is not None and module._attached:
        for callback in module.trainer.callbacks:
            if isinstance(callback, TargetNetworkSync):
                callback.take_back()
