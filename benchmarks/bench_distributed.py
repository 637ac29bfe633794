"""Env steps per second of one env id (HalfCheetah-v5 by default: its step costs more than a small network's
forward) through every way this project steps gymnasium envs, in one interleaved run on this machine:

- ``sync``: gymnasium's in-process vector env (``make_envs(..., backend="gymnasium")``), one Python process;
- ``async``: gymnasium's ``AsyncVectorEnv`` (``env_kwargs={"vectorization_mode": "async"}``), one subprocess per env;
- ``ray xW``: ``make_envs(..., backend="ray", num_workers=W)``, W Ray actors on a local Ray of this machine's CPUs.

Each configuration steps ``--num_envs`` copies with fixed random actions (as a learner's loop would call
``step``: actions in, the contract's tensors out), ``--steps`` steps per timing after a warm-up, the
configurations taking turns ``--repeats`` times (a load spike hits all); the table has the median. Then the cost
of a Ray round trip itself: one CartPole-v1 copy in 1 Ray worker vs in-process (CartPole's step is ~10 us, so the
difference is the round trip: send the action, step, put the arrays in the object store, fetch them).

    .venv/bin/python benchmarks/bench_distributed.py                  # ~3 minutes
    .venv/bin/python benchmarks/bench_distributed.py --env_id Hopper-v5 --num_envs 4 --repeats 3

Results: ``benchmarks/results/distributed.md`` (with what 8 nodes of 16 cores would reach, on paper).
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import gymnasium as gym
import torch

# Run as a script from anywhere: make the repository importable without installing it.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rl_lightning.envs import make_envs

RESULTS_PATH = Path(__file__).parent / "results" / "distributed.md"


class BusyStep(gym.Wrapper):
    """A slow simulator: each step also spins the CPU for ``milliseconds`` (work, not sleep, so parallel copies
    need cores of their own)."""

    def __init__(self, env: gym.Env, milliseconds: float):
        super().__init__(env)
        self.seconds = milliseconds / 1e3

    def step(self, action):
        end = time.perf_counter() + self.seconds
        while time.perf_counter() < end:
            pass
        return self.env.step(action)


def configurations(num_envs: int) -> dict[str, dict]:
    configs = {"sync": {"backend": "gymnasium"}, "async": {"backend": "gymnasium", "vectorization_mode": "async"}}
    for workers in (1, 2):
        if workers <= num_envs:
            configs[f"ray x{workers}"] = {"backend": "ray", "num_workers": workers}
    return configs


def seconds_per_step(envs, actions: torch.Tensor, steps: int) -> float:
    start = time.perf_counter()
    for step in range(steps):
        envs.step(actions[step % len(actions)])
    return (time.perf_counter() - start) / steps


def measure(env_id: str, num_envs: int, steps: int, repeats: int, slow_ms: float = 0.0) -> dict[str, list[float]]:
    """Env steps per second of each configuration, ``repeats`` timings each, in turns (``slow_ms``: each env
    step spins that long more: :class:`BusyStep`)."""
    configs = configurations(num_envs)
    extra = {"wrappers": [functools.partial(BusyStep, milliseconds=slow_ms)]} if slow_ms else {}
    envs = {name: make_envs(env_id, num_envs, seed=0, **options, **extra) for name, options in configs.items()}
    first = next(iter(envs.values()))
    generator = torch.Generator().manual_seed(0)
    actions = torch.stack([first.random_actions(generator=generator) for _ in range(64)])
    rates: dict[str, list[float]] = {name: [] for name in envs}
    for env in envs.values():
        env.reset()
        seconds_per_step(env, actions, 20)  # warm-up
    for _ in range(repeats):
        for name, env in envs.items():
            rates[name].append(num_envs / seconds_per_step(env, actions, steps))
    for env in envs.values():
        env.close()
    return rates


def round_trip_seconds(steps: int) -> tuple[float, float]:
    """Seconds per step of one CartPole-v1 copy: in 1 Ray worker, and in-process."""
    remote = make_envs("CartPole-v1", 1, seed=0, backend="ray", num_workers=1)
    local = make_envs("CartPole-v1", 1, seed=0, backend="gymnasium")
    actions = torch.zeros(64, 1, dtype=torch.int64)
    results = []
    for env in (remote, local):
        env.reset()
        seconds_per_step(env, actions, 50)
        results.append(statistics.median(seconds_per_step(env, actions, steps) for _ in range(3)))
        env.close()
    return results[0], results[1]


def _table(rates: dict[str, list[float]]) -> str:
    medians = {name: statistics.median(values) for name, values in rates.items()}
    rows = [
        f"| {name} | {medians[name]:,.0f} | {min(values):,.0f}..{max(values):,.0f} | "
        f"{medians[name] / medians['sync']:.2f} |"
        for name, values in rates.items()
    ]
    return "\n".join(["| configuration | env steps / s | range | vs sync |", "|---|---:|---:|---:|", *rows])


def machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} CPUs, Python {platform.python_version()}, torch {torch.__version__}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env_id", default="HalfCheetah-v5")
    parser.add_argument("--num_envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=300, help="steps per timing")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--slow_ms", type=float, default=1.0, help="the slow simulator's extra CPU ms per step")
    parser.add_argument("--output", type=Path, default=RESULTS_PATH)
    args = parser.parse_args()
    torch.set_num_threads(1)
    import ray

    from rl_lightning.envs.ray_vector import init_ray

    init_ray(include_dashboard=False, configure_logging=False, log_to_driver=False)
    cpus = int(ray.cluster_resources().get("CPU", 0))
    rates = measure(args.env_id, args.num_envs, args.steps, args.repeats)
    slow_steps = max(20, args.steps // 3)
    slow = measure(args.env_id, args.num_envs, slow_steps, args.repeats, args.slow_ms)
    remote, local = round_trip_seconds(args.steps)
    ray.shutdown()
    sync = statistics.median(rates["sync"])
    per_env_step = 1 / sync  # seconds of one env step in-process (simulation + conversion)
    batch_x1 = args.num_envs / statistics.median(rates["ray x1"])  # seconds per batch step, 1 worker
    batch_x2 = args.num_envs / statistics.median(rates.get("ray x2", rates["ray x1"]))
    per_worker = max(batch_x2 - batch_x1, 1e-6)
    overhead = remote - local
    table, slow_table = _table(rates), _table(slow)
    text = f"""# Env workers: in-process, subprocesses and Ray actors

