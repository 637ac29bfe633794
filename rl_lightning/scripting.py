"""What a training run prints, logs and does when stopped, shared by the training scripts and
``rl-lightning fit`` (both parse in :mod:`rl_lightning.cli`): the default callbacks, the run's logger,
its first and last lines, and the signal handling of :func:`run_script`."""

from __future__ import annotations

import contextlib
import logging
import re
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lightning as L

from rl_lightning.loggers import logger_lines, logger_names, make_logger


def default_callbacks(
    env_id: str,
    *,
    eval_every_n_env_steps: int,
    num_eval_episodes: int | None = None,
    eval_max_episode_steps: int | None = None,
    video_every_n_env_steps: int | None = None,
    solved_return: float | None = None,
    stop_when_solved: bool = True,
) -> list[L.Callback]:
    """A training script's callbacks: greedy evaluation, a checkpoint of the best greedy policy and the last,
    ``CheckpointOnStop``, optionally a grid video, early stopping once the greedy return reaches the solved
    return, and the run's first and last lines (:class:`RunLines`).

    Args:
        env_id: the env trained on, whose solved return stops the run by default.
        eval_every_n_env_steps: env steps between greedy evaluations.
        num_eval_episodes: episodes per evaluation (None: 32 for a native torch env, 10 for the others).
        eval_max_episode_steps: evaluation episodes are cut at this many steps (None: the env's time limit).
        video_every_n_env_steps: env steps between grid videos (None: no videos).
        solved_return: the greedy return that stops the run (None: the env's, ``envs.solved_return``).
        stop_when_solved: False trains for the whole budget.
    """
    from lightning.pytorch.callbacks import ModelCheckpoint

    from rl_lightning.callbacks import CheckpointOnStop, Evaluation, GridVideoLogger, StopWhenSolved
    from rl_lightning.checkpoints import EnvStepCheckpoint
    from rl_lightning.envs import solved_return as env_solved_return

    callbacks: list[L.Callback] = [
        Evaluation(
            every_n_env_steps=eval_every_n_env_steps,
            num_eval_episodes=num_eval_episodes,
            max_episode_steps=eval_max_episode_steps,
        ),
        # Named by env steps, the charts' x-axis (best-env_steps=51200.ckpt), which go on from a resume.
        EnvStepCheckpoint(monitor="eval/episodic_return", mode="max", filename="best-{env_steps}"),
        # Lightning 2.6 writes save_last's copy only when a monitored checkpoint improves, so the
        # state to resume from is a second, unmonitored checkpoint rewritten every epoch.
        ModelCheckpoint(filename="last"),
        CheckpointOnStop(),  # SIGTERM / Ctrl-C: last.ckpt is written where the run stopped
    ]
    if video_every_n_env_steps is not None:
        callbacks.append(GridVideoLogger(every_n_env_steps=video_every_n_env_steps))
    threshold = solved_return if solved_return is not None else env_solved_return(env_id)
    note = None
    if not stop_when_solved:
        note = "trains for the whole budget (--no_stop_when_solved)"
    elif threshold is None:
        note = f"no solved return known for {env_id}: trains for the whole budget (--solved_return R stops it at R)"
    else:
        # >= the threshold (EarlyStopping needs more), and confirmed on fresh episodes before the run stops
        callbacks.append(StopWhenSolved(threshold))
    callbacks.append(RunLines(note))
    return callbacks


#: The environment variable by which a DDP launcher's rank 0 tells the ranks it starts its version
#: directories (``<run dir>=<version>`` lines): they re-run the script and must not claim new ones.
_VERSION_VARIABLE = "RL_LIGHTNING_RUN_VERSIONS"


def run_logger(module: Any, root_dir: str | Path) -> Any:
    """TensorBoard logs in ``<root_dir>/lightning_logs/<run name>/version_N`` (``PPO-CartPole-v1``), so
    a directory says what ran; no placeholder ``hp_metric``. See :func:`run_loggers`."""
    return run_loggers(module, root_dir, ["tensorboard"])[0][0]


