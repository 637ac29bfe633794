"""Prioritized vs uniform replay with DQN on CartPole-v1, the same settings in both (DQNModule's defaults; only
``prioritized=True``, alpha 0.6, beta 0.4 -> 1 differs), and what the sum tree costs.

    python benchmarks/bench_prioritized.py [--seeds 3] [--max_steps 10000] [--out benchmarks/results/prioritized.md]

1. Env steps (and training CPU seconds) to the first greedy evaluation with mean return >= 475 (32 episodes every
   4,000 env steps, ``_time_to_solve``'s protocol), seeds 1..N of each, interleaved.
2. Time per update: CPU ms per update over 1,000 updates after the warm-up, on one torch thread.
3. The prioritized buffer's own cost: one ``sample`` and one ``update_priorities`` of 512 transitions, at 50k (the
   CartPole default) and 1M transitions.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import lightning as L
import torch

from rl_lightning.algos.dqn import DQNModule
from rl_lightning.data.prioritized import PrioritizedReplayBuffer
from rl_lightning.data.replay import ReplayBuffer

try:
    from _time_to_solve import Run, Task, fit_until_solved, machine_line, run_interleaved
except ImportError:  # run from the repository root as a module
    from benchmarks._time_to_solve import Run, Task, fit_until_solved, machine_line, run_interleaved

TASK = Task("CartPole-v1", 475.0, 4_000)
KINDS = {"uniform": False, "prioritized": True}


def time_to_solve(kind: str, seed: int, max_steps: int) -> Run:
    return fit_until_solved(
        TASK, lambda: DQNModule(env_id="CartPole-v1", seed=seed, prioritized=KINDS[kind]), max_steps, kind, seed
    )


class _UpdateClock(L.Callback):
    """CPU seconds of the training steps after the first (the warm-up and its random steps fall in the first)."""

    def __init__(self) -> None:
        self.cpu = 0.0
        self.updates = 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._start = time.process_time()
        self._updates_before = trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self._updates_before > 0:
            self.cpu += time.process_time() - self._start
            self.updates += trainer.global_step - self._updates_before


def time_per_update(kind: str, updates: int = 1_000, seed: int = 0) -> float:
    """CPU milliseconds per update (its collection of 16 env steps included)."""
    clock = _UpdateClock()
    trainer = L.Trainer(
        max_steps=updates,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[clock],
    )
    trainer.fit(DQNModule(env_id="CartPole-v1", seed=seed, prioritized=KINDS[kind]))
    return 1_000 * clock.cpu / clock.updates


def buffer_costs(buffer_size: int, batch_size: int = 512, repeats: int = 200) -> dict[str, float]:
    """CPU ms of one sample (uniform, prioritized) and one priority update, from full CartPole-shaped buffers."""
    costs = {}
    for name, cls in (("uniform", ReplayBuffer), ("prioritized", PrioritizedReplayBuffer)):
        buffer = cls(buffer_size, (4,), 1000, seed=0)
        obs = torch.rand(1000, 4)
        for _ in range(buffer_size // 1000):
            buffer.add(obs, torch.zeros(1000, dtype=torch.int64), torch.ones(1000), torch.zeros(1000, dtype=bool), obs)
        start = time.process_time()
        for _ in range(repeats):
            sample = buffer.sample(batch_size)
        costs[f"{name} sample"] = 1_000 * (time.process_time() - start) / repeats
        if name == "prioritized":
            errors = torch.rand(batch_size)
            start = time.process_time()
            for _ in range(repeats):
                buffer.update_priorities(sample.indices, errors)
            costs["update_priorities"] = 1_000 * (time.process_time() - start) / repeats
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--max_steps", type=int, default=10_000, help="updates per run (train_dqn.py's budget)")
    parser.add_argument("--update_timing", type=int, default=1_000, help="updates timed per kind (0: skip)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "prioritized.md")
    args = parser.parse_args()
    torch.set_num_threads(1)
    load_before = os.getloadavg()[0]
    command = "python benchmarks/bench_prioritized.py " + " ".join(
        f"--{k} {v}" for k, v in (("seeds", args.seeds), ("max_steps", args.max_steps))
    )

    runs = run_interleaved(
        [(lambda seed, kind=kind: time_to_solve(kind, seed, args.max_steps), args.seeds) for kind in KINDS],
        "solve",
    )
    per_update = {kind: time_per_update(kind, args.update_timing) for kind in KINDS} if args.update_timing else {}
    costs = {size: buffer_costs(size) for size in (50_000, 1_000_000)}

    lines = [
        "# Prioritized vs uniform replay: DQN on CartPole-v1",
        "",
        f"`{command}`. The same settings in both (DQNModule's defaults: 16 envs, batch 512, buffer 50k, lr 2.5e-3, "
        "double DQN, a hard target copy every 160 env steps); prioritized adds `prioritized=True` "
        "(alpha 0.6, beta 0.4 annealed to 1 over the run's 10,000 updates, priorities |TD error| + 1e-6).",
        "",
        f"## Env steps to a greedy mean return >= {TASK.threshold:g} (32 episodes every {TASK.eval_every:,} env steps)",
        "",
        "| replay | seed | solved | env steps | training CPU s | best greedy return |",
        "|---|---|---|---|---|---|",
    ]
    for run in runs:
        lines.append(
            f"| {run.library} | {run.seed} | {'yes' if run.solved else '**no**'} | {run.env_steps:,} | "
            f"{run.cpu:.1f} | {run.best_return:.1f} |"
        )
    for kind in KINDS:
        mine = [run for run in runs if run.library == kind]
        solved = [run for run in mine if run.solved]
        median_steps = statistics.median(r.env_steps for r in solved) if solved else float("nan")
        median_cpu = statistics.median(r.cpu for r in solved) if solved else float("nan")
        lines.append(
            f"| **{kind}** | median | {len(solved)}/{len(mine)} | **{median_steps:,.0f}** (solved) | "
            f"{median_cpu:.1f} (solved) | |"
        )
    lines += ["", "## Cost", ""]
    if per_update:
        lines += [
            "| replay | CPU ms per update (with its 16 env steps) |",
            "|---|---|",
            *(f"| {kind} | {ms:.2f} |" for kind, ms in per_update.items()),
            "",
        ]
    lines += [
        "| buffer size | uniform sample (512) ms | prioritized sample (512) ms | update_priorities (512) ms |",
        "|---|---|---|---|",
        *(
            f"| {size:,} | {c['uniform sample']:.3f} | {c['prioritized sample']:.3f} | {c['update_priorities']:.3f} |"
            for size, c in costs.items()
        ),
        "",
        machine_line({"torch": torch.__version__, "lightning": L.__version__}, load_before),
        "",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
