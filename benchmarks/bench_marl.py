"""Multi-agent PPO on VMAS ``balance`` (4 agents): the adapter's and the training's throughput against VMAS itself, and
a short IPPO-vs-MAPPO learning run at equal frames.

    python benchmarks/bench_marl.py [--quick] [--device cpu] [--threads 1] [--scenes 60] [--repeats 3]
                                    [--rollouts 3] [--learn_frames 0] [--learn_scenes 600]
                                    [--eval_every 120000] [--seed 1] [--out benchmarks/results/marl.md] [--no-write]

Throughput, in frames per second (a frame is one step of one scene, as VMAS and BenchMARL count; the env's rows are
scenes x agents), at configs/{ippo,mappo}_vmas_balance.yaml's env settings (4 agents, max_steps 100, the package's
mass 5, random package position on the line, continuous actions), ``--scenes`` scenes, ``num_steps_per_rollout``
(100) steps per measurement from a fresh reset (after ``WARM_UP_STEPS`` untimed ones), interleaved ``--repeats`` times
in the order a, a', b, c, d, medians reported with their ratio to (a):

  a. raw VMAS: ``vmas.make_env("balance", ...)`` stepped with ``env.get_random_action(agent)`` for every agent, the
     scenes that end reset one by one with ``env.reset_at(index)`` (as TorchRL's ``VmasEnv``, BenchMARL's env, does);
  a'. the same, but one ``env.reset()`` at a step where every scene ended (the ``max_steps`` limit);
  b. ``make_envs("balance", num_envs=scenes, backend="vmas", ...)`` (``VmasVectorEnv``: rows, the Dict observation,
     the private RNG, the same per-scene resets) stepped with ``envs.random_actions``;
  c./d. one whole IPPO / MAPPO training iteration (collection of ``scenes x 100`` frames, GAE, the config's 3 epochs x
     15 minibatches = 45 updates) of ``PPOModule`` built from the config with ``num_envs=scenes``, timed between the
     ends of rollouts 1 and ``--rollouts`` of one ``Trainer.fit`` (the first iteration, with its warm-up, untimed).

Learning (``--learn_frames N``, N > 0): IPPO then MAPPO (one at a time, one seed each: ``--seed``), each the config's
settings at ``--learn_scenes`` scenes for ``N`` frames (rounded up to whole rollouts); the greedy policy (the
Gaussian's mean) is evaluated before training and then every ``--eval_every`` frames, at the end of a rollout, on a
separate VMAS env of 50 scenes (200 agent episodes, the configs' ``Evaluation``) seeded 10,000 every time: the mean
per-agent undiscounted return over the 200 (balance's reward is the scene's, the same for its agents). The
evaluations' time is not in the training seconds.

``--quick``: 20-step episodes and rollouts, 3 scenes, one repeat, two rollouts per training row, and a 120-frame
learning run of each (a smoke test, ~20 s). The report goes to ``--out``; text after ``NOTES_MARKER`` in an earlier
report there is kept. ``--device cuda`` runs everything on the GPU (VMAS, the adapter and the module:
``Trainer(accelerator="gpu")``), synchronising before each clock read.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import lightning as L
import torch
import yaml

from rl_lightning import PPOModule
from rl_lightning.callbacks.policy_evaluation import evaluate_policy
from rl_lightning.envs import make_envs

try:
    from _time_to_solve import machine_line
except ImportError:  # run from the repository root as a module
    from benchmarks._time_to_solve import machine_line

ROOT = Path(__file__).resolve().parents[1]
ENV_ID = "balance"
#: The two algorithms and their configs (the same settings but for the critic's keys).
CONFIGS = {"IPPO": "ippo_vmas_balance", "MAPPO": "mappo_vmas_balance"}
EVAL_SCENES = 50  # 200 agent episodes: the configs' Evaluation(num_eval_episodes=200)
EVAL_SEED = 10_000  # the Evaluation callback's default
WARM_UP_STEPS = 5  # untimed steps before a throughput measurement
QUICK_STEPS = 20  # --quick: steps per episode and per rollout
#: A report's hand-written notes start here; a new run keeps them.
NOTES_MARKER = "<!-- notes (kept by bench_marl.py) -->"
ROW_LABELS = {
    "raw": "a. raw VMAS (vmas.make_env, random actions, reset_at per ended scene)",
    "raw_reset_all": "a'. raw VMAS, one env.reset() where every scene ended at once",
    "adapter": 'b. VmasVectorEnv (make_envs(..., backend="vmas"), random actions)',
    "IPPO": "c. IPPO training iteration (collect + GAE + 45 updates)",
    "MAPPO": "d. MAPPO training iteration (collect + GAE + 45 updates)",
}


def config_settings(algorithm: str) -> dict[str, Any]:
    """``PPOModule``'s keyword arguments from ``configs/<algorithm's config>.yaml`` (its ``model.init_args``)."""
    text = (ROOT / "configs" / f"{CONFIGS[algorithm]}.yaml").read_text()
    return dict(yaml.safe_load(text)["model"]["init_args"])


def env_settings() -> dict[str, Any]:
    """The configs' VMAS keyword arguments (the same in both configs)."""
    kwargs = [config_settings(algorithm)["env_kwargs"] for algorithm in CONFIGS]
    if any(other != kwargs[0] for other in kwargs[1:]):
        raise ValueError(f"the configs {list(CONFIGS.values())} differ in env_kwargs: {kwargs}")
    return dict(kwargs[0])


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def raw_vmas_fps(
    num_scenes: int, num_steps: int, env_kwargs: dict[str, Any], device: torch.device, seed: int, reset_all: bool
) -> float:
    """Frames per second of VMAS's own ``balance`` stepped ``num_steps`` times with random actions from a fresh
    reset (module docstring, a), after ``WARM_UP_STEPS`` untimed ones. ``reset_all``: where every scene ended at
    the same step, one ``env.reset()`` instead of one ``reset_at`` per scene."""
    import vmas

    env = vmas.make_env(ENV_ID, num_envs=num_scenes, device=device, seed=seed, **env_kwargs)

    def play(steps: int) -> None:
        for _ in range(steps):
            actions = [env.get_random_action(agent) for agent in env.agents]
            _, _, dones, _ = env.step(actions)
            if reset_all and bool(dones.all()):
                env.reset()
                continue
            for index in dones.nonzero().flatten().tolist():
                env.reset_at(index, return_observations=False)

    env.reset()
    play(WARM_UP_STEPS)
    env.reset()
    _sync(device)
    start = time.perf_counter()
    play(num_steps)
    _sync(device)
    return num_scenes * num_steps / (time.perf_counter() - start)