def run_loggers(
    module: Any, root_dir: str | Path, names: str | Sequence[str] | None = None
) -> tuple[list[Any], Path | None]:
    """The run's loggers (``names``: ``--logger``'s value, see :func:`logger_names`) and the run's directory,
    ``<root_dir>/lightning_logs/<run name>/version_N`` (``PPO-CartPole-v1``), which they all log to:

    - ``tensorboard``: the TensorBoard event files there (no placeholder ``hp_metric``);
    - ``csv``: ``metrics.csv`` there;
    - ``wandb``: the W&B run's files in its ``wandb/`` (``$WANDB_DIR`` if set), project ``$WANDB_PROJECT``
      or ``lightning_logs``, run name ``<run name>/version_N``; ``WANDB_MODE=offline`` works as in W&B;
    - ``mlflow``: an MLflow store of the run's own, ``mlflow.db`` (SQLite: MLflow 3 refuses a new file
      store) with the artifacts in ``mlartifacts/``, or the store of ``$MLFLOW_TRACKING_URI`` if set;
      experiment ``<run name>``, run name ``version_N``.

    ``version_N`` is claimed atomically (created with ``mkdir``, the next number if another run took
    it first), so runs started at the same moment in one directory (a job array) never share one:
    Lightning's own choice (one past the highest there) lets two runs pick the same number. The
    directory is None in a process that a launcher started without naming it (it does not log).

    Raises:
        ValueError, ModuleNotFoundError: see :func:`logger_names` (before any directory is claimed).
    """
    import os

    chosen = logger_names(names)
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
    run_dir = None if version is None else root / module.run_name / f"version_{version}"
    launching = is_launching_process()
    return [make_logger(name, module.run_name, root, version, run_dir, launching) for name in chosen], run_dir


def use_run_directory(trainer: L.Trainer, run_dir: Path | None) -> None:
    """Point the run's callbacks at ``run_dir`` (``lightning_logs/<run>/version_N``) where Lightning would not:
    its first and last lines name it (:class:`RunLines`), and where the first logger has no such directory
    (W&B and MLflow keep their own), the checkpoints (``ModelCheckpoint`` without a ``dirpath``: Lightning would
    put them under W&B's project or MLflow's experiment id) and the grid videos go to it, as with TensorBoard.

    ``--ckpt_path last`` looks for ``version_*/checkpoints/last.ckpt``, whichever loggers the run had."""
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    from rl_lightning.callbacks import GridVideoLogger

    if run_dir is None:
        return
    own_directory = bool(trainer.loggers) and isinstance(trainer.loggers[0], (TensorBoardLogger, CSVLogger))
    for callback in trainer.callbacks:
        if isinstance(callback, RunLines):
            callback.run_dir = str(run_dir)
        elif own_directory:
            continue
        elif isinstance(callback, ModelCheckpoint) and callback.dirpath is None:
            callback.dirpath = str(run_dir / "checkpoints")  # as given, like Lightning's own (not made absolute)
        elif isinstance(callback, GridVideoLogger) and callback.dirpath is None:
            callback.dirpath = run_dir / "videos"


#: The variables by which launchers tell a process its rank: Lightning's (``LOCAL_RANK``, ``NODE_RANK``), torchrun's
#: (``RANK``, ``GROUP_RANK``: the node) and SLURM's (``SLURM_PROCID``: the task).
_RANK_VARIABLES = ("LOCAL_RANK", "NODE_RANK", "RANK", "GROUP_RANK", "SLURM_PROCID")


def is_launching_process() -> bool:
    """Whether this process is the run's first (global rank 0): the one a user started, not a rank a DDP launcher
    started by re-running the script, nor the first process of another node (torchrun's ``--node_rank 1``, a
    SLURM task other than 0), which would otherwise claim a log directory of its own that stays empty."""
    import os

    return all(os.environ.get(name, "0") == "0" for name in _RANK_VARIABLES)


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


#: The (trainer, module) of the run in progress once its training started (RunLines), for the line
#: :func:`run_script` prints at a stop: only a run that started training has a checkpoint of its own to resume.
_training_run: tuple[L.Trainer, Any] | None = None


