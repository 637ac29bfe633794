"""What the adapters over other libraries' envs (gymnasium's, EnvPool's, ale-py's) check alike, written once so
that their messages say the same thing the same way: keyword arguments given where the adapter (or the Atari
preset) sets them itself, and the observations handed to ``draw``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

if TYPE_CHECKING:
    from rl_lightning.envs.base import VectorEnv


def refuse_given(env_kwargs: Mapping[str, Any], names: Iterable[str], why: str) -> None:
    """Refuse the ``env_kwargs`` among ``names``, arguments set elsewhere (by the adapter or the preset): a
    ``ValueError`` ``"env_kwargs [sorted names] <why>"``, where ``why`` says who sets them and what to pass
    instead; nothing when none of them is given."""
    given = sorted(set(names) & set(env_kwargs))
    if given:
        raise ValueError(f"env_kwargs {given} {why}")


def uint8_to_draw(env: VectorEnv, obs: Tensor, refusal: str) -> Tensor:
    """``obs`` as uint8 on the CPU, what an adapter's ``draw`` turns into pictures.

    Raises:
        NotImplementedError: where ``env`` cannot draw (``can_draw`` False): ``refusal``, which says what it draws
            only, then that ``render()`` gives the current frames instead.
        ValueError: for observations not of shape ``(*batch, *env.obs_shape)``.
    """
    if not env.can_draw:
        raise NotImplementedError(
            f"{refusal}; build it with render=True and call render() for the current frames instead"
        )
    shape = env.obs_shape
    if obs.ndim < len(shape) or tuple(obs.shape[obs.ndim - len(shape) :]) != shape:
        raise ValueError(f"obs must have shape (*batch, *{shape}), got {tuple(obs.shape)}")
    return obs.detach().to("cpu", torch.uint8)
