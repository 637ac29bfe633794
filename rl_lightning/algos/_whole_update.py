"""``compile`` for a run (the whole update unless ``compile={"whole_update": False}``): the optimizer, the clipping
and a per-update Polyak target update become one compiled function per update
(``rl_lightning.compiling.WholeUpdate``) when the run starts, and the module steps again eagerly when it ends; one
warning names what stays eager. The target and online tensors are the module's (its layer's
``polyak_parameters()``, from ``target_network_pairs()``); the ``TargetNetworkSync`` that schedules them keeps its
schedule and counts, and leaves the moving to the compiled update (``WholeUpdate.moves_targets_of``). (Here, not
in ``rl_lightning.compiling``: it reads ``TargetNetworkSync``, whose package imports ``compiling``.)
"""

from __future__ import annotations

from typing import Any

from rl_lightning.compiling import WholeUpdate


def start_whole_updates(module: Any) -> None:
    """``compile``: the optimizer, the clipping and a per-update Polyak target update as one compiled function per
    update (``WholeUpdate``, in ``module.compiled.whole_update``), where the loop steps the optimizer itself and the
    module's update is an rl_lightning algorithm's; then one warning naming what runs eagerly and why (the
    optimizer's part, a gymnasium env's step). Called by ``on_train_start`` (``_run.start_training``)."""
    from lightning.pytorch.utilities import rank_zero_warn

    from rl_lightning.algos._envs import env_step_stays_eager

    eager = []
    why = _whole_update_unavailable(module) if module.compiled.wants_whole_update else None
    if why is not None:
        eager.append(f"the optimizer step, gradient clipping and target update, by Lightning's loop ({why})")
    env_why = env_step_stays_eager(module)
    if env_why is not None:
        eager.append(f"the env step ({env_why})")
    if eager:
        rank_zero_warn(f"compile: this run compiles the update's loss; these parts run eagerly: {'; '.join(eager)}")
    if why is None and module.compiled.wants_whole_update:
        _hold_whole_update(module)


def _whole_update_unavailable(module: Any) -> str | None:
    """Why the whole update cannot be one compiled function (None: it can)."""
    update_loss = type(module).update_loss  # an algorithm's own (not a subclass's, nor an adopted training_step)
    own_update = update_loss.__module__.startswith("rl_lightning.algos.") and "<locals>" not in update_loss.__qualname__
    optimizer = module.optimizers().optimizer
    why = None
    if module.num_seeds > 1:
        why = "num_seeds > 1 steps each seed's parameters apart, with its own clipping and masking"
    elif not module._direct_steps:
        why = (
            "it needs one device in float32, with no callback or module hook on backward or the optimizer step "
            "(Lightning's manual-optimisation path runs here)"
        )
    elif not own_update:
        why = "its update_loss is overridden (the compiled function would miss what the override adds)"
    elif WholeUpdate.unsupported(optimizer):
        why = WholeUpdate.unsupported(optimizer)
    return why


def _hold_whole_update(module: Any) -> None:
    """``module.compiled.whole_update``: the run's ``WholeUpdate``, with the per-update Polyak target update."""
    from rl_lightning.callbacks.target_sync import TargetNetworkSync

    optimizer = module.optimizers().optimizer
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
