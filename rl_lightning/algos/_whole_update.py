"""``compile={"whole_update": True}`` for a run: the optimizer, the clipping and a per-update Polyak target update
become one compiled function per update (``rl_lightning.compiling.WholeUpdate``) when the run starts, and the module
steps again eagerly when it ends. The target and online tensors are the module's (its layer's
``polyak_parameters()``, from ``target_network_pairs()``); the ``TargetNetworkSync`` that schedules them keeps its
schedule and counts, and leaves the moving to the compiled update (``WholeUpdate.moves_targets_of``). (Here, not
in ``rl_lightning.compiling``: it reads ``TargetNetworkSync``, whose package imports ``compiling``.)
"""

from __future__ import annotations

from typing import Any

from rl_lightning.compiling import WholeUpdate


def start_whole_updates(module: Any) -> None:
    """``compile={"whole_update": True}``: the optimizer, the clipping and a per-update Polyak target update as one
    compiled function per update (``WholeUpdate``, in ``module.compiled.whole_update``), where the loop steps the
    optimizer itself and the module's update is an rl_lightning algorithm's; else say why only the loss is
    compiled. Called by ``on_train_start`` (``_run.start_training``)."""
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
    # One sync that moves the targets after every update, by Polyak averaging of parameters alone: the compiled
    # update moves them (a hard copy, a delayed or periodic one stays the callback's).
    syncs = [c for c in module.trainer.callbacks if isinstance(c, TargetNetworkSync)]
    polyak = None
    if len(syncs) == 1 and syncs[0].every_update and syncs[0].tau < 1.0 and syncs[0].online_attr is None:
        parameters = getattr(module, "polyak_parameters", lambda: None)()
        if parameters is not None:
            polyak = (*parameters, syncs[0].tau)
    clipping = module._gradient_clipping
    if clipping is None and module.hparams.get("max_grad_norm") is not None:
        clipping = (float(module.hparams.max_grad_norm), "norm")
    module.compiled.whole_update = WholeUpdate(
        optimizer, clipping, polyak, module.compiled.compile_arguments, moves_targets_of=syncs[0] if polyak else None
    )


def end_whole_updates(module: Any) -> None:
    """The module steps eagerly again (and its sync moves the targets itself)."""
    module.compiled.whole_update = None
