"""The time-to-threshold protocol shared by ``bench_ppo.py`` and ``bench_recurrent.py``: one evaluation
schedule, evaluator and pausable clock for every library, interleaved seeds and the report's tables.

After each rollout and its updates, once another ``Task.eval_every`` env steps have passed, a greedy
evaluation of ``EVAL_EPISODES`` episodes on a separate native torch env with ``EVAL_SEED`` (the same
evaluator and start states for all: ``rl_lightning.callbacks.evaluate_policy``); "solved" = the first
evaluation whose mean return reaches the threshold. The clock pauses during evaluations.
"""

from __future__ import annotations

import math
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import lightning as L

from rl_lightning.callbacks.evaluation import evaluate_policy

EVAL_EPISODES = 32  # as the Evaluation callback of the configs
EVAL_SEED = 4242


class Task(NamedTuple):
    env_id: str
    threshold: float  # greedy mean return that counts as solved
    eval_every: int  # env steps between evaluations


class Run(NamedTuple):
    library: str
    seed: int
    solved: bool
    wall: float  # training seconds to the solving evaluation (evaluations excluded); inf if unsolved
    cpu: float  # the same in process CPU seconds
    env_steps: int  # at the solving evaluation, else all the budget's
    setup: float  # seconds from building the run to the start of training (not in wall)
    best_return: float  # the best greedy evaluation's mean return
    throughput: float  # env steps per training CPU second (updates included), up to the stop


class Protocol:
    """The evaluation schedule, evaluator and pausable clock, the same for every library."""

    def __init__(self, task: Task):
        self.task = task
        self.built = time.perf_counter()
        self.setup = math.nan
        self.wall = self.cpu = 0.0
        self.paused_wall = self.paused_cpu = 0.0
        self.next_eval = task.eval_every
        self.solved: tuple[float, float, int] | None = None  # wall, cpu, env steps
        self.returns: list[float] = []

    def start(self) -> None:
        """Training starts now."""
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        self.setup = self.wall - self.built

    def elapsed(self) -> tuple[float, float]:
        return (
            time.perf_counter() - self.wall - self.paused_wall,
            time.process_time() - self.cpu - self.paused_cpu,
        )

    def after_update(self, env_steps: int, policy: Callable[[], Any]) -> bool:
        """Called after each rollout's updates: if an evaluation is due, evaluate ``policy()`` (anything
        ``evaluate_policy`` plays: a callable obs -> greedy actions, or a module; a fresh one per
        evaluation, so a stateful one starts clean). True once solved."""
        if self.solved is not None:
            return True
        if env_steps < self.next_eval:
            return False
        while self.next_eval <= env_steps:
            self.next_eval += self.task.eval_every
        elapsed = self.elapsed()
        wall, cpu = time.perf_counter(), time.process_time()
        returns = evaluate_policy(policy(), self.task.env_id, EVAL_EPISODES, EVAL_SEED).returns
        self.paused_wall += time.perf_counter() - wall
        self.paused_cpu += time.process_time() - cpu
        self.returns.append(returns.mean().item())
        if self.returns[-1] >= self.task.threshold:
            self.solved = (*elapsed, env_steps)
        return self.solved is not None

    def result(self, library: str, seed: int, env_steps: int) -> Run:
        """The run's row; ``env_steps``: all the run took (used if unsolved)."""
        best = max(self.returns, default=-math.inf)
        if self.solved is None:
            throughput = env_steps / self.elapsed()[1]
            return Run(library, seed, False, math.inf, math.inf, env_steps, self.setup, best, throughput)
        wall, cpu, solved_steps = self.solved
        return Run(library, seed, True, wall, cpu, solved_steps, self.setup, best, solved_steps / cpu)


class _StopWhenSolved(L.Callback):
    def __init__(self, protocol: Protocol, policy: Callable[[L.LightningModule], Any]):
        self.protocol = protocol
        self.policy = policy

    def on_train_start(self, trainer, pl_module):
        self.protocol.start()

    def on_train_epoch_end(self, trainer, pl_module):  # an epoch = one rollout and its updates
        if self.protocol.after_update(pl_module.env_steps, lambda: self.policy(pl_module)):
            trainer.should_stop = True


def fit_until_solved(
    task: Task,
    build: Callable[[], L.LightningModule],
    max_steps: int,
    library: str,
    seed: int,
    policy: Callable[[L.LightningModule], Any] = lambda module: lambda obs: module.act(obs, greedy=True),
) -> Run:
    """Fit ``build()`` (one of our modules) for at most ``max_steps`` updates, stopping once solved;
    ``policy(module)`` is what the evaluation plays (by default the greedy ``act``)."""
    protocol = Protocol(task)
    module = build()
    trainer = L.Trainer(
        max_steps=max_steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[_StopWhenSolved(protocol, policy)],
    )
    trainer.fit(module)
    return protocol.result(library, seed, module.env_steps)


