"""Do the tuned configs in ``configs/`` solve seeds they were never tuned on, within their own budget, and does the
policy a run leaves hold on fresh episodes of gymnasium's own env?

For each config and seed: ``rl-lightning fit --config configs/X.yaml --model.init_args.seed S`` (the config's own
budget, evaluation and stopping rule; in a subprocess of its own, one CPU thread), then the final policy plays
``FRESH_EPISODES`` episodes of ``gymnasium.make(env_id)`` (seeded ``FRESH_SEED + S``: start states no evaluation
of the run saw). "Solved" is what the run declared: its stopping callback stopped it on the threshold (confirmed
on fresh episodes where the callback confirms), or its last evaluation reached the threshold at the budget's end.

    python benchmarks/bench_configs.py                                  # every classic-control config, seeds 1000-1009
    python benchmarks/bench_configs.py --configs ppo_cartpole td3_pendulum --seeds 1000-1004
    python benchmarks/bench_configs.py --configs td3_pendulum --seeds 0-9 --label tuning

The table (``benchmarks/results/configs.md``) is rewritten as each run ends; runs of other labels, configs and
seeds already there are kept (a run given again replaces its row). One row per config and label: seeds solved,
the median env steps to solve against the budget, and the lowest fresh-episode mean return over the seeds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "configs.md"
#: The configs that train on a CPU in minutes (classic control), cheapest first.
CLASSIC_CONTROL = (
    "ppo_cartpole",
    "ppo_acrobot",
    "vpg_cartpole",
    "ppo_pendulum",
    "ppo_cartpole_novel",
    "sac_pendulum",
    "td3_pendulum",
    "dqn_cartpole",
    "sac_discrete_acrobot",
    "sac_discrete_cartpole",
    "rainbow_cartpole",
)
#: Not measured here: each needs hours of a GPU, or of many cores, for one seed.
NOT_MEASURED = (
    "dqn_atari",
    "ppo_atari",
    "ppo_mujoco",
    "sac_mujoco",
    "sac_halfcheetah",
    "td3_mujoco",
    "rainbow_atari",
    "sac_atari",
)
#: Fresh episodes of gymnasium's env per run. 100, not 20: a 20-episode mean of Pendulum-v1 (returns spread by ~95
#: between start states) has a standard error of ~21, so a policy whose mean over 1,000 episodes is -153 scored -207
#: on 20 of them (td3_pendulum seed 1002); 100 episodes measure the policy, not the draw (standard error ~10).
FRESH_EPISODES = 100
FRESH_SEED = 7_000_000  # + the run's seed: start states no evaluation of the run used
#: A native env id with no gymnasium id of its own: gymnasium's env it observes, and which observation entries.
OBSERVED_PARTS = {"CartPoleNoVel-v1": ("CartPole-v1", (0, 2))}  # (x, theta) of CartPole-v1


class Run(NamedTuple):
    label: str
    config: str
    seed: int
    solved: bool
    solved_at: int | None  # env steps at which the run declared solved
    budget: int  # the config's env steps
    final_eval: float  # the run's last greedy evaluation (its fixed start states)
    fresh_return: float  # mean over FRESH_EPISODES episodes of gymnasium's env
    threshold: float
    env_id: str
    wall: float  # seconds of the whole subprocess


def reference_env(env_id: str) -> Any:
    """gymnasium's own env for ``env_id`` (for CartPoleNoVel-v1: CartPole-v1 observing (x, theta) only)."""
    import gymnasium as gym
    import numpy as np

    if env_id not in OBSERVED_PARTS:
        return gym.make(env_id)
    base_id, parts = OBSERVED_PARTS[env_id]
    env = gym.make(base_id)
    low, high = env.observation_space.low[list(parts)], env.observation_space.high[list(parts)]
    space = gym.spaces.Box(low, high, dtype=np.float32)
    return gym.wrappers.TransformObservation(env, lambda obs: np.asarray(obs[list(parts)], np.float32), space)


