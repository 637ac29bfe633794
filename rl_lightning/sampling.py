"""Sampling from categorical logits, legal actions only where a mask says so: the functions the envs' random
legal actions (``envs.base.sample_legal``), the replay warm-up and the policy heads share. Below both ``nets`` and
``envs`` (it imports neither): the action-mask convention (``MASK_CONVENTION``, ``as_bool_mask``) lives here too."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

#: What every mask error says: how rl_lightning reads a mask, and how to convert a logits-convention one.
MASK_CONVENTION = (
    "rl_lightning reads action masks as True / 1 = legal, False / 0 = illegal (bool, or integers or "
    "floats that are exactly 0 or 1); a mask in the logits convention (0 legal, -inf illegal) converts "
    "with mask = logits_mask == 0"
)


def as_bool_mask(mask: np.ndarray | Tensor, where: str = "the action mask") -> np.ndarray | Tensor:
    """An action mask (numpy or torch) as bool, True = legal: bool as it is, integers and floats
    whose values are exactly 0 or 1 compared with 0. Any other value (``-inf``, ``0.5``, ``2``, NaN)
    is a ``ValueError`` naming ``where`` and the convention (a torch mask not bool: one reduction,
    read back once)."""
    if mask.dtype in (np.bool_, torch.bool):
        return mask
    if isinstance(mask, Tensor):
        if mask.is_complex() or not bool(((mask == 0) | (mask == 1)).all()):
            bad = mask[(mask != 0) & (mask != 1)].flatten()[:1].tolist()
            raise ValueError(f"{where} has the {mask.dtype} value {bad[0]!r}, neither 0 nor 1: {MASK_CONVENTION}")
        return mask != 0
    mask = np.asarray(mask)
    if mask.dtype.kind not in "biuf":
        raise ValueError(f"{where} must be bool, integer or float, got {mask.dtype}: {MASK_CONVENTION}")
    legal = mask == 1
    if not (legal | (mask == 0)).all():
        bad = mask[~(legal | (mask == 0))].flat[0]
        raise ValueError(f"{where} has the {mask.dtype} value {bad.item()!r}, neither 0 nor 1: {MASK_CONVENTION}")
    return legal


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
    actions = (cdf < uniform).sum(dim=-1).clamp(max=logits.shape[-1] - 1)
    return actions, log_probs.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