def run_interleaved(runners: list[tuple[Callable[[int], Run], int]], label: str = "") -> list[Run]:
    """Seed 1 of every runner, then seed 2, ... (``(runner, seed count)`` pairs), so that a busy spell of
    the machine does not fall on one library only; the runs grouped by runner, in the given order."""
    runs: list[list[Run]] = [[] for _ in runners]
    for seed in range(1, max((count for _, count in runners), default=0) + 1):
        for (runner, count), mine in zip(runners, runs, strict=True):
            if seed <= count:
                mine.append(runner(seed))
                print(label, mine[-1], flush=True)
    return [run for mine in runs for run in mine]


def machine_line(versions: dict[str, str], load_before: float) -> str:
    """The CPU, cores, library versions and load average (``load_before``: at the start; call it after the
    runs)."""
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    cpu = next(
        (line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")),
        platform.processor() or platform.machine(),
    )
    listed = ", ".join(f"{name} {version}" for name, version in versions.items())
    return (
        f"Machine: {cpu}, {os.cpu_count()} cores, 1 torch thread; {listed}; load average "
        f"{load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end (other jobs share the cores)."
    )


class Medians(NamedTuple):
    wall: float
    cpu: float
    env_steps: float  # over the solved seeds
    throughput: float


def _median(values: list[float]) -> float:
    """The median, an unsolved seed (inf) counting as slower than every solved one."""
    return statistics.median(values) if values else math.nan


def _seconds(value: float) -> str:
    return "unsolved" if math.isinf(value) else f"{value:.1f}"


def _ratio(value: float, ours: float) -> str:
    if math.isnan(value) or math.isnan(ours):
        return "n/a"
    if math.isinf(ours):
        return "n/a (ours unsolved)"
    return "inf (unsolved)" if math.isinf(value) else f"{value / ours:.2f}x"


def report(task: Task, runs: list[Run], ours: str, goals: dict[str, float]) -> list[str]:
    """The task's section: every run, each library's medians, the other libraries' medians over ours,
    and whether each goal ``{library: its median time / ours at least this}`` is met (wall and CPU,
    every seed of ours solved)."""
    lines = [
        f"## {task.env_id}: greedy mean return >= {task.threshold:g} "
        f"({EVAL_EPISODES} episodes every {task.eval_every:,} env steps)",
        "",
        "| library | seed | solved | wall s | CPU s | env steps | env steps / CPU s | setup s | best greedy return |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        lines.append(
            f"| {run.library} | {run.seed} | {'yes' if run.solved else '**no**'} | {_seconds(run.wall)} | "
            f"{_seconds(run.cpu)} | {run.env_steps:,} | {run.throughput:,.0f} | {run.setup:.2f} | "
            f"{run.best_return:.1f} |"
        )
    medians: dict[str, Medians] = {}
    for library in dict.fromkeys(run.library for run in runs):
        mine = [run for run in runs if run.library == library]
        median = medians[library] = Medians(
            _median([r.wall for r in mine]),
            _median([r.cpu for r in mine]),
            _median([r.env_steps for r in mine if r.solved]),
            _median([r.throughput for r in mine]),
        )
        lines.append(
            f"| **{library}** | median | {sum(r.solved for r in mine)}/{len(mine)} | **{_seconds(median.wall)}** | "
            f"**{_seconds(median.cpu)}** | {median.env_steps:,.0f} (solved) | {median.throughput:,.0f} | "
            f"{_median([r.setup for r in mine]):.2f} | |"
        )
    lines.append("")
    mine = medians.get(ours)
    if mine is None:
        return lines
    for library, median in medians.items():
        if library != ours:
            lines.append(
                f"- {library} median / rl_lightning median: wall **{_ratio(median.wall, mine.wall)}**, "
                f"CPU **{_ratio(median.cpu, mine.cpu)}** (env steps to solve "
                f"{_ratio(median.env_steps, mine.env_steps)}, env steps per CPU s "
                f"{_ratio(median.throughput, mine.throughput)})"
            )
    all_solved = all(run.solved for run in runs if run.library == ours)
    for library, goal in goals.items():
        theirs = medians.get(library)
        if theirs is not None:
            met = all_solved and theirs.wall / mine.wall >= goal and theirs.cpu / mine.cpu >= goal
            lines.append(
                f"- Goal (rl_lightning at most 1/{goal:g} of {library}'s median time, wall and CPU, every seed "
                f"solved): **{'met' if met else 'not met'}**"
            )
    return [*lines, ""]
