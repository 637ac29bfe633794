"""CartPole env steps per second: rl_lightning's torch CartPole vs gymnasium's vectorised one.

Both run on ONE CPU thread with random actions drawn each step in the library's own way
(``torch.randint`` for ours, ``numpy.random.Generator.integers`` for gymnasium), side by side in
the same process. gymnasium runs ``gym.make_vec("CartPole-v1", vectorization_mode=
"vector_entry_point")``: its numpy-vectorised CartPole, the fastest mode it has.

Each (library, num_envs) is warmed up, then timed ``--repeats`` times for about ``--seconds``
each, the libraries taking turns; the table reports the median of the repeats.

Peak memory per env is the growth of the peak resident set size (VmHWM, Linux only) of a fresh
subprocess per config: after importing the library and stepping a 1-env copy, the peak is reset
to the current RSS (the baseline), then ``num_envs`` copies are built and stepped 200 times. It
counts the state, the per-step temporaries and the allocator's slack; for small ``num_envs`` it
is dominated by page granularity.

    .venv/bin/python benchmarks/bench_envs.py                    # the full table, ~1-2 minutes
    .venv/bin/python benchmarks/bench_envs.py --sizes 4096 --seconds 0.5 --no-memory
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
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

# Run as a script from anywhere: make the repository importable without installing it.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from rl_lightning.envs import CartPole

RESULTS_PATH = Path(__file__).parent / "results" / "envs.md"
LIBRARIES = ("rl_lightning", "gymnasium")


def _ours_stepper(num_envs: int, seed: int) -> Callable[[int], None]:
    env = CartPole(num_envs, seed=seed)
    env.reset()
    generator = torch.Generator().manual_seed(seed + 1)

    def run(num_steps: int) -> None:
        for _ in range(num_steps):
            actions = torch.randint(0, 2, (num_envs,), generator=generator)
            env.step(actions)

    return run


def _gymnasium_stepper(num_envs: int, seed: int) -> Callable[[int], None]:
    env = gym.make_vec("CartPole-v1", num_envs=num_envs, vectorization_mode="vector_entry_point")
    env.reset(seed=seed)
    rng = np.random.default_rng(seed + 1)

    def run(num_steps: int) -> None:
        for _ in range(num_steps):
            actions = rng.integers(0, 2, size=num_envs)
            env.step(actions)

    return run


_STEPPERS = {"rl_lightning": _ours_stepper, "gymnasium": _gymnasium_stepper}


def measure_steps_per_second(num_envs: int, seconds: float, repeats: int) -> dict[str, list[float]]:
    """Env steps per second (``num_envs`` x vector steps / wall time) of each timed repeat.

    The libraries take turns repeat by repeat, so a load spike on the machine hits both.
    """
    runs, num_steps = {}, {}
    for library in LIBRARIES:
        runs[library] = _STEPPERS[library](num_envs, seed=0)
        # Warm up, then size one repeat to last about `seconds`.
        runs[library](20)
        start = time.perf_counter()
        runs[library](20)
        num_steps[library] = max(20, int(seconds / ((time.perf_counter() - start) / 20)))
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


def _memory_child(library: str, num_envs: int) -> None:
    """Runs in a fresh interpreter: print the peak-RSS growth of `num_envs` copies, in bytes."""
    torch.set_num_threads(1)
    _STEPPERS[library](1, seed=0)(200)
    # Reset the peak to the current RSS (Linux >= 4.0), so that the imports' transient peak
    # does not hide the envs' memory.
    Path("/proc/self/clear_refs").write_text("5")
    baseline = _peak_rss_bytes()
    _STEPPERS[library](num_envs, seed=0)(200)
    print(json.dumps({"growth_bytes": _peak_rss_bytes() - baseline}))


def measure_bytes_per_env(library: str, num_envs: int) -> float:
    """Peak-RSS growth per env, measured in a fresh subprocess."""
    out = subprocess.run(
        [sys.executable, __file__, "--memory-child", library, str(num_envs)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])["growth_bytes"] / num_envs


def machine_description() -> str:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 256, 4096, 65536], help="num_envs")
    parser.add_argument("--seconds", type=float, default=1.0, help="duration of one timed repeat")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats per config (median)")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    parser.add_argument("--output", type=Path, default=RESULTS_PATH, help="markdown file to write")
    parser.add_argument("--memory-child", nargs=2, metavar=("LIBRARY", "NUM_ENVS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.memory_child:
        _memory_child(args.memory_child[0], int(args.memory_child[1]))
        return

    header = (
        "| num_envs | rl_lightning steps/s | gymnasium steps/s | ours / gymnasium "
        "| rl_lightning bytes/env | gymnasium bytes/env |"
    )
    rows = [header, "|---:|---:|---:|---:|---:|---:|"]
    print(header.replace("|---", ""), flush=True)
    for num_envs in args.sizes:
        rates = measure_steps_per_second(num_envs, args.seconds, args.repeats)
        rate = {lib: statistics.median(rates[lib]) for lib in LIBRARIES}
        if args.no_memory:
            memory = {lib: "-" for lib in LIBRARIES}
        else:
            memory = {lib: f"{measure_bytes_per_env(lib, num_envs):,.0f}" for lib in LIBRARIES}
        rows.append(
            f"| {num_envs} | {_format_rate(rate['rl_lightning'])} | {_format_rate(rate['gymnasium'])} "
            f"| {rate['rl_lightning'] / rate['gymnasium']:.2f}x "
            f"| {memory['rl_lightning']} | {memory['gymnasium']} |"
        )
        print(rows[-1], flush=True)

    notes = (
        f"Machine: {machine_description()}.\n\n"
        f"Env steps/s = num_envs x vector steps per second, random actions sampled every step; "
        f"median of {args.repeats} repeats of ~{args.seconds:g} s after warm-up, the two libraries "
        f"taking turns repeat by repeat. gymnasium: "
        '`gym.make_vec("CartPole-v1", vectorization_mode="vector_entry_point")`. bytes/env: growth '
        "of peak RSS in a fresh subprocess (200 steps), over a 1-env baseline.\n"
    )
    table = "\n".join(rows)
    print()
    print(notes)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(
        "# CartPole env throughput: rl_lightning vs gymnasium (one CPU thread)\n\n"
        f"Command: `python benchmarks/bench_envs.py {' '.join(sys.argv[1:])}`\n\n"
        f"{table}\n\n{notes}"
    )
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
