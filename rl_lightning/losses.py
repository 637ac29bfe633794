"""Pure loss functions: tensors in, tensors out, each tested alone against hand-computed numbers.

Shapes are ``(num_envs, num_steps)`` for rollout quantities (VPG) and ``(batch,)`` for replay
samples (DQN). Returns and TD targets are computed in float32 even under mixed precision: they
are sums of many rewards, and bf16's 8 mantissa bits would round returns of ~100 to steps of 0.5.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rl_lightning.nets import PolicyNetwork


def compute_returns(rewards: Tensor, dones: Tensor, gamma: float) -> Tensor:
    """Discounted returns G_t = r_t + gamma * G_{t+1}, restarting at every episode boundary.

    ``dones[:, t]`` marks that the episode ended on step t (terminated or truncated), so
    G_t = r_t there: returns never sum across an auto-reset. A rollout window that ends
    mid-episode gives G = 0 after its last step (no critic to bootstrap from).

    Args:
        rewards: ``(num_envs, num_steps)``.
        dones: bool ``(num_envs, num_steps)``.
        gamma: discount factor in [0, 1].

    Returns:
        float32 ``(num_envs, num_steps)``.

    Example: rewards [0, 0, 1, 0, 1], dones [0, 0, 1, 0, 1] -> [g^2, g, 1, g, 1].
    """
    if rewards.shape != dones.shape or rewards.dim() != 2:
        raise ValueError(
            f"rewards and dones must both be (num_envs, num_steps), got {tuple(rewards.shape)} and {tuple(dones.shape)}"
        )
    rewards = rewards.float()
    # Multiplying by a precomputed "continue" mask keeps the loop at two kernels per step.
    discounts = (~dones.bool()).float() * gamma
    returns = torch.empty_like(rewards)
    running = torch.zeros_like(rewards[:, 0])
    for t in range(rewards.shape[1] - 1, -1, -1):
        running = torch.addcmul(rewards[:, t], discounts[:, t], running)
        returns[:, t] = running
    return returns


def normalize_returns(returns: Tensor, eps: float = 1e-8) -> Tensor:
    """Zero mean, unit variance over all envs and timesteps."""
    return (returns - returns.mean()) / (returns.std() + eps)


def compute_logprobs(obs: Tensor, actions: Tensor, policy: nn.Module) -> Tensor:
    """log pi(a_t | s_t) under ``policy`` for the actions taken.

    Args:
        obs: ``(num_envs, num_steps, *obs_shape)``.
        actions: ``(num_envs, num_steps, *action_shape)`` (int for Discrete actions).
        policy: a :class:`~rl_lightning.nets.PolicyNetwork` (any action space), or a module mapping
            obs to the logits ``(..., num_actions)`` of a categorical policy.

    Returns:
        ``(num_envs, num_steps)``, differentiable w.r.t. the policy's parameters.
    """
    if isinstance(policy, PolicyNetwork):
        return policy.log_prob(obs, actions)
    log_probs = F.log_softmax(policy(obs).float(), dim=-1)
    return log_probs.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)


def compute_importance_weights(new_logprobs: Tensor, old_logprobs: Tensor, clip_coef: float | None) -> Tensor:
    """pi(a|s) / pi_old(a|s) as exp of the log difference, detached, optionally clamped.

    Args:
        new_logprobs: logprobs under the policy being trained.
        old_logprobs: logprobs recorded when the rollout was collected.
        clip_coef: if given, weights are clamped to [1 - clip_coef, 1 + clip_coef].
    """
    weights = torch.exp(new_logprobs - old_logprobs).detach()
    if clip_coef is not None:
        weights = weights.clamp(1 - clip_coef, 1 + clip_coef)
    return weights


def compute_reinforce_loss(returns: Tensor, logprobs: Tensor, iw: Tensor) -> Tensor:
    """The REINFORCE objective to *maximise*: mean of iw * log pi(a_t|s_t) * (G_t - b_t).

    The baseline b_t is the mean return at timestep t across envs (no critic); the advantage
    carries no gradient.

    Args:
        returns, logprobs, iw (importance weights): ``(num_envs, num_steps)``.

    Returns:
        A scalar; gradient *ascent* on it improves the policy.
    """
    advantages = returns - returns.mean(dim=0, keepdim=True)
    return (iw * logprobs * advantages.detach()).mean()


def compute_td_target(rewards: Tensor, terminated: Tensor, next_q_values: Tensor, gamma: float) -> Tensor:
    """r + gamma * (1 - terminated) * next_q: bootstrap unless the next state is terminal.

    A time-limit truncation is not terminal, so the replay buffer stores ``terminated`` (not
    done) and the bootstrap still applies there.

    Args:
        rewards: ``(batch,)``.
        terminated: bool ``(batch,)``.
        next_q_values: ``(batch,)`` value of the next state (max_a Q_target, or the double-DQN
            choice), already without gradient.
        gamma: discount factor.
    """
    return rewards.float() + gamma * (~terminated.bool()).float() * next_q_values.float()


def compute_td_loss(q_values: Tensor, td_targets: Tensor, loss: str = "mse") -> Tensor:
    """Mean squared (or Huber) TD error between Q(s, a) and its targets, in float32."""
    if loss == "mse":
        return F.mse_loss(q_values.float(), td_targets.float())
    if loss == "huber":
        return F.smooth_l1_loss(q_values.float(), td_targets.float())
    raise ValueError(f"loss must be 'mse' or 'huber', got {loss!r}")
