"""A callback for tests/distributed/test_ray_train.py, pickled to the Ray workers by value: each worker saves its
final weights and counters to ``OUT_DIR/rank<k>.pt``."""

from pathlib import Path

import lightning as L
import torch


class Record(L.Callback):
    """Save this worker's weights and counters when training ends."""

    def __init__(self, out_dir: Path):
        self.out_dir = Path(out_dir)

    def on_train_end(self, trainer, pl_module):
        record = {
            "state_dict": {key: value.detach().cpu() for key, value in pl_module.state_dict().items()},
            "env_steps": pl_module.env_steps,
            "global_step": trainer.global_step,
            "world_size": trainer.world_size,
            "envs": repr(getattr(pl_module.source, "envs", None)),
        }
        self.out_dir.mkdir(parents=True, exist_ok=True)
        torch.save(record, self.out_dir / f"rank{trainer.global_rank}.pt")
