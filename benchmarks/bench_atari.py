"""Does it learn Atari on a 2-core CPU? rl_lightning's PPO and DQN (configs/ppo_atari.yaml, configs/dqn_atari.yaml)
next to Stable-Baselines3 at RL-Zoo's Atari settings, on the same frames, wrappers and score definition.

    python benchmarks/bench_atari.py run --algo ppo --lib ours --seed 1 --env_steps 500000
    python benchmarks/bench_atari.py run --algo ppo --lib sb3 --seed 1 --env_steps 500000
    python benchmarks/bench_atari.py report      # benchmarks/results/atari.md and docs/atari_curves.png

One (algorithm, library, seed) per ``run``, one process each (run two at a time on two cores, one thread each).
Every few minutes the run appends its curve so far to ``benchmarks/results/atari_runs.jsonl`` (the newest line of
a run replaces the older ones), so an interrupted run keeps what it learnt; a finished run is skipped when asked
again. ``report`` turns the file into the table and the plot.

The score is the **game score of the training games** (unclipped, over full games of all lives), binned by env
steps, as CleanRL's and SB3's Atari curves report it: rl_lightning's ``charts/episodic_return`` with the preset,
SB3's ``Monitor`` (inside its ``AtariWrapper``). Both use the same base env, ``ALE/Breakout-v5`` with
``frameskip=1`` and no sticky actions (``repeat_action_probability=0``, as the references' NoFrameskip-v4), and
the same pipeline: no-op starts (30), frame skip 4 with max-pooling, 84x84 grey, a lost life ends the training
episode, FIRE on reset, clipped training rewards, 4 stacked frames. CPU seconds are the process's
(``time.process_time``), peak memory its maximum resident set.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import time
from pathlib import Path
from typing import Any

import torch
import yaml

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
RUNS = RESULTS / "atari_runs.jsonl"
CONFIGS = {"ppo": ROOT / "configs" / "ppo_atari.yaml", "dqn": ROOT / "configs" / "dqn_atari.yaml"}
SAVE_EVERY_S = 300.0
BIN = 50_000  # env steps per point of the curves

# RL-Zoo's Atari settings (rl-baselines3-zoo hyperparams/ppo.yml and dqn.yml, "atari").
ZOO = {
    "ppo": dict(
        n_envs=8,
        n_steps=128,
        n_epochs=4,
        batch_size=256,
        learning_rate=2.5e-4,  # lin_2.5e-4
        clip_range=0.1,  # lin_0.1
        vf_coef=0.5,
        ent_coef=0.01,
    ),
    "dqn": dict(
        n_envs=1,
        buffer_size=100_000,
        learning_rate=1e-4,
        batch_size=32,
        learning_starts=100_000,
        target_update_interval=1000,
        train_freq=4,
        gradient_steps=1,
        exploration_fraction=0.1,
        exploration_final_eps=0.01,
        optimize_memory_usage=False,
    ),
}


#: DQN's schedule at the budget that fits here, the same for both libraries: the references' settings are for 10M
#: steps (epsilon decays over the first 1M, learning starts at 80k-100k); over a few hundred thousand steps the
#: same fractions would leave epsilon at its floor before the first update.
DQN_SHORT_RUN = {"learning_starts": 20_000, "exploration_fraction": 0.3}


def machine() -> str:
    try:
        model = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        model = platform.processor() or "unknown CPU"
    return f"{model}, {os.cpu_count()} cores, torch {torch.__version__}, 1 thread per run"


class Recorder:
    """The run's curve: per finished game its env step, score, CPU and wall seconds; saved every few minutes."""

    def __init__(self, key: dict[str, Any], env_steps: int):
        self.key, self.env_steps = key, env_steps
        self.games: list[tuple[int, float, float, float]] = []
        self.start_cpu, self.start_wall = time.process_time(), time.perf_counter()
        self.saved_at = time.perf_counter()

    def game(self, env_step: int, score: float) -> None:
        self.games.append(
            (int(env_step), float(score), time.process_time() - self.start_cpu, time.perf_counter() - self.start_wall)
        )
        if time.perf_counter() - self.saved_at > SAVE_EVERY_S:
            self.save(done=False, steps_done=env_step)

    def save(self, done: bool, steps_done: int) -> None:
        self.saved_at = time.perf_counter()
        row = {
            **self.key,
            "env_steps": self.env_steps,
            "steps_done": int(steps_done),
            "done": done,
            "cpu_s": time.process_time() - self.start_cpu,
            "wall_s": time.perf_counter() - self.start_wall,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "machine": machine(),
            "games": self.games,
        }
        with RUNS.open("a") as file:
            file.write(json.dumps(row) + "\n")


