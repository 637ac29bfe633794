"""gymnasium env ids and what their specs say: the ``"module:id"`` form, the packages that register a
namespace's ids (``ALE/...``: ``ale_py``), and an env's time limit."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec

from rl_lightning._checks import check_str
from rl_lightning.trust import TRUST_FILE, UntrustedCheckpointError, untrusted_source

# Namespaces whose package registers its ids with gymnasium when imported.
_NAMESPACE_PACKAGES = {"ALE": ("ale_py", "rl_lightning[atari]")}


def time_limit(spec: EnvSpec, env_kwargs: dict[str, Any]) -> int | None:
    """The time limit, in steps, of the env ``gymnasium.make(spec.id, **env_kwargs)`` builds: its
    ``max_episode_steps`` (given or the spec's), an Atari env's ``max_num_frames_per_episode`` over its
    frame skip; None if it has none."""
    limit = env_kwargs.get("max_episode_steps", spec.max_episode_steps)
    if limit is not None:
        return int(limit)
    kwargs = {**(spec.kwargs or {}), **env_kwargs}
    frames = kwargs.get("max_num_frames_per_episode")
    if frames is None and spec.id.startswith("ALE/"):
        frames = 108_000  # ale_py's default
    if frames is not None and int(frames) > 0:
        skip = kwargs.get("frameskip", 4)
        return max(1, int(frames) // (skip if isinstance(skip, int) and skip > 0 else 1))
    return None


def import_env_module(env_id: str) -> None:
    """Import the module of gymnasium's ``"module:id"`` form (``my_envs:Corridor-v0``: ``my_envs``, which registers
    ``Corridor-v0`` when imported), as ``gymnasium.make`` does; from the working directory too, as ``python -m``
    would (a script's own directory is on ``sys.path``, the user's is not). While an untrusted file is loaded
    (``rl_lightning.trust``) only a module the user imported already is accepted.

    Raises:
        ValueError: for a module that cannot be imported (with the reason), or an empty part.
    """
    module, _, name = env_id.partition(":")
    if not module or not name:
        raise ValueError(f"env_id {env_id!r}: gymnasium's form is 'module:EnvName-vN', both parts non-empty")
    if module in sys.modules:
        return
    source = untrusted_source()
    if source is not None:
        raise UntrustedCheckpointError(
            f"{source}: env_id {env_id!r} would import {module!r}; nothing was imported; import {module} yourself "
            "first, or " + TRUST_FILE
        )
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as error:
        if error.name != module.split(".")[0] or os.getcwd() in sys.path:
            raise ValueError(f"env_id {env_id!r}: cannot import {module!r} ({error})") from None
        sys.path.append(os.getcwd())
        try:
            importlib.import_module(module)
        except ImportError as retry:
            raise ValueError(
                f"env_id {env_id!r}: cannot import {module!r} ({retry}); put it on PYTHONPATH (or run from its "
                "directory)"
            ) from None
    except ImportError as error:
        raise ValueError(f"env_id {env_id!r}: cannot import {module!r} ({error})") from None


def gymnasium_spec(env_id: str) -> EnvSpec:
    """gymnasium's spec of ``env_id``, importing the package of a known namespace first
    (``ALE/...``: ``ale_py``), and the module of gymnasium's ``"module:id"`` form (:func:`import_env_module`).

    Raises:
        ValueError: if gymnasium does not know ``env_id`` (with gymnasium's own hint).
    """
    check_str("env_id", env_id)
    if ":" in env_id:
        import_env_module(env_id)
        env_id = env_id.split(":", 1)[1]
    namespace = env_id.split("/", 1)[0] if "/" in env_id else None
    package = _NAMESPACE_PACKAGES.get(namespace)
    missing = ""
    if package is not None:
        try:
            importlib.import_module(package[0])
        except ImportError:
            missing = f"; {namespace} ids need the {package[0]} package: pip install '{package[1]}'"
    try:
        return gym.spec(env_id)
    except (gym.error.Error, ImportError) as error:
        raise ValueError(f"{env_id!r} is not a gymnasium env id ({error}){missing}") from None