def _stop_resume_hint() -> str:
    """What follows "stopped by SIGTERM" in a stop's line: how to resume (``: resume with --ckpt_path last`` only
    where that flag picks this run's own file) or why nothing of this run can be resumed."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    if _training_run is None:
        return " before training started: this run wrote no checkpoint"
    trainer, module = _training_run
    for callback in trainer.checkpoint_callbacks:
        if not isinstance(callback, ModelCheckpoint) or callback.monitor is not None:
            continue
        # CheckpointOnStop's file (written at the stop), else the last one the callback wrote.
        name = (callback.filename or "last").replace("{", "").replace("}", "") + callback.FILE_EXTENSION
        paths = [Path(callback.dirpath) / name] if callback.dirpath else []
        for path in [*paths, *([callback.best_model_path] if callback.best_model_path else [])]:
            flag = _resume_flag(trainer, module, str(path))
            if flag:
                return f": resume with {flag}"
    return " before this run wrote a checkpoint: nothing of it to resume from"


class RunLines(L.Callback):
    """Print the run's first line when training starts (what trains, for how long, until when, from which
    checkpoint, where the logs go: :func:`start_line`) and its last lines when the fit ends (the outcome,
    the greedy evaluation, wall time, where the checkpoints went: :func:`report`); rank 0 only.

    Args:
        note: said in place of the stopping rule (e.g. why there is none).
        run_dir: the run's directory, named in both (None: the first logger's; :func:`use_run_directory` sets it).
    """

    def __init__(self, note: str | None = None, run_dir: str | None = None):
        self.note = note
        self.run_dir = run_dir
        self._start = time.perf_counter()

    def setup(self, trainer: L.Trainer, pl_module: Any, stage: str) -> None:
        self._start = time.perf_counter()

    def on_train_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        global _training_run
        line = start_line(trainer, pl_module, self.note, self.run_dir)  # every rank: nothing in it may wait for others
        if trainer.is_global_zero:
            print(line, flush=True)
        _training_run = (trainer, pl_module)  # what a stop's line names (run_script)

    def on_fit_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        if trainer.is_global_zero:
            print(report(trainer, pl_module, time.perf_counter() - self._start, self.run_dir), flush=True)


def _log_dir(trainer: L.Trainer) -> str | None:
    """The first logger's directory (its ``log_dir``, else its ``save_dir``: W&B's), read from the logger:
    ``Trainer.log_dir`` broadcasts from rank 0, so called on rank 0 alone (as a report is) it would wait
    forever for the other ranks under DDP."""
    logger = trainer.logger
    return None if logger is None else (getattr(logger, "log_dir", None) or logger.save_dir)


def start_line(trainer: L.Trainer, module: Any, note: str | None = None, run_dir: str | None = None) -> str:
    """``VPGModule on CartPole-v1, 10,934 parameters, 32 envs: up to 800,000 env steps (50 updates), until
    the greedy eval return reaches 475.0; logs in lightning_logs/VPG-CartPole-v1/version_0``."""
    from rl_lightning.callbacks.schedule import planned_env_steps, planned_updates

    parameters = sum(p.numel() for p in module.parameters() if p.requires_grad)
    envs = counted(module.hparams.get("num_envs", 1), "env")  # an offline module (no num_envs) plays one env
    seeds = getattr(module, "num_seeds", 1)
    if seeds > 1:  # each seed its own envs; the budget is each seed's
        seed = module.hparams.seed
        envs = f"{counted(seeds, 'seed')} ({seed}..{seed + seeds - 1}) x {envs}"
    if trainer.world_size > 1:
        envs += f" x {counted(trainer.world_size, 'process', 'processes')}"
    try:
        budget = f"up to {counted(planned_env_steps(trainer, module, 'the run'), 'env step')}"
        budget += " each" if seeds > 1 else ""
        budget += f" ({counted(planned_updates(trainer, module), 'update')})"
    except ValueError:
        budget = "no set length"
    threshold = _solved_threshold(trainer)
    until = note or (
        f"until the greedy eval return reaches {threshold:g}" if threshold is not None else "no early stop"
    )
    line = (
        f"{type(module).__name__} on {module.hparams.env_id}, {counted(parameters, 'parameter')}, {envs}: {budget}, "
        f"{until}"
    )
    if trainer.ckpt_path:
        line += f"; resumed from {trainer.ckpt_path} at env step {module.env_steps:,}"
    where = run_dir or _log_dir(trainer)
    if where is None and trainer.loggers:  # e.g. MLflow alone, on a tracking server
        where = ", ".join(type(logger).__name__ for logger in trainer.loggers)
    return line + f"; logs in {where or 'no logger'}"


def counted(number: float, noun: str, plural: str | None = None) -> str:
    """``1 env``, ``3,500 updates``: a count with a thousands separator and its noun in the number it needs."""
    return f"{number:,.0f} {noun if number == 1 else plural or noun + 's'}"


def _resume_flag(trainer: L.Trainer, module: Any, last: str) -> str | None:
    """What resumes the run whose last checkpoint is ``last``: ``--ckpt_path last`` only where that flag picks
    exactly this file (it exists and is the newest last checkpoint of this algorithm and env under the run's root
    directory), else its path; None where the file does not exist."""
    from rl_lightning.checkpoints import resume_flag

    algorithm = module.algorithm_name() if hasattr(module, "algorithm_name") else type(module).__name__
    env_id = getattr(module.hparams, "env_id", None)
    return resume_flag(last, trainer.default_root_dir, algorithm, env_id)


def report(trainer: L.Trainer, module: Any, seconds: float, run_dir: str | None = None) -> str:
    """The run's last lines: whether it solved the env (or why it stopped), the greedy evaluation, wall
    time, env steps, and where the checkpoints, videos and logs went (each logger's line:
    :func:`~rl_lightning.loggers.logger_lines`)."""
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
    reached = threshold is not None and metrics and metrics["eval/episodic_return"] >= threshold
    if reached and hasattr(early, "solved_at"):  # StopWhenSolved: solved only once confirmed on fresh episodes
        reached = early.solved_at is not None
    if evaluation is not None and evaluation.confirmations and metrics:
        confirmed_at, confirmed = evaluation.confirmations[-1]
        if confirmed_at == module.env_steps:
            eval_text += f", {confirmed:.1f} on fresh episodes"
    if reached and (stop_reason == "STOPPING_THRESHOLD" or trainer.global_step >= trainer.max_steps != -1):
        outcome = "solved"  # early, or by the evaluation at the budget's end
    elif trainer.max_steps != -1 and trainer.global_step >= trainer.max_steps:
        outcome = "budget used up" + (", not solved" if threshold is not None else "")
    elif early is not None and stop_reason != "NOT_STOPPED":
        outcome = f"stopped early ({early.stopping_reason_message or stop_reason.lower()})"
    else:
        outcome = "stopped"
    log_dir = run_dir or _log_dir(trainer)
    checkpoints = trainer.checkpoint_callbacks
    best = next((c.best_model_path for c in checkpoints if c.monitor is not None), "") or "none"
    last = next((c.best_model_path for c in checkpoints if c.monitor is None), "") or "none"
    compiled = getattr(module, "compile_seconds", None)
    compile_text = f" (of which compiling: {sum(compiled.values()):.1f} s)" if compiled else ""
    resume = None if last == "none" else _resume_flag(trainer, module, last)
    lines = [
        f"done: {outcome}: {eval_text}; {seconds:.1f} s wall{compile_text}, {counted(module.env_steps, 'env step')}, "
        f"{counted(trainer.global_step, 'update')}",
        f"  best checkpoint:  {best}",
        f"  last checkpoint:  {last}" + (f"  (resume: {resume})" if resume else ""),
    ]
    if evaluation is not None and evaluation.seed_history:
        lines.insert(1, _seeds_line(evaluation.seed_history, threshold))
    video_dir = video.video_dir if video is not None else None
    if video is not None and (video_dir is not None or log_dir is not None):
        lines.append(f"  videos:           {video_dir or Path(log_dir) / 'videos'} ({len(video.video_paths)} mp4)")
    return "\n".join(lines + logger_lines(trainer))


def _seeds_line(history: list[tuple[int, list[float]]], threshold: float | None) -> str:
    """How many seeds of a ``num_seeds > 1`` run reached ``threshold`` in a greedy evaluation, and when (without a
    threshold: each seed's last evaluation)."""
    num_seeds = len(history[-1][1])
    finals = " / ".join(f"{returns:.0f}" for returns in history[-1][1])
    if threshold is None:
        return f"  seeds: {num_seeds}, last evaluation {finals}"
    first = [
        next((steps for steps, returns in history if returns[index] >= threshold), None) for index in range(num_seeds)
    ]
    solved = sorted((steps, index) for index, steps in enumerate(first) if steps is not None)
    when = ", ".join(f"seed index {index} at {steps:,}" for steps, index in solved) or "none"
    return f"  seeds: {len(solved)} of {num_seeds} reached {threshold:g} ({when}); last evaluation {finals}"


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
    "Bypassing SIGTERM:",  # under SLURM's auto-requeue; the stop line says what stopped the run
    "Experiment with name ",  # MLFlowLogger creating the run's experiment ("... not found. Creating it.")
)
_LIGHTNING_LOGGERS = (
    "lightning.pytorch.utilities.rank_zero",
    "lightning.fabric.utilities.rank_zero",
    "lightning_utilities.core.rank_zero",
    "lightning.pytorch.trainer.connectors.signal_connector",
    "lightning.pytorch.trainer.connectors.checkpoint_connector",
    "lightning.pytorch.loggers.mlflow",
)


