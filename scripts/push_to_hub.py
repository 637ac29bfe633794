"""Share a trained checkpoint on the Hugging Face Hub (the ``hub`` extra):

    python scripts/push_to_hub.py --ckpt_path lightning_logs/PPO-CartPole-v1/version_0/checkpoints/last.ckpt \\
        --repo_id user/ppo-CartPole-v1

Loads the checkpoint safely (``weights_only=True``, its hyper-parameters checked against ``rl_lightning.trust``'s
allow-list), evaluates the greedy policy (``--eval_episodes`` episodes one after another, env seed ``--seed``),
records ``--video_steps`` steps of it, writes the pretrained folder to ``--local_dir`` (``model.safetensors``,
``config.json``, ``policy.pt2``, ``policy.onnx``, ``replay.mp4`` and the model card ``README.md`` holding the
evaluation and the command that reproduces it) and uploads it in one commit, creating the repo if need be.
``--dry_run`` writes the folder and pushes nothing. The token: ``HF_TOKEN``, or ``hf auth login``'s.

``--repo_id`` must be a Hub repo id by the Hub's own rules, checked before anything is written. The folder is written
only inside ``--local_dir`` (default ``hub/<name>``, which must stay inside ``hub/``), and a file there of the
folder's names (``README.md``, ``config.json``, ...) that an earlier save did not write is left as it is, with an
error, unless ``--overwrite``. Only the folder's own files are pushed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rl_lightning.hub import EXPORT_NAMES, load_checkpoint, push_folder, save_pretrained
from rl_lightning.hub_files import check_repo_id


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt_path", required=True, help="a checkpoint of an rl_lightning module")
    parser.add_argument("--repo_id", required=True, help="the Hub model repo, user/name (created if it does not exist)")
    parser.add_argument(
        "--local_dir", type=Path, default=None, help="write the folder here (default: hub/<name of the repo>)"
    )
    parser.add_argument("--eval_episodes", type=int, default=10, help="greedy episodes of the card's evaluation")
    parser.add_argument("--seed", type=int, default=0, help="the evaluation's and the video's env seed (default: 0)")
    parser.add_argument(
        "--eval_max_episode_steps", type=int, default=None, help="cut episodes here (default: the env's time limit)"
    )
    parser.add_argument("--video_steps", type=int, default=500, help="steps of replay.mp4; 0: no video (default: 500)")
    parser.add_argument(
        "--export_formats",
        nargs="*",
        default=list(EXPORT_NAMES),
        choices=list(EXPORT_NAMES),
        help="exported policies to include (default: pt2 onnx)",
    )
    parser.add_argument("--private", action="store_true", help="create the repo private")
    parser.add_argument("--commit_message", default=None, help="(default: '<algorithm> on <env id>')")
    parser.add_argument("--dry_run", action="store_true", help="write the folder, push nothing")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace files of the folder's names (README.md, config.json, ...) in --local_dir that no earlier save "
        "wrote (by default an error; an earlier save's files are replaced either way)",
    )
    parser.add_argument(
        "--trust_checkpoint",
        action="store_true",
        help="the checkpoint is yours: allow any class path in its hyper-parameters (by default only "
        "rl_lightning's algorithms and gymnasium's wrappers)",
    )
    args = parser.parse_args(argv)
    if args.eval_episodes < 1:
        parser.error(f"--eval_episodes must be at least 1, got {args.eval_episodes}")
    if args.video_steps < 0:
        parser.error(f"--video_steps must be at least 0, got {args.video_steps}")
    if args.eval_max_episode_steps is not None and args.eval_max_episode_steps < 1:
        parser.error(f"--eval_max_episode_steps must be at least 1, got {args.eval_max_episode_steps}")
    parts = args.repo_id.split("/")
    if len(parts) != 2 or not all(parts):
        parser.error(f"--repo_id must be user/name, got {args.repo_id!r}")
    try:
        check_repo_id("--repo_id", args.repo_id)
    except ValueError as error:
        parser.error(str(error))
    local_dir = args.local_dir or _default_local_dir(parser, parts[1])
    try:
        module = load_checkpoint(args.ckpt_path, trust_remote_code=args.trust_checkpoint)
        save_pretrained(
            module,
            local_dir,
            repo_id=args.repo_id,
            eval_episodes=args.eval_episodes,
            eval_seed=args.seed,
            eval_max_episode_steps=args.eval_max_episode_steps,
            video_steps=args.video_steps,
            export_formats=args.export_formats,
            overwrite=args.overwrite,
        )
    except (ValueError, OSError) as error:
        parser.exit(2, f"error: {error}\n")
    evaluation = _evaluation_line(local_dir)
    print(f"{module.hparams.env_id}: {evaluation}")
    print(f"wrote {local_dir}")
    if args.dry_run:
        print(f"dry run: nothing pushed to {args.repo_id}")
        sys.exit(0)
    try:
        commit = push_folder(local_dir, args.repo_id, private=args.private or None, commit_message=args.commit_message)
    except Exception as error:  # the Hub's (no token, no rights, offline): the folder stays written
        parser.exit(1, f"error: could not push {local_dir} to {args.repo_id}: {type(error).__name__}: {error}\n")
    print(f"pushed: {getattr(commit, 'commit_url', commit)}")
    sys.exit(0)


def _default_local_dir(parser: argparse.ArgumentParser, name: str) -> Path:
    """``hub/<name>``, which must resolve inside ``hub/`` (``hub/<name>`` may be a link out of it)."""
    root = Path("hub")
    local_dir = root / name
    if not local_dir.resolve().is_relative_to(root.resolve()):
        parser.error(f"{local_dir} leads out of {root}/ (to {local_dir.resolve()}): name the folder with --local_dir")
    return local_dir


def _evaluation_line(directory: Path) -> str:
    import json

    evaluation = json.loads((directory / "config.json").read_text())["evaluation"]
    return (
        f"{evaluation['episodes']} greedy episodes (seed {evaluation['seed']}), "
        f"mean_reward {evaluation['mean']:.2f} +/- {evaluation['std']:.2f}"
    )


if __name__ == "__main__":
    main()
