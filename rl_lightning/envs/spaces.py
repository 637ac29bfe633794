"""Structured observations and action spaces beyond ``Discrete`` and ``Box``.

- A ``Dict`` or ``Tuple`` observation is, inside rl_lightning, a flat ``gymnasium.spaces.Dict`` of
  ``Box`` leaves (``Tuple`` parts are keys ``"0"``, ``"1"``, ...; a nested part's key is
  ``"outer/inner"``), and a batch of such observations is a :class:`TensorTree`: a dict of tensors
  ``(*batch, *leaf_shape)`` that indexes, reshapes and stacks like one tensor, so rollouts, buffers
  and minibatches hold it as they hold a tensor. Leaves keep their dtype (uint8 images stay uint8);
  ``Discrete`` parts are one-hot float32, ``MultiDiscrete`` ones concatenated one-hots,
  ``MultiBinary`` ones float32 (:func:`leaf_space`, :func:`encode_leaf`).
- An observation key ``"action_mask"`` (bool ``(n,)``, per dimension concatenated for
  ``MultiDiscrete`` actions) holds the legal actions; the policies mask their logits with it
  and the encoders leave it out of their features. True / 1 is legal: bool masks, and integer or
  float ones whose values are exactly 0 or 1, are read so (:func:`as_bool_mask`); any other
  values (a mask in the logits convention, 0 legal and -inf illegal) are a ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from rl_lightning.sampling import MASK_CONVENTION as MASK_CONVENTION  # the mask convention lives below envs and nets
from rl_lightning.sampling import as_bool_mask as as_bool_mask

#: The observation key of the legal actions.
ACTION_MASK_KEY = "action_mask"
#: The key of a ``Box`` observation that gets an action mask from ``info`` beside it.
OBSERVATION_KEY = "observation"
#: A multi-agent env's observation key of a row's one-hot agent index (``rl_lightning.envs.multi_agent``).
AGENT_ID_KEY = "agent_id"
#: A multi-agent env's observation key of its scene's global state (what MAPPO's centralised critic reads).
GLOBAL_STATE_KEY = "state"
#: A multi-agent env's observation key (bool ``(1,)``) saying whether a row's agent is in its scene at this step.
ACTIVE_KEY = "active"
#: Joins the keys of a nested part: ``{"a": {"b": ...}}`` -> ``"a/b"``.
KEY_SEPARATOR = "/"

ACTION_KINDS = ("discrete", "box", "multi_discrete", "multi_binary")
_LEAF_DTYPES = {np.dtype(np.float32): torch.float32, np.dtype(np.uint8): torch.uint8, np.dtype(np.bool_): torch.bool}


class TensorTree(dict):
    """A dict of tensors sharing their leading (batch) dimensions, used like one tensor.

    ``tree[:, :-1]``, ``tree.flatten(0, 1)``, ``tree.index_select(0, idx)``, ``tree.to(device)``,
    ``tree.clone()``, ``torch.stack(trees, dim=1)``, ``torch.cat(trees)`` and ``torch.split(tree, n)``
    apply to every leaf; ``tree["image"]`` is one leaf. Checkpoints hold it as a plain dict
    (:func:`plain`: ``torch.load(weights_only=True)`` knows no other class), made a tree again by
    :func:`as_tree`.
    """

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return dict.__getitem__(self, key)
        return TensorTree({name: leaf[key] for name, leaf in self.items()})

    def __setitem__(self, key: Any, value: Any) -> None:
        if isinstance(key, str):
            dict.__setitem__(self, key, value)
            return
        for name, leaf in self.items():
            leaf[key] = value[name]

    def apply(self, function: Callable[[Tensor], Tensor]) -> TensorTree:
        """``function`` applied to every leaf."""
        return TensorTree({name: function(leaf) for name, leaf in self.items()})

    def flatten(self, start_dim: int = 0, end_dim: int = 1) -> TensorTree:
        """Merge batch dimensions ``start_dim..end_dim`` (both non-negative: leaves differ in rank)."""
        return self.apply(lambda leaf: leaf.flatten(start_dim, end_dim))

    def index_select(self, dim: int, index: Tensor) -> TensorTree:
        return self.apply(lambda leaf: leaf.index_select(dim, index))

    def unsqueeze(self, dim: int) -> TensorTree:
        return self.apply(lambda leaf: leaf.unsqueeze(dim))

    def squeeze(self, dim: int) -> TensorTree:
        return self.apply(lambda leaf: leaf.squeeze(dim))

    def to(self, *args: Any, **kwargs: Any) -> TensorTree:
        return self.apply(lambda leaf: leaf.to(*args, **kwargs))

    def clone(self) -> TensorTree:
        return self.apply(Tensor.clone)

    def detach(self) -> TensorTree:
        return self.apply(Tensor.detach)

    def cpu(self) -> TensorTree:
        return self.apply(Tensor.cpu)

    @property
    def device(self) -> torch.device:
        """The leaves' device (they share one), as ``Tensor.device``."""
        return next(iter(self.values())).device

    # A tensor's other device questions, asked of observations by code written for tensors.
    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def is_cpu(self) -> bool:
        return self.device.type == "cpu"

    def get_device(self) -> int:
        """The leaves' device index, as ``Tensor.get_device`` (-1 on the CPU)."""
        return next(iter(self.values())).get_device()

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        if func in (torch.stack, torch.cat):
            trees = list(args[0])
            dim = args[1] if len(args) > 1 else kwargs.pop("dim", 0)
            return TensorTree({name: func([tree[name] for tree in trees], dim) for name in trees[0]})
        if func is torch.split:
            tree, size = args[0], args[1]
            dim = args[2] if len(args) > 2 else kwargs.pop("dim", 0)
            parts = {name: torch.split(leaf, size, dim) for name, leaf in tree.items()}
            count = len(next(iter(parts.values())))
            return tuple(TensorTree({name: parts[name][index] for name in parts}) for index in range(count))
        raise TypeError(f"{getattr(func, '__name__', func)} is not defined for a TensorTree (a dict observation)")


