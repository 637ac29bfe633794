"""What a Trainer run sets up on an ``RLModule`` and gives back: the Trainer's settings checked and its gradient
clipping taken over (Lightning refuses it under manual optimisation), every DDP rank checked to start from the same
point, the update loop's callbacks and its direct optimizer path chosen, the compiled whole update handed over, and
at teardown all of it returned. ``RLModule``'s Lightning hooks (``configure_callbacks``, ``on_fit_start``,
``on_train_start``, ``teardown``) call these.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import RichProgressBar, TQDMProgressBar

from rl_lightning.algos import _whole_update
from rl_lightning.callbacks.guard import check_trainer_settings
from rl_lightning.callbacks.updates import update_hook_owners
from rl_lightning.progress import RLProgressBar
from rl_lightning.threads import one_thread_for_small_networks


def prepare_trainer(module: Any) -> None:
    """``configure_callbacks``, on a Trainer: Lightning's progress bar replaced by ``RLProgressBar``, the Trainer's
    settings checked and its gradient clipping taken over (before Lightning checks the Trainer for manual
    optimisation)."""
    trainer = module.trainer
    if type(trainer.progress_bar_callback) in (TQDMProgressBar, RichProgressBar):
        # Lightning's default bar (Rich where the rich package is installed, as minari's dependencies install it;
        # else TQDM); a subclass of either is the user's own and stays. Swapped in place rather than returned: a
        # returned subclass of TQDMProgressBar makes Lightning say it "will override existing callbacks passed to
        # Trainer", which the user did not pass.
        callbacks = trainer.callbacks
        callbacks[callbacks.index(trainer.progress_bar_callback)] = RLProgressBar()
    check_trainer_settings(trainer)
    take_over_gradient_clipping(module)


def start_fit(module: Any) -> None:
    """``on_fit_start``: every rank starts from the same point; one thread for small networks."""
    check_ranks_start_together(module)
    module._threads_to_restore = one_thread_for_small_networks(module)


def start_training(module: Any, clipping_hook_owner: type) -> None:
    """``on_train_start``: the charts' clock, the SIGTERM handler, the callbacks with per-update hooks, the
    optimizer path (:func:`can_step_directly`) and ``compile``'s compiled update."""
    module._charts.start(module.env_steps)
    module._stop.install(module.trainer)
    callbacks = module.trainer.callbacks
    module._update_callbacks = (
        update_hook_owners(callbacks, "on_update_start"),
        update_hook_owners(callbacks, "on_update_end"),
    )
    module._direct_steps = can_step_directly(module, clipping_hook_owner)
    if module.compiled.enabled:
        _whole_update.start_whole_updates(module)


def end_run(module: Any) -> None:
    """``teardown``: the compiled update's work back to the callbacks, the thread count and the Trainer's
    clipping settings restored."""
    _whole_update.end_whole_updates(module)
    threads = module.__dict__.pop("_threads_to_restore", None)
    if threads is not None:
        torch.set_num_threads(threads)
    give_back_gradient_clipping(module)


def can_step_directly(module: L.LightningModule, clipping_hook_owner: type) -> bool:
    """Whether an update may call ``loss.backward()`` and the optimizer's ``step`` itself, and count the step
    in ``global_step``, instead of going through Lightning's manual-optimisation path (its strategy, precision
    plugin and hook dispatch cost more than a small network's backward): on one device in float32, where
    neither a callback nor the module overrides a hook that path would call (``on_before_backward``,
    ``on_after_backward``, ``on_before_optimizer_step`` beyond ``clipping_hook_owner``'s, ``backward``). The same
    arithmetic either way: ``tests/algos/test_update_loop.py`` checks both paths give the same run."""
    from lightning.pytorch.strategies import SingleDeviceStrategy

    trainer = module.trainer
    if type(trainer.strategy) is not SingleDeviceStrategy or str(trainer.precision) not in ("32-true", "32"):
        return False
    hooks = ("on_before_backward", "on_after_backward", "on_before_optimizer_step")
    for callback in trainer.callbacks:
        if any(getattr(type(callback), hook) is not getattr(L.Callback, hook) for hook in hooks):
            return False
    own = {"on_before_backward": L.LightningModule, "on_after_backward": L.LightningModule}
    own |= {"backward": L.LightningModule, "on_before_optimizer_step": clipping_hook_owner}
    return all(getattr(type(module), hook) is getattr(owner, hook) for hook, owner in own.items())


def take_over_gradient_clipping(module: Any) -> None:
    """``Trainer(gradient_clip_val=..., gradient_clip_algorithm=...)``, which Lightning refuses under manual
    optimisation: the loop clips with it instead (``module._gradient_clipping``, which takes precedence over
    ``max_grad_norm``), and the Trainer gets it back at teardown (:func:`give_back_gradient_clipping`)."""
    trainer = module.trainer
    if trainer.gradient_clip_val is None or trainer.gradient_clip_val <= 0:
        return
    algorithm = trainer.gradient_clip_algorithm or "norm"
    module._gradient_clipping = (float(trainer.gradient_clip_val), str(getattr(algorithm, "value", algorithm)))
    module._trainer_clipping = (trainer.gradient_clip_val, trainer.gradient_clip_algorithm)
    trainer.gradient_clip_val, trainer.gradient_clip_algorithm = None, None


def give_back_gradient_clipping(module: Any) -> None:
    """The Trainer's clipping settings back, where :func:`take_over_gradient_clipping` took them."""
    restored = module.__dict__.pop("_trainer_clipping", None)
    if restored is not None and module._attached:
        module.trainer.gradient_clip_val, module.trainer.gradient_clip_algorithm = restored
        module._gradient_clipping = None


def check_ranks_start_together(module: Any) -> None:
    """Under DDP every rank must start from the same point: a rank that restored a checkpoint and one that did
    not (``--ckpt_path last`` on nodes without a shared directory: node 1 finds no ``last.ckpt``) would fail
    in their first collectives with an unrelated error, or wait on each other. Checked once the checkpoint is
    read, before any collective of the run: a ``RuntimeError`` on every rank, naming what each holds."""
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    trainer = module.trainer
    if trainer.world_size <= 1 or not distributed:
        return
    resumed = int(trainer.ckpt_path is not None)
    here = torch.tensor([resumed, module.env_steps], dtype=torch.int64, device=trainer.strategy.root_device)
    gathered = [torch.empty_like(here) for _ in range(torch.distributed.get_world_size())]
    torch.distributed.all_gather(gathered, here)  # c10d's own: no autograd graph around it
    every = [tensor.tolist() for tensor in gathered]
    if any(rank != every[0] for rank in every):
        found = ", ".join(
            f"rank {rank}: " + (f"a checkpoint at env step {env:,}" if loaded else "no checkpoint")
            for rank, (loaded, env) in enumerate(every)
        )
        raise RuntimeError(
            f"the processes of this run start from different points ({found}). Give every node the same "
            "checkpoint: one --ckpt_path file, or a --default_root_dir on a shared file system for --ckpt_path "
            "last"
        )
