"""Training on a Ray cluster with Ray Train: the same LightningModules and the same run as a DDP run (the start
line, the report, the TensorBoard logs and the checkpoints of ``lightning_logs/<run>/version_N``), on
``num_workers`` Ray workers through ``ray.train.torch.TorchTrainer`` and Ray's Lightning integration
(``RayDDPStrategy``, ``RayLightningEnvironment``, ``prepare_trainer``, ``RayTrainReportCallback``).

    from rl_lightning import PPOModule
    from rl_lightning.ray_train import ray_trainer

    # Connects to Ray first: the cluster at address= (or RAY_ADDRESS), else a new local Ray.
    trainer = ray_trainer(PPOModule, {"num_envs": 8}, trainer_kwargs={"max_steps": 64}, num_workers=2)
    result = trainer.fit()  # result.checkpoint: Ray's copy of the last epoch's checkpoint

Each worker builds the module and a Lightning Trainer of its own (:func:`train_loop_per_worker`); Ray runs them
as one DDP group. Resume: a run Ray restarts after a worker failed (``max_failures``), or started again with the same
``storage_path`` and ``name``, goes on from Ray's newest checkpoint (``ray.train.get_checkpoint()``); otherwise
from ``ckpt_path`` (a file, ``"last"`` or a Ray ``Checkpoint``). ``scripts/train_ray.py`` is the command line.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import lightning as L
import torch

try:
    import ray
    import ray.train
    from ray.train import Checkpoint, CheckpointConfig, FailureConfig, LoggingConfig, RunConfig, ScalingConfig
    from ray.train.lightning import RayDDPStrategy, RayLightningEnvironment, RayTrainReportCallback, prepare_trainer
    from ray.train.torch import TorchTrainer
    from ray.util.queue import Queue
except ImportError as error:  # pragma: no cover - the ray extra is in the dev extra
    raise ImportError(f"rl_lightning.ray_train needs Ray Train: pip install 'rl_lightning[ray]' ({error})") from error

from rl_lightning._checks import check_int
from rl_lightning.checkpoints import load_checkpoint_file, resolve_ckpt_path
from rl_lightning.envs.ray_vector import init_ray
from rl_lightning.scripting import RunLines, default_callbacks, quiet_lightning, report, run_logger, start_line

#: The file of a Ray checkpoint that holds the Lightning checkpoint (``RayTrainReportCallback``'s name).
CHECKPOINT_NAME = RayTrainReportCallback.CHECKPOINT_NAME

#: Seconds :func:`check_address` waits for a TCP connection to a Ray head before calling it unreachable.
ADDRESS_TIMEOUT_S = 3.0

#: Trainer flags Ray Train decides: the workers are ``num_workers`` (and ``use_gpu``), the strategy is Ray's DDP.
_RAY_TRAINER_FLAGS = {
    "strategy": "the strategy is Ray's DDP (RayDDPStrategy; its options: strategy_kwargs)",
    "plugins": "the cluster environment is Ray's (RayLightningEnvironment)",
    "devices": "the processes are Ray's workers: num_workers",
    "num_nodes": "the processes are Ray's workers: num_workers, placed on the cluster's nodes by Ray",
    "accelerator": "the workers use a GPU each with use_gpu=True, the CPU otherwise",
    "callbacks": "pass them as callbacks=",
    "default_root_dir": "pass it as root_dir=",
}


@dataclass
class RayRun:
    """What each Ray worker builds and fits (:func:`train_loop_per_worker`), pickled to the workers.

    Args:
        module_class: the LightningModule class (an ``rl_lightning`` algorithm).
        module_kwargs: its constructor's arguments.
        run_name: the log directory's name (``PPO-CartPole-v1``; None: no logger of the run's own).
        trainer_kwargs: the Lightning Trainer's other arguments (``max_steps``, ``log_every_n_steps`` ...).
        run_callbacks: the arguments of :func:`~rl_lightning.scripting.default_callbacks` (evaluation, best and
            last checkpoints, early stop, the start line and report); None: none of them.
        callbacks: more Lightning callbacks, after those.
        root_dir: logs and checkpoints go to ``root_dir/lightning_logs/<run>/version_<version>``.
        version: the log directory's version, claimed by the driver when ``fit`` starts.
        ckpt_path: resume from this Lightning checkpoint file or Ray checkpoint (None: a fresh start).
        use_gpu: one GPU per worker (the Trainer's ``accelerator="gpu"``), else the CPU.
        strategy_kwargs: the arguments of ``RayDDPStrategy`` (``find_unused_parameters=True`` ...).
        num_threads: torch CPU threads per worker.
        log_level: of Ray Train's own logs on the workers.
        lines: where worker 0 sends the run's start line and report for the driver to print (None: it prints them).
    """

    module_class: type[L.LightningModule]
    module_kwargs: dict[str, Any] = field(default_factory=dict)
    run_name: str | None = None
    trainer_kwargs: dict[str, Any] = field(default_factory=dict)
    run_callbacks: dict[str, Any] | None = None
    callbacks: list[L.Callback] = field(default_factory=list)
    root_dir: str = "."
    version: int | None = None
    ckpt_path: str | Checkpoint | None = None
    use_gpu: bool = False
    strategy_kwargs: dict[str, Any] = field(default_factory=dict)
    num_threads: int = 1
    log_level: str = "WARNING"
    lines: Queue | None = None


def train_loop_per_worker(config: dict[str, Any]) -> None:
    """Ray Train's function on each worker: build ``config["run"]``'s module and a Trainer on Ray's DDP strategy,
    and fit, resuming from Ray's newest checkpoint of this run if it has one, else from the run's ``ckpt_path``.

    Args:
        config: ``{"run": RayRun(...)}`` (``TorchTrainer``'s ``train_loop_config``).
    """
    run: RayRun = config["run"]
    torch.set_num_threads(run.num_threads)
    module = run.module_class(**run.module_kwargs)
    callbacks: list[L.Callback] = []
    if run.run_callbacks is not None:
        callbacks += default_callbacks(module.hparams.env_id, **run.run_callbacks)
        if run.lines is not None:
            callbacks = [_DriverRunLines(c.note, run.lines) if type(c) is RunLines else c for c in callbacks]
    # Last of the callbacks, so the others' epoch-end hooks have run when it saves (as ModelCheckpoint's do).
    callbacks += [*run.callbacks, RayTrainReportCallback()]
    logger: Any = False
    if run.run_name is not None and run.version is not None:
        from lightning.pytorch.loggers import TensorBoardLogger

        # The directory the driver claimed: every worker names it, rank 0 writes to it.
        root = Path(run.root_dir) / "lightning_logs"
        logger = TensorBoardLogger(root, name=run.run_name, version=run.version, default_hp_metric=False)
    with _builtin_print(), _ray_report_lines(run.log_level), quiet_lightning():
        trainer = L.Trainer(
            accelerator="gpu" if run.use_gpu else "cpu",
            devices="auto",
            strategy=RayDDPStrategy(**run.strategy_kwargs),
            plugins=[RayLightningEnvironment()],
            callbacks=callbacks,
            logger=logger,
            default_root_dir=run.root_dir,
            **run.trainer_kwargs,
        )
        trainer = prepare_trainer(trainer)
        with _checkpoint_file(ray.train.get_checkpoint() or run.ckpt_path) as ckpt_path:
            trainer.fit(module, ckpt_path=ckpt_path)


class _DriverRunLines(RunLines):
    """:class:`~rl_lightning.scripting.RunLines` whose lines worker 0 sends to the driver, which prints them as a
    DDP run's first process does (a worker's own output reaches the driver late, each line prefixed by Ray)."""

    def __init__(self, note: str | None, lines: Queue):
        super().__init__(note)
        self.lines = lines

    def on_train_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        line = start_line(trainer, pl_module, self.note)  # on every rank: nothing in it may wait for the others
        if trainer.is_global_zero:
            self.lines.put(line)

    def on_fit_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        if trainer.is_global_zero:
            self.lines.put(report(trainer, pl_module, time.perf_counter() - self._start))


@contextlib.contextmanager
def _builtin_print() -> Iterator[None]:
    """Within the block, ``print`` is Python's own: Ray Train's replacement on its workers prints every line
    twice (it logs the line to the console and, as a worker's ``sys.stdout`` is a wrapper, prints it too)."""
    try:
        from ray.train.v2._internal.logging.patch_print import _original_print
    except ImportError:  # another Ray version: its print as it is
        _original_print = builtins.print
    patched, builtins.print = builtins.print, _original_print
    try:
        yield
    finally:
        builtins.print = patched


@contextlib.contextmanager
def _ray_report_lines(log_level: str) -> Iterator[None]:
    """Within the block, Ray Train's line at each report of a worker ("Reporting training result 1: TrainingReport(
    ..., metrics={...})") is logged at ``log_level``, as Ray Train's other logs: it is logged under its file's path,
    not under ``ray.train``, which ``LoggingConfig(log_level=...)`` sets."""
    try:
        from ray.train.v2._internal.execution import context
    except ImportError:  # another Ray version
        yield
        return
    reports = logging.getLogger(context.__file__)
    level = reports.level
    reports.setLevel(log_level)
    try:
        yield
    finally:
        reports.setLevel(level)


@contextlib.contextmanager
def _checkpoint_file(checkpoint: str | Checkpoint | None) -> Iterator[str | None]:
    """The Lightning checkpoint file of ``checkpoint`` (a Ray checkpoint's ``checkpoint.ckpt``, on this machine
    while the block runs), a file path as it is, or None."""
    if not isinstance(checkpoint, Checkpoint):
        yield checkpoint
        return
    with checkpoint.as_directory() as directory:
        path = Path(directory) / CHECKPOINT_NAME
        if not path.is_file():
            raise ValueError(f"the Ray checkpoint {checkpoint.path} holds no {CHECKPOINT_NAME}: not one of this run's")
        yield str(path)


class _RunTrainer(TorchTrainer):
    """A ``TorchTrainer`` whose ``fit`` prints the run's start line and report here, on the driver, as worker 0
    sends them (with ``run_callbacks``)."""

    def fit(self) -> Any:
        run: RayRun = self.train_loop_config["run"]
        if run.run_name is not None:
            # Claimed here, once (a DDP launcher's first process does the same): every worker names this directory.
            run.version = run_logger(SimpleNamespace(run_name=run.run_name), run.root_dir).version
        if run.run_callbacks is None:
            return super().fit()
        run.lines = Queue(actor_options={"num_cpus": 0})  # no CPU the workers need
        printer = threading.Thread(target=_print_lines, args=(run.lines,), daemon=True)
        printer.start()
        try:
            return super().fit()
        finally:
            run.lines.put(None)
            printer.join(timeout=10)
            run.lines.shutdown()
            run.lines = None


def _print_lines(lines: Queue) -> None:
    """Print what ``lines`` holds until it holds None."""
    while (line := lines.get()) is not None:
        print(line, flush=True)


def ray_trainer(
    module_class: type[L.LightningModule],
    module_kwargs: dict[str, Any] | None = None,
    *,
    trainer_kwargs: dict[str, Any] | None = None,
    num_workers: int = 2,
    use_gpu: bool = False,
    resources_per_worker: dict[str, float] | None = None,
    run_callbacks: dict[str, Any] | None = None,
    callbacks: list[L.Callback] | None = None,
    root_dir: str | Path = ".",
    ckpt_path: str | Path | Checkpoint | None = None,
    storage_path: str | None = None,
    name: str | None = None,
    num_to_keep: int | None = 2,
    max_failures: int = 0,
    strategy_kwargs: dict[str, Any] | None = None,
    num_threads: int = 1,
    log_level: str = "WARNING",
    address: str | None = None,
    num_cpus: int | None = None,
) -> TorchTrainer:
    """A ``TorchTrainer`` that trains ``module_class(**module_kwargs)`` on ``num_workers`` Ray workers, as a DDP
    run of as many processes would: each worker's envs seeded apart, the gradients averaged, one log directory
    (``root_dir/lightning_logs/<run>/version_N``, claimed by ``fit``), its start line and report printed by ``fit``
    (with ``run_callbacks``). Connects to Ray first if not connected (:func:`connect`), and checks that the cluster
    has the CPUs (GPUs) the workers need: bad input fails here, within seconds, not in the workers.

    Args:
        module_class: the LightningModule class (``PPOModule`` ...).
        module_kwargs: its hyper-parameters; checked here, by building it once.
        trainer_kwargs: Lightning Trainer arguments (``max_steps``, ``precision`` ...), except those Ray decides
            (``strategy``, ``plugins``, ``devices``, ``num_nodes``, ``accelerator``).
        num_workers: Ray Train workers, one DDP process each (``ScalingConfig(num_workers=...)``).
        use_gpu: one GPU per worker (``ScalingConfig(use_gpu=...)``).
        resources_per_worker: Ray resources per worker (None: Ray's, one CPU, and one GPU with ``use_gpu``).
        run_callbacks: the arguments of :func:`~rl_lightning.scripting.default_callbacks` (a script's evaluation,
            best and last checkpoints, early stop, start line and report); None: none of them.
        callbacks: more Lightning callbacks (pickled to every worker).
        root_dir: where ``lightning_logs/`` goes (on a cluster: a shared file system, else worker 0's node has it).
        ckpt_path: resume from this checkpoint file, ``"last"`` (the newest ``last.ckpt`` of this algorithm and
            env under ``root_dir``) or a Ray ``Checkpoint`` (``result.checkpoint``).
        storage_path: where Ray keeps the run's checkpoints (``RunConfig(storage_path=...)``; None: Ray's,
            ``~/ray_results``; on a cluster: shared storage or a cloud URI).
        name: the Ray run's name (``RunConfig(name=...)``; None: Ray's); starting a run again with the same
            ``storage_path`` and ``name`` resumes from its newest Ray checkpoint.
        num_to_keep: Ray checkpoints kept (one is reported every epoch; None: all).
        max_failures: times Ray restarts the workers after one failed, each time from its newest checkpoint
            (``FailureConfig(max_failures=...)``; -1: without end).
        strategy_kwargs: ``RayDDPStrategy``'s arguments (``find_unused_parameters`` is True by default for a module
            with a ``policy_delay`` above 1, TD3's).
        num_threads: torch CPU threads per worker.
        log_level: of Ray Train's own logs (``LoggingConfig(log_level=...)``).
        address: the Ray cluster to connect to if not connected (:func:`connect`; None: ``RAY_ADDRESS``, else a
            new local Ray).
        num_cpus: the CPUs of a new local Ray (None: the machine's).

    Raises:
        ValueError: for ``num_workers`` < 1, a hyper-parameter the module refuses, a Trainer flag Ray decides, a
            checkpoint that does not fit, or a cluster with fewer CPUs (GPUs) than the workers need.
        ConnectionError: when ``address`` (``RAY_ADDRESS``) names a Ray head that does not answer.
    """
    check_int("num_workers", num_workers, 1)  # Ray's 0 would train in this process, not on the cluster
    check_int("num_threads", num_threads, 1)
    if num_cpus is not None:
        check_int("num_cpus", num_cpus, 1)
    logging_config = LoggingConfig(log_level=log_level)  # checked; upper case
    trainer_kwargs = dict(trainer_kwargs or {})
    for flag, reason in _RAY_TRAINER_FLAGS.items():
        if flag in trainer_kwargs:
            raise ValueError(f"trainer_kwargs[{flag!r}] is not used under Ray Train: {reason}")
    module_kwargs = dict(module_kwargs or {})
    module = module_class(**module_kwargs)  # a bad hyper-parameter fails here, not on every worker
    root_dir = str(Path(root_dir).resolve())  # Ray's workers run in a directory of their own
    if isinstance(ckpt_path, (str, Path)):
        resolved = resolve_ckpt_path(str(ckpt_path), root_dir, module.algorithm_name(), module.hparams.env_id)
        if resolved is not None:
            module.check_checkpoint(load_checkpoint_file(resolved))
        ckpt_path = None if resolved is None else str(Path(resolved).resolve())

    strategy_kwargs = dict(strategy_kwargs or {})
    if getattr(module.hparams, "policy_delay", 1) > 1:
        # TD3's actor has no gradient between its delayed updates, which DDP must be told of (a plain DDP run asks
        # for strategy="ddp_find_unused_parameters_true"; here there is one strategy, so it is told).
        strategy_kwargs.setdefault("find_unused_parameters", True)
    scaling_config = ScalingConfig(num_workers=num_workers, use_gpu=use_gpu, resources_per_worker=resources_per_worker)
    connect(address, num_cpus=num_cpus)
    check_cluster_resources(num_workers, use_gpu, resources_per_worker)
    run = RayRun(
        module_class=module_class,
        run_name=module.run_name if "logger" not in trainer_kwargs else None,
        module_kwargs=module_kwargs,
        trainer_kwargs={"enable_model_summary": False, "log_every_n_steps": 1, **trainer_kwargs},
        run_callbacks=run_callbacks,
        callbacks=list(callbacks or []),
        root_dir=root_dir,
        ckpt_path=ckpt_path,
        use_gpu=use_gpu,
        strategy_kwargs=strategy_kwargs,
        num_threads=num_threads,
        log_level=logging_config.log_level,
    )
    if storage_path is not None and "://" not in storage_path:
        storage_path = str(Path(storage_path).resolve())
    run_config = RunConfig(
        name=name,
        storage_path=storage_path,
        checkpoint_config=CheckpointConfig(num_to_keep=num_to_keep),
        failure_config=FailureConfig(max_failures=max_failures),
        # Ray Train's own lines at each report ("Checkpoint successfully created ...") only with log_level="INFO":
        # the run's start line and report say what ran and where its checkpoints went.
        logging_config=logging_config,
    )
    return _RunTrainer(
        train_loop_per_worker, train_loop_config={"run": run}, scaling_config=scaling_config, run_config=run_config
    )


def check_address(address: str, timeout: float = ADDRESS_TIMEOUT_S) -> None:
    """Raise unless a TCP connection to ``address`` (``HOST:PORT``, ``ray://HOST:PORT``) opens within ``timeout``
    seconds: ``ray.init`` would otherwise retry an unreachable head for a minute. ``auto`` and ``local``
    (Ray's own names) are left to Ray.

    Raises:
        ValueError: for an address that is not ``HOST:PORT``.
        ConnectionError: when nothing answers there.
        ValueError: when another service answers there (no gRPC handshake, as Ray's GCS and Ray Client give).
    """
    from rl_lightning.envs.ray_vector import check_grpc_handshake

    if address in ("auto", "local"):
        return
    host, _, port = address.split("://", 1)[-1].rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"address {address!r} is not HOST:PORT (e.g. 10.0.0.1:6379, the head's ray start port)")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except OSError as error:
        raise ConnectionError(
            f"no Ray cluster answers at address {address} within {timeout:g} s ({error}): start one there with "
            "`ray start --head --port PORT`, or check the host and port"
        ) from error
    check_grpc_handshake(address, host.strip("[]"), int(port), timeout)


def connect(address: str | None = None, *, num_cpus: int | None = None) -> dict[str, float]:
    """Connect this process to Ray, if it is not yet: to the cluster at ``address`` (else ``RAY_ADDRESS``), checked
    to answer first (:func:`check_address`), or else to a new local Ray of ``num_cpus`` CPUs (None: the machine's).
    Returns the cluster's resources (``ray.cluster_resources()``)."""
    if not ray.is_initialized():
        address = address or os.environ.get("RAY_ADDRESS") or None
        # Without a dashboard Ray's state API is absent, and Ray Train's placement group cleaner warns that it cannot
        # query it every second of a run that succeeds: this job's workers run quiet_ray_train_logs first.
        quiet = {"runtime_env": {"worker_process_setup_hook": f"{__name__}.quiet_ray_train_logs"}}
        if address is not None:
            check_address(address)
            init_ray(address=address, logging_level=logging.WARNING, **quiet)
        else:
            init_ray(num_cpus=num_cpus, include_dashboard=False, logging_level=logging.WARNING, **quiet)
    return ray.cluster_resources()


def quiet_ray_train_logs() -> None:
    """Run by each Ray worker of a job that :func:`connect` started: Ray Train's placement group cleaner logs only
    errors (without a dashboard it warns about the absent state API once a second of a run that succeeds), and its
    autoscaling client's timeouts, which Ray's own message calls "safe to ignore" (a busy CPU), are not printed as
    tracebacks."""
    internal = "ray.train.v2._internal.execution"
    logging.getLogger(f"{internal}.controller.placement_group_cleaner").setLevel(logging.ERROR)
    logging.getLogger(f"{internal}.scaling_policy.autoscaling_coordinator_client").setLevel(logging.CRITICAL)


def check_cluster_resources(
    num_workers: int, use_gpu: bool = False, resources_per_worker: dict[str, float] | None = None
) -> None:
    """Raise ``ValueError`` if the connected Ray cluster has fewer CPUs (or GPUs) in all than ``num_workers``
    workers need: Ray would wait for them for ever."""
    per_worker = dict(resources_per_worker or {})
    per_worker.setdefault("CPU", 1.0)
    if use_gpu:
        per_worker.setdefault("GPU", 1.0)
    available = ray.cluster_resources()
    for resource, amount in per_worker.items():
        needed, present = num_workers * amount, available.get(resource, 0.0)
        if needed > present:
            raise ValueError(
                f"num_workers={num_workers} Ray workers need {needed:g} {resource}s ({amount:g} each), but the Ray "
                f"cluster has {present:g}: ask for fewer workers, or add nodes (ray start --address=HEAD:6379)"
            )