`{" ".join(["python", *sys.argv])}` (`benchmarks/bench_distributed.py`), {time.strftime("%Y-%m-%d")}.
Machine: {machine()}; a local Ray of {cpus} CPUs. Torch on 1 thread.

{args.env_id}, {args.num_envs} copies, fixed random actions, {args.steps} steps per timing, {args.repeats} timings
per configuration in turns (median and range). "ray xW": `make_envs(..., backend="ray", num_workers=W)`.

{table}

The same with a slow simulator: every step of every copy also spins the CPU for {args.slow_ms:g} ms (a wrapper,
`BusyStep`; {slow_steps} steps per timing), as a user's own simulator or a physics engine at a fine time step
would:

{slow_table}

A Ray round trip (one CartPole-v1 copy, whose own step is microseconds): {remote * 1e3:.2f} ms per step in 1 Ray
worker vs {local * 1e3:.3f} ms in-process: **{overhead * 1e3:.2f} ms per round trip** (send the actions, step, put
the arrays in the object store, fetch them).

## What it says, and what 8 nodes of 16 cores would reach (on paper)

- On this machine one in-process env step of {args.env_id} costs {per_env_step * 1e6:.0f} us (simulation and
  conversion), and the round trip {overhead * 1e3:.2f} ms: a worker pays for it once per step of its whole batch,
  so it is amortised over `envs_per_worker` copies. Workers gain where the simulation of one batch costs more than
  a round trip and there are idle cores; on {cpus} cores shared with the learner and Ray's own processes they
  cannot beat one process by much, and the table shows by how much (or how little) they do.
- The learner's side grows with the workers: one batch step took {batch_x1 * 1e3:.2f} ms with 1 worker and
  {batch_x2 * 1e3:.2f} ms with 2 (the fast env, where the simulation is not the cost): about
  **{per_worker * 1e3:.2f} ms more per worker** for the learner's process to send the actions and gather and
  convert the results (on this 2-core machine that also competes with the workers for the cores, so it is an
  upper bound).
- 8 nodes x 16 cores = 128 cores, one worker per core, `envs_per_worker = E`: the workers step in parallel in
  about `E x {per_env_step * 1e6:.0f} us + {overhead * 1e3:.2f} ms`, but one learner gathers 128 results per
  batch step, about `128 x {per_worker * 1e3:.2f} ms` = {128 * per_worker * 1e3:.0f} ms. That gather is what stops
  it first: one learner reaches about {128 * 8 / max(128 * per_worker, 8 * per_env_step + overhead):,.0f} env
  steps / s with E = 8 and {128 * 32 / max(128 * per_worker, 32 * per_env_step + overhead):,.0f} with E = 32
  (more copies per worker amortise the gather). With one learner rank per node (8 DDP ranks, each with the 16
  workers of its node: `--num_nodes 8` with `env_backend="ray"`), each gathers 16 results:
  {8 * 16 * 32 / max(16 * per_worker, 32 * per_env_step + overhead):,.0f} env steps / s at E = 32 in all. Across
  nodes the round trip grows by the network's latency (~0.05-0.2 ms on a LAN) and the bytes per step are small
  ({args.env_id}: a few dozen float32 per copy), so the network's bandwidth is not the limit.
- Then the learner's own work: it acts on every observation (one batched forward for all copies) and updates.
  An off-policy learner doing one update per env step (SAC, TD3) at a few hundred to a few thousand updates per
  second on a CPU (benchmarks/results/engine.md) caps the useful env rate far below those figures, whatever the
  workers could give; PPO's rollout-then-update cycle lets env steps run ahead of updates, so it uses more of
  them. For a cheap simulator like HalfCheetah, in-process stepping on the learner's cores (or EnvPool) is the
  faster choice at any scale; Ray workers are for simulators whose step costs milliseconds.
"""
    args.output.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