def as_tree(value: Any) -> Any:
    """A dict (of tensors) as a :class:`TensorTree`; anything else as it is."""
    return TensorTree(value) if isinstance(value, dict) and not isinstance(value, TensorTree) else value


def plain(value: Any) -> Any:
    """A :class:`TensorTree` as a plain dict (what checkpoints hold); anything else as it is."""
    return dict(value) if isinstance(value, TensorTree) else value


def is_structured(space: gym.Space) -> bool:
    """Whether ``space`` is a ``Dict`` or a ``Tuple``."""
    return isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple))


def flat_parts(space: gym.Space, prefix: str = "") -> dict[str, gym.Space]:
    """The leaf spaces of a ``Dict`` / ``Tuple`` space by flat key (``Tuple`` parts ``"0"``, ``"1"``,
    ..., nested ones ``"outer/inner"``), in the space's order."""
    items: Sequence[tuple[str, gym.Space]]
    if isinstance(space, gym.spaces.Dict):
        items = list(space.spaces.items())
    elif isinstance(space, gym.spaces.Tuple):
        items = [(str(index), part) for index, part in enumerate(space.spaces)]
    else:
        return {prefix: space}
    parts: dict[str, gym.Space] = {}
    for key, part in items:
        if not isinstance(key, str) or not key or KEY_SEPARATOR in key or "." in key:
            raise ValueError(f"observation keys must be non-empty strings without '/' or '.', got {key!r}")
        parts.update(flat_parts(part, f"{prefix}{KEY_SEPARATOR}{key}" if prefix else key))
    return parts


def flat_values(space: gym.Space, obs: Any, prefix: str = "") -> dict[str, Any]:
    """The leaves of an observation of ``space`` (a dict / tuple, as gymnasium gives it) by flat key."""
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(obs, Mapping):
            raise TypeError(f"obs must be a dict with keys {sorted(space.spaces)}, got {type(obs).__name__}")
        missing = sorted(set(space.spaces) - set(obs))
        if missing:
            raise ValueError(f"obs lacks the key(s) {missing} of the observation space (keys {sorted(space.spaces)})")
        items = [(key, obs[key]) for key in space.spaces]
        parts = list(space.spaces.values())
    elif isinstance(space, gym.spaces.Tuple):
        if not isinstance(obs, (tuple, list)) or len(obs) != len(space.spaces):
            raise TypeError(f"obs must be a tuple of {len(space.spaces)} parts, got {type(obs).__name__}")
        items = [(str(index), value) for index, value in enumerate(obs)]
        parts = list(space.spaces)
    else:
        return {prefix: obs}
    values: dict[str, Any] = {}
    for (key, value), part in zip(items, parts, strict=True):
        values.update(flat_values(part, value, f"{prefix}{KEY_SEPARATOR}{key}" if prefix else key))
    return values


