"""Continuous control, off-policy: SAC's squashed Gaussian actor, TD3's deterministic actor, and the ensembles
of Q(s, a) critics both use (one batched matmul per layer for all critics)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from rl_lightning._checks import check_int, check_sizes
from rl_lightning.envs.spaces import ACTION_MASK_KEY, TensorTree
from rl_lightning.nets.encoders import VectorEncoder, as_observation_space, is_image_space
from rl_lightning.nets.heads import _LOG_SQRT_2PI


def _box_bounds(action_space: gym.spaces.Box) -> tuple[Tensor, Tensor]:
    """``(scale, bias)`` of the affine map from [-1, 1] to the finite bounds of ``action_space``."""
    if not isinstance(action_space, gym.spaces.Box):
        raise ValueError(f"the action space must be a Box, got {action_space!r}")
    low = torch.as_tensor(action_space.low, dtype=torch.float32)
    high = torch.as_tensor(action_space.high, dtype=torch.float32)
    if not (torch.isfinite(low).all() and torch.isfinite(high).all()):
        raise ValueError(
            f"a squashed (tanh) actor needs finite action bounds, got {action_space!r}: rescale the env's actions "
            "(gymnasium.wrappers.RescaleAction) or use PPOModule / VPGModule, whose Gaussian is unbounded"
        )
    largest = float(torch.maximum(low.abs().max(), high.abs().max()))
    if largest > _MAX_ACTION_BOUND:
        # The critics take the actions as inputs and the losses square what grows with them: past
        # sqrt(float32 max) such a square is infinite, the first update NaN.
        raise ValueError(
            f"a squashed (tanh) actor's action bounds must be within +-{_MAX_ACTION_BOUND:.2g}, got {largest:.3g} "
            f"in {action_space!r}: float32 overflows at actions that large; rescale the env's actions to [-1, 1] "
            "(gymnasium.wrappers.RescaleAction)"
        )
    return (high - low) / 2, (high + low) / 2


_MAX_ACTION_BOUND = math.sqrt(torch.finfo(torch.float32).max)  # about 1.8e19


class FlatKeys(nn.Module):
    """A Dict observation's keys as one vector: each leaf flattened and cast to float32, concatenated in the space's
    order, ``(*batch, size)`` (SAC's and TD3's networks read vectors; an asymmetric actor-critic gives each network
    its own keys). The action mask is not a feature; image leaves are refused by name.

    Args:
        observation_space: a ``Dict`` of vector ``Box`` leaves.
    """

    def __init__(self, observation_space: gym.spaces.Dict):
        super().__init__()
        self.shapes = {
            key: tuple(leaf.shape) for key, leaf in observation_space.spaces.items() if key != ACTION_MASK_KEY
        }
        images = [key for key in self.shapes if is_image_space(observation_space.spaces[key])]
        if images or not self.shapes:
            raise ValueError(
                f"SAC's and TD3's networks read vector keys, got {observation_space!r}: image keys {images} go to "
                "PPOModule, VPGModule or DQNModule (their CNN encoder); or leave them out with actor_keys / critic_keys"
            )
        self.size = sum(math.prod(shape) for shape in self.shapes.values())

    def forward(self, obs: TensorTree) -> Tensor:
        return torch.cat(
            [obs[key].flatten(start_dim=obs[key].dim() - len(shape)).float() for key, shape in self.shapes.items()],
            dim=-1,
        )


def flat_keys_encoder(observation_space: gym.spaces.Dict, hidden_sizes: Sequence[int]) -> tuple[nn.Sequential, int]:
    """A Dict observation's vector keys concatenated (:class:`FlatKeys`), then an MLP of ``hidden_sizes`` ReLU layers,
    and its number of features: every layer reads every key (a goal-conditioned policy's state and goal meet in the
    first layer, not only after an MLP per key as in ``MultiInputEncoder``)."""
    flat = FlatKeys(observation_space)
    trunk = VectorEncoder((flat.size,), check_sizes("hidden_sizes", hidden_sizes), "relu", torch.float32)
    return nn.Sequential(flat, trunk), trunk.num_features


def _vector_trunk(
    observation_space: gym.spaces.Box | gym.spaces.Dict, hidden_sizes: Sequence[int]
) -> tuple[nn.Sequential, int]:
    """Flatten and an MLP of ReLU layers for a vector observation (images are refused by name); a Dict
    observation's keys concatenated first (:class:`FlatKeys`)."""
    if isinstance(observation_space, gym.spaces.Dict):
        return flat_keys_encoder(observation_space, hidden_sizes)
    if is_image_space(observation_space):
        raise ValueError(
            f"SAC and TD3 take vector observations, got the image space {observation_space!r}: use DQNModule, "
            "PPOModule or VPGModule (their CNN encoder) for pixels"
        )
    hidden_sizes = check_sizes("hidden_sizes", hidden_sizes)
    obs_dtype = torch.uint8 if observation_space.dtype == np.uint8 else torch.float32
    trunk = VectorEncoder(observation_space.shape, hidden_sizes, "relu", obs_dtype)
    return trunk, trunk.num_features


