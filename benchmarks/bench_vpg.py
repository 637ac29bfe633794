"""Time to solve CartPole-v1: rl_lightning's VPG (Lightning and a plain PyTorch loop) next to
Stable-Baselines3's tuned PPO, in one run.

    python benchmarks/bench_vpg.py [--seeds 5] [--sb3_seeds 3]

"Solved" = the first rollout whose mean first-episode return over the 32 envs is >= 475 (for
SB3: the mean of the last 32 completed episodes). Wall time runs from the start of
``Trainer.fit`` (or of the loop / ``model.learn``) to that rollout, on one CPU thread.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time
from pathlib import Path

import lightning as L
import torch

from rl_lightning import VPGModule
from rl_lightning.data.rollout import RolloutSource, RolloutTensors, first_episode_stats
from rl_lightning.envs import make_envs
from rl_lightning.losses import compute_logprobs, compute_reinforce_loss, compute_returns, normalize_returns
from rl_lightning.seeding import derive_seed

THRESHOLD = 475.0
MAX_ROLLOUTS = 100


class _StopWhenSolved(L.Callback):
    def __init__(self, start: float):
        self.start = start
        self.solved_at: tuple[float, int] | None = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if _mean_first_episode_return(pl_module.latest_rollout()) >= THRESHOLD:
            self.solved_at = (time.perf_counter() - self.start, pl_module.env_steps)
            trainer.should_stop = True


def _mean_first_episode_return(rollout: RolloutTensors) -> float:
    return first_episode_stats(rollout.rewards, rollout.dones).returns.mean().item()


def run_lightning(seed: int, bare: bool = False) -> tuple[float, int]:
    """``Trainer.fit(VPGModule(seed=seed))`` with the defaults: TensorBoard logging and a
    checkpoint at every epoch (= rollout); ``bare``: neither. No progress bar either way."""
    module = VPGModule(seed=seed)  # train_vpg.py's defaults
    root = tempfile.TemporaryDirectory(prefix="bench_vpg_")
    trainer = L.Trainer(
        max_steps=MAX_ROLLOUTS,
        default_root_dir=root.name,
        logger=not bare,
        enable_checkpointing=not bare,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,
    )
    start = time.perf_counter()
    stopper = _StopWhenSolved(start)
    trainer.callbacks.append(stopper)
    trainer.fit(module)
    root.cleanup()
    return stopper.solved_at or (float("nan"), module.env_steps)


def run_plain_torch(seed: int) -> tuple[float, int]:
    """The same rollouts and updates as VPGModule's defaults, without Lightning."""
    hp = VPGModule(seed=seed).hparams
    policy = VPGModule(seed=seed).policy_network  # identical initial weights
    start = time.perf_counter()
    envs = make_envs(hp.env_id, hp.num_envs, seed=hp.seed, device="cpu")  # the module's seeds (rank 0)
    source = RolloutSource(envs, policy, num_steps=hp.num_steps_per_rollout, seed=derive_seed(hp.seed, "actions"))
    optimizer = torch.optim.Adam(policy.parameters(), lr=hp.lr, eps=hp.adam_eps)
    for _ in range(MAX_ROLLOUTS):
        batch = source.collect().rollout
        if _mean_first_episode_return(batch) >= THRESHOLD:
            return time.perf_counter() - start, source.env_steps
        returns = normalize_returns(compute_returns(batch.rewards, batch.dones, hp.gamma))
        logprobs = compute_logprobs(batch.obs, batch.actions, policy)
        loss = -compute_reinforce_loss(returns, logprobs, torch.ones_like(logprobs))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return float("nan"), source.env_steps


def run_sb3_ppo(seed: int, max_steps: int = 300_000) -> tuple[float, int]:
    """SB3 PPO with RL-Zoo's tuned CartPole-v1 hyper-parameters (hyperparams/ppo.yml)."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    def linear(initial: float):
        return lambda progress_remaining: progress_remaining * initial

    class Solved(BaseCallback):
        def __init__(self):
            super().__init__()
            self.solved_at: tuple[float, int] | None = None

        def _on_step(self) -> bool:
            return True

        def _on_rollout_end(self) -> None:
            episodes = list(self.model.ep_info_buffer)[-32:]
            if len(episodes) == 32 and statistics.mean(e["r"] for e in episodes) >= THRESHOLD:
                self.solved_at = (time.perf_counter() - start, self.num_timesteps)
                self.model.solved = True

        def _on_rollout_start(self) -> None:
            pass

    class StopOnSolved(Solved):
        def _on_step(self) -> bool:
            return self.solved_at is None

    envs = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    model = PPO(
        "MlpPolicy",
        envs,
        n_steps=32,
        batch_size=256,
        gae_lambda=0.8,
        gamma=0.98,
        n_epochs=20,
        ent_coef=0.0,
        learning_rate=linear(0.001),
        clip_range=linear(0.2),
        seed=seed,
        device="cpu",
        verbose=0,
    )
    callback = StopOnSolved()
    start = time.perf_counter()
    model.learn(total_timesteps=max_steps, callback=callback)
    return callback.solved_at or (float("nan"), model.num_timesteps)


def _median(values: list[float]) -> float:
    finite = [v for v in values if v == v]
    return statistics.median(finite) if finite else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5, help="seeds for rl_lightning (default 5)")
    parser.add_argument("--sb3_seeds", type=int, default=3, help="seeds for SB3 PPO (default 3; 0 skips it)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "vpg.md"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    import warnings

    warnings.filterwarnings("ignore")
    import logging

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)

    rows = []
    seeds = range(1, args.seeds + 1)
    runs = {
        "rl_lightning VPGModule + Trainer.fit (TensorBoard, checkpoint per rollout)": [
            run_lightning(seed) for seed in seeds
        ],
        "same, Trainer(logger=False, enable_checkpointing=False)": [run_lightning(seed, bare=True) for seed in seeds],
        "same VPG, plain PyTorch loop (no Lightning)": [run_plain_torch(seed) for seed in seeds],
    }
    if args.sb3_seeds:
        runs["SB3 PPO, RL-Zoo tuned (gymnasium CartPole-v1)"] = [
            run_sb3_ppo(seed) for seed in range(1, args.sb3_seeds + 1)
        ]
    plain = _median([t for t, _ in runs["same VPG, plain PyTorch loop (no Lightning)"]])
    for name, results in runs.items():
        times = [t for t, _ in results]
        steps = [s for _, s in results]
        median_time = _median(times)
        rows.append(
            f"| {name} | {len(results)} | {sum(t == t for t in times)}/{len(results)} | {median_time:.2f} | "
            f"{int(_median(steps)):,} | {median_time / plain:.2f}x |"
        )
        print(name, [f"{t:.2f}" for t in times], steps, flush=True)
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    cpu = next(
        (line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")),
        platform.processor(),
    )
    table = "\n".join(
        [
            f"Machine: {cpu}, 1 torch thread; torch {torch.__version__}, lightning {L.__version__}",
            "",
            "| run | seeds | solved | median wall s to solve | median env steps | time / plain loop |",
            "|---|---|---|---|---|---|",
            *rows,
        ]
    )
    print(table)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(table + "\n")


if __name__ == "__main__":
    main()