def adapter_fps(num_scenes: int, num_steps: int, env_kwargs: dict[str, Any], device: torch.device, seed: int) -> float:
    """The same through ``VmasVectorEnv`` (module docstring, b)."""
    envs = make_envs(ENV_ID, num_scenes, seed=seed, device=device, backend="vmas", **env_kwargs)
    generator = torch.Generator(device=device).manual_seed(seed)

    def play(steps: int) -> None:
        for _ in range(steps):
            envs.step(envs.random_actions(generator))

    envs.reset()
    play(WARM_UP_STEPS)
    envs.reset()
    _sync(device)
    start = time.perf_counter()
    play(num_steps)
    _sync(device)
    return num_scenes * num_steps / (time.perf_counter() - start)


def build_module(algorithm: str, num_scenes: int, num_steps: int, env_kwargs: dict[str, Any], seed: int) -> PPOModule:
    """``PPOModule`` at the algorithm's config's settings but ``num_scenes`` scenes (``num_envs``), ``num_steps``
    steps per rollout and ``env_kwargs``."""
    settings = config_settings(algorithm)
    settings.update(num_envs=num_scenes, num_steps_per_rollout=num_steps, env_kwargs=env_kwargs, seed=seed)
    return PPOModule(**settings)


def _trainer(max_steps: int, device: torch.device, callbacks: list[L.Callback]) -> L.Trainer:
    return L.Trainer(
        max_steps=max_steps,
        accelerator="gpu" if device.type == "cuda" else "cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
    )


class _RolloutClock(L.Callback):
    """The wall time at the end of each training step (a rollout and its updates); synchronised on a GPU."""

    def __init__(self, device: torch.device):
        self.device, self.times = device, []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        _sync(self.device)
        self.times.append(time.perf_counter())


def training_fps(
    algorithm: str,
    num_scenes: int,
    num_steps: int,
    env_kwargs: dict[str, Any],
    rollouts: int,
    device: torch.device,
    seed: int,
) -> float:
    """Frames per second of whole training iterations (module docstring, c/d): rollouts 2 .. ``rollouts``."""
    if rollouts < 2:
        raise ValueError(f"rollouts must be >= 2 (the first is the untimed warm-up), got {rollouts}")
    module = build_module(algorithm, num_scenes, num_steps, env_kwargs, seed)
    clock = _RolloutClock(device)
    _trainer(rollouts * module.training_steps_per_collection, device, [clock]).fit(module)
    if len(clock.times) != rollouts:
        raise RuntimeError(f"expected {rollouts} training steps (one per rollout), timed {len(clock.times)}")
    frames = num_scenes * num_steps * (rollouts - 1)
    return frames / (clock.times[-1] - clock.times[0])


