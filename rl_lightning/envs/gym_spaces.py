"""gymnasium's spaces as :class:`~rl_lightning.envs.gym_adapter.GymnasiumVectorEnv` converts them: a batch of
observations as a module takes it, the layout of a uint8 image observation, and the error for a space it does
not support."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from rl_lightning.envs.spaces import encode_leaf, image_layout


def encode_observations(space: gym.Space, obs: Any) -> Tensor:
    """A batch of gymnasium observations of ``space`` as the adapter gives them to a module: a
    ``Discrete(n, start)`` index one-hot (float32 ``(batch, n)``), anything else as a tensor."""
    if isinstance(space, gym.spaces.Discrete):
        return encode_leaf(space, obs, "")
    return torch.as_tensor(np.asarray(obs))


def unsupported_space(env_id: str, which: str, space: gym.Space, allowed: str) -> ValueError:
    """The error for a ``which`` (``"observation"``, ``"action"``) space the adapter does not support."""
    return ValueError(
        f"{env_id!r} has an unsupported {which} space {space!r} ({type(space).__name__}): "
        f"GymnasiumVectorEnv supports {allowed}; wrap the env, e.g. "
        f"env_kwargs={{'wrappers': ['gymnasium.wrappers.FlattenObservation']}} (from the command line: "
        f'--env_kwargs \'{{"wrappers": ["gymnasium.wrappers.FlattenObservation"]}}\')'
    )


def uint8_image_layout(env_id: str, space: gym.spaces.Box) -> str | None:
    """The layout of a uint8 image observation (None: no uint8 image); a ``ValueError`` naming the env
    for a uint8 shape whose layout cannot be told (rather than casting its pixels to float32)."""
    try:
        return image_layout(space) if space.dtype == np.uint8 else None
    except ValueError as error:
        raise ValueError(f"{env_id!r}: {error}") from None
