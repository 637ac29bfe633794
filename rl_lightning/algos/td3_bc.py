"""TD3+BC (Fujimoto & Gu 2021) as a LightningModule on the offline layer (``algos/offline.py``).

    fit start: the observations' mean and std from the dataset (kept in the module: act, evaluation, exports)
    per training step, on a dataset batch (s, a, r, terminated, s'), observations normalised:
        a' = clamp(mu_targ(s') + clamp(N(0, target_noise), +-noise_clip) * scale, low, high)   TD3's target smoothing
        y  = r + gamma (1 - terminated) min_i Q_targ_i(s', a')
        critic loss = sum_i mean (Q_i(s, a) - y)^2
        every policy_delay-th step: + actor loss -lambda mean Q_1(s, pi(s)) + mean (pi(s) - a)^2,
                                      lambda = alpha / mean |Q_1(s, pi(s))| (no gradient)  compute_td3_bc_actor_loss
        one Adam step; TargetNetworkSync: actor and critic targets, Polyak tau, every policy_delay steps

The networks are ``TD3Module``'s (same names and shapes): with ``normalize_obs=False`` an offline actor and critics
load into a ``TD3Module`` for online fine-tuning (``TD3Module.load_state_dict(td3_bc.state_dict())``).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import lightning as L
import torch
from torch import Tensor, nn

from rl_lightning._checks import check_float, check_int, check_sizes
from rl_lightning.algos.offline import OfflineModule
from rl_lightning.callbacks.target_sync import TargetNetworkSync
from rl_lightning.data.replay import ReplayBufferSamples
from rl_lightning.export import GreedyPolicy
from rl_lightning.losses import compute_ensemble_td_loss, compute_td3_target, smooth_target_actions
from rl_lightning.nets import CriticEnsemble, DeterministicActor
from rl_lightning.offline_losses import compute_td3_bc_actor_loss
from rl_lightning.seeding import seeded


class TD3BCModule(OfflineModule):
    """TD3+BC: TD3's critics and delayed actor, the actor's loss regularised toward the dataset's actions, for ``Box``
    action spaces. The defaults are the paper's (lr 3e-4, batch 256, tau 0.005, policy delay 2, target noise 0.2
    clipped to 0.5, alpha 2.5, (256, 256) ReLU networks, normalised observations).

    Args:
        env_id: the env whose spaces the dataset has (evaluation plays it), with a bounded ``Box`` action space.
        lr: Adam learning rate of actor and critics.
        gamma: discount factor.
        tau: Polyak weight of the target networks' updates.
        policy_delay: updates per actor (and target) update.
        target_noise: std of the target policy smoothing noise (in units of the action's half-range).
        target_noise_clip: bound of that noise.
        alpha: the weight of the RL term: lambda = alpha / mean |Q| (0: behaviour cloning).
        num_critics: Q networks (the target takes their minimum).
        hidden_sizes: hidden widths of the actor and of each critic.
        normalize_obs: normalise observations by the dataset's mean and std (kept in the module, applied by ``act``,
            evaluation and exports).
        seed: network init, the target noise and (with ``dataset``) the batches' sampling.
        dataset: what ``fit`` reads without a datamodule: a dataset path or Minari id.
        batch_size: transitions per batch, with ``dataset``.
        steps_per_epoch: updates per epoch, with ``dataset``.
        max_grad_norm: clip each update's global gradient norm to this; None: no clipping.
        env_backend: ``"auto"``, ``"torch"``, ``"gymnasium"``, ``"envpool"``, ``"ale_vector"`` or ``"ray"``.
        env_kwargs: for gymnasium envs.
        compile: the update (:func:`td3_bc_losses`) through ``torch.compile`` (``rl_lightning.compiling``).
    """

    action_kinds = ("box",)

    def __init__(
        self,
        env_id: str = "Pendulum-v1",
        lr: float = 3e-4,
        gamma: float = 0.99,
        tau: float = 0.005,
        policy_delay: int = 2,
        target_noise: float = 0.2,
        target_noise_clip: float = 0.5,
        alpha: float = 2.5,
        num_critics: int = 2,
        hidden_sizes: Sequence[int] = (256, 256),
        normalize_obs: bool = True,
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
        check_int("policy_delay", policy_delay, 1)
        check_float("target_noise", target_noise, 0.0)
        check_float("target_noise_clip", target_noise_clip, 0.0)
        check_float("alpha", alpha, 0.0)
        check_int("num_critics", num_critics, 1)
        hidden_sizes = check_sizes("hidden_sizes", hidden_sizes)
        if max_grad_norm is not None:
            check_float("max_grad_norm", max_grad_norm, 0.0, low_open=True)
        self.save_hyperparameters()
        space = self.policy_observation_space
        self.obs_normalizer = self.make_obs_normalizer(space)
        with seeded(seed):  # the same initial weights on every rank
            self.actor = DeterministicActor(space, self.action_space, hidden_sizes)
            self.critic = CriticEnsemble(space, self.action_space, num_critics, hidden_sizes)
        self.target_actor = copy.deepcopy(self.actor).requires_grad_(False)
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)

    def _bounds(self) -> tuple[Tensor, Tensor, Tensor]:
        """The action's half-range, low and high bounds, shaped like one action."""
        shape = self.action_shape
        scale, bias = self.actor.action_scale.view(shape), self.actor.action_bias.view(shape)
        return scale, bias - scale, bias + scale

    def policy_actions(self, obs: Tensor, greedy: bool) -> Tensor:
        """The actor's action (deterministic, ``greedy`` or not)."""
        actions = self.actor(self.normalize(obs))
        self.check_finite_outputs(actions, "policy's actions")
        return actions

    def greedy_policy(self) -> nn.Module:
        return GreedyPolicy(self.actor, self.obs_normalizer)

    def target_network_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        return [(self.target_actor, self.actor), (self.target_critic, self.critic)]

    def update_loss(self, batch: ReplayBufferSamples) -> Tensor:
        hp = self.hparams
        update_actor = (self.global_step + 1) % hp.policy_delay == 0  # TD3Module's count

        def arguments(module: TD3BCModule, part: ReplayBufferSamples) -> tuple[Any, ...]:
            shape = (part.rewards.shape[0], *module.action_shape)
            noise = torch.randn(shape, generator=module.update_generator, device=module.device)
            normalized = part._replace(obs=module.normalize(part.obs), next_obs=module.normalize(part.next_obs))
            networks = (module.actor, module.critic, module.target_actor, module.target_critic)
            noise_settings = (noise * hp.target_noise, hp.target_noise_clip)
            return (*networks, normalized, module.discounts(part), *noise_settings, module._bounds(), update_actor)

        loss, metrics = self.seed_update(td3_bc_losses, batch, lambda m, p: (*arguments(m, p), hp.alpha))
        if self.should_log():
            self.log_metrics(metrics)
            self.log_charts()
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        groups = [{"params": list(self.actor.parameters())}, {"params": list(self.critic.parameters())}]
        return torch.optim.Adam(groups, lr=self.hparams.lr, fused=self.use_fused_adam())

    def configure_callbacks(self) -> list[L.Callback]:
        hp = self.hparams
        return [
            *super().configure_callbacks(),
            TargetNetworkSync(every_n_env_steps=None, every_n_train_steps=hp.policy_delay, tau=hp.tau),
        ]