def greedy_return(module: PPOModule, env_kwargs: dict[str, Any], device: torch.device) -> float:
    """Mean per-agent return of the greedy policy over ``EVAL_SCENES`` scenes (``EVAL_SCENES x 4`` agent episodes)."""
    envs = make_envs(ENV_ID, EVAL_SCENES, seed=EVAL_SEED, device=device, backend="vmas", **env_kwargs)
    return evaluate_policy(module, envs, seed=EVAL_SEED).mean


class _EveryFrames(L.Callback):
    """Evaluates at the end of a rollout once another ``every`` frames have passed; keeps its time apart."""

    def __init__(self, label: str, every: int, env_kwargs: dict[str, Any], device: torch.device):
        self.label, self.every, self.env_kwargs, self.device = label, every, env_kwargs, device
        self.next, self.curve, self.eval_seconds = every, [], 0.0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if pl_module.env_steps >= self.next or trainer.global_step >= trainer.max_steps:
            start = time.perf_counter()
            self.curve.append((pl_module.env_steps, greedy_return(pl_module, self.env_kwargs, self.device)))
            self.eval_seconds += time.perf_counter() - start
            print(f"{self.label} at {self.curve[-1][0]:,} frames: {self.curve[-1][1]:.2f}", flush=True)
            while self.next <= pl_module.env_steps:
                self.next += self.every


def learning_run(
    algorithm: str,
    frames: int,
    num_scenes: int,
    num_steps: int,
    env_kwargs: dict[str, Any],
    eval_every: int,
    device: torch.device,
    seed: int,
) -> tuple[list[tuple[int, float]], float, int]:
    """(frames, greedy mean per-agent return) before training and every ``eval_every`` frames, the training's wall
    seconds (evaluations excluded) and the frames trained."""
    module = build_module(algorithm, num_scenes, num_steps, env_kwargs, seed)
    rollouts = math.ceil(frames / (num_scenes * num_steps))
    curve = [(0, greedy_return(module.to(device), env_kwargs, device))]
    callback = _EveryFrames(algorithm, eval_every, env_kwargs, device)
    start = time.perf_counter()
    _trainer(rollouts * module.training_steps_per_collection, device, [callback]).fit(module)
    seconds = time.perf_counter() - start - callback.eval_seconds
    return curve + callback.curve, seconds, module.env_steps


# -- the report --------------------------------------------------------------------------------------------------


def throughput_table(rates: dict[str, list[float]]) -> list[str]:
    """The markdown rows: each measurement's median frames/s, its repeats and the ratio to raw VMAS's median."""
    reference = statistics.median(rates["raw"])
    lines = ["| measurement | frames/s (median) | each repeat | / raw VMAS |", "|---|---|---|---|"]
    for key, values in rates.items():
        median = statistics.median(values)
        each = ", ".join(f"{value:,.0f}" for value in values)
        lines.append(f"| {ROW_LABELS[key]} | {median:,.0f} | {each} | {median / reference:.3f} |")
    return lines


def _curve(curve: list[tuple[int, float]]) -> str:
    return ", ".join(f"{frames:,}: {value:.1f}" for frames, value in curve)


def interleaved(measure: dict[str, Callable[[], float]], repeats: int) -> dict[str, list[float]]:
    """Each measurement once per repeat, in turn (a busy spell of the shared machine falls on all of them)."""
    rates: dict[str, list[float]] = {key: [] for key in measure}
    for repeat in range(repeats):
        for key, run in measure.items():
            rates[key].append(run())
            print(f"repeat {repeat + 1}/{repeats}: {ROW_LABELS[key]}: {rates[key][-1]:,.0f} frames/s", flush=True)
    return rates