def worker(config: str, seed: int, root_dir: str, fit_args: Sequence[str] = ()) -> dict[str, Any]:
    """Train one config with one seed in this process and measure what it left (a JSON-able dict); ``fit_args``
    go after the config's (``--trainer.max_steps 400``: a setting tried while tuning)."""
    import torch

    torch.set_num_threads(1)
    from lightning.pytorch.callbacks import EarlyStopping

    from rl_lightning.callbacks.evaluation import Evaluation, evaluate_policy
    from rl_lightning.callbacks.schedule import planned_env_steps
    from rl_lightning.cli import make_cli

    path = ROOT / "configs" / f"{config}.yaml"
    given = ["--config", str(path), "--model.init_args.seed", str(seed), "--trainer.default_root_dir", root_dir]
    cli = make_cli(["fit", *given, *fit_args])
    trainer, module = cli.trainer, cli.model
    stopper = next(c for c in trainer.callbacks if isinstance(c, EarlyStopping))
    evaluation = next(c for c in trainer.callbacks if isinstance(c, Evaluation))
    threshold = float(stopper.stopping_threshold)
    final_eval = evaluation.last_metrics["eval/episodic_return"]
    if hasattr(stopper, "solved_at"):  # a stopping rule that confirms: it says when it declared solved
        solved_at = stopper.solved_at
    else:  # a plain EarlyStopping: stopped on its threshold, or the last evaluation reached it
        reached = stopper.stopping_reason.name == "STOPPING_THRESHOLD" or final_eval >= threshold
        solved_at = module.env_steps if reached else None
    module.eval()
    fresh = evaluate_policy(module, reference_env(module.hparams.env_id), FRESH_EPISODES, seed=FRESH_SEED + seed)
    return {
        "solved": solved_at is not None,
        "solved_at": solved_at,
        "budget": int(planned_env_steps(trainer, module, "bench_configs")),
        "final_eval": final_eval,
        "fresh_return": fresh.mean,
        "threshold": threshold,
        "env_id": module.hparams.env_id,
    }


def run_one(label: str, config: str, seed: int, fit_args: str = "") -> Run:
    """One run in a subprocess of its own (``nice -n 5``, one thread), its result line parsed."""
    import tempfile

    environment = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as root_dir:
        command = ["nice", "-n", "5", sys.executable, __file__, "--worker", config, str(seed), root_dir]
        command.append(f"--fit_args={fit_args}")  # "=": a value that starts with "--"
        started = time.perf_counter()
        process = subprocess.run(command, capture_output=True, text=True, env=environment, check=False, cwd=root_dir)
        wall = time.perf_counter() - started
    lines = [line for line in process.stdout.splitlines() if line.startswith("RESULT ")]
    if process.returncode != 0 or not lines:
        raise RuntimeError(f"{config} seed {seed} failed:\n{(process.stdout + process.stderr)[-3000:]}")
    result = json.loads(lines[-1][len("RESULT ") :])
    return Run(label=label, config=config, seed=seed, wall=wall, **result)


# -- the table --------------------------------------------------------------------------------------------------

_RUN_HEADER = (
    "| label | config | seed | solved at (env steps) | budget | last eval | fresh return | threshold | env | wall s |"
)


def _run_row(run: Run) -> str:
    solved = f"{run.solved_at:,}" if run.solved_at is not None else "not solved"
    cells = [run.label, run.config, str(run.seed), solved, f"{run.budget:,}", f"{run.final_eval:.1f}"]
    cells += [f"{run.fresh_return:.1f}", f"{run.threshold:g}", run.env_id, f"{run.wall:.0f}"]
    return "| " + " | ".join(cells) + " |"


def _parse_run_row(line: str) -> Run | None:
    cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
    if len(cells) != 10 or cells[0] in ("label", "---") or not cells[2].isdigit():
        return None
    solved_at = None if cells[3] == "not solved" else int(cells[3].replace(",", ""))
    return Run(
        label=cells[0],
        config=cells[1],
        seed=int(cells[2]),
        solved=solved_at is not None,
        solved_at=solved_at,
        budget=int(cells[4].replace(",", "")),
        final_eval=float(cells[5]),
        fresh_return=float(cells[6]),
        threshold=float(cells[7]),
        env_id=cells[8],
        wall=float(cells[9]),
    )


def read_runs(path: Path) -> list[Run]:
    """The runs already in the table (its "All runs" section)."""
    if not path.exists():
        return []
    return [run for line in path.read_text().splitlines() if (run := _parse_run_row(line)) is not None]


def summary_rows(runs: list[Run]) -> list[str]:
    """One row per (label, config): seeds solved, median env steps to solve against the budget, the lowest
    fresh-episode return (and whether every seed's holds the threshold)."""
    groups: dict[tuple[str, str], list[Run]] = {}
    for run in runs:
        groups.setdefault((run.label, run.config), []).append(run)
    rows = []
    for (label, config), group in groups.items():
        seeds = sorted(run.seed for run in group)
        solved = [run.solved_at for run in group if run.solved_at is not None]
        budget = group[0].budget
        median = statistics.median(solved) if solved else None
        median_text = f"{median:,.0f} ({median / budget:.0%})" if median is not None else "-"
        worst = min(run.fresh_return for run in group)
        holds = sum(run.fresh_return >= run.threshold for run in group)
        cells = [label, config, group[0].env_id, f"{group[0].threshold:g}", f"{seed_range(seeds)}"]
        cells += [f"{len(solved)}/{len(group)}", median_text, f"{budget:,}", f"{worst:.1f}", f"{holds}/{len(group)}"]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def seed_range(seeds: list[int]) -> str:
    """The seeds as runs of consecutive ones: ``1000-1009``, ``0-9, 301-310``, ``0-2, 9``."""
    parts: list[str] = []
    start = previous = seeds[0]
    for seed in [*seeds[1:], None]:
        if seed is not None and seed == previous + 1:
            previous = seed
            continue
        parts.append(f"{start}-{previous}" if previous > start else str(start))
        if seed is not None:
            start = previous = seed
    return ", ".join(parts)


