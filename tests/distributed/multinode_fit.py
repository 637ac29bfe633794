"""Run by tests/distributed/test_multinode.py and test_slurm.py in place of a training script:

    python multinode_fit.py RECORD_DIR SCRIPT [the script's flags]

runs ``scripts/SCRIPT`` (``train_vpg.py``, ``train_ppo.py``) as it is, with one callback more: when training ends,
each rank writes its weights, counters and seeds to ``RECORD_DIR/rank<global rank>.pt``.
"""

import runpy
import sys
from pathlib import Path

import lightning as L
import torch

import rl_lightning.cli

ROOT = Path(__file__).resolve().parents[2]


class Record(L.Callback):
    """Save this rank's weights, counters and the seeds of its envs and action sampling when training ends."""

    def __init__(self, record_dir: Path):
        self.record_dir = record_dir
        self.seeds: dict[str, int] = {}

    def on_train_start(self, trainer, pl_module):
        # The source (built with the dataloader, before this hook) holds the rank's envs, seeded once.
        source = pl_module.source
        self.seeds = {"env": source.envs.generator.initial_seed(), "actions": source.generator.initial_seed()}

    def on_train_end(self, trainer, pl_module):
        record = {
            "state_dict": {key: value.detach().cpu() for key, value in pl_module.state_dict().items()},
            "env_steps": pl_module.env_steps,
            "global_step": trainer.global_step,
            "world_size": trainer.world_size,
            "node_rank": trainer.node_rank,
            "seeds": self.seeds,
        }
        self.record_dir.mkdir(parents=True, exist_ok=True)
        torch.save(record, self.record_dir / f"rank{trainer.global_rank}.pt")


def main() -> None:
    record_dir, script = Path(sys.argv[1]).resolve(), ROOT / "scripts" / sys.argv[2]
    make_callbacks = rl_lightning.cli.default_callbacks
    rl_lightning.cli.default_callbacks = lambda *args, **kwargs: [*make_callbacks(*args, **kwargs), Record(record_dir)]
    sys.argv = [str(script), *sys.argv[3:]]
    runpy.run_path(str(script), run_name="__main__")


if __name__ == "__main__":
    main()
