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

Nor may a file choose where the process connects or what program it runs (:func:`local_file_settings`): a
file's ``env_backend="ray"`` and Ray's options in ``env_kwargs`` (a cluster's ``address``, workers), an
``env_kwargs`` key naming an address, a folder or a program, and ``compile``'s inductor ``options`` (which name
the C++ compiler to run) and backends other than torch's built-in ones are dropped, with a note, for the local,
safe value. The user's own flags and keyword arguments, and a trusted file, keep them.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from rl_lightning.algos.registry import ALGORITHM_CLASS_PATHS, algorithm_classes

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


#: ``env_backend`` values that reach beyond this process, and the local backend that steps the same env here:
#: Ray's workers step gymnasium's env, the same trajectories as ``"gymnasium"`` (``RayVectorEnv``).
_LOCAL_BACKEND = {"ray": "gymnasium"}
#: The keyword arguments of ``RayVectorEnv`` (``rl_lightning.envs.ray_vector``) that are Ray's, not the env's: where
#: the process connects and how many workers it starts.
RAY_OPTIONS = ("num_workers", "envs_per_worker", "address", "num_cpus_per_worker")
#: ``env_kwargs`` keys (besides Ray's, :data:`RAY_OPTIONS`) that name an address, a
#: folder, a file to write or a program: an env's constructor may take any keyword, so these are refused by name
#: (no env rl_lightning builds takes one). EnvPool's and ale-py's ``num_threads`` / ``thread_affinity_offset``
#: stay: threads of this process, which change its speed, not where it connects or what it runs; so do
#: ``vectorization_mode="async"`` (subprocesses of this same Python) and ``render``.
_PROCESS_KEYS = frozenset(
    {"address", "host", "port", "url", "runtime_env", "working_dir", "cwd", "command", "cmd", "program"}
)
_PROCESS_KEY_ENDINGS = ("_address", "_host", "_port", "_url", "_dir", "_directory", "_folder", "_executable")
#: ``torch.compile`` backends a file may name: torch's own, which run no program a setting names.
SAFE_COMPILE_BACKENDS = ("inductor", "aot_eager", "eager", "cudagraphs")
#: ``compile={...}`` keys a file may give (plain values); ``options`` (inductor's, e.g. ``cpp.cxx``: the C++
#: compiler to run) is the user's only.
_FILE_COMPILE_KEYS = {"mode": (str,), "fullgraph": (bool,), "dynamic": (bool, type(None)), "whole_update": (bool,)}


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
    return dict(zip(ALGORITHM_CLASS_PATHS, algorithm_classes().values(), strict=True))


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
    if class_path is not None and class_path not in ALGORITHM_CLASS_PATHS and class_path not in _ALLOWED_BY_USER:
        raise UntrustedCheckpointError(
            f"{where}: hyper_parameters['_class_path'] is {class_path!r}, which is not one of rl_lightning's "
            f"algorithms ({', '.join(sorted(ALGORITHM_CLASS_PATHS))}); nothing was imported; "
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


def local_file_settings(hparams: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A copy of the hyper-parameters read from the untrusted file ``where`` with every process-level setting
    (where the process connects, what program it runs, which folder it works in) replaced by its local, safe
    value: ``env_backend="ray"`` by ``"gymnasium"`` (the same env, stepped here), Ray's options and keys naming an
    address, a folder or a program left out of ``env_kwargs``, and ``compile`` cut to its plain values (a bool,
    ``mode``, ``fullgraph``, ``dynamic``, ``whole_update`` and a built-in ``backend``: no inductor ``options``).
    Prints one ``note:`` line on stderr (global rank zero) naming what was dropped and how to keep it. Pass only
    what the file gives: a setting the user gave is theirs.

    Args:
        hparams: the file's hyper-parameters (those the user did not give).
        where: the file, for the note (``"--ckpt_path run.ckpt"``).
    """
    settings, dropped = dict(hparams), []
    backend = settings.get("env_backend")
    if isinstance(backend, str) and backend in _LOCAL_BACKEND:
        settings["env_backend"] = _LOCAL_BACKEND[backend]
        dropped.append(f"env_backend {backend!r} (now {_LOCAL_BACKEND[backend]!r})")
    env_kwargs = as_mapping(settings.get("env_kwargs"))
    if env_kwargs is not None:
        kept = {}
        for key, value in env_kwargs.items():
            if key in RAY_OPTIONS or _is_process_key(key):
                dropped.append(f"env_kwargs[{key!r}] {value!r}")
            else:
                kept[key] = value
        settings["env_kwargs"] = kept
    compile_settings = as_mapping(settings.get("compile"))
    if compile_settings is not None:
        kept = {}
        for key, value in compile_settings.items():
            if isinstance(value, _FILE_COMPILE_KEYS.get(key, ())) or (
                key == "backend" and isinstance(value, str) and value in SAFE_COMPILE_BACKENDS
            ):
                kept[key] = value
            else:
                dropped.append(f"compile[{key!r}] {value!r}")
        settings["compile"] = kept
    if dropped:
        _note(
            f"note: {where} may not choose where this process connects or what it runs; left out: "
            f"{', '.join(dropped)}. To keep one, give it yourself (a flag on the command line, a keyword "
            "argument in code), or trust the file (--trust_checkpoint; in code: trust_remote_code=True)"
        )
    return settings


def _is_process_key(key: Any) -> bool:
    """Whether an ``env_kwargs`` key names an address, a folder or a program (:data:`_PROCESS_KEYS`)."""
    name = str(key).lower()
    return name in _PROCESS_KEYS or name.endswith(_PROCESS_KEY_ENDINGS)


def _note(line: str) -> None:
    """``line`` on stderr, from global rank zero only."""
    from lightning.fabric.utilities.rank_zero import rank_zero_only

    if getattr(rank_zero_only, "rank", 0) == 0:
        print(line, file=sys.stderr, flush=True)
