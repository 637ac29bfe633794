"""Time to solve CartPole-v1: rl_lightning's DQNModule next to Stable-Baselines3's DQN with its
RL-Zoo hyper-parameters, in one run; plus the replay buffer's memory and add cost.

    python benchmarks/bench_dqn.py [--seeds 5] [--sb3_seeds 1] [--out benchmarks/results/dqn.md]

"Solved" = the first periodic greedy evaluation (32 episodes on a separate torch CartPole-v1,
same evaluator and start states for both libraries) with mean return >= 475. Times count
training only (evaluation excluded), on one CPU thread; both wall and process CPU time are
reported because other jobs may share the machine's cores.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path

import lightning as L
import torch

from rl_lightning.algos.dqn import DQNModule
from rl_lightning.callbacks.evaluation import evaluate_policy
from rl_lightning.data.replay import ReplayBuffer

THRESHOLD = 475.0
EVAL_EPISODES = 32  # as the Evaluation callback of the scripts and configs
EVAL_SEED = 4242
# The RL-Zoo's tuned DQN for CartPole-v1 (rl-baselines3-zoo hyperparams/dqn.yml).
ZOO_DQN = dict(
    learning_rate=2.3e-3,
    batch_size=64,
    buffer_size=100_000,
    learning_starts=1000,
    gamma=0.99,
    target_update_interval=10,
    train_freq=256,
    gradient_steps=128,
    exploration_fraction=0.16,
    exploration_final_eps=0.04,
    policy_kwargs=dict(net_arch=[256, 256]),
)
ZOO_TIMESTEPS = 50_000


class _Clock:
    """Wall and CPU seconds of training, with evaluation time taken out."""

    def __init__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        self.paused_wall = self.paused_cpu = 0.0

    def evaluate(self, network: torch.nn.Module) -> float:
        wall, cpu = time.perf_counter(), time.process_time()
        result = evaluate_policy(lambda obs: network(obs).argmax(dim=-1), "CartPole-v1", EVAL_EPISODES, EVAL_SEED)
        mean_return = result.returns.mean().item()
        self.paused_wall += time.perf_counter() - wall
        self.paused_cpu += time.process_time() - cpu
        return mean_return

    def elapsed(self) -> tuple[float, float]:
        return (
            time.perf_counter() - self.wall - self.paused_wall,
            time.process_time() - self.cpu - self.paused_cpu,
        )


class _SolvedStop(L.Callback):
    def __init__(self, every_n_env_steps: int):
        self.every_n_env_steps = every_n_env_steps
        self.next_eval = every_n_env_steps
        self.solved: tuple[float, float, int, int] | None = None  # wall, cpu, env steps, updates

    def on_train_start(self, trainer, pl_module):
        self.clock = _Clock()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if pl_module.env_steps < self.next_eval:
            return
        self.next_eval += self.every_n_env_steps
        if self.clock.evaluate(pl_module.q_network) >= THRESHOLD:
            self.solved = (*self.clock.elapsed(), pl_module.env_steps, trainer.global_step)
            trainer.should_stop = True


def run_rl_lightning(seed: int, max_steps: int) -> tuple[float, float, int, int] | None:
    module = DQNModule(seed=seed)  # the defaults (= scripts/train_dqn.py's)
    stopper = _SolvedStop(every_n_env_steps=2_000)
    trainer = L.Trainer(
        max_steps=max_steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[stopper],
    )
    trainer.fit(module)
    return stopper.solved


def run_sb3(seed: int) -> tuple[tuple[float, float, int, int] | None, float]:
    """SB3 DQN with the zoo settings; returns (solved, env steps per second of the whole run)."""
    import gymnasium as gym
    from stable_baselines3 import DQN
    from stable_baselines3.common.callbacks import BaseCallback

    class SolvedStop(BaseCallback):
        def __init__(self, every_n_env_steps: int):
            super().__init__()
            self.every_n_env_steps = every_n_env_steps
            self.next_eval = every_n_env_steps
            self.solved = None

        def _on_training_start(self) -> None:
            self.clock = _Clock()

        def _on_step(self) -> bool:
            if self.num_timesteps < self.next_eval:
                return True
            self.next_eval += self.every_n_env_steps
            if self.clock.evaluate(self.model.q_net) >= THRESHOLD:  # q_net: obs -> Q-values
                self.solved = (*self.clock.elapsed(), self.num_timesteps, self.model._n_updates)
                return False
            return True

    model = DQN("MlpPolicy", gym.make("CartPole-v1"), seed=seed, device="cpu", verbose=0, **ZOO_DQN)
    stopper = SolvedStop(every_n_env_steps=2_048)
    model.learn(total_timesteps=ZOO_TIMESTEPS, callback=stopper)
    wall, _ = stopper.clock.elapsed()
    return stopper.solved, model.num_timesteps / wall


def measure_buffer(
    num_envs: int = 8, buffer_size: int = 1_000_000, repeats: int = 2_000
) -> tuple[list[tuple[str, float]], int]:
    """Mean seconds per ``add`` of ``num_envs`` CartPole transitions at several fills."""
    buffer = ReplayBuffer(buffer_size, (4,), num_envs, seed=0)
    batch = (
        torch.randn(num_envs, 4),
        torch.randint(0, 2, (num_envs,)),
        torch.ones(num_envs),
        torch.zeros(num_envs, dtype=torch.bool),
        torch.randn(num_envs, 4),
    )
    rows = []
    for label, fill in [("empty", 0), ("10%", 0.1), ("50%", 0.5), ("99%", 0.99), ("full, wrapping", 1.5)]:
        target = int(fill * buffer_size)
        # Jump the ring to the fill (the cost of an add does not depend on how it got there).
        buffer.size = min(target, buffer_size)
        buffer.pos = target % buffer_size
        start = time.perf_counter()
        for _ in range(repeats):
            buffer.add(*batch)
        rows.append((label, (time.perf_counter() - start) / repeats))
    return rows, buffer.bytes_per_transition


def _median(values):
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5, help="rl_lightning seeds (default: 5)")
    parser.add_argument("--sb3_seeds", type=int, default=1, help="SB3 seeds, 0 to skip (default: 1)")
    parser.add_argument(
        "--max_steps",
        type=int,
        default=5_000,
        help="rl_lightning updates per seed (5,000: the results' budget; train_dqn.py now gives 10,000)",
    )
    parser.add_argument("--out", default="benchmarks/results/dqn.md")
    args = parser.parse_args()
    torch.set_num_threads(1)

    rows = []
    for seed in range(args.seeds):
        solved = run_rl_lightning(seed, args.max_steps)
        rows.append(("rl_lightning DQNModule", seed, solved, None))
        print(rows[-1], flush=True)
    for seed in range(args.sb3_seeds):
        solved, sps = run_sb3(seed)
        rows.append(("SB3 DQN (RL-Zoo)", seed, solved, sps))
        print(rows[-1], flush=True)
    add_times, bytes_per_transition = measure_buffer()

    defaults = {k: v for k, v in DQNModule().hparams.items()}
    lines = [
        "# DQN on CartPole-v1: time to a greedy return >= 475",
        "",
        f"Command: `python benchmarks/bench_dqn.py --seeds {args.seeds} --sb3_seeds {args.sb3_seeds}`",
        f"Machine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} torch thread, "
        f"torch {torch.__version__}. Solved = first greedy evaluation ({EVAL_EPISODES} episodes, every "
        "~2k env steps, evaluation time excluded) with mean return >= 475. CPU = process time (what the "
        "run costs one core); wall can be larger when other jobs share the cores.",
        "",
        "| library | seed | solved | wall s | CPU s | env steps | updates |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, seed, solved, _ in rows:
        if solved is None:
            lines.append(f"| {name} | {seed} | no | | | | |")
        else:
            wall, cpu, steps, updates = solved
            lines.append(f"| {name} | {seed} | yes | {wall:.1f} | {cpu:.1f} | {steps:,} | {updates:,} |")
    lines.append("")
    for name in dict.fromkeys(name for name, *_ in rows):
        solved = [s for n, _, s, _ in rows if n == name and s is not None]
        total = sum(1 for n, *_ in rows if n == name)
        lines.append(
            f"- **{name}**: solved {len(solved)}/{total}; median wall {_median([s[0] for s in solved]):.1f} s, "
            f"median CPU {_median([s[1] for s in solved]):.1f} s, "
            f"median env steps {_median([s[2] for s in solved]):,.0f}"
        )
    sb3_sps = [sps for name, _, _, sps in rows if sps is not None]
    if sb3_sps:
        lines.append(
            f"- SB3 DQN throughput: {_median(sb3_sps):.0f} env steps/s (wall, incl. its 128 updates/256 steps)"
        )
    lines += [
        "",
        f"DQNModule defaults: `{defaults}`",
        "",
        f"## Replay buffer: {bytes_per_transition} bytes per CartPole transition "
        "(obs 16 + next_obs 16 + action 8 + reward 4 + terminated 1), nothing else stored",
        "",
        "`add` of 8 transitions into a 1,000,000-slot buffer, mean of 2,000 adds:",
        "",
        "| fill | add µs |",
        "|---|---|",
        *[f"| {label} | {seconds * 1e6:.1f} |" for label, seconds in add_times],
        "",
    ]
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
