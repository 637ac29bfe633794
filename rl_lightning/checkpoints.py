"""Checkpoint files: written atomically, read with clear errors, and the one to resume from found.

Lightning's default writer stages a checkpoint in the system's temporary directory and moves it
into place: when the log directory is on another filesystem a full disk truncates the previous
good ``last.ckpt``, and a read-only directory can fail without a word. ``AtomicCheckpointIO``
writes next to the target, fsyncs, and renames over it, so the previous file stays whole until the
new one is complete, and any failure is raised. ``RLModule`` installs it when a run starts (unless
the Trainer was given another ``CheckpointIO``).

What the command lines' ``--ckpt_path`` takes from the checkpoint found here, and what it refuses, is
:mod:`rl_lightning._command_line_resume`.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import time
import zipfile
from pathlib import Path
from typing import IO, Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_warn

from rl_lightning.deprecations import same_value

#: The key of the rl_lightning payload in a checkpoint (also ``RLModule``'s).
CHECKPOINT_KEY = "rl_lightning"


class CheckpointSaveError(RuntimeError):
    """A checkpoint could not be written; the previous file at that path is untouched."""


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` that writes a temporary file in the target's directory, fsyncs it and
    renames it over the target: a checkpoint is either the previous complete one or the new
    complete one, never a truncated mix, and a failed save raises :class:`CheckpointSaveError`."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO.save_checkpoint takes no storage_options")
        path = Path(path)
        temporary: str | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # Lightning's SLURM resume reads the digits of every name holding "hpc_ckpt_" as a version: a
            # temporary file left by a kill mid-write must not hold it.
            prefix = "." + path.name.replace("hpc_ckpt_", "hpc-ckpt-") + "."
            handle, temporary = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=path.parent)
            with os.fdopen(handle, "wb") as file:
                torch.save(checkpoint, file)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, path)
            temporary = None
            _fsync_directory(path.parent)
        except (OSError, RuntimeError) as error:
            if isinstance(error, RuntimeError) and not _is_write_failure(error):
                raise
            previous = (
                f"the previous checkpoint {path} is intact"
                if path.is_file()
                else "there was no previous checkpoint there"
            )
            if _disk_full(error, path.parent):
                raise CheckpointSaveError(
                    f"disk full while writing {path} (No space left on device); {previous}"
                ) from error
            reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error).splitlines()[0]
            raise CheckpointSaveError(
                f"could not save the checkpoint {path}: {reason}; {previous} (kept whole)"
            ) from error
        finally:
            if temporary is not None:
                Path(temporary).unlink(missing_ok=True)

    def load_checkpoint(self, path: Any, map_location: Any = None, weights_only: bool | None = None) -> dict[str, Any]:
        """A resume's checkpoint (``Trainer.fit(ckpt_path=...)``), always read with ``weights_only=True``
        (Lightning passes None, which older torch reads as False: a pickle in the file would run), with
        :func:`load_checkpoint_file`'s errors. ``weights_only=False`` is refused."""
        if weights_only is False:
            raise ValueError(
                "rl_lightning loads checkpoints with weights_only=True only (no pickled code runs); "
                "its checkpoints hold tensors and plain values, so weights_only=False is never needed"
            )
        return load_checkpoint_file(path, map_location)


def _is_write_failure(error: RuntimeError) -> bool:
    """torch's zip writer reports a failed write as a ``RuntimeError`` from C++ (``[enforce fail at
    inline_container.cc] . unexpected pos``, ``PytorchStreamWriter failed writing file``)."""
    message = str(error)
    return "inline_container" in message or "PytorchStreamWriter" in message or "unexpected pos" in message


def _disk_full(error: BaseException, directory: Path) -> bool:
    """Whether ``error`` came from a full disk: ENOSPC / EDQUOT, or a zip-writer failure with (almost)
    no space left in ``directory``'s filesystem."""
    import errno

    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    try:
        stats = os.statvfs(directory)
    except (OSError, AttributeError):
        return False
    return stats.f_bavail * stats.f_frsize < 1 << 20  # under 1 MiB left


