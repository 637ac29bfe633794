"""Implicit Q-learning (Kostrikov et al. 2021) as a LightningModule on the offline layer (``algos/offline.py``).

    fit start: the rewards' scale 1000 / (max episode return - min episode return) from the dataset (scale_rewards)
    per training step, on a dataset batch (s, a, r, terminated, s'):
        value loss  = mean |expectile - 1(u < 0)| u^2,  u = min_i Q_targ_i(s, a) - V(s)         compute_expectile_loss
        critic loss = sum_i mean (Q_i(s, a) - (r + gamma (1 - terminated) V(s')))^2              compute_iql_q_target
        actor loss  = -mean min(exp(beta (min_i Q_targ_i(s, a) - V(s))), 100) log pi(a|s)     compute_awr_weights
        one Adam step on the sum: each term reaches only its own parameters (three parameter groups)
        TargetNetworkSync: Q_targ <- tau Q + (1 - tau) Q_targ after every update

No action outside the dataset is ever evaluated: V is an upper expectile of Q over the dataset's actions, and the
policy is extracted by advantage-weighted regression. The policy is the paper's: a Gaussian whose mean is
tanh-squashed into the bounds (``DeterministicActor``) and whose log-std is a learned state-independent vector; the
greedy action is the mean. One optimizer step for the three losses (as SAC here), where the paper steps V, then
the actor, then Q: the actor and Q read the V from before this update.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import lightning as L
import torch
from torch import Tensor, nn

from rl_lightning._checks import check_bool, check_float, check_int, check_sizes
from rl_lightning.algos.offline import OfflineModule
from rl_lightning.callbacks.target_sync import TargetNetworkSync
from rl_lightning.data.offline import episode_returns
from rl_lightning.data.replay import ReplayBufferSamples
from rl_lightning.export import GreedyPolicy
from rl_lightning.losses import compute_ensemble_td_loss
from rl_lightning.nets import CriticEnsemble, DeterministicActor, ValueNetwork
from rl_lightning.offline_losses import (
    compute_awr_weights,
    compute_expectile_loss,
    compute_iql_q_target,
    gaussian_log_prob,
    weighted_log_prob_loss,
)
from rl_lightning.seeding import seeded

#: The bounds of the policy's log-std.
LOG_STD_BOUNDS = (-5.0, 2.0)


class IQLModule(OfflineModule):
    """IQL for ``Box`` action spaces. The defaults are the paper's MuJoCo settings: expectile 0.7, beta 3.0, weights
    clipped at 100, lr 3e-4, tau 0.005, gamma 0.99, (256, 256) ReLU networks, rewards scaled by 1000 / (the range of
    the dataset's episode returns).

    Args:
        env_id: the env whose spaces the dataset has (evaluation plays it), with a bounded ``Box`` action space.
        lr: Adam learning rate of actor, critics and value.
        gamma: discount factor.
        tau: Polyak weight of the target critics' update after every update.
        expectile: the value loss's expectile in (0, 1) (0.5: V is the mean of Q, SARSA's).
        beta: the inverse temperature of the advantage weights (0: behaviour cloning of the Gaussian).
        max_weight: the clip of the advantage weights.
        num_critics: Q networks (V regresses on their minimum).
        hidden_sizes: hidden widths of the actor, each critic and the value network.
        scale_rewards: multiply the rewards by 1000 / (max - min episode return of the dataset) (the paper's MuJoCo
            scaling; computed once at fit start and kept in the module).
        normalize_obs: normalise observations by the dataset's mean and std (the paper does not).
        seed: network init and (with ``dataset``) the batches' sampling.
        dataset: what ``fit`` reads without a datamodule: a dataset path or Minari id.
        batch_size: transitions per batch, with ``dataset``.
        steps_per_epoch: updates per epoch, with ``dataset``.
        max_grad_norm: clip each update's global gradient norm to this; None: no clipping.
        env_backend: ``"auto"``, ``"torch"``, ``"gymnasium"``, ``"envpool"``, ``"ale_vector"`` or ``"ray"``.
        env_kwargs: for gymnasium envs.
        compile: the update (:func:`iql_losses`) through ``torch.compile`` (``rl_lightning.compiling``).
    """

    action_kinds = ("box",)

    def __init__(
        self,
        env_id: str = "Pendulum-v1",
        lr: float = 3e-4,
        gamma: float = 0.99,
        tau: float = 0.005,
        expectile: float = 0.7,
        beta: float = 3.0,
        max_weight: float = 100.0,
        num_critics: int = 2,
        hidden_sizes: Sequence[int] = (256, 256),
        scale_rewards: bool = True,
        normalize_obs: bool = False,
        seed: int = 0,
        dataset: str | None = None,
        batch_size: int = 256,
        steps_per_epoch: int = 1_000,
        max_grad_norm: float | None = None,
        env_backend: str = "auto",
        env_kwargs: dict[str, Any] | None = None,
        compile: bool | dict[str, Any] = False,
    ):
        super().__init__(
            env_id=env_id,
            seed=seed,
            gamma=gamma,
            tau=tau,
            dataset=dataset,
            batch_size=batch_size,
            steps_per_epoch=steps_per_epoch,
            normalize_obs=normalize_obs,
            env_backend=env_backend,
            env_kwargs=env_kwargs,
            compile=compile,
        )
        check_float("lr", lr, 0.0, low_open=True)
        check_float("expectile", expectile, 0.0, 1.0, low_open=True, high_open=True)
        check_float("beta", beta, 0.0)
        check_float("max_weight", max_weight, 0.0, low_open=True)
        check_int("num_critics", num_critics, 1)
        check_bool("scale_rewards", scale_rewards)
        hidden_sizes = check_sizes("hidden_sizes", hidden_sizes)
        if max_grad_norm is not None:
            check_float("max_grad_norm", max_grad_norm, 0.0, low_open=True)
        self.save_hyperparameters()
        space = self.policy_observation_space
        self.obs_normalizer = self.make_obs_normalizer(space)
        with seeded(seed):  # the same initial weights on every rank
            self.actor = DeterministicActor(space, self.action_space, hidden_sizes)
            self.critic = CriticEnsemble(space, self.action_space, num_critics, hidden_sizes)
            self.value = ValueNetwork(space, hidden_sizes)
        self.actor_log_std = nn.Parameter(torch.zeros(self.actor.action_scale.numel()))
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        # The rewards' factor, set from the dataset at fit start (0: not yet set); 1 without scale_rewards.
        self.register_buffer("reward_scale", torch.tensor(0.0 if scale_rewards else 1.0))

    # -- the dataset's statistics -------------------------------------------------------------------------------

    def statistics_needed(self) -> str:
        return "scale_rewards: the range of its episodes' returns; normalize_obs: the observations' mean and std"

    def needs_dataset_statistics(self) -> bool:
        return super().needs_dataset_statistics() or float(self.reward_scale) == 0.0

    @torch.no_grad()
    def prepare_dataset(self, transitions: Any) -> None:
        super().prepare_dataset(transitions)
        if float(self.reward_scale) == 0.0:
            returns = episode_returns(transitions)
            spread = float(returns.max() - returns.min()) if returns.numel() else 0.0
            # Fewer than two complete episodes, or all alike: no range to scale by; the rewards stay as they are.
            self.reward_scale.fill_(1000.0 / spread if spread > 0 else 1.0)

    # -- acting -------------------------------------------------------------------------------------------------

    def policy_actions(self, obs: Tensor, greedy: bool) -> Tensor:
        """The Gaussian's mean if ``greedy``, else a sample clamped to the bounds (torch's global RNG)."""
        mean = self.actor(self.normalize(obs))
        self.check_finite_outputs(mean, "policy's actions")
        if greedy:
            return mean
        std = self.actor_log_std.clamp(*LOG_STD_BOUNDS).exp().view(self.action_shape)
        scale, bias = self.actor.action_scale.view(self.action_shape), self.actor.action_bias.view(self.action_shape)
        sample = mean + std * torch.randn_like(mean)
        return torch.maximum(torch.minimum(sample, bias + scale), bias - scale)

    def greedy_policy(self) -> nn.Module:
        return GreedyPolicy(self.actor, self.obs_normalizer)

    def target_network_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        return [(self.target_critic, self.critic)]

    # -- learning -----------------------------------------------------------------------------------------------

    def update_loss(self, batch: ReplayBufferSamples) -> Tensor:
        hp = self.hparams

        def arguments(module: IQLModule, part: ReplayBufferSamples) -> tuple[Any, ...]:
            normalized = part._replace(
                obs=module.normalize(part.obs),
                next_obs=module.normalize(part.next_obs),
                rewards=part.rewards * module.reward_scale,
            )
            networks = (module.actor, module.actor_log_std, module.critic, module.target_critic, module.value)
            return (*networks, normalized, module.discounts(part), hp.expectile, hp.beta, hp.max_weight)

        loss, metrics = self.seed_update(iql_losses, batch, arguments)
        if self.should_log():
            self.log_metrics(metrics)
            self.log_charts()
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        groups = [
            {"params": [*self.actor.parameters(), self.actor_log_std]},
            {"params": list(self.critic.parameters())},
            {"params": list(self.value.parameters())},
        ]
        return torch.optim.Adam(groups, lr=self.hparams.lr, fused=self.use_fused_adam())

    def configure_callbacks(self) -> list[L.Callback]:
        return [*super().configure_callbacks(), TargetNetworkSync(every_n_env_steps=None, tau=self.hparams.tau)]


def iql_losses(
    actor: DeterministicActor,
    actor_log_std: Tensor,
    critic: CriticEnsemble,
    target_critic: CriticEnsemble,
    value: ValueNetwork,
    batch: ReplayBufferSamples,
    discounts: float | Tensor,
    expectile: float,
    beta: float,
    max_weight: float,
) -> tuple[Tensor, dict[str, Tensor]]:
    """IQL's update as a pure function: the value's expectile loss, the critics' TD loss toward ``r + gamma V(s')``
    and the actor's advantage-weighted log-likelihood, summed (each reaches only its own parameters), and the
    metrics (without gradient).

    Args:
        actor_log_std: ``(action_dim,)`` the Gaussian's log-std (clamped to ``LOG_STD_BOUNDS``).
        batch: normalised observations, scaled rewards.
        discounts: ``gamma``.
        expectile: the value loss's expectile.
        beta: the advantage weights' inverse temperature.
        max_weight: the advantage weights' clip.
    """
    with torch.no_grad():
        target_q = target_critic(batch.obs, batch.actions).min(dim=0).values
        next_values = value(batch.next_obs)
        q_targets = compute_iql_q_target(batch.rewards, batch.terminated, next_values, discounts)
    values = value(batch.obs)
    value_loss = compute_expectile_loss(target_q - values, expectile)
    q_values = critic(batch.obs, batch.actions)
    critic_loss = compute_ensemble_td_loss(q_values, q_targets)
    advantages = target_q - values.detach()
    weights = compute_awr_weights(advantages, beta, max_weight)
    log_std = actor_log_std.clamp(*LOG_STD_BOUNDS)
    log_probs = gaussian_log_prob(actor(batch.obs).flatten(1), log_std, batch.actions.flatten(1))
    actor_loss = weighted_log_prob_loss(log_probs, weights)
    metrics = {
        "losses/value_loss": value_loss.detach(),
        "losses/qf_loss": critic_loss.detach(),
        "losses/actor_loss": actor_loss.detach(),
        "losses/qf_values": q_values.detach().mean(),
        "losses/values": values.detach().mean(),
        "losses/advantage_weights": weights.mean(),
    }
    return value_loss + critic_loss + actor_loss, metrics
