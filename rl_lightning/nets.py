"""Networks: an encoder per observation kind, a policy head per action space, and the two
networks the algorithms are built from (``PolicyNetwork``, ``QNetwork``).

- Encoders map observations ``(*batch, *obs_shape)`` to features ``(*batch, num_features)``:
  an MLP over the flattened observation by default, a Nature-DQN CNN for images (``(H, W)``,
  ``(H, W, C)``, ``(C, H, W)`` or ``(K, H, W, C)``, ``rl_lightning.envs.spaces.image_layout``; uint8
  pixels are scaled to [0, 1] inside the network, so buffers keep uint8), or any ``nn.Module``
  the user passes.
- Heads turn features into a distribution: categorical logits for ``Discrete`` actions, a
  diagonal Gaussian with a state-independent learned log-std for ``Box`` actions. Each head
  samples (with a given generator), scores actions (log-probabilities), gives the entropy and
  the greedy action (argmax / the mean). Everything is computed in float32, also under autocast.
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Sequence

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rl_lightning._checks import check_choice, check_int, check_sizes
from rl_lightning.deprecations import renamed_keywords
from rl_lightning.envs.base import space_kind
from rl_lightning.envs.spaces import (
    ACTION_MASK_KEY,
    IMAGE_LAYOUTS,
    MASK_CONVENTION,
    TensorTree,
    as_bool_mask,
    image_layout,
    zeros_like_space,
)

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
# Nature-DQN's convolutions need at least 36 pixels a side; smaller images get 3x3 ones.
_NATURE_MIN_SIZE = 36


#: The hidden-layer activations by name (``activation="tanh"``).
ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "tanh": nn.Tanh}


def mlp(
    in_features: int, hidden_sizes: Sequence[int], out_features: int | None = None, activation: str = "relu"
) -> nn.Sequential:
    """Linear-activation per hidden size, then (if ``out_features``) a last Linear without activation."""
    check_choice("activation", activation, ACTIVATIONS)
    sizes = [in_features, *hidden_sizes]
    layers: list[nn.Module] = []
    for fan_in, fan_out in itertools.pairwise(sizes):
        layers += [nn.Linear(fan_in, fan_out), ACTIVATIONS[activation]()]
    if out_features is not None:
        layers.append(nn.Linear(sizes[-1], out_features))
    return nn.Sequential(*layers)


def as_observation_space(space: gym.spaces.Box | gym.spaces.Dict | Sequence[int]) -> gym.spaces.Box | gym.spaces.Dict:
    """A gymnasium ``Box`` or (flat, of ``Box`` leaves) ``Dict``, or a shape taken as an unbounded float32 ``Box``."""
    if isinstance(space, gym.spaces.Box):
        return space
    if isinstance(space, gym.spaces.Dict):
        for key, leaf in space.spaces.items():
            if not isinstance(leaf, gym.spaces.Box):
                raise ValueError(
                    f"a Dict observation_space must have Box leaves (rl_lightning.envs.spaces.leaf_space), "
                    f"got {leaf!r} for {key!r}"
                )
        return space
    if isinstance(space, gym.Space):
        raise ValueError(f"observation_space must be a Box or a Dict of Boxes, got {space!r}")
    return gym.spaces.Box(-np.inf, np.inf, tuple(int(size) for size in space), dtype=np.float32)


def as_action_space(space: gym.Space | int) -> gym.Space:
    """A gymnasium ``Discrete``, ``Box``, ``MultiDiscrete`` or ``MultiBinary``, or an int taken as ``Discrete(n)``."""
    if isinstance(space, bool) or not isinstance(space, (int, gym.Space)):
        raise TypeError(
            f"action_space must be a gymnasium Discrete, Box, MultiDiscrete or MultiBinary space (or an int n), "
            f"got {space!r}"
        )
    if isinstance(space, int):
        if space < 1:
            raise ValueError(f"the number of actions must be >= 1, got {space}")
        return gym.spaces.Discrete(space)
    space_kind(space)  # a ValueError for other spaces
    return space


def is_image_space(space: gym.spaces.Box) -> bool:
    """An image observation (:func:`rl_lightning.envs.spaces.image_layout`: uint8 ``(H, W)``,
    ``(H, W, C)``, ``(C, H, W)``, ``(K, H, W, C)``, or float32 ``(H, W, C)`` / ``(C, H, W)``)."""
    return image_layout(space) is not None


class _ToFloat(nn.Module):
    def forward(self, obs: Tensor) -> Tensor:
        return obs.float()


class VectorEncoder(nn.Sequential):
    """Flatten the observation, then Linear-activation layers of ``hidden_sizes``.

    A plain ``nn.Sequential`` (a float conversion and a flatten only where the observation needs
    them): on the acting path every nested module call costs a few microseconds.

    Args:
        obs_shape: shape of one observation.
        hidden_sizes: widths of the hidden layers (empty: the flat observation is the feature).
        activation: ``"relu"`` or ``"tanh"``.
        obs_dtype: the observations' dtype (anything but float32 is converted).
    """

    def __init__(
        self,
        obs_shape: Sequence[int],
        hidden_sizes: Sequence[int] = (120, 84),
        activation: str = "relu",
        obs_dtype: torch.dtype = torch.float32,
    ):
        layers: list[nn.Module] = []
        if obs_dtype != torch.float32:
            layers.append(_ToFloat())
        if len(obs_shape) != 1:
            layers.append(nn.Flatten(start_dim=-len(obs_shape)))
        super().__init__(*layers, *mlp(math.prod(obs_shape), hidden_sizes, activation=activation))
        self.num_features = hidden_sizes[-1] if hidden_sizes else math.prod(obs_shape)


class ImageEncoder(nn.Module):
    """The Nature-DQN CNN (32 8x8/4, 64 4x4/2, 64 3x3/1 convolutions, a 512-unit layer) for images
    of at least 36 pixels a side; two 3x3 convolutions (16, 32) for smaller images.

    uint8 pixels are scaled to [0, 1] inside (so rollouts, buffers and exported policies take
    uint8); float images are taken as they are. Every layout becomes ``(N, C, H, W)`` in ``forward``:
    ``(K, H, W, C)`` frames are folded into ``K * C`` channels (frame by frame).

    Args:
        obs_shape: ``(H, W)`` (one channel), ``(H, W, C)`` (channels last, gymnasium's layout),
            ``(C, H, W)`` (a frame stack) or ``(K, H, W, C)`` (a stack of K frames).
        layout: ``"HW"``, ``"HWC"``, ``"CHW"`` or ``"KHWC"``; None: read from the shape as for a uint8
            observation (:func:`rl_lightning.envs.spaces.image_layout`, a ``ValueError`` where it cannot be told).
    """

    def __init__(self, obs_shape: Sequence[int], layout: str | None = None):
        super().__init__()
        self.input_shape = tuple(int(size) for size in obs_shape)
        if layout is None:
            if len(self.input_shape) not in (2, 3, 4):
                raise ValueError(
                    f"an image observation must be (H, W), (H, W, C), (C, H, W) or (K, H, W, C), got {self.input_shape}"
                )
            try:
                layout = image_layout(gym.spaces.Box(0, 255, self.input_shape, np.uint8))
            except ValueError as error:
                message = f"{error}; or pass ImageEncoder(obs_shape, layout=...), one of {IMAGE_LAYOUTS}"
                raise ValueError(message) from None
        check_choice("layout", layout, IMAGE_LAYOUTS)
        if len(layout) != len(self.input_shape):
            raise ValueError(f"the layout {layout!r} needs a rank-{len(layout)} obs_shape, got {self.input_shape}")
        #: The observation's layout (``"HW"``, ``"HWC"``, ``"CHW"`` or ``"KHWC"``).
        self.layout = layout
        sizes = dict(zip(layout, self.input_shape, strict=True))
        channels, height, width = sizes.get("K", 1) * sizes.get("C", 1), sizes["H"], sizes["W"]
        #: The shape the convolutions see, ``(C, H, W)``.
        self.conv_shape = (channels, height, width)
        if min(height, width) >= _NATURE_MIN_SIZE:
            convs = [(32, 8, 4), (64, 4, 2), (64, 3, 1)]
        else:
            convs = [(16, 3, 1), (32, 3, 1)]
        layers: list[nn.Module] = []
        for out_channels, kernel, stride in convs:
            layers += [nn.Conv2d(channels, out_channels, kernel, stride), nn.ReLU()]
            channels = out_channels
        self.convs = nn.Sequential(*layers, nn.Flatten())
        with torch.no_grad():
            flat = self.convs(torch.zeros(1, *self.conv_shape))
        self.num_features = 512
        self.linear = nn.Sequential(nn.Linear(flat.shape[1], self.num_features), nn.ReLU())

    def forward(self, obs: Tensor) -> Tensor:
        """``(*batch, *obs_shape)`` -> ``(*batch, 512)``."""
        batch_shape = obs.shape[: obs.dim() - len(self.input_shape)]
        pixels = obs.reshape(-1, *self.input_shape)
        # The only place images become float: uint8 end to end before it.
        pixels = pixels.float() / 255.0 if pixels.dtype == torch.uint8 else pixels.float()
        if self.layout == "HW":
            pixels = pixels.unsqueeze(1)
        elif self.layout == "HWC":
            pixels = pixels.permute(0, 3, 1, 2)
        elif self.layout == "KHWC":
            pixels = pixels.permute(0, 1, 4, 2, 3).reshape(-1, *self.conv_shape)
        return self.linear(self.convs(pixels)).reshape(*batch_shape, self.num_features)


class MultiInputEncoder(nn.Module):
    """One encoder per key of a Dict observation, their features concatenated (SB3's
    ``CombinedExtractor``): the CNN for an image key, an MLP of ``hidden_sizes`` for any other. The
    ``"action_mask"`` key is not a feature: the policy masks its logits with it.

    Args:
        observation_space: a flat ``Dict`` of ``Box`` leaves (``rl_lightning.envs.spaces``).
        hidden_sizes: each vector key's MLP.
        activation: ``"relu"`` or ``"tanh"``.
    """

    def __init__(
        self, observation_space: gym.spaces.Dict, hidden_sizes: Sequence[int] = (64, 64), activation: str = "relu"
    ):
        super().__init__()
        encoders: dict[str, nn.Module] = {}
        for key, leaf in observation_space.spaces.items():
            if key == ACTION_MASK_KEY:
                continue
            if is_image_space(leaf):
                encoders[key] = ImageEncoder(leaf.shape, image_layout(leaf))
            else:
                dtype = torch.float32 if leaf.dtype == np.float32 else torch.uint8
                encoders[key] = VectorEncoder(leaf.shape, hidden_sizes, activation, dtype)
        if not encoders:
            raise ValueError(f"a Dict observation needs a key besides {ACTION_MASK_KEY!r}, got {observation_space!r}")
        self.encoders = nn.ModuleDict(encoders)
        self.num_features = sum(encoder.num_features for encoder in encoders.values())

    def forward(self, obs: TensorTree) -> Tensor:
        """A dict of ``(*batch, *leaf_shape)`` tensors -> ``(*batch, num_features)``."""
        return torch.cat([encoder(obs[key]).float() for key, encoder in self.encoders.items()], dim=-1)


def make_encoder(
    observation_space: gym.spaces.Box | gym.spaces.Dict,
    hidden_sizes: Sequence[int] = (120, 84),
    network: nn.Module | None = None,
    activation: str = "relu",
) -> tuple[nn.Module, int]:
    """The encoder for ``observation_space`` and its number of features.

    ``network`` (any ``nn.Module`` mapping ``(batch, *obs_shape)``, or a dict of such tensors for a
    Dict space, to ``(batch, num_features)``) is used as given; otherwise a Dict gets a
    :class:`MultiInputEncoder`, images an :class:`ImageEncoder`, anything else a
    :class:`VectorEncoder` of ``hidden_sizes`` and ``activation``.
    """
    if network is not None:
        if not isinstance(network, nn.Module):
            raise TypeError(f"network must be a torch.nn.Module, got {type(network).__name__}")
        return network, _num_features(network, observation_space)
    hidden_sizes = check_sizes("hidden_sizes", hidden_sizes)
    if isinstance(observation_space, gym.spaces.Dict):
        encoder = MultiInputEncoder(observation_space, hidden_sizes, activation)
        return encoder, encoder.num_features
    obs_shape = tuple(observation_space.shape)
    if is_image_space(observation_space):
        encoder: nn.Module = ImageEncoder(obs_shape, image_layout(observation_space))
    else:
        obs_dtype = torch.uint8 if observation_space.dtype == np.uint8 else torch.float32
        encoder = VectorEncoder(obs_shape, hidden_sizes, activation, obs_dtype)
    return encoder, encoder.num_features


def _num_features(network: nn.Module, observation_space: gym.spaces.Box | gym.spaces.Dict) -> int:
    """The width of ``network``'s output, from one forward pass of a zero observation."""
    param = next(network.parameters(), None)
    device = param.device if param is not None else "cpu"
    if isinstance(observation_space, gym.spaces.Dict):
        described = (
            "a dict of tensors ("
            + ", ".join(
                f"{key!r}: (batch, {', '.join(map(str, leaf.shape))})" for key, leaf in observation_space.spaces.items()
            )
            + ")"
        )
    else:
        described = f"(batch, {', '.join(map(str, observation_space.shape))})"
    with torch.no_grad():
        try:
            features = network(zeros_like_space(observation_space, 2, device))
        except (RuntimeError, KeyError, TypeError) as error:
            raise ValueError(
                f"network must map observations {described} to features (batch, num_features); it failed on a "
                f"batch of 2: {error!r}"
            ) from error
    if not isinstance(features, Tensor) or features.dim() != 2 or features.shape[0] != 2:
        shape = tuple(features.shape) if isinstance(features, Tensor) else type(features).__name__
        raise ValueError(
            f"network must map observations {described} to features (batch, num_features); for a batch of 2 it "
            f"returned {shape}"
        )
    return int(features.shape[1])


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


def masked_logits(
    logits: Tensor, action_mask: Tensor, check: bool = False, nvec: Sequence[int] | None = None
) -> Tensor:
    """``logits`` with ``-inf`` where ``action_mask`` (bool, the same shape; True = legal) is False.

    Args:
        check: raise ``ValueError`` if a row (of each dimension's part for a MultiDiscrete mask,
            ``nvec``) has no legal action, or if a mask that is not bool has values other than 0 and 1
            (:func:`~rl_lightning.envs.spaces.as_bool_mask`): reads the mask back (a device sync).
    """
    if check and action_mask.dtype != torch.bool:  # 0 / 1 read as False / True, any other value refused
        action_mask = as_bool_mask(action_mask)
    action_mask = action_mask.bool()
    if check:
        empty = rows_without_legal_action(action_mask, nvec)
        if bool(empty.any()):
            rows = empty.flatten().nonzero().flatten().tolist()
            raise ValueError(
                f"the action mask has no legal action in row(s) {rows[:8]}"
                f"{' (in one of its dimensions)' if nvec is not None else ''}: at least one action must be True; "
                f"{MASK_CONVENTION}"
            )
    return logits.float().masked_fill(~action_mask, float("-inf"))


def rows_without_legal_action(action_mask: Tensor, nvec: Sequence[int] | None = None) -> Tensor:
    """bool ``(*batch,)``: the rows of a bool mask ``(*batch, n)`` with no legal action (in one of the
    dimensions ``nvec`` of a MultiDiscrete mask). No read back: the caller decides when to sync."""
    parts = torch.split(action_mask, list(nvec), dim=-1) if nvec is not None else (action_mask,)
    return torch.stack([~part.any(dim=-1) for part in parts], dim=-1).any(dim=-1)


def sample_masked_categorical(logits: Tensor, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """:func:`sample_categorical` for logits with ``-inf`` at illegal actions: the first legal action
    whose cumulative probability reaches the uniform draw (the last legal one if rounding leaves the
    total below it), so an illegal action is never drawn, even at a draw of exactly 0 or near 1."""
    log_probs = F.log_softmax(logits.float(), dim=-1)
    legal = ~torch.isneginf(logits)
    cdf = log_probs.exp().cumsum(dim=-1)
    uniform = torch.rand((*cdf.shape[:-1], 1), generator=generator, device=logits.device)
    positions = torch.arange(logits.shape[-1], device=logits.device)
    last_legal = torch.where(legal, positions, -1).amax(dim=-1, keepdim=True)
    hit = legal & ((cdf >= uniform) | (positions == last_legal))
    actions = hit.int().argmax(dim=-1)  # the first True
    return actions, log_probs.gather(-1, actions.unsqueeze(-1)).squeeze(-1)


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


def sample_categorical(
    logits: Tensor, generator: torch.Generator | None = None, uniform: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Sample one action per row of ``logits`` from its softmax, with the uniform draws ``uniform``
    ``(*batch, 1)`` (drawn from ``generator`` if None).

    Returns:
        int64 actions ``(*batch,)`` and their log-probabilities ``(*batch,)``.
    """
    log_probs = F.log_softmax(logits.float(), dim=-1)
    # Inverse-CDF sampling: one uniform per row against the cumulative probabilities. Four
    # small kernels, cheaper than torch.multinomial for a handful of actions.
    cdf = log_probs.exp().cumsum(dim=-1)
    if uniform is None:
        uniform = torch.rand((*cdf.shape[:-1], 1), generator=generator, device=logits.device)
    actions = (cdf < uniform).sum(dim=-1).clamp_(max=logits.shape[-1] - 1)
    return actions, log_probs.gather(-1, actions.unsqueeze(-1)).squeeze(-1)


class _EncoderHeadNetwork(nn.Module):
    """An encoder then a head, kept as one ``nn.Sequential`` called ``layers`` (a stable state-dict
    layout: for a vector observation it is Linear-ReLU-...-Linear, no final activation); ``encoder`` and
    ``head`` are views of the same modules (``layers[:-1]`` or the one encoder module, and
    ``layers[-1]``), not extra copies: the parameters and the state dict are ``layers``' alone."""

    layers: nn.Sequential

    def __init__(self, encoder: nn.Module, head: nn.Module):
        super().__init__()
        # A VectorEncoder is itself a Sequential of layers: spliced in, so CartPole's network is
        # Linear-ReLU-Linear-ReLU-Linear. Any other encoder (a CNN, a user's network) is one module.
        self._single_encoder = not isinstance(encoder, VectorEncoder)
        self.layers = nn.Sequential(encoder, head) if self._single_encoder else nn.Sequential(*encoder, head)
        # An unregistered view (registering it would list every encoder parameter twice in the state dict).
        self.__dict__["_encoder_view"] = encoder if self._single_encoder else self.layers[:-1]

    @property
    def encoder(self) -> nn.Module:
        """Observations -> features: ``layers`` without its last module."""
        return self.__dict__["_encoder_view"]

    @property
    def head(self) -> nn.Module:
        """Features -> outputs: the last module of ``layers``."""
        return self.layers[-1]

    def forward(self, obs: Tensor) -> Tensor:
        return self.layers(obs)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, errors):
        # Checkpoints written before ``layers`` named the modules ``encoder.*`` and ``head.*``.
        renames = {
            f"{prefix}encoder.": f"{prefix}layers.0." if self._single_encoder else f"{prefix}layers.",
            f"{prefix}head.": f"{prefix}layers.{len(self.layers) - 1}.",
        }
        for key in [key for key in state_dict if key.startswith(tuple(renames))]:
            old = next(old for old in renames if key.startswith(old))
            state_dict[renames[old] + key[len(old) :]] = state_dict.pop(key)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, errors)


class PolicyNetwork(_EncoderHeadNetwork):
    """A stochastic policy: an encoder and a head for the action space, as one ``nn.Sequential``
    ``layers`` (Linear-ReLU-Linear-ReLU-Linear for CartPole with the defaults: 10,934 parameters).

    Args:
        observation_space: a ``Box`` (or an observation shape, taken as float32).
        action_space: ``Discrete`` (or an int n) -> categorical; ``Box`` -> diagonal Gaussian.
        hidden_sizes: widths of the default MLP encoder's hidden layers.
        network: your own encoder (observations -> features) instead of the default.
        activation: the default MLP's activation, ``"relu"`` or ``"tanh"``.
    """

    @renamed_keywords(obs_shape="observation_space", num_actions="action_space")  # the seeds' names
    def __init__(
        self,
        observation_space: gym.spaces.Box | gym.spaces.Dict | Sequence[int],
        action_space: gym.Space | int,
        hidden_sizes: Sequence[int] = (120, 84),
        network: nn.Module | None = None,
        activation: str = "relu",
    ):
        observation_space, action_space = as_observation_space(observation_space), as_action_space(action_space)
        encoder, num_features = make_encoder(observation_space, hidden_sizes, network, activation)
        masked = is_masked(observation_space)
        super().__init__(encoder, make_policy_head(num_features, action_space, masked))
        #: Whether the logits are masked with the observations' ``"action_mask"``.
        self.masked = masked
        self.check_masks = True  # see mask()

    def forward(self, obs: Tensor | TensorTree) -> Tensor:
        """The distribution's parameters: logits (masked: ``-inf`` at illegal actions) or the mean (Box)."""
        return self.mask(self.layers(obs), obs)

    def mask(self, logits: Tensor, obs: Tensor | TensorTree) -> Tensor:
        """``logits`` masked with ``obs["action_mask"]`` for a masked policy (checking that every row has a
        legal action while ``check_masks``; the losses turn it off for masks checked at collection)."""
        if not self.masked:
            return logits
        return masked_logits(logits, obs[ACTION_MASK_KEY], self.check_masks, getattr(self.head, "nvec", None))

    def sample(self, obs: Tensor, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """Sampled actions for ``obs`` and their log-probabilities."""
        return self.head.sample(self(obs), generator)

    def log_prob(self, obs: Tensor, actions: Tensor) -> Tensor:
        """log pi(actions | obs), differentiable w.r.t. the parameters."""
        return self.head.log_prob(self(obs), actions)

    def entropy(self, obs: Tensor) -> Tensor:
        return self.head.entropy(self(obs))

    def log_prob_and_entropy(self, obs: Tensor, actions: Tensor) -> tuple[Tensor, Tensor]:
        """log pi(actions | obs) and the entropy, from one forward pass."""
        params = self(obs)
        return self.head.log_prob(params, actions), self.head.entropy(params)

    def act(self, obs: Tensor, greedy: bool = False, generator: torch.Generator | None = None) -> Tensor:
        """The most likely action (argmax / mean) if ``greedy``, else a sampled one."""
        params = self(obs)
        return self.head.mode(params) if greedy else self.head.sample(params, generator)[0]

    def mode(self, obs: Tensor) -> Tensor:
        """The greedy action: the argmax of the logits, or the Gaussian's mean."""
        return self.head.mode(self(obs))


class QNetwork(_EncoderHeadNetwork):
    """One Q-value per discrete action: an encoder and a Linear layer, as one ``nn.Sequential``
    ``layers`` (Linear-ReLU-Linear-ReLU-Linear: 10,934 parameters for CartPole with the
    default (120, 84) MLP).

    Args:
        obs_shape: the shape of one observation (taken as float32), or a gymnasium ``Box``.
        num_actions: the number of actions, or a gymnasium ``Discrete`` space.
        hidden_sizes: widths of the default MLP encoder's hidden layers.
        network: your own encoder (observations -> features) instead of the default.
    """

    @renamed_keywords(observation_space="obs_shape", action_space="num_actions")  # the names it had for a while
    def __init__(
        self,
        obs_shape: Sequence[int] | gym.spaces.Box,
        num_actions: int | gym.spaces.Discrete,
        hidden_sizes: Sequence[int] = (120, 84),
        network: nn.Module | None = None,
    ):
        observation_space, action_space = as_observation_space(obs_shape), as_action_space(num_actions)
        if space_kind(action_space) != "discrete":
            raise ValueError(f"a QNetwork needs a Discrete action space, got {action_space!r}")
        encoder, num_features = make_encoder(observation_space, hidden_sizes, network)
        super().__init__(encoder, nn.Linear(num_features, int(action_space.n)))
        #: Whether observations carry an ``"action_mask"`` (DQN then acts and bootstraps over legal actions only).
        self.masked = is_masked(observation_space)
        self.check_masks = True  # mode() checks every row has a legal action (off in an export)

    def forward(self, obs: Tensor) -> Tensor:
        """``(*batch, *obs_shape)`` -> Q-values ``(*batch, num_actions)``."""
        return self.layers(obs)

    def mode(self, obs: Tensor) -> Tensor:
        """The greedy action: argmax Q (int64), over the legal actions for a masked network."""
        q_values = self.layers(obs)
        if self.masked:
            q_values = masked_logits(q_values, obs[ACTION_MASK_KEY], check=self.check_masks)
        return q_values.argmax(dim=-1)


class ValueNetwork(nn.Module):
    """A state-value function V(obs): an encoder and a Linear layer to one value.

    Args:
        observation_space: a ``Box`` (or an observation shape, taken as float32).
        hidden_sizes: widths of the default MLP encoder's hidden layers.
        network: your own encoder (observations -> features) instead of the default.
        activation: the default MLP's activation, ``"relu"`` or ``"tanh"``.
    """

    def __init__(
        self,
        observation_space: gym.spaces.Box | gym.spaces.Dict | Sequence[int],
        hidden_sizes: Sequence[int] = (64, 64),
        network: nn.Module | None = None,
        activation: str = "relu",
    ):
        super().__init__()
        self.encoder, num_features = make_encoder(
            as_observation_space(observation_space), hidden_sizes, network, activation
        )
        self.head = nn.Linear(num_features, 1)

    def forward(self, obs: Tensor) -> Tensor:
        """``(*batch, *obs_shape)`` -> float32 values ``(*batch,)``."""
        return self.head(self.encoder(obs)).squeeze(-1).float()


def orthogonal_init(module: nn.Module, gain: float = math.sqrt(2)) -> None:
    """Orthogonal weights with ``gain`` and zero biases for every Linear and Conv2d layer of
    ``module`` (the common PPO implementations' init: sqrt(2) hidden, 0.01 policy head, 1 value head)."""
    for layer in module.modules():
        if isinstance(layer, (nn.Linear, nn.Conv2d)):
            nn.init.orthogonal_(layer.weight, gain)
            nn.init.zeros_(layer.bias)


class ActorCritic(nn.Module):
    """A policy and a state-value function, with separate encoders or one shared trunk.

    Args:
        observation_space: a ``Box`` (or an observation shape, taken as float32).
        action_space: ``Discrete`` -> categorical policy; ``Box`` -> diagonal Gaussian.
        hidden_sizes: widths of the default MLP encoders' hidden layers.
        shared_encoder: one encoder for both heads (one forward pass); else one each.
        network: your own encoder (observations -> features) for the actor; the critic gets a deep
            copy of it, or shares it with ``shared_encoder``.
        activation: the default MLP's activation, ``"relu"`` or ``"tanh"``.
        orthogonal: the common PPO init: orthogonal weights (gain sqrt(2) in the encoders, 0.01
            for the policy head, 1 for the value head), zero biases.
    """

    def __init__(
        self,
        observation_space: gym.spaces.Box | gym.spaces.Dict | Sequence[int],
        action_space: gym.Space | int,
        hidden_sizes: Sequence[int] = (64, 64),
        shared_encoder: bool = False,
        network: nn.Module | None = None,
        activation: str = "tanh",
        orthogonal: bool = True,
    ):
        super().__init__()
        self.shared_encoder = shared_encoder
        self.actor = PolicyNetwork(observation_space, action_space, hidden_sizes, network, activation)
        critic_network = None if network is None or shared_encoder else copy.deepcopy(network)
        self.critic = ValueNetwork(observation_space, hidden_sizes, critic_network, activation)
        if shared_encoder:
            self.critic.encoder = self.actor.encoder
        if orthogonal:
            if network is None:
                orthogonal_init(self.actor.encoder)
                orthogonal_init(self.critic.encoder)
            orthogonal_init(self.actor.head, gain=0.01)
            orthogonal_init(self.critic.head, gain=1.0)

    def forward(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """The policy's distribution parameters and the values ``(*batch,)`` of ``obs``."""
        if self.shared_encoder:
            features = self.actor.encoder(obs)
            params = self.actor.mask(self.actor.head(features), obs)
            return params, self.critic.head(features).squeeze(-1).float()
        return self.actor(obs), self.critic(obs)

    def sample(self, obs: Tensor, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Sampled actions, their log-probabilities and the values of ``obs``."""
        params, values = self(obs)
        actions, logprobs = self.actor.head.sample(params, generator)
        return actions, logprobs, values

    def evaluate(self, obs: Tensor, actions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """log pi(actions | obs), the policy's entropy and V(obs), differentiable (masks, checked when
        the actions were sampled, are not checked again)."""
        self.actor.check_masks = False
        try:
            params, values = self(obs)
        finally:
            self.actor.check_masks = True
        return self.actor.head.log_prob(params, actions), self.actor.head.entropy(params), values

    def value(self, obs: Tensor) -> Tensor:
        return self.critic(obs)

    def act(self, obs: Tensor, greedy: bool = False, generator: torch.Generator | None = None) -> Tensor:
        return self.actor.act(obs, greedy, generator)


#: Recurrent cores by name.
CORES: dict[str, type[nn.RNNBase]] = {"lstm": nn.LSTM, "gru": nn.GRU}


class RecurrentActorCritic(nn.Module):
    """A policy and a value function with memory: an encoder, one recurrent core (LSTM or GRU)
    shared by both, and a policy head and a value head on the core's output (CleanRL's LSTM PPO;
    sb3-contrib's ``RecurrentPPO`` keeps a second core for the critic by default).

    The state is one tensor ``(num_state, batch, core_size)``: ``[h; c]`` for an LSTM, ``[h]`` for
    a GRU. It is zeroed for every env whose episode starts at a step (``episode_start``) before
    that step's observation goes in, during collection and during training alike.

    Args:
        observation_space: a ``Box`` (or an observation shape, taken as float32).
        action_space: ``Discrete`` -> categorical policy; ``Box`` -> diagonal Gaussian.
        hidden_sizes: the encoder MLP's hidden layers (before the core).
        core: ``"lstm"`` or ``"gru"``.
        core_size: the core's hidden size.
        network: your own encoder (observations -> features) instead of the MLP.
        activation: the encoder MLP's activation.
        orthogonal: the common PPO init (and zero-bias, orthogonal core weights).
    """

    def __init__(
        self,
        observation_space: gym.spaces.Box | gym.spaces.Dict | Sequence[int],
        action_space: gym.Space | int,
        hidden_sizes: Sequence[int] = (64,),
        core: str = "lstm",
        core_size: int = 64,
        network: nn.Module | None = None,
        activation: str = "tanh",
        orthogonal: bool = True,
    ):
        super().__init__()
        check_choice("core", core, CORES)
        observation_space, action_space = as_observation_space(observation_space), as_action_space(action_space)
        self.encoder, num_features = make_encoder(observation_space, hidden_sizes, network, activation)
        self.core = CORES[core](num_features, core_size)
        self.num_state = 2 if core == "lstm" else 1
        self.core_size = core_size
        self.masked = is_masked(observation_space)
        self.check_masks = True  # acting checks every row has a legal action (off in an export)
        self.actor_head = make_policy_head(core_size, action_space, self.masked)
        self.critic_head = nn.Linear(core_size, 1)
        if orthogonal:
            if network is None:
                orthogonal_init(self.encoder)
            for name, param in self.core.named_parameters():
                if "weight" in name:
                    nn.init.orthogonal_(param, 1.0)
                else:
                    nn.init.zeros_(param)
            orthogonal_init(self.actor_head, gain=0.01)
            orthogonal_init(self.critic_head, gain=1.0)

    def initial_state(self, batch: int, device: torch.device | str = "cpu") -> Tensor:
        """Zeros ``(num_state, batch, core_size)``."""
        return torch.zeros(self.num_state, batch, self.core_size, device=device)

    def _core_step(self, features: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        """One step of the core for features ``(batch, F)`` from ``state``."""
        if self.num_state == 2:
            output, (h, c) = self.core(features.unsqueeze(0), (state[0:1].contiguous(), state[1:2].contiguous()))
            return output.squeeze(0), torch.cat([h, c])
        output, h = self.core(features.unsqueeze(0), state.contiguous())
        return output.squeeze(0), h

    def unroll(self, obs: Tensor, state: Tensor, episode_starts: Tensor) -> tuple[Tensor, Tensor]:
        """Core outputs ``(batch, T, core_size)`` for observations ``(batch, T, *obs_shape)`` from
        ``state`` ``(num_state, batch, core_size)``, zeroing it where ``episode_starts``
        ``(batch, T)`` says a new episode starts; and the state after the last step."""
        features = self.encoder(obs).float()  # all steps at once; only the core runs step by step
        keep = (~episode_starts.bool()).float()
        outputs = []
        for t in range(features.shape[1]):
            state = state * keep[:, t].view(1, -1, 1)
            output, state = self._core_step(features[:, t], state)
            outputs.append(output)
        return torch.stack(outputs, dim=1), state

    def sample(
        self, obs: Tensor, state: Tensor, episode_start: Tensor, generator: torch.Generator | None = None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """One step of every env: sampled actions, their log-probabilities, the values, and the
        state after the step (``obs`` ``(batch, *obs_shape)``, ``episode_start`` ``(batch,)``)."""
        output, state = self.unroll(obs.unsqueeze(1), state, episode_start.unsqueeze(1))
        output = output.squeeze(1)
        actions, logprobs = self.actor_head.sample(self._logits(output, obs, check=self.check_masks), generator)
        return actions, logprobs, self.critic_head(output).squeeze(-1).float(), state

    def _logits(self, output: Tensor, obs: Tensor | TensorTree, check: bool) -> Tensor:
        """The policy head's outputs, masked with ``obs["action_mask"]`` for a masked policy."""
        params = self.actor_head(output)
        if not self.masked:
            return params
        return masked_logits(params, obs[ACTION_MASK_KEY], check, getattr(self.actor_head, "nvec", None))

    def evaluate(
        self, obs: Tensor, actions: Tensor, state: Tensor, episode_starts: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """log pi(actions), the entropy and V along whole sequences ``(batch, T, ...)`` replayed from
        their initial ``state`` with the collection's masking; each ``(batch, T)``, differentiable."""
        output, _ = self.unroll(obs, state, episode_starts)
        params = self._logits(output, obs, check=False)
        values = self.critic_head(output).squeeze(-1).float()
        return self.actor_head.log_prob(params, actions), self.actor_head.entropy(params), values

    def value(self, obs: Tensor, state: Tensor, episode_start: Tensor) -> Tensor:
        output, _ = self.unroll(obs.unsqueeze(1), state, episode_start.unsqueeze(1))
        return self.critic_head(output.squeeze(1)).squeeze(-1).float()

    def act(
        self, obs: Tensor, state: Tensor, episode_start: Tensor, greedy: bool = False
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Actions (argmax / mean if ``greedy``), the policy's outputs, and the state after the step."""
        output, state = self.unroll(obs.unsqueeze(1), state, episode_start.unsqueeze(1))
        params = self._logits(output.squeeze(1), obs, check=self.check_masks)
        actions = self.actor_head.mode(params) if greedy else self.actor_head.sample(params)[0]
        return actions, params, state


# -- continuous control off-policy: SAC's and TD3's actors, Q(s, a) critics -------------------------


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


def _vector_trunk(observation_space: gym.spaces.Box, hidden_sizes: Sequence[int]) -> tuple[nn.Sequential, int]:
    """Flatten and an MLP of ReLU layers for a vector observation (images are refused by name)."""
    if isinstance(observation_space, gym.spaces.Dict):
        raise ValueError(
            f"SAC and TD3 take Box observations, got the Dict space {observation_space!r}: flatten it "
            "(env_kwargs={'wrappers': ['gymnasium.wrappers.FlattenObservation']}) or use PPOModule, VPGModule or "
            "DQNModule, which take Dict observations"
        )
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
        observation_space: a vector ``Box``.
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
        observation_space: a vector ``Box``.
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
        observation_space: a vector ``Box``.
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
        if is_image_space(observation_space):
            raise ValueError(f"the critics take vector observations, got the image space {observation_space!r}")
        self.num_critics = check_int("num_critics", num_critics, 1)
        self.obs_dims = len(observation_space.shape)
        self.action_dims = len(action_space.shape)
        sizes = [
            math.prod(observation_space.shape) + math.prod(action_space.shape),
            *check_sizes("hidden_sizes", hidden_sizes),
            1,
        ]
        self.layers = nn.ModuleList(EnsembleLinear(num_critics, a, b) for a, b in itertools.pairwise(sizes))

    def forward(self, obs: Tensor, actions: Tensor, detach_params: bool = False) -> Tensor:
        """Q-values ``(num_critics, batch)`` of ``actions`` in ``obs``; ``detach_params`` evaluates
        them with the parameters detached (the actor's loss: gradients to the actions only)."""
        x = torch.cat(
            [obs.flatten(start_dim=obs.dim() - self.obs_dims).float(), actions.flatten(start_dim=1).float()], -1
        )
        for index, layer in enumerate(self.layers):
            x = layer(x, detach_params)
            if index < len(self.layers) - 1:
                x = torch.relu(x)
        return x.squeeze(-1).float()