def _fsync_directory(directory: Path) -> None:
    """Persist the rename itself (POSIX; a no-op where directories cannot be opened)."""
    try:
        handle = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(handle)
    except OSError:
        pass
    finally:
        os.close(handle)


def load_checkpoint_file(path: str | Path | IO[bytes], map_location: Any = None) -> dict[str, Any]:
    """Load a checkpoint file (on the CPU, or ``map_location``), or raise ``ValueError`` saying why it is
    not one (missing, empty, truncated, not a torch file, or not a Lightning checkpoint of an rl_lightning
    module). ``path`` may also be an open binary file.

    The file is read with ``torch.load(weights_only=True)``: tensors, numbers, strings and plain
    containers only, so no code stored in a file runs (a pickle can call any function when it is
    loaded with ``weights_only=False``). rl_lightning's checkpoints hold nothing else. (What the
    hyper-parameters name is checked separately: ``rl_lightning.trust``.)"""
    map_location = "cpu" if map_location is None else map_location
    if not isinstance(path, (str, Path)):  # an open file
        name = repr(getattr(path, "name", "the checkpoint"))
        try:
            checkpoint = torch.load(path, map_location=map_location, weights_only=True)
        except pickle.UnpicklingError as error:
            raise ValueError(_not_plain(name, error)) from error
        except (EOFError, zipfile.BadZipFile, RuntimeError, UnicodeDecodeError, ValueError) as error:
            raise ValueError(_unreadable(name, error)) from error
        return _checked_checkpoint(checkpoint, name)
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"checkpoint {str(path)!r} does not exist or is not a file")
    if path.stat().st_size == 0:
        raise ValueError(f"checkpoint {str(path)!r} is empty (0 bytes): a save was interrupted or the disk was full")
    if not zipfile.is_zipfile(path):
        with open(path, "rb") as file:
            start = file.read(16)
        raise ValueError(
            f"{str(path)!r} is not a complete torch checkpoint (torch.save writes a zip archive; this file is "
            f"truncated, or not a checkpoint at all: it starts with {start!r})"
        )
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True, mmap=True)
    except pickle.UnpicklingError as error:
        raise ValueError(_not_plain(repr(str(path)), error)) from error
    except (EOFError, zipfile.BadZipFile, RuntimeError, UnicodeDecodeError, ValueError) as error:
        raise ValueError(_unreadable(repr(str(path)), error)) from error
    return _checked_checkpoint(checkpoint, repr(str(path)))


def _not_plain(name: str, error: BaseException) -> str:
    """What a file that ``weights_only=True`` refused holds."""
    lines = [line for line in str(error).splitlines() if "GLOBAL" in line or "global" in line]
    return (
        f"{name} holds Python objects other than tensors and plain containers, which rl_lightning "
        f"does not unpickle (it loads with weights_only=True, so no code in a file runs)"
        + (f": {lines[0].strip()}" if lines else "")
    )


def _unreadable(name: str, error: BaseException) -> str:
    first_line = str(error).splitlines()[0] if str(error) else ""
    return f"{name} is not a readable torch checkpoint, truncated or corrupted ({type(error).__name__}: {first_line})"


def _checked_checkpoint(checkpoint: Any, name: str) -> dict[str, Any]:
    """``checkpoint`` if it is a Lightning checkpoint of an rl_lightning module (``name``: the file, quoted)."""
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise ValueError(f"{name} is not a Lightning checkpoint (no state_dict)")
    if CHECKPOINT_KEY not in checkpoint:
        raise ValueError(f"{name} is a Lightning checkpoint, but not of an rl_lightning module")
    return checkpoint


def checkpoint_algorithm(path: str | Path) -> str | None:
    """The module class (``"VPGModule"``, ...) that saved the checkpoint at ``path`` (None if unknown)."""
    return _checkpoint_identity(path)[0]


