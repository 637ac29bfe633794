"""Many seeds in one fit (``num_seeds``, issue 49): wall and CPU time of N seeds trained in one process against N
separate one-seed processes, on this machine's CPU (or ``--device cuda``).

Rows: PPO CartPole-v1 (PPOModule's defaults: 16 envs x 32 steps, 16 updates a rollout), DQN CartPole-v1
(DQNModule's defaults) and SAC Pendulum-v1 (SACModule's defaults, ``learning_starts=1000``), each a fixed budget of
updates per seed (``--updates``). Each measurement is a whole fresh process, as a user runs it: Python, torch and
Lightning started, the module built, ``Trainer.fit`` run (no logger, checkpoints or bar). ``one process`` trains
``num_seeds=N``; ``N processes`` is N one-seed processes run one after another, i.e. N times the one-seed process
(measured in the same interleaved run: the processes differ only in their seed); ``x one seed`` is the N-seed
process's wall time over the one-seed process's, the issue's measure (in brackets: of the fits alone, without
the ~4.5 s of starting Python, torch and Lightning). ``fit s`` is the fit alone.

    python benchmarks/bench_seeds.py [--rows ppo_cartpole dqn_cartpole sac_pendulum] [--seeds 1 4 16 64]
        [--repeats 1] [--compile] [--device cpu] [--out benchmarks/results/seeds.md] [--no-write] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Row -> (module class, settings, updates per seed).
ROWS = {
    "ppo_cartpole": ("PPOModule", {}, 320),
    "dqn_cartpole": ("DQNModule", {}, 1_000),
    "sac_pendulum": ("SACModule", {"learning_starts": 1_000}, 200),
}

CHILD = """
import json, sys, time, warnings
warnings.filterwarnings("ignore")
import lightning as L, torch
import rl_lightning
name, settings, updates, device = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
module = getattr(rl_lightning, name)(**settings)
trainer = L.Trainer(max_steps=updates, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, accelerator=device)
start = time.perf_counter()
trainer.fit(module)
print(json.dumps({"fit_s": time.perf_counter() - start, "threads": torch.get_num_threads(),
                  "compile_s": sum(module.compile_seconds.values())}))
"""


def run_process(name: str, settings: dict, updates: int, device: str) -> dict[str, float]:
    """One fresh process: its wall time, its CPU time (user + system, from the OS) and its own fit time."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", CHILD, name, json.dumps(settings), str(updates), device],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{name} {settings} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu, **result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", nargs="+", choices=list(ROWS), default=list(ROWS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 4, 16, 64])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--compile", action="store_true", help="compile=True in every process")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--quick", action="store_true", help="a tenth of the updates (a dry run)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "seeds.md"))
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    lines = [
        f"# Many seeds in one fit (`num_seeds`), {args.device}" + (", compile=True" if args.compile else ""),
        "",
        f"`python benchmarks/bench_seeds.py {' '.join(sys.argv[1:])}`".replace("  ", " "),
        "",
        "| row | seeds | updates / seed | one process: wall s | fit s | CPU s | N processes: wall s | CPU s "
        "| x one seed: wall (fit) | speed-up vs N processes: wall (fit) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in args.rows:
        name, settings, updates = ROWS[row]
        updates = max(updates // 10, 16) if args.quick else updates
        settings = {**settings, **({"compile": True} if args.compile else {})}
        measured: dict[int, list[dict[str, float]]] = {seeds: [] for seeds in sorted(set([1, *args.seeds]))}
        for _ in range(args.repeats):  # interleaved: every N once per repeat
            for seeds in measured:
                measured[seeds].append(run_process(name, {**settings, "num_seeds": seeds}, updates, args.device))
                print(row, seeds, measured[seeds][-1], flush=True)
        one = {key: statistics.median(m[key] for m in measured[1]) for key in ("wall_s", "cpu_s", "fit_s")}
        for seeds in args.seeds:
            got = {key: statistics.median(m[key] for m in measured[seeds]) for key in ("wall_s", "cpu_s", "fit_s")}
            separate_wall, separate_cpu = seeds * one["wall_s"], seeds * one["cpu_s"]
            compiling = statistics.median(m["compile_s"] for m in measured[seeds])
            fit = f"{got['fit_s']:.1f}" + (f" ({compiling:.1f} compiling)" if args.compile else "")
            lines.append(
                f"| {row} | {seeds} | {updates} | {got['wall_s']:.1f} | {fit} | {got['cpu_s']:.1f} "
                f"| {separate_wall:.1f} | {separate_cpu:.1f} "
                f"| {got['wall_s'] / one['wall_s']:.2f}x ({got['fit_s'] / one['fit_s']:.1f}x) "
                f"| {separate_wall / got['wall_s']:.2f}x ({seeds * one['fit_s'] / got['fit_s']:.2f}x) |"
            )
    lines += [
        "",
        f"Machine: {os.cpu_count()} cores; load average {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at "
        f"the end; torch threads as rl_lightning picks them (one for networks under 1 M parameters, all seeds "
        f"counted). Medians of {args.repeats} interleaved repeat(s).",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_write:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