class SquashedGaussianActor(nn.Module):
    """SAC's policy: a Gaussian with a state-dependent std, squashed by tanh into the ``Box`` bounds.

    ``u ~ N(mean(s), std(s))``, ``a = bias + scale * tanh(u)``; the log-probability carries the
    change of variables, ``log pi(a|s) = log N(u) - sum log(scale * (1 - tanh(u)^2) + 1e-6)``
    (CleanRL's form). The log-std is ``tanh``-squashed into ``log_std_bounds`` (smooth, no dead
    gradient at a clamp). Samples are reparameterised (``rsample``): the actor loss differentiates
    through them.

    Args:
        observation_space: a vector ``Box``, or a ``Dict`` of vector keys (:class:`FlatKeys`).
        action_space: a ``Box`` with finite bounds.
        hidden_sizes: the MLP's hidden widths (ReLU).
        log_std_bounds: ``(min, max)`` of the log-std.
    """

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box,
        hidden_sizes: Sequence[int] = (256, 256),
        log_std_bounds: tuple[float, float] = (-5.0, 2.0),
    ):
        super().__init__()
        scale, bias = _box_bounds(action_space)
        self.action_shape = tuple(action_space.shape)
        self.trunk, num_features = _vector_trunk(as_observation_space(observation_space), hidden_sizes)
        self.mean = nn.Linear(num_features, math.prod(self.action_shape))
        self.log_std = nn.Linear(num_features, math.prod(self.action_shape))
        self.log_std_min, self.log_std_max = (float(bound) for bound in log_std_bounds)
        self.register_buffer("action_scale", scale.flatten())
        self.register_buffer("action_bias", bias.flatten())

    def forward(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """The pre-squash Gaussian's mean and log-std, each ``(batch, action_dim)``, float32."""
        features = self.trunk(obs)
        log_std = torch.tanh(self.log_std(features).float())
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (log_std + 1)
        return self.mean(features).float(), log_std

    def _to_box(self, squashed: Tensor) -> Tensor:
        return (self.action_bias + self.action_scale * squashed).unflatten(-1, self.action_shape)

    def sample(
        self, obs: Tensor, generator: torch.Generator | None = None, noise: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Reparameterised actions ``(batch, *action_shape)`` in the bounds and their log-probabilities
        ``(batch,)`` (differentiable in the actor's parameters); ``noise``: the standard normal draws
        ``(batch, action size)`` to use (drawn from ``generator`` if None)."""
        mean, log_std = self(obs)
        if noise is None:
            noise = torch.randn(mean.shape, generator=generator, device=mean.device)
        pre_squash = mean + log_std.exp() * noise
        squashed = torch.tanh(pre_squash)
        gaussian = (-0.5 * noise.square() - log_std - _LOG_SQRT_2PI).sum(dim=-1)
        log_det = torch.log(self.action_scale * (1 - squashed.square()) + 1e-6).sum(dim=-1)
        return self._to_box(squashed), gaussian - log_det

    def mode(self, obs: Tensor) -> Tensor:
        """The greedy action: the squashed mean, in the bounds."""
        return self._to_box(torch.tanh(self(obs)[0]))


class DeterministicActor(nn.Module):
    """TD3's (and DDPG's) policy: ``a = bias + scale * tanh(mlp(s))``, in the ``Box`` bounds.

    Args:
        observation_space: a vector ``Box``, or a ``Dict`` of vector keys (:class:`FlatKeys`).
        action_space: a ``Box`` with finite bounds.
        hidden_sizes: the MLP's hidden widths (ReLU).
    """

    def __init__(
        self, observation_space: gym.spaces.Box, action_space: gym.spaces.Box, hidden_sizes: Sequence[int] = (256, 256)
    ):
        super().__init__()
        scale, bias = _box_bounds(action_space)
        self.action_shape = tuple(action_space.shape)
        self.trunk, num_features = _vector_trunk(as_observation_space(observation_space), hidden_sizes)
        self.head = nn.Linear(num_features, math.prod(self.action_shape))
        self.register_buffer("action_scale", scale.flatten())
        self.register_buffer("action_bias", bias.flatten())

    def forward(self, obs: Tensor) -> Tensor:
        """Actions ``(batch, *action_shape)`` in the bounds, float32."""
        squashed = torch.tanh(self.head(self.trunk(obs)).float())
        return (self.action_bias + self.action_scale * squashed).unflatten(-1, self.action_shape)

    def mode(self, obs: Tensor) -> Tensor:
        """The greedy action (the actor's output itself)."""
        return self(obs)


class EnsembleLinear(nn.Module):
    """``num_members`` independent Linear layers evaluated in one batched matrix product.

    Weights ``(num_members, in, out)``, each member initialised like ``nn.Linear`` (uniform in
    +-1/sqrt(in)). The input is shared ``(batch, in)`` or per member ``(num_members, batch, in)``;
    the output is ``(num_members, batch, out)``.
    """

    def __init__(self, num_members: int, in_features: int, out_features: int):
        super().__init__()
        bound = 1 / math.sqrt(in_features)
        self.weight = nn.Parameter(torch.empty(num_members, in_features, out_features).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(num_members, 1, out_features).uniform_(-bound, bound))

    def forward(self, x: Tensor, detach_params: bool = False) -> Tensor:
        weight, bias = (self.weight.detach(), self.bias.detach()) if detach_params else (self.weight, self.bias)
        if x.dim() == 2:
            x = x.unsqueeze(0).expand(weight.shape[0], -1, -1)
        return torch.baddbmm(bias, x, weight)


class CriticEnsemble(nn.Module):
    """``num_critics`` independent Q(s, a) networks (SAC's and TD3's twin critics by default), each an
    MLP over ``[flat obs, action]``, evaluated together: one batched product per layer, no Python
    loop over the critics (LeanRL's stacked parameters, as a grouped layer).

    Args:
        observation_space: a vector ``Box``, or a ``Dict`` of vector keys (:class:`FlatKeys`).
        action_space: a ``Box``.
        num_critics: ensemble members (2: clipped double Q; 1: DDPG).
        hidden_sizes: each critic's hidden widths (ReLU).
    """

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box,
        num_critics: int = 2,
        hidden_sizes: Sequence[int] = (256, 256),
    ):
        super().__init__()
        observation_space = as_observation_space(observation_space)
        #: A Dict observation's keys as one vector (its critics' keys), else None.
        self.flat = FlatKeys(observation_space) if isinstance(observation_space, gym.spaces.Dict) else None
        if self.flat is None and is_image_space(observation_space):
            raise ValueError(f"the critics take vector observations, got the image space {observation_space!r}")
        self.num_critics = check_int("num_critics", num_critics, 1)
        self.obs_dims = 0 if self.flat is not None else len(observation_space.shape)
        self.action_dims = len(action_space.shape)
        sizes = [
            (self.flat.size if self.flat is not None else math.prod(observation_space.shape))
            + math.prod(action_space.shape),
            *check_sizes("hidden_sizes", hidden_sizes),
            1,
        ]
        self.layers = nn.ModuleList(EnsembleLinear(num_critics, a, b) for a, b in itertools.pairwise(sizes))

    def forward(self, obs: Tensor, actions: Tensor, detach_params: bool = False) -> Tensor:
        """Q-values ``(num_critics, batch)`` of ``actions`` in ``obs``; ``detach_params`` evaluates
        them with the parameters detached (the actor's loss: gradients to the actions only)."""
        obs = self.flat(obs) if self.flat is not None else obs.flatten(start_dim=obs.dim() - self.obs_dims).float()
        x = torch.cat([obs, actions.flatten(start_dim=1).float()], -1)
        for index, layer in enumerate(self.layers):
            x = layer(x, detach_params)
            if index < len(self.layers) - 1:
                x = torch.relu(x)
        return x.squeeze(-1).float()