def td3_bc_losses(
    actor: DeterministicActor,
    critic: CriticEnsemble,
    target_actor: DeterministicActor,
    target_critic: CriticEnsemble,
    batch: ReplayBufferSamples,
    discounts: float | Tensor,
    target_noise: Tensor,
    target_noise_clip: float,
    bounds: tuple[Tensor, Tensor, Tensor],
    update_actor: bool,
    alpha: float,
) -> tuple[Tensor, dict[str, Tensor]]:
    """TD3+BC's update as a pure function: TD3's critic loss, plus on the delayed steps the actor's
    ``-lambda Q_1(s, pi(s)) + (pi(s) - a)^2``, and the metrics (without gradient).

    Args:
        batch: normalised observations.
        discounts: ``gamma``.
        target_noise: N(0, target_noise) draws like the actions (in units of the half-range).
        target_noise_clip: the smoothing noise's bound.
        bounds: the action's half-range, low and high bounds, shaped like one action.
        update_actor: whether this step also updates the actor.
        alpha: the RL term's weight.
    """
    scale, low, high = bounds
    with torch.no_grad():
        next_actions = smooth_target_actions(
            target_actor(batch.next_obs), target_noise, target_noise_clip, scale, low, high
        )
        td_targets = compute_td3_target(
            batch.rewards, batch.terminated, target_critic(batch.next_obs, next_actions), discounts
        )
    q_values = critic(batch.obs, batch.actions)
    loss = compute_ensemble_td_loss(q_values, td_targets)
    metrics = {"losses/qf_loss": loss.detach(), "losses/qf_values": q_values.detach().mean()}
    if update_actor:
        policy_actions = actor(batch.obs)
        q_policy = critic(batch.obs, policy_actions, detach_params=True)[0]
        actor_loss, lam = compute_td3_bc_actor_loss(q_policy, policy_actions, batch.actions, alpha)
        loss = loss + actor_loss
        metrics["losses/actor_loss"] = actor_loss.detach()
        metrics["losses/lambda"] = lam.detach()
    return loss, metrics