def _checkpoint_identity(path: str | Path) -> tuple[str | None, str | None]:
    """The module class and the env id of the checkpoint at ``path`` (None where unknown)."""
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # an unreadable file is no candidate
        return None, None
    payload = checkpoint.get(CHECKPOINT_KEY) if isinstance(checkpoint, dict) else None
    if not isinstance(payload, dict):
        return None, None
    return payload.get("algorithm"), payload.get("env_id")


#: Where runs keep their last checkpoints: ``lightning_logs/<run name>/version_N`` (the scripts and the
#: CLI) or ``lightning_logs/version_N`` (a Trainer's default logger).
_LAST_CHECKPOINTS = (
    "lightning_logs/*/version_*/checkpoints/last*.ckpt",
    "lightning_logs/version_*/checkpoints/last*.ckpt",
)


def _last_checkpoints(root_dir: str | Path) -> list[Path]:
    """The last checkpoints under ``<root_dir>/lightning_logs``, newest first."""
    root = Path(root_dir)
    found = {path for pattern in _LAST_CHECKPOINTS for path in root.glob(pattern)}
    return sorted(found, key=lambda path: path.stat().st_mtime, reverse=True)


def _is_of(path: Path, algorithm: str | None, env_id: str | None) -> bool:
    if algorithm is None and env_id is None:
        return True
    saved_by, saved_env = _checkpoint_identity(path)
    return (algorithm is None or saved_by == algorithm) and (env_id is None or saved_env == env_id)


def newest_last_checkpoint(root_dir: str | Path, algorithm: str | None = None, env_id: str | None = None) -> str | None:
    """The file ``ckpt_path="last"`` resumes from (see :func:`resolve_ckpt_path`), without a word: the newest
    ``last*.ckpt`` under ``<root_dir>/lightning_logs`` saved by ``algorithm`` for ``env_id`` (None: any), or None."""
    return next((str(path) for path in _last_checkpoints(root_dir) if _is_of(path, algorithm, env_id)), None)


def resolve_ckpt_path(
    ckpt_path: str | None, root_dir: str | Path, algorithm: str | None = None, env_id: str | None = None
) -> str | None:
    """The checkpoint a run resumes from.

    ``"last"``: the newest ``last*.ckpt`` under ``<root_dir>/lightning_logs`` (``<run>/version_*/checkpoints``
    or ``version_*/checkpoints``) saved by ``algorithm`` (a module class name; None: any) for ``env_id``
    (None: any) -- a new run writes to a new ``version_N``, where Lightning's own ``"last"`` lookup would
    find nothing; None if there is none yet (a fresh start, as Lightning does). A path is checked
    (:func:`load_checkpoint_file`) and returned.

    Raises:
        ValueError: for a path that is not a checkpoint, or (``"last"``) when the only last
            checkpoints there were saved by other algorithms or for other envs.
    """
    if ckpt_path is None:
        return None
    if ckpt_path != "last":
        load_checkpoint_file(ckpt_path)
        return str(ckpt_path)
    candidates = _last_checkpoints(root_dir)
    if not candidates:
        rank_zero_warn(f'ckpt_path="last": no last checkpoint under {root_dir}/lightning_logs yet, starting fresh')
        return None
    newest = newest_last_checkpoint(root_dir, algorithm, env_id)
    if newest is None:
        wanted = " ".join(part for part in (algorithm, f"on {env_id}" if env_id else None) if part)
        others = ", ".join(
            f"{path} ({' on '.join(part for part in _checkpoint_identity(path) if part) or 'unreadable'})"
            for path in reversed(candidates)
        )
        raise ValueError(
            f'ckpt_path="last": no last checkpoint of {wanted} under {root_dir}/lightning_logs, only of other '
            f"runs: {others}; pass a path, or another --default_root_dir"
        )
    return newest


