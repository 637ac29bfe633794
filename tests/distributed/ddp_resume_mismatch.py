"""Run by tests/distributed/test_multinode_resume.py: without CKPT one process trains 4 updates; with it, a DDP run
of 2 CPU processes to 8 updates where only rank 0 resumes from CKPT (as a node without the run's shared directory
would not find it), which must fail on both ranks.

    python ddp_resume_mismatch.py ROOT_DIR [CKPT]
"""

import os
import sys

import lightning as L
import torch

from rl_lightning import VPGModule


def main() -> None:
    root, checkpoint = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else None)
    torch.set_num_threads(1)
    module = VPGModule(num_envs=4, num_steps_per_rollout=20, seed=1)
    devices = 2 if checkpoint else 1
    trainer = L.Trainer(
        accelerator="cpu", devices=devices, strategy="ddp" if checkpoint else "auto", max_steps=8 if checkpoint else 4,
        default_root_dir=root, logger=False, enable_progress_bar=False,
    )  # fmt: skip
    rank_zero = os.environ.get("LOCAL_RANK", "0") == "0"
    trainer.fit(module, ckpt_path=checkpoint if rank_zero else None)


if __name__ == "__main__":
    main()
