"""Pure loss functions of the offline algorithms (behaviour cloning, TD3+BC, IQL): tensors in, tensors out, each
tested alone against hand-computed numbers (``tests/algos/test_offline.py``).

Shapes: ``(batch,)`` for per-transition quantities, ``(batch, action_dim)`` for Box actions, ``(num_critics, batch)``
for a critic ensemble's Q-values (``rl_lightning.nets.CriticEnsemble``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "compute_awr_weights",
    "compute_bc_loss",
    "compute_discrete_bc_loss",
    "compute_expectile_loss",
    "compute_iql_q_target",
    "compute_td3_bc_actor_loss",
    "gaussian_log_prob",
    "weighted_log_prob_loss",
]


def compute_bc_loss(policy_actions: Tensor, actions: Tensor) -> Tensor:
    """Behaviour cloning of a deterministic policy: the mean squared error to the dataset's actions.

    Args:
        policy_actions: ``(batch, *action_shape)`` pi(s), differentiable.
        actions: ``(batch, *action_shape)`` the dataset's actions a.
    """
    return (policy_actions.float() - actions.float()).square().mean()


def compute_discrete_bc_loss(logits: Tensor, actions: Tensor) -> Tensor:
    """Behaviour cloning of a categorical policy: the cross-entropy ``-mean log pi(a|s)`` of the dataset's actions.

    Args:
        logits: ``(batch, num_actions)``.
        actions: int64 ``(batch,)``.
    """
    return F.cross_entropy(logits.float(), actions.long())


def compute_td3_bc_actor_loss(
    q_values: Tensor, policy_actions: Tensor, actions: Tensor, alpha: float
) -> tuple[Tensor, Tensor]:
    """TD3+BC's actor loss (Fujimoto & Gu 2021, eq. 3): ``-lambda mean Q(s, pi(s)) + mean (pi(s) - a)^2`` with
    ``lambda = alpha / mean |Q(s, pi(s))|`` (no gradient through lambda), and lambda itself.

    Args:
        q_values: ``(batch,)`` Q_1(s, pi(s)) (the critic's parameters detached: gradients reach the actions only).
        policy_actions: ``(batch, *action_shape)`` pi(s).
        actions: ``(batch, *action_shape)`` the dataset's actions.
        alpha: the weight of the RL term (2.5 in the paper).
    """
    lam = alpha / q_values.abs().mean().detach()
    return -lam * q_values.mean() + compute_bc_loss(policy_actions, actions), lam


def compute_expectile_loss(differences: Tensor, expectile: float) -> Tensor:
    """The asymmetric squared loss ``mean |expectile - 1(u < 0)| u^2`` of IQL's value function (Kostrikov et al.
    2021, eq. 5), with ``u = Q(s, a) - V(s)``: an ``expectile`` above 0.5 weighs the positive differences more, so
    V tends to an upper expectile of Q over the dataset's actions (0.5: the mean, plain MSE).

    Args:
        differences: ``(batch,)`` u = Q_target(s, a) - V(s).
        expectile: tau in (0, 1) (0.7 for MuJoCo in the paper).
    """
    weights = torch.where(differences < 0, 1.0 - expectile, expectile)
    return (weights * differences.float().square()).mean()


def compute_iql_q_target(rewards: Tensor, terminated: Tensor, next_values: Tensor, discounts: float | Tensor) -> Tensor:
    """IQL's Q target ``r + gamma (1 - terminated) V(s')`` (no max over actions: the value network's expectile
    stands in for it).

    Args:
        rewards: float32 ``(batch,)``.
        terminated: bool ``(batch,)``.
        next_values: ``(batch,)`` V(s'), without gradient.
        discounts: gamma, or a per-sample ``(batch,)`` gamma^k.
    """
    return rewards.float() + discounts * (~terminated).float() * next_values.float()


def compute_awr_weights(advantages: Tensor, beta: float, max_weight: float = 100.0) -> Tensor:
    """Advantage-weighted regression's weights ``min(exp(beta * A), max_weight)`` (IQL's policy extraction),
    without gradient.

    Args:
        advantages: ``(batch,)`` A = Q_target(s, a) - V(s).
        beta: the inverse temperature (3.0 for MuJoCo in the paper).
        max_weight: the clip of the weights (100 in the paper).
    """
    # exp of a large advantage overflows to inf before the clip: clip the exponent first (the same result).
    exponent = (beta * advantages.detach().float()).clamp(max=math.log(max_weight))
    return exponent.exp()


def gaussian_log_prob(mean: Tensor, log_std: Tensor, actions: Tensor) -> Tensor:
    """``log N(a; mean, exp(log_std))`` summed over the action's dimensions.

    Args:
        mean: ``(batch, action_dim)``.
        log_std: ``(action_dim,)`` or ``(batch, action_dim)``.
        actions: ``(batch, action_dim)``.

    Returns:
        ``(batch,)``.
    """
    z = (actions.float() - mean.float()) / log_std.exp()
    return (-0.5 * z.square() - log_std - 0.5 * math.log(2 * math.pi)).sum(dim=-1)


def weighted_log_prob_loss(log_probs: Tensor, weights: Tensor) -> Tensor:
    """``-mean(w * log pi(a|s))``: IQL's advantage-weighted actor loss (the weights carry no gradient).

    Args:
        log_probs: ``(batch,)`` log pi(a|s) of the dataset's actions.
        weights: ``(batch,)`` from :func:`compute_awr_weights`.
    """
    return -(weights.detach() * log_probs).mean()