class _DropChatter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = re.sub(r"^\[rank: \d+\] ", "", str(record.getMessage()))  # Lightning's rank prefix
        return not message.startswith(_LIGHTNING_CHATTER)


@contextmanager
def quiet_lightning() -> Iterator[None]:
    """Within the block, Lightning's informational start-up lines (GPU/TPU availability, tips, "fit
    stopped", "restoring states") are not printed, nor CSVLogger's warning that the run's directory is not
    empty; its other warnings and everything else are. The scripts and the CLI run in it; nothing is
    filtered outside it."""
    import warnings

    chatter = _DropChatter()
    loggers = [logging.getLogger(name) for name in _LIGHTNING_LOGGERS]
    for logger in loggers:
        logger.addFilter(chatter)
    try:
        with warnings.catch_warnings():
            # CSVLogger's, when it finds the run's directory holding TensorBoard's or W&B's files (or config.yaml):
            # the directory is this run's own (claimed when it started), and all it removes is a metrics.csv.
            warnings.filterwarnings("ignore", message=r"Experiment logs directory .* exists and is not empty")
            # Before the first evaluation (a run stopped by SIGTERM or Ctrl-C that early): the best checkpoint has
            # nothing to rank yet, and the stop line says what happened.
            unranked = r"`ModelCheckpoint\(monitor='eval/episodic_return'\)` could not find the monitored key"
            warnings.filterwarnings("ignore", message=unranked)
            # A resumed run writes to a version_N of its own, as every run does: the start line says from where.
            warnings.filterwarnings("ignore", message=r"The dirpath has changed from")
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


