"""Distributional RL's losses as pure tensor functions (``DQNModule(distributional="c51" | "qr")``): the categorical
projection and cross-entropy of C51 (Bellemare et al. 2017) and the quantile Huber loss of QR-DQN (Dabney et al.
2018). Each returns per-sample values ``(batch,)``: the caller averages them (weighted by prioritized replay's
importance weights) and hands them to the replay buffer as the new priorities."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def categorical_support(v_min: float, v_max: float, num_atoms: int, device: torch.device | str | None = None) -> Tensor:
    """C51's fixed atoms ``z_i = v_min + i (v_max - v_min) / (num_atoms - 1)``, float32 ``(num_atoms,)``."""
    return torch.linspace(v_min, v_max, num_atoms, device=device)


def project_categorical(
    next_probs: Tensor, rewards: Tensor, terminated: Tensor, discounts: float | Tensor, support: Tensor
) -> Tensor:
    """The categorical projection ``Phi T z`` of the (n-step) target distribution onto the fixed atoms, Bellemare et
    al. 2017 eq. (7):

        (Phi T z)_i = sum_j [1 - |clip(T z_j, v_min, v_max) - z_i| / dz]_0^1 p_j,   T z_j = r + d (1 - terminal) z_j

    computed as the paper's Algorithm 1: target atom j, at ``b_j = (clip(T z_j) - v_min) / dz`` atoms from the
    bottom, gives ``p_j (1 - (b_j - l))`` to atom ``l = floor(b_j)`` and ``p_j (b_j - l)`` to ``l + 1``; where ``b_j``
    falls on an atom (``l == u``) all of ``p_j`` goes to it. Atoms beyond the support are clipped to its ends; a
    terminal transition puts all its mass at ``clip(r)``. Two out-of-place ``scatter_add`` (``vmap`` and
    ``torch.compile`` take them), O(batch N), not the dense O(batch N^2) of eq. (7).

    Args:
        next_probs: ``(batch, N)`` the target network's probabilities of the next state's chosen action.
        rewards: ``(batch,)`` (an n-step sample: the discounted sum of its rewards).
        terminated: bool ``(batch,)``: no bootstrap.
        discounts: ``gamma``, or ``(batch,)`` per-sample gamma^k of n-step samples.
        support: ``(N,)`` the atoms (:func:`categorical_support`), evenly spaced.

    Returns:
        float32 ``(batch, N)``: the projected distribution (each row sums to 1).
    """
    num_atoms = support.shape[0]
    discounts = discounts.float().unsqueeze(-1) if isinstance(discounts, Tensor) else discounts
    bootstrap = (~terminated.bool()).float().unsqueeze(-1)
    v_min, v_max = support[0], support[-1]
    target_atoms = (rewards.float().unsqueeze(-1) + discounts * bootstrap * support).clamp(v_min, v_max)
    position = (target_atoms - v_min) / ((v_max - v_min) / (num_atoms - 1))  # b_j in [0, N - 1]
    lower = position.floor().clamp(max=num_atoms - 1)
    upper_share = position - lower  # 0 where b_j is on an atom: all of p_j to it
    upper = (lower + 1).clamp(max=num_atoms - 1)
    next_probs = next_probs.float()
    projected = torch.zeros_like(next_probs).scatter_add(-1, lower.long(), next_probs * (1.0 - upper_share))
    return projected.scatter_add(-1, upper.long(), next_probs * upper_share)


def categorical_cross_entropy(target_probs: Tensor, log_probs: Tensor) -> Tensor:
    """C51's loss of each sample, the cross-entropy ``-sum_i m_i log p_i(s, a)`` of the projected target ``m``
    (Bellemare et al. 2017, Algorithm 1's output): the KL divergence ``KL(m || p)`` less the target's entropy, which
    has no gradient, so the same gradients as the KL.

    Args:
        target_probs: ``(batch, N)`` the projected target (:func:`project_categorical`), without gradient.
        log_probs: ``(batch, N)`` the online network's log-probabilities of the taken action.

    Returns:
        float32 ``(batch,)``.
    """
    return -(target_probs.float() * log_probs.float()).sum(dim=-1)


