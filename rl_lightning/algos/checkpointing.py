"""What the modules add to Lightning checkpoints so a resumed run continues exactly: every
rank's data-source state (envs, RNGs, counters, replay buffer), and checks that a checkpoint
fits the module it is loaded into."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.utilities.apply_func import move_data_to_device
from lightning.pytorch.utilities import rank_zero_warn


def gather_source_states(module: L.LightningModule, state: dict[str, Any] | None) -> list[dict[str, Any] | None]:
    """This rank's data-source ``state`` and every other rank's (moved to the CPU), indexed by
    global rank.

    Lightning builds the checkpoint dict on every rank and writes rank 0's, so the ranks'
    states are all-gathered here (a collective: every rank calls this in ``on_save_checkpoint``).
    """
    state = move_data_to_device(state, "cpu") if state is not None else None
    world_size = module.trainer.world_size if module._trainer is not None else 1
    if world_size > 1 and torch.distributed.is_available() and torch.distributed.is_initialized():
        states: list[dict[str, Any] | None] = [None] * world_size
        torch.distributed.all_gather_object(states, state)
        return states
    return [state]


def restore_source_state(source: Any, states: list[dict[str, Any] | None] | None, rank: int, world_size: int) -> bool:
    """Load this rank's saved state into ``source``; False (with a warning) if there is none."""
    if not states:
        return False
    if len(states) != world_size or states[rank] is None:
        rank_zero_warn(
            f"the checkpoint holds data-source states of {len(states)} process(es), this run has {world_size}: "
            "envs start fresh (weights, optimizer and env-step counter are still restored)"
        )
        return False
    source.load_state_dict(states[rank])
    return True


def check_checkpoint_fits(module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
    """Raise ``ValueError`` if ``checkpoint`` was made for another env or network shape."""
    saved = checkpoint.get("hyper_parameters", {})
    env_id = saved.get("env_id")
    if env_id is not None and env_id != module.hparams.env_id:
        raise ValueError(
            f"checkpoint was trained on env_id {env_id!r} but this module is built for {module.hparams.env_id!r}"
        )
    own = module.state_dict()
    for name, tensor in checkpoint.get("state_dict", {}).items():
        if name in own and tuple(own[name].shape) != tuple(tensor.shape):
            raise ValueError(
                f"checkpoint's {name} has shape {tuple(tensor.shape)} but this module's is {tuple(own[name].shape)}: "
                f"it was built with hidden_sizes={saved.get('hidden_sizes')}, this module with "
                f"hidden_sizes={module.hparams.hidden_sizes}"
            )


def resolve_ckpt_path(ckpt_path: str | None, root_dir: str | Path) -> str | None:
    """``"last"``: the newest ``<root_dir>/lightning_logs/version_*/checkpoints/last*.ckpt`` (a new
    run writes to a new ``version_N``, where Lightning's own ``"last"`` lookup would find nothing);
    None if there is none yet (a fresh start, as Lightning does). Other values pass through."""
    if ckpt_path != "last":
        return ckpt_path
    candidates = list(Path(root_dir).glob("lightning_logs/version_*/checkpoints/last*.ckpt"))
    if not candidates:
        rank_zero_warn(f'ckpt_path="last": no last checkpoint under {root_dir}/lightning_logs yet, starting fresh')
        return None
    return str(max(candidates, key=lambda path: path.stat().st_mtime))
