"""Run by tests/resume/test_resume.py in a subprocess:

    python resume_worker.py ALGO ROOT MAX_STEPS [--kill_at_step K] [--resume]

trains ALGO ("vpg", "dqn", "ppo", "sac" or "td3") with a ModelCheckpoint rewriting ROOT/checkpoints/last.ckpt every
epoch, optionally SIGKILLs itself after training step K (mid-epoch, after the last checkpoint),
or resumes with ckpt_path="last"; at the end it saves the weights to ROOT/weights.pt.
"""

import argparse
import os
import signal
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from rl_lightning import DQNModule, PPOModule, SACModule, TD3Module, VPGModule


def build(algo: str) -> L.LightningModule:
    if algo == "vpg":
        # Continuing rollouts (no full reset) and LR decay: env state and schedules must carry over.
        return VPGModule(
            num_envs=8,
            num_steps_per_rollout=30,
            rollouts_per_epoch=2,
            full_reset=False,
            anneal_lr=True,
            lr_end=1e-3,
            lr_frac=0.5,
            seed=5,
        )
    if algo == "ppo":
        # Pendulum: a Gaussian policy, truncations, and running statistics that must carry over.
        return PPOModule(
            env_id="Pendulum-v1",
            num_envs=4,
            num_steps_per_rollout=16,
            update_epochs=2,
            num_minibatches=2,
            normalize_obs=True,
            normalize_rewards=True,
            seed=5,
        )
    if algo in ("sac", "td3"):
        # Two envs, 2 updates per collection, 2-step returns: the buffer, the temperature and its Adam
        # state, the targets, the update generator and the place in a collection must all carry over.
        cls = SACModule if algo == "sac" else TD3Module
        return cls(
            num_envs=2,
            buffer_size=500,
            batch_size=32,
            learning_starts=64,
            gradient_steps=2,
            steps_per_epoch=5,
            n_step=2,
            hidden_sizes=(16, 16),
            seed=5,
        )
    return DQNModule(num_envs=4, buffer_size=500, batch_size=32, learning_starts=64, steps_per_epoch=5, seed=5)


class KillAt(L.Callback):
    def __init__(self, step: int):
        self.step = step

    def on_update_end(self, trainer, pl_module, loss):  # after update K, inside its training step
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("algo")
    parser.add_argument("root", type=Path)
    parser.add_argument("max_steps", type=int)
    parser.add_argument("--kill_at_step", type=int)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    callbacks: list[L.Callback] = [ModelCheckpoint(dirpath=args.root / "checkpoints", filename="last")]
    if args.kill_at_step is not None:
        callbacks.append(KillAt(args.kill_at_step))
    trainer = L.Trainer(
        max_steps=args.max_steps,
        default_root_dir=args.root,
        logger=False,
        callbacks=callbacks,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    module = build(args.algo)
    trainer.fit(module, ckpt_path="last" if args.resume else None)
    torch.save({"state_dict": module.state_dict(), "env_steps": module.env_steps}, args.root / "weights.pt")


if __name__ == "__main__":
    main()
