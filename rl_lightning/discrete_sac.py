"""Soft actor-critic for ``Discrete`` actions (Christodoulou 2019, "Soft Actor-Critic for Discrete Action
Settings"; CleanRL's ``sac_atari.py``): the policy's distribution is known, so every expectation over actions is
a sum over them instead of a sample.

    y           = r + gamma^n (1 - terminated) sum_a' pi(a'|s') (min_i Q_targ_i(s', a') - alpha log pi(a'|s'))
    critic loss = sum_i mean (Q_i(s, a) - y)^2                       (a: the action taken)
    actor loss  = mean_s sum_a pi(a|s) (alpha log pi(a|s) - min_i Q_i(s, a))       (critics detached)
    alpha loss  = -mean_s log_alpha (target_entropy - H(pi(.|s)))                  (entropy detached)

Illegal actions (an action mask) have pi = 0 and so leave every sum; a next state with no legal action bootstraps
from 0. ``SACModule`` runs :func:`discrete_sac_losses` for a ``Discrete`` action space.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rl_lightning.data.replay import ReplayBufferSamples
from rl_lightning.envs.spaces import ACTION_MASK_KEY
from rl_lightning.losses import (
    compute_ensemble_td_errors,
    compute_ensemble_td_loss,
    compute_td_target,
    compute_weighted_ensemble_td_loss,
)
from rl_lightning.nets.categorical import CategoricalActor, DiscreteCriticEnsemble


def compute_discrete_soft_values(probs: Tensor, log_probs: Tensor, q_values: Tensor, alpha: float | Tensor) -> Tensor:
    """The soft state value ``V(s) = sum_a pi(a|s) (min_i Q_i(s, a) - alpha log pi(a|s))`` ``(batch,)``.

    Args:
        probs, log_probs: ``(batch, num_actions)`` pi(.|s) and log pi(.|s) (0 and 0 at illegal actions).
        q_values: ``(num_critics, batch, num_actions)``.
        alpha: the entropy temperature.
    """
    return (probs * (q_values.float().min(dim=0).values - alpha * log_probs)).sum(dim=-1)


def compute_discrete_sac_actor_loss(
    probs: Tensor, log_probs: Tensor, q_values: Tensor, alpha: float | Tensor
) -> Tensor:
    """``mean_s sum_a pi(a|s) (alpha log pi(a|s) - min_i Q_i(s, a))``: minus the soft value, with ``q_values``
    ``(num_critics, batch, num_actions)`` detached (only the actor learns from it)."""
    return -compute_discrete_soft_values(probs, log_probs, q_values.detach(), alpha).mean()


def compute_discrete_sac_alpha_loss(
    log_alpha: Tensor, probs: Tensor, log_probs: Tensor, target_entropy: float | Tensor
) -> Tensor:
    """``mean_s sum_a pi(a|s) (-log_alpha (log pi(a|s) + target_entropy))`` = ``-mean_s log_alpha (target_entropy -
    H(pi(.|s)))``, the policy detached (CleanRL's form, in log alpha as :func:`compute_sac_alpha_loss`): raises
    alpha while the entropy is below the target.

    Args:
        probs, log_probs: ``(batch, num_actions)``.
        target_entropy: nats, one for every state or one per state ``(batch,)``.
    """
    entropy = -(probs.detach() * log_probs.detach()).sum(dim=-1)
    return -(log_alpha.float() * (target_entropy - entropy)).mean()


def discrete_sac_losses(
    actor: CategoricalActor,
    critic: DiscreteCriticEnsemble,
    target_critic: DiscreteCriticEnsemble,
    log_alpha: Tensor,
    batch: ReplayBufferSamples,
    discounts: float | Tensor,
    target_entropy: float | Tensor,
    learned_alpha: bool,
    weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]] | tuple[Tensor, dict[str, Tensor], Tensor]:
    """Discrete SAC's update as a pure function (``SACModule.update_loss`` calls it, through ``torch.compile`` with
    ``compile=True``): critic + actor (+ temperature) loss, each term reaching only its own parameters, and the
    metrics to log (without gradient); with ``weights`` (prioritized replay), the critics' loss weighted per sample
    and a third output, each sample's largest ``|Q_i(s, a) - y|`` over the critics ``(batch,)``. No random draw.

    Args:
        log_alpha: the temperature's log (a parameter if ``learned_alpha``, else a fixed buffer).
        discounts: ``gamma``, or the per-sample gamma^k of n-step samples.
        target_entropy: the entropy the temperature steers the policy to: nats, or per state ``(batch,)``.
        weights: float32 ``(batch,)`` importance weights, or None (uniform replay).
    """
    alpha = log_alpha.detach().exp()
    with torch.no_grad():
        next_probs, next_log_probs = actor.policy(batch.next_obs)
        next_values = compute_discrete_soft_values(next_probs, next_log_probs, target_critic(batch.next_obs), alpha)
        if actor.masked:  # a next state with no legal action (a game's end) has no value to bootstrap from
            next_values = torch.where(batch.next_obs[ACTION_MASK_KEY].bool().any(dim=-1), next_values, 0.0)
        td_targets = compute_td_target(batch.rewards, batch.terminated, next_values, discounts)
    all_q_values = critic(batch.obs)  # (num_critics, batch, num_actions)
    taken = batch.actions.long().reshape(1, -1, 1).expand(all_q_values.shape[0], -1, 1)
    q_values = all_q_values.gather(-1, taken).squeeze(-1)
    if weights is None:
        critic_loss = compute_ensemble_td_loss(q_values, td_targets)
    else:
        critic_loss = compute_weighted_ensemble_td_loss(q_values, td_targets, weights)
    probs, log_probs = actor.policy(batch.obs)
    actor_loss = compute_discrete_sac_actor_loss(probs, log_probs, all_q_values, alpha)
    loss = critic_loss + actor_loss
    metrics = {
        "losses/qf_loss": critic_loss.detach(),
        "losses/qf_values": q_values.detach().mean(),
        "losses/actor_loss": actor_loss.detach(),
        "losses/alpha": alpha,
        "losses/entropy": -(probs.detach() * log_probs.detach()).sum(dim=-1).mean(),
    }
    if learned_alpha:
        alpha_loss = compute_discrete_sac_alpha_loss(log_alpha, probs, log_probs, target_entropy)
        loss = loss + alpha_loss
        metrics["losses/alpha_loss"] = alpha_loss.detach()
    if weights is None:
        return loss, metrics
    return loss, metrics, compute_ensemble_td_errors(q_values, td_targets)
