"""TD3 (and DDPG as one of its settings) as a LightningModule on the off-policy layer.

    per training step k (after learning_starts random env steps):
        a' = clamp(mu_targ(s') + clamp(N(0, target_noise), +-noise_clip) * scale, low, high)  smooth_target_actions
        y  = r + gamma^n (1 - terminated) min_i Q_targ_i(s', a')                              compute_td3_target
        critic loss = sum_i mean (Q_i(s, a) - y)^2
        every policy_delay-th step: + actor loss -mean Q_1(s, mu(s)), the critics detached
        one Adam step (the actor's parameters get no gradient between its delayed updates)
        TargetNetworkSync: actor and critic targets, Polyak tau, every policy_delay steps
    exploration: mu(s) + N(0, exploration_noise * scale), clamped to the bounds

DDPG is ``TD3Module(policy_delay=1, target_noise=0.0, num_critics=1)``.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import lightning as L
import torch
from lightning.pytorch.strategies import DDPStrategy
from torch import Tensor, nn

from rl_lightning._checks import check_float, check_int, check_sizes
from rl_lightning.algos.off_policy import OffPolicyModule
from rl_lightning.callbacks.target_sync import TargetNetworkSync
from rl_lightning.data.her import HERSettings
from rl_lightning.data.replay import ReplayBufferSamples
from rl_lightning.export import GreedyPolicy
from rl_lightning.losses import (
    compute_ensemble_td_errors,
    compute_ensemble_td_loss,
    compute_td3_target,
    compute_weighted_ensemble_td_loss,
    smooth_target_actions,
)
from rl_lightning.nets import CriticEnsemble, DeterministicActor
from rl_lightning.seeding import seeded


class TD3Module(OffPolicyModule):
    """TD3: clipped double Q, target policy smoothing and a delayed actor, for ``Box`` action spaces.

    The defaults are CleanRL's TD3 (SB3's for the noises and delay): one env, a 1M-transition buffer,
    5,000 random steps first, one update of 256 transitions per env step, (256, 256) ReLU networks, lr
    3e-4, tau 0.005, policy delay 2, target noise 0.2 clipped to 0.5, exploration noise 0.1 (all
    noises in units of the action's half-range). ``configs/td3_pendulum.yaml`` holds settings tuned for
    time to solve Pendulum-v1.

    Args:
        env_id: a native env id or any gymnasium id with a bounded ``Box`` action space.
        num_envs: envs stepped in lock-step per process.
        buffer_size: replay capacity in transitions (per process).
        batch_size: transitions per update.
        learning_starts: env steps (all processes) of uniformly random actions before the first update.
        train_freq: vectorised env steps per collection.
        gradient_steps: updates per collection.
        steps_per_epoch: training steps per epoch (evaluation and checkpoints run at epoch ends).
        gamma: discount factor.
        n_step: rewards summed per TD target.
        lr: Adam learning rate of actor and critics.
        tau: Polyak weight of the target networks' updates.
        policy_delay: training steps per actor (and target) update; 1 for DDPG.
        target_noise: std of the target policy smoothing noise; 0 for DDPG.
        target_noise_clip: bound of that noise.
        exploration_noise: std of the Gaussian noise added to the actor's actions while collecting.
        num_critics: Q networks (the target takes their minimum; 1 for DDPG).
        hidden_sizes: hidden widths of the actor and of each critic.
        max_grad_norm: clip each update's global gradient norm to this; None: no clipping.
        seed: seeds the network init (identical on every rank), the envs, exploration, replay sampling
            and the target noise.
        checkpoint_buffer: save the replay buffer in checkpoints (exact resume).
        env_backend: ``"auto"``, ``"torch"``, ``"gymnasium"``, ``"envpool"``, ``"ale_vector"`` or ``"ray"``
            (``make_envs``).
        env_kwargs: for gymnasium envs.
        compile: the update (:func:`td3_losses`) and a native env's step through ``torch.compile``
            (``rl_lightning.compiling``); a dict gives ``torch.compile``'s arguments, and
            the whole update is compiled (backward, clipping, Adam, Polyak; ``{"whole_update": False}``: the loss only).
        updates_per_step: updates per Lightning training step (``OffPolicyModule``): the same run whatever
            its value, Lightning's per-step cost paid once per that many updates.
        prioritized: prioritized experience replay (``OffPolicyModule``): transitions sampled by
            ``(|TD error| + 1e-6)^prioritized_alpha`` (a sample's TD error: the largest of its critics'), the
            critics' TD losses weighted by the importance weights (the actor's loss is not).
        prioritized_alpha: how much the priorities count, in [0, 1] (0: uniform); only with ``prioritized=True``.
        prioritized_beta: the importance weights' exponent at the start, in [0, 1], annealed linearly to 1 over the
            run; only with ``prioritized=True``.
        num_seeds: agents trained in lock-step in one fit, with seeds ``seed .. seed + num_seeds - 1``
            (``SeedMembers``).
        actor_keys: the keys of a Dict observation the actor reads (an asymmetric actor-critic); ``act``,
            ``evaluate_policy``, every export and the Hub folder's policy then take only these. None: every key (a
            Dict observation's vector keys are concatenated: ``rl_lightning.nets.FlatKeys``).
        critic_keys: the keys the critics read (e.g. a simulator's privileged state); None: every key.
        her: hindsight experience replay for goal-conditioned envs (``OffPolicyModule``): ``HERSettings`` or a dict
            (``{"strategy": "future", "k": 4}``); None: none.
        initial_dataset: offline-to-online (``OffPolicyModule``): a dataset path or Minari id whose transitions fill
            the replay buffer before the random warm-up; a resumed run does not add it again. None: none.
    """

    action_kinds = ("box",)
    supports_prioritized = True

    def __init__(
        self,
        env_id: str = "Pendulum-v1",
        num_envs: int = 1,
        buffer_size: int = 1_000_000,
        batch_size: int = 256,
        learning_starts: int = 5_000,
        train_freq: int = 1,
        gradient_steps: int = 1,
        steps_per_epoch: int = 1_000,
        gamma: float = 0.99,
        n_step: int = 1,
        lr: float = 3e-4,
        tau: float = 0.005,
        policy_delay: int = 2,
        target_noise: float = 0.2,
        target_noise_clip: float = 0.5,
        exploration_noise: float = 0.1,
        num_critics: int = 2,
        hidden_sizes: Sequence[int] = (256, 256),
        max_grad_norm: float | None = None,
        seed: int = 0,
        checkpoint_buffer: bool = True,
        env_backend: str = "auto",
        env_kwargs: dict[str, Any] | None = None,
        compile: bool | dict[str, Any] = False,
        updates_per_step: int = 10,
        prioritized: bool = False,
        prioritized_alpha: float = 0.6,
        prioritized_beta: float = 0.4,
        num_seeds: int = 1,
        actor_keys: Sequence[str] | None = None,
        critic_keys: Sequence[str] | None = None,
        her: HERSettings | dict[str, Any] | None = None,
        initial_dataset: str | None = None,
    ):
        super().__init__(**OffPolicyModule.layer_arguments(locals()))
        check_float("lr", lr, 0.0, low_open=True)
        check_int("policy_delay", policy_delay, 1)
        check_float("target_noise", target_noise, 0.0)
        check_float("target_noise_clip", target_noise_clip, 0.0)
        check_float("exploration_noise", exploration_noise, 0.0)
        check_int("num_critics", num_critics, 1)
        hidden_sizes = check_sizes("hidden_sizes", hidden_sizes)
        if max_grad_norm is not None:
            check_float("max_grad_norm", max_grad_norm, 0.0, low_open=True)
        actor_space, critic_space = self.observation_views(actor_keys, critic_keys)
        self.save_hyperparameters()
        with seeded(seed):  # the same initial weights on every rank
            self.actor = DeterministicActor(actor_space, self.action_space, hidden_sizes)
            self.critic = CriticEnsemble(critic_space, self.action_space, num_critics, hidden_sizes)
        self.target_actor = copy.deepcopy(self.actor).requires_grad_(False)
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)

    def _bounds(self) -> tuple[Tensor, Tensor, Tensor]:
        """The action's half-range, low and high bounds, shaped like one action."""
        shape = self.action_shape
        scale, bias = self.actor.action_scale.view(shape), self.actor.action_bias.view(shape)
        return scale, bias - scale, bias + scale

    # -- acting ---------------------------------------------------------------------------------

    def explore(self, obs: Tensor, generator: torch.Generator) -> Tensor:
        """The actor's action plus N(0, exploration_noise) (times the half-range), within the bounds."""
        actions = self.actor(obs)
        scale, low, high = self._bounds()
        noise = torch.randn(actions.shape, generator=generator, device=actions.device)
        return torch.maximum(torch.minimum(actions + noise * self.hparams.exploration_noise * scale, high), low)

    def policy_actions(self, obs: Tensor, greedy: bool) -> Tensor:
        """The actor's action if ``greedy``, else with exploration noise (torch's global RNG)."""
        actions = self.actor(obs)
        self.check_finite_outputs(actions, "policy's actions")
        if greedy:
            return actions
        scale, low, high = self._bounds()
        noise = torch.randn(actions.shape, device=actions.device) * self.hparams.exploration_noise * scale
        return torch.maximum(torch.minimum(actions + noise, high), low)

    def greedy_policy(self) -> nn.Module:
        return GreedyPolicy(self.actor)

    def target_network_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        return [(self.target_actor, self.actor), (self.target_critic, self.critic)]

    # -- learning -------------------------------------------------------------------------------

    def update_loss(self, batch: ReplayBufferSamples) -> Tensor:
        hp = self.hparams
        # The target-smoothing noise comes from the update's own stream, here, so that the update itself is
        # a pure function of tensors (compiled with compile=True). With num_seeds > 1, each seed's from its own.
        update_actor = (self.global_step + 1) % hp.policy_delay == 0  # the delayed actor update (SB3's count)

        def arguments(module: TD3Module, part: ReplayBufferSamples) -> tuple[Any, ...]:
            shape = (part.rewards.shape[0], *module.action_shape)
            noise = torch.randn(shape, generator=module.update_generator, device=module.device)
            weights = () if part.weights is None else (part.weights,)  # prioritized replay: the weighted loss
            networks = (module.actor, module.critic, module.target_actor, module.target_critic)
            noise_settings = (noise * hp.target_noise, hp.target_noise_clip)
            return (*networks, part, module.discounts(part), *noise_settings, module._bounds(), update_actor, *weights)

        outputs = self.seed_update(td3_losses, batch, arguments)
        loss, metrics = outputs[:2]
        if len(outputs) == 3:  # prioritized replay: the TD errors for the new priorities
            self.update_priorities(batch, outputs[2])
        if self.should_log():
            self.log_metrics({**metrics, **self.prioritized_metrics(batch)})
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

    def setup(self, stage: str) -> None:
        super().setup(stage)
        strategy = self.trainer.strategy
        if (
            stage == "fit"
            and self.hparams.policy_delay > 1
            and isinstance(strategy, DDPStrategy)
            and not _finds_unused_parameters(strategy)
        ):
            raise ValueError(
                f"TD3Module(policy_delay={self.hparams.policy_delay}) under DDP: the actor has no gradient between "
                "its delayed updates, which DDP must be told of: use strategy='ddp_find_unused_parameters_true'"
            )


def td3_losses(
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
    weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]] | tuple[Tensor, dict[str, Tensor], Tensor]:
    """TD3's update as a pure function (``TD3Module.update_loss`` calls it, through ``torch.compile`` with
    ``compile=True``): the critics' TD loss, plus the actor's ``-Q_1(s, actor(s))`` on its delayed steps,
    and the metrics to log (without gradient); with ``weights`` (prioritized replay), the critics' loss weighted
    per sample and a third output, each sample's largest |Q_i(s, a) - y| over the critics ``(batch,)``.

    Args:
        discounts: ``gamma``, or the per-sample gamma^k of n-step samples.
        target_noise: N(0, target_noise) draws like the actions (in units of the half-range).
        target_noise_clip: the smoothing noise's bound.
        bounds: the action's half-range, low and high bounds, shaped like one action.
        update_actor: whether this step also updates the actor.
        weights: float32 ``(batch,)`` importance weights, or None (uniform replay).
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
    if weights is None:
        loss = compute_ensemble_td_loss(q_values, td_targets)
    else:
        loss = compute_weighted_ensemble_td_loss(q_values, td_targets, weights)
    metrics = {"losses/qf_loss": loss.detach(), "losses/qf_values": q_values.detach().mean()}
    if update_actor:
        actor_loss = -critic(batch.obs, actor(batch.obs), detach_params=True)[0].mean()
        loss = loss + actor_loss
        metrics["losses/actor_loss"] = actor_loss.detach()
    if weights is None:
        return loss, metrics
    return loss, metrics, compute_ensemble_td_errors(q_values, td_targets)


def _finds_unused_parameters(strategy: DDPStrategy) -> bool:
    """Whether DDP was built with ``find_unused_parameters`` (Lightning keeps it in a private field)."""
    return bool(getattr(strategy, "_ddp_kwargs", {}).get("find_unused_parameters", False))