def run_ours(algo: str, seed: int, env_steps: int, env_id: str, recorder: Recorder) -> int:
    import lightning as L

    from rl_lightning import DQNModule, PPOModule
    from rl_lightning.callbacks import EnvStepBudget

    config = yaml.safe_load(CONFIGS[algo].read_text())["model"]["init_args"]
    config.update(env_id=env_id, seed=seed, **(DQN_SHORT_RUN if algo == "dqn" else {}))
    module = (PPOModule if algo == "ppo" else DQNModule)(**config)

    class Games(L.Callback):
        """The finished games' scores (the game score with the preset), read where the module reads them: every
        pop of the source's episode tracker (each pop's games as their mean: they end within one collection)."""

        def on_train_start(self, trainer, pl_module):
            tracker = pl_module.source.episodes
            pop = tracker.pop

            def recording_pop():
                finished = pop()
                count = int(finished[2])
                for _ in range(count):
                    recorder.game(pl_module.source.env_steps, float(finished[0]) / count)
                return finished

            tracker.pop = recording_pop

        def on_train_end(self, trainer, pl_module):
            pl_module.source.episodes.pop()

    trainer = L.Trainer(
        max_steps=-1,
        max_epochs=-1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[EnvStepBudget(env_steps), Games()],
    )
    trainer.fit(module)
    return module.source.env_steps


def run_sb3(algo: str, seed: int, env_steps: int, env_id: str, recorder: Recorder) -> int:
    import ale_py
    import gymnasium as gym
    from stable_baselines3 import DQN, PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gym.register_envs(ale_py)
    settings = dict(ZOO[algo])
    n_envs = settings.pop("n_envs")
    env_kwargs = {"frameskip": 1, "repeat_action_probability": 0.0, "max_num_frames_per_episode": 108_000}
    envs = VecFrameStack(make_atari_env(env_id, n_envs=n_envs, seed=seed, env_kwargs=env_kwargs), n_stack=4)

    class Games(BaseCallback):
        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:  # Monitor's full game (AtariWrapper's lives inside it)
                    recorder.game(self.num_timesteps, info["episode"]["r"])
            return True

    if algo == "ppo":
        total = env_steps

        def linear(start: float):
            return lambda progress: progress * start

        settings.update(learning_rate=linear(settings["learning_rate"]), clip_range=linear(settings["clip_range"]))
        model = PPO("CnnPolicy", envs, seed=seed, device="cpu", **settings)
    else:
        total = env_steps
        settings.update(DQN_SHORT_RUN)
        model = DQN("CnnPolicy", envs, seed=seed, device="cpu", **settings)
    model.learn(total_timesteps=total, callback=Games())
    return model.num_timesteps


def run(args: argparse.Namespace) -> None:
    key = {"algo": args.algo, "lib": args.lib, "seed": args.seed, "env_id": args.env_id}
    for row in load_runs():
        if all(row[k] == v for k, v in key.items()) and row["done"] and row["env_steps"] >= args.env_steps:
            print(f"already done: {key} at {row['env_steps']:,} env steps (in {RUNS})")
            return
    torch.set_num_threads(1)
    recorder = Recorder(key, args.env_steps)
    runner = run_ours if args.lib == "ours" else run_sb3
    steps = runner(args.algo, args.seed, args.env_steps, args.env_id, recorder)
    recorder.save(done=True, steps_done=steps)
    print(f"{key}: {steps:,} env steps, {len(recorder.games)} games, {time.process_time():.0f} CPU s")


def load_runs() -> list[dict[str, Any]]:
    """The newest line of every run."""
    if not RUNS.exists():
        return []
    newest: dict[tuple, dict[str, Any]] = {}
    for line in RUNS.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            newest[(row["algo"], row["lib"], row["seed"], row["env_id"])] = row
    return list(newest.values())


def curve(games: list[list[float]], steps_done: int) -> list[tuple[int, float, int, float]]:
    """(bin's end env step, mean score of the games ending in it, their count, CPU s at its end) per BIN steps."""
    points = []
    for end in range(BIN, steps_done + 1, BIN):
        scores = [g[1] for g in games if end - BIN < g[0] <= end]
        cpu = max((g[2] for g in games if g[0] <= end), default=0.0)
        if scores:
            points.append((end, statistics.fmean(scores), len(scores), cpu))
    return points


