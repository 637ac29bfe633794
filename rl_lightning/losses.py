"""Pure loss functions: tensors in, tensors out, each tested alone against hand-computed numbers.

Shapes are ``(num_envs, num_steps)`` for rollout quantities (VPG) and ``(batch,)`` for replay
samples (DQN). Returns and TD targets are computed in float32 even under mixed precision: they
are sums of many rewards, and bf16's 8 mantissa bits would round returns of ~100 to steps of 0.5.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rl_lightning.deprecations import renamed_keywords


@renamed_keywords(done="dones")  # the seeds' name
def compute_returns(rewards: Tensor, dones: Tensor, gamma: float = 0.9) -> Tensor:
    """Discounted returns G_t = r_t + gamma * G_{t+1}, restarting at every episode boundary.

    ``dones[:, t]`` marks that the episode ended on step t (terminated or truncated), so
    G_t = r_t there: returns never sum across an auto-reset. A rollout window that ends
    mid-episode gives G = 0 after its last step (no critic to bootstrap from).

    Args:
        rewards: ``(num_envs, num_steps)``.
        dones: bool ``(num_envs, num_steps)``.
        gamma: discount factor in [0, 1] (0.9 by default, as in the seeds).

    Returns:
        float32 ``(num_envs, num_steps)``.

    Example: rewards [0, 0, 1, 0, 1], dones [0, 0, 1, 0, 1] -> [g^2, g, 1, g, 1].
    """
    if rewards.shape != dones.shape or rewards.dim() != 2:
        raise ValueError(
            f"rewards and dones must both be (num_envs, num_steps), got {tuple(rewards.shape)} and {tuple(dones.shape)}"
        )
    return _discounted_sums(rewards.float(), (~dones.bool()).float() * gamma)


def _discounted_sums(values: Tensor, discounts: Tensor) -> Tensor:
    """``out_t = values_t + discounts_t * out_{t+1}`` along the steps (dim 1), 0 after the last step:
    returns (discounts ``gamma * (1 - done)``) and GAE (``gamma * lam * (1 - done)``)."""
    # Multiplying by a precomputed "continue" mask keeps the loop at two kernels per step.
    sums = torch.empty_like(values)
    running = torch.zeros_like(values[:, 0])
    for t in range(values.shape[1] - 1, -1, -1):
        running = torch.addcmul(values[:, t], discounts[:, t], running)
        sums[:, t] = running
    return sums


def normalize_returns(returns: Tensor, eps: float = 1e-8) -> Tensor:
    """Zero mean, unit variance over all envs and timesteps."""
    return (returns - returns.mean()) / (returns.std() + eps)


@renamed_keywords(tau="obs", pi="policy")  # the seeds' names
def compute_logprobs(obs: Tensor, actions: Tensor | nn.Module | None = None, policy: nn.Module | None = None) -> Tensor:
    """log pi(a_t | s_t) under ``policy`` for the actions taken.

    The seeds' call ``compute_logprobs(tau, pi)`` (a rollout with ``obs`` and ``actions``, and the policy)
    works too.

    Args:
        obs: ``(num_envs, num_steps, *obs_shape)``.
        actions: ``(num_envs, num_steps, *action_shape)`` (int for Discrete actions).
        policy: a module with a ``log_prob(obs, actions)`` method (a :class:`~rl_lightning.nets.PolicyNetwork`,
            any action space), or a module mapping obs to the logits ``(..., num_actions)`` of a categorical policy.

    Returns:
        ``(num_envs, num_steps)``, differentiable w.r.t. the policy's parameters.
    """
    if isinstance(obs, tuple) and hasattr(obs, "actions"):  # the seeds' (tau, pi): duck-typed RolloutTensors
        if policy is None:
            actions, policy = None, actions
        if actions is not None:
            raise TypeError("compute_logprobs(tau, pi) takes the actions from tau: pass no actions")
        obs, actions = obs.obs, obs.actions
    if actions is None or policy is None:
        raise TypeError("compute_logprobs needs obs, actions and policy (or the seeds' tau and pi)")
    log_prob = getattr(policy, "log_prob", None)  # duck-typed: the losses know no network class
    if callable(log_prob):
        return log_prob(obs, actions)
    log_probs = F.log_softmax(policy(obs).float(), dim=-1)
    return log_probs.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)


@renamed_keywords(logprobs_taken="new_logprobs", tau="old_logprobs")  # the seeds' names
def compute_importance_weights(new_logprobs: Tensor, old_logprobs: Tensor, clip_coef: float | None) -> Tensor:
    """pi(a|s) / pi_old(a|s) as exp of the log difference, detached, optionally clamped.

    Args:
        new_logprobs: logprobs under the policy being trained.
        old_logprobs: logprobs recorded when the rollout was collected, or (the seeds' call
            ``compute_importance_weights(logprobs_taken, tau, clip_coef)``) the rollout holding them as ``logprobs``.
        clip_coef: if given, weights are clamped to [1 - clip_coef, 1 + clip_coef].
    """
    if isinstance(old_logprobs, tuple):  # the seeds' tau: a RolloutTensors
        old_logprobs = old_logprobs.logprobs
    weights = torch.exp(new_logprobs - old_logprobs).detach()
    if clip_coef is not None:
        weights = weights.clamp(1 - clip_coef, 1 + clip_coef)
    return weights


@renamed_keywords(logprobs_taken="logprobs", importance_weights="iw")  # the seeds', an earlier one's
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


def compute_td_target(rewards: Tensor, terminated: Tensor, next_q_values: Tensor, gamma: float | Tensor) -> Tensor:
    """r + gamma * (1 - terminated) * next_q: bootstrap unless the next state is terminal.

    A time-limit truncation is not terminal, so the replay buffer stores ``terminated`` (not
    done) and the bootstrap still applies there.

    Args:
        rewards: ``(batch,)`` (an n-step sample: the discounted sum of its rewards).
        terminated: bool ``(batch,)``.
        next_q_values: ``(batch,)`` value of the next state (max_a Q_target, the double-DQN
            choice, a soft value), already without gradient.
        gamma: discount factor, or ``(batch,)`` per-sample discounts (gamma^k of n-step samples).
    """
    discounts = gamma.float() if isinstance(gamma, Tensor) else gamma
    return rewards.float() + discounts * (~terminated.bool()).float() * next_q_values.float()


def compute_n_step_returns(rewards: Tensor, dones: Tensor, gamma: float) -> tuple[Tensor, Tensor, Tensor]:
    """n-step returns of transition chains, cut where an episode ends.

    Step k of a chain is summed if no episode ended before it (``dones`` of the steps before);
    the step where one ends is summed and is the last: a terminated episode then bootstraps from
    nothing, a truncated one from its true final observation (the caller picks both by the
    returned last step).

    Args:
        rewards: ``(batch, n)``, r_{t+1} .. r_{t+n} of each chain.
        dones: bool ``(batch, n)``, whether the episode ended on each of those steps.
        gamma: discount factor.

    Returns:
        the returns ``sum_k gamma^k r_{t+k+1}`` (float32 ``(batch,)``), the index of the last step
        summed (int64 ``(batch,)``), and the bootstrap's discount gamma^(steps summed) (float32).

    Example: rewards [1, 1, 1], dones [0, 1, 0], gamma 0.5 -> 1.5, last step 1, discount 0.25.
    """
    if rewards.shape != dones.shape or rewards.dim() != 2:
        raise ValueError(
            f"rewards and dones must both be (batch, n), got {tuple(rewards.shape)} and {tuple(dones.shape)}"
        )
    dones = dones.bool()
    ended_before = (dones.long().cumsum(dim=1) - dones.long()) > 0
    summed = (~ended_before).float()
    powers = gamma ** torch.arange(rewards.shape[1], device=rewards.device, dtype=torch.float32)
    returns = (rewards.float() * powers * summed).sum(dim=1)
    steps = summed.sum(dim=1)
    return returns, steps.long() - 1, gamma**steps


def compute_td_loss(q_values: Tensor, td_targets: Tensor, loss: str = "mse") -> Tensor:
    """Mean squared (or Huber) TD error between Q(s, a) and its targets, in float32."""
    if loss == "mse":
        return F.mse_loss(q_values.float(), td_targets.float())
    if loss == "huber":
        return F.smooth_l1_loss(q_values.float(), td_targets.float())
    raise ValueError(f"loss must be 'mse' or 'huber', got {loss!r}")


def compute_weighted_td_loss(q_values: Tensor, td_targets: Tensor, weights: Tensor, loss: str = "mse") -> Tensor:
    """Prioritized replay's TD loss: ``mean_i w_i l(Q_i - y_i)``, ``l`` squared (or Huber), in float32. The
    importance weights ``w`` undo the bias of sampling by priority (Schaul et al. 2016); all ones, it is
    :func:`compute_td_loss` up to rounding.

    Args:
        q_values, td_targets, weights: ``(batch,)``.
    """
    q_values, td_targets = q_values.float(), td_targets.float()
    if loss == "mse":
        per_sample = (q_values - td_targets).square()
    elif loss == "huber":
        per_sample = F.smooth_l1_loss(q_values, td_targets, reduction="none")
    else:
        raise ValueError(f"loss must be 'mse' or 'huber', got {loss!r}")
    return (weights.float() * per_sample).mean()


# -- continuous control off-policy (SAC, TD3) ---------------------------------------------------


def compute_ensemble_td_loss(q_values: Tensor, td_targets: Tensor) -> Tensor:
    """The sum over the critics of each one's mean squared TD error (CleanRL's ``qf1_loss + qf2_loss``).

    Args:
        q_values: ``(num_critics, batch)`` Q(s, a) of each critic.
        td_targets: ``(batch,)``, without gradient.
    """
    return (q_values.float() - td_targets.float().unsqueeze(0)).square().mean(dim=1).sum()


def compute_weighted_ensemble_td_loss(q_values: Tensor, td_targets: Tensor, weights: Tensor) -> Tensor:
    """Prioritized replay's :func:`compute_ensemble_td_loss`: each critic's squared TD errors weighted by the
    samples' importance weights, then averaged, summed over the critics.

    Args:
        q_values: ``(num_critics, batch)``.
        td_targets, weights: ``(batch,)``.
    """
    errors = (q_values.float() - td_targets.float().unsqueeze(0)).square()
    return (weights.float().unsqueeze(0) * errors).mean(dim=1).sum()


def compute_ensemble_td_errors(q_values: Tensor, td_targets: Tensor) -> Tensor:
    """Each sample's largest ``|Q_i(s, a) - y|`` over the critics, detached (prioritized replay's TD error of a
    critic ensemble, as TorchRL's SAC and TD3 losses report it).

    Args:
        q_values: ``(num_critics, batch)``.
        td_targets: ``(batch,)``.
    """
    return (q_values.detach().float() - td_targets.detach().float().unsqueeze(0)).abs().amax(dim=0)


def compute_sac_target(
    rewards: Tensor,
    terminated: Tensor,
    next_q_values: Tensor,
    next_logprobs: Tensor,
    alpha: float | Tensor,
    gamma: float | Tensor,
) -> Tensor:
    """SAC's soft TD target ``r + gamma (1 - terminated) (min_i Q_target_i(s', a') - alpha log pi(a'|s'))``
    with ``a' ~ pi(.|s')``: the smallest critic's value (clipped double Q) minus the entropy term.

    Args:
        next_q_values: ``(num_critics, batch)`` target critics at ``(s', a')``.
        next_logprobs: ``(batch,)`` log pi(a'|s').
        alpha: the entropy temperature.
        gamma: discount factor, or per-sample discounts (n-step).
    """
    soft_values = next_q_values.float().min(dim=0).values - alpha * next_logprobs.float()
    return compute_td_target(rewards, terminated, soft_values, gamma)


def compute_sac_actor_loss(q_values: Tensor, logprobs: Tensor, alpha: float | Tensor) -> Tensor:
    """``E[alpha log pi(a|s) - min_i Q_i(s, a)]`` for reparameterised ``a ~ pi(.|s)`` (the critics'
    parameters detached, so only the actor learns from it).

    Args:
        q_values: ``(num_critics, batch)``.
        logprobs: ``(batch,)``.
    """
    return (alpha * logprobs.float() - q_values.float().min(dim=0).values).mean()


def compute_sac_alpha_loss(log_alpha: Tensor, logprobs: Tensor, target_entropy: float) -> Tensor:
    """``-E[log_alpha (log pi(a|s) + target_entropy)]``: raises alpha while the policy's entropy
    (``-log pi``) is below ``target_entropy``, lowers it above (SB3's form, in log alpha)."""
    return -(log_alpha.float() * (logprobs.detach().float() + target_entropy)).mean()


def compute_td3_target(rewards: Tensor, terminated: Tensor, next_q_values: Tensor, gamma: float | Tensor) -> Tensor:
    """TD3's target ``r + gamma (1 - terminated) min_i Q_target_i(s', a')`` (clipped double Q; one
    critic: DDPG's target), ``next_q_values`` ``(num_critics, batch)``."""
    return compute_td_target(rewards, terminated, next_q_values.float().min(dim=0).values, gamma)


def smooth_target_actions(
    target_actions: Tensor, noise: Tensor, noise_clip: float, action_scale: Tensor, low: Tensor, high: Tensor
) -> Tensor:
    """TD3's target policy smoothing: ``clamp(a' + clamp(noise, -noise_clip, noise_clip) * scale, low, high)``.

    Args:
        target_actions: ``(batch, *action_shape)`` the target actor's actions.
        noise: like ``target_actions``: N(0, target_noise) draws (in units of the half-range).
        noise_clip: the noise's bound (in the same units).
        action_scale, low, high: the ``Box``'s half-range and bounds, broadcastable to the actions.
    """
    clipped = noise.float().clamp(-noise_clip, noise_clip) * action_scale
    return torch.maximum(torch.minimum(target_actions.float() + clipped, high), low)


# -- actor-critic (PPO) ----------------------------------------------------------------------


def compute_gae(
    rewards: Tensor,
    values: Tensor,
    next_values: Tensor,
    terminated: Tensor,
    truncated: Tensor,
    gamma: float,
    lam: float,
) -> Tensor:
    """Generalized advantage estimates (TorchRL's functional ``generalized_advantage_estimate``):

        delta_t = r_t + gamma * (1 - terminated_t) * next_values_t - values_t
        A_t     = delta_t + gamma * lam * (1 - done_t) * A_{t+1},   done = terminated | truncated

    *done* cuts the trace, *terminated* cuts the bootstrap: where step t ended its episode by a time
    limit it still bootstraps from ``next_values[:, t]``, the value of the state the episode really
    reached (``info["final_observation"]``), not 0 and not the next episode's first value. The seeds'
    ``rollout.py`` ``advantages`` is the case ``next_values = values shifted by one step`` with every
    episode end terminal.

    Args:
        rewards: ``(num_envs, num_steps)``.
        values: ``(num_envs, num_steps)``: V(obs t).
        next_values: ``(num_envs, num_steps)``: V of the state step t reached (used where not terminated).
        terminated, truncated: bool ``(num_envs, num_steps)``: step t ended its episode by termination /
            by a time limit.
        gamma, lam: discount and GAE lambda in [0, 1].

    Returns:
        float32 ``(num_envs, num_steps)``; returns for the value loss are ``advantages + values``.
    """
    shapes = [tuple(tensor.shape) for tensor in (rewards, values, next_values, terminated, truncated)]
    if len(set(shapes)) != 1 or rewards.dim() != 2:
        raise ValueError(
            "rewards, values, next_values, terminated and truncated must all be (num_envs, num_steps), got "
            + ", ".join(map(str, shapes))
        )
    rewards, values = rewards.float(), values.float()
    bootstrap = torch.where(terminated.bool(), 0.0, next_values.float())
    deltas = rewards + gamma * bootstrap - values
    return _discounted_sums(deltas, (~(terminated.bool() | truncated.bool())).float() * (gamma * lam))


def weighted_mean(values: Tensor, weights: Tensor | None = None) -> Tensor:
    """``values.mean()``, or with ``weights`` (0 / 1 per entry, e.g. the ``"active"`` mask of agents that are in their
    scene) the mean over the weighted entries: sum(w * x) / max(sum(w), 1)."""
    if weights is None:
        return values.mean()
    return (values * weights).sum() / weights.sum().clamp(min=1.0)


def normalize_advantages(advantages: Tensor, eps: float = 1e-8, weights: Tensor | None = None) -> Tensor:
    """Zero mean, unit standard deviation over the minibatch (with ``weights``: over its weighted entries)."""
    if weights is None:
        return (advantages - advantages.mean()) / (advantages.std() + eps)
    mean = weighted_mean(advantages, weights)
    count = weights.sum()
    variance = (weights * (advantages - mean).square()).sum() / (count - 1.0).clamp(min=1.0)  # unbiased, as std()
    return (advantages - mean) / (variance.sqrt() + eps)


def compute_ppo_policy_loss(
    logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, clip_coef: float, weights: Tensor | None = None
) -> Tensor:
    """The clipped surrogate objective as a loss to minimise:
    mean(max(-A * r, -A * clip(r, 1 - clip_coef, 1 + clip_coef))), r = pi / pi_old (with ``weights``, their
    weighted mean: :func:`weighted_mean`)."""
    ratio = torch.exp(logprobs.float() - old_logprobs.float())
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1 - clip_coef, 1 + clip_coef)
    return weighted_mean(torch.max(unclipped, clipped), weights)


