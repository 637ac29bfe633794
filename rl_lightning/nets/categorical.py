"""Discrete soft actor-critic (Christodoulou 2019): a categorical actor over ``Discrete`` actions and an ensemble of
critics that give one Q-value per action, ``Q_i(s, .)``. Vector, image and Dict observations (an action mask among
them: illegal actions get probability 0)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rl_lightning._checks import check_int, check_sizes
from rl_lightning.envs.base import space_kind
from rl_lightning.envs.spaces import ACTION_MASK_KEY, TensorTree
from rl_lightning.nets.continuous import EnsembleLinear
from rl_lightning.nets.encoders import as_observation_space, is_image_space, make_encoder
from rl_lightning.nets.heads import is_masked
from rl_lightning.sampling import masked_logits, sample_categorical, sample_masked_categorical


def _num_actions(action_space: gym.Space) -> int:
    if space_kind(action_space) != "discrete":
        raise ValueError(f"discrete SAC's networks need a Discrete action space, got {action_space!r}")
    return int(action_space.n)


class CategoricalActor(nn.Module):
    """Discrete SAC's policy: logits over the ``Discrete`` actions from an encoder (an MLP of ReLU layers, the
    Nature CNN for images, one encoder per key of a Dict) and a Linear layer.

    With an ``"action_mask"`` in the observations the logits of illegal actions are ``-inf``: they are never sampled
    nor picked greedily, and :meth:`policy` gives them probability 0.

    Args:
        observation_space: a ``Box`` (vector or image) or a flat ``Dict`` of ``Box`` leaves.
        action_space: a ``Discrete``.
        hidden_sizes: the MLP's hidden widths (each vector key's, for a Dict).
    """

    def __init__(
        self,
        observation_space: gym.spaces.Box | gym.spaces.Dict,
        action_space: gym.spaces.Discrete,
        hidden_sizes: Sequence[int] = (256, 256),
    ):
        super().__init__()
        observation_space = as_observation_space(observation_space)
        self.trunk, num_features = make_encoder(observation_space, hidden_sizes)
        self.logits = nn.Linear(num_features, _num_actions(action_space))
        #: Whether the logits are masked with the observations' ``"action_mask"``.
        self.masked = is_masked(observation_space)
        self.check_masks = True  # acting checks that every row has a legal action (off in an export, in the loss)

    def forward(self, obs: Tensor | TensorTree) -> Tensor:
        """float32 logits ``(batch, num_actions)``, ``-inf`` at illegal actions."""
        logits = self.logits(self.trunk(obs)).float()
        if not self.masked:
            return logits
        return masked_logits(logits, obs[ACTION_MASK_KEY], self.check_masks)

    def policy(self, obs: Tensor | TensorTree) -> tuple[Tensor, Tensor]:
        """pi(.|s) and log pi(.|s), each float32 ``(batch, num_actions)``, differentiable in the actor's parameters,
        for the losses' expectations over actions: an illegal action has probability 0 and log-probability 0 (so
        that ``pi * log pi`` is 0 there, not NaN, also in the gradient). A row whose mask has no legal action (a
        terminal state's) is taken as if every action were legal: its numbers stay finite, and the target sets its
        value to 0 (:func:`rl_lightning.discrete_sac.discrete_sac_losses`). No mask check: no read back."""
        logits = self.logits(self.trunk(obs)).float()
        if not self.masked:
            log_probs = F.log_softmax(logits, dim=-1)
            return log_probs.exp(), log_probs
        legal = obs[ACTION_MASK_KEY].bool()
        legal = legal | ~legal.any(dim=-1, keepdim=True)
        log_probs = F.log_softmax(logits.masked_fill(~legal, float("-inf")), dim=-1)
        return log_probs.exp(), log_probs.masked_fill(~legal, 0.0)

    def sample(self, obs: Tensor | TensorTree, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """int64 actions ``(batch,)`` drawn from pi(.|s) with ``generator`` (legal ones only) and their
        log-probabilities ``(batch,)``."""
        logits = self(obs)
        return (sample_masked_categorical if self.masked else sample_categorical)(logits, generator)

    def mode(self, obs: Tensor | TensorTree) -> Tensor:
        """The greedy action: the argmax of the (masked) logits, int64 ``(batch,)``."""
        return self(obs).argmax(dim=-1)


class DiscreteCriticEnsemble(nn.Module):
    """``num_critics`` independent Q(s, .) networks, each giving one value per ``Discrete`` action, evaluated
    together. A vector observation goes through MLPs of :class:`EnsembleLinear` layers (one batched product per
    layer for all critics, as :class:`CriticEnsemble`); an image or a Dict through one encoder per critic (the
    Nature CNN, one encoder per key), then one ``EnsembleLinear`` head to the Q-values.

    Args:
        observation_space: a ``Box`` (vector or image) or a flat ``Dict`` of ``Box`` leaves.
        action_space: a ``Discrete``.
        num_critics: ensemble members (2: clipped double Q).
        hidden_sizes: each critic's hidden widths (ReLU).
    """

    def __init__(
        self,
        observation_space: gym.spaces.Box | gym.spaces.Dict,
        action_space: gym.spaces.Discrete,
        num_critics: int = 2,
        hidden_sizes: Sequence[int] = (256, 256),
    ):
        super().__init__()
        observation_space = as_observation_space(observation_space)
        self.num_critics = check_int("num_critics", num_critics, 1)
        hidden_sizes = check_sizes("hidden_sizes", hidden_sizes)
        num_actions = _num_actions(action_space)
        if isinstance(observation_space, gym.spaces.Box) and not is_image_space(observation_space):
            self.obs_dims: int | None = len(observation_space.shape)
            self.encoders = None
            sizes = [math.prod(observation_space.shape), *hidden_sizes, num_actions]
        else:
            self.obs_dims = None
            encoders = [make_encoder(observation_space, hidden_sizes) for _ in range(num_critics)]
            self.encoders = nn.ModuleList(encoder for encoder, _ in encoders)
            sizes = [encoders[0][1], num_actions]
        self.layers = nn.ModuleList(EnsembleLinear(num_critics, a, b) for a, b in itertools.pairwise(sizes))

    def forward(self, obs: Tensor | TensorTree) -> Tensor:
        """Q-values ``(num_critics, batch, num_actions)``, float32."""
        if self.encoders is None:
            x = obs.flatten(start_dim=obs.dim() - self.obs_dims).float()
        else:
            x = torch.stack([encoder(obs).float() for encoder in self.encoders])
        for index, layer in enumerate(self.layers):
            x = layer(x)
            if index < len(self.layers) - 1:
                x = torch.relu(x)
        return x.float()