def report(args: argparse.Namespace) -> None:
    runs = sorted(load_runs(), key=lambda r: (r["algo"], r["env_id"], r["lib"], r["seed"]))
    lines = [
        "# Atari: rl_lightning vs Stable-Baselines3 at equal frames (2-core CPU)",
        "",
        "`python benchmarks/bench_atari.py run --algo ALGO --lib ours|sb3 --seed S --env_steps N`, two runs at a "
        "time (one torch thread each), then `python benchmarks/bench_atari.py report`. Ours: `configs/ppo_atari.yaml` "
        "/ `configs/dqn_atari.yaml` (CleanRL's settings); SB3: RL-Zoo's Atari settings, `make_atari_env` + "
        "`VecFrameStack(4)`. Same base env (`ALE/Breakout-v5`, `frameskip=1`, no sticky actions) and pipeline; the "
        "score is the training games' real game score (unclipped, full games across lives). Frames = 4 x env steps.",
        "",
        f"Machine: {runs[0]['machine'] if runs else machine()}.",
        "",
        "| algo | env | library | seed | env steps (frames) | done | last 100 games | best 50k-step bin | games "
        "| CPU s | env steps / CPU s | peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        games = r["games"]
        last = statistics.fmean(g[1] for g in games[-100:]) if games else float("nan")
        points = curve(games, r["steps_done"])
        best = max((p[1] for p in points), default=float("nan"))
        lines.append(
            f"| {r['algo']} | {r['env_id']} | {r['lib']} | {r['seed']} | {r['steps_done']:,} "
            f"({4 * r['steps_done'] / 1e6:.2f}M) | {'yes' if r['done'] else 'running'} | {last:.1f} | {best:.1f} | "
            f"{len(games)} | {r['cpu_s']:,.0f} | {r['steps_done'] / max(r['cpu_s'], 1e-9):.0f} "
            f"| {r['peak_rss_mib']:,.0f} |"
        )
    lines += ["", "Curves (mean game score per 50k env steps):", ""]
    for r in runs:
        points = curve(r["games"], r["steps_done"])
        lines.append(
            f"- {r['algo']} {r['lib']} seed {r['seed']}: "
            + ", ".join(f"{end // 1000}k: {score:.1f}" for end, score, _, _ in points)
        )
    text = "\n".join(lines) + "\n" + (args.notes.read_text() if args.notes and args.notes.exists() else "")
    (RESULTS / "atari.md").write_text(text)
    print(text)
    plot(runs)


def plot(runs: list[dict[str, Any]]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    algos = sorted({r["algo"] for r in runs})
    if not algos:
        return
    figure, axes = plt.subplots(len(algos), 2, figsize=(11, 4 * len(algos)), squeeze=False)
    for row, algo in enumerate(algos):
        for r in (r for r in runs if r["algo"] == algo):
            points = curve(r["games"], r["steps_done"])
            label = f"{'rl_lightning' if r['lib'] == 'ours' else 'SB3'} seed {r['seed']}"
            axes[row][0].plot([4 * p[0] / 1e6 for p in points], [p[1] for p in points], label=label)
            axes[row][1].plot([p[3] / 60 for p in points], [p[1] for p in points], label=label)
        for column, xlabel in enumerate(("frames (millions)", "CPU minutes")):
            axes[row][column].set(xlabel=xlabel, ylabel="game score", title=f"{algo.upper()} Breakout")
            axes[row][column].legend()
    figure.tight_layout()
    figure.savefig(ROOT / "docs" / "atari_curves.png", dpi=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    one = commands.add_parser("run", help="one (algorithm, library, seed)")
    one.add_argument("--algo", choices=("ppo", "dqn"), required=True)
    one.add_argument("--lib", choices=("ours", "sb3"), required=True)
    one.add_argument("--seed", type=int, default=1)
    one.add_argument("--env_steps", type=int, default=500_000)
    one.add_argument("--env_id", default="ALE/Breakout-v5")
    summary = commands.add_parser("report", help="the table and the plot from the runs so far")
    summary.add_argument("--notes", type=Path, default=RESULTS / "atari_notes.md")
    args = parser.parse_args()
    run(args) if args.command == "run" else report(args)


if __name__ == "__main__":
    main()
