"""Env steps per second: rl_lightning's torch envs (eager and ``compile=True``) vs gymnasium's, CartPole
and the rest of the classic-control suite (Acrobot, MountainCar, MountainCarContinuous, Pendulum).

All run on ONE CPU thread with random actions drawn each step in the library's own way
(``VectorEnv.random_actions`` for ours, ``numpy.random.Generator`` for gymnasium), side by side in
the same process. gymnasium runs its fastest vector env for the id: CartPole has a
numpy-vectorised one (``gym.make_vec("CartPole-v1", vectorization_mode="vector_entry_point")``),
the other classic-control envs only ``vectorization_mode="sync"`` (one Python env per copy).
``compile=True``: ``make_envs(env_id, n, compile=True)``, the dynamics through ``torch.compile`` (CPU
inductor); its first step (the compilation, reported as "compile s") is taken before any timing.

Each (env, library, num_envs) is warmed up, then timed ``--repeats`` times for about ``--seconds``
each (at least one step: gymnasium's sync Acrobot takes ~4 s per step of 65536 envs), the
libraries taking turns; the tables report the median of the repeats.

Peak memory per env is the growth of the peak resident set size (VmHWM, Linux only) of a fresh
subprocess per config (two at a time, after all timings): after importing the library and
stepping a 1-env copy, the peak is reset to the current RSS (the baseline), then ``num_envs``
copies are built and stepped (200 times; 3 times for gymnasium's sync envs, whose memory is their
env objects). It counts the state, the per-step temporaries and the allocator's slack; for small
``num_envs`` it is dominated by page granularity.

    .venv/bin/python benchmarks/bench_envs.py                    # all tables, ~5 minutes
    .venv/bin/python benchmarks/bench_envs.py --envs CartPole-v1 --seconds 1 --repeats 5
    .venv/bin/python benchmarks/bench_envs.py --envs Acrobot-v1 --sizes 4096 --no-memory
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gymnasium as gym
import numpy as np

# Run as a script from anywhere: make the repository importable without installing it.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RESULTS_PATH = Path(__file__).parent / "results" / "envs.md"
LIBRARIES = ("rl_lightning", "rl_lightning compiled", "gymnasium")
# Peak memory is measured for these (the compiled env's state is the eager one's).
MEMORY_LIBRARIES = ("rl_lightning", "gymnasium")
ENV_IDS = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Pendulum-v1")
# gymnasium's fastest vector env per id: numpy-vectorised where it has one, else one env per copy.
GYMNASIUM_MODES = {"CartPole-v1": "vector_entry_point"}


#: Seconds the first step of each compiled env took (env_id, num_envs) -> s, filled by _compiled_stepper.
COMPILE_SECONDS: dict[tuple[str, int], float] = {}


def _ours_stepper(env_id: str, num_envs: int, seed: int, compile: bool = False) -> Callable[[int], None]:
    # Imported here, so that gymnasium's memory children neither load nor count torch.
    import torch

    from rl_lightning.envs import make_envs

    env = make_envs(env_id, num_envs, seed=seed, compile=compile)
    env.reset()
    generator = torch.Generator().manual_seed(seed + 1)

    def run(num_steps: int) -> None:
        for _ in range(num_steps):
            env.step(env.random_actions(generator))

    if compile:
        run(1)  # the compilation, outside every timing
        COMPILE_SECONDS[env_id, num_envs] = env.compile_seconds
    return run


def _compiled_stepper(env_id: str, num_envs: int, seed: int) -> Callable[[int], None]:
    return _ours_stepper(env_id, num_envs, seed, compile=True)


def _gymnasium_mode(env_id: str) -> str:
    return GYMNASIUM_MODES.get(env_id, "sync")


def _gymnasium_stepper(env_id: str, num_envs: int, seed: int) -> Callable[[int], None]:
    env = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode=_gymnasium_mode(env_id))
    env.reset(seed=seed)
    rng = np.random.default_rng(seed + 1)
    space = env.single_action_space

    def draw_actions() -> np.ndarray:
        if isinstance(space, gym.spaces.Discrete):
            return rng.integers(0, space.n, size=num_envs)
        return rng.uniform(space.low, space.high, size=(num_envs, *space.shape)).astype(space.dtype)

    def run(num_steps: int) -> None:
        for _ in range(num_steps):
            env.step(draw_actions())

    return run


_STEPPERS = {"rl_lightning": _ours_stepper, "rl_lightning compiled": _compiled_stepper, "gymnasium": _gymnasium_stepper}


def _seconds_per_step(run: Callable[[int], None], seconds: float) -> float:
    """Warm ``run`` up and estimate its time per step (from the warm-up step, if that is slow)."""
    start = time.perf_counter()
    run(1)
    per_step = time.perf_counter() - start
    if per_step < seconds / 40:
        run(20)
        start = time.perf_counter()
        run(20)
        per_step = (time.perf_counter() - start) / 20
    return per_step


def measure_steps_per_second(env_id: str, num_envs: int, seconds: float, repeats: int) -> dict[str, list[float]]:
    """Env steps per second (``num_envs`` x vector steps / wall time) of each timed repeat.

    The libraries take turns repeat by repeat, so a load spike on the machine hits both.
    """
    runs, num_steps = {}, {}
    for library in LIBRARIES:
        runs[library] = _STEPPERS[library](env_id, num_envs, seed=0)
        # Size one repeat to last about `seconds` (at least one step).
        num_steps[library] = max(1, int(seconds / _seconds_per_step(runs[library], seconds)))
    rates: dict[str, list[float]] = {library: [] for library in LIBRARIES}
    for _ in range(repeats):
        for library in LIBRARIES:
            start = time.perf_counter()
            runs[library](num_steps[library])
            rates[library].append(num_steps[library] * num_envs / (time.perf_counter() - start))
    return rates


def _peak_rss_bytes() -> int:
    """The process's peak resident set size (VmHWM) in bytes."""
    status = Path("/proc/self/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) * 1024


def _memory_child(library: str, env_id: str, num_envs: int) -> None:
    """Runs in a fresh interpreter: print the peak-RSS growth of `num_envs` copies, in bytes."""
    if library == "rl_lightning":
        import torch

        torch.set_num_threads(1)
    # gymnasium's sync envs take seconds per step of 65536 copies; their memory is the copies.
    num_steps = 3 if library == "gymnasium" and _gymnasium_mode(env_id) == "sync" else 200
    _STEPPERS[library](env_id, 1, seed=0)(num_steps)
    # Reset the peak to the current RSS (Linux >= 4.0), so that the imports' transient peak
    # does not hide the envs' memory.
    Path("/proc/self/clear_refs").write_text("5")
    baseline = _peak_rss_bytes()
    _STEPPERS[library](env_id, num_envs, seed=0)(num_steps)
    print(json.dumps({"growth_bytes": _peak_rss_bytes() - baseline}))


def measure_bytes_per_env(library: str, env_id: str, num_envs: int) -> float:
    """Peak-RSS growth per env, measured in a fresh subprocess."""
    out = subprocess.run(
        [sys.executable, __file__, "--memory-child", library, env_id, str(num_envs)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])["growth_bytes"] / num_envs


def machine_description() -> str:
    import torch

    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{cpu}, 1 thread; Python {platform.python_version()}, torch {torch.__version__}, "
        f"gymnasium {gym.__version__}, numpy {np.__version__}"
    )