def categorical_kl(target_probs: Tensor, log_probs: Tensor) -> Tensor:
    """``KL(m || p) = sum_i m_i (log m_i - log p_i)`` per sample (``0 log 0 = 0``), float32 ``(batch,)``: Rainbow's
    priorities (Hessel et al. 2018: "prioritize transitions by the KL loss"); zero where the prediction matches."""
    target_probs = target_probs.float()
    return (torch.xlogy(target_probs, target_probs) - target_probs * log_probs.float()).sum(dim=-1)


def quantile_midpoints(num_quantiles: int, device: torch.device | str | None = None) -> Tensor:
    """QR-DQN's quantile fractions ``tau_hat_i = (2 i + 1) / (2 N)``, float32 ``(N,)``."""
    return (torch.arange(num_quantiles, device=device, dtype=torch.float32) + 0.5) / num_quantiles


def quantile_huber_loss(quantiles: Tensor, target_quantiles: Tensor, kappa: float = 1.0) -> Tensor:
    """QR-DQN's loss of each sample, Dabney et al. 2018 eq. (10) with the quantile Huber loss of eq. (9):

        sum_i mean_j rho^kappa_{tau_hat_i}(T theta_j - theta_i),
        rho^kappa_tau(u) = |tau - 1{u < 0}| L_kappa(u) / kappa,
        L_kappa(u) = u^2 / 2 if |u| <= kappa else kappa (|u| - kappa / 2)

    With ``kappa=1`` it is sb3-contrib's ``quantile_huber_loss(..., sum_over_quantiles=True)`` per sample (theirs is
    its mean over the batch).

    Args:
        quantiles: ``(batch, N)`` the online network's quantiles theta_i of the taken action, at
            :func:`quantile_midpoints`.
        target_quantiles: ``(batch, N')`` the target's quantiles ``r + d (1 - terminal) theta'_j``, without gradient.
        kappa: the Huber threshold (> 0).

    Returns:
        float32 ``(batch,)``.
    """
    quantiles, target_quantiles = quantiles.float(), target_quantiles.float()
    tau = quantile_midpoints(quantiles.shape[-1], quantiles.device).unsqueeze(-1)  # (N, 1)
    # pairs (i, j) as (batch, N, N'): theta_i against T theta_j, u_ij = T theta_j - theta_i
    current, target = torch.broadcast_tensors(quantiles.unsqueeze(-1), target_quantiles.unsqueeze(-2))
    huber = F.huber_loss(current, target, reduction="none", delta=kappa)  # one fused kernel, forward and backward
    weight = (tau - (target < current.detach()).float()).abs()  # |tau_i - 1{u_ij < 0}|
    return (weight * huber).mean(dim=-1).sum(dim=-1) / kappa


def quantile_td_targets(
    next_quantiles: Tensor, rewards: Tensor, terminated: Tensor, discounts: float | Tensor
) -> Tensor:
    """QR-DQN's target quantiles ``r + d (1 - terminal) theta'_j`` (Dabney et al. 2018, Algorithm 1), float32
    ``(batch, N)``.

    Args:
        next_quantiles: ``(batch, N)`` the target network's quantiles of the next state's chosen action.
        rewards: ``(batch,)`` (an n-step sample: the discounted sum of its rewards).
        terminated: bool ``(batch,)``: no bootstrap.
        discounts: ``gamma``, or ``(batch,)`` per-sample gamma^k of n-step samples.
    """
    discounts = discounts.float().unsqueeze(-1) if isinstance(discounts, Tensor) else discounts
    bootstrap = (~terminated.bool()).float().unsqueeze(-1)
    return rewards.float().unsqueeze(-1) + discounts * bootstrap * next_quantiles.float()
