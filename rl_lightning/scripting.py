"""Command-line plumbing shared by the training scripts: jsonargparse reads a module's
hyper-parameters (types and defaults from its signature, help from its docstring's Args), and
adds Lightning's Trainer flags and the evaluation / video / stopping options."""

from __future__ import annotations

import contextlib
import logging
import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
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
    group.add_argument(
        "--max_steps",
        type=int | None,
        default=None,
        help=f"optimizer steps in all (null: {max_steps:,}, or --total_env_steps; -1: no limit)",
    )
    group.add_argument(
        "--total_env_steps",
        type=PositiveInt | None,
        default=None,
        help="the run's length in env steps (SB3's total_timesteps), instead of --max_steps",
    )
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
    group.add_argument(
        "--eval_max_episode_steps",
        type=PositiveInt | None,
        default=None,
        help="cut evaluation episodes at this many steps (null: the env's time limit; 1000 without one)",
    )
    every = "env steps between grid videos"
    group.add_argument("--video_every_n_env_steps", type=PositiveInt, default=video_every, help=every)
    group.add_argument("--no_video", action="store_true", help="do not log grid videos")
    group.add_argument(
        "--solved_return",
        type=float | None,
        default=None,
        help="greedy eval return that stops the run (null: the env's, e.g. CartPole-v1 475, Acrobot-v1 -100, "
        "Pendulum-v1 -200, or gymnasium's reward_threshold; none known: no early stop)",
    )
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
    if args.max_steps is not None and args.total_env_steps is not None:
        parser.error("--max_steps and --total_env_steps both set the run's length: pass one of them")
    if args.max_steps is None and args.total_env_steps is None:
        args.max_steps = max_steps
    torch.set_num_threads(args.num_threads)
    # ``instantiate`` is jsonargparse >= 4.49's name for ``instantiate_classes``.
    instantiate = getattr(parser, "instantiate", None) or parser.instantiate_classes
    hparams = instantiate(args)  # builds --network from its class_path and init_args
    try:
        module = module_cls(**{key: hparams[key] for key in module_keys})
    except (TypeError, ValueError) as error:
        parser.error(str(error), error)
    _check_trainer_flags(parser, args)
    if args.ckpt_path is not None:
        # A checkpoint that is no checkpoint, or one of another algorithm, env or network, is a bad
        # option too (exit status 2), not a traceback from inside fit.
        from rl_lightning.checkpoints import load_checkpoint_file, resolve_ckpt_path

        try:
            path = resolve_ckpt_path(
                args.ckpt_path, args.default_root_dir, module.algorithm_name(), module.hparams.env_id
            )
            if path is not None:
                module.check_checkpoint(load_checkpoint_file(path))
        except ValueError as error:
            parser.error(f"--ckpt_path {args.ckpt_path}: {error}", error)
    return module, args