def _format_rate(rate: float) -> str:
    return f"{rate / 1e6:.2f}M" if rate >= 1e6 else f"{rate / 1e3:.0f}k"


def _measure_memory(configs: list[tuple[str, str, int]]) -> dict[tuple[str, str, int], str]:
    """bytes/env of each (library, env_id, num_envs), formatted; two subprocesses at a time (peak
    memory does not depend on how busy the CPUs are, and building 65536 gymnasium envs is slow)."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = pool.map(lambda config: measure_bytes_per_env(*config), configs)
        return {config: f"{value:,.0f}" for config, value in zip(configs, results, strict=True)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=list(ENV_IDS), choices=ENV_IDS, help="env ids")
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 256, 4096, 65536], help="num_envs")
    parser.add_argument("--seconds", type=float, default=0.4, help="duration of one timed repeat")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats per config (median)")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    parser.add_argument("--output", type=Path, default=RESULTS_PATH, help="markdown file to write")
    parser.add_argument("--memory-child", nargs=3, metavar=("LIBRARY", "ENV_ID", "NUM_ENVS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        _memory_child(args.memory_child[0], args.memory_child[1], int(args.memory_child[2]))
        return
    import torch

    torch.set_num_threads(1)
    start = time.perf_counter()
    header = (
        "| num_envs | eager steps/s | compile=True steps/s | gymnasium steps/s | eager / gymnasium "
        "| compiled / gymnasium | compile s | rl_lightning bytes/env | gymnasium bytes/env |"
    )
    rates = {}
    for env_id in args.envs:
        print(f"{env_id} (gymnasium: {_gymnasium_mode(env_id)}): steps/s eager, compiled, gymnasium", flush=True)
        for num_envs in args.sizes:
            repeats = measure_steps_per_second(env_id, num_envs, args.seconds, args.repeats)
            rates[env_id, num_envs] = {lib: statistics.median(repeats[lib]) for lib in LIBRARIES}
            ours, compiled, theirs = (rates[env_id, num_envs][lib] for lib in LIBRARIES)
            print(
                f"  {num_envs}: {_format_rate(ours)} {_format_rate(compiled)} {_format_rate(theirs)} "
                f"{ours / theirs:.2f}x {compiled / theirs:.2f}x",
                flush=True,
            )
    configs = [(lib, env_id, num_envs) for env_id in args.envs for num_envs in args.sizes for lib in MEMORY_LIBRARIES]
    memory = {config: "-" for config in configs} if args.no_memory else _measure_memory(configs)

    sections = []
    for env_id in args.envs:
        rows = [header, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for num_envs in args.sizes:
            rate = rates[env_id, num_envs]
            ours, compiled, theirs = (rate[lib] for lib in LIBRARIES)
            rows.append(
                f"| {num_envs} | {_format_rate(ours)} | {_format_rate(compiled)} | {_format_rate(theirs)} "
                f"| {ours / theirs:.2f}x | {compiled / theirs:.2f}x | {COMPILE_SECONDS[env_id, num_envs]:.1f} "
                f"| {memory['rl_lightning', env_id, num_envs]} | {memory['gymnasium', env_id, num_envs]} |"
            )
        mode = _gymnasium_mode(env_id)
        table = "\n".join(rows)
        sections.append(
            f'## {env_id}\n\ngymnasium: `gym.make_vec("{env_id}", vectorization_mode="{mode}")`\n\n{table}\n'
        )
        print(f"\n{env_id}\n{table}")

    notes = (
        f"Machine: {machine_description()}.\n\n"
        f"Env steps/s = num_envs x vector steps per second, random actions sampled every step; "
        f"median of {args.repeats} repeats of ~{args.seconds:g} s (at least one step) after warm-up, "
        "eager, compiled and gymnasium taking turns repeat by repeat. compile s: the compiled env's first "
        "step (torch.compile of its dynamics; a second env of the same size and dtype reuses it, and so does a "
        "later run through inductor's cache on disk: then ~0.1 s). "
        "gymnasium: its fastest vector env per id (numpy-vectorised CartPole; the other classic-control envs "
        "exist only as one Python env per copy, `sync`). bytes/env: growth of peak RSS in a fresh "
        "subprocess (200 steps; 3 for "
        f"gymnasium's sync envs), over a 1-env baseline. Whole run: {time.perf_counter() - start:.0f} s.\n"
    )
    print(notes)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(
        "# Classic-control env throughput: rl_lightning eager and compile=True vs gymnasium (one CPU thread)\n\n"
        f"Command: `python benchmarks/bench_envs.py {' '.join(sys.argv[1:])}`\n\n" + "\n".join(sections) + f"\n{notes}"
    )
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
