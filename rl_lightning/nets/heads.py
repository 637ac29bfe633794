"""Policy heads: features to a distribution. Categorical logits for ``Discrete`` actions (one categorical per
dimension for ``MultiDiscrete``, Bernoullis for ``MultiBinary``), a diagonal Gaussian with a state-independent
learned log-std for ``Box`` actions. Each head samples (with a given generator), scores actions
(log-probabilities), gives the entropy and the greedy action (argmax / the mean), in float32 also under autocast."""

from __future__ import annotations

import math
from collections.abc import Sequence

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rl_lightning.envs.base import space_kind
from rl_lightning.envs.spaces import (
    ACTION_MASK_KEY,
)
from rl_lightning.sampling import sample_categorical, sample_masked_categorical

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


class CategoricalHead(nn.Linear):
    """Logits over ``num_actions`` discrete actions (a Linear layer that also samples and scores).

    ``masked``: the logits of illegal actions are ``-inf`` (:func:`masked_logits`): sampling never
    picks them, and the entropy leaves them out (0 * log 0 = 0, no NaN, also in the gradient).
    """

    def __init__(self, num_features: int, num_actions: int, masked: bool = False):
        super().__init__(num_features, num_actions)
        self.masked = masked

    def sample(
        self, logits: Tensor, generator: torch.Generator | None = None, noise: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """int64 actions ``(*batch,)`` and their log-probabilities; ``noise``: the uniform draws ``(*batch, 1)``
        to use (unmasked heads; drawn from ``generator`` if None)."""
        if self.masked:
            if noise is not None:
                raise ValueError("a masked CategoricalHead draws its own numbers: pass noise=None")
            return sample_masked_categorical(logits, generator)
        return sample_categorical(logits, generator, noise)

    def log_prob(self, logits: Tensor, actions: Tensor) -> Tensor:
        log_probs = F.log_softmax(logits.float(), dim=-1)
        return log_probs.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self, logits: Tensor) -> Tensor:
        return categorical_entropy(logits, self.masked)

    def mode(self, logits: Tensor) -> Tensor:
        return logits.argmax(dim=-1)


def categorical_entropy(logits: Tensor, masked: bool = False) -> Tensor:
    """The entropy of each row's softmax; ``masked``: ``-inf`` logits (illegal actions) count 0."""
    log_probs = F.log_softmax(logits.float(), dim=-1)
    if masked:  # 0 * -inf would be NaN: the illegal actions' terms are set to 0 before the product
        log_probs = log_probs.masked_fill(torch.isneginf(logits), 0.0)
    return -(log_probs.exp() * log_probs).sum(dim=-1)


