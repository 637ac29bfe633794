"""What :class:`~rl_lightning.envs.gym_adapter.GymnasiumVectorEnv` passes to ``gymnasium.make_vec`` from its
``env_kwargs``: the wrappers resolved (class paths against the allow-list of ``rl_lightning.trust``), the Atari
preset's base-env arguments and wrappers, and ``render_mode="rgb_array"`` for ``render=True``."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec, load_env_creator

from rl_lightning.envs._adapter_checks import refuse_given
from rl_lightning.envs.atari import atari_make_kwargs, atari_options, atari_wrappers
from rl_lightning.trust import as_mapping, is_allowed_wrapper_path, refused_wrapper, untrusted_source

#: The base env's arguments that the Atari preset sets itself (from its options).
_ATARI_SETS = ("frameskip", "repeat_action_probability", "max_num_frames_per_episode", "max_episode_steps")


def gymnasium_make_kwargs(
    env_id: str, spec: EnvSpec, env_kwargs: dict[str, Any], render: bool
) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """The Atari preset's options (``env_kwargs["atari"]``, :func:`~rl_lightning.envs.atari.atari_options`; None
    without it) and the env's keyword arguments for ``gymnasium.make_vec``: ``wrappers`` resolved
    (:func:`resolve_wrappers`), the preset's base-env arguments and wrappers (before the user's), and for ``render``
    ``render_mode="rgb_array"`` (and a MuJoCo env's tracking camera).

    Raises:
        TypeError: for ``render_mode`` (``render=True`` sets it), or a wrapper that is not one.
        ValueError: for a wrapper class path that cannot be imported or that a file may not name, bad preset
            options, the preset with a non-ALE env or beside the arguments it sets, or ``render`` for an env
            without ``"rgb_array"``.
    """
    env_kwargs = dict(env_kwargs)
    if "render_mode" in env_kwargs:
        raise TypeError("pass render=True (for render_mode='rgb_array') instead of render_mode")
    if "wrappers" in env_kwargs:
        env_kwargs["wrappers"] = resolve_wrappers(env_kwargs["wrappers"])
    atari = atari_options(env_kwargs.pop("atari", None))
    if atari is not None:
        _check_atari(env_id, spec, env_kwargs)
        env_kwargs.update(atari_make_kwargs(atari))
        env_kwargs["wrappers"] = [*atari_wrappers(atari), *env_kwargs.get("wrappers", [])]
    if render:
        check_rgb_array(env_id, _declared_render_modes(spec))  # before building, where known
        if str(spec.entry_point).startswith("gymnasium.envs.mujoco") and not {"camera_name", "camera_id"} & set(
            env_kwargs
        ):
            # gymnasium 1.4's MuJoCo envs render from a fixed free camera unless asked for one: the runner
            # leaves the picture. Their models' tracking camera follows it (a model without one keeps the
            # free camera: gymnasium resolves a missing name to it).
            env_kwargs["camera_name"] = "track"
        env_kwargs["render_mode"] = "rgb_array"
    return atari, env_kwargs


def resolve_wrappers(wrappers: Any) -> list[Any]:
    """``env_kwargs["wrappers"]`` as gymnasium's ``make_vec`` takes them: a list whose entries are a
    ``gymnasium.Wrapper`` subclass, a callable ``env -> env`` passed as an object (a function, a
    ``functools.partial``), the class path of a wrapper (``"gymnasium.wrappers.FlattenObservation"``,
    what a YAML config or a command line can hold, and a checkpoint can store), or
    ``{"class_path": ..., "init_args": {...}}`` for one with arguments.

    A class path must name a ``gymnasium.Wrapper`` subclass, checked before it is called. While an
    untrusted file is loaded (``rl_lightning.trust``), a class path resolves only against the
    allow-list, before anything is imported.

    Raises:
        TypeError: for an entry that is not a wrapper (``"os.system"``, a class that is not a wrapper).
        ValueError: for a class path that cannot be imported or that a file may not name.
    """
    if not isinstance(wrappers, (list, tuple)):
        raise TypeError(f"env_kwargs['wrappers'] must be a list of wrappers, got {type(wrappers).__name__}")
    resolved = []
    for index, wrapper in enumerate(wrappers):
        where = f"env_kwargs['wrappers'][{index}]"
        init_args: dict[str, Any] = {}
        spec = None if isinstance(wrapper, str) else as_mapping(wrapper)  # a dict, or jsonargparse's Namespace
        if spec is not None:
            if set(spec) - {"class_path", "init_args"} or not isinstance(spec.get("class_path"), str):
                raise ValueError(f"{where} must be {{'class_path': ..., 'init_args': {{...}}}}, got {wrapper!r}")
            parsed = not isinstance(wrapper, Mapping)  # jsonargparse's Namespace: every parameter, the env's too
            wrapper, init_args = spec["class_path"], dict(as_mapping(spec.get("init_args")) or {})
            if parsed:
                init_args.pop("env", None)
        if isinstance(wrapper, str):
            source = untrusted_source()
            if source is not None and not is_allowed_wrapper_path(wrapper):
                raise refused_wrapper(wrapper, where, source)
            module_name, _, name = wrapper.rpartition(".")
            try:
                wrapper = getattr(importlib.import_module(module_name), name)
            except (ImportError, AttributeError, ValueError) as error:
                raise ValueError(
                    f"{where}: cannot import {wrapper!r} (a class path such as "
                    f"'gymnasium.wrappers.FlattenObservation'): {error}"
                ) from None
            if not (isinstance(wrapper, type) and issubclass(wrapper, gym.Wrapper)):
                raise TypeError(
                    f"{where}: {module_name}.{name} is not a gymnasium.Wrapper subclass, which a class path must "
                    f"name (it is {_describe(wrapper)}); pass your own callable env -> env as an object from Python"
                )
        elif isinstance(wrapper, type) and not issubclass(wrapper, gym.Wrapper):
            raise TypeError(
                f"{where}: {wrapper.__module__}.{wrapper.__qualname__} is a class but not a gymnasium.Wrapper "
                "subclass; pass a wrapper class or a callable env -> env"
            )
        elif not callable(wrapper):
            raise TypeError(f"{where} must be a wrapper class, a callable env -> env or a class path, got {wrapper!r}")
        resolved.append(functools.partial(wrapper, **init_args) if init_args else wrapper)
    return resolved


def _describe(value: Any) -> str:
    """``a builtin function``, ``a class``, ``a module``, ... for a message."""
    if isinstance(value, type):
        return f"the class {value.__module__}.{value.__qualname__}"
    return f"a {type(value).__name__}"


def _check_atari(env_id: str, spec: EnvSpec, env_kwargs: dict[str, Any]) -> None:
    """The Atari preset needs an ALE env and sets the base env's frame skip, sticky actions and time limit
    from its own options: a ``ValueError`` for another env, or for those arguments given beside it."""
    entry_point = spec.entry_point if isinstance(spec.entry_point, str) else getattr(spec.entry_point, "__module__", "")
    if not str(entry_point).startswith("ale_py"):
        raise ValueError(
            f"env_kwargs['atari'] is the Atari preset, for ALE ids (ALE/Breakout-v5, ALE/Pong-v5, ...); {env_id!r} is "
            f"not an ALE env (entry point {entry_point!r})"
        )
    refuse_given(
        env_kwargs,
        _ATARI_SETS,
        "beside env_kwargs['atari']: the preset sets the base env's frameskip (1: it skips frames itself), "
        "repeat_action_probability and time limit from its options; pass them there, e.g. env_kwargs={'atari': "
        "{'frame_skip': 4, 'repeat_action_probability': 0.0, 'max_episode_steps': 27000}}",
    )


def check_rgb_array(env_id: str, render_modes: list[str] | None) -> None:
    """``render=True`` needs ``render_mode="rgb_array"`` (``render_modes`` None: unknown yet)."""
    if render_modes is not None and "rgb_array" not in render_modes:
        raise ValueError(f"render=True needs render_mode 'rgb_array', which {env_id!r} lacks: {render_modes}")


def _declared_render_modes(spec: EnvSpec) -> list[str] | None:
    """The render modes an env class declares, without building it (None: unknown)."""
    try:
        creator = load_env_creator(spec.entry_point) if isinstance(spec.entry_point, str) else spec.entry_point
    except Exception:  # the build itself reports a bad entry point
        return None
    metadata = getattr(creator, "metadata", None)
    return list(metadata.get("render_modes", [])) if isinstance(metadata, dict) else None