#: The layouts of image observations: grey ``(H, W)``, channels last ``(H, W, C)`` (gymnasium's),
#: channels first ``(C, H, W)`` (a frame stack of grey frames) and ``(K, H, W, C)`` (a stack of K
#: frames of 1 or 3 channels, folded into ``K * C`` channels by the CNN).
IMAGE_LAYOUTS = ("HW", "HWC", "CHW", "KHWC")
#: The most channels a ``(C, H, W)`` or ``(H, W, C)`` image has (frame stacks, grey or RGB).
MAX_IMAGE_CHANNELS = 16
_COLOUR_CHANNELS = (1, 3)


def _shape_layout(shape: Sequence[int]) -> str | None:
    """The layout of an image of ``shape``; None for a rank no image has, or a rank-3 shape whose
    channel axis cannot be told (both ends or neither up to ``MAX_IMAGE_CHANNELS``)."""
    if len(shape) == 2:
        return "HW"
    if len(shape) == 4:
        return "KHWC" if shape[-1] in _COLOUR_CHANNELS else None
    if len(shape) != 3:
        return None
    first_is_channels, last_is_channels = shape[0] <= MAX_IMAGE_CHANNELS, shape[-1] <= MAX_IMAGE_CHANNELS
    if last_is_channels and not first_is_channels:
        return "HWC"
    if first_is_channels and not last_is_channels:
        return "CHW"
    if first_is_channels and last_is_channels:  # a small image: 1 or 3 colour channels at one end only
        if shape[-1] in _COLOUR_CHANNELS and shape[0] not in _COLOUR_CHANNELS:
            return "HWC"
        if shape[0] in _COLOUR_CHANNELS and shape[-1] not in _COLOUR_CHANNELS:
            return "CHW"
    return None


def image_layout(space: gym.Space) -> str | None:
    """The layout (:data:`IMAGE_LAYOUTS`) of an image observation space, None for any other space.

    A uint8 ``Box`` of rank 2, 3 or 4 is an image (kept uint8 end to end, scaled by 1/255 inside the
    network): rank 2 is ``"HW"``; rank 3 is ``"HWC"`` when only its last axis has up to 16 entries,
    ``"CHW"`` when only its first has (a small image whose both ends have up to 16: the end with 1
    or 3 colour channels, if only one has); rank 4 ending in 1 or 3 is ``"KHWC"``. Any other uint8
    shape of those ranks is a ``ValueError`` naming it and what to pass. A float32 rank-3 ``Box``
    of such a shape is an image too (taken unscaled), one of no such shape a vector; uint8 vectors
    (rank 0 or 1, e.g. Atari RAM) are no images.
    """
    if not isinstance(space, gym.spaces.Box):
        return None
    shape = tuple(space.shape)
    if space.dtype != np.uint8:
        return _shape_layout(shape) if space.dtype == np.float32 and len(shape) == 3 else None
    if len(shape) not in (2, 3, 4):
        return None
    layout = _shape_layout(shape)
    if layout is None:
        raise ValueError(
            f"the uint8 observation of shape {shape} has no image layout rl_lightning can tell: images are (H, W), "
            f"(H, W, C) or (C, H, W) with C <= {MAX_IMAGE_CHANNELS} channels and H, W > {MAX_IMAGE_CHANNELS} (a "
            "smaller image: 1 or 3 channels at one end), or (K, H, W, C) frames with C 1 or 3; wrap the env to "
            "move its channels to the first or last axis (a gymnasium.wrappers.TransformObservation with "
            "np.moveaxis and the new observation_space, passed in env_kwargs['wrappers']), or, if it is no image, "
            "cast it (env_kwargs={'wrappers': [{'class_path': 'gymnasium.wrappers.DtypeObservation', "
            "'init_args': {'dtype': 'float32'}}]})"
        )
    return layout


def is_image_leaf(space: gym.spaces.Box) -> bool:
    """A uint8 image (:func:`image_layout`): kept as uint8 (a ``ValueError`` for a uint8 ``Box`` of an
    ambiguous shape)."""
    return space.dtype == np.uint8 and image_layout(space) is not None


def float32_bounds(bound: np.ndarray) -> np.ndarray:
    """A space's bound as float32 (a float64 bound beyond float32's range becomes +-inf)."""
    with np.errstate(over="ignore"):  # a float64 bound beyond float32's range becomes +-inf
        return np.asarray(bound).astype(np.float32)


