"""Rainbow's pieces of a Q-network (``DQNModule(dueling=..., distributional=..., noisy=...)``): factorised Gaussian
noisy layers (Fortunato et al. 2018), a dueling head (Wang et al. 2016), categorical (C51, Bellemare et al. 2017) and
quantile (QR-DQN, Dabney et al. 2018) outputs per action, and ``RainbowQNetwork``, a ``QNetwork`` whose head is them.

Every head's ``forward`` gives Q-values ``(batch, num_actions)`` (C51: the expected value over the atoms; QR: the mean
of the quantiles), so acting, ``GreedyPolicy``, export and the Hub take a ``RainbowQNetwork`` as any ``QNetwork``;
``distribution`` gives what the distributional losses need. Noise is ON in ``forward`` (acting and learning) and
OFF (the mean weights) in ``mode``, the greedy action that evaluation and exports play.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rl_lightning.envs.base import space_kind
from rl_lightning.envs.spaces import ACTION_MASK_KEY
from rl_lightning.nets.encoders import as_action_space, as_observation_space, make_encoder
from rl_lightning.nets.heads import is_masked
from rl_lightning.nets.networks import QNetwork, _EncoderHeadNetwork
from rl_lightning.sampling import masked_logits

#: The kinds of ``distributional`` output.
DISTRIBUTIONS = (None, "c51", "qr")


def factorised_noise(size: int, generator: torch.Generator | None = None, device: torch.device | None = None) -> Tensor:
    """``f(x) = sgn(x) sqrt(|x|)`` of ``size`` standard normal draws (Fortunato et al. 2018, factorised noise)."""
    draws = torch.randn(size, generator=generator, device=device)
    return draws.sign() * draws.abs().sqrt()


class NoisyLinear(nn.Module):
    """A Linear layer with factorised Gaussian noise on its weights (Fortunato et al. 2018, section 3):

        y = (mu_w + sigma_w * eps_w) x + mu_b + sigma_b * eps_b,   eps_w = f(eps_out) f(eps_in)^T,  eps_b = f(eps_out)

    with ``mu ~ U[-1/sqrt(p), 1/sqrt(p)]`` and ``sigma = sigma_0 / sqrt(p)`` at init (``p``: input features). The noise
    vectors ``f(eps_in)``, ``f(eps_out)`` are buffers (in checkpoints, stacked by ``vmap`` over seeds), drawn anew by
    :meth:`reset_noise` from a generator the caller owns; zero until the first draw.

    Args:
        in_features, out_features: as ``nn.Linear``'s.
        sigma_0: the noise scale at init.
    """

    def __init__(self, in_features: int, out_features: int, sigma_0: float = 0.5):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        bound = 1.0 / math.sqrt(in_features)
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features).uniform_(-bound, bound))
        self.weight_sigma = nn.Parameter(torch.full((out_features, in_features), sigma_0 * bound))
        self.bias_mu = nn.Parameter(torch.empty(out_features).uniform_(-bound, bound))
        self.bias_sigma = nn.Parameter(torch.full((out_features,), sigma_0 * bound))
        self.register_buffer("input_noise", torch.zeros(in_features))
        self.register_buffer("output_noise", torch.zeros(out_features))

    @torch.no_grad()
    def reset_noise(self, generator: torch.Generator | None = None) -> None:
        """Draw ``f(eps_in)`` then ``f(eps_out)`` from ``generator`` (torch's global RNG if None)."""
        self.input_noise.copy_(factorised_noise(self.in_features, generator, self.input_noise.device))
        self.output_noise.copy_(factorised_noise(self.out_features, generator, self.output_noise.device))

    def forward(self, x: Tensor, noise: bool = True) -> Tensor:
        """``x`` ``(*batch, in_features)`` -> ``(*batch, out_features)``; ``noise=False``: the mean weights."""
        if not noise:
            return F.linear(x, self.weight_mu, self.bias_mu)
        weight = self.weight_mu + self.weight_sigma * torch.outer(self.output_noise, self.input_noise)
        return F.linear(x, weight, self.bias_mu + self.bias_sigma * self.output_noise)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"


class QHead(nn.Module):
    """Features -> per-action outputs, Q-values from them, and (``distributional``) the distribution.

    ``dueling`` (Wang et al. 2016, eq. 9): a value stream ``V`` ``(batch, 1, N)`` and an advantage stream ``A``
    ``(batch, num_actions, N)`` combined as ``V + A - mean_a A``; for C51 on the logits before the softmax (Hessel et
    al. 2018, eq. 2). ``N`` per action: 1 (a scalar Q), the atoms of C51 or the quantiles of QR.

    Args:
        num_features: the encoder's output width.
        num_actions: the number of actions.
        dueling: separate value and advantage streams.
        distributional: None (Q-values), ``"c51"`` (``num_atoms`` logits on the atoms in [v_min, v_max]) or
            ``"qr"`` (``num_quantiles`` quantiles at fractions (2i + 1) / 2N).
        num_atoms, v_min, v_max: C51's support.
        num_quantiles: QR's quantiles.
        noisy: its layers are :class:`NoisyLinear`.
        sigma_0: their noise scale at init.
    """

    def __init__(
        self,
        num_features: int,
        num_actions: int,
        dueling: bool = False,
        distributional: str | None = None,
        num_atoms: int = 51,
        v_min: float = -10.0,
        v_max: float = 10.0,
        num_quantiles: int = 200,
        noisy: bool = False,
        sigma_0: float = 0.5,
    ):
        super().__init__()
        if distributional not in DISTRIBUTIONS:
            raise ValueError(f"distributional must be one of None, 'c51', 'qr'; got {distributional!r}")
        self.num_actions, self.dueling, self.distributional, self.noisy = num_actions, dueling, distributional, noisy
        self.num_outputs = {None: 1, "c51": num_atoms, "qr": num_quantiles}[distributional]
        self.v_min, self.v_max = float(v_min), float(v_max)

        def layer(out_features: int) -> nn.Module:
            return NoisyLinear(num_features, out_features, sigma_0) if noisy else nn.Linear(num_features, out_features)

        # the per-action stream (the advantages when dueling) and the value stream
        self.action_stream = layer(num_actions * self.num_outputs)
        self.value_stream = layer(self.num_outputs) if dueling else None

    def _call(self, layer: nn.Module, features: Tensor, noise: bool) -> Tensor:
        return layer(features, noise) if self.noisy else layer(features)

    def outputs(self, features: Tensor, noise: bool = True) -> Tensor:
        """``(batch, num_actions, N)``: Q-values (N = 1), C51's logits or QR's quantiles."""
        outputs = self._call(self.action_stream, features, noise).unflatten(-1, (self.num_actions, self.num_outputs))
        if self.value_stream is None:
            return outputs
        value = self._call(self.value_stream, features, noise).unsqueeze(-2)
        return value + outputs - outputs.mean(dim=-2, keepdim=True)

    def distribution(self, features: Tensor, noise: bool = True) -> Tensor:
        """``(batch, num_actions, N)``: C51's log-probabilities over the atoms (float32), or QR's quantiles."""
        outputs = self.outputs(features, noise)
        return F.log_softmax(outputs.float(), dim=-1) if self.distributional == "c51" else outputs

    def support(self, device: torch.device | None = None) -> Tensor:
        """C51's atoms ``(num_atoms,)`` (made where they are used: no buffer, so Polyak averaging stays compiled)."""
        return torch.linspace(self.v_min, self.v_max, self.num_outputs, device=device)

    def expectation(self, distribution: Tensor) -> Tensor:
        """The mean of each ``distribution`` ``(..., N)`` (:meth:`distribution`'s): the expected value of the atoms
        (C51), the quantiles' mean (QR), the Q-value itself (N = 1)."""
        if self.distributional == "c51":
            return (distribution.exp() * self.support(distribution.device)).sum(dim=-1)
        return distribution.mean(dim=-1)

    def q_values(self, features: Tensor, noise: bool = True) -> Tensor:
        """Q-values ``(batch, num_actions)``, the means of :meth:`distribution`'s."""
        return self.expectation(self.distribution(features, noise))

    def forward(self, features: Tensor) -> Tensor:
        """Q-values with the noise on (acting and learning)."""
        return self.q_values(features)

    def reset_noise(self, generator: torch.Generator | None = None) -> None:
        """New noise in each noisy layer (the action stream's, then the value stream's), from ``generator``."""
        for layer in (self.action_stream, self.value_stream):
            if isinstance(layer, NoisyLinear):
                layer.reset_noise(generator)


class RainbowQNetwork(QNetwork):
    """A ``QNetwork`` (an encoder, then one head, as ``layers``) whose head is a :class:`QHead`: dueling,
    distributional and noisy as asked. ``forward`` gives Q-values with the noise on, ``mode`` the greedy action on the
    mean weights, ``distribution`` C51's log-probabilities or QR's quantiles ``(batch, num_actions, N)``.

    Args:
        observation_space: a ``Box`` (or an observation shape, taken as float32) or a Dict of them.
        action_space: a ``Discrete`` space (or the number of actions).
        hidden_sizes: widths of the default MLP encoder's hidden layers.
        network: your own encoder (observations -> features) instead of the default.
        dueling, distributional, num_atoms, v_min, v_max, num_quantiles, noisy, sigma_0: the :class:`QHead`'s.
    """

    def __init__(
        self,
        observation_space: gym.spaces.Box | gym.spaces.Dict | Sequence[int],
        action_space: gym.spaces.Discrete | int,
        hidden_sizes: Sequence[int] = (120, 84),
        network: nn.Module | None = None,
        dueling: bool = False,
        distributional: str | None = None,
        num_atoms: int = 51,
        v_min: float = -10.0,
        v_max: float = 10.0,
        num_quantiles: int = 200,
        noisy: bool = False,
        sigma_0: float = 0.5,
    ):
        observation_space, action_space = as_observation_space(observation_space), as_action_space(action_space)
        if space_kind(action_space) != "discrete":
            raise ValueError(f"a RainbowQNetwork needs a Discrete action space, got {action_space!r}")
        encoder, num_features = make_encoder(observation_space, hidden_sizes, network)
        head = QHead(
            num_features,
            int(action_space.n),
            dueling,
            distributional,
            num_atoms,
            v_min,
            v_max,
            num_quantiles,
            noisy,
            sigma_0,
        )
        _EncoderHeadNetwork.__init__(self, encoder, head)
        self.masked = is_masked(observation_space)
        self.check_masks = True

    def q_values(self, obs: Tensor, noise: bool = True) -> Tensor:
        """Q-values ``(batch, num_actions)``; ``noise=False``: on the mean weights."""
        return self.head.q_values(self.encoder(obs), noise)

    def distribution(self, obs: Tensor, noise: bool = True) -> Tensor:
        """``(batch, num_actions, N)``: C51's log-probabilities or QR's quantiles (:meth:`QHead.distribution`)."""
        return self.head.distribution(self.encoder(obs), noise)

    def mode(self, obs: Tensor) -> Tensor:
        """The greedy action on the mean weights (noise off): argmax Q, over the legal actions for a masked network."""
        q_values = self.q_values(obs, noise=False)
        if self.masked:
            q_values = masked_logits(q_values, obs[ACTION_MASK_KEY], check=self.check_masks)
        return q_values.argmax(dim=-1)

    def reset_noise(self, generator: torch.Generator | None = None) -> None:
        """New noise in every noisy layer, from ``generator`` (torch's global RNG if None)."""
        self.head.reset_noise(generator)