def _kept_notes(path: Path) -> str:
    """The text after ``NOTES_MARKER`` in an earlier report at ``path`` (hand-written notes a new run keeps)."""
    text = path.read_text() if path.exists() else ""
    return text[text.index(NOTES_MARKER) :] if NOTES_MARKER in text else NOTES_MARKER + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run (module docstring)")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (2 ran VMAS 5-20x slower on a shared 2-core machine)"
    )
    parser.add_argument("--scenes", type=int, default=60, help="scenes of the throughput rows")
    parser.add_argument("--repeats", type=int, default=3, help="throughput repeats; 0: no throughput rows")
    parser.add_argument("--rollouts", type=int, default=3, help="training iterations per training row (>= 2)")
    parser.add_argument("--learn_frames", type=int, default=0, help="frames per learning run; 0: none")
    parser.add_argument("--learn_scenes", type=int, default=600, help="scenes of the learning runs (configs: 600)")
    parser.add_argument("--eval_every", type=int, default=120_000, help="frames between evaluations (configs')")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "marl.md")
    parser.add_argument("--no-write", action="store_true", help="print the report only")
    args = parser.parse_args(argv)
    env_kwargs = env_settings()
    num_steps = config_settings("MAPPO")["num_steps_per_rollout"]
    if args.quick:  # 20-step episodes and rollouts: every path once, in seconds
        env_kwargs["max_steps"] = num_steps = QUICK_STEPS
        args.scenes, args.repeats, args.rollouts = 3, 1, 2
        args.learn_scenes, args.learn_frames, args.eval_every = 3, 2 * 3 * QUICK_STEPS, 3 * QUICK_STEPS
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no GPU")
    torch.set_num_threads(args.threads)
    # Chosen by the user: rl_lightning's fits keep this count (else one thread for small networks: threads.py).
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    load_before = os.getloadavg()[0]
    scenes, seed = args.scenes, args.seed
    measure = {
        "raw": lambda: raw_vmas_fps(scenes, num_steps, env_kwargs, device, seed, reset_all=False),
        "raw_reset_all": lambda: raw_vmas_fps(scenes, num_steps, env_kwargs, device, seed, reset_all=True),
        "adapter": lambda: adapter_fps(scenes, num_steps, env_kwargs, device, seed),
        **{
            algorithm: (
                lambda algorithm=algorithm: training_fps(
                    algorithm, scenes, num_steps, env_kwargs, args.rollouts, device, seed
                )
            )
            for algorithm in CONFIGS
        },
    }
    rates = interleaved(measure, args.repeats) if args.repeats else {}
    command = "python benchmarks/bench_marl.py " + (
        "--quick"
        if args.quick
        else f"--device {args.device} --threads {args.threads} --scenes {args.scenes} --repeats {args.repeats} "
        f"--rollouts {args.rollouts} --learn_frames {args.learn_frames} --learn_scenes {args.learn_scenes} "
        f"--seed {args.seed}"
    )
    lines = ["# Multi-agent PPO on VMAS balance", "", f"`{command}` (settings: the script's docstring)"]
    if rates:
        lines += [
            "",
            f"## Throughput on {args.device}: {scenes} scenes x {num_steps} steps, 4 agents",
            "",
            f"Frames (scene steps) per second, {args.repeats} interleaved repeat(s); training rows: "
            f"{args.rollouts - 1} timed iteration(s) of {scenes * num_steps:,} frames each.",
            "",
            *throughput_table(rates),
        ]
        print("\n".join(lines[-len(rates) - 2 :]), flush=True)
    if args.learn_frames:
        lines += [
            "",
            f"## Learning: IPPO vs MAPPO, {args.learn_scenes} scenes x {num_steps} steps per rollout, seed {seed}",
            "",
            f"Greedy mean per-agent return over {EVAL_SCENES * 4} agent episodes ({EVAL_SCENES} scenes, seed "
            f"{EVAL_SEED}) (frames: return); training seconds and frames per second without the evaluations.",
            "",
            "| algorithm | return vs frames | frames | train s | frames/s |",
            "|---|---|---|---|---|",
        ]
        for algorithm in CONFIGS:
            curve, seconds, frames = learning_run(
                algorithm, args.learn_frames, args.learn_scenes, num_steps, env_kwargs, args.eval_every, device, seed
            )
            lines.append(f"| {algorithm} | {_curve(curve)} | {frames:,} | {seconds:.0f} | {frames / seconds:,.0f} |")
            print(lines[-1], flush=True)
    versions = {name: version(name) for name in ("torch", "lightning", "vmas")}
    machine = machine_line(versions, load_before).replace(
        "1 torch thread", f"{args.threads} torch thread{'s' * (args.threads > 1)}"
    )
    lines += ["", machine if device.type == "cpu" else f"{torch.cuda.get_device_name(device)}; {machine}", ""]
    if args.no_write:
        print("\n".join(lines))
        return
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n" + _kept_notes(args.out))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
