"""Encoders for agents as rows (IPPO / MAPPO on a ``MultiAgentVectorEnv``): every row is one agent of one scene, its
observation a Dict with the agent's ``"obs"``, its one-hot ``"agent_id"`` and the scene's ``"state"``.

- Parameter sharing (the default, BenchMARL's ``share_policy_params=True``): one network for every agent; it reads
  the keys concatenated (:class:`~rl_lightning.nets.FlatKeys`), so the agent id meets the observation in the first
  layer and a shared policy can still give each agent its own role.
- Separate networks (:class:`SeparateAgentEncoders`): each agent its own MLP, picked by the row's agent id.
"""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import torch
from torch import Tensor, nn

from rl_lightning.envs.spaces import ACTIVE_KEY, AGENT_ID_KEY, TensorTree
from rl_lightning.nets.continuous import FlatKeys
from rl_lightning.nets.encoders import VectorEncoder


def agent_encoder(
    observation_space: gym.spaces.Dict,
    hidden_sizes: Sequence[int],
    activation: str,
    separate_agents: int | None = None,
) -> tuple[nn.Module, int]:
    """The encoder of one network of a multi-agent policy and its number of features: the Dict's vector keys
    concatenated, then an MLP of ``hidden_sizes`` and ``activation`` shared by every agent; with ``separate_agents``
    (the number of agents), one such MLP per agent (:class:`SeparateAgentEncoders`)."""
    if separate_agents is not None:
        encoder = SeparateAgentEncoders(observation_space, hidden_sizes, activation, separate_agents)
        return encoder, encoder.num_features
    flat = FlatKeys(observation_space)
    trunk = VectorEncoder((flat.size,), hidden_sizes, activation, torch.float32)
    return nn.Sequential(flat, trunk), trunk.num_features


class SeparateAgentEncoders(nn.Module):
    """One MLP per agent over the Dict's vector keys concatenated; each row gets its own agent's features.

    The features are placed in the agent's block of ``num_agents * width`` (zeros elsewhere), followed by the agent's
    one-hot: the head's Linear layer then has its own weights for every agent (its columns of that block) and its own
    bias (its one-hot column), so every agent has a separate network end to end; only the Linear's shared bias term,
    redundant with the per-agent one, is common. Every MLP runs on every row (``num_agents`` times the compute of a
    shared one: the agents of a scene are few).

    Args:
        observation_space: a Dict of vector leaves with the ``"agent_id"`` key.
        hidden_sizes: each MLP's hidden widths.
        activation: ``"tanh"`` or ``"relu"``.
        num_agents: the agents (the width of ``"agent_id"``).
    """

    def __init__(
        self, observation_space: gym.spaces.Dict, hidden_sizes: Sequence[int], activation: str, num_agents: int
    ):
        super().__init__()
        if AGENT_ID_KEY not in observation_space.spaces:
            raise ValueError(
                f"separate agent networks pick each row's network by its {AGENT_ID_KEY!r} key, but this network reads "
                f"only {sorted(observation_space.spaces)}: add {AGENT_ID_KEY!r} to its keys (actor_keys / critic_keys)"
            )
        self.flat = FlatKeys(observation_space)
        self.trunks = nn.ModuleList(
            VectorEncoder((self.flat.size,), hidden_sizes, activation, torch.float32) for _ in range(num_agents)
        )
        self.num_agents = num_agents
        self.num_features = num_agents * self.trunks[0].num_features + num_agents

    def forward(self, obs: TensorTree) -> Tensor:
        inputs = self.flat(obs)
        one_hot = obs[AGENT_ID_KEY].float()  # (*batch, num_agents)
        features = torch.stack([trunk(inputs) for trunk in self.trunks], dim=-2)  # (*batch, num_agents, width)
        placed = (features * one_hot.unsqueeze(-1)).flatten(start_dim=-2)
        return torch.cat([placed, one_hot], dim=-1)


def active_weights(obs: Tensor | TensorTree) -> Tensor | None:
    """The ``"active"`` key of a Dict observation as float weights ``(*batch,)`` (1: the agent is in its scene), or
    None where the observations have no such key (every entry counts)."""
    if isinstance(obs, dict) and ACTIVE_KEY in obs:
        return obs[ACTIVE_KEY].reshape(obs[ACTIVE_KEY].shape[:-1]).float()
    return None
