"""Command-line plumbing shared by the training scripts: a module's hyper-parameters and
Lightning's Trainer flags as argparse options."""

from __future__ import annotations

import argparse
import collections.abc
import inspect
import types
import typing
from pathlib import Path
from typing import Any

import lightning as L


def _parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean (true/false), got {text!r}")


def _optional(convert):
    def parse(text: str):
        return None if text.lower() == "none" else convert(text)

    parse.__name__ = convert.__name__
    return parse


def add_module_args(parser: argparse.ArgumentParser, module_cls: type[L.LightningModule]) -> None:
    """Add one ``--name`` option per ``__init__`` argument of ``module_cls``, typed and
    defaulted from its signature (``--hidden_sizes 64 64``, ``--clip_coef none``)."""
    hints = typing.get_type_hints(module_cls.__init__)
    group = parser.add_argument_group(f"{module_cls.__name__} hyper-parameters")
    for name, param in inspect.signature(module_cls.__init__).parameters.items():
        if name == "self":
            continue
        hint = hints.get(name, str)
        optional = False
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            members = [arg for arg in typing.get_args(hint) if arg is not type(None)]
            optional = len(members) < len(typing.get_args(hint))
            hint = members[0]
        base = hint
        kwargs: dict[str, Any] = {"default": param.default, "help": f"(default: {param.default})"}
        if typing.get_origin(base) in (tuple, list, collections.abc.Sequence):
            kwargs.update(nargs="+", type=int)
        elif base is bool:
            kwargs["type"] = _parse_bool
        elif base in (int, float, str):
            kwargs["type"] = _optional(base) if optional else base
        else:  # e.g. a network: set it in Python or through the rl-lightning CLI's class_path
            continue
        group.add_argument(f"--{name}", **kwargs)


def add_trainer_args(parser: argparse.ArgumentParser, max_steps: int) -> None:
    """Add the Trainer flags the scripts pass through."""
    group = parser.add_argument_group("Lightning Trainer flags")
    group.add_argument("--accelerator", default="cpu", help="cpu, gpu, auto ... (default: cpu)")
    group.add_argument("--devices", default="1", help="number of devices or 'auto' (default: 1)")
    group.add_argument("--strategy", default="auto", help="auto, ddp, ddp_spawn ... (default: auto)")
    group.add_argument("--num_nodes", type=int, default=1, help="machines in a multi-node run (default: 1)")
    group.add_argument("--precision", default="32-true", help="32-true, bf16-mixed, 16-mixed (default: 32-true)")
    group.add_argument("--max_steps", type=int, default=max_steps, help=f"optimizer steps (default: {max_steps})")
    group.add_argument("--default_root_dir", default=".", help="logs go to DIR/lightning_logs (default: .)")
    group.add_argument("--num_threads", type=int, default=1, help="torch CPU threads (default: 1)")
    group.add_argument(
        "--ckpt_path",
        default=None,
        help="resume from this checkpoint, or 'last': the newest last.ckpt under DIR/lightning_logs",
    )


def module_kwargs(args: argparse.Namespace, module_cls: type[L.LightningModule]) -> dict[str, Any]:
    """The parsed values of ``module_cls``'s hyper-parameters."""
    names = [name for name in inspect.signature(module_cls.__init__).parameters if name != "self"]
    return {name: getattr(args, name) for name in names if hasattr(args, name)}


def fit_kwargs(args: argparse.Namespace, module_cls: type[L.LightningModule]) -> dict[str, Any]:
    """The arguments of ``trainer.fit`` besides the module: the checkpoint to resume from (``last``:
    the newest ``last.ckpt`` saved by ``module_cls``)."""
    from rl_lightning.checkpoints import resolve_ckpt_path

    return {"ckpt_path": resolve_ckpt_path(args.ckpt_path, args.default_root_dir, module_cls.algorithm_name())}


