"""Hindsight experience replay: bit flipping with 20 bits (DQN + HER against DQN alone) and FetchReach (SAC + HER,
ours against SB3's ``SAC`` + ``HerReplayBuffer`` at the SAME settings).

    python benchmarks/bench_her.py [--seeds 1] [--bits 20] [--bit_updates 5000] [--fetch_env_steps 20000]
                                   [--out benchmarks/results/her.md]

Bit flipping (``BitFlipping20-v0``, rl_lightning's native env): ``DQNModule`` with ``her={"strategy": "future",
"k": 4}`` and without, otherwise the same run (tests/algos/test_her_learning.py's settings: 8 envs, one update of
128 per vectorised step, gamma 0.98, Polyak 0.05, epsilon 0.3 -> 0.1; an encoder reading state and goal together),
the greedy policy's success rate over 500 fresh episodes every 1,000 updates.

FetchReach (gymnasium-robotics, MuJoCo, through the gymnasium adapter): RL-Zoo's her.yml settings for FetchReach
(SAC, one env, batch 256, gamma 0.95, lr 1e-3, 1,000 random steps, (64, 64) networks, one critic, entropy
coefficient learned from 1.0 toward -dim(A), Polyak 0.005, one update per env step, future strategy with k=4) without
the Zoo's TimeFeatureWrapper and observation normalisation, in both; the greedy policy's success (``is_success`` at
the episode's end) over 50 episodes of one gymnasium env (the same seeds for both) at every fifth of the run; env steps
per wall second of the training alone (one torch thread). Where the two differ at these settings: SB3 samples only
transitions of finished episodes, ours also those of the running one (its goals up to its newest step).

gymnasium-robotics 1.4.2 compares MuJoCo's joint-type enum with a numpy int, which mujoco 4 no longer equates
(an AssertionError at the first reset): :func:`use_fetch` swaps the enum for plain ints in its utilities (both sides).
"""

from __future__ import annotations

import argparse
import os
import time
import types
from importlib.metadata import version
from pathlib import Path
from typing import Any

import gymnasium as gym
import lightning as L
import numpy as np
import torch
from torch import nn

from rl_lightning import DQNModule, SACModule
from rl_lightning.data.her import HERSettings
from rl_lightning.envs import make_envs
from rl_lightning.envs.bit_flipping import reached_goal
from rl_lightning.nets.continuous import FlatKeys
from rl_lightning.playing import play_greedy

try:
    from _time_to_solve import machine_line
except ImportError:  # run from the repository root as a module
    from benchmarks._time_to_solve import machine_line

BIT_SETTINGS = dict(
    num_envs=8,
    buffer_size=100_000,
    batch_size=128,
    learning_starts=1_000,
    gamma=0.98,
    lr=1e-3,
    target_update_env_steps=None,
    tau=0.05,
    epsilon_start=0.3,
    epsilon_end=0.1,
    exploration_fraction=0.5,
    steps_per_epoch=1_000,
)
HER = {"strategy": "future", "k": 4}
EVAL_EPISODES_BITS = 500
FETCH_ID = "FetchReach-v4"
FETCH_EVAL_EPISODES = 50
FETCH_EVAL_SEED = 10_000
#: rl-baselines3-zoo hyperparams/her.yml, FetchReach (SAC), without TimeFeatureWrapper and normalize.
SB3_FETCH = dict(
    buffer_size=1_000_000,
    batch_size=256,
    gamma=0.95,
    learning_rate=1e-3,
    learning_starts=1_000,
    tau=0.005,
    train_freq=1,
    gradient_steps=1,
    ent_coef="auto",
    policy_kwargs=dict(net_arch=[64, 64], n_critics=1),
)
#: The same settings in SACModule's names.
OURS_FETCH = dict(
    env_id=FETCH_ID,
    env_backend="gymnasium",
    num_envs=1,
    buffer_size=1_000_000,
    batch_size=256,
    gamma=0.95,
    lr=1e-3,
    learning_starts=1_000,
    tau=0.005,
    train_freq=1,
    gradient_steps=1,
    hidden_sizes=(64, 64),
    num_critics=1,
    her=HER,
    steps_per_epoch=1_000,
)


# -- bit flipping -----------------------------------------------------------------------------------------------


def goal_network(num_bits: int, width: int = 256) -> nn.Module:
    """State and goal read together (DQN's default Dict encoder reads each key apart)."""
    space = make_envs(f"BitFlipping{num_bits}-v0", 1).single_observation_space
    return nn.Sequential(FlatKeys(space), nn.Linear(3 * num_bits, width), nn.ReLU())


