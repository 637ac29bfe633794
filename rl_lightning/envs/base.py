"""The vector-env contract every rl_lightning environment follows.

A ``VectorEnv`` holds ``num_envs`` copies of one environment as batched tensors on one device
and steps them all in lock-step:

- ``reset() -> (obs, info)`` and ``step(actions) -> (obs, reward, terminated, truncated, info)``;
  ``obs`` is ``(num_envs, *obs_shape)`` of the observation space's dtype (float32, or uint8 for
  images), ``reward`` float32 ``(num_envs,)``, ``terminated`` / ``truncated`` bool
  ``(num_envs,)``, all on ``env.device``.
- A ``Dict`` observation space (of float32, uint8 or bool ``Box`` leaves, ``rl_lightning.envs.spaces``)
  gives observations as a ``TensorTree``: a dict of ``(num_envs, *leaf_shape)`` tensors; its bool
  ``"action_mask"`` key, if any, holds the legal actions.
- Actions: for a ``Discrete`` space an integer ``(num_envs,)`` tensor in ``[0, n)``; for
  ``MultiDiscrete`` / ``MultiBinary`` an integer ``(num_envs, k)`` one, in range per dimension; for a
  ``Box`` space a floating ``(num_envs, *action_shape)`` tensor of finite values, which the env
  clips to the space's bounds (a policy stores what it sampled, unclipped, for its
  log-probabilities).
- Auto-reset happens inside ``step``: for an env whose episode just ended, the returned obs is
  the first obs of its next episode, and ``info["final_observation"]`` (a full
  ``(num_envs, *obs_shape)`` tensor) holds the true last obs of every env.
- Randomness comes from a private ``torch.Generator`` on the env's device, seeded at
  construction: the same seed gives the same trajectories and two instances never share state.
- ``single_observation_space`` / ``single_action_space`` are gymnasium spaces;
  ``observation_space`` / ``action_space`` are their batched versions.
- ``draw(obs)`` renders any observation (also one stored in a rollout) to uint8 RGB pixels
  with torch alone, so videos need no display.
"""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector.utils import batch_space
from torch import Tensor

from rl_lightning._checks import check_seed
from rl_lightning.envs.spaces import ACTION_MASK_KEY, TensorTree, action_kind, check_leaf_spaces, leaf_dtype, mask_size
from rl_lightning.sampling import masked_logits, sample_masked_categorical

_INTEGER_DTYPES = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)
_OBS_DTYPES = {np.dtype(np.float32): torch.float32, np.dtype(np.uint8): torch.uint8}


