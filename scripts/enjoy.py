"""Play a trained checkpoint: ``python scripts/enjoy.py --ckpt_path PATH [--env_id ID] [--video out.mp4]``,
or a pretrained folder or Hugging Face Hub repo: ``--from_pretrained DIR_OR_REPO_ID`` (``config.json`` and
``model.safetensors`` only: ``rl_lightning.hub``).

Loads the checkpoint with the module class that saved it (VPGModule, DQNModule, PPOModule), runs
``--episodes`` greedy episodes, prints their returns and, with ``--video``, writes an MP4 of the
first env (drawn by the native env's ``draw``, or by gymnasium's own renderer for a gymnasium id or
``--backend gymnasium``). ``--env_id`` plays the policy on another env with the same spaces (e.g.
``CartPole-v1`` through gymnasium: ``--env_id CartPole-v1 --backend gymnasium``). A model trained in Ray's
workers plays here, in gymnasium's env (a file chooses no Ray cluster: ``rl_lightning.trust``); ``--backend ray``
steps it in local Ray workers.

    python scripts/enjoy.py --ckpt_path lightning_logs/PPO-CartPole-v1/version_0/checkpoints/last.ckpt \\
        --video cartpole.mp4
    python scripts/enjoy.py --from_pretrained user/ppo-CartPole-v1 --episodes 10
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

from rl_lightning.envs.ray_vector import RAY_OPTIONS, options_for
from rl_lightning.envs.registry import BACKENDS, is_native_env_id, make_envs
from rl_lightning.hub import load_checkpoint, load_pretrained
from rl_lightning.playing import first_env_frame, play_greedy
from rl_lightning.video import Mp4Encoder

#: Seconds between the progress lines of a recording.
PROGRESS_EVERY_S = 5.0


def load_module(ckpt_path: str, env_id: str | None = None, trust_checkpoint: bool = False):
    """The module saved in ``ckpt_path`` (its own class), on the CPU, optionally for another env id. Its
    hyper-parameters are data: a class path in them outside ``rl_lightning.trust``'s allow-list is refused
    before anything is imported, unless ``trust_checkpoint``."""
    return load_checkpoint(ckpt_path, env_id, trust_remote_code=trust_checkpoint)


def load_pretrained_module(source: str, env_id: str | None = None, trust_checkpoint: bool = False):
    """The module of the pretrained folder or Hub repo id ``source`` (its own algorithm), on the CPU, optionally
    for another env id with the same spaces; refused as :func:`load_module` refuses a checkpoint."""
    overrides = {"env_id": env_id} if env_id else {}
    return load_pretrained(source, trust_remote_code=trust_checkpoint, **overrides)


def play(module, episodes: int, seed: int, backend: str, video: Path | None, max_steps: int) -> list[float]:
    """Run ``episodes`` greedy episodes one after another (one env copy); returns their returns."""
    env_id = module.hparams.env_id
    # The env as trained: the module's backend (unless --backend says otherwise) and its env_kwargs.
    env_kwargs = dict(module.hparams.get("env_kwargs") or {})
    if backend == "auto":
        backend = module.hparams.get("env_backend", "auto")
    if backend == "ray":  # as many workers as trained with, up to one per env copy
        env_kwargs = options_for(env_kwargs, 1)
    else:  # Ray's options (workers, a cluster's address) are no env's: played here, in this process
        env_kwargs = {key: value for key, value in env_kwargs.items() if key not in RAY_OPTIONS}
    native = backend == "torch" or (backend == "auto" and is_native_env_id(env_id))
    if env_kwargs and native:
        raise ValueError(
            f"the checkpoint was trained with env_kwargs {env_kwargs} (gymnasium's env), which the native torch "
            f"env {env_id} cannot take: play it with --backend gymnasium"
        )
    renders = not native and backend != "ale_vector"  # gymnasium's and EnvPool's envs render their frames
    options = {**env_kwargs, **({"render": True} if renders and video else {})}
    envs = make_envs(env_id, 1, seed=seed, backend=backend, **options)
    if video is not None and not (envs.can_draw or envs.can_render):
        raise ValueError(f"{env_id} can neither draw its observations nor render: no video")

    frames = 0
    started = time.monotonic()
    said = started
    encoder = Mp4Encoder(envs.render_fps) if video is not None else contextlib.nullcontext()

    def first_frame(obs):  # before each step: drawn from its observation, or rendered by gymnasium
        nonlocal frames, said
        frames += 1
        if time.monotonic() - said >= PROGRESS_EVERY_S:  # rendering is slow (MuJoCo): say it is going on
            said = time.monotonic()
            print(f"recording {video}: {frames:,} frames, {said - started:.0f} s", file=sys.stderr, flush=True)
        encoder.append(first_env_frame(envs, obs))  # encoded as it is played: no frame held in memory

    frame = first_frame if video is not None else None
    try:  # a cut episode is followed by a reset: the next one starts fresh
        with encoder:
            played = play_greedy(
                module.greedy_actor(), envs, episodes_per_env=episodes, max_episode_steps=max_steps, frame=frame
            )
    finally:
        envs.close()
    returns, capped = played.returns[0].tolist(), int(played.cut.sum())
    if capped:
        print(
            f"warning: {capped} of {episodes} episodes did not end within --max_episode_steps {max_steps} "
            "(their returns are of the first steps only)",
            file=sys.stderr,
        )
    if video is not None:
        video.parent.mkdir(parents=True, exist_ok=True)
        video.write_bytes(encoder.bytes)
    return returns


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--ckpt_path", help="a checkpoint of an rl_lightning module")
    source.add_argument(
        "--from_pretrained",
        metavar="DIR_OR_REPO_ID",
        help="a folder written by save_pretrained, or a Hugging Face Hub repo id (user/name) to download it from",
    )
    parser.add_argument("--env_id", default=None, help="play on this env instead of the checkpoint's")
    parser.add_argument("--backend", default="auto", choices=BACKENDS, help="(default: auto: the checkpoint's)")
    parser.add_argument("--episodes", type=int, default=3, help="greedy episodes to play (default: 3)")
    parser.add_argument("--seed", type=int, default=0, help="the env's seed (default: 0)")
    parser.add_argument("--max_episode_steps", type=int, default=100_000, help="cap for envs without a time limit")
    parser.add_argument("--video", type=Path, default=None, help="write an MP4 of the episodes here")
    parser.add_argument(
        "--trust_checkpoint",
        action="store_true",
        help="the checkpoint (or pretrained folder) is yours: allow any class path in its hyper-parameters (by "
        "default only rl_lightning's algorithms and gymnasium's wrappers) and take its Ray settings (by default it "
        "plays in this process)",
    )
    args = parser.parse_args(argv)
    if args.episodes < 1:
        parser.error(f"--episodes must be at least 1, got {args.episodes}")
    if args.max_episode_steps < 1:
        parser.error(f"--max_episode_steps must be at least 1, got {args.max_episode_steps}")
    if args.video is not None and args.video.suffix.lower() != ".mp4":
        parser.error(f"--video writes an MP4: give a path ending in .mp4, got {str(args.video)!r}")
    try:
        if args.from_pretrained is not None:
            module = load_pretrained_module(args.from_pretrained, args.env_id, args.trust_checkpoint)
        else:
            module = load_module(args.ckpt_path, args.env_id, args.trust_checkpoint)
    except (ValueError, OSError) as error:  # not what it claims to be; no such file or folder; a failed download
        parser.exit(2, f"error: {error}\n")
    try:
        returns = play(module, args.episodes, args.seed, args.backend, args.video, args.max_episode_steps)
    except ValueError as error:
        parser.exit(2, f"error: {error}\n")
    except RuntimeError as error:  # the env cannot render here (MuJoCo without MUJOCO_GL on a headless machine)
        parser.exit(1, f"error: {error}\n")
    except OSError as error:  # the video's directory is read-only, the disk is full
        parser.exit(1, f"error: could not write {args.video}: {error.strerror or error}\n")
    mean = sum(returns) / len(returns)
    rounded = [round(value, 1) for value in returns]
    print(f"{module.hparams.env_id}: {len(returns)} greedy episodes, returns {rounded}, mean {mean:.1f}")
    if args.video is not None:
        print(f"video: {args.video}")
    sys.exit(0)


if __name__ == "__main__":
    main()