def compute_ppo_value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    clip_coef: float | None = None,
    weights: Tensor | None = None,
) -> Tensor:
    """0.5 * mean squared error to the returns; with ``clip_coef`` the new value may move at most
    ``clip_coef`` from the value at collection, and the larger of the two errors counts (with ``weights``, their
    weighted mean)."""
    values, returns = values.float(), returns.float()
    unclipped = (values - returns).square()
    if clip_coef is None:
        return 0.5 * weighted_mean(unclipped, weights)
    clipped_values = old_values.float() + (values - old_values.float()).clamp(-clip_coef, clip_coef)
    return 0.5 * weighted_mean(torch.max(unclipped, (clipped_values - returns).square()), weights)


def compute_ppo_loss(
    policy_loss: Tensor,
    value_loss: Tensor,
    entropy: Tensor,
    vf_coef: float,
    ent_coef: float,
    weights: Tensor | None = None,
) -> Tensor:
    """policy_loss + vf_coef * value_loss - ent_coef * mean entropy (the entropy bonus; with ``weights``, its
    weighted mean)."""
    return policy_loss + vf_coef * value_loss - ent_coef * weighted_mean(entropy.float(), weights)


def compute_approx_kl(logprobs: Tensor, old_logprobs: Tensor, weights: Tensor | None = None) -> Tensor:
    """KL(pi_old || pi) estimated as mean((r - 1) - log r) (Schulman's low-variance estimator)."""
    log_ratio = logprobs.float() - old_logprobs.float()
    return weighted_mean(torch.expm1(log_ratio) - log_ratio, weights)


def compute_clip_fraction(
    logprobs: Tensor, old_logprobs: Tensor, clip_coef: float, weights: Tensor | None = None
) -> Tensor:
    """The fraction of samples whose ratio lies outside [1 - clip_coef, 1 + clip_coef]."""
    ratio = torch.exp(logprobs.float() - old_logprobs.float())
    return weighted_mean(((ratio - 1.0).abs() > clip_coef).float(), weights)


def compute_explained_variance(values: Tensor, returns: Tensor) -> Tensor:
    """1 - Var(returns - values) / Var(returns): 1 for a perfect critic, 0 for a constant one
    (NaN when the returns do not vary)."""
    values, returns = values.float().flatten(), returns.float().flatten()
    variance = returns.var(unbiased=False)
    return 1.0 - (returns - values).var(unbiased=False) / variance