def resolve_device(device: torch.device | str) -> torch.device:
    """``device`` with its index filled in: ``"cuda"`` is the current CUDA device (``cuda:0``
    usually), so that envs, buffers and modules given ``"cuda"`` and ``"cuda:0"`` agree."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def space_kind(space: gym.Space) -> str:
    """``"discrete"``, ``"box"``, ``"multi_discrete"`` or ``"multi_binary"``; any other space is a
    ``ValueError`` naming it."""
    return action_kind(space)


def _check_action_mask(mask_space: gym.spaces.Box | None, action_space: gym.Space) -> None:
    """An ``"action_mask"`` leaf must be bool ``(n,)`` for ``Discrete(n)``, ``(sum(nvec),)`` for ``MultiDiscrete``."""
    if mask_space is None:
        return
    size = mask_size(action_space)
    if size is None:
        raise ValueError(
            f"an action mask needs a Discrete or MultiDiscrete action space, got {action_space!r}: "
            "Box and MultiBinary actions take no mask"
        )
    if mask_space.dtype != np.bool_ or tuple(mask_space.shape) != (size,):
        raise ValueError(f"the observation's 'action_mask' must be a bool Box of shape ({size},), got {mask_space!r}")


class VectorEnv:
    """Base class: ``num_envs`` copies of an environment stepped in lock-step as tensors.

    Subclasses set ``single_observation_space`` (a float32 or uint8 ``Box``) and
    ``single_action_space`` (a ``Discrete`` or a float32 ``Box``) before calling
    ``super().__init__``, and implement ``_reset_all``, ``_step`` and ``draw``.

    Action values (range, finiteness) are checked on every step on the CPU, where a check costs
    no synchronisation; on other devices only on the first step, since reading a value back
    stalls the device. Set ``env.check_action_values = True`` to check every step anyway.

    Args:
        num_envs: number of environment copies, >= 1.
        seed: seed of the env's private generator (``None`` draws one from torch's global RNG).
        device: where every tensor of the env lives.
    """

    single_observation_space: gym.spaces.Box
    single_action_space: gym.spaces.Discrete | gym.spaces.Box
    #: Frames per second for videos of this env.
    render_fps: int = 50
    #: Whether :meth:`draw` can render any observation (else only :meth:`render` the current state).
    can_draw: bool = True
    #: Whether :meth:`render` gives the current frame of every env.
    can_render: bool = False
    #: Whether :meth:`load_state_dict` restores the exact state (False: the envs restart fresh).
    restorable: bool = True
    #: Attributes holding the env's dynamic state, saved by :meth:`state_dict`.
    _state_attributes: tuple[str, ...] = ()

    def __init__(self, num_envs: int, seed: int | None = None, device: torch.device | str = "cpu"):
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
        self.num_envs = num_envs
        self.device = resolve_device(device)
        self.generator = torch.Generator(device=self.device)
        self.seed(seed)

        obs_space, action_space = self.single_observation_space, self.single_action_space
        self.action_kind = action_kind(action_space)
        #: Whether observations are a dict of tensors (a :class:`TensorTree`) rather than one tensor.
        self.structured = isinstance(obs_space, gym.spaces.Dict)
        if self.structured:
            leaves = check_leaf_spaces(obs_space)
            #: ``(*obs_shape)``, or for a Dict space the shape of each key's leaf.
            self.obs_shape: tuple[int, ...] | dict[str, tuple[int, ...]] = {
                key: tuple(leaf.shape) for key, leaf in leaves.items()
            }
            self.obs_dtype: torch.dtype | dict[str, torch.dtype] = {
                key: leaf_dtype(leaf) for key, leaf in leaves.items()
            }
            _check_action_mask(leaves.get(ACTION_MASK_KEY), action_space)
        elif not isinstance(obs_space, gym.spaces.Box) or obs_space.dtype not in _OBS_DTYPES:
            raise ValueError(
                f"single_observation_space must be a float32 or uint8 Box or a Dict of Box leaves, got {obs_space!r}: "
                "wrap other spaces into one of those first"
            )
        else:
            self.obs_shape = tuple(obs_space.shape)
            self.obs_dtype = _OBS_DTYPES[obs_space.dtype]
        #: Whether observations carry the legal actions (the Dict key ``"action_mask"``).
        self.has_action_mask = self.structured and ACTION_MASK_KEY in obs_space.spaces
        self.observation_space = batch_space(obs_space, num_envs)
        self.action_space = batch_space(action_space, num_envs)
        if self.action_kind == "discrete":
            #: Number of actions of a ``Discrete`` space (None for the others).
            self.num_actions: int | None = int(action_space.n)
            self.action_shape: tuple[int, ...] = ()
            self.action_dtype = torch.int64
        elif self.action_kind in ("multi_discrete", "multi_binary"):
            self.num_actions = None
            self.action_shape = tuple(action_space.shape)
            self.action_dtype = torch.int64
            nvec = action_space.nvec if self.action_kind == "multi_discrete" else np.full(action_space.shape, 2)
            #: The choices per dimension of a MultiDiscrete (2 for MultiBinary) action space.
            self.action_nvec = torch.as_tensor(np.asarray(nvec, dtype=np.int64), device=self.device)
        else:
            self.num_actions = None
            self.action_shape = tuple(action_space.shape)
            self.action_dtype = torch.float32
            self._action_low = torch.as_tensor(action_space.low, dtype=torch.float32, device=self.device)
            self._action_high = torch.as_tensor(action_space.high, dtype=torch.float32, device=self.device)
            self._bounded = bool(np.isfinite(action_space.low).all() and np.isfinite(action_space.high).all())
        self._actions_shape = (num_envs, *self.action_shape)
        #: Check action values on every step (True on the CPU, where it costs no device sync).
        self.check_action_values = self.device.type == "cpu"
        self._checked_once = False

    # -- public API -------------------------------------------------------------------------

    def seed(self, seed: int | None) -> None:
        """Re-seed the env's private generator (``None``: a seed from torch's global RNG)."""
        if seed is None:
            seed = int(torch.randint(0, 2**62, (1,)).item())
        self.generator.manual_seed(check_seed("seed", seed))

    def reset(self, seed: int | None = None) -> tuple[Tensor | TensorTree, dict[str, Any]]:
        """Start a new episode in every env.

        Args:
            seed: if given, re-seed the private generator first.

        Returns:
            obs: ``(num_envs, *obs_shape)``; info: an empty dict.
        """
        if seed is not None:
            self.seed(seed)
        return self._reset_all(), {}

    def step(self, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, dict[str, Any]]:
        """Advance every env by one step and auto-reset the ones whose episode ended.

        Args:
            actions: ``Discrete``: integer ``(num_envs,)`` in ``[0, num_actions)``; ``Box``: floating
                ``(num_envs, *action_shape)``, finite, clipped to the space's bounds. On ``self.device``.

        Returns:
            obs ``(num_envs, *obs_shape)`` (first obs of the next episode where one ended), reward
            ``(num_envs,)`` float32, terminated and truncated ``(num_envs,)`` bool, and info with
            ``"final_observation"``: the obs each env reached before any reset.
        """
        self._check_actions(actions)
        if self.action_kind == "box":
            actions = torch.clamp(actions.float(), self._action_low, self._action_high)
        return self._step(actions)

    def random_actions(self, generator: torch.Generator | None = None, action_mask: Tensor | None = None) -> Tensor:
        """Uniformly random valid actions, one per env (``Box``: uniform within finite bounds,
        standard normal where a bound is infinite; with ``action_mask``, bool ``(num_envs, n)``,
        uniform over the legal ones), drawn from ``generator`` (torch's global RNG if None) on
        ``self.device``."""
        if action_mask is not None:
            return sample_legal(
                action_mask, self.action_nvec if self.action_kind == "multi_discrete" else None, generator
            )
        if self.action_kind == "discrete":
            return torch.randint(0, self.num_actions, (self.num_envs,), generator=generator, device=self.device)
        if self.action_kind in ("multi_discrete", "multi_binary"):
            uniform = torch.rand(self._actions_shape, generator=generator, device=self.device)
            return (uniform * self.action_nvec).long().clamp_(max=self.action_nvec - 1)
        shape = (self.num_envs, *self.action_shape)
        uniform = torch.rand(shape, generator=generator, device=self.device)
        low, high = self._action_low, self._action_high
        if self._bounded:
            return low + uniform * (high - low)
        normal = torch.randn(shape, generator=generator, device=self.device)
        bounded = torch.isfinite(low) & torch.isfinite(high)
        return torch.where(bounded, torch.nan_to_num(low + uniform * (high - low)), normal)

    def draw(self, obs: Tensor) -> Tensor:
        """Render observations as uint8 RGB images.

        Args:
            obs: ``(*batch, *obs_shape)`` observations, any device.

        Returns:
            uint8 ``(*batch, height, width, 3)`` on the CPU.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot draw its observations")

    def render(self) -> Tensor:
        """The current frame of every env, uint8 ``(num_envs, height, width, 3)`` on the CPU
        (for envs that cannot :meth:`draw` an arbitrary observation, e.g. gymnasium's)."""
        raise NotImplementedError(f"{type(self).__name__} cannot render its current state")

    def close(self) -> None:
        """Release resources (nothing to release for tensor envs; kept for gymnasium parity)."""

    def get_rng_state(self) -> Tensor:
        """The private generator's state (for checkpoints)."""
        return self.generator.get_state()

    def set_rng_state(self, state: Tensor) -> None:
        """Restore the private generator's state saved by :meth:`get_rng_state`."""
        self.generator.set_state(state)

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly from here: dynamic state and RNG state."""
        state: dict[str, Any] = {"env": type(self).__name__, "num_envs": self.num_envs, "rng": self.get_rng_state()}
        for name in self._state_attributes:
            value = getattr(self, name)
            state[name] = value.clone() if isinstance(value, Tensor) else value
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` of an env of the same type and ``num_envs``.

        Raises:
            ValueError: if the state comes from another env type or ``num_envs``.
        """
        if state.get("env") != type(self).__name__ or state.get("num_envs") != self.num_envs:
            raise ValueError(
                f"state is for {state.get('env')} with num_envs={state.get('num_envs')}, this env is "
                f"{type(self).__name__} with num_envs={self.num_envs}"
            )
        self.set_rng_state(state["rng"])
        for name in self._state_attributes:
            value = state[name]
            setattr(self, name, value.to(self.device).clone() if isinstance(value, Tensor) else value)

    def _restart_fresh(self, state: dict[str, Any], whose: str) -> None:
        """``load_state_dict`` of an env that cannot save its envs' internal state (``restorable = False``):
        restore the private generator, warn that ``whose`` envs restart, and reset every env fresh (seeded from
        the restored generator).

        Raises:
            ValueError: if the state comes from another env type, env id (``state["env_id"]``) or ``num_envs``.
        """
        env_id = getattr(self, "env_id", None)
        if state.get("env_id") != env_id:
            raise ValueError(f"state is for env id {state.get('env_id')!r}, this env is {env_id!r}")
        VectorEnv.load_state_dict(self, state)
        warnings.warn(
            f"{type(self).__name__}({env_id!r}) cannot restore the saved state of {whose}: every env restarts "
            "with a fresh reset",
            UserWarning,
            stacklevel=3,
        )
        self.seed(int(torch.randint(0, 2**62, (1,), generator=self.generator).item()))
        self._reset_all()

    @property
    def env_steps_per_step(self) -> int:
        """The env steps one lock-step :meth:`step` counts: ``num_envs`` (a multi-agent env's ``num_scenes``: a frame
        per scene, whatever its agents, as VMAS and BenchMARL count)."""
        return self.num_envs

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_envs={self.num_envs}, device={self.device})"

    # -- for subclasses -----------------------------------------------------------------

    def _reset_all(self) -> Tensor:
        raise NotImplementedError

    def _step(self, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, dict[str, Any]]:
        raise NotImplementedError

    def _check_actions(self, actions: Tensor) -> None:
        """Type, shape, dtype and device every step (no device sync); values where it is cheap."""
        if not isinstance(actions, Tensor):
            raise TypeError(f"actions must be a torch.Tensor, got {type(actions).__name__}")
        if actions.shape != self._actions_shape:
            raise ValueError(
                f"actions must have shape {self._actions_shape} (one {'index' if self.num_actions else 'action'} "
                f"per env), got {tuple(actions.shape)}"
            )
        if self.action_kind != "box" and actions.dtype not in _INTEGER_DTYPES:
            raise TypeError(
                f"actions must have an integer dtype for a {type(self.single_action_space).__name__} action space, "
                f"got {actions.dtype}"
            )
        if self.action_kind == "box" and not actions.is_floating_point():
            raise TypeError(f"actions must have a floating dtype for a Box action space, got {actions.dtype}")
        if actions.device != self.device:
            raise ValueError(f"actions must be on {self.device}, got {actions.device}")
        if self.check_action_values or not self._checked_once:
            self._checked_once = True
            self._check_action_values(actions)

    def _check_action_values(self, actions: Tensor) -> None:
        if self.action_kind == "discrete":
            low, high = torch.aminmax(actions)
            if low.item() < 0 or high.item() >= self.num_actions:
                raise ValueError(
                    f"actions must be in [0, {self.num_actions}), got values in [{low.item()}, {high.item()}]"
                )
        elif self.action_kind in ("multi_discrete", "multi_binary"):
            if bool(((actions < 0) | (actions >= self.action_nvec)).any()):
                raise ValueError(
                    f"actions must be in [0, {self.action_nvec.tolist()}) per dimension, got "
                    f"{actions[((actions < 0) | (actions >= self.action_nvec)).any(dim=1)][0].tolist()}"
                )
        elif not bool(torch.isfinite(actions).all()):
            raise ValueError("actions must be finite, got NaN or infinite values")


def sample_legal(action_mask: Tensor, nvec: Tensor | None = None, generator: torch.Generator | None = None) -> Tensor:
    """Uniformly random legal actions: int64 ``(batch,)`` for a ``Discrete`` mask ``(batch, n)``, or
    ``(batch, len(nvec))`` for a ``MultiDiscrete`` one ``(batch, sum(nvec))`` (legal per dimension)."""
    logits = masked_logits(torch.zeros(action_mask.shape, device=action_mask.device), action_mask)
    if nvec is None:
        return sample_masked_categorical(logits, generator)[0]
    parts = torch.split(logits, nvec.tolist(), dim=-1)
    return torch.stack([sample_masked_categorical(part, generator)[0] for part in parts], dim=-1)
