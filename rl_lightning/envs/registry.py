"""Env ids -> vector-env constructors: ``make_envs`` and ``register``."""

from __future__ import annotations

from collections.abc import Callable

import torch

from rl_lightning.envs.base import VectorEnv

EnvFactory = Callable[..., VectorEnv]
_REGISTRY: dict[str, EnvFactory] = {}


def register(env_id: str, factory: EnvFactory, *, overwrite: bool = False) -> None:
    """Register ``factory(num_envs, seed, device) -> VectorEnv`` under ``env_id``.

    Raises:
        ValueError: if ``env_id`` is taken and ``overwrite`` is False.
    """
    if not isinstance(env_id, str) or not env_id:
        raise TypeError(f"env_id must be a non-empty str, got {env_id!r}")
    if not callable(factory):
        raise TypeError(f"factory must be callable, got {type(factory).__name__}")
    if env_id in _REGISTRY and not overwrite:
        raise ValueError(f"env_id {env_id!r} is already registered (pass overwrite=True to replace it)")
    _REGISTRY[env_id] = factory


def registered_env_ids() -> list[str]:
    """All registered env ids, sorted."""
    return sorted(_REGISTRY)


def make_envs(env_id: str, num_envs: int, seed: int | None = None, device: torch.device | str = "cpu") -> VectorEnv:
    """Build ``num_envs`` copies of the env registered as ``env_id`` on ``device``.

    Raises:
        ValueError: for an unknown ``env_id`` (the message lists the registered ones).
    """
    if env_id not in _REGISTRY:
        raise ValueError(f"unknown env_id {env_id!r}; registered env ids: {', '.join(registered_env_ids())}")
    return _REGISTRY[env_id](num_envs=num_envs, seed=seed, device=device)
