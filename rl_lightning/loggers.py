"""The loggers ``--logger`` chooses from (Lightning's, by its names: ``tensorboard``, ``csv``, ``wandb``, ``mlflow``):
the option and its spellings, each logger as a run makes it in its directory, and where the run's report says it
logged (:mod:`rl_lightning.scripting` claims the directory; :mod:`rl_lightning.cli` parses the option)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L

#: ``--logger``'s choices: Lightning's loggers by the names of their modules (``lightning.pytorch.loggers.wandb``),
#: in the order a run holds them (the first is Lightning's ``trainer.logger``).
LOGGER_NAMES = ("tensorboard", "csv", "wandb", "mlflow")
#: The package (and the extra of the same name: ``pip install 'rl_lightning[wandb]'``) each logger needs beyond ours.
_LOGGER_PACKAGES = {"wandb": "wandb", "mlflow": "mlflow"}


def logger_names(value: str | Sequence[str] | None) -> list[str]:
    """``--logger``'s value as the loggers' names, each once, in :data:`LOGGER_NAMES`' order: ``"wandb"``,
    ``"tensorboard,wandb"`` or ``["tensorboard", "wandb"]``; None: ``["tensorboard"]``.

    Raises:
        ValueError: for a name not among :data:`LOGGER_NAMES`, or none at all.
        ModuleNotFoundError: for a logger whose package is not installed, naming its extra.
        ValueError: for ``wandb`` online with no API key set up and no terminal to ask for one.
    """
    if value is None:
        return ["tensorboard"]
    items = [value] if isinstance(value, str) else list(value)
    names = [part.strip().lower() for item in items for part in str(item).split(",") if part.strip()]
    unknown = [name for name in names if name not in LOGGER_NAMES]
    if unknown or not names:
        given = ", ".join(repr(name) for name in unknown) if unknown else "no logger"
        raise ValueError(
            f"--logger: {given}; choose from tensorboard, wandb, mlflow, csv "
            "(several: --logger tensorboard wandb, or tensorboard,wandb)"
        )
    for name in names:
        package = _LOGGER_PACKAGES.get(name)
        if package is not None and not _installed(package):
            raise ModuleNotFoundError(
                f"--logger {name} needs the {package} package, which is not installed: "
                f"pip install 'rl_lightning[{name}]' (or pip install {package})"
            )
    if "wandb" in names:
        _check_wandb_can_log()
    return [name for name in LOGGER_NAMES if name in names]


def _check_wandb_can_log() -> None:
    """Raise ``ValueError`` (one line: how to log in or run offline) where W&B would stop the run at its first
    metric with a traceback: online mode, no API key set up on this machine, and no terminal to ask for one."""
    import os
    import sys

    if os.environ.get("WANDB_API_KEY") or not sys.stdin or sys.stdin.isatty():
        return  # a key, or W&B asks for one at the terminal
    if os.environ.get("WANDB_MODE", "").lower() in ("offline", "dryrun", "disabled"):
        return
    try:
        from wandb.sdk import wandb_setup
        from wandb.sdk.lib.wbauth import authenticate  # W&B's own lookup of a key (env, netrc, settings)

        settings = wandb_setup.singleton().settings  # what wandb.init reads: WANDB_MODE, `wandb offline`
        if settings.mode != "online":  # offline, disabled (WANDB_MODE, `wandb offline`)
            return
        auth = authenticate.authenticate_session(
            host=settings.base_url, source="rl_lightning", prompt=False, update_session=False
        )
    except Exception:  # another W&B version: wandb.init says what is missing itself
        return
    if auth is None:
        raise ValueError(
            "--logger wandb: no W&B API key is set up on this machine (and no terminal to ask for one): run "
            "`wandb login` (or set WANDB_API_KEY), or log offline with WANDB_MODE=offline and upload later with "
            "`wandb sync`"
        )


def _installed(package: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # ValueError: sys.modules holds None for it (blocked)
        return False


def make_logger(
    name: str, run_name: str, root: Path, version: int | None, run_dir: Path | None, launching: bool = True
) -> Any:
    """The logger ``name`` of a run in ``run_dir`` (``root/run_name/version_N``), as
    :func:`rl_lightning.scripting.run_loggers` describes; ``launching``: this is the run's rank-0 process."""
    import os

    if name == "tensorboard":
        from lightning.pytorch.loggers import TensorBoardLogger

        return TensorBoardLogger(root, name=run_name, version=version, default_hp_metric=False)
    if name == "csv":
        from lightning.pytorch.loggers import CSVLogger

        return CSVLogger(root, name=run_name, version=version)
    if name == "wandb":
        from lightning.pytorch.loggers import WandbLogger

        # The run starts (wandb.init) with the first metric, on rank 0 only.
        save_dir = os.environ.get("WANDB_DIR") or str(run_dir or root / run_name)
        return WandbLogger(name=f"{run_name}/version_{version}", save_dir=save_dir)
    from lightning.pytorch.loggers import MLFlowLogger
    from lightning.pytorch.loggers.logger import DummyLogger

    if not launching:
        # MLflow's client opens (and may create) its store when made: rank 0 alone logs, and alone opens it.
        return DummyLogger()
    tracking_uri = os.environ.get("MLFLOW_TRACKING_URI")
    store: dict[str, Any] = {"tracking_uri": tracking_uri}
    if not tracking_uri and run_dir is not None:
        store = {
            "tracking_uri": f"sqlite:///{(run_dir / 'mlflow.db').resolve()}",
            "artifact_location": str((run_dir / "mlartifacts").resolve()),
        }
    return MLFlowLogger(experiment_name=run_name, run_name=f"version_{version}", **store)


