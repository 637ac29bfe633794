"""The scripts' flat flags (``python scripts/train_ppo.py --lr 0.01 --devices 2``), the dialect of
:class:`~rl_lightning.cli.ScriptCLI`: one module's hyper-parameters as top-level options, the Lightning Trainer flags
a script takes, the evaluation / video / stopping options of :func:`~rl_lightning.scripting.default_callbacks`, the
spellings the README documents for them (``--hidden_sizes 64 64``, ``none``), and how they map onto the Trainer and
its callbacks. ``rl-lightning`` spells the same settings ``--model.init_args.lr``, ``--trainer.devices``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jsonargparse import DefaultHelpFormatter
from jsonargparse.typing import PositiveInt
from lightning.pytorch.cli import LightningArgumentParser

from rl_lightning._command_line_renames import renamed_arguments
from rl_lightning.loggers import add_logger_argument, logger_spellings

#: The Lightning Trainer flags a script takes as they are (``--devices 2``); the run's length is
#: ``--max_steps`` or ``--total_env_steps``.
SCRIPT_TRAINER_FLAGS = ("accelerator", "devices", "strategy", "num_nodes", "precision", "default_root_dir")


def add_script_arguments(parser: LightningArgumentParser, model_class: type, defaults: dict[str, int]) -> list[str]:
    """A script's options on ``parser``: ``model_class``'s hyper-parameters as flat options (returns their names), the
    Trainer flags, and the evaluation, video and stopping options (``defaults``: ``max_steps``, ``eval`` and ``video``,
    the defaults of the run's length, ``--eval_every_n_env_steps`` and ``--video_every_n_env_steps``)."""
    module_keys = parser.add_class_arguments(model_class, nested_key=None, as_group=True)
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
    group.add_argument(
        "--max_steps",
        type=int | None,
        default=None,
        help=f"optimizer steps in all (null: {defaults['max_steps']:,}, or --total_env_steps; -1: no limit)",
    )
    group.add_argument("--default_root_dir", type=str, default=".", help="logs go to DIR/lightning_logs")
    add_run_arguments(group, "--max_steps")
    add_logger_argument(group, "tensorboard")
    group.add_argument(
        "--ckpt_path",
        type=str | None,
        default=None,
        help="resume from this checkpoint, or 'last': the newest last.ckpt under DIR/lightning_logs",
    )

    group = parser.add_argument_group("evaluation, video and stopping")
    every = "env steps between greedy evaluations"
    group.add_argument("--eval_every_n_env_steps", type=PositiveInt, default=defaults["eval"], help=every)
    group.add_argument(
        "--num_eval_episodes",
        type=PositiveInt | None,
        default=None,
        help="episodes per evaluation (default: 32 for a native torch env, 10 for the others)",
    )
    group.add_argument(
        "--eval_max_episode_steps",
        type=PositiveInt | None,
        default=None,
        help="cut evaluation episodes at this many steps (null: the env's time limit; 1000 without one)",
    )
    every = "env steps between grid videos"
    group.add_argument("--video_every_n_env_steps", type=PositiveInt, default=defaults["video"], help=every)
    group.add_argument("--no_video", action="store_true", help="do not log grid videos")
    group.add_argument(
        "--solved_return",
        type=float | None,
        default=None,
        help="greedy eval return that stops the run (null: the env's, e.g. CartPole-v1 475, Acrobot-v1 -100, "
        "Pendulum-v1 -200, or gymnasium's reward_threshold; none known: no early stop)",
    )
    group.add_argument("--no_stop_when_solved", action="store_true", help="train for the whole budget")
    return module_keys


def add_run_arguments(container: Any, max_steps_flag: str) -> None:
    """``--num_threads`` and ``--total_env_steps``, the same in ``rl-lightning`` and the scripts."""
    threads = "torch CPU threads (torch.set_num_threads)"
    container.add_argument("--num_threads", type=PositiveInt, default=1, help=threads)
    container.add_argument(
        "--total_env_steps",
        type=PositiveInt | None,
        default=None,
        help=f"the run's length in env steps (SB3's total_timesteps), in place of {max_steps_flag}",
    )


class ScriptHelpFormatter(DefaultHelpFormatter):
    """jsonargparse's help (type and default after each option) with the script's docstring as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "".join(indent + line for line in text.splitlines(keepends=True))


def script_arguments(
    argv: Sequence[str], parser: LightningArgumentParser, model_class: type, module_keys: list[str]
) -> list[str]:
    """A script's command line ``argv`` as jsonargparse reads it: former names spelled as now (``renamed_arguments``),
    the loggers' spellings and :func:`_argparse_spellings`."""
    # jsonargparse gives a list-valued option a second spelling, ``--hidden_sizes+`` (append).
    options = {option for action in parser._actions for option in action.option_strings}
    list_options = {f"--{key}" for key in module_keys if f"--{key}+" in options}
    argv = renamed_arguments(argv, parser.error, model_class)
    return _argparse_spellings(logger_spellings(argv), list_options)


def _argparse_spellings(argv: Sequence[str], list_options: set[str]) -> list[str]:
    """``argv`` with the spellings jsonargparse does not read in its own, which the README documents for
    the scripts: ``--hidden_sizes 64 64`` -> ``--hidden_sizes [64,64]``, and ``none`` / ``None`` -> ``null``."""

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


def run_length(config: Any) -> dict[str, int]:
    """The Trainer's length flags for a script's ``--total_env_steps`` / ``--max_steps``."""
    if config.total_env_steps is not None:
        return {"max_steps": -1, "max_epochs": -1}  # EnvStepBudget sets max_steps; no epoch limit
    return {"max_steps": config.max_steps}


def run_callback_options(config: Any) -> dict[str, Any]:
    """:func:`~rl_lightning.scripting.default_callbacks`' options from a script's evaluation, video and stopping
    flags."""
    return {
        "eval_every_n_env_steps": config.eval_every_n_env_steps,
        "num_eval_episodes": config.num_eval_episodes,
        "eval_max_episode_steps": config.eval_max_episode_steps,
        "video_every_n_env_steps": None if config.no_video else config.video_every_n_env_steps,
        "solved_return": config.solved_return,
        "stop_when_solved": not config.no_stop_when_solved,
    }
