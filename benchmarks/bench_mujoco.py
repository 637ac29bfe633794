"""MuJoCo at equal env steps: rl_lightning's SAC, TD3 and PPO next to Stable-Baselines3 given the same settings, on
HalfCheetah-v5, Hopper-v5 and Walker2d-v5, a table filled over several sittings.

    python benchmarks/bench_mujoco.py run --algo sac --env HalfCheetah-v5 --lib ours --seed 1 [--env_steps 100000]
    python benchmarks/bench_mujoco.py queue [--algos sac td3 ppo] [--envs ...] [--libs ours sb3] [--seeds 1 2 3]
        [--env_steps 100000] [--jobs 2]       # every missing run, `jobs` processes at a time
    python benchmarks/bench_mujoco.py report  # benchmarks/results/mujoco.md and docs/mujoco_curves.png

One (algorithm, env, library, seed) per ``run``, one process and one torch thread each. After each evaluation the
run appends its curve so far to ``benchmarks/results/mujoco_runs.jsonl`` (the newest line of a run replaces the
older ones), so an interrupted run keeps what it measured; a run done to at least the asked env steps is skipped.

Settings, the same for both libraries (read from the configs, so they cannot drift apart):

- SAC: ``configs/sac_mujoco.yaml`` (CleanRL's MuJoCo settings as far as SB3's SAC has them: one lr 3e-4, batch
  256, (256, 256), tau 0.005, learned alpha toward -dim(A), 5,000 random steps, one update per env step);
- TD3: ``configs/td3_mujoco.yaml`` (CleanRL's: lr 3e-4, (256, 256), 25,000 random steps, exploration noise 0.1,
  target noise 0.2 clipped at 0.5, actor and targets every 2nd update);
- PPO: ``configs/ppo_mujoco.yaml`` (RL-Zoo's ``mujoco-defaults``: SB3's PPO defaults with ``VecNormalize`` of
  observations and rewards; ours: the module's running observation and return normalisation).

Evaluation, the same for both: the greedy policy (SAC's squashed mean, TD3's actor, PPO's Gaussian mean; SB3's
``predict(deterministic=True)``, through its ``VecNormalize`` statistics for PPO) on 10 episodes of fresh
gymnasium envs (``rl_lightning.callbacks.evaluate_policy``, seeds 10,000 + i) at env step 0 and every 10,000 env
steps. CPU seconds are the process's training time: evaluation is excluded.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
import yaml

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
RUNS = Path(os.environ.get("BENCH_MUJOCO_RUNS", RESULTS / "mujoco_runs.jsonl"))  # another file: a trial
TABLE = RESULTS / "mujoco.md"
PLOT = ROOT / "docs" / "mujoco_curves.png"
ALGOS = ("sac", "td3", "ppo")
ENVS = ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5")
LIBS = ("ours", "sb3")
EVAL_EVERY = 10_000
EVAL_EPISODES = 10
EVAL_SEED = 10_000

# Published reference: Tianshou 0.4.1's MuJoCo benchmark curves, 10 seeds each, read from
# examples/mujoco/benchmark/<env>/<algo>/test_rew_10seeds.csv at thu-ml/tianshou commit 39acf209 (pull request
# #341; the files were removed again the same day). (algo, env, our env steps) -> (mean, standard error with
# ddof=1, seeds, the step of Tianshou's row). Its own settings and counting, see REFERENCE_NOTE.
REFERENCES: dict[tuple[str, str, int], tuple[float, float, int, int]] = {
    ("sac", "HalfCheetah-v3", 100_000): (6514.6, 171.4, 10, 100_000),
    ("sac", "HalfCheetah-v3", 300_000): (9059.3, 350.5, 10, 300_000),
    ("sac", "Hopper-v3", 100_000): (2613.5, 330.3, 10, 100_000),
    ("sac", "Hopper-v3", 300_000): (3387.7, 38.2, 10, 300_000),
    ("sac", "Walker2d-v3", 100_000): (1305.2, 265.0, 10, 100_000),
    ("sac", "Walker2d-v3", 300_000): (3386.8, 394.0, 10, 300_000),
    ("td3", "HalfCheetah-v3", 100_000): (5335.8, 125.5, 10, 100_000),
    ("td3", "HalfCheetah-v3", 300_000): (7545.8, 238.9, 10, 300_000),
    ("td3", "Hopper-v3", 100_000): (596.5, 95.9, 10, 100_000),
    ("td3", "Hopper-v3", 300_000): (1583.4, 213.1, 10, 300_000),
    ("td3", "Walker2d-v3", 100_000): (483.2, 58.0, 10, 100_000),
    ("td3", "Walker2d-v3", 300_000): (1663.5, 148.3, 10, 300_000),
    ("ppo", "HalfCheetah-v3", 100_000): (1370.7, 155.5, 10, 122_880),
    ("ppo", "HalfCheetah-v3", 300_000): (3927.3, 332.1, 10, 307_200),
    ("ppo", "Hopper-v3", 100_000): (399.3, 14.4, 10, 122_880),
    ("ppo", "Hopper-v3", 300_000): (883.9, 99.2, 10, 307_200),
    ("ppo", "Walker2d-v3", 100_000): (425.8, 20.2, 10, 122_880),
    ("ppo", "Walker2d-v3", 300_000): (1985.8, 252.2, 10, 307_200),
}
REFERENCE_NOTE = (
    "Published reference: Tianshou 0.4.1's MuJoCo benchmark, 10 seeds (mean +- standard error), read from its "
    "curves (`examples/mujoco/benchmark/<env>/<algo>/test_rew_10seeds.csv`, thu-ml/tianshou commit 39acf209, pull "
    "request #341). No RL-Zoo or CleanRL value at these steps could be read here (RL-Zoo tables 1M steps; CleanRL's "
    "curves are in W&B). Not the same experiment, so a guide only: gym's v3 envs on mujoco-py 2.0; its env steps "
    "do not count the random warm-up (its SAC 100,000 is 110,000 env steps, TD3 125,000); SAC with a fixed alpha "
    "0.2 and lr 1e-3; TD3 as here; PPO on 64 envs with (64, 64) networks and lr decay, evaluated stochastically, "
    "at its nearest logged step (122,880 for 100,000, 307,200 for 300,000)."
)


def config(algo: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / "configs" / f"{algo}_mujoco.yaml").read_text())["model"]["init_args"]


def machine() -> str:
    try:
        model = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        model = "unknown CPU"
    return f"{model}, {os.cpu_count()} cores, torch {torch.__version__}, 1 thread per run"


class Curve:
    """The run's greedy evaluations against env steps, its training CPU / wall seconds (evaluation excluded)."""

    def __init__(self, key: dict[str, Any], env_steps: int, env_id: str):
        self.key, self.env_steps, self.env_id = key, env_steps, env_id
        self.points: list[list[float]] = []  # [env_step, mean, std, training CPU s, training wall s]
        self.eval_cpu = self.eval_wall = 0.0
        self.start_cpu, self.start_wall = time.process_time(), time.perf_counter()
        self.next_eval = 0

    def due(self, env_steps: int) -> bool:
        return env_steps >= self.next_eval

    def evaluate(self, policy: Any, env_steps: int) -> None:
        from rl_lightning.callbacks.evaluation import evaluate_policy

        cpu, wall = time.process_time(), time.perf_counter()
        result = evaluate_policy(policy, self.env_id, EVAL_EPISODES, EVAL_SEED)
        self.eval_cpu += time.process_time() - cpu
        self.eval_wall += time.perf_counter() - wall
        training_cpu, training_wall = self.training_seconds()
        self.points.append([int(env_steps), result.mean, result.std, training_cpu, training_wall])
        self.next_eval = (env_steps // EVAL_EVERY + 1) * EVAL_EVERY
        print(f"{self.key} env step {env_steps:,}: greedy {result.mean:.1f} +- {result.std:.1f}", flush=True)
        self.save(done=False, steps_done=env_steps)

    def training_seconds(self) -> tuple[float, float]:
        return (
            time.process_time() - self.start_cpu - self.eval_cpu,
            time.perf_counter() - self.start_wall - self.eval_wall,
        )

    def save(self, done: bool, steps_done: int) -> None:
        cpu, wall = self.training_seconds()
        row = {
            **self.key,
            "env_steps": self.env_steps,
            "steps_done": int(steps_done),
            "done": done,
            "cpu_s": cpu,
            "wall_s": wall,
            "machine": machine(),
            "points": self.points,
        }
        RUNS.parent.mkdir(parents=True, exist_ok=True)
        with RUNS.open("a") as file:
            file.write(json.dumps(row) + "\n")


def run_ours(algo: str, env_id: str, seed: int, env_steps: int, curve: Curve) -> int:
    import lightning as L

    from rl_lightning import PPOModule, SACModule, TD3Module
    from rl_lightning.callbacks import EnvStepBudget

    module_class = {"sac": SACModule, "td3": TD3Module, "ppo": PPOModule}[algo]
    module = module_class(**{**config(algo), "env_id": env_id, "seed": seed})

    class Evaluate(L.Callback):
        def on_train_start(self, trainer, pl_module):
            curve.evaluate(pl_module, pl_module.env_steps)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if curve.due(pl_module.env_steps):
                curve.evaluate(pl_module, pl_module.env_steps)

    trainer = L.Trainer(
        max_steps=-1,
        max_epochs=-1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[EnvStepBudget(env_steps), Evaluate()],
    )
    trainer.fit(module)
    if curve.points[-1][0] < module.env_steps:
        curve.evaluate(module, module.env_steps)
    return module.env_steps


def sb3_model(algo: str, env_id: str, seed: int) -> Any:
    """SB3's SAC / TD3 / PPO given the config's settings (module docstring)."""
    import gymnasium as gym
    from bench_sac import _sb3_model, sb3_keywords
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    args = config(algo)
    if algo in ("sac", "td3"):  # bench_sac's mapping of our settings onto SB3's (alpha from 1.0: SB3's "auto")
        kwargs, noise = sb3_keywords(algo.upper(), args)
        return _sb3_model(algo.upper(), env_id, kwargs, noise, seed)
    envs = VecNormalize(
        DummyVecEnv([lambda: gym.make(env_id)] * args["num_envs"]),
        norm_obs=args["normalize_obs"],
        norm_reward=args["normalize_rewards"],
        gamma=args["gamma"],
    )
    batch = args["num_envs"] * args["num_steps_per_rollout"]
    return PPO(
        "MlpPolicy",
        envs,
        seed=seed,
        device="cpu",
        learning_rate=args["lr"],
        n_steps=args["num_steps_per_rollout"],
        batch_size=batch // args["num_minibatches"],
        n_epochs=args["update_epochs"],
        gamma=args["gamma"],
        gae_lambda=args["gae_lambda"],
        clip_range=args["clip_coef"],
        ent_coef=args["ent_coef"],
        vf_coef=args["vf_coef"],
        max_grad_norm=args["max_grad_norm"],
        policy_kwargs=dict(net_arch=list(args["hidden_sizes"])),
    )


def run_sb3(algo: str, env_id: str, seed: int, env_steps: int, curve: Curve) -> int:
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.vec_env import VecNormalize

    model = sb3_model(algo, env_id, seed)
    normalizer = model.get_env() if isinstance(model.get_env(), VecNormalize) else None

    def act(obs: torch.Tensor) -> torch.Tensor:
        obs = obs.numpy()
        if normalizer is not None:
            obs = normalizer.normalize_obs(obs)
        return torch.as_tensor(model.predict(obs, deterministic=True)[0])

    class Evaluate(BaseCallback):
        def _on_training_start(self) -> None:
            curve.evaluate(act, 0)

        def _on_step(self) -> bool:
            if curve.due(self.num_timesteps):
                curve.evaluate(act, self.num_timesteps)
            return True

    model.learn(total_timesteps=env_steps, callback=Evaluate())
    if curve.points[-1][0] < model.num_timesteps:
        curve.evaluate(act, model.num_timesteps)
    return model.num_timesteps


def load_runs() -> list[dict[str, Any]]:
    """The newest line of every run."""
    if not RUNS.exists():
        return []
    newest: dict[tuple, dict[str, Any]] = {}
    for line in RUNS.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            newest[(row["algo"], row["env_id"], row["lib"], row["seed"])] = row
    return list(newest.values())


def is_done(key: dict[str, Any], env_steps: int) -> bool:
    return any(
        all(row[k] == v for k, v in key.items()) and row["done"] and row["env_steps"] >= env_steps
        for row in load_runs()
    )


def lock_path(key: dict[str, Any]) -> Path:
    """Where a running run keeps its process id (two queues never start the same run)."""
    return RUNS.parent / ".running" / f"{key['algo']}-{key['env_id']}-{key['lib']}-{key['seed']}.pid"


def is_running(key: dict[str, Any]) -> bool:
    try:
        os.kill(int(lock_path(key).read_text()), 0)
    except (OSError, ValueError):
        return False
    return True


def run(args: argparse.Namespace) -> None:
    key = {"algo": args.algo, "env_id": args.env, "lib": args.lib, "seed": args.seed}
    if is_done(key, args.env_steps):
        print(f"already done: {key} at >= {args.env_steps:,} env steps ({RUNS})")
        return
    if is_running(key):
        print(f"already running: {key} (process {lock_path(key).read_text()})")
        return
    lock_path(key).parent.mkdir(parents=True, exist_ok=True)
    lock_path(key).write_text(str(os.getpid()))
    torch.set_num_threads(1)
    import warnings

    warnings.filterwarnings("ignore")
    curve = Curve(key, args.env_steps, args.env)
    runner = run_ours if args.lib == "ours" else run_sb3
    steps = runner(args.algo, args.env, args.seed, args.env_steps, curve)
    curve.save(done=True, steps_done=steps)
    cpu, _ = curve.training_seconds()
    print(f"{key}: {steps:,} env steps, final greedy {curve.points[-1][1]:.1f}, {cpu:.0f} training CPU s")


def queue(args: argparse.Namespace) -> None:
    """Every missing run, ``--jobs`` at a time: seed by seed, and within a seed each cell's two libraries together,
    so that the table's cells fill evenly."""
    todo = [
        {"algo": algo, "env_id": env, "lib": lib, "seed": seed}
        for seed, algo, env, lib in itertools.product(args.seeds, args.algos, args.envs, args.libs)
    ]
    todo = [key for key in todo if not is_done(key, args.env_steps) and not is_running(key)]
    print(f"{len(todo)} runs to do", flush=True)
    running: list[subprocess.Popen] = []
    for key in todo:
        if is_done(key, args.env_steps) or is_running(key):  # another queue took it meanwhile
            continue
        while len(running) >= args.jobs:
            running = [process for process in running if process.poll() is None]
            time.sleep(5)
        command = [sys.executable, __file__, "run", "--algo", key["algo"], "--env", key["env_id"], "--lib", key["lib"]]
        command += ["--seed", str(key["seed"]), "--env_steps", str(args.env_steps)]
        running.append(subprocess.Popen(command, env={**os.environ, "OMP_NUM_THREADS": "1"}))
    for process in running:
        process.wait()


def value_at(row: dict[str, Any], env_steps: int) -> float | None:
    """The run's greedy mean at its evaluation at ``env_steps`` (the first at or past it), if it got there."""
    return next((point[1] for point in row["points"] if point[0] >= env_steps), None)


def mean_se(values: list[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.0f} (n=1)"
    se = statistics.stdev(values) / math.sqrt(len(values))
    return f"{statistics.fmean(values):.0f} +- {se:.0f} (n={len(values)})"


def difference(ours: list[float], theirs: list[float]) -> str:
    """Our mean minus SB3's, and that difference in its standard errors (sqrt(se_ours^2 + se_sb3^2)): "within one
    standard error" is |that| <= 1. Needs two seeds on each side."""
    if len(ours) < 2 or len(theirs) < 2:
        return "-"
    gap = statistics.fmean(ours) - statistics.fmean(theirs)
    se = math.sqrt(statistics.variance(ours) / len(ours) + statistics.variance(theirs) / len(theirs))
    return f"{gap:+.0f} ({gap / se:+.1f} SE)" if se > 0 else f"{gap:+.0f}"


def published(algo: str, env: str, steps: int) -> tuple[float, float, int, int] | None:
    """Tianshou's (mean, SE, seeds, its step) for our v5 env at ``steps``, if it published one."""
    return REFERENCES.get((algo, env.replace("-v5", "-v3"), steps))


def reference(algo: str, env: str, steps: int) -> str:
    found = published(algo, env, steps)
    if found is None:
        return "-"
    mean, se, seeds, at = found
    return f"{mean:.0f} +- {se:.0f} (n={seeds}{'' if at == steps else f', at {at:,}'})"


def report(args: argparse.Namespace) -> None:
    runs = [row for row in load_runs() if row["done"]]
    labels = {"ours": "rl_lightning", "sb3": "SB3, same settings"}
    lines = [
        "# MuJoCo at equal env steps: rl_lightning vs Stable-Baselines3 at the same settings",
        "",
        "Commands: `python benchmarks/bench_mujoco.py queue --env_steps 100000` (one process per run, two at a time,",
        "one torch thread each), then `python benchmarks/bench_mujoco.py report`. Runs: "
        "`benchmarks/results/mujoco_runs.jsonl` (one line per evaluation; the newest line of a run counts).",
        "",
        "Greedy return of 10 episodes (mean over the seeds +- its standard error, n = seeds done) at 100,000 env "
        "steps (and 300,000 where runs got there); settings in the module docstring of `bench_mujoco.py` and in "
        "`configs/{sac,td3,ppo}_mujoco.yaml`. CPU s: training only (evaluation excluded), median over the runs; "
        "speed: our env steps per CPU s over SB3's (medians). Difference: our mean minus SB3's, in standard errors "
        "of that difference (needs 2 seeds a side).",
        "",
        REFERENCE_NOTE,
        "",
    ]
    machines = sorted({row["machine"] for row in runs})
    lines += [f"Machines: {'; '.join(machines) or 'none yet'}.", ""]
    for steps in (100_000, 300_000):
        rows = []
        for algo, env in itertools.product(ALGOS, ENVS):
            cells, returns, rates = [], {}, {}
            for lib in LIBS:
                these = [r for r in runs if (r["algo"], r["env_id"], r["lib"]) == (algo, env, lib)]
                returns[lib] = [v for v in (value_at(r, steps) for r in these) if v is not None]
                at_steps = [r for r in these if r["steps_done"] >= steps]
                cpu = statistics.median([r["cpu_s"] for r in at_steps]) if at_steps else None
                rates[lib] = statistics.median([r["steps_done"] / r["cpu_s"] for r in at_steps]) if at_steps else None
                cells += [
                    mean_se(returns[lib]),
                    "-" if cpu is None else f"{cpu:,.0f}",
                    "-" if rates[lib] is None else f"{rates[lib]:.0f}",
                ]
            if all(cell == "-" for cell in cells):
                continue
            speed = "-" if None in rates.values() else f"{rates['ours'] / rates['sb3']:.2f}x"
            cells += [difference(returns["ours"], returns["sb3"]), speed, reference(algo, env, steps)]
            rows.append(f"| {algo.upper()} | {env} | {' | '.join(cells)} |")
        if not rows:
            continue
        header = " | ".join(f"{labels[lib]} return | CPU s | env steps / CPU s" for lib in LIBS)
        header += " | difference | speed | Tianshou (published)"
        lines += [f"## {steps:,} env steps", "", f"| algorithm | env | {header} |", "|---|---|" + "---:|" * 9]
        lines += [*rows, ""]
    TABLE.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    plot(runs)


def plot(runs: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(len(ALGOS), len(ENVS), figsize=(4 * len(ENVS), 3 * len(ALGOS)), squeeze=False)
    for (i, algo), (j, env) in itertools.product(enumerate(ALGOS), enumerate(ENVS)):
        axis = axes[i][j]
        for lib, color in (("ours", "tab:blue"), ("sb3", "tab:orange")):
            these = [r for r in runs if (r["algo"], r["env_id"], r["lib"]) == (algo, env, lib)]
            if not these:
                continue
            marks = sorted({point[0] // EVAL_EVERY * EVAL_EVERY for r in these for point in r["points"]})
            means, errors, xs = [], [], []
            for mark in marks:
                values = [v for v in (value_at(r, mark) for r in these) if v is not None]
                if values:
                    xs.append(mark)
                    means.append(statistics.fmean(values))
                    errors.append(statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0)
            label = f"{'rl_lightning' if lib == 'ours' else 'SB3'} (n={len(these)})"
            axis.plot(xs, means, color=color, label=label)
            low = [mean - error for mean, error in zip(means, errors, strict=True)]
            high = [mean + error for mean, error in zip(means, errors, strict=True)]
            axis.fill_between(xs, low, high, color=color, alpha=0.2)
        right = axis.get_xlim()[1] if axis.lines else 100_000
        points = [published(algo, env, steps) for steps in sorted({key[2] for key in REFERENCES})]
        points = [(found[3], found[0], found[1]) for found in points if found is not None and found[3] <= right * 1.3]
        if points:
            xs, means, errors = zip(*points, strict=True)
            axis.errorbar(xs, means, yerr=errors, fmt="o", color="black", markersize=3, label="Tianshou (published)")
        axis.set_title(f"{algo.upper()} {env}", fontsize=9)
        axis.xaxis.set_major_formatter(lambda x, _: f"{x / 1000:.0f}k")
        axis.set_xlabel("env steps", fontsize=8)
        axis.set_ylabel("greedy return", fontsize=8)
        if axis.lines:
            axis.legend(fontsize=7)
    figure.tight_layout()
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(PLOT, dpi=80)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    one = commands.add_parser("run", help="one (algorithm, env, library, seed)")
    one.add_argument("--algo", choices=ALGOS, required=True)
    one.add_argument("--env", default="HalfCheetah-v5")
    one.add_argument("--lib", choices=LIBS, required=True)
    one.add_argument("--seed", type=int, default=1)
    one.add_argument("--env_steps", type=int, default=100_000)
    many = commands.add_parser("queue", help="every missing run")
    many.add_argument("--algos", nargs="+", choices=ALGOS, default=list(ALGOS))
    many.add_argument("--envs", nargs="+", default=list(ENVS))
    many.add_argument("--libs", nargs="+", choices=LIBS, default=list(LIBS))
    many.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    many.add_argument("--env_steps", type=int, default=100_000)
    many.add_argument("--jobs", type=int, default=2)
    commands.add_parser("report", help="the table and the curves")
    args = parser.parse_args()
    {"run": run, "queue": queue, "report": report}[args.command](args)


if __name__ == "__main__":
    main()
