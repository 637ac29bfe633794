"""Throughput of VPG and DQN training under Lightning's scaling flags, in one run:

    python benchmarks/bench_scaling.py [--rollouts 8] [--dqn_steps 1500]

Each configuration runs in a fresh subprocess (DDP needs its own process group) on CPU:
precision 32-true vs bf16-mixed, and devices=1 vs devices=2 with strategy="ddp" (gloo; each
rank steps its own num_envs envs). Reported: environment steps per second of the whole job
(all ranks), from the first to the last training step, excluding process start-up.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKER = r"""
import json, sys, time
import lightning as L
import torch
from rl_lightning import DQNModule, VPGModule

algo, devices, precision, steps, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
torch.set_num_threads(1)


class Clock(L.Callback):
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == 1:  # skip the first step: start-up, buffer warm-up
            self.start, self.start_steps = time.perf_counter(), pl_module.env_steps

    def on_train_end(self, trainer, pl_module):
        if trainer.is_global_zero:
            seconds = time.perf_counter() - self.start
            sps = (pl_module.env_steps - self.start_steps) / seconds
            json.dump({"sps": sps, "env_steps": pl_module.env_steps, "seconds": seconds}, open(out, "w"))


module = VPGModule(seed=1) if algo == "vpg" else DQNModule(seed=0)
trainer = L.Trainer(
    accelerator="cpu", devices=devices, strategy="ddp" if devices > 1 else "auto", precision=precision,
    max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
    enable_model_summary=False, callbacks=[Clock()],
)
trainer.fit(module)
"""


def run(algo: str, devices: int, precision: str, steps: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        script, out = Path(tmp) / "worker.py", Path(tmp) / "result.json"
        script.write_text(WORKER)
        cmd = [sys.executable, str(script), algo, str(devices), precision, str(steps), str(out)]
        subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=900)
        return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rollouts", type=int, default=8, help="VPG optimizer steps (rollouts) per run")
    parser.add_argument("--dqn_steps", type=int, default=1500, help="DQN optimizer steps per run")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "scaling.md"))
    args = parser.parse_args()
    configs = [(1, "32-true"), (1, "bf16-mixed"), (2, "32-true")]
    rows = []
    for algo, steps in (("vpg", args.rollouts), ("dqn", args.dqn_steps)):
        baseline = None
        for devices, precision in configs:
            start = time.perf_counter()
            result = run(algo, devices, precision, steps)
            baseline = baseline or result["sps"]
            rows.append(
                f"| {algo.upper()} | {devices} | {precision} | {result['sps']:,.0f} | {result['sps'] / baseline:.2f}x |"
            )
            print(rows[-1], f"({time.perf_counter() - start:.0f} s with start-up)", flush=True)
    table = "\n".join(
        [
            f"Command: `python benchmarks/bench_scaling.py --rollouts {args.rollouts} --dqn_steps {args.dqn_steps}` "
            "(CPU, 1 torch thread per process, defaults of each module)",
            "",
            "| algo | devices (ddp) | precision | env steps/s, all ranks | vs 1 device 32-true |",
            "|---|---|---|---|---|",
            *rows,
        ]
    )
    print(table)
    Path(args.out).write_text(table + "\n")


if __name__ == "__main__":
    main()
