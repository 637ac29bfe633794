"""Data is not code: what a checkpoint (or any file read back) may name, checked before anything is
imported, instantiated or called.

A checkpoint's hyper-parameters are data that the modules and the command line would otherwise turn
into objects: wrapper class paths in ``env_kwargs["wrappers"]``, ``{"class_path": ..., "init_args":
...}`` specs that jsonargparse instantiates, the module's ``_class_path`` and Lightning's
``_instantiator``. Loaded with ``weights_only=True`` such a file still runs no pickle, but it could
still name ``os.system``. So class paths from a file resolve only against an allow-list:

- rl_lightning's own algorithm classes (``_class_path``);
- gymnasium's wrappers (``gymnasium.wrappers.<Name>``, those that take no code and write no files);
- the class paths the user allows (:func:`allow_class_paths`), or everything when the user says the
  file is trusted (``load_from_checkpoint(..., trust_remote_code=True)``, ``--trust_checkpoint``).

The check reads strings only; a refused path is an :class:`UntrustedCheckpointError` (a
``ValueError``) naming the key and how to allow it, raised before any import.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from collections.abc import Iterator, Mapping
from typing import Any

#: gymnasium's wrappers a file may name: ``gymnasium.wrappers.__all__`` less those that take code
#: (``func=``), write files or open windows.
_REFUSED_GYMNASIUM_WRAPPERS = frozenset(
    {"vector", "TransformObservation", "TransformAction", "TransformReward", "RecordVideo", "HumanRendering"}
)
#: Lightning's own instantiator (its CLI saves it into checkpoints); rl_lightning never calls it.
_LIGHTNING_INSTANTIATORS = frozenset(
    {"lightning.pytorch.cli.instantiate_module", "pytorch_lightning.cli.instantiate_module"}
)
_ALLOWED_BY_USER: set[str] = set()
#: How a user allows what a file names, for the messages.
TRUST_FILE = "if you trust this file, load it with trust_remote_code=True (from the command line: --trust_checkpoint)"
HOW_TO_TRUST = TRUST_FILE + ", or allow just this class with rl_lightning.trust.allow_class_paths({path!r})"

_untrusted: contextvars.ContextVar[str | None] = contextvars.ContextVar("rl_lightning_untrusted", default=None)


class UntrustedCheckpointError(ValueError):
    """A file names a class or function outside the allow-list; nothing was imported or called."""


def allow_class_paths(*paths: str) -> None:
    """Allow these class paths (``"my_package.wrappers.MyWrapper"``) in checkpoints and other files
    read back, for this process: your own wrappers or module subclasses."""
    for path in paths:
        if not isinstance(path, str) or "." not in path:
            raise TypeError(f"allow_class_paths takes class paths such as 'my_package.MyWrapper', got {path!r}")
    _ALLOWED_BY_USER.update(paths)


def algorithm_class_paths() -> dict[str, type]:
    """rl_lightning's algorithm classes by class path (``"rl_lightning.algos.ppo.PPOModule"``)."""
    from rl_lightning.algos import ALGORITHMS

    return {f"{cls.__module__}.{cls.__qualname__}": cls for cls in ALGORITHMS}


def is_allowed_wrapper_path(path: str) -> bool:
    """Whether a file may name the wrapper at ``path`` (read as a string: nothing is imported)."""
    if path in _ALLOWED_BY_USER:
        return True
    module, _, name = path.rpartition(".")
    if module != "gymnasium.wrappers" or name in _REFUSED_GYMNASIUM_WRAPPERS:
        return False
    import gymnasium.wrappers

    return name in gymnasium.wrappers.__all__


def untrusted_source() -> str | None:
    """What untrusted file is being loaded in this context (None: the caller's own code and flags)."""
    return _untrusted.get()


@contextlib.contextmanager
def untrusted(where: str) -> Iterator[None]:
    """Within this block, wrapper class paths resolve only against the allow-list (``where``: the file)."""
    token = _untrusted.set(where)
    try:
        yield
    finally:
        _untrusted.reset(token)


def refused_wrapper(path: str, key: str, where: str) -> UntrustedCheckpointError:
    return UntrustedCheckpointError(
        f"{where}: {key} names {path!r}, which a file may not name (allowed: gymnasium's wrappers, "
        f"gymnasium.wrappers.<Name>, and the class paths you allow); nothing was imported; "
        + HOW_TO_TRUST.format(path=path)
    )


