"""Engine speed at identical settings (issue 24's table, its first row): DQN on CartPole-v1 with
DQNModule's defaults, CPU milliseconds per update, for

- ``lightning``: ``Trainer.fit(DQNModule(...))`` as a user runs it (no logger, checkpoints or bar);
- ``plain``: the same module's source, ``training_step``, optimizer, clipping, target sync and epsilon
  schedule in a plain Python loop (the Lightning-free floor of our own functions);
- ``sb3``: Stable-Baselines3's DQN given the same settings (16 envs, batch 512, buffer 50,000, one
  update per vector step after 1,000 random steps, target copy every 160 env steps, lr 2.5e-3,
  max_grad_norm 10, a (120, 84) MLP, epsilon 1 -> 0.05 over 10% of the run), on gymnasium's CartPole.
  SB3 has no double DQN and uses the Huber loss (ours: double DQN, MSE): the update's arithmetic is the
  same size.

    python benchmarks/bench_engine.py [--updates 3000] [--repeats 3] [--out benchmarks/results/engine.md]

One torch thread; the variants alternate ``--repeats`` times in one run (the machine's load affects
them alike); CPU = process time of the whole run (warm-up, env steps and updates) per update.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path

import lightning as L
import torch

from rl_lightning import DQNModule

SETTINGS = dict(seed=0)  # DQNModule's defaults otherwise


def run_lightning(updates: int) -> float:
    module = DQNModule(**SETTINGS)
    trainer = L.Trainer(
        max_steps=updates,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    start = time.process_time()
    trainer.fit(module)
    return time.process_time() - start


def run_plain(updates: int) -> float:
    """The same work without Lightning: source, loss, optimizer step, clipping, target copy, epsilon."""
    module = DQNModule(**SETTINGS)
    hp = module.hparams
    start = time.process_time()
    source = module.make_source(module.make_envs(hp.num_envs, hp.seed))
    source.configure_run(hp.seed, 1, 0)
    module.source = source
    optimizer = module.configure_optimizers()
    total_env_steps = module.planned_env_steps(updates)
    next_sync = hp.target_update_env_steps
    for step in range(updates):
        progress = source.env_steps_before_batch / total_env_steps
        ramp = min(1.0, progress / hp.exploration_fraction)
        module.epsilon = hp.epsilon_start + ramp * (hp.epsilon_end - hp.epsilon_start)
        batch = source.next_batch()
        loss = module.training_step(batch, step)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(module.q_network.parameters(), hp.max_grad_norm)
        optimizer.step()
        if source.env_steps >= next_sync:
            next_sync += hp.target_update_env_steps
            module.target_network.load_state_dict(module.q_network.state_dict())
    return time.process_time() - start


def run_sb3(updates: int) -> float:
    from stable_baselines3 import DQN
    from stable_baselines3.common.env_util import make_vec_env

    defaults = DQNModule(**SETTINGS).hparams
    num_envs = defaults.num_envs
    env_steps = defaults.learning_starts + updates * num_envs
    start = time.process_time()
    model = DQN(
        "MlpPolicy",
        make_vec_env("CartPole-v1", n_envs=num_envs, seed=0),
        learning_rate=defaults.lr,
        buffer_size=defaults.buffer_size,
        learning_starts=defaults.learning_starts,
        batch_size=defaults.batch_size,
        gamma=defaults.gamma,
        train_freq=1,
        gradient_steps=1,
        target_update_interval=defaults.target_update_env_steps,  # env steps: every 160 // 16 vector steps
        exploration_fraction=defaults.exploration_fraction,
        exploration_initial_eps=defaults.epsilon_start,
        exploration_final_eps=defaults.epsilon_end,
        max_grad_norm=defaults.max_grad_norm,
        policy_kwargs=dict(net_arch=list(defaults.hidden_sizes)),
        device="cpu",
        seed=0,
    )
    model.learn(total_timesteps=env_steps)
    return time.process_time() - start


VARIANTS = {"lightning": run_lightning, "plain": run_plain, "sb3": run_sb3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/engine.md"))
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    seconds: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for repeat in range(args.repeats):
        for name, run in VARIANTS.items():
            seconds[name].append(run(args.updates))
            print(f"repeat {repeat + 1}: {name} {seconds[name][-1]:.2f} CPU s", flush=True)
    per_update = {name: 1000 * statistics.median(values) / args.updates for name, values in seconds.items()}
    lines = [
        "# Engine speed at identical settings: DQN on CartPole-v1, CPU ms per update",
        "",
        f"Command: `python benchmarks/bench_engine.py --updates {args.updates} --repeats {args.repeats}`",
        f"Machine: {platform.machine()}, 1 torch thread, torch {torch.__version__}. Each variant runs DQNModule's "
        "default settings (16 envs, batch 512, one update per vector step after 1,000 random env steps); CPU = "
        "process time of the whole run (warm-up, env steps, updates) divided by the updates, median of the repeats.",
        "",
        "| variant | CPU ms per update | vs SB3 | runs (CPU s) |",
        "|---|---|---|---|",
    ]
    for name, value in per_update.items():
        runs = ", ".join(f"{value:.2f}" for value in seconds[name])
        lines.append(f"| {name} | {value:.2f} | {per_update['sb3'] / value:.2f}x | {runs} |")
    tax = per_update["lightning"] / per_update["plain"] - 1
    lines += ["", f"- Lightning's share of a DQN update (lightning vs plain): {100 * tax:+.0f}%"]
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_write:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
