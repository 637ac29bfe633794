"""Role assignment: a tiny cooperative multi-agent env where only the agent id breaks the agents' symmetry.

Each step every agent of a scene picks one of ``num_agents`` roles (``Discrete(num_agents)``) and every agent
gets the team reward (number of distinct roles chosen) / ``num_agents``. Each agent sees the same cue, drawn
U(-1, 1)^2 per scene per step, so a shared policy can only tell the agents apart by their ``"agent_id"``: with
it the team earns 1 per step (8.0 per episode of 8 steps); without it the agents' choices are alike, and the
best a shared stochastic policy can expect is the uniform one's ``1 - (1 - 1/N)^N``-ish share of distinct
roles (for N = 3: 19/27 = 0.70 per step, 5.6 per episode). ``"state"`` is the cue and every agent's previous
role one-hot (zeros after a reset). Episodes are truncated after ``episode_length`` steps; none terminates.
The rows follow :class:`~rl_lightning.envs.multi_agent.MultiAgentVectorEnv` (agents as rows; no ``"active"``
key: agents never leave).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch
from torch import Tensor

from rl_lightning._checks import check_int
from rl_lightning.envs.multi_agent import MultiAgentVectorEnv, multi_agent_space
from rl_lightning.envs.spaces import TensorTree

CUE_SIZE = 2


class RoleAssignment(MultiAgentVectorEnv):
    """``num_scenes`` role-assignment scenes of ``num_agents`` agents (module docstring).

    Args:
        num_scenes: independent scenes (the env has ``num_scenes * num_agents`` rows).
        seed: the private generator's seed (the cues).
        device: where the state lives.
        num_agents: agents per scene, and roles to choose from, >= 2.
        episode_length: steps before a truncation, >= 1.
    """

    render_fps = 4
    _state_attributes = ("_cue", "_previous", "_t")

    def __init__(
        self,
        num_scenes: int,
        seed: int | None = None,
        device: torch.device | str = "cpu",
        num_agents: int = 3,
        episode_length: int = 8,
    ):
        check_int("num_agents", num_agents, 2)
        #: Steps per episode (all truncated).
        self.episode_length = check_int("episode_length", episode_length, 1)
        self.single_observation_space = multi_agent_space(CUE_SIZE, num_agents, CUE_SIZE + num_agents * num_agents)
        self.single_action_space = gym.spaces.Discrete(num_agents)
        super().__init__(num_scenes, [f"agent_{index}" for index in range(num_agents)], seed, device)
        self._cue = torch.zeros(self.num_scenes, CUE_SIZE, device=self.device)
        self._previous = torch.zeros(self.num_scenes, num_agents * num_agents, device=self.device)
        self._t = torch.zeros(self.num_scenes, dtype=torch.int64, device=self.device)

    @staticmethod
    def team_reward(roles: Tensor, num_roles: int) -> Tensor:
        """float32 ``(num_scenes,)``: the distinct roles among ``roles`` (int ``(num_scenes, num_agents)``) over
        ``num_roles``."""
        chosen = torch.nn.functional.one_hot(roles, num_roles).amax(dim=1)
        return chosen.sum(dim=1).float() / num_roles

    def _draw_cue(self) -> Tensor:
        return torch.rand(self.num_scenes, CUE_SIZE, generator=self.generator, device=self.device) * 2 - 1

    def _observe(self, cue: Tensor, previous: Tensor) -> TensorTree:
        obs = cue.unsqueeze(1).expand(self.num_scenes, self.num_agents, CUE_SIZE)
        return self._rows(obs, torch.cat([cue, previous], dim=1))

    def _reset_all(self) -> TensorTree:
        self._cue = self._draw_cue()
        self._previous = torch.zeros_like(self._previous)
        self._t = torch.zeros_like(self._t)
        return self._observe(self._cue, self._previous)

    def _step(self, actions: Tensor) -> tuple[TensorTree, Tensor, Tensor, Tensor, dict[str, Any]]:
        roles = actions.long().view(self.num_scenes, self.num_agents)
        reward = self.scene_rows(self.team_reward(roles, self.num_agents))
        previous = torch.nn.functional.one_hot(roles, self.num_agents).float().flatten(1)
        self._t = self._t + 1
        truncated = self._t >= self.episode_length
        # Two cues every step, whoever ends: the next step's, and a reset's (the generator advances alike).
        cue, reset_cue = self._draw_cue(), self._draw_cue()
        final_obs = self._observe(cue, previous)
        done = truncated.unsqueeze(1)
        self._cue = torch.where(done, reset_cue, cue)
        self._previous = torch.where(done, torch.zeros_like(previous), previous)
        self._t = torch.where(truncated, 0, self._t)
        truncated_rows = self.scene_rows(truncated)
        obs = self._observe(self._cue, self._previous)
        return obs, reward, torch.zeros_like(truncated_rows), truncated_rows, {"final_observation": final_obs}


def role_assignment_factory(
    num_envs: int, seed: int | None = None, device: torch.device | str = "cpu"
) -> RoleAssignment:
    """``"RoleAssignment-v0"``: :class:`RoleAssignment` with ``num_envs`` SCENES of 3 agents (``3 * num_envs`` rows)."""
    return RoleAssignment(num_envs, seed, device)
