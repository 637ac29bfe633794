"""Encoders: observations ``(*batch, *obs_shape)`` to features ``(*batch, num_features)``. An MLP over the
flattened observation by default, a Nature-DQN CNN for images (``(H, W)``, ``(H, W, C)``, ``(C, H, W)`` or
``(K, H, W, C)``, ``rl_lightning.envs.spaces.image_layout``; uint8 pixels are scaled to [0, 1] inside the network,
so buffers keep uint8), a multi-input encoder for Dict observations, or any ``nn.Module`` the user passes."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from rl_lightning._checks import check_choice, check_sizes
from rl_lightning.envs.base import space_kind
from rl_lightning.envs.spaces import (
    ACTION_MASK_KEY,
    IMAGE_LAYOUTS,
    TensorTree,
    image_layout,
    zeros_like_space,
)

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
    """A gymnasium ``Discrete``, ``Box``, ``MultiDiscrete`` or ``MultiBinary``, or an int taken as ``Discrete(n)``
    (numpy's too: the seeds pass ``envs.action_space.n``, a ``np.int64``)."""
    if isinstance(space, (bool, np.bool_)) or not isinstance(space, (int, np.integer, gym.Space)):
        raise TypeError(
            f"action_space must be a gymnasium Discrete, Box, MultiDiscrete or MultiBinary space (or an int n), "
            f"got {space!r}"
        )
    if isinstance(space, (int, np.integer)):
        if space < 1:
            raise ValueError(f"the number of actions must be >= 1, got {space}")
        return gym.spaces.Discrete(int(space))
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
