"""Observations as a user hands them to ``act``, turned into a batch the networks take."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from rl_lightning.envs.base import VectorEnv
from rl_lightning.envs.gym_adapter import encode_observations
from rl_lightning.envs.spaces import (
    ACTION_MASK_KEY,
    OBSERVATION_KEY,
    TensorTree,
    as_bool_mask,
    encode_leaf,
    flat_values,
    is_structured,
    leaf_dtype,
)


def is_tensor_input(obs: Any) -> bool:
    """Whether ``act`` answers with tensors: for a tensor, or a dict of tensors (a Dict observation)."""
    return isinstance(obs, Tensor) or (
        isinstance(obs, dict) and bool(obs) and all(isinstance(value, Tensor) for value in obs.values())
    )


def as_numpy(tensor: Tensor) -> np.ndarray | np.generic:
    """``tensor`` as a numpy array on the host; a 0-d tensor as a numpy scalar (``np.int64(1)``)."""
    array = tensor.detach().cpu().numpy()
    return array[()] if array.ndim == 0 else array


class ObservationInputs:
    """How ``act`` reads observations of one env: tensors or arrays of the env's shape and dtype, a
    gymnasium ``Discrete`` index (one-hot in training), a Dict / Tuple as gymnasium gives it, the
    mask of an info-masked env. Built from a one-copy instance of the env (kept without it: pickles).

    Args:
        envs: the env (only its spaces are read).
        env_id: its id, for the error messages.
    """

    def __init__(self, envs: VectorEnv, env_id: str):
        self.env_id = env_id
        self.space = envs.single_observation_space
        #: The part of a Dict observation the policy reads (``actor_keys``): all act() needs and takes of it.
        self.policy_space = self.space
        self.obs_shape, self.obs_dtype = envs.obs_shape, envs.obs_dtype
        #: The gymnasium space act() takes observations in (Discrete indices, Dict / Tuple as given).
        self.gymnasium_space = getattr(envs, "gymnasium_observation_space", None)
        self.discrete = self.gymnasium_space if isinstance(self.gymnasium_space, gym.spaces.Discrete) else None
        self.parts = getattr(envs, "observation_parts", None)
        self.mask_source = getattr(envs, "mask_source", "obs" if envs.has_action_mask else None)
        #: gymnasium's action space where it differs from ours by a start (``Discrete(n, start)``, a
        #: ``MultiDiscrete`` with ``start``): act() answers a gymnasium observation in its values.
        self.gymnasium_action_space = _shifted(getattr(envs, "gymnasium_action_space", None))

    def gymnasium_actions(self, actions: np.ndarray | np.generic) -> np.ndarray | np.generic:
        """Actions in our index space as gymnasium's env takes them: ``start + index`` for a shifted
        ``Discrete`` / ``MultiDiscrete`` space (in its dtype), the others as they are."""
        space = self.gymnasium_action_space
        if space is None:
            return actions
        return (actions + space.start).astype(space.dtype)

    def batch(self, obs: Any, action_mask: Any = None, device: torch.device | str = "cpu") -> tuple[Any, torch.Size]:
        """``obs`` as a ``(batch, *obs_shape)`` tensor of the env's dtype on the module's device, and
        the batch shape it had (a ``ValueError`` naming the expected shape otherwise)."""
        if isinstance(self.space, gym.spaces.Dict):
            return self._structured_batch(obs, action_mask, device)
        if action_mask is not None:
            raise ValueError(f"action_mask was given, but {self.env_id} has no action masks")
        if self.discrete is not None:
            indices = torch.as_tensor(np.asarray(obs.cpu() if isinstance(obs, Tensor) else obs))
            if not indices.is_floating_point():  # gymnasium's indices (the one-hot rows are float)
                one_hot = encode_observations(self.discrete, indices).to(device)
                return one_hot, indices.shape
        obs = torch.as_tensor(obs, device=device)
        obs_shape = self.obs_shape
        batch_dims = obs.dim() - len(obs_shape)
        if batch_dims < 0 or tuple(obs.shape[batch_dims:]) != obs_shape:
            raise ValueError(
                f"obs must have shape (*batch, {', '.join(map(str, obs_shape))}) for {self.env_id}, "
                f"got {tuple(obs.shape)}"
            )
        if self.obs_dtype == torch.uint8 and obs.dtype != torch.uint8:
            # Casting would silently corrupt them: float pixels in [0, 1] become 0 or 1, ints above 255 wrap.
            raise TypeError(
                f"obs must be uint8 pixels (0-255) for {self.env_id}, as its env gives them, got {obs.dtype}; "
                "for float images in [0, 1] pass (obs * 255).round().to(torch.uint8)"
            )
        if obs.dtype == torch.bool or obs.is_complex():
            raise TypeError(f"obs must be real numbers, got {obs.dtype}")
        return obs.reshape(-1, *obs_shape).to(self.obs_dtype), obs.shape[:batch_dims]

    def _policy_reads(self) -> str:
        """Words for the errors when the policy reads some of the observation's keys."""
        if self.policy_space is self.space:
            return ""
        return f" (the policy's actor_keys, of {sorted(self.space.spaces)})"

    def _structured_batch(
        self, obs: Any, action_mask: Any, device: torch.device | str
    ) -> tuple[TensorTree, torch.Size]:
        """A Dict observation (ours, or gymnasium's of a Dict / Tuple / info-masked space) as a batch
        tree on the module's device, and its batch shape."""
        env_id, leaves = self.env_id, self.policy_space.spaces  # the policy's keys: any others are not read
        gymnasium_space, parts = self.gymnasium_space, self.parts or {}
        if isinstance(obs, dict) and set(obs) <= set(self.space.spaces) and set(leaves) - {ACTION_MASK_KEY} <= set(obs):
            values = dict(obs)  # our flat keys (a part may still be in gymnasium's form: an index)
        elif gymnasium_space is not None and is_structured(gymnasium_space) and isinstance(obs, (dict, tuple, list)):
            values = flat_values(gymnasium_space, obs)
        elif self.mask_source == "info" and not isinstance(obs, (dict, tuple, list)):
            values = {OBSERVATION_KEY: obs}
        else:
            raise ValueError(
                f"obs must be a dict with keys {sorted(leaves)} for {env_id}{self._policy_reads()}"
                f"{f' (or as gymnasium gives it, {gymnasium_space})' if gymnasium_space is not None else ''}, "
                f"got {type(obs).__name__}"
            )
        if action_mask is not None:
            if ACTION_MASK_KEY not in leaves:
                raise ValueError(f"action_mask was given, but {env_id} has no action masks")
            values[ACTION_MASK_KEY] = action_mask
        if ACTION_MASK_KEY in values:  # True / 1 legal; a logits-convention mask is refused (one read per call)
            mask = values[ACTION_MASK_KEY]
            where = "act(action_mask=...)" if action_mask is not None else f"obs[{ACTION_MASK_KEY!r}]"
            values[ACTION_MASK_KEY] = as_bool_mask(mask if isinstance(mask, Tensor) else np.asarray(mask), where)
        if ACTION_MASK_KEY in leaves and ACTION_MASK_KEY not in values:
            raise ValueError(
                f"{env_id} masks its actions: pass act(obs, action_mask=...) with a bool (*batch, "
                f"{leaves[ACTION_MASK_KEY].shape[0]}) mask (gymnasium's info['action_mask'])"
            )
        tree, batch_shape = TensorTree(), None
        for key, leaf in leaves.items():
            value = values[key]
            part = parts.get(key)
            if isinstance(part, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)) and key != ACTION_MASK_KEY:
                index = value if isinstance(value, Tensor) else torch.as_tensor(np.asarray(value))
                if not index.is_floating_point():  # gymnasium's indices (our one-hot rows are float)
                    batch = index.shape if isinstance(part, gym.spaces.Discrete) else index.shape[:-1]
                    value = encode_leaf(part, index.cpu(), key).reshape(*batch, *leaf.shape)
            tensor = torch.as_tensor(value.cpu() if isinstance(value, Tensor) else np.asarray(value)).to(device)
            shape = tuple(leaf.shape)
            batch_dims = tensor.dim() - len(shape)
            if batch_dims < 0 or tuple(tensor.shape[batch_dims:]) != shape:
                raise ValueError(
                    f"obs[{key!r}] must have shape (*batch, {', '.join(map(str, shape))}) for {env_id}, got "
                    f"{tuple(tensor.shape)}"
                )
            if batch_shape is None:
                batch_shape = tensor.shape[:batch_dims]
            elif tensor.shape[:batch_dims] != batch_shape:
                raise ValueError(
                    f"obs[{key!r}] has the batch shape {tuple(tensor.shape[:batch_dims])}, the other keys "
                    f"{tuple(batch_shape)}"
                )
            dtype = leaf_dtype(leaf)
            if dtype == torch.uint8 and tensor.dtype != torch.uint8:
                raise TypeError(f"obs[{key!r}] must be uint8 pixels (0-255) for {env_id}, got {tensor.dtype}")
            tree[key] = tensor.reshape(-1, *shape).to(dtype)
        return tree, batch_shape


def _shifted(space: gym.Space | None) -> gym.Space | None:
    """``space`` if it is a ``Discrete`` or ``MultiDiscrete`` space with a non-zero start, else None."""
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)) and np.any(space.start != 0):
        return space
    return None
