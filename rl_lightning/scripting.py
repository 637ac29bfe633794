"""Command-line plumbing shared by the training scripts: jsonargparse reads a module's
hyper-parameters (types and defaults from its signature, help from its docstring's Args), and
adds Lightning's Trainer flags and the evaluation / video / stopping options."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
from jsonargparse import ActionConfigFile, ArgumentParser, DefaultHelpFormatter, Namespace
from jsonargparse.typing import PositiveInt


class _HelpFormatter(DefaultHelpFormatter):
    """jsonargparse's help (type and default after each option) with the script's docstring as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "".join(indent + line for line in text.splitlines(keepends=True))


def _script_parser(
    module_cls: type[L.LightningModule], doc: str | None, max_steps: int, eval_every: int, video_every: int
) -> tuple[ArgumentParser, list[str]]:
    """The training scripts' parser: ``--config``, ``module_cls``'s hyper-parameters as flat options
    (``--lr``, ``--hidden_sizes [64,64]``, ``--network CLASS_PATH``), the Trainer flags and the evaluation /
    video / stopping options. Returns it and the names of the hyper-parameters."""
    parser = ArgumentParser(description=doc, formatter_class=_HelpFormatter)
    parser.add_argument("--config", action=ActionConfigFile, help="a YAML file of options (see --print_config)")
    module_keys = parser.add_class_arguments(module_cls, nested_key=None, as_group=True)
    for action in parser._actions:
        if action.dest == "network":
            # jsonargparse would list every nn.Module subclass torch has (a screenful) in the help.
            action.extra_help = lambda: ", a class_path and init_args, e.g. torch.nn.Flatten"

    group = parser.add_argument_group("Lightning Trainer flags")
    group.add_argument("--accelerator", type=str, default="cpu", help="cpu, gpu, auto ...")
    group.add_argument("--devices", type=int | str, default=1, help="how many, auto, or which: 0,1")
    group.add_argument("--strategy", type=str, default="auto", help="auto, ddp, ddp_spawn ...")
    group.add_argument("--num_nodes", type=PositiveInt, default=1, help="machines in a multi-node run")
    group.add_argument("--precision", type=str, default="32-true", help="32-true, bf16-mixed, 16-mixed ...")
    group.add_argument("--max_steps", type=int, default=max_steps, help="optimizer steps in all (-1: no limit)")
    group.add_argument("--default_root_dir", type=str, default=".", help="logs go to DIR/lightning_logs")
    group.add_argument("--num_threads", type=PositiveInt, default=1, help="torch CPU threads")
    group.add_argument(
        "--ckpt_path",
        type=str | None,
        default=None,
        help="resume from this checkpoint, or 'last': the newest last.ckpt under DIR/lightning_logs",
    )

    group = parser.add_argument_group("evaluation, video and stopping")
    every = "env steps between greedy evaluations"
    group.add_argument("--eval_every_n_env_steps", type=PositiveInt, default=eval_every, help=every)
    group.add_argument("--num_eval_episodes", type=PositiveInt, default=32, help="episodes per evaluation")
    every = "env steps between grid videos"
    group.add_argument("--video_every_n_env_steps", type=PositiveInt, default=video_every, help=every)
    group.add_argument("--no_video", action="store_true", help="do not log grid videos")
    group.add_argument("--solved_return", type=float, default=475.0, help="greedy eval return that stops the run")
    group.add_argument("--no_stop_when_solved", action="store_true", help="train for the whole budget")
    return parser, module_keys


def _argparse_spellings(argv: Sequence[str], list_options: set[str]) -> list[str]:
    """``argv`` with the argparse-era spellings jsonargparse does not read in its own:
    ``--hidden_sizes 64 64`` -> ``--hidden_sizes [64,64]`` and ``none`` / ``None`` -> ``null``."""

    def is_option(token: str) -> bool:
        return token.startswith("-") and not token.lstrip("-")[:1].isdigit()  # -1 and -0.5 are values

    result: list[str] = []
    index = 0
    while index < len(argv):
        token = argv[index]
        index += 1
        if token in ("none", "None"):
            token = "null"
        elif is_option(token) and token.endswith(("=none", "=None")):
            token = token.rpartition("=")[0] + "=null"
        result.append(token)
        if token in list_options:
            end = index
            while end < len(argv) and not is_option(argv[end]):
                end += 1
            values, index = list(argv[index:end]), end
            if values and values[0].startswith("["):  # jsonargparse's own list, maybe split by the shell
                result.append(" ".join(values))
            elif values:
                result.append(f"[{','.join(values)}]")
    return result


def parse_script_args(
    module_cls: type[L.LightningModule],
    doc: str | None,
    max_steps: int,
    eval_every: int,
    video_every: int,
    argv: Sequence[str] | None = None,
) -> tuple[L.LightningModule, Namespace]:
    """Parse ``argv`` (None: ``sys.argv[1:]``), apply ``--num_threads`` and build the module. Returns
    the module and the options. A value of the wrong type, or one the module refuses (``--lr -1``),
    exits with status 2 and a message naming the option, as argparse does."""
    import torch

    parser, module_keys = _script_parser(module_cls, doc, max_steps, eval_every, video_every)
    # jsonargparse gives a list-valued option a second spelling, ``--hidden_sizes+`` (append).
    options = {option for action in parser._actions for option in action.option_strings}
    list_options = {f"--{key}" for key in module_keys if f"--{key}+" in options}
    args = parser.parse_args(_argparse_spellings(sys.argv[1:] if argv is None else argv, list_options))
    torch.set_num_threads(args.num_threads)
    # ``instantiate`` is jsonargparse >= 4.49's name for ``instantiate_classes``.
    instantiate = getattr(parser, "instantiate", None) or parser.instantiate_classes
    hparams = instantiate(args)  # builds --network from its class_path and init_args
    try:
        module = module_cls(**{key: hparams[key] for key in module_keys})
    except (TypeError, ValueError) as error:
        parser.error(str(error), error)
    return module, args


def fit_kwargs(args: Namespace, module_cls: type[L.LightningModule]) -> dict[str, Any]:
    """The arguments of ``trainer.fit`` besides the module: the checkpoint to resume from (``last``:
    the newest ``last.ckpt`` saved by ``module_cls``)."""
    from rl_lightning.checkpoints import resolve_ckpt_path

    return {"ckpt_path": resolve_ckpt_path(args.ckpt_path, args.default_root_dir, module_cls.algorithm_name())}


def trainer_kwargs(args: Namespace) -> dict[str, Any]:
    """The parsed Trainer flags, ready for ``L.Trainer(**...)``."""
    names = ("accelerator", "devices", "strategy", "num_nodes", "precision", "max_steps", "default_root_dir")
    return {name: args[name] for name in names}


def watch_callbacks(args: Namespace) -> list[L.Callback]:
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