def write_table(path: Path, runs: list[Run], notes: str = "") -> None:
    """The results file: how it was measured, one summary row per config and label, then every run."""
    order = {name: index for index, name in enumerate(CLASSIC_CONTROL)}
    runs = sorted(runs, key=lambda run: (run.label, order.get(run.config, len(order)), run.config, run.seed))
    lines = [
        "# Tuned configs on seeds they were not tuned on",
        "",
        "`python benchmarks/bench_configs.py` (this file is rewritten as each run ends). Each run is",
        "`rl-lightning fit --config configs/<config>.yaml --model.init_args.seed <seed>` with the config's own budget,",
        "evaluation and stopping rule, one CPU thread; then the policy the run left plays "
        f"{FRESH_EPISODES} fresh episodes of",
        f"gymnasium's own env (`gymnasium.make(env_id)`, seeded {FRESH_SEED:,} + seed). *solved*: the run declared it",
        "(its stopping callback stopped it on the threshold, or its last evaluation reached it at the budget's end);",
        "*median to solve*: env steps at that point over the solved seeds (share of the budget); *min fresh*: the",
        "lowest of the seeds' fresh-episode mean returns; *fresh holds*: seeds whose fresh mean reaches the threshold.",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}.",
        "",
        "| label | config | env | threshold | seeds | solved | median to solve (of budget) | budget (env steps) "
        "| min fresh | fresh holds |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *summary_rows(runs),
        "",
        f"Not measured here (hours of a GPU per seed, not minutes of a CPU): {', '.join(NOT_MEASURED)}.",
        "",
    ]
    if notes:
        lines += [notes.strip(), ""]
    lines += ["## All runs", "", _RUN_HEADER, "|---|---|---|---|---|---|---|---|---|---|", *map(_run_row, runs), ""]
    path.write_text("\n".join(lines))


def _notes(path: Path) -> str:
    """The hand-written notes between the summary and "## All runs" (kept when the file is rewritten)."""
    if not path.exists():
        return ""
    text = path.read_text()
    match = re.search(r"Not measured here[^\n]*\n(.*?)## All runs", text, flags=re.DOTALL)
    return match.group(1) if match else ""


def parse_seeds(text: str) -> list[int]:
    """``1000-1009`` or ``1000,1003,1007`` (or both: ``0-4,9``)."""
    seeds: list[int] = []
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        seeds += list(range(int(first), int(last) + 1)) if last else [int(first)]
    return seeds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--configs", nargs="+", default=list(CLASSIC_CONTROL), help="config names (configs/<name>.yaml)"
    )
    parser.add_argument("--seeds", default="1000-1009", help="e.g. 1000-1009 or 0,3,7 (tune below 1000)")
    parser.add_argument("--label", default="current", help="the rows' label, e.g. before / after / tuning")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--fit_args", default="", help='more fit flags: --fit_args="--trainer.max_steps 400" (tuning)')
    parser.add_argument("--worker", nargs=3, metavar=("CONFIG", "SEED", "ROOT_DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        config, seed, root_dir = args.worker
        result = worker(config, int(seed), root_dir, shlex.split(args.fit_args))
        print("RESULT " + json.dumps(result), flush=True)
        return
    for config in args.configs:
        if not (ROOT / "configs" / f"{config}.yaml").exists():
            parser.error(f"--configs: no configs/{config}.yaml")
        if config in NOT_MEASURED:
            parser.error(f"--configs: {config} is not measured here (hours per seed)")
    seeds = parse_seeds(args.seeds)
    for config in args.configs:
        for seed in seeds:
            run = run_one(args.label, config, seed, args.fit_args)
            runs = [
                old for old in read_runs(args.out) if (old.label, old.config, old.seed) != (run.label, config, seed)
            ]
            write_table(args.out, [*runs, run], _notes(args.out))
            solved = f"solved at {run.solved_at:,}" if run.solved_at is not None else "NOT solved"
            fresh = f"fresh {run.fresh_return:.1f}, {run.wall:.0f} s"
            print(f"{args.label} {config} seed {seed}: {solved} / {run.budget:,}, {fresh}", flush=True)


if __name__ == "__main__":
    main()