def _stop_name(signum: int | None) -> str:
    """How a stop's report names the signal that asked for it (None: a rank that another rank's request stopped)."""
    import signal

    if signum is None:
        return "a stop request to another process of the run"
    return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name


def run_script(main: Any) -> None:
    """Run a training script's ``main``: a stop by SIGTERM or Ctrl-C exits with 143 / 130 (SLURM's requeue
    signal, SIGUSR1: 138, see ``CheckpointOnStop``) after saying where the resumable checkpoint is (a
    Ctrl-C during a fit stops at the same safe point as a SIGTERM, so it resumes exactly), a diverged run
    (non-finite loss or weights), a checkpoint that could not be written (disk full) or another failure
    of the file system (a read-only directory) with 1 and the error in one line, never with 0; a setting refused
    once the run started (``SettingsError``: a replay buffer too big for memory, a resume with another
    ``prioritized_alpha``) with 2 and the error in one line, as a bad value before it."""
    import signal
    import sys

    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from rl_lightning._checks import SettingsError
    from rl_lightning.checkpoints import CheckpointSaveError

    global _training_run
    _training_run = None
    requests = _StopRequests()
    previous = {signum: signal.signal(signum, requests.handle) for signum in (signal.SIGINT, signal.SIGTERM)}

    def stopped(code: int) -> None:
        _wait_for_ddp_children()
        print(f"stopped by {_stop_name(requests.first)}{_stop_resume_hint()}", file=sys.stderr)
        sys.exit(code)

    try:
        with quiet_lightning():
            main()
    except SIGTERMException:
        # 128 + the signal, as a shell reports a process it ended: 130 Ctrl-C, 143 SIGTERM, 138 SIGUSR1 (SLURM's
        # requeue signal, handed on by CheckpointOnStop); 143 on a rank stopped because another was asked to.
        stopped(128 + (requests.first or signal.SIGTERM))
    except KeyboardInterrupt:
        stopped(130)
    except SystemExit as exit_:
        # Lightning turns a KeyboardInterrupt inside fit into sys.exit(1) after its own shutdown.
        if exit_.code == 1 and requests.first == signal.SIGINT:
            stopped(130)
        raise
    except SettingsError as error:  # a setting refused once the run started, as a bad value before it
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    except (FloatingPointError, CheckpointSaveError, OSError) as error:  # diverged; a disk full or read-only
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)
    finally:
        # After a stop request the process is on its way out: a signal while it shuts down (a second
        # SIGTERM from a scheduler) is ignored, not the default handler that kills it (exit -15).
        for signum, handler in previous.items():
            signal.signal(signum, handler if requests.first is None else signal.SIG_IGN)
