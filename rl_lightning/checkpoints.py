"""Finding the checkpoint to resume from."""

from __future__ import annotations

from pathlib import Path

from lightning.pytorch.utilities import rank_zero_warn


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