def resume_flag(path: str | Path | None, root_dir: str | Path, algorithm: str, env_id: str) -> str | None:
    """How to resume from the checkpoint ``path`` that a run saved: ``"--ckpt_path last"`` where that picks
    exactly this file (:func:`newest_last_checkpoint` under ``root_dir``), else ``"--ckpt_path <path>"``;
    None where the file does not exist (nothing to resume from)."""
    if path is None or not Path(path).is_file():
        return None
    newest = newest_last_checkpoint(root_dir, algorithm, env_id)
    if newest is not None and Path(newest).resolve() == Path(path).resolve():
        return "--ckpt_path last"
    return f"--ckpt_path {path}"


#: The hyper-parameters a resume with ``--ckpt_path last`` may change: how the update runs, not what it computes.
MAY_CHANGE_ON_RESUME = frozenset({"compile"})


def checkpoint_settings(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's hyper-parameters, without Lightning's and rl_lightning's own keys (``_class_path``)."""
    hparams = checkpoint.get("hyper_parameters") or {}
    return {name: value for name, value in hparams.items() if not name.startswith("_")}


def plain_value(value: Any) -> Any:
    """A parsed setting as a checkpoint holds it (a jsonargparse ``Namespace``, e.g. ``--network``'s, as a dict)."""
    return value.as_dict() if callable(getattr(value, "as_dict", None)) else value


def differing_settings(given: dict[str, Any], saved: dict[str, Any], prefix: str = "") -> list[str]:
    """``["--seed 2 (checkpoint: 1)", ...]``: each setting ``given`` for a resume that differs from the checkpoint's
    (``saved``), but those that may change (:data:`MAY_CHANGE_ON_RESUME`); ``prefix``: how the flags are spelled."""
    return [
        f"{prefix}{name} {plain_value(given[name])!r} (checkpoint: {saved[name]!r})"
        for name in sorted(given)
        if name in saved and name not in MAY_CHANGE_ON_RESUME and not same_value(plain_value(given[name]), saved[name])
    ]


def describe_checkpoint(path: str | Path, checkpoint: dict[str, Any]) -> str:
    """``PPOModule on CartPole-v1 at env step 480, saved 2025-01-31 14:02``: what a checkpoint file holds."""
    payload = checkpoint.get(CHECKPOINT_KEY) or {}
    saved = time.strftime("%Y-%m-%d %H:%M", time.localtime(os.path.getmtime(path)))
    return (
        f"{payload.get('algorithm', 'an unknown module')} on {payload.get('env_id', 'an unknown env')} at env step "
        f"{int(payload.get('env_steps', 0)):,}, saved {saved}"
    )


class StepInNames(Callback):
    """``{step}`` in every ``ModelCheckpoint``'s file name is the run's update count (``global_step``, the file's
    own) at that save. The modules publish ``"step"`` (the charts' x-axis: the env steps of their last log) into
    ``trainer.callback_metrics``, where ``ModelCheckpoint`` would read it instead: a name of the last log's env
    steps, not the file's, the same for every save until the next log, each such save overwriting the one before.
    (The env steps of a save are not unique: an on-policy rollout's updates, or ``gradient_steps`` updates, share
    them.) ``RLModule.configure_callbacks`` adds it; the checkpoint callbacks run after it (Lightning runs them
    last)."""

    def _name_by_update(self, trainer: Any) -> None:
        trainer.callback_metrics["step"] = torch.tensor(trainer.global_step)

    def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
        self._name_by_update(trainer)

    def on_train_epoch_end(self, trainer: Any, *args: Any) -> None:
        self._name_by_update(trainer)

    def on_validation_end(self, trainer: Any, *args: Any) -> None:
        self._name_by_update(trainer)


class EnvStepCheckpoint(ModelCheckpoint):
    """A ``ModelCheckpoint`` whose ``filename`` template also knows ``{env_steps}``: the module's env steps
    when it saves, the x-axis of the charts (``filename="best-{env_steps}"`` -> ``best-env_steps=51200.ckpt``).
    Lightning's ``{step}`` counts updates (``global_step``: :class:`StepInNames`), ``{epoch}`` epochs, and neither
    goes on from a resume as the charts do. Everything else is Lightning's."""

    _module: Any = None

    @property
    def state_key(self) -> str:
        # Lightning's key starts with the class name: ModelCheckpoint's, so the state saved by either (a run from
        # before this class, or a config's ModelCheckpoint) restores into the other on a resume, without a warning.
        return "ModelCheckpoint" + super().state_key.removeprefix(type(self).__qualname__)

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        self._module = pl_module

    def format_checkpoint_name(
        self, metrics: dict[str, Any], filename: str | None = None, ver: int | None = None, prefix: str | None = None
    ) -> str:
        env_steps = getattr(self._module, "env_steps", None)
        if env_steps is not None:
            metrics = {**metrics, "env_steps": torch.tensor(int(env_steps))}
        return super().format_checkpoint_name(metrics, filename, ver, prefix)


# -- what RLModule saves and checks ------------------------------------------------------------------


def gather_over_ranks(value: Any, world_size: int) -> list[Any]:
    """Every rank's ``value``, indexed by rank (``[value]`` in one process). Lightning builds a checkpoint
    on every rank and writes rank 0's, so per-rank states (sources, generators) are all-gathered: every
    rank must call this."""
    if world_size > 1 and torch.distributed.is_available() and torch.distributed.is_initialized():
        values: list[Any] = [None] * world_size
        torch.distributed.all_gather_object(values, value)
        return values
    return [value]


def restore_source(source: Any, states: list[Any], rank: int, world_size: int, env_id: str) -> None:
    """Load rank ``rank``'s state of a checkpoint's ``states`` (one per rank) into ``source``. A checkpoint of another
    number of processes (``num_nodes`` x ``devices``), a rank without a state, or envs that cannot save their state:
    that data starts fresh, with a warning that says the resume is not exact."""
    if len(states) != world_size:
        rank_zero_warn(
            f"not an exact resume: the checkpoint was saved by a run of {len(states)} process(es) (num_nodes x "
            f"devices), this run has {world_size}; weights, optimizer and env-step counter are restored, but each "
            f"process's data source (envs, replay buffer) starts fresh. Resume on {len(states)} process(es) in all "
            "to continue exactly"
        )
        return
    if states[rank] is None:
        rank_zero_warn(
            f"not an exact resume: the checkpoint holds no data-source state of process {rank}; its envs (and replay "
            "buffer) start fresh, while weights, optimizer and env-step counter are restored"
        )
        return
    source.load_state_dict(states[rank])
    if not source.envs.restorable:
        rank_zero_warn(
            f"{env_id} cannot save its state: the envs restart fresh, while weights, optimizer, replay buffer "
            "and counters are restored"
        )


def scale_restored_lr(checkpoint: dict[str, Any], lr: Any) -> None:
    """Scale the checkpoint's optimizer groups (``lr`` and the LR decay's ``initial_lr``) by ``lr`` / the
    checkpoint's ``lr``: a resume with another learning rate uses it (Lightning would restore the old one)."""
    saved_lr = (checkpoint.get("hyper_parameters") or {}).get("lr")
    if not (isinstance(saved_lr, (int, float)) and isinstance(lr, (int, float)) and saved_lr > 0 and saved_lr != lr):
        return
    for optimizer_state in checkpoint.get("optimizer_states", []):
        for group in optimizer_state.get("param_groups", []):
            for key in ("lr", "initial_lr"):
                if key in group:
                    group[key] = group[key] * lr / saved_lr


def check_checkpoint_fits(checkpoint: dict[str, Any], algorithm: str, hparams: Any, state: dict[str, Any]) -> None:
    """Raise ``ValueError`` if ``checkpoint`` was saved by another ``algorithm`` (a module class name), for
    another env, with other network shapes (``state``: the module's ``state_dict()``) or, for a resume,
    with another ``num_envs``."""
    payload = checkpoint.get(CHECKPOINT_KEY)
    if not isinstance(payload, dict) or "state_dict" not in checkpoint:
        raise ValueError(f"not a checkpoint of an rl_lightning module (no {CHECKPOINT_KEY!r} payload or state_dict)")
    saved = payload.get("algorithm")
    if saved is not None and saved != algorithm:
        raise ValueError(
            f"the checkpoint was saved by {saved} but is loaded into {algorithm}: "
            f"load it with {saved}.load_from_checkpoint(...) (or resume it with {saved})"
        )
    saved_hparams = checkpoint.get("hyper_parameters", {})
    # The payload's env id: load_from_checkpoint(path, env_id=...) overwrites the hyper-parameters'.
    env_id = payload.get("env_id", saved_hparams.get("env_id"))
    if env_id is not None and env_id != hparams.env_id:
        raise ValueError(
            f"the checkpoint was trained on env_id {env_id!r} but this {algorithm} is built for {hparams.env_id!r}"
        )
    # the payload's count: load_from_checkpoint(path, num_seeds=...) overwrites the hyper-parameters'
    saved_seeds, own_seeds = payload.get("num_seeds", saved_hparams.get("num_seeds", 1)), hparams.get("num_seeds", 1)
    if saved_seeds != own_seeds:
        raise ValueError(
            f"the checkpoint holds num_seeds={saved_seeds} agents, this {algorithm} has num_seeds={own_seeds}: load it "
            f"with num_seeds={saved_seeds} (load_from_checkpoint takes it from the checkpoint; then seed_module(i) or "
            "one_seed_module(i) is one seed's agent)"
        )
    saved_state = checkpoint.get("state_dict", {})
    built = f"it was built with {_network_settings(saved_hparams)} for {env_id!r}, this module with " + (
        f"{_network_settings(hparams)} for {hparams.env_id!r}"
    )
    for name, tensor in saved_state.items():
        if name in state and tuple(state[name].shape) != tuple(tensor.shape):
            raise ValueError(
                f"the checkpoint's {name} has shape {tuple(tensor.shape)} but this module's is "
                f"{tuple(state[name].shape)}: {built}"
            )
    only_saved, only_own = sorted(set(saved_state) - set(state)), sorted(set(state) - set(saved_state))
    if only_saved or only_own:
        raise ValueError(
            f"the checkpoint's network is not this module's: it was built with {_network_settings(saved_hparams)}, "
            f"this module with {_network_settings(hparams)}; only in the checkpoint: "
            f"{_shapes(only_saved, saved_state)}; only in this module: {_shapes(only_own, state)}"
        )
    saved_envs, own_envs = saved_hparams.get("num_envs"), hparams.get("num_envs")
    if payload.get("sources") and saved_envs is not None and saved_envs != own_envs:
        raise ValueError(
            f"the checkpoint ran num_envs={saved_envs} envs per process, this {algorithm} has num_envs={own_envs}: "
            f"a resumed run continues the checkpoint's envs, so build it with num_envs={saved_envs} "
            f"(--num_envs {saved_envs}, --model.init_args.num_envs {saved_envs})"
        )


def _network_settings(hparams: Any) -> str:
    """``recurrent='lstm', hidden_sizes=(64, 64)``: the hyper-parameters that shape a module's weights."""
    names = ("recurrent", "core_size", "hidden_sizes", "shared_encoder", "normalize_obs", "num_critics")
    return ", ".join(f"{name}={hparams[name]!r}" for name in names if name in hparams) or "its defaults"


def _shapes(names: list[str], state: dict[str, Any]) -> str:
    listed = ", ".join(f"{name} {tuple(state[name].shape)}" for name in names[:3])
    return listed + (f" and {len(names) - 3} more" if len(names) > 3 else "") if names else "none"