def trainer_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The parsed Trainer flags, ready for ``L.Trainer(**...)``."""
    devices: int | str = int(args.devices) if args.devices.isdigit() else args.devices
    return dict(
        accelerator=args.accelerator,
        devices=devices,
        strategy=args.strategy,
        num_nodes=args.num_nodes,
        precision=args.precision,
        max_steps=args.max_steps,
        default_root_dir=args.default_root_dir,
    )


def add_watch_args(parser: argparse.ArgumentParser, eval_every: int, video_every: int) -> None:
    """Add the evaluation / video / stop-when-solved options."""
    group = parser.add_argument_group("evaluation, video and stopping")
    group.add_argument("--eval_every_n_env_steps", type=int, default=eval_every, help=f"(default: {eval_every})")
    group.add_argument("--num_eval_episodes", type=int, default=32, help="(default: 32)")
    group.add_argument("--video_every_n_env_steps", type=int, default=video_every, help=f"(default: {video_every})")
    group.add_argument("--no_video", action="store_true", help="do not log grid videos")
    group.add_argument("--solved_return", type=float, default=475.0, help="greedy eval return that stops the run")
    group.add_argument("--no_stop_when_solved", action="store_true", help="train for the whole budget")


def watch_callbacks(args: argparse.Namespace) -> list[L.Callback]:
    """Evaluation, a checkpoint of the best greedy policy (and the last), optionally a grid
    video and early stopping once the greedy return reaches ``--solved_return``."""
    from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint

    from rl_lightning.callbacks import CheckpointOnStop, Evaluation, GridVideoLogger

    callbacks: list[L.Callback] = [
        Evaluation(every_n_env_steps=args.eval_every_n_env_steps, num_eval_episodes=args.num_eval_episodes),
        ModelCheckpoint(monitor="eval/episodic_return", mode="max", filename="best-{epoch}-{step}"),
        # Lightning 2.6 writes save_last's copy only when a monitored checkpoint improves, so the
        # state to resume from is a second, unmonitored checkpoint rewritten every epoch.
        ModelCheckpoint(filename="last"),
        CheckpointOnStop(),  # SIGTERM / Ctrl-C: last.ckpt is written where the run stopped
    ]
    if not args.no_video:
        callbacks.append(GridVideoLogger(every_n_env_steps=args.video_every_n_env_steps))
    if not args.no_stop_when_solved:
        callbacks.append(
            EarlyStopping(
                monitor="eval/episodic_return",
                stopping_threshold=args.solved_return,
                mode="max",
                patience=10**9,  # stop on the threshold only, never for lack of improvement
                check_on_train_epoch_end=True,
            )
        )
    return callbacks


def report(trainer: L.Trainer, module: L.LightningModule, seconds: float) -> str:
    """The scripts' final line: greedy evaluation, wall time, env steps and where things went."""
    from rl_lightning.callbacks import Evaluation, GridVideoLogger

    evaluation = next((c for c in trainer.callbacks if isinstance(c, Evaluation)), None)
    video = next((c for c in trainer.callbacks if isinstance(c, GridVideoLogger)), None)
    metrics = evaluation.last_metrics if evaluation is not None else {}
    eval_text = (
        f"greedy eval return {metrics['eval/episodic_return']:.1f} +- {metrics['eval/episodic_return_std']:.1f}"
        if metrics
        else "no evaluation"
    )
    log_dir = trainer.logger.log_dir if trainer.logger is not None else trainer.default_root_dir
    checkpoints = trainer.checkpoint_callbacks
    best = next((c.best_model_path for c in checkpoints if c.monitor is not None), "none")
    last = next((c.best_model_path for c in checkpoints if c.monitor is None), "none")
    lines = [
        f"done: {eval_text}, {seconds:.1f} s wall, {module.env_steps:,} env steps, {trainer.global_step} updates",
        f"  best checkpoint:  {best}",
        f"  last checkpoint:  {last}  (resume: --ckpt_path {last})",
        f"  videos:           {log_dir}/videos ({len(video.video_paths) if video else 0} mp4)",
        f"  TensorBoard logs: {log_dir}  (tensorboard --logdir {Path(log_dir).parent.parent})",
    ]
    return "\n".join(lines)


def parse_script_args(
    module_cls: type[L.LightningModule], doc: str | None, max_steps: int, eval_every: int, video_every: int
) -> argparse.Namespace:
    """The training scripts' command line: ``module_cls``'s hyper-parameters, the Trainer flags and
    the evaluation / video / stopping options. Also applies ``--num_threads``."""
    import torch

    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_module_args(parser, module_cls)
    add_trainer_args(parser, max_steps=max_steps)
    add_watch_args(parser, eval_every=eval_every, video_every=video_every)
    args = parser.parse_args()
    torch.set_num_threads(args.num_threads)
    return args


def run_script(main: Any) -> None:
    """Run a training script's ``main``: a stop by SIGTERM or Ctrl-C exits with 143 / 130 after
    saying where the resumable checkpoint is, a diverged run (non-finite loss or weights) with 1
    and the error, never with 0."""
    import sys

    from lightning.pytorch.utilities.exceptions import SIGTERMException

    try:
        main()
    except SIGTERMException:
        print("stopped by SIGTERM: resume with --ckpt_path last", file=sys.stderr)
        sys.exit(143)
    except KeyboardInterrupt:
        print("stopped by Ctrl-C: resume with --ckpt_path last", file=sys.stderr)
        sys.exit(130)
    except FloatingPointError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)
