"""Probe environments 1-5: tiny envs whose values and optimal policies are known exactly.

They isolate one part of an agent at a time (Andy Jones, "Debugging RL"):

============  =======  ======================  ==========================  ==================
env           actions  obs                     reward                      episode
============  =======  ======================  ==========================  ==================
Probe1-v0     1        [0]                     +1                          1 step
Probe2-v0     1        [-1] or [+1] at random  = obs                       1 step
Probe3-v0     1        [0] then [1]            0 then +1                   2 steps
Probe4-v0     2        [0]                     -1 for action 0, +1 for 1   1 step
Probe5-v0     2        [0] or [1] at random    +1 if action == obs else -1 1 step
============  =======  ======================  ==========================  ==================

So V(Probe1) = 1; V(Probe2, obs) = obs; V(Probe3) = [gamma, 1]; Q(Probe4) = [-1, 1];
Q(Probe5, obs=0) = [1, -1] and Q(Probe5, obs=1) = [-1, 1]. Every episode ends by termination
(a real terminal state), never by truncation.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from rl_lightning.envs.base import VectorEnv
from rl_lightning.envs.render import draw_probe


class _ProbeEnv(VectorEnv):
    """Shared machinery: a one-dimensional obs, a step counter, auto-reset on termination."""

    num_actions_: int = 1
    obs_low: float = 0.0
    obs_high: float = 0.0
    episode_length: int = 1
    render_fps = 4
    _state_attributes = ("_obs", "_t")

    def __init__(self, num_envs: int, seed: int | None = None, device: torch.device | str = "cpu"):
        self.single_observation_space = gym.spaces.Box(
            np.array([self.obs_low], dtype=np.float32), np.array([self.obs_high], dtype=np.float32)
        )
        self.single_action_space = gym.spaces.Discrete(self.num_actions_)
        super().__init__(num_envs, seed, device)
        self._obs = torch.zeros(num_envs, 1, dtype=torch.float32, device=self.device)
        self._t = torch.zeros(num_envs, dtype=torch.int64, device=self.device)

    def _initial_obs(self, count: int) -> Tensor:
        return torch.zeros(count, 1, dtype=torch.float32, device=self.device)

    def _reward(self, actions: Tensor) -> Tensor:
        raise NotImplementedError

    def _next_obs(self) -> Tensor:
        """Obs after a non-final step (only Probe3 has one)."""
        return self._obs

    def _reset_all(self) -> Tensor:
        self._obs = self._initial_obs(self.num_envs)
        self._t.zero_()
        return self._obs.clone()

    def _step(self, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, dict[str, Any]]:
        reward = self._reward(actions)
        self._t += 1
        terminated = self._t >= self.episode_length
        truncated = torch.zeros_like(terminated)
        final_obs = self._next_obs()
        fresh = self._initial_obs(self.num_envs)
        self._obs = torch.where(terminated.unsqueeze(1), fresh, final_obs)
        self._t = torch.where(terminated, 0, self._t)
        return self._obs.clone(), reward, terminated, truncated, {"final_observation": final_obs}

    def draw(self, obs: Tensor) -> Tensor:
        return draw_probe(obs)


class Probe1(_ProbeEnv):
    """One action, obs [0], one step, reward +1: V = 1."""

    def _reward(self, actions: Tensor) -> Tensor:
        return torch.ones(self.num_envs, dtype=torch.float32, device=self.device)


class Probe2(_ProbeEnv):
    """One action, obs [-1] or [+1] at random, one step, reward = obs: V(obs) = obs."""

    obs_low, obs_high = -1.0, 1.0

    def _initial_obs(self, count: int) -> Tensor:
        coin = torch.rand(count, 1, generator=self.generator, device=self.device) < 0.5
        return torch.where(coin, 1.0, -1.0).float()

    def _reward(self, actions: Tensor) -> Tensor:
        return self._obs[:, 0].clone()


class Probe3(_ProbeEnv):
    """One action, obs [0] then [1], two steps, reward 0 then +1: V = [gamma, 1]."""

    obs_high = 1.0
    episode_length = 2

    def _reward(self, actions: Tensor) -> Tensor:
        return (self._t == 1).float()

    def _next_obs(self) -> Tensor:
        return self._t.float().unsqueeze(1).clamp(max=1.0)


class Probe4(_ProbeEnv):
    """Two actions, obs [0], one step, reward -1 for action 0 and +1 for action 1: Q = [-1, 1]."""

    num_actions_ = 2

    def _reward(self, actions: Tensor) -> Tensor:
        return actions.float() * 2 - 1


class Probe5(_ProbeEnv):
    """Two actions, obs [0] or [1] at random, one step, +1 if action == obs else -1."""

    num_actions_ = 2
    obs_high = 1.0

    def _initial_obs(self, count: int) -> Tensor:
        return (torch.rand(count, 1, generator=self.generator, device=self.device) < 0.5).float()

    def _reward(self, actions: Tensor) -> Tensor:
        return torch.where(actions == self._obs[:, 0].long(), 1.0, -1.0).float()
