"""QR-DQN on CartPole-v1: rl_lightning's ``DQNModule(distributional="qr")`` next to sb3-contrib's ``QRDQN`` at the SAME
settings (RL-Zoo's tuned QR-DQN for CartPole-v1: one env, a (256, 256) MLP, 10 quantiles, Adam at 2.3e-3, batch 64,
a 100k buffer, 1,000 random steps first, 128 updates per 256 env steps, a hard target copy every 10 env steps, epsilon
1 -> 0.04 over the first 16% of the run, no double DQN, no gradient clipping), interleaved seed by seed.

    python benchmarks/bench_qrdqn.py [--seeds 1] [--env_steps 40000] [--out benchmarks/results/qrdqn.md]

Reported for each run: env steps per second of wall time over the whole run (its updates included; one torch thread)
and the final greedy policy's mean return over 32 episodes of a separate torch CartPole-v1 (the same evaluator and
start states for both: ``_time_to_solve.EVAL_SEED``). Where the two loops differ at these settings: sb3-contrib copies
the target during collection (the last copy before the 128 updates), ours after the first of them; our env is the
native torch CartPole-v1 (gymnasium's dynamics), theirs gymnasium's own through a ``DummyVecEnv``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import lightning as L
import torch

from rl_lightning.algos.dqn import DQNModule
from rl_lightning.callbacks.evaluation import evaluate_policy

try:
    from _time_to_solve import EVAL_EPISODES, EVAL_SEED, machine_line
except ImportError:  # run from the repository root as a module
    from benchmarks._time_to_solve import EVAL_EPISODES, EVAL_SEED, machine_line

ENV_ID = "CartPole-v1"
#: rl-baselines3-zoo hyperparams/qrdqn.yml, CartPole-v1.
ZOO_QRDQN = dict(
    learning_rate=2.3e-3,
    batch_size=64,
    buffer_size=100_000,
    learning_starts=1_000,
    gamma=0.99,
    target_update_interval=10,
    train_freq=256,
    gradient_steps=128,
    exploration_fraction=0.16,
    exploration_final_eps=0.04,
    policy_kwargs=dict(net_arch=[256, 256], n_quantiles=10),
)
#: The same settings in DQNModule's names.
OURS = dict(
    env_id=ENV_ID,
    num_envs=1,
    buffer_size=100_000,
    batch_size=64,
    learning_starts=1_000,
    train_freq=256,
    gradient_steps=128,
    gamma=0.99,
    lr=2.3e-3,
    max_grad_norm=None,
    target_update_env_steps=10,
    tau=1.0,
    epsilon_start=1.0,
    epsilon_end=0.04,
    exploration_fraction=0.16,
    double_dqn=False,
    hidden_sizes=(256, 256),
    distributional="qr",
    num_quantiles=10,
)


def greedy_return(policy) -> float:
    return evaluate_policy(policy, ENV_ID, EVAL_EPISODES, EVAL_SEED).returns.mean().item()


def run_ours(seed: int, env_steps: int) -> tuple[float, float, int]:
    """(env steps per wall second, final greedy return, env steps) of one DQNModule run."""
    module = DQNModule(seed=seed, **OURS)
    updates = (env_steps - OURS["learning_starts"]) // OURS["train_freq"] * OURS["gradient_steps"]
    trainer = L.Trainer(
        max_steps=updates,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    start = time.perf_counter()
    trainer.fit(module)
    wall = time.perf_counter() - start
    return module.env_steps / wall, greedy_return(lambda obs: module.act(obs, greedy=True)), module.env_steps


def run_sb3(seed: int, env_steps: int) -> tuple[float, float, int]:
    """The same for sb3-contrib's QRDQN (greedy: the argmax of the quantiles' mean)."""
    import gymnasium as gym
    from sb3_contrib import QRDQN

    model = QRDQN("MlpPolicy", gym.make(ENV_ID), seed=seed, device="cpu", verbose=0, **ZOO_QRDQN)
    start = time.perf_counter()
    model.learn(total_timesteps=env_steps)
    wall = time.perf_counter() - start
    network = model.policy.quantile_net

    def greedy(obs: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return network(obs).mean(dim=1).argmax(dim=1)

    return model.num_timesteps / wall, greedy_return(greedy), model.num_timesteps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=1, help="seeds per library, interleaved (default: 1)")
    parser.add_argument("--env_steps", type=int, default=40_000, help="env steps per run (the zoo runs 50,000)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "qrdqn.md")
    args = parser.parse_args()
    torch.set_num_threads(1)
    load_before = os.getloadavg()[0]

    rows = []
    for seed in range(1, args.seeds + 1):  # seed by seed: a busy spell of the machine falls on both
        for library, run in (("rl_lightning DQNModule(distributional='qr')", run_ours), ("sb3-contrib QRDQN", run_sb3)):
            rows.append((library, seed, *run(seed, args.env_steps)))
            print(rows[-1], flush=True)

    import sb3_contrib
    import stable_baselines3

    lines = [
        "# QR-DQN on CartPole-v1: rl_lightning vs sb3-contrib at the same settings",
        "",
        f"`python benchmarks/bench_qrdqn.py --seeds {args.seeds} --env_steps {args.env_steps}`. The RL-Zoo's QR-DQN "
        "settings for CartPole-v1 in both (one env, (256, 256) MLP, 10 quantiles, lr 2.3e-3, batch 64, buffer 100k, "
        "1,000 random steps, 128 updates per 256 env steps, hard target copy every 10 env steps, epsilon 1 -> 0.04 "
        "over 16% of the run, no double DQN, no clipping; kappa 1 quantile Huber loss). Env steps per second: wall "
        f"time of the whole run, updates included; greedy return: the final policy, {EVAL_EPISODES} episodes of a "
        "torch CartPole-v1 with the same start states for both.",
        "",
        "| library | seed | env steps | env steps / s | final greedy return |",
        "|---|---|---|---|---|",
        *(f"| {lib} | {seed} | {steps:,} | {sps:,.0f} | {ret:.1f} |" for lib, seed, sps, ret, steps in rows),
        "",
    ]
    ours = [row for row in rows if row[0].startswith("rl_lightning")]
    theirs = [row for row in rows if row[0].startswith("sb3")]
    ratio = statistics.median(r[2] for r in ours) / statistics.median(r[2] for r in theirs)
    lines += [
        f"- env steps per second, rl_lightning / sb3-contrib (medians): **{ratio:.2f}x**",
        f"- final greedy return (median): rl_lightning {statistics.median(r[3] for r in ours):.1f}, "
        f"sb3-contrib {statistics.median(r[3] for r in theirs):.1f}",
        "",
        machine_line(
            {
                "torch": torch.__version__,
                "lightning": L.__version__,
                "stable-baselines3": stable_baselines3.__version__,
                "sb3-contrib": sb3_contrib.__version__,
            },
            load_before,
        ),
        "",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
