"""SAC and TD3 next to Stable-Baselines3, in one interleaved run: time to solve Pendulum-v1, CPU time per
update at matched settings, and MuJoCo (HalfCheetah-v5, Hopper-v5) at a fixed budget.

    python benchmarks/bench_sac.py [--seeds 5] [--sb3_seeds 3] [--update_repeats 3]
        [--mujoco_steps 100000] [--mujoco_seeds 3] [--out benchmarks/results/sac.md]

1. **Pendulum-v1, time to a greedy mean return >= -200** (the protocol of ``_time_to_solve.py``: 32 greedy
   episodes on a native env every 1,000 env steps, the clock paused while evaluating): SACModule and TD3Module
   with ``configs/{sac,td3}_pendulum.yaml``; SB3 SAC and TD3 with RL-Zoo's settings (``hyperparams/sac.yml``
   Pendulum-v1: lr 1e-3, the rest SB3's defaults; ``td3.yml``: gamma 0.98, 10,000 random steps, updates once
   per episode, (400, 300)); and SB3 given **our configs' settings** (engine, not tuning).
2. **CPU time per update at matched settings**: SAC and TD3 with SB3's defaults on both sides (batch 256,
   (256, 256) networks, one env, one update per env step), Pendulum-v1, after the random warm-up.
3. **MuJoCo at a fixed budget**: SACModule's defaults and SB3 SAC's with CleanRL's 5,000 random steps (the
   same settings), ``--mujoco_steps`` env steps, greedy return of 10 episodes at the end (0 skips it).
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import lightning as L
import numpy as np
import torch
import yaml
from _time_to_solve import Protocol, Run, Task, fit_until_solved, machine_line, report, run_interleaved

from rl_lightning import SACModule, TD3Module
from rl_lightning.callbacks.evaluation import evaluate_policy

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
PENDULUM = Task("Pendulum-v1", -200.0, 1_000)
MODULES = {"SAC": SACModule, "TD3": TD3Module}

# RL-Zoo's Pendulum settings (rl-baselines3-zoo hyperparams/sac.yml and td3.yml, read for this benchmark).
ZOO = {
    "SAC": dict(n_timesteps=20_000, kwargs=dict(learning_rate=1e-3)),
    "TD3": dict(
        n_timesteps=20_000,
        kwargs=dict(
            gamma=0.98,
            buffer_size=200_000,
            learning_starts=10_000,
            gradient_steps=-1,
            train_freq=(1, "episode"),
            learning_rate=1e-3,
            policy_kwargs=dict(net_arch=[400, 300]),
        ),
        noise_std=0.1,
    ),
}


def load_config(algo: str) -> tuple[dict[str, Any], int]:
    config = yaml.safe_load((CONFIGS / f"{algo.lower()}_pendulum.yaml").read_text())
    return config["model"]["init_args"], config["trainer"]["max_steps"]


def same_settings(algo: str) -> tuple[dict[str, Any], int, float]:
    """SB3 keyword arguments equal to our config's settings, its budget in env steps, and the exploration std."""
    args, max_steps = load_config(algo)
    kwargs, noise = sb3_keywords(algo, args)
    return kwargs, args["learning_starts"] + max_steps * args["train_freq"] // args["gradient_steps"], noise


def sb3_keywords(algo: str, args: dict[str, Any]) -> tuple[dict[str, Any], float]:
    """SB3 SAC's / TD3's keyword arguments equal to a SACModule / TD3Module config's ``args``, and TD3's
    exploration std (0 for SAC; SB3 adds its action noise in [-1, 1] units, as ours in half-ranges)."""
    kwargs: dict[str, Any] = dict(
        learning_rate=args["lr"],
        buffer_size=args["buffer_size"],
        learning_starts=args["learning_starts"],
        batch_size=args["batch_size"],
        tau=args["tau"],
        gamma=args["gamma"],
        train_freq=args["train_freq"],
        gradient_steps=args["gradient_steps"],
        policy_kwargs=dict(net_arch=list(args["hidden_sizes"])),
    )
    if algo == "TD3":
        kwargs.update(
            policy_delay=args["policy_delay"],
            target_policy_noise=args["target_noise"],
            target_noise_clip=args["target_noise_clip"],
        )
        return kwargs, args["exploration_noise"]
    return kwargs, 0.0


def run_ours(algo: str, seed: int) -> Run:
    args, max_steps = load_config(algo)
    return fit_until_solved(
        PENDULUM, lambda: MODULES[algo](**{**args, "seed": seed}), max_steps, f"rl_lightning {algo}Module", seed
    )


