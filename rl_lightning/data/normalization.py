"""Running statistics for observation normalisation and reward scaling (PPO's options).

Both are ``nn.Module``s whose statistics are buffers, so they travel with the module: in its
``state_dict`` (hence in checkpoints), to its device, and identical on every DDP rank (each update
all-reduces the batch's count, sum and sum of squares before it is applied).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from rl_lightning.envs.spaces import TensorTree
from rl_lightning.nets import is_image_space

#: Sums a tensor over all processes (identity in a single process).
Reduce = Callable[[Tensor], Tensor]


def _no_reduce(tensor: Tensor) -> Tensor:
    return tensor


class RunningMeanStd(nn.Module):
    """Mean and variance of everything seen so far (Chan et al.'s parallel update), in float64.

    Args:
        shape: shape of one sample.
        epsilon: the initial count (so the first update does not divide by zero), as in gymnasium.
    """

    def __init__(self, shape: Sequence[int] = (), epsilon: float = 1e-4):
        super().__init__()
        self.shape = tuple(shape)
        self.register_buffer("mean", torch.zeros(self.shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(self.shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(epsilon, dtype=torch.float64))

    @torch.no_grad()
    def update(self, samples: Tensor, reduce: Reduce = _no_reduce) -> None:
        """Add ``samples`` ``(batch, *shape)`` (of this process; ``reduce`` sums over processes)."""
        samples = samples.reshape(-1, *self.shape).to(torch.float64)
        count = torch.tensor([samples.shape[0]], dtype=torch.float64, device=samples.device)
        moments = reduce(torch.cat([count, samples.sum(0).flatten(), samples.square().sum(0).flatten()]))
        size = math.prod(self.shape)
        batch_count = moments[0]
        batch_mean = moments[1 : 1 + size].reshape(self.shape) / batch_count
        batch_var = moments[1 + size :].reshape(self.shape) / batch_count - batch_mean.square()
        total = self.count + batch_count
        delta = batch_mean - self.mean
        self.mean += delta * batch_count / total
        self.var.copy_(
            (
                self.var * self.count
                + batch_var.clamp(min=0) * batch_count
                + delta.square() * self.count * batch_count / total
            )
            / total
        )
        self.count.copy_(total)


class ObservationNormalizer(nn.Module):
    """``clip((obs - mean) / sqrt(var + eps), -clip, clip)`` with running statistics (gymnasium's
    ``NormalizeObservation``, updated once per rollout instead of per step).

    For a Dict observation only its vector keys (float32, not images) are normalised, each with
    its own statistics (``stats.<key>``); images and the action mask pass through unchanged, and a key the
    observation lacks (the critic's, for a policy that reads its ``actor_keys`` only) is left out.

    Args:
        obs_shape: shape of one observation, or a Dict observation space (``rl_lightning.envs.spaces``).
        clip: bound of the normalised values.
    """

    def __init__(self, obs_shape: Sequence[int] | gym.spaces.Dict, clip: float = 10.0, eps: float = 1e-8):
        super().__init__()
        if isinstance(obs_shape, gym.spaces.Dict):
            vector_keys = {
                key: leaf.shape
                for key, leaf in obs_shape.spaces.items()
                if leaf.dtype == np.float32 and not is_image_space(leaf)
            }
            self.stats: nn.Module = nn.ModuleDict({key: RunningMeanStd(shape) for key, shape in vector_keys.items()})
        else:
            self.stats = RunningMeanStd(obs_shape)
        self.clip = clip
        self.eps = eps

    def _normalize(self, stats: RunningMeanStd, obs: Tensor) -> Tensor:
        mean, std = stats.mean.float(), (stats.var + self.eps).sqrt().float()
        return ((obs.float() - mean) / std).clamp(-self.clip, self.clip)

    def forward(self, obs: Tensor | TensorTree) -> Tensor | TensorTree:
        """Normalised float32 observations (the statistics are not updated)."""
        if isinstance(self.stats, nn.ModuleDict):
            normalized = TensorTree(obs)
            for key, stats in self.stats.items():
                if key in obs:  # a policy of some keys (actor_keys) is handed those only
                    normalized[key] = self._normalize(stats, obs[key])
            return normalized
        return self._normalize(self.stats, obs)

    def update(self, obs: Tensor | TensorTree, reduce: Reduce = _no_reduce) -> None:
        if isinstance(self.stats, nn.ModuleDict):
            for key, stats in self.stats.items():
                stats.update(obs[key], reduce)
        else:
            self.stats.update(obs, reduce)


class RewardScaler(nn.Module):
    """Divide rewards by the running standard deviation of the discounted return (gymnasium's
    ``NormalizeReward``, updated once per rollout). The per-env discounted returns it tracks are
    the data source's state, passed in and returned.

    Args:
        gamma: the discount of the tracked returns.
        clip: bound of the scaled rewards.
    """

    def __init__(self, gamma: float, clip: float = 10.0, eps: float = 1e-8):
        super().__init__()
        self.stats = RunningMeanStd(())
        self.gamma = gamma
        self.clip = clip
        self.eps = eps

    def scale(
        self, rewards: Tensor, dones: Tensor, discounted: Tensor, reduce: Reduce = _no_reduce
    ) -> tuple[Tensor, Tensor]:
        """Scale a rollout's ``rewards`` ``(num_envs, num_steps)`` after adding its discounted returns
        to the statistics.

        Args:
            rewards: raw rewards; dones: bool, the steps that ended an episode.
            discounted: ``(num_envs,)`` each env's discounted return before the rollout.

        Returns:
            the scaled rewards and each env's discounted return after the rollout.
        """
        returns = torch.empty_like(rewards, dtype=torch.float64)
        running = discounted.to(torch.float64)
        keep = (~dones.bool()).to(torch.float64)
        for t in range(rewards.shape[1]):
            running = running * self.gamma + rewards[:, t]
            returns[:, t] = running
            running = running * keep[:, t]  # a new episode starts from 0
        self.stats.update(returns.flatten(), reduce)
        std = (self.stats.var + self.eps).sqrt().float()
        return (rewards.float() / std).clamp(-self.clip, self.clip), running
