"""Record an offline dataset from a checkpoint's policy (or a uniformly random one), in Minari's format or as ``.npz``.

    python scripts/record_dataset.py --checkpoint lightning_logs/SAC-Pendulum-v1/version_0/checkpoints/last.ckpt \\
        --episodes 30 --noise 0.0 0.1 0.3 --dataset-id pendulum/sac-mixed-v0 --out ~/.minari/datasets
    python scripts/record_dataset.py --random --env-id CartPole-v1 --steps 10000 --dataset-id cartpole/random-v0

The episodes (or steps) are split evenly over the ``--noise`` levels: Gaussian noise of that std (times half the
action range) on Box actions, clipped to the bounds; for Discrete actions the chance of a uniformly random action
(``rl_lightning.data.offline_formats.record_episodes``). The Minari dataset lands in ``OUT/DATASET_ID`` (``OUT``
defaults to Minari's root: ``MINARI_DATASETS_PATH``, else ``~/.minari/datasets``), each episode's noise level in its
episode metadata; ``minari.load_dataset(DATASET_ID)`` with ``MINARI_DATASETS_PATH=OUT`` reads it, and so does
``TransitionsDataModule(DATASET_ID)`` or ``TransitionsDataModule("OUT/DATASET_ID")``. ``--format npz`` writes
``OUT/DATASET_ID.npz`` instead (with ``next_observations``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rl_lightning.data.offline_formats import episodes_to_rows, record_episodes, write_minari, write_rows
from rl_lightning.envs.ray_vector import RAY_OPTIONS
from rl_lightning.envs.registry import make_envs
from rl_lightning.hub import load_checkpoint


def default_root() -> Path:
    """Minari's root folder: ``MINARI_DATASETS_PATH``, else ``~/.minari/datasets``."""
    return Path(os.environ.get("MINARI_DATASETS_PATH") or Path.home() / ".minari" / "datasets")


def record_dataset(
    dataset_id: str,
    out: str | Path,
    checkpoint: str | Path | None = None,
    env_id: str | None = None,
    episodes: int | None = None,
    steps: int | None = None,
    noise: list[float] | tuple[float, ...] = (0.0,),
    seed: int = 0,
    data_format: str = "minari",
    trust_checkpoint: bool = False,
) -> tuple[Path, list[dict[str, np.ndarray]], list[float]]:
    """Play the greedy policy of ``checkpoint`` (None: uniformly random actions on ``env_id``) with ``noise`` and write
    the episodes as ``dataset_id`` under ``out``; returns the path written, the episodes and their noise levels."""
    module: Any = None
    if checkpoint is not None:
        module = load_checkpoint(checkpoint, env_id, trust_remote_code=trust_checkpoint)
        env_id = module.hparams.env_id
        backend = module.hparams.get("env_backend", "auto")
        env_kwargs = {k: v for k, v in dict(module.hparams.get("env_kwargs") or {}).items() if k not in RAY_OPTIONS}
        backend = "auto" if backend == "ray" else backend
    elif env_id is None:
        raise ValueError("a random policy needs --env-id (there is no checkpoint to take it from)")
    else:
        backend, env_kwargs = "auto", {}
    envs = make_envs(env_id, 1, seed=seed, backend=backend, **env_kwargs)
    try:
        actor = module.greedy_actor() if module is not None else None
        played, noise_of = record_episodes(envs, actor, list(noise), episodes, steps, seed)
        obs_space, action_space = envs.single_observation_space, envs.single_action_space
    finally:
        envs.close()
    if data_format == "npz":
        path = write_rows(Path(out) / f"{dataset_id}.npz", episodes_to_rows(played))
        return path, played, noise_of
    algorithm = type(module).__name__ if module is not None else "uniform random"
    metadata = {
        "algorithm_name": algorithm,
        "env_id": env_id,
        "description": f"{algorithm} on {env_id}, noise levels {list(noise)}, seed {seed} (scripts/record_dataset.py)",
    }
    path = write_minari(
        out, dataset_id, played, obs_space, action_space, metadata, [{"noise": level} for level in noise_of]
    )
    return path, played, noise_of


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    policy = parser.add_mutually_exclusive_group(required=True)
    policy.add_argument("--checkpoint", help="an rl_lightning checkpoint whose greedy policy plays")
    policy.add_argument("--random", action="store_true", help="play uniformly random actions (needs --env-id)")
    parser.add_argument("--env-id", default=None, help="the env (default: the checkpoint's)")
    amount = parser.add_mutually_exclusive_group()
    amount.add_argument("--episodes", type=int, default=None, help="episodes to record (default: 10)")
    amount.add_argument("--steps", type=int, default=None, help="env steps to record instead of episodes")
    parser.add_argument("--noise", type=float, nargs="+", default=[0.0], help="noise levels (default: 0.0)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the env and the noise (default: 0)")
    parser.add_argument("--out", type=Path, default=None, help="root folder (default: Minari's root)")
    parser.add_argument("--dataset-id", required=True, help="Minari's (namespace/)name-vN, e.g. cartpole/dqn-v0")
    parser.add_argument("--format", default="minari", choices=("minari", "npz"), help="(default: minari)")
    parser.add_argument("--trust-checkpoint", action="store_true", help="allow any class path in the checkpoint")
    args = parser.parse_args(argv)
    episodes = args.episodes if args.episodes is not None or args.steps is not None else 10
    if args.random and args.env_id is None:
        parser.error("--random needs --env-id")
    torch.set_num_threads(1)
    try:
        path, played, noise_of = record_dataset(
            args.dataset_id,
            args.out or default_root(),
            args.checkpoint,
            args.env_id,
            episodes,
            args.steps,
            args.noise,
            args.seed,
            args.format,
            args.trust_checkpoint,
        )
    except (ValueError, TypeError, FileExistsError, ImportError, gym.error.Error) as error:
        parser.exit(2, f"error: {error}\n")
    except OSError as error:  # no such checkpoint, a read-only folder
        parser.exit(1, f"error: {error}\n")
    for level in args.noise:
        returns = [float(e["rewards"].sum()) for e, n in zip(played, noise_of, strict=True) if n == level]
        mean = sum(returns) / max(len(returns), 1)
        print(f"noise {level}: {len(returns)} episodes, mean return {mean:.1f}")
    steps = sum(len(e["rewards"]) for e in played)
    print(f"wrote {len(played)} episodes, {steps} steps: {path}")
    sys.exit(0)


if __name__ == "__main__":
    main()
