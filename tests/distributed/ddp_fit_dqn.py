"""Run by tests/distributed/test_ddp_dqn.py: fit a DQNModule with Trainer(devices=2, strategy=...)
on CPU (gloo) and write each rank's record to OUT_DIR/rank<k>.pt.

Usage: python ddp_fit_dqn.py OUT_DIR STRATEGY
"""

import sys
from pathlib import Path

import lightning as L
import torch

from rl_lightning import DQNModule

NUM_ENVS = 4
LEARNING_STARTS = 64
BATCH_SIZE = 32
MAX_STEPS = 20
SEED = 4


def make_module() -> DQNModule:
    # exploration_fraction=1.0: epsilon still decays during the 20 updates, so a rank that
    # counted only its own env steps would end with a different epsilon schedule.
    return DQNModule(
        env_id="CartPole-v1",
        num_envs=NUM_ENVS,
        buffer_size=1_000,
        batch_size=BATCH_SIZE,
        learning_starts=LEARNING_STARTS,
        exploration_fraction=1.0,
        target_update_env_steps=80,
        seed=SEED,
    )


class Record(L.Callback):
    """Count this rank's own env steps and save its weights, counters and epsilon schedule.

    Module-level (not local to main) so that ddp_spawn can pickle it.
    """

    def __init__(self, out_dir: Path):
        self.out_dir = out_dir
        self.local_vector_steps = 0
        self.schedule: list[tuple[int, float]] = []  # (env_steps, epsilon) at each batch start

    def on_train_start(self, trainer, pl_module):
        # The source exists (train_dataloader ran) but has not stepped its envs yet: count every
        # vectorised step this process takes, including the random warm-up.
        envs = pl_module.source.envs
        step = envs.step

        def counting_step(actions):
            self.local_vector_steps += 1
            return step(actions)

        envs.step = counting_step

    def on_update_start(self, trainer, pl_module):  # every update, its data collected
        self.schedule.append((pl_module.env_steps, pl_module.epsilon))

    def on_train_end(self, trainer, pl_module):
        state = {key: value.detach().cpu() for key, value in pl_module.state_dict().items()}
        record = {
            "state_dict": state,
            "env_steps": pl_module.env_steps,
            "local_env_steps": self.local_vector_steps * pl_module.hparams.num_envs,
            "epsilon": pl_module.epsilon,
            "schedule": self.schedule,
            "global_step": trainer.global_step,
            "world_size": trainer.world_size,
        }
        torch.save(record, self.out_dir / f"rank{trainer.global_rank}.pt")


def main() -> None:
    out_dir, strategy = Path(sys.argv[1]), sys.argv[2]
    torch.set_num_threads(1)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy=strategy,
        max_steps=MAX_STEPS,
        default_root_dir=out_dir,
        callbacks=[Record(out_dir)],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,
    )
    trainer.fit(make_module())


if __name__ == "__main__":
    main()
