"""The networks: plain MLPs from a flat observation to one output per action."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from torch import Tensor, nn


def _mlp(in_features: int, hidden_sizes: Sequence[int], out_features: int) -> nn.Sequential:
    sizes = [in_features, *hidden_sizes, out_features]
    layers: list[nn.Module] = []
    for i, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
        layers.append(nn.Linear(fan_in, fan_out))
        if i < len(sizes) - 2:  # no activation on the output: values and logits are unbounded
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def _check_shapes(obs_shape: Sequence[int], num_actions: int, hidden_sizes: Sequence[int]) -> None:
    if len(obs_shape) != 1:
        raise ValueError(f"obs_shape must be one-dimensional (a flat vector), got {tuple(obs_shape)}")
    if num_actions < 1:
        raise ValueError(f"num_actions must be >= 1, got {num_actions}")
    if any(int(size) < 1 for size in hidden_sizes):
        raise ValueError(f"hidden_sizes must all be >= 1, got {list(hidden_sizes)}")


class PolicyNetwork(nn.Module):
    """MLP from observations to action logits (Linear-ReLU-...-Linear).

    Args:
        obs_shape: ``(obs_dim,)``.
        num_actions: number of discrete actions.
        hidden_sizes: widths of the hidden layers.
    """

    def __init__(self, obs_shape: Sequence[int], num_actions: int, hidden_sizes: Sequence[int] = (120, 84)):
        super().__init__()
        _check_shapes(obs_shape, num_actions, hidden_sizes)
        self.layers = _mlp(obs_shape[0], hidden_sizes, num_actions)

    def forward(self, obs: Tensor) -> Tensor:
        """``(*batch, obs_dim)`` -> logits ``(*batch, num_actions)``."""
        return self.layers(obs)


class QNetwork(nn.Module):
    """MLP from observations to one Q-value per action (10,934 parameters for CartPole).

    Args:
        obs_shape: ``(obs_dim,)``.
        num_actions: number of discrete actions.
        hidden_sizes: widths of the hidden layers.
    """

    def __init__(self, obs_shape: Sequence[int], num_actions: int, hidden_sizes: Sequence[int] = (120, 84)):
        super().__init__()
        _check_shapes(obs_shape, num_actions, hidden_sizes)
        self.layers = _mlp(obs_shape[0], hidden_sizes, num_actions)

    def forward(self, obs: Tensor) -> Tensor:
        """``(*batch, obs_dim)`` -> Q-values ``(*batch, num_actions)``."""
        return self.layers(obs)
