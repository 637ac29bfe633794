"""The vector-env contract every rl_lightning environment follows.

A ``VectorEnv`` holds ``num_envs`` copies of one environment as batched tensors on one device
and steps them all in lock-step:

- ``reset() -> (obs, info)`` and ``step(actions) -> (obs, reward, terminated, truncated, info)``;
  ``obs`` is float32 ``(num_envs, *obs_shape)``, ``reward`` float32 ``(num_envs,)``,
  ``terminated`` / ``truncated`` bool ``(num_envs,)``, all on ``env.device``.
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

from typing import Any

import gymnasium as gym
import torch
from gymnasium.vector.utils import batch_space
from torch import Tensor

_INTEGER_DTYPES = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)


class VectorEnv:
    """Base class: ``num_envs`` copies of an environment stepped in lock-step as tensors.

    Subclasses set ``single_observation_space`` (a float32 ``Box``) and
    ``single_action_space`` (a ``Discrete``) before calling ``super().__init__``, and implement
    ``_reset_all``, ``_step`` and ``draw``.

    Args:
        num_envs: number of environment copies, >= 1.
        seed: seed of the env's private generator (``None`` draws one from torch's global RNG).
        device: where every tensor of the env lives.
    """

    single_observation_space: gym.spaces.Box
    single_action_space: gym.spaces.Discrete
    #: Frames per second for videos of this env.
    render_fps: int = 50
    #: Attributes holding the env's dynamic state, saved by :meth:`state_dict`.
    _state_attributes: tuple[str, ...] = ()

    def __init__(self, num_envs: int, seed: int | None = None, device: torch.device | str = "cpu"):
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise TypeError(f"seed must be an int or None, got {type(seed).__name__}")
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.generator = torch.Generator(device=self.device)
        self.seed(seed)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.num_actions = int(self.single_action_space.n)
        self.obs_shape = tuple(self.single_observation_space.shape)

    # -- public API -------------------------------------------------------------------------

    def seed(self, seed: int | None) -> None:
        """Re-seed the env's private generator (``None``: a seed from torch's global RNG)."""
        if seed is None:
            seed = int(torch.randint(0, 2**62, (1,)).item())
        self.generator.manual_seed(seed)

    def reset(self, seed: int | None = None) -> tuple[Tensor, dict[str, Any]]:
        """Start a new episode in every env.

        Args:
            seed: if given, re-seed the private generator first.

        Returns:
            obs: float32 ``(num_envs, *obs_shape)``; info: an empty dict.
        """
        if seed is not None:
            self.seed(seed)
        return self._reset_all(), {}

    def step(self, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, dict[str, Any]]:
        """Advance every env by one step and auto-reset the ones whose episode ended.

        Args:
            actions: integer ``(num_envs,)`` tensor on ``self.device``, each in
                ``[0, num_actions)``.

        Returns:
            obs ``(num_envs, *obs_shape)`` float32 (first obs of the next episode where one
            ended), reward ``(num_envs,)`` float32, terminated and truncated ``(num_envs,)`` bool,
            and info with ``"final_observation"``: the obs each env reached before any reset.
        """
        self._check_actions(actions)
        return self._step(actions)

    def draw(self, obs: Tensor) -> Tensor:
        """Render observations as uint8 RGB images.

        Args:
            obs: ``(*batch, *obs_shape)`` observations, any device.

        Returns:
            uint8 ``(*batch, height, width, 3)`` on the CPU.
        """
        raise NotImplementedError

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

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_envs={self.num_envs}, device={self.device})"

    # -- for subclasses -----------------------------------------------------------------

    def _reset_all(self) -> Tensor:
        raise NotImplementedError

    def _step(self, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, dict[str, Any]]:
        raise NotImplementedError

    def _check_actions(self, actions: Tensor) -> None:
        if not isinstance(actions, Tensor):
            raise TypeError(f"actions must be a torch.Tensor, got {type(actions).__name__}")
        if actions.shape != (self.num_envs,):
            raise ValueError(f"actions must have shape ({self.num_envs},) (one per env), got {tuple(actions.shape)}")
        if actions.dtype not in _INTEGER_DTYPES:
            raise TypeError(f"actions must have an integer dtype, got {actions.dtype}")
        if actions.device != self.device:
            raise ValueError(f"actions must be on {self.device}, got {actions.device}")
        # One fused reduction; on a GPU this is the only host sync of a step.
        low, high = torch.aminmax(actions)
        if low.item() < 0 or high.item() >= self.num_actions:
            raise ValueError(f"actions must be in [0, {self.num_actions}), got values in [{low.item()}, {high.item()}]")