def _sb3_model(algo: str, env_id: str, kwargs: dict[str, Any], noise_std: float, seed: int):
    from stable_baselines3 import SAC, TD3
    from stable_baselines3.common.noise import NormalActionNoise

    env = gym.make(env_id)
    extra: dict[str, Any] = {}
    if algo == "TD3" and noise_std > 0:
        dims = env.action_space.shape[0]
        extra["action_noise"] = NormalActionNoise(np.zeros(dims), noise_std * np.ones(dims))
    cls = SAC if algo == "SAC" else TD3
    return cls("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **kwargs, **extra)


def run_sb3(algo: str, settings: str, seed: int) -> Run:
    """SB3 SAC/TD3 on gymnasium's Pendulum-v1 with ``settings`` ("zoo" or "ours"), evaluated by the
    protocol every 1,000 env steps (an SB3 callback after each env step)."""
    from stable_baselines3.common.callbacks import BaseCallback

    if settings == "zoo":
        kwargs, budget, noise = ZOO[algo]["kwargs"], ZOO[algo]["n_timesteps"], ZOO[algo].get("noise_std", 0.0)
        label = f"SB3 {algo} (RL-Zoo)"
    else:
        kwargs, budget, noise = same_settings(algo)
        label = f"SB3 {algo} (our config's settings)"
    protocol = Protocol(PENDULUM)
    model = _sb3_model(algo, PENDULUM.env_id, kwargs, noise, seed)

    def act(obs):
        actions, _ = model.predict(obs.numpy(), deterministic=True)
        return torch.as_tensor(actions)

    class StopWhenSolved(BaseCallback):
        def _on_training_start(self) -> None:
            protocol.start()

        def _on_step(self) -> bool:
            return not protocol.after_update(self.num_timesteps, lambda: act)

    model.learn(total_timesteps=budget, callback=StopWhenSolved())
    return protocol.result(label, seed, model.num_timesteps)


# -- CPU time per update at matched settings ------------------------------------------------------------


def per_update_ours(algo: str, updates: int, learning_starts: int) -> float:
    """CPU ms per update (env step included) of our module with its defaults, after the warm-up."""
    marks: dict[str, float] = {}

    class Clock(L.Callback):
        def on_update_end(self, trainer, pl_module, loss):
            if trainer.global_step == 1:  # the warm-up happened in update 1's collection
                marks["start"] = time.process_time()

        def on_train_end(self, trainer, pl_module):
            marks["end"] = time.process_time()

    module = MODULES[algo](
        learning_starts=learning_starts, buffer_size=learning_starts + updates, steps_per_epoch=updates
    )
    L.Trainer(
        max_steps=updates + 1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[Clock()],
    ).fit(module)
    return (marks["end"] - marks["start"]) / updates * 1e3


def per_update_sb3(algo: str, updates: int, learning_starts: int) -> float:
    """The same for SB3 with its defaults (learning_starts set alike)."""
    from stable_baselines3.common.callbacks import BaseCallback

    model = _sb3_model(algo, "Pendulum-v1", dict(learning_starts=learning_starts), 0.1, 0)
    marks: dict[str, float] = {}

    class Clock(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps == learning_starts + 1:
                marks["start"] = time.process_time()
            return True

        def _on_training_end(self) -> None:
            marks["end"] = time.process_time()

    model.learn(total_timesteps=learning_starts + updates + 1, callback=Clock())
    return (marks["end"] - marks["start"]) / updates * 1e3


# -- MuJoCo at a fixed budget ------------------------------------------------------------------------


def mujoco_ours(env_id: str, steps: int, seed: int) -> dict[str, Any]:
    module = SACModule(env_id=env_id, learning_starts=5_000, buffer_size=steps, seed=seed)
    wall, cpu = time.perf_counter(), time.process_time()
    L.Trainer(
        max_steps=module.optimizer_steps_for(steps),
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    ).fit(module)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    result = evaluate_policy(module, gym.make(env_id), num_episodes=10, seed=10_000 + seed)
    return dict(library="rl_lightning SACModule", seed=seed, wall=wall, cpu=cpu, mean=result.mean, std=result.std)


def mujoco_sb3(env_id: str, steps: int, seed: int) -> dict[str, Any]:
    model = _sb3_model("SAC", env_id, dict(learning_starts=5_000, buffer_size=steps), 0.0, seed)
    wall, cpu = time.perf_counter(), time.process_time()
    model.learn(total_timesteps=steps)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    env = gym.make(env_id)
    returns = []
    for episode in range(10):
        obs, _ = env.reset(seed=10_000 + seed if episode == 0 else None)
        done, total = False, 0.0
        while not done:
            obs, reward, terminated, truncated, _ = env.step(model.predict(obs, deterministic=True)[0])
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return dict(
        library="SB3 SAC (same settings)",
        seed=seed,
        wall=wall,
        cpu=cpu,
        mean=float(np.mean(returns)),
        std=float(np.std(returns)),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5, help="rl_lightning seeds per algorithm (Pendulum)")
    parser.add_argument("--sb3_seeds", type=int, default=3, help="SB3 seeds per setting (Pendulum), 0 to skip")
    parser.add_argument("--update_repeats", type=int, default=3, help="alternating repeats of the per-update timing")
    parser.add_argument("--updates", type=int, default=2_000, help="updates timed per repeat")
    parser.add_argument("--mujoco_steps", type=int, default=100_000, help="MuJoCo env steps per run, 0 to skip")
    parser.add_argument("--mujoco_seeds", type=int, default=3, help="MuJoCo seeds per library and env")
    parser.add_argument("--out", default="benchmarks/results/sac.md")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    for name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)

    import stable_baselines3

    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    sections: list[str] = []
    for algo in ("SAC", "TD3") if args.seeds + args.sb3_seeds > 0 else ():
        runners = [
            (functools.partial(run_ours, algo), args.seeds),
            (functools.partial(run_sb3, algo, "zoo"), args.sb3_seeds),
            (functools.partial(run_sb3, algo, "ours"), args.sb3_seeds),
        ]
        runs = run_interleaved(runners, f"Pendulum {algo}")
        task = PENDULUM._replace(env_id=f"{PENDULUM.env_id} ({algo})")
        sections += report(task, runs, f"rl_lightning {algo}Module", {f"SB3 {algo} (RL-Zoo)": 3.0})

    if args.update_repeats > 0:
        sections += ["## CPU ms per update at matched settings (SB3's defaults on both sides, Pendulum-v1)", ""]
        sections += [
            "| algorithm | rl_lightning ms | SB3 ms | SB3 / ours | goal (ours at most half) |",
            "|---|---|---|---|---|",
        ]
    for algo in ("SAC", "TD3") if args.update_repeats > 0 else ():
        ours, theirs = [], []
        for _ in range(args.update_repeats):  # alternating, so load falls on both alike
            ours.append(per_update_ours(algo, args.updates, 1_000))
            theirs.append(per_update_sb3(algo, args.updates, 1_000))
            print(algo, "per update", ours[-1], theirs[-1], flush=True)
        mine, other = statistics.median(ours), statistics.median(theirs)
        met = "met" if other / mine >= 2 else "**not met**"
        sections.append(f"| {algo} | {mine:.2f} | {other:.2f} | {other / mine:.2f}x | {met} |")
    if args.update_repeats > 0:
        sections.append("")

    if args.mujoco_steps > 0:
        sections += [
            f"## MuJoCo, {args.mujoco_steps:,} env steps, SAC with the same settings (SACModule's defaults)",
            "",
            "| env | library | seed | greedy return (10 episodes) | wall s | CPU s |",
            "|---|---|---|---|---|---|",
        ]
        for env_id in ("HalfCheetah-v5", "Hopper-v5"):
            for seed in range(1, args.mujoco_seeds + 1):
                for run in (mujoco_ours, mujoco_sb3):
                    row = run(env_id, args.mujoco_steps, seed)
                    print(env_id, row, flush=True)
                    sections.append(
                        f"| {env_id} | {row['library']} | {seed} | {row['mean']:.1f} +- {row['std']:.1f} | "
                        f"{row['wall']:.0f} | {row['cpu']:.0f} |"
                    )
        sections.append("")

    command = " ".join(["python benchmarks/bench_sac.py", *sys.argv[1:]])
    lines = [
        "# SAC and TD3: rl_lightning vs Stable-Baselines3",
        "",
        f"Command: `{command}` (the whole run: {(time.perf_counter() - started) / 60:.1f} min)",
        "",
        machine_line(
            {
                "torch": torch.__version__,
                "lightning": L.__version__,
                "stable-baselines3": stable_baselines3.__version__,
            },
            load_before,
        ),
        "",
        (__doc__ or "").split("\n\n", 1)[1],
        *sections,
    ]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
