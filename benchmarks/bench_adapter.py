"""GymnasiumVectorEnv's time per step vs gymnasium's own vector env for the same id.

Both run on ONE CPU thread, side by side in the same process, stepping the same pre-drawn
random actions (a cycle of 64 batches: torch tensors for the adapter, numpy arrays for
gymnasium). gymnasium runs ``gym.make_vec(env_id, num_envs, vectorization_mode="sync",
vector_kwargs={"autoreset_mode": SAME_STEP})``, the vector env the adapter wraps, with its
default ``copy=True``; the adapter's time includes its action checks (type, shape, dtype,
values), the conversion to numpy and back to tensors, and ``info["final_observation"]``.

Each (env id, num_envs) is warmed up, then timed ``--repeats`` times for about ``--seconds``
each, the two taking turns; the table reports the median of the repeats, and as the ratio the
median of the per-repeat ratios (each of two back-to-back runs: robust to load on the machine).

    python benchmarks/bench_adapter.py                      # the full table, ~1 minute
    python benchmarks/bench_adapter.py --env-ids CartPole-v1 --sizes 16 --seconds 0.1
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import torch

# Run as a script from anywhere: make the repository importable without installing it.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.bench_envs import machine_description
from rl_lightning.envs import make_envs

RESULTS_PATH = Path(__file__).parent / "results" / "adapter.md"
RUNNERS = ("gymnasium", "adapter")
NUM_ACTION_BATCHES = 64


def _steppers(env_id: str, num_envs: int, seed: int) -> dict[str, Callable[[int], None]]:
    """``run(num_steps)`` for gymnasium's vector env and for the adapter, on the same actions."""
    adapter = make_envs(env_id, num_envs, seed=seed, backend="gymnasium")
    adapter.reset()
    reference = gym.make_vec(
        env_id,
        num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
    )
    reference.reset(seed=seed)
    generator = torch.Generator().manual_seed(seed + 1)
    actions = [adapter.random_actions(generator) for _ in range(NUM_ACTION_BATCHES)]
    numpy_actions = [a.numpy().copy() for a in actions]

    def run_adapter(num_steps: int) -> None:
        for step in range(num_steps):
            adapter.step(actions[step % NUM_ACTION_BATCHES])

    def run_gymnasium(num_steps: int) -> None:
        for step in range(num_steps):
            reference.step(numpy_actions[step % NUM_ACTION_BATCHES])

    return {"gymnasium": run_gymnasium, "adapter": run_adapter}


def measure_seconds_per_step(env_id: str, num_envs: int, seconds: float, repeats: int) -> dict[str, list[float]]:
    """Seconds per vector step of each timed repeat; the two take turns repeat by repeat, so
    that a load spike on the machine hits both."""
    runs = _steppers(env_id, num_envs, seed=0)
    num_steps = {}
    for name, run in runs.items():
        run(20)  # warm-up
        start = time.perf_counter()
        run(20)
        num_steps[name] = max(20, int(seconds / ((time.perf_counter() - start) / 20)))
    times: dict[str, list[float]] = {name: [] for name in RUNNERS}
    for _ in range(repeats):
        for name in RUNNERS:
            start = time.perf_counter()
            runs[name](num_steps[name])
            times[name].append((time.perf_counter() - start) / num_steps[name])
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-ids", nargs="+", default=["CartPole-v1", "Acrobot-v1", "Pendulum-v1"])
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 256], help="num_envs")
    parser.add_argument("--seconds", type=float, default=0.1, help="duration of one timed repeat")
    parser.add_argument("--repeats", type=int, default=31, help="timed repeats per config (median)")
    parser.add_argument("--output", type=Path, default=RESULTS_PATH, help="markdown file to write")
    args = parser.parse_args()
    torch.set_num_threads(1)

    header = "| env id | num_envs | gymnasium µs/step | adapter µs/step | adapter / gymnasium |"
    rows = [header, "|---|---:|---:|---:|---:|"]
    print(header, flush=True)
    for env_id in args.env_ids:
        for num_envs in args.sizes:
            times = measure_seconds_per_step(env_id, num_envs, args.seconds, args.repeats)
            median = {name: statistics.median(times[name]) for name in RUNNERS}
            ratio = statistics.median(a / g for a, g in zip(times["adapter"], times["gymnasium"], strict=True))
            rows.append(
                f"| {env_id} | {num_envs} | {median['gymnasium'] * 1e6:,.0f} | {median['adapter'] * 1e6:,.0f} "
                f"| {ratio:.2f}x |"
            )
            print(rows[-1], flush=True)

    notes = (
        f"Machine: {machine_description()}.\n\n"
        f"Time per vector step (all num_envs envs), median of {args.repeats} repeats of ~{args.seconds:g} s "
        "after warm-up, the two taking turns repeat by repeat, on the same pre-drawn random actions; "
        "adapter / gymnasium is the median of the per-repeat ratios. "
        'gymnasium: `gym.make_vec(env_id, num_envs, vectorization_mode="sync", '
        'vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP})`; adapter: '
        '`make_envs(env_id, num_envs, backend="gymnasium")` stepping that same vector env (with `copy=False`: '
        "it converts every array into a fresh tensor anyway) behind the VectorEnv contract. Target: <= 1.2x.\n"
    )
    print()
    print(notes)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(
        "# GymnasiumVectorEnv overhead: adapter vs gymnasium's own vector env (one CPU thread)\n\n"
        f"Command: `python benchmarks/bench_adapter.py {' '.join(sys.argv[1:])}`\n\n" + "\n".join(rows) + f"\n\n{notes}"
    )
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