def check_file_hyperparameters(hparams: Mapping[str, Any], where: str) -> None:
    """Raise :class:`UntrustedCheckpointError` if the hyper-parameters read from ``where`` (a checkpoint,
    a Hub folder) name a class or function outside the allow-list: a ``_class_path`` that is not one of
    rl_lightning's algorithms, an ``_instantiator`` that is not Lightning's own, an ``env_id`` in gymnasium's
    ``"module:id"`` form (``gymnasium.make`` would import the module), a wrapper of
    ``env_kwargs["wrappers"]`` that is not allowed, or a ``{"class_path": ...}`` spec anywhere else. (A
    ``"module:id"`` whose module the user imported already, or allowed, passes: importing it again runs nothing.)
    Reads strings only: nothing is imported."""
    if not isinstance(hparams, Mapping):
        raise UntrustedCheckpointError(f"{where}: the hyper-parameters must be a dict, got {type(hparams).__name__}")
    class_path = hparams.get("_class_path")
    if class_path is not None and class_path not in algorithm_class_paths() and class_path not in _ALLOWED_BY_USER:
        raise UntrustedCheckpointError(
            f"{where}: hyper_parameters['_class_path'] is {class_path!r}, which is not one of rl_lightning's "
            f"algorithms ({', '.join(sorted(algorithm_class_paths()))}); nothing was imported; "
            + HOW_TO_TRUST.format(path=class_path)
        )
    instantiator = hparams.get("_instantiator")
    if instantiator is not None and instantiator not in _LIGHTNING_INSTANTIATORS:
        raise UntrustedCheckpointError(
            f"{where}: hyper_parameters['_instantiator'] is {instantiator!r}, not Lightning's own "
            f"(lightning.pytorch.cli.instantiate_module): the file was edited; nothing was imported; {TRUST_FILE} "
            "(rl_lightning never calls a checkpoint's instantiator)"
        )
    env_id = hparams.get("env_id")
    if isinstance(env_id, str) and ":" in env_id:
        module = env_id.split(":", 1)[0]
        if module not in sys.modules and module not in _ALLOWED_BY_USER:  # imported by the user: allowed
            raise UntrustedCheckpointError(
                f"{where}: hyper_parameters['env_id'] is {env_id!r}, gymnasium's 'module:id' form, which imports "
                f"{module!r}; nothing was imported; {TRUST_FILE}, or import {module} yourself first (or "
                f"rl_lightning.trust.allow_class_paths({module!r}))"
            )
    for name, value in hparams.items():
        if name in ("_class_path", "_instantiator"):
            continue
        if name == "env_kwargs" and isinstance(value, Mapping):
            for key, option in value.items():
                where_key = f"hyper_parameters['env_kwargs'][{key!r}]"
                if key == "wrappers" and isinstance(option, (list, tuple)):
                    for index, wrapper in enumerate(option):
                        _check_wrapper(wrapper, f"{where_key}[{index}]", where)
                else:
                    _check_no_spec(option, where_key, where)
        else:
            _check_no_spec(value, f"hyper_parameters[{name!r}]", where)


def _check_wrapper(wrapper: Any, key: str, where: str) -> None:
    if isinstance(wrapper, str):
        if not is_allowed_wrapper_path(wrapper):
            raise refused_wrapper(wrapper, key, where)
        return
    spec = as_mapping(wrapper)
    if spec is not None and "class_path" in spec:
        path = spec["class_path"]
        if not isinstance(path, str) or not is_allowed_wrapper_path(path):
            raise refused_wrapper(str(path), f"{key}['class_path']", where)
        for name, value in dict(as_mapping(spec.get("init_args")) or {}).items():
            _check_no_spec(value, f"{key}['init_args'][{name!r}]", where)
        return
    _check_no_spec(wrapper, key, where)


def _check_no_spec(value: Any, key: str, where: str) -> None:
    """Refuse a ``{"class_path": ...}`` spec anywhere in ``value`` (jsonargparse would import and build it)."""
    mapping = as_mapping(value)
    if mapping is not None:
        if "class_path" in mapping:
            path = mapping["class_path"]
            raise UntrustedCheckpointError(
                f"{where}: {key} is a class spec {{'class_path': {path!r}, ...}}, which a file may not hold "
                f"outside env_kwargs['wrappers']; nothing was imported; {TRUST_FILE}"
            )
        for name, item in mapping.items():
            _check_no_spec(item, f"{key}[{name!r}]", where)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _check_no_spec(item, f"{key}[{index}]", where)


def as_mapping(value: Any) -> Mapping[str, Any] | None:
    """A dict, or a jsonargparse ``Namespace`` as a dict; None for anything else."""
    if isinstance(value, Mapping):
        return value
    if type(value).__name__ == "Namespace" and hasattr(value, "as_dict"):
        return value.as_dict()
    return None