def leaf_space(key: str, space: gym.Space) -> gym.spaces.Box:
    """Our form of one part of a structured observation (see the module's doc); a ``ValueError``
    naming the key for a part that has none (``Text``, ``Graph``, ``Sequence``, ...)."""
    if key.split(KEY_SEPARATOR)[-1] == ACTION_MASK_KEY:
        if isinstance(space, (gym.spaces.MultiBinary, gym.spaces.Box)) and len(space.shape) == 1:
            return gym.spaces.Box(0, 1, space.shape, np.bool_)
        raise ValueError(f"the action mask {key!r} must be a MultiBinary(n) or a 1-d Box, got {space!r}")
    if isinstance(space, gym.spaces.Box):
        try:
            if is_image_leaf(space):
                return space
        except ValueError as error:
            raise ValueError(f"the observation part {key!r}: {error}") from None
        return gym.spaces.Box(float32_bounds(space.low), float32_bounds(space.high), space.shape, np.float32)
    if isinstance(space, gym.spaces.Discrete):
        return gym.spaces.Box(0.0, 1.0, (int(space.n),), np.float32)
    if isinstance(space, gym.spaces.MultiDiscrete) and space.nvec.ndim == 1:
        return gym.spaces.Box(0.0, 1.0, (int(space.nvec.sum()),), np.float32)
    if isinstance(space, gym.spaces.MultiBinary) and len(space.shape) == 1:
        return gym.spaces.Box(0.0, 1.0, space.shape, np.float32)
    raise ValueError(
        f"the observation part {key!r} is {space!r} ({type(space).__name__}): rl_lightning takes Box, Discrete, "
        "1-d MultiDiscrete and 1-d MultiBinary parts; wrap the env to convert it"
    )


def empty_mask_rows(mask: np.ndarray, nvec: Sequence[int] | None = None) -> list[int]:
    """The rows of a bool numpy mask ``(batch, n)`` with no legal action (in one of the dimensions
    ``nvec`` of a MultiDiscrete mask)."""
    if nvec is None:
        return np.flatnonzero(~mask.any(axis=-1)).tolist()
    starts = np.cumsum([0, *nvec[:-1]])
    return np.flatnonzero(~np.logical_or.reduceat(mask, starts, axis=-1).all(axis=-1)).tolist()


def encode_leaf(space: gym.Space, values: Any, key: str, device: torch.device | str = "cpu") -> Tensor:
    """A batch of one part's gymnasium observations ``(batch, ...)`` (numpy or tensors) in our form
    (:func:`leaf_space`) on ``device``: a ``Discrete(n, start)`` index one-hot, ``MultiDiscrete``
    indices concatenated one-hots, masks bool (:func:`as_bool_mask`: True / 1 legal, a mask of other
    values is a ``ValueError``), anything else float32 (uint8 images kept)."""
    if key.split(KEY_SEPARATOR)[-1] == ACTION_MASK_KEY:
        mask = as_bool_mask(np.asarray(values.cpu() if isinstance(values, Tensor) else values), f"obs[{key!r}]")
        return torch.as_tensor(mask).to(device, torch.bool, copy=True)
    if isinstance(space, gym.spaces.Discrete):
        index = torch.as_tensor(np.asarray(values, dtype=np.int64)).reshape(-1).to(device) - int(space.start)
        return torch.zeros(index.shape[0], int(space.n), device=device).scatter_(1, index.unsqueeze(1), 1.0)
    if isinstance(space, gym.spaces.MultiDiscrete):
        index = torch.as_tensor(np.asarray(values, dtype=np.int64)).reshape(-1, len(space.nvec)).to(device)
        index = index - torch.as_tensor(np.asarray(space.start, dtype=np.int64), device=device)
        nvec = space.nvec.tolist()
        return torch.cat([torch.nn.functional.one_hot(index[:, i], n).float() for i, n in enumerate(nvec)], dim=1)
    # A copy: gymnasium reuses its observation buffers (the adapter builds its envs with copy=False).
    array = values if isinstance(values, Tensor) else torch.as_tensor(np.asarray(values))
    dtype = torch.uint8 if isinstance(space, gym.spaces.Box) and is_image_leaf(space) else torch.float32
    return array.to(device, dtype, copy=True)


def encode_observation(
    space: gym.Space, parts: Mapping[str, gym.Space], obs: Any, device: torch.device | str = "cpu"
) -> TensorTree:
    """A batch of gymnasium observations of the structured ``space`` (a dict of batched arrays, as
    gymnasium's vector envs give them) as a :class:`TensorTree` of our leaves."""
    values = flat_values(space, obs)
    return TensorTree({key: encode_leaf(part, values[key], key, device) for key, part in parts.items()})