class MultiCategoricalHead(nn.Linear):
    """A ``MultiDiscrete(nvec)`` policy: one categorical per dimension, independent given the state.

    The logits of all dimensions are one ``(*batch, sum(nvec))`` tensor (an action mask has the same
    layout); log-probabilities and entropies are summed over dimensions, the greedy action is the
    argmax of each dimension.
    """

    def __init__(self, num_features: int, nvec: Sequence[int], masked: bool = False):
        self.nvec = [int(n) for n in nvec]
        super().__init__(num_features, sum(self.nvec))
        self.masked = masked

    def _split(self, logits: Tensor) -> tuple[Tensor, ...]:
        return torch.split(logits.float(), self.nvec, dim=-1)

    def sample(self, logits: Tensor, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """int64 actions ``(*batch, len(nvec))`` and their log-probabilities (summed)."""
        sample = sample_masked_categorical if self.masked else sample_categorical
        actions, logprobs = zip(*(sample(part, generator) for part in self._split(logits)), strict=True)
        return torch.stack(actions, dim=-1), torch.stack(logprobs, dim=-1).sum(dim=-1)

    def log_prob(self, logits: Tensor, actions: Tensor) -> Tensor:
        actions = actions.long()
        return sum(
            F.log_softmax(part, dim=-1).gather(-1, actions[..., i : i + 1]).squeeze(-1)
            for i, part in enumerate(self._split(logits))
        )

    def entropy(self, logits: Tensor) -> Tensor:
        return sum(categorical_entropy(part, self.masked) for part in self._split(logits))

    def mode(self, logits: Tensor) -> Tensor:
        return torch.stack([part.argmax(dim=-1) for part in self._split(logits)], dim=-1)


class BernoulliHead(nn.Linear):
    """A ``MultiBinary(n)`` policy: ``n`` independent Bernoullis with logits from the features.

    ``log pi(a) = sum_i a_i log sigmoid(l_i) + (1 - a_i) log sigmoid(-l_i)``, the entropy summed
    too, the greedy action ``p_i > 0.5`` (``l_i > 0``); actions are int64 ``(*batch, n)`` of 0 / 1.
    """

    def __init__(self, num_features: int, num_bits: int):
        super().__init__(num_features, num_bits)

    def sample(self, logits: Tensor, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        logits = logits.float()
        uniform = torch.rand(logits.shape, generator=generator, device=logits.device)
        actions = (uniform < torch.sigmoid(logits)).long()
        return actions, self.log_prob(logits, actions)

    def log_prob(self, logits: Tensor, actions: Tensor) -> Tensor:
        logits = logits.float()
        return -F.binary_cross_entropy_with_logits(logits, actions.float(), reduction="none").sum(dim=-1)

    def entropy(self, logits: Tensor) -> Tensor:
        logits = logits.float()
        p = torch.sigmoid(logits)
        return (F.binary_cross_entropy_with_logits(logits, p, reduction="none")).sum(dim=-1)

    def mode(self, logits: Tensor) -> Tensor:
        return (logits > 0).long()


def make_policy_head(num_features: int, action_space: gym.Space, masked: bool = False) -> nn.Module:
    """The head for ``action_space``: categorical, Gaussian, one categorical per dimension, or Bernoullis."""
    kind = space_kind(action_space)
    if kind == "discrete":
        return CategoricalHead(num_features, int(action_space.n), masked)
    if kind == "multi_discrete":
        return MultiCategoricalHead(num_features, action_space.nvec.tolist(), masked)
    if kind == "multi_binary":
        return BernoulliHead(num_features, int(action_space.shape[0]))
    return GaussianHead(num_features, action_space.shape)


def is_masked(observation_space: gym.Space) -> bool:
    """Whether observations of ``observation_space`` carry an ``"action_mask"``."""
    return isinstance(observation_space, gym.spaces.Dict) and ACTION_MASK_KEY in observation_space.spaces


class GaussianHead(nn.Linear):
    """A diagonal Gaussian: the mean from the features (a Linear layer), a learned log-std per
    action dimension that does not depend on the state (as in the common PPO implementations)."""

    def __init__(self, num_features: int, action_shape: Sequence[int], log_std_init: float = 0.0):
        super().__init__(num_features, math.prod(action_shape))
        self.action_shape = tuple(action_shape)
        self.log_std = nn.Parameter(torch.full(self.action_shape, float(log_std_init)))

    def forward(self, features: Tensor) -> Tensor:
        """The mean ``(*batch, *action_shape)``."""
        return super().forward(features).unflatten(-1, self.action_shape)

    def _sum_action_dims(self, value: Tensor) -> Tensor:
        return value.flatten(start_dim=value.dim() - len(self.action_shape)).sum(dim=-1)

    def sample(
        self, mean: Tensor, generator: torch.Generator | None = None, noise: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """float32 actions ``(*batch, *action_shape)`` (unclipped) and their log-probabilities; ``noise``: the
        standard normal draws (like the mean) to use (drawn from ``generator`` if None)."""
        mean = mean.float()
        if noise is None:
            noise = torch.randn(mean.shape, generator=generator, device=mean.device)
        actions = mean + self.log_std.float().exp() * noise
        return actions, self._sum_action_dims(-0.5 * noise.square() - self.log_std.float() - _LOG_SQRT_2PI)

    def log_prob(self, mean: Tensor, actions: Tensor) -> Tensor:
        log_std = self.log_std.float()
        z = (actions.float() - mean.float()) * torch.exp(-log_std)
        return self._sum_action_dims(-0.5 * z.square() - log_std - _LOG_SQRT_2PI)

    def entropy(self, mean: Tensor) -> Tensor:
        per_dim = 0.5 + _LOG_SQRT_2PI + self.log_std.float()
        return per_dim.sum().expand(mean.shape[: mean.dim() - len(self.action_shape)])

    def mode(self, mean: Tensor) -> Tensor:
        return mean.float()
