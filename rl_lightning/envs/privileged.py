"""An env whose return hangs on what the actor cannot see: the test bed of a critic with privileged observations
(``actor_keys`` / ``critic_keys``: asymmetric actor-critic).

``PrivilegedBandit`` is a contextual bandit played for ``horizon`` steps. Each episode draws a hidden offset
``c ~ U(-offset_scale, offset_scale)``; each step shows a cue ``k`` of ``num_actions`` and pays ``c + 1`` for the
action ``k``, ``c`` for any other. The best policy reads the cue only (its return is ``horizon`` on average, a
random one's ``horizon / num_actions``), but the return of an episode is mostly ``c * horizon``: a critic that
cannot see ``c`` leaves it in every advantage as noise, a critic that sees it removes it. The observation is a Dict:

=============== ======================================================= ================================
key             holds                                                   who should read it
=============== ======================================================= ================================
``"observation"`` the cue one-hot, ``t / horizon``                       the actor (what a robot senses)
``"state"``       the cue one-hot, ``t / horizon``, ``c / offset_scale`` the critic (the simulator's state)
=============== ======================================================= ================================
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from rl_lightning._checks import check_float, check_int
from rl_lightning.envs.base import VectorEnv
from rl_lightning.envs.spaces import OBSERVATION_KEY, TensorTree

#: The key of the privileged observation (the critic's).
STATE_KEY = "state"


class PrivilegedBandit(VectorEnv):
    """``horizon`` steps of a cued choice among ``num_actions``, every reward shifted by a hidden per-episode offset
    (module docstring). Episodes end by termination after ``horizon`` steps.

    Args:
        num_envs: copies stepped in lock-step.
        seed: the private generator's seed (offsets and cues).
        device: where the state lives.
        num_actions: cues and actions.
        horizon: steps per episode.
        offset_scale: the hidden offset's range, ``U(-offset_scale, offset_scale)``.
    """

    render_fps = 4
    can_draw = False
    _state_attributes = ("_offset", "_cue", "_t")

    def __init__(
        self,
        num_envs: int,
        seed: int | None = None,
        device: torch.device | str = "cpu",
        num_actions: int = 8,
        horizon: int = 4,
        offset_scale: float = 3.0,
    ):
        self._num_cues = check_int("num_actions", num_actions, 2)
        self.horizon = check_int("horizon", horizon, 1)
        self.offset_scale = check_float("offset_scale", offset_scale, 0.0, low_open=True)
        size = num_actions + 1
        self.single_observation_space = gym.spaces.Dict(
            {
                OBSERVATION_KEY: gym.spaces.Box(0.0, 1.0, (size,), np.float32),
                STATE_KEY: gym.spaces.Box(-1.0, 1.0, (size + 1,), np.float32),
            }
        )
        self.single_action_space = self._action_space(num_actions)
        super().__init__(num_envs, seed, device)
        self._offset = torch.zeros(num_envs, device=self.device)
        self._cue = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        self._t = torch.zeros(num_envs, dtype=torch.int64, device=self.device)

    def _action_space(self, num_actions: int) -> gym.spaces.Space:
        return gym.spaces.Discrete(num_actions)

    def _draw_offsets(self) -> Tensor:
        uniform = torch.rand(self.num_envs, generator=self.generator, device=self.device)
        return (2.0 * uniform - 1.0) * self.offset_scale

    def _draw_cues(self) -> Tensor:
        return torch.randint(self._num_cues, (self.num_envs,), generator=self.generator, device=self.device)

    def _observe(self) -> TensorTree:
        cue = torch.nn.functional.one_hot(self._cue, self._num_cues).float()
        time = (self._t.float() / self.horizon).unsqueeze(1)
        observation = torch.cat([cue, time], dim=1)
        state = torch.cat([observation, (self._offset / self.offset_scale).unsqueeze(1)], dim=1)
        return TensorTree({OBSERVATION_KEY: observation, STATE_KEY: state})

    def _reset_all(self) -> TensorTree:
        self._offset = self._draw_offsets()
        self._cue = self._draw_cues()
        self._t = torch.zeros_like(self._t)
        return self._observe()

    def _paid(self, actions: Tensor) -> Tensor:
        """What an action earns besides the offset: 1 for the cued action, else 0."""
        return (actions.long() == self._cue).float()

    def _step(self, actions: Tensor) -> tuple[TensorTree, Tensor, Tensor, Tensor, dict[str, Any]]:
        reward = self._offset + self._paid(actions)
        self._t = self._t + 1
        terminated = self._t == self.horizon
        # Every env draws a new cue and an offset each step (only the ended episodes keep the offset), so the
        # generator advances alike whoever ends.
        self._cue, offsets = self._draw_cues(), self._draw_offsets()
        final_obs = self._observe()  # an ended episode's last observation: t / horizon = 1, its offset
        self._offset = torch.where(terminated, offsets, self._offset)
        self._t = torch.where(terminated, 0, self._t)
        return self._observe(), reward, terminated, torch.zeros_like(terminated), {"final_observation": final_obs}


class PrivilegedBanditContinuous(PrivilegedBandit):
    """:class:`PrivilegedBandit` with one action in ``[-1, 1]`` (for SAC and TD3): cue ``k`` of ``num_actions``
    asks for ``target_k = -1 + 2k / (num_actions - 1)``, and an action ``a`` earns ``1 - |a - target_k|`` besides
    the offset."""

    def _action_space(self, num_actions: int) -> gym.spaces.Box:
        return gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def _paid(self, actions: Tensor) -> Tensor:
        target = -1.0 + 2.0 * self._cue.float() / (self._num_cues - 1)
        return 1.0 - (actions.reshape(-1) - target).abs()