def logger_lines(trainer: L.Trainer) -> list[str]:
    """Where each logger of the run keeps what it logged: "TensorBoard logs:" only with a TensorBoard logger."""
    from lightning.pytorch.loggers import CSVLogger, MLFlowLogger, TensorBoardLogger, WandbLogger

    lines = []
    for logger in trainer.loggers:
        try:
            if isinstance(logger, TensorBoardLogger):
                log_dir = logger.log_dir
                lines.append(f"  TensorBoard logs: {log_dir}  (tensorboard --logdir {Path(log_dir).parent.parent})")
            elif isinstance(logger, CSVLogger):
                lines.append(f"  CSV metrics:      {Path(logger.log_dir) / 'metrics.csv'}")
            elif isinstance(logger, WandbLogger):
                run = logger.experiment
                run_dir = Path(run.dir).parent  # run.dir: the run's files/
                where = f"{run_dir}  (offline: wandb sync {run_dir})" if run.offline else f"{run.url}  ({run_dir})"
                lines.append(f"  W&B run:          {where}")
            elif isinstance(logger, MLFlowLogger):
                uri = logger.experiment.tracking_uri
                lines.append(f"  MLflow run:       {logger.run_id} in {uri}  (mlflow ui --backend-store-uri {uri})")
        except Exception as error:  # the report never fails for a logger that cannot say
            lines.append(f"  {type(logger).__name__}: {error!r}")
    return lines


def add_logger_argument(container: Any, default: str | None, note: str = "") -> None:
    """``--logger``: the run's loggers, as Lightning names them (:data:`LOGGER_NAMES`),
    checked once by :func:`logger_names` when the run is set up."""
    container.add_argument(
        "--logger",
        type=str | list[str] | None,
        default=default,
        help=f"where the run logs: {', '.join(LOGGER_NAMES)} (null: tensorboard); several: --logger "
        "tensorboard wandb (or tensorboard,wandb); all in lightning_logs/<run>/version_N, W&B in "
        "$WANDB_DIR and MLflow in $MLFLOW_TRACKING_URI when set" + (f" ({note})" if note else ""),
    )


def logger_spellings(argv: Sequence[str]) -> list[str]:
    """``argv`` with ``--logger``'s spellings as jsonargparse reads a list: ``--logger tensorboard wandb``,
    ``--logger tensorboard,wandb`` and ``--logger=tensorboard,wandb`` -> ``--logger [tensorboard,wandb]``
    (a single name stays as it is; so do ``[...]`` and ``null``)."""
    result: list[str] = []
    index = 0
    while index < len(argv):
        token = argv[index]
        index += 1
        if token.startswith("--logger="):
            token, value = token.split("=", 1)
            values = [value]
        elif token == "--logger":
            values = []
            while index < len(argv) and not argv[index].startswith("-"):
                values.append(argv[index])
                index += 1
        else:
            result.append(token)
            continue
        names = [part for value in values for part in value.split(",") if part]
        if len(values) == 1 and (values[0].startswith("[") or len(names) <= 1):
            result += [token, values[0]]
        else:
            result += [token, f"[{','.join(names)}]"] if values else [token]
    return result
