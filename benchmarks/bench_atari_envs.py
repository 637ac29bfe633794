"""Atari env steps per second through rl_lightning's VectorEnv: gymnasium's sync and async vector envs, EnvPool and
ale-py's vector env, all on ``ALE/Breakout-v5`` with the Atari preset (``atari=True``: 84x84 grey, frame skip 4,
4 stacked frames, sticky actions, FIRE after a lost life, clipped rewards).

    make_envs("ALE/Breakout-v5", n, backend="gymnasium", vectorization_mode="sync" / "async", atari=True)
    make_envs("ALE/Breakout-v5", n, backend="envpool", atari=True, num_threads=1 / 2)
    make_envs("ALE/Breakout-v5", n, backend="ale_vector", atari=True, num_threads=1 / 2)

Beside them, EnvPool's own API (``envpool.make("Breakout-v5", env_type="gymnasium", ...)`` at the preset's settings,
its own 4-frame stacks and FIRE at a game's start, numpy actions, its next-step autoreset): the ratio of the two is
what rl_lightning's backend adds, its same-step autoreset (the ended envs' resets sent at once), the preset's frame
stacks and FIRE presses as gymnasium's preset does them, and the tensors.

Random actions, drawn every step (``VectorEnv.random_actions``; numpy's generator for the raw API). For each
``num_envs`` every configuration is built and warmed up, then timed in ``--repeats`` rounds of about ``--seconds``
each, the configurations taking turns round by round (the order rotated each round), so that a load spike on the
machine hits them all; the table gives the median round. The main process runs torch on one thread.

    .venv/bin/python benchmarks/bench_atari_envs.py                    # all sizes, ~8 minutes on 2 cores
    .venv/bin/python benchmarks/bench_atari_envs.py --sizes 8 16 --seconds 0.5 --repeats 3
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

# Run as a script from anywhere: make the repository importable without installing it.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RESULTS_PATH = Path(__file__).parent / "results" / "atari_envs.md"
ENV_ID = "ALE/Breakout-v5"
CONFIGS = (
    "gymnasium sync",
    "gymnasium async",
    "EnvPool, 1 thread",
    "EnvPool, 2 threads",
    "ale-py vector, 1 thread",
    "ale-py vector, 2 threads",
    "EnvPool's own API, 1 thread",
    "EnvPool's own API, 2 threads",
)
#: A configuration's ``run(num_steps)``, ``cpu_seconds()`` (its CPU time so far: the process's threads, and the
#: worker processes of gymnasium's async env) and ``close()``.
Stepper = tuple[Callable[[int], None], Callable[[], float], Callable[[], None]]
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds_of(pids: list[int]) -> float:
    """User + system CPU seconds of the processes ``pids`` so far (Linux's /proc/PID/stat)."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (the 14th and 15th fields)
    return total / _CLOCK_TICKS


def _ours(num_envs: int, seed: int, **kwargs) -> Stepper:
    import torch

    from rl_lightning.envs import make_envs

    env = make_envs(ENV_ID, num_envs, seed=seed, atari=True, **kwargs)
    env.reset()
    generator = torch.Generator().manual_seed(seed + 1)

    def run(num_steps: int) -> None:
        for _ in range(num_steps):
            env.step(env.random_actions(generator))

    workers = [process.pid for process in getattr(getattr(env, "gymnasium_envs", None), "processes", [])]
    return run, lambda: time.process_time() + _cpu_seconds_of(workers), env.close


def _envpool_api(num_envs: int, seed: int, num_threads: int) -> Stepper:
    """EnvPool's own API at the preset's settings, EnvPool doing all it can itself (its 4-frame stacks, its FIRE at a
    game's start), numpy actions and its next-step autoreset: what the backend adds is its same-step resets, the
    preset's stacking and FIRE presses in Python (one frame per agent step, FIRE twice also after a lost life) and
    the tensors."""
    import envpool

    kwargs = {"noop_max": 30, "frame_skip": 4, "img_height": 84, "img_width": 84, "stack_num": 4}
    kwargs |= {"use_fire_reset": True, "repeat_action_probability": 0.25, "max_episode_steps": 27_000}
    env = envpool.make(
        "Breakout-v5", env_type="gymnasium", num_envs=num_envs, seed=seed, num_threads=num_threads, **kwargs
    )
    env.reset()
    rng = np.random.default_rng(seed + 1)
    num_actions = env.action_space.n

    def run(num_steps: int) -> None:
        for _ in range(num_steps):
            env.step(rng.integers(0, num_actions, num_envs).astype(np.int32))

    return run, time.process_time, env.close


def build(config: str, num_envs: int, seed: int) -> Stepper:
    """The stepper ``run(num_steps)`` and ``close()`` of one configuration."""
    if config.startswith("gymnasium"):
        return _ours(num_envs, seed, backend="gymnasium", vectorization_mode=config.split()[-1])
    threads = 1 if config.endswith("1 thread") else 2
    if config.startswith("EnvPool's own API"):
        return _envpool_api(num_envs, seed, threads)
    backend = "envpool" if config.startswith("EnvPool") else "ale_vector"
    return _ours(num_envs, seed, backend=backend, num_threads=threads)


def _seconds_per_step(run: Callable[[int], None]) -> float:
    """Warm ``run`` up (20 steps) and time 20 more."""
    run(20)
    start = time.perf_counter()
    run(20)
    return (time.perf_counter() - start) / 20


def measure(num_envs: int, configs: tuple[str, ...], seconds: float, repeats: int) -> dict[str, dict[str, list]]:
    """Env steps per second and CPU microseconds per env step of each round of each configuration at ``num_envs``."""
    steppers = {config: build(config, num_envs, seed=0) for config in configs}
    try:
        num_steps = {
            config: max(1, int(seconds / _seconds_per_step(stepper[0]))) for config, stepper in steppers.items()
        }
        results: dict[str, dict[str, list]] = {config: {"rate": [], "cpu_us": []} for config in configs}
        for round_index in range(repeats):
            shift = round_index % len(configs)
            for config in configs[shift:] + configs[:shift]:
                run, cpu_seconds, _ = steppers[config]
                start, cpu_start = time.perf_counter(), cpu_seconds()
                run(num_steps[config])
                wall, cpu = time.perf_counter() - start, cpu_seconds() - cpu_start
                env_steps = num_steps[config] * num_envs
                results[config]["rate"].append(env_steps / wall)
                results[config]["cpu_us"].append(cpu / env_steps * 1e6)
    finally:
        for _, _, close in steppers.values():
            close()
    return results


def machine_description() -> str:
    import ale_py
    import envpool
    import gymnasium
    import torch

    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((line.split(":", 1)[1].strip() for line in lscpu.splitlines() if line.startswith("Model name")), "?")
    return (
        f"{model}, {os.cpu_count()} cores (`lscpu`); Python {platform.python_version()}, torch {torch.__version__}, "
        f"gymnasium {gymnasium.__version__}, EnvPool {envpool.__version__}, ale-py {ale_py.__version__}, "
        f"numpy {np.__version__}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 16, 32, 64], help="num_envs")
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=CONFIGS, help="what to time")
    parser.add_argument("--seconds", type=float, default=1.0, help="duration of one timed round")
    parser.add_argument("--repeats", type=int, default=5, help="rounds per configuration (median)")
    parser.add_argument("--output", type=Path, default=RESULTS_PATH, help="markdown file to write")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    configs = tuple(args.configs)
    start, load_before = time.perf_counter(), os.getloadavg()[0]
    medians: dict[tuple[str, int], float] = {}
    cpu_us: dict[tuple[str, int], float] = {}
    for num_envs in args.sizes:
        results = measure(num_envs, configs, args.seconds, args.repeats)
        for config in configs:
            medians[config, num_envs] = statistics.median(results[config]["rate"])
            cpu_us[config, num_envs] = statistics.median(results[config]["cpu_us"])
            print(
                f"{num_envs:>3} envs  {config:<30} {medians[config, num_envs]:>8,.0f} steps/s "
                f"{cpu_us[config, num_envs]:>6,.0f} CPU us/step",
                flush=True,
            )

    columns = " | ".join(f"{n} envs" for n in args.sizes)
    alignment = "|---|" + "---:|" * len(args.sizes)
    rows = [f"| env steps / s | {columns} |", alignment]
    rows += [
        f"| {config} | " + " | ".join(f"{medians[config, n]:,.0f}" for n in args.sizes) + " |" for config in configs
    ]
    for threads in ("1 thread", "2 threads"):
        ours, api = f"EnvPool, {threads}", f"EnvPool's own API, {threads}"
        if ours in configs and api in configs:
            ratios = " | ".join(f"{medians[ours, n] / medians[api, n]:.2f}x" for n in args.sizes)
            rows.append(f"| EnvPool / its own API, {threads} | {ratios} |")
    cpu_rows = [f"| CPU µs per env step | {columns} |", alignment]
    cpu_rows += [
        f"| {config} | " + " | ".join(f"{cpu_us[config, n]:,.0f}" for n in args.sizes) + " |" for config in configs
    ]
    table = "\n".join(rows) + "\n\n" + "\n".join(cpu_rows)
    notes = (
        f"Machine: {machine_description()}. Load average (1 min) {load_before:.1f} before the run, "
        f"{os.getloadavg()[0]:.1f} after (other work shared the machine).\n\n"
        f"Env steps per second (num_envs x vector steps / wall time), random actions; median of {args.repeats} rounds "
        f"of ~{args.seconds:g} s after a warm-up, the configurations taking turns round by round. Each env step is 4 "
        "Atari frames. gymnasium async: one subprocess per env. CPU µs per env step: the CPU time of the round (user "
        "+ system, all threads of the process and the async env's worker processes) per env step, what a step costs "
        "whatever else runs on the machine (wall-clock rates on a busy machine are shares of its cores). Whole run: "
        f"{time.perf_counter() - start:.0f} s.\n"
    )
    print(f"\n{table}\n\n{notes}")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(
        "# Atari env throughput: gymnasium sync / async, EnvPool and ale-py's vector env (ALE/Breakout-v5, the "
        "Atari preset)\n\n"
        f"Command: `python benchmarks/bench_atari_envs.py {' '.join(sys.argv[1:])}`\n\n{table}\n\n{notes}"
    )
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