def _check_trainer_flags(parser: ArgumentParser, args: Namespace) -> None:
    """``--accelerator``, ``--devices``, ``--strategy``, ``--num_nodes`` and ``--precision`` as Lightning
    takes them: a combination it refuses (``--devices 0``, ``--accelerator gpu`` without one) exits
    with status 2 and Lightning's reason, before anything starts."""
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    names = ("accelerator", "devices", "strategy", "num_nodes", "precision")
    try:
        L.Trainer(
            **{name: args[name] for name in names},
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
    except (MisconfigurationException, TypeError, ValueError, RuntimeError, ImportError) as error:
        given = " ".join(f"--{name} {args[name]}" for name in names)
        parser.error(f"the Trainer flags ({given}) are not usable here: {error}", error)


def fit_kwargs(args: Namespace, module: Any) -> dict[str, Any]:
    """The arguments of ``trainer.fit`` besides the module: the checkpoint to resume from (``last``:
    the newest ``last.ckpt`` saved by the same module class for the same env)."""
    from rl_lightning.checkpoints import resolve_ckpt_path

    ckpt_path = resolve_ckpt_path(args.ckpt_path, args.default_root_dir, module.algorithm_name(), module.hparams.env_id)
    return {"ckpt_path": ckpt_path}


#: The environment variable by which a DDP launcher's rank 0 tells the ranks it starts its version
#: directories (``<run dir>=<version>`` lines): they re-run the script and must not claim new ones.
_VERSION_VARIABLE = "RL_LIGHTNING_RUN_VERSIONS"


def run_logger(module: Any, root_dir: str | Path) -> Any:
    """TensorBoard logs in ``<root_dir>/lightning_logs/<run name>/version_N`` (``PPO-CartPole-v1``), so
    a directory says what ran; no placeholder ``hp_metric``.

    ``version_N`` is claimed atomically (created with ``mkdir``, the next number if another run took
    it first), so runs started at the same moment in one directory (a job array) never share one:
    Lightning's own choice (one past the highest there) lets two runs pick the same number."""
    import os

    from lightning.pytorch.loggers import TensorBoardLogger

    root = Path(root_dir) / "lightning_logs"
    directory = (root / module.run_name).resolve()
    claimed = dict(line.rsplit("=", 1) for line in os.environ.get(_VERSION_VARIABLE, "").splitlines() if "=" in line)
    if not is_launching_process():
        # A process a launcher started: rank 0's directory (it writes alone; the others only name it).
        version = int(claimed[str(directory)]) if str(directory) in claimed else None
    else:
        version = _claim_version(directory)
        claimed[str(directory)] = str(version)
        os.environ[_VERSION_VARIABLE] = "\n".join(f"{path}={number}" for path, number in claimed.items())
    return TensorBoardLogger(root, name=module.run_name, version=version, default_hp_metric=False)


def is_launching_process() -> bool:
    """Whether this process is the one a user started (global rank 0), not a rank a DDP launcher
    started by re-running the script (``LOCAL_RANK`` / ``NODE_RANK`` set and not 0)."""
    import os

    return os.environ.get("LOCAL_RANK", "0") == "0" and os.environ.get("NODE_RANK", "0") == "0"


def _claim_version(directory: Path) -> int:
    """Create ``directory/version_N`` for the lowest N past the highest there and return N; a number
    another process created first is skipped."""
    directory.mkdir(parents=True, exist_ok=True)
    numbers = [int(path.name[8:]) for path in directory.glob("version_*") if path.name[8:].isdigit()]
    version = max(numbers, default=-1) + 1
    while True:
        try:
            (directory / f"version_{version}").mkdir()
            return version
        except FileExistsError:
            version += 1


def trainer_kwargs(args: Namespace, module: Any) -> dict[str, Any]:
    """The parsed Trainer flags, ready for ``L.Trainer(**...)``: the run's length (``--max_steps``, or
    ``max_steps=-1`` and ``max_epochs=-1`` for the ``EnvStepBudget`` of ``--total_env_steps``), the
    named logger, and no model summary (the start line gives the parameter count)."""
    names = ("accelerator", "devices", "strategy", "num_nodes", "precision", "default_root_dir")
    kwargs = {name: args[name] for name in names}
    if args.total_env_steps is not None:
        kwargs.update(max_steps=-1, max_epochs=-1)
    else:
        kwargs["max_steps"] = args.max_steps
    return {**kwargs, "logger": run_logger(module, args.default_root_dir), "enable_model_summary": False}


def watch_callbacks(args: Namespace, module: Any) -> list[L.Callback]:
    """Evaluation, a checkpoint of the best greedy policy (and the last), optionally a grid
    video, the env-step budget, early stopping once the greedy return reaches ``--solved_return``
    (the env's own by default), and the start line."""
    from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint

    from rl_lightning.callbacks import CheckpointOnStop, EnvStepBudget, Evaluation, GridVideoLogger
    from rl_lightning.envs import solved_return

    callbacks: list[L.Callback] = [
        Evaluation(
            every_n_env_steps=args.eval_every_n_env_steps,
            num_eval_episodes=args.num_eval_episodes,
            max_episode_steps=args.eval_max_episode_steps,
        ),
        ModelCheckpoint(monitor="eval/episodic_return", mode="max", filename="best-{epoch}-{step}"),
        # Lightning 2.6 writes save_last's copy only when a monitored checkpoint improves, so the
        # state to resume from is a second, unmonitored checkpoint rewritten every epoch.
        ModelCheckpoint(filename="last"),
        CheckpointOnStop(),  # SIGTERM / Ctrl-C: last.ckpt is written where the run stopped
    ]
    if args.total_env_steps is not None:
        callbacks.append(EnvStepBudget(args.total_env_steps))
    if not args.no_video:
        callbacks.append(GridVideoLogger(every_n_env_steps=args.video_every_n_env_steps))
    env_id = module.hparams.env_id
    threshold = args.solved_return if args.solved_return is not None else solved_return(env_id)
    note = None
    if args.no_stop_when_solved:
        note = "trains for the whole budget (--no_stop_when_solved)"
    elif threshold is None:
        note = f"no solved return known for {env_id}: trains for the whole budget (--solved_return R stops it at R)"
    else:
        callbacks.append(
            EarlyStopping(
                monitor="eval/episodic_return",
                stopping_threshold=threshold,
                mode="max",
                patience=10**9,  # stop on the threshold only, never for lack of improvement
                check_on_train_epoch_end=True,
            )
        )
    callbacks.append(StartLine(note))
    return callbacks


def _solved_threshold(trainer: L.Trainer) -> float | None:
    """The greedy return at which an ``EarlyStopping`` of the Trainer stops the run, if any."""
    from lightning.pytorch.callbacks import EarlyStopping

    thresholds = [
        float(callback.stopping_threshold)
        for callback in trainer.callbacks
        if isinstance(callback, EarlyStopping)
        and callback.monitor == "eval/episodic_return"
        and callback.stopping_threshold is not None
    ]
    return thresholds[0] if thresholds else None


class StartLine(L.Callback):
    """Print one line when training starts: what trains (parameters, envs), for how long (env steps and
    updates), until when (the solved return), from which checkpoint, and where the logs go.

    Args:
        note: said in place of the stopping rule (e.g. why there is none).
    """

    def __init__(self, note: str | None = None):
        self.note = note

    def on_train_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        line = start_line(trainer, pl_module, self.note)  # on every rank: nothing in it may wait for the others
        if trainer.is_global_zero:
            print(line, flush=True)


def _log_dir(trainer: L.Trainer) -> str | None:
    """The logger's directory, read from the logger: ``Trainer.log_dir`` broadcasts from rank 0, so
    called on rank 0 alone (as a report is) it would wait forever for the other ranks under DDP."""
    logger = trainer.logger
    return None if logger is None else (logger.log_dir or logger.save_dir)


def start_line(trainer: L.Trainer, module: Any, note: str | None = None) -> str:
    """``VPGModule on CartPole-v1, 10,934 parameters, 32 envs: up to 800,000 env steps (50 updates), until
    the greedy eval return reaches 475.0; logs in lightning_logs/VPG-CartPole-v1/version_0``."""
    from rl_lightning.callbacks.schedule import planned_env_steps

    parameters = sum(p.numel() for p in module.parameters() if p.requires_grad)
    envs = f"{module.hparams.num_envs} envs" + (f" x {trainer.world_size} processes" if trainer.world_size > 1 else "")
    try:
        budget = f"up to {planned_env_steps(trainer, module, 'the run'):,.0f} env steps"
        budget += f" ({trainer.estimated_stepping_batches:,.0f} updates)"
    except ValueError:
        budget = "no set length"
    threshold = _solved_threshold(trainer)
    until = note or (
        f"until the greedy eval return reaches {threshold:g}" if threshold is not None else "no early stop"
    )
    line = f"{type(module).__name__} on {module.hparams.env_id}, {parameters:,} parameters, {envs}: {budget}, {until}"
    if trainer.ckpt_path:
        line += f"; resumed from {trainer.ckpt_path} at env step {module.env_steps:,}"
    return line + f"; logs in {_log_dir(trainer) or 'no logger'}"


def report(trainer: L.Trainer, module: Any, seconds: float) -> str:
    """The run's last lines: whether it solved the env (or why it stopped), the greedy evaluation, wall
    time, env steps, and where the checkpoints, videos and logs went."""
    from lightning.pytorch.callbacks import EarlyStopping

    from rl_lightning.callbacks import Evaluation, GridVideoLogger

    evaluation = next((c for c in trainer.callbacks if isinstance(c, Evaluation)), None)
    video = next((c for c in trainer.callbacks if isinstance(c, GridVideoLogger)), None)
    early = next((c for c in trainer.callbacks if isinstance(c, EarlyStopping)), None)
    metrics = evaluation.last_metrics if evaluation is not None else {}
    threshold = _solved_threshold(trainer)
    stop_reason = getattr(getattr(early, "stopping_reason", None), "name", "NOT_STOPPED")
    if metrics:
        mean = metrics["eval/episodic_return"]
        eval_text = f"greedy eval return {mean:.1f} +- {metrics['eval/episodic_return_std']:.1f}"
        if threshold is not None:
            eval_text += f" ({'>=' if mean >= threshold else '<'} {threshold:g})"
    else:
        eval_text = "no evaluation"
    if threshold is not None and metrics and stop_reason == "STOPPING_THRESHOLD":
        outcome = "solved"
    elif trainer.max_steps != -1 and trainer.global_step >= trainer.max_steps:
        outcome = "budget used up" + (", not solved" if threshold is not None else "")
    elif early is not None and stop_reason != "NOT_STOPPED":
        outcome = f"stopped early ({early.stopping_reason_message or stop_reason.lower()})"
    else:
        outcome = "stopped"
    log_dir = _log_dir(trainer)
    checkpoints = trainer.checkpoint_callbacks
    best = next((c.best_model_path for c in checkpoints if c.monitor is not None), "") or "none"
    last = next((c.best_model_path for c in checkpoints if c.monitor is None), "") or "none"
    lines = [
        f"done: {outcome}: {eval_text}; {seconds:.1f} s wall, {module.env_steps:,} env steps, "
        f"{trainer.global_step} updates",
        f"  best checkpoint:  {best}",
        f"  last checkpoint:  {last}" + ("  (resume: --ckpt_path last)" if last != "none" else ""),
    ]
    if log_dir is not None and video is not None:
        lines.append(f"  videos:           {log_dir}/videos ({len(video.video_paths)} mp4)")
    if log_dir is not None:
        lines.append(f"  TensorBoard logs: {log_dir}  (tensorboard --logdir {Path(log_dir).parent.parent})")
    return "\n".join(lines)


#: Lightning's start-up lines the scripts and the CLI leave out: device availability, adverts, and the
#: stop and restore notices (the start line and the report say the same, in env steps).
_LIGHTNING_CHATTER = (
    "GPU available:",
    "TPU available:",
    "HPU available:",
    "\U0001f4a1 Tip:",
    "`Trainer.fit` stopped:",
    "Restoring states from the checkpoint path",
    "Restored all states from the checkpoint",
    "Loaded model weights from the checkpoint",
    "`weights_only` was not set",
    "Received SIGTERM:",  # the "stopped by SIGTERM" line says it
)
_LIGHTNING_LOGGERS = (
    "lightning.pytorch.utilities.rank_zero",
    "lightning.fabric.utilities.rank_zero",
    "lightning_utilities.core.rank_zero",
    "lightning.pytorch.trainer.connectors.signal_connector",
    "lightning.pytorch.trainer.connectors.checkpoint_connector",
)


class _DropChatter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = re.sub(r"^\[rank: \d+\] ", "", str(record.getMessage()))  # Lightning's rank prefix
        return not message.startswith(_LIGHTNING_CHATTER)


@contextmanager
def quiet_lightning() -> Iterator[None]:
    """Within the block, Lightning's informational start-up lines (GPU/TPU availability, tips, "fit
    stopped", "restoring states") are not printed; its warnings and everything else are. The scripts
    and the CLI run in it; nothing is filtered outside it."""
    chatter = _DropChatter()
    loggers = [logging.getLogger(name) for name in _LIGHTNING_LOGGERS]
    for logger in loggers:
        logger.addFilter(chatter)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(chatter)


class _StopRequests:
    """SIGINT and SIGTERM for a whole script or CLI run. While a Trainer fits (Lightning's SIGTERM handler
    is installed and calls this one after its own), Ctrl-C becomes a SIGTERM, so both stop at Lightning's
    next safe point (between training steps; the env loops check too) and leave a checkpoint that resumes
    exactly; outside a fit they stop at once. A second signal while a stop is under way is ignored (a
    second Ctrl-C stops at once), never the default handler that kills the process mid-checkpoint."""

    def __init__(self):
        self.first: int | None = None

    def handle(self, signum: int, frame: Any) -> None:
        import os
        import signal

        from lightning.pytorch.utilities.exceptions import SIGTERMException

        fitting = signal.getsignal(signal.SIGTERM) not in (self.handle, signal.SIG_DFL, None)
        if self.first is not None:
            if signum == signal.SIGINT and self.first == signal.SIGINT:
                raise KeyboardInterrupt  # Ctrl-C twice: now
            return  # a stop is under way already
        self.first = signum
        if fitting and signum == signal.SIGINT:
            os.kill(os.getpid(), signal.SIGTERM)  # Lightning's graceful stop, at its next safe point
        elif not fitting:
            # Before (or after) a fit, e.g. while DDP starts: the ranks this process launched stop too,
            # rather than fail to reach it.
            for pid in ddp_children():
                with contextlib.suppress(OSError):
                    os.kill(pid, signum)
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            raise SIGTERMException()


def ddp_children() -> list[int]:
    """The DDP ranks this process launched (Lightning's script launcher: child processes with
    ``LOCAL_RANK`` in their environment); empty where ``/proc`` cannot tell (not Linux)."""
    import os

    me, children = os.getpid(), []
    with contextlib.suppress(OSError, ValueError):
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = stat.read_text().rpartition(")")[2].split()
                if int(fields[1]) == me and b"LOCAL_RANK=" in (stat.parent / "environ").read_bytes():
                    children.append(int(stat.parent.name))
    return children


def _wait_for_ddp_children(timeout: float = 30.0) -> None:
    """After a stop, give the ranks this process launched ``timeout`` seconds to write and exit,
    then kill them: a stopped run leaves no process behind."""
    import os
    import signal
    import time

    deadline = time.monotonic() + timeout
    while (children := ddp_children()) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in children:
        print(f"rank process {pid} did not stop within {timeout:.0f} s after the stop request: killed", file=sys.stderr)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def run_script(main: Any) -> None:
    """Run a training script's ``main``: a stop by SIGTERM or Ctrl-C exits with 143 / 130 after
    saying where the resumable checkpoint is (a Ctrl-C during a fit stops at the same safe point as a
    SIGTERM, so it resumes exactly), a diverged run (non-finite loss or weights), a checkpoint that
    could not be written (disk full) or another failure of the file system (a read-only directory)
    with 1 and the error in one line, never with 0."""
    import signal
    import sys

    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from rl_lightning.checkpoints import CheckpointSaveError

    requests = _StopRequests()
    previous = {signum: signal.signal(signum, requests.handle) for signum in (signal.SIGINT, signal.SIGTERM)}

    def stopped(code: int) -> None:
        name = "Ctrl-C" if requests.first == signal.SIGINT else "SIGTERM"
        _wait_for_ddp_children()
        print(f"stopped by {name}: resume with --ckpt_path last", file=sys.stderr)
        sys.exit(code)

    try:
        with quiet_lightning():
            main()
    except SIGTERMException:
        stopped(130 if requests.first == signal.SIGINT else 143)
    except KeyboardInterrupt:
        stopped(130)
    except SystemExit as exit_:
        # Lightning turns a KeyboardInterrupt inside fit into sys.exit(1) after its own shutdown.
        if exit_.code == 1 and requests.first == signal.SIGINT:
            stopped(130)
        raise
    except (FloatingPointError, CheckpointSaveError, OSError) as error:  # diverged; a disk full or read-only
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)
    finally:
        # After a stop request the process is on its way out: a signal while it shuts down (a second
        # SIGTERM from a scheduler) is ignored, not the default handler that kills it (exit -15).
        for signum, handler in previous.items():
            signal.signal(signum, handler if requests.first is None else signal.SIG_IGN)