def bit_success(module: DQNModule, seed: int) -> float:
    envs = make_envs(module.hparams.env_id, EVAL_EPISODES_BITS, seed=seed)
    play = play_greedy(module.greedy_actor(), envs, episodes_per_env=1)
    return reached_goal(torch.as_tensor(play.returns), envs.max_episode_steps).float().mean().item()


class _EveryUpdates(L.Callback):
    """Calls ``record(module)`` every ``every`` updates, the evaluation's time kept apart from the training's."""

    def __init__(self, every: int, record: Any):
        self.every, self.record, self.eval_seconds = every, record, 0.0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step % self.every == 0:
            start = time.perf_counter()
            self.record(pl_module)
            self.eval_seconds += time.perf_counter() - start


def _fit(module: L.LightningModule, max_steps: int, callback: _EveryUpdates) -> float:
    """Fit and return the training's wall seconds (the evaluations' taken out)."""
    trainer = L.Trainer(
        max_steps=max_steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[callback],
    )
    start = time.perf_counter()
    trainer.fit(module)
    return time.perf_counter() - start - callback.eval_seconds


def run_bits(num_bits: int, seed: int, updates: int, her: bool) -> tuple[list[tuple[int, float]], float]:
    """(env steps, greedy success) every 1,000 updates, and the training's seconds."""
    torch.manual_seed(seed)
    module = DQNModule(
        env_id=f"BitFlipping{num_bits}-v0",
        seed=seed,
        network=goal_network(num_bits),
        her=HER if her else None,
        **BIT_SETTINGS,
    )
    curve: list[tuple[int, float]] = []
    callback = _EveryUpdates(1_000, lambda m: curve.append((m.env_steps, bit_success(m, 50_000 + seed))))
    seconds = _fit(module, updates, callback)
    return curve, seconds


# -- FetchReach -------------------------------------------------------------------------------------------------


def use_fetch() -> None:
    """Register gymnasium-robotics' envs, its joint-type comparisons made to work with mujoco 4 (module docstring)."""
    import gymnasium_robotics
    import mujoco
    from gymnasium_robotics.utils import mujoco_utils

    names = {name: getattr(mujoco, name) for name in dir(mujoco) if not name.startswith("__")}
    plain = types.SimpleNamespace(**names)
    plain.mjtJoint = types.SimpleNamespace(**{name: int(value) for name, value in mujoco.mjtJoint.__members__.items()})
    mujoco_utils.mujoco = plain
    gym.register_envs(gymnasium_robotics)


def fetch_success(act: Any) -> float:
    """The share of FETCH_EVAL_EPISODES greedy episodes (seeds FETCH_EVAL_SEED + i) that end at their goal."""
    env = gym.make(FETCH_ID)
    successes = 0.0
    for episode in range(FETCH_EVAL_EPISODES):
        obs, _ = env.reset(seed=FETCH_EVAL_SEED + episode)
        done = False
        while not done:
            obs, _, terminated, truncated, info = env.step(act(obs))
            done = terminated or truncated
        successes += float(info["is_success"])
    env.close()
    return successes / FETCH_EVAL_EPISODES


def run_fetch_ours(seed: int, env_steps: int) -> tuple[list[tuple[int, float]], float]:
    module = SACModule(seed=seed, **OURS_FETCH)
    every = (env_steps - OURS_FETCH["learning_starts"]) // 5
    curve: list[tuple[int, float]] = []
    callback = _EveryUpdates(every, lambda m: curve.append((m.env_steps, fetch_success(lambda o: m.act(o, True)))))
    seconds = _fit(module, env_steps - OURS_FETCH["learning_starts"], callback)
    return curve, seconds


def run_fetch_sb3(seed: int, env_steps: int) -> tuple[list[tuple[int, float]], float]:
    from stable_baselines3 import SAC, HerReplayBuffer

    model = SAC(
        "MultiInputPolicy",
        gym.make(FETCH_ID),
        replay_buffer_class=HerReplayBuffer,
        replay_buffer_kwargs=dict(n_sampled_goal=HER["k"], goal_selection_strategy=HER["strategy"]),
        seed=seed,
        verbose=0,
        **SB3_FETCH,
    )
    start_steps = SB3_FETCH["learning_starts"]
    every = (env_steps - start_steps) // 5
    curve, seconds = [], 0.0
    for chunk in range(5):
        start = time.perf_counter()
        model.learn(total_timesteps=(start_steps if chunk == 0 else 0) + every, reset_num_timesteps=chunk == 0)
        seconds += time.perf_counter() - start
        curve.append((model.num_timesteps, fetch_success(lambda o: model.predict(o, deterministic=True)[0])))
    return curve, seconds


