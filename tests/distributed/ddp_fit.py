"""Run by tests/distributed/test_ddp.py: fit VPG (or PPO) with Trainer(devices=2, strategy=...) on
CPU (gloo) and write each rank's final weights and counters to OUT_DIR/rank<k>.pt.

    python ddp_fit.py OUT_DIR STRATEGY [vpg|ppo|ppo_seeds|ppo_seed5|sac|td3]
"""

import sys
from pathlib import Path

import lightning as L
import torch

from rl_lightning import PPOModule, SACModule, TD3Module, VPGModule


class Record(L.Callback):
    """Save this rank's weights and counters when training ends."""

    def __init__(self, out_dir: Path):
        self.out_dir = out_dir

    def on_train_end(self, trainer, pl_module):
        state = {key: value.detach().cpu() for key, value in pl_module.state_dict().items()}
        record = {
            "state_dict": state,
            "env_steps": pl_module.env_steps,
            "global_step": trainer.global_step,
            "world_size": trainer.world_size,
        }
        torch.save(record, self.out_dir / f"rank{trainer.global_rank}.pt")


def main() -> None:
    out_dir, strategy = Path(sys.argv[1]), sys.argv[2]
    algo = sys.argv[3] if len(sys.argv) > 3 else "vpg"
    torch.set_num_threads(1)
    if algo.startswith("ppo"):  # running statistics are all-reduced: identical on both ranks
        # ppo_seeds: seeds 4 and 5 in one run (num_seeds=2); ppo_seed5: seed 5 alone
        seeds = {"ppo_seeds": {"num_seeds": 2}, "ppo_seed5": {"seed": 5}}.get(algo, {})
        settings = dict(num_envs=8, num_steps_per_rollout=25, update_epochs=2, num_minibatches=2, normalize_obs=True)
        module = PPOModule(**{**settings, "seed": 4, **seeds})
    elif algo in ("sac", "td3"):  # each rank its own buffer and envs; one optimizer, gradients averaged
        cls = SACModule if algo == "sac" else TD3Module
        module = cls(num_envs=2, buffer_size=500, batch_size=32, learning_starts=32, hidden_sizes=(16, 16), seed=4)
    else:
        module = VPGModule(num_envs=8, num_steps_per_rollout=50, seed=4)

    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy=strategy,
        max_steps=4,
        default_root_dir=out_dir,
        callbacks=[Record(out_dir)],
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,
    )
    trainer.fit(module)


if __name__ == "__main__":
    main()
