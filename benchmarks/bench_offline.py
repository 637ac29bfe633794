"""Offline RL on MuJoCo datasets recorded here: BC, TD3+BC and IQL on random, medium and mixed Hopper-v5 data.

    python benchmarks/bench_offline.py [--env_id Hopper-v5] [--sac_updates 25000] [--dataset_steps 10000]
                                       [--updates 10000] [--seed 0] [--out benchmarks/results/offline.md]

The datasets (D4RL's recipe, at a small scale): "random" = uniformly random actions; "medium" = the greedy policy of a
partially trained SAC (``SACModule`` with its defaults, ``--sac_updates`` updates after 5,000 random steps) with
Gaussian noise of std 0.1 (half-range units); "mixed" = both. Each is ``--dataset_steps`` env steps of one env copy
(``rl_lightning.data.offline_formats.record_episodes``). Each algorithm trains ``--updates`` updates with its
paper defaults ((256, 256) networks, batch 256, lr 3e-4), then its greedy policy plays 10 episodes. The table gives
mean returns and D4RL-style normalised scores, ``100 (R - R_random) / (R_expert - R_random)`` with D4RL's Hopper
reference returns (-20.27, 3234.3: measured on Hopper-v2 by D4RL, not on v5). Everything else differs from D4RL too:
1M-transition datasets there, 1M updates there; here 10,000 of each by default, on one CPU thread.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch

from rl_lightning import BCModule, IQLModule, SACModule, TD3BCModule, TransitionsDataModule, evaluate_policy
from rl_lightning.data.offline import Transitions, episode_returns, transitions_from_arrays
from rl_lightning.data.offline_formats import episodes_to_rows, record_episodes
from rl_lightning.envs import make_envs

#: D4RL's reference returns (random, expert) for normalised scores (measured on the v2 envs).
D4RL_REFERENCE = {"Hopper": (-20.272305, 3234.3), "HalfCheetah": (-280.178953, 12135.0), "Walker2d": (1.629008, 4592.3)}
ALGORITHMS = {"BC": BCModule, "TD3+BC": TD3BCModule, "IQL": IQLModule}


def quiet(**kwargs: Any) -> L.Trainer:
    return L.Trainer(
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, **kwargs
    )


def record(env_id: str, actor: Any, noise: float, steps: int, seed: int) -> Transitions:
    envs = make_envs(env_id, 1, seed=seed)
    try:
        played, _ = record_episodes(envs, actor, [noise], num_steps=steps, seed=seed)
    finally:
        envs.close()
    return transitions_from_arrays(episodes_to_rows(played), env_id)


def concatenate(*parts: Transitions) -> Transitions:
    return Transitions(*(torch.cat(fields) for fields in zip(*parts, strict=True)))


def normalised(env_id: str, value: float) -> float | None:
    reference = D4RL_REFERENCE.get(env_id.split("-")[0])
    if reference is None:
        return None
    low, high = reference
    return 100 * (value - low) / (high - low)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env_id", default="Hopper-v5")
    parser.add_argument("--sac_updates", type=int, default=25_000)
    parser.add_argument("--dataset_steps", type=int, default=10_000)
    parser.add_argument("--updates", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/offline.md"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.time()

    sac = SACModule(env_id=args.env_id, seed=args.seed)
    quiet(max_steps=args.sac_updates).fit(sac)
    behaviour = evaluate_policy(sac, args.env_id, num_episodes=10, seed=args.seed + 100).mean
    print(f"SAC after {args.sac_updates} updates: greedy {behaviour:.1f} ({time.time() - start:.0f} s)", flush=True)
    random_data = record(args.env_id, None, 0.0, args.dataset_steps, args.seed)
    medium_data = record(args.env_id, sac.greedy_actor(), 0.1, args.dataset_steps, args.seed + 1)
    datasets = {"random": random_data, "medium": medium_data, "mixed": concatenate(random_data, medium_data)}

    rows = []
    for name, data in datasets.items():
        returns = episode_returns(data)
        data_return = float(returns.mean()) if len(returns) else float("nan")
        row = {"dataset": name, "transitions": data.num_transitions, "data_return": data_return}
        for label, cls in ALGORITHMS.items():
            began = time.time()
            module = cls(env_id=args.env_id, seed=args.seed)
            datamodule = TransitionsDataModule(data, batch_size=256, steps_per_epoch=1000, seed=args.seed)
            quiet(max_steps=args.updates).fit(module, datamodule=datamodule)
            result = evaluate_policy(module, args.env_id, num_episodes=10, seed=args.seed + 1000)
            row[label] = (result.mean, result.std)
            print(f"{name} {label}: {result.mean:.1f} +- {result.std:.1f} ({time.time() - began:.0f} s)", flush=True)
        rows.append(row)
        print(json.dumps(row), flush=True)

    command = (
        f"python benchmarks/bench_offline.py --env_id {args.env_id} --sac_updates {args.sac_updates} "
        f"--dataset_steps {args.dataset_steps} --updates {args.updates} --seed {args.seed}"
    )
    lines = [
        f"# Offline RL on {args.env_id}: BC, TD3+BC, IQL",
        "",
        f"    {command}",
        "",
        f"One seed ({args.seed}), one CPU thread, {time.time() - start:.0f} s in all. The behaviour policy of 'medium' "
        f"is SACModule's greedy policy after {args.sac_updates:,} updates (greedy return {behaviour:.1f}), noise 0.1; "
        f"'mixed' is random + medium. Each algorithm: {args.updates:,} updates at its paper defaults, then 10 greedy "
        "episodes (mean +- std; in brackets the D4RL-style normalised score with D4RL's Hopper-v2 reference returns).",
        "",
        "| dataset | transitions | data's mean episode return | " + " | ".join(ALGORITHMS) + " |",
        "|---|---:|---:|" + "---:|" * len(ALGORITHMS),
    ]
    for row in rows:
        cells = []
        for label in ALGORITHMS:
            mean, std = row[label]
            score = normalised(args.env_id, mean)
            cells.append(f"{mean:.1f} +- {std:.1f}" + (f" [{score:.1f}]" if score is not None else ""))
        lines.append(
            f"| {row['dataset']} | {row['transitions']:,} | {row['data_return']:.1f} | " + " | ".join(cells) + " |"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