# -- the cost of relabelling -------------------------------------------------------------------------------------


def sampling_cost(num_bits: int, batch_size: int = 128, repeats: int = 2_000) -> tuple[float, float]:
    """Milliseconds per sampled batch of a full 100,000-slot buffer of ``BitFlipping`` transitions (8 envs), without
    and with hindsight goals (``future``, k=4): the bisection for each episode's end and the recomputed rewards."""
    from rl_lightning.data.replay import make_replay_buffer

    envs = make_envs(f"BitFlipping{num_bits}-v0", 8, seed=0)
    buffers = [make_replay_buffer(envs, 100_000, 0, 1, 0.98, her=her) for her in (None, HERSettings())]
    generator = torch.Generator().manual_seed(0)
    obs, _ = envs.reset()
    for _ in range(100_000 // 8):
        actions = envs.random_actions(generator)
        next_obs, rewards, terminated, truncated, info = envs.step(actions)
        for buffer in buffers:
            buffer.add(obs, actions, rewards, terminated, info["final_observation"], terminated | truncated)
        obs = next_obs
    costs = []
    for buffer in buffers:
        buffer.sample(batch_size)
        start = time.perf_counter()
        for _ in range(repeats):
            buffer.sample(batch_size)
        costs.append((time.perf_counter() - start) / repeats * 1e3)
    return costs[0], costs[1]


# -- the report --------------------------------------------------------------------------------------------------


def _curve(curve: list[tuple[int, float]]) -> str:
    return ", ".join(f"{steps:,}: {success:.2f}" for steps, success in curve)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=1, help="seeds 1 .. N (not the learning test's)")
    parser.add_argument("--bits", type=int, default=20)
    parser.add_argument("--bit_updates", type=int, default=5_000, help="0: no bit flipping")
    parser.add_argument("--fetch_env_steps", type=int, default=20_000, help="0: no FetchReach (RL-Zoo's: 20,000)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "her.md")
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.environ.setdefault("MUJOCO_GL", "egl")
    load_before = os.getloadavg()[0]
    lines = [
        "# Hindsight experience replay",
        "",
        f"`python benchmarks/bench_her.py --seeds {args.seeds} --bits {args.bits} --bit_updates {args.bit_updates} "
        f"--fetch_env_steps {args.fetch_env_steps}`",
    ]
    if args.bit_updates:
        lines += [
            "",
            f"## Bit flipping, {args.bits} bits: DQN + HER (future, k=4) against DQN alone",
            "",
            f"Greedy success over {EVAL_EPISODES_BITS} fresh episodes (env steps: success), training seconds.",
            "",
            "| seed | run | success vs env steps | train s |",
            "|---|---|---|---|",
        ]
    for seed in range(1, args.seeds + 1 if args.bit_updates else 1):
        for her in (True, False):
            curve, seconds = run_bits(args.bits, seed, args.bit_updates, her)
            name = "DQN + HER" if her else "DQN"
            lines.append(f"| {seed} | {name} | {_curve(curve)} | {seconds:.0f} |")
            print(lines[-1], flush=True)
    plain, relabelled = sampling_cost(args.bits)
    lines += [
        "",
        f"Sampling a batch of 128 from a full 100,000-slot buffer of BitFlipping{args.bits}-v0 transitions (8 envs): "
        f"{plain:.3f} ms without hindsight goals, {relabelled:.3f} ms with them (future, k=4: "
        f"x{relabelled / plain:.1f}).",
    ]
    print(lines[-1], flush=True)
    if args.fetch_env_steps:
        use_fetch()
        lines += [
            "",
            f"## {FETCH_ID}: SAC + HER, rl_lightning against SB3 at the same settings",
            "",
            f"Greedy success over {FETCH_EVAL_EPISODES} episodes (env steps: success); env steps per second of the "
            "training (evaluations excluded).",
            "",
            "| seed | library | success vs env steps | train s | env steps/s |",
            "|---|---|---|---|---|",
        ]
        for seed in range(1, args.seeds + 1):
            for name, run in (("rl_lightning", run_fetch_ours), ("SB3", run_fetch_sb3)):
                curve, seconds = run(seed, args.fetch_env_steps)
                rate = curve[-1][0] / seconds
                lines.append(f"| {seed} | {name} | {_curve(curve)} | {seconds:.0f} | {rate:.0f} |")
                print(lines[-1], flush=True)
    versions = {name: version(name) for name in ("torch", "lightning", "stable_baselines3", "gymnasium_robotics")}
    lines += ["", machine_line(versions, load_before)]
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