def check_leaf_spaces(space: gym.spaces.Dict) -> dict[str, gym.spaces.Box]:
    """The leaves of one of our structured spaces (a flat ``Dict`` of float32, uint8 or bool ``Box``
    leaves); a ``ValueError`` saying which leaf is not."""
    leaves = {}
    for key, leaf in space.spaces.items():
        if not isinstance(leaf, gym.spaces.Box) or leaf.dtype not in _LEAF_DTYPES:
            raise ValueError(
                f"the observation key {key!r} must be a float32, uint8 or bool Box, got {leaf!r}: "
                "nested or other parts are converted by rl_lightning.envs.spaces.leaf_space"
            )
        leaves[key] = leaf
    return leaves


def observation_view(space: gym.Space, keys: Sequence[str] | None, name: str, policy: bool = False) -> gym.Space:
    """The part of a Dict observation ``space`` one network reads (an asymmetric actor-critic's ``actor_keys`` /
    ``critic_keys``): its ``keys`` in the space's order, and for the ``policy`` the action mask where the space has
    one (it is never a feature: the policy masks its logits with it); None: the whole ``space``. A ``TypeError`` /
    ``ValueError`` naming ``name`` and the keys there are otherwise."""
    if keys is None:
        return space
    if isinstance(keys, str) or not isinstance(keys, Sequence) or not all(isinstance(key, str) for key in keys):
        raise TypeError(f"{name} must be a list of observation keys (str) or None, got {keys!r}")
    if not isinstance(space, gym.spaces.Dict):
        raise ValueError(
            f"{name} selects keys of a Dict observation, but the env's observations are {space!r}: leave it None"
        )
    available = [key for key in space.spaces if key != ACTION_MASK_KEY]
    if not keys or len(set(keys)) != len(keys) or not set(keys) <= set(available):
        mask = f" ({ACTION_MASK_KEY!r} goes to the policy by itself)" if ACTION_MASK_KEY in space.spaces else ""
        raise ValueError(f"{name} must be distinct keys of the observation, some of {available}{mask}, got {keys!r}")
    wanted = set(keys) | ({ACTION_MASK_KEY} if policy else set())
    return gym.spaces.Dict({key: leaf for key, leaf in space.spaces.items() if key in wanted})


def leaf_dtype(space: gym.spaces.Box) -> torch.dtype:
    """The torch dtype of one of our leaves."""
    return _LEAF_DTYPES[np.dtype(space.dtype)]


def zeros_like_space(space: gym.Space, batch: int, device: torch.device | str = "cpu") -> Tensor | TensorTree:
    """A batch of zero observations of one of our spaces (masks all True: every action legal)."""
    if isinstance(space, gym.spaces.Dict):
        return TensorTree(
            {
                key: (torch.ones if key == ACTION_MASK_KEY else torch.zeros)(
                    (batch, *leaf.shape), dtype=leaf_dtype(leaf), device=device
                )
                for key, leaf in space.spaces.items()
            }
        )
    dtype = torch.uint8 if space.dtype == np.uint8 else torch.float32
    return torch.zeros((batch, *space.shape), dtype=dtype, device=device)


def action_kind(space: gym.Space) -> str:
    """``"discrete"``, ``"box"``, ``"multi_discrete"`` or ``"multi_binary"``; any other action space is a
    ``ValueError`` naming it."""
    if isinstance(space, gym.spaces.Discrete):
        return "discrete"
    if isinstance(space, gym.spaces.Box):
        return "box"
    if isinstance(space, gym.spaces.MultiDiscrete):
        if space.nvec.ndim != 1:
            raise ValueError(f"a MultiDiscrete action space must be 1-d, got nvec of shape {space.nvec.shape}")
        return "multi_discrete"
    if isinstance(space, gym.spaces.MultiBinary):
        if len(space.shape) != 1:
            raise ValueError(f"a MultiBinary action space must be 1-d, got shape {space.shape}")
        return "multi_binary"
    raise ValueError(
        f"unsupported space {space!r} ({type(space).__name__}): rl_lightning supports Discrete, Box, MultiDiscrete "
        "and MultiBinary action spaces"
    )


def mask_size(space: gym.Space) -> int | None:
    """The length of an action mask for ``space``: n for ``Discrete(n)``, sum(nvec) for ``MultiDiscrete``
    (None: the space takes no mask)."""
    kind = action_kind(space)
    if kind == "discrete":
        return int(space.n)
    if kind == "multi_discrete":
        return int(space.nvec.sum())
    return None
