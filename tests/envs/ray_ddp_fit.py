"""Run by tests/envs/test_ray_vector.py: fit PPO on CartPole-v1 with Trainer(devices=2, strategy="ddp") on the CPU,
its envs in Ray workers (each rank its own local Ray and workers), and write each rank's weights, env steps and
first observations to OUT_DIR/rank<k>.pt.

    python ray_ddp_fit.py OUT_DIR
"""

import sys
from pathlib import Path

import lightning as L
import torch

from rl_lightning import PPOModule


class Record(L.Callback):
    def __init__(self, out_dir: Path):
        self.out_dir = out_dir

    def on_train_end(self, trainer, pl_module):
        record = {
            "state_dict": {key: value.detach().cpu() for key, value in pl_module.state_dict().items()},
            "env_steps": pl_module.env_steps,
            "envs": repr(pl_module.source.envs),
            "first_obs": pl_module.latest_rollout().obs[0].cpu(),
        }
        torch.save(record, self.out_dir / f"rank{trainer.global_rank}.pt")


def main() -> None:
    out_dir = Path(sys.argv[1])
    torch.set_num_threads(1)
    module = PPOModule(
        "CartPole-v1", num_envs=4, num_steps_per_rollout=16, seed=2, env_backend="ray", env_kwargs={"num_workers": 2}
    )
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_steps=8,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        callbacks=[Record(out_dir)],
    )
    trainer.fit(module)


if __name__ == "__main__":
    main()
