"""Soft actor-critic as a LightningModule on the off-policy layer (``algos/off_policy.py``).

    per training step (after learning_starts random env steps; train_freq env steps per gradient_steps updates):
        a' ~ pi(.|s')                                          (SquashedGaussianActor, reparameterised)
        y  = r + gamma^n (1 - terminated) (min_i Q_targ_i(s', a') - alpha log pi(a'|s'))   compute_sac_target
        critic loss = sum_i mean (Q_i(s, a) - y)^2                                        compute_ensemble_td_loss
        a~ ~ pi(.|s):  actor loss = mean(alpha log pi(a~|s) - min_i Q_i(s, a~)),  critics detached
        alpha loss  = -mean(log_alpha (log pi(a~|s) + target_entropy))                   (learned alpha)
        one Adam step on the sum: each term reaches only its own parameters (three parameter groups)
        TargetNetworkSync: Q_targ <- tau Q + (1 - tau) Q_targ after every update

With a ``Discrete`` action space (Christodoulou 2019; CleanRL's ``sac_atari.py``) the actor is categorical
(``CategoricalActor``), the critics give Q(s, .) for every action (``DiscreteCriticEnsemble``) and each expectation
over actions is a sum, no sample: ``rl_lightning/discrete_sac.py``.

One optimizer step per training step (TorchRL's ``SACLoss`` pattern) instead of SB3's three: the actor's
loss uses the critics from before this step's critic update. Lightning's ``global_step``, ``max_steps``,
gradient clipping and the NaN guard then count and cover SAC's updates as any other algorithm's.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any

import lightning as L
import torch
from torch import Tensor, nn

from rl_lightning._checks import check_float, check_int, check_sizes, check_unused
from rl_lightning.algos.off_policy import OffPolicyModule
from rl_lightning.callbacks.target_sync import TargetNetworkSync
from rl_lightning.data.her import HERSettings
from rl_lightning.data.replay import ReplayBufferSamples
from rl_lightning.discrete_sac import discrete_sac_losses
from rl_lightning.envs.base import space_kind
from rl_lightning.envs.spaces import ACTION_MASK_KEY
from rl_lightning.export import GreedyPolicy
from rl_lightning.losses import (
    compute_ensemble_td_errors,
    compute_ensemble_td_loss,
    compute_sac_actor_loss,
    compute_sac_alpha_loss,
    compute_sac_target,
    compute_weighted_ensemble_td_loss,
)
from rl_lightning.nets import (
    CategoricalActor,
    CriticEnsemble,
    DiscreteCriticEnsemble,
    SquashedGaussianActor,
    is_masked,
    sample_masked_categorical,
)
from rl_lightning.seeding import seeded


class SACModule(OffPolicyModule):
    """SAC (twin Q, Polyak targets, a learned or fixed entropy temperature) for ``Box`` and ``Discrete`` action spaces.

    The defaults are SB3's and CleanRL's SAC for MuJoCo-sized envs: one env, a 1M-transition buffer,
    5,000 random steps first (CleanRL's ``learning_starts``), one update of 256 transitions per env
    step, (256, 256) ReLU networks, lr 3e-4 for actor, critics and temperature (SB3's one lr), tau
    0.005, alpha learned from 1.0 toward an entropy of ``-dim(A)``. ``configs/sac_pendulum.yaml``
    holds settings tuned for time to solve Pendulum-v1.

    With a ``Discrete`` action space: a categorical actor, critics with one Q-value per action, the expectations over
    actions summed (``rl_lightning.discrete_sac``); vector, image (the Nature CNN, each critic its own) and Dict
    observations; with an action mask, illegal actions have probability 0, and the target's next-state sum covers the
    legal ones. ``configs/sac_discrete_cartpole.yaml``, ``sac_discrete_acrobot.yaml`` and ``sac_atari.yaml`` hold
    settings for it.

    Args:
        env_id: a native env id or any gymnasium id with a bounded ``Box`` or a ``Discrete`` action space.
        num_envs: envs stepped in lock-step per process.
        buffer_size: replay capacity in transitions (per process).
        batch_size: transitions per update.
        learning_starts: env steps (all processes) of uniformly random actions before the first update.
        train_freq: vectorised env steps per collection.
        gradient_steps: updates per collection.
        steps_per_epoch: training steps per epoch (evaluation and checkpoints run at epoch ends).
        gamma: discount factor.
        n_step: rewards summed per TD target (1: one-step SAC).
        lr: Adam learning rate of actor, critics and temperature.
        tau: Polyak weight of the target critics' update after every training step.
        alpha: a fixed entropy temperature; None: learned (``alpha_init``, ``target_entropy``).
        alpha_init: the learned temperature's initial value (left at 1.0 with a fixed ``alpha``).
        target_entropy: the entropy the learned temperature aims the policy at; None: ``-dim(A)`` for a Box,
            ``target_entropy_scale * log |A|`` for a Discrete (in [0, log |A|] nats; left None with a fixed ``alpha``).
        num_critics: Q networks in the ensemble (the target takes their minimum).
        hidden_sizes: hidden widths of the actor and of each critic.
        max_grad_norm: clip each update's global gradient norm to this; None: no clipping.
        seed: seeds the network init (identical on every rank), the envs, exploration, replay sampling
            and the updates' action samples.
        checkpoint_buffer: save the replay buffer in checkpoints (exact resume).
        env_backend: ``"auto"``, ``"torch"``, ``"gymnasium"``, ``"envpool"``, ``"ale_vector"`` or ``"ray"``
            (``make_envs``).
        env_kwargs: for gymnasium envs, e.g. ``{"vectorization_mode": "async"}``.
        compile: the update (:func:`sac_losses`) and a native env's step through ``torch.compile``
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
        target_entropy_scale: Discrete actions: with ``target_entropy=None``, the target entropy is this fraction, in
            (0, 1], of the uniform policy's entropy log |A| (CleanRL's 0.89); with an action mask, of each state's log
            (number of legal actions). Refused with a Box.
        target_update_env_steps: env steps between the target critics' updates (``tau`` 1.0: a hard copy, CleanRL's
            sac_atari.py); None: a Polyak update after every update.
        adam_eps: Adam's epsilon (CleanRL's sac_atari.py: 1e-4).
        her: hindsight experience replay for goal-conditioned envs (``OffPolicyModule``): ``HERSettings`` or a dict
            (``{"strategy": "future", "k": 4}``); None: none.
        actor_keys: the keys of a Dict observation the actor reads (an asymmetric actor-critic); ``act``,
            ``evaluate_policy``, every export and the Hub folder's policy then take only these (an action mask goes
            to the actor by itself). None: every key (a Box policy's networks read a Dict's vector keys concatenated:
            ``rl_lightning.nets.FlatKeys``; a categorical one has an encoder per key).
        critic_keys: the keys the critics read (e.g. a simulator's privileged state); None: every key.
        initial_dataset: offline-to-online (``OffPolicyModule``): a dataset path or Minari id whose transitions fill
            the replay buffer before the random warm-up; a resumed run does not add it again. None: none.
    """

    action_kinds = ("box", "discrete")
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
        alpha: float | None = None,
        alpha_init: float = 1.0,
        target_entropy: float | None = None,
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
        target_entropy_scale: float = 0.89,
        target_update_env_steps: int | None = None,
        adam_eps: float = 1e-8,
        her: HERSettings | dict[str, Any] | None = None,
        actor_keys: Sequence[str] | None = None,
        critic_keys: Sequence[str] | None = None,
        initial_dataset: str | None = None,
    ):
        super().__init__(**OffPolicyModule.layer_arguments(locals()))
        #: Whether the actions are ``Discrete`` (a categorical actor, ``rl_lightning.discrete_sac``), not a ``Box``.
        self.discrete = space_kind(self.action_space) == "discrete"
        check_float("lr", lr, 0.0, low_open=True)
        if alpha is not None:
            check_float("alpha", alpha, 0.0)
        check_float("alpha_init", alpha_init, 0.0, low_open=True)
        if target_entropy is not None:
            check_float("target_entropy", target_entropy)
        if alpha is not None:  # a fixed temperature: nothing learns it
            because = f"alpha={alpha} fixes the temperature"
            check_unused("alpha_init", alpha_init, 1.0, because, "use alpha=None to learn it")
            check_unused("target_entropy", target_entropy, None, because, "use alpha=None to learn it")
            check_unused("target_entropy_scale", target_entropy_scale, 0.89, because, "use alpha=None to learn it")
        check_float("target_entropy_scale", target_entropy_scale, 0.0, 1.0, low_open=True)
        if not self.discrete:
            because = f"the action space {self.action_space} is a Box, whose target entropy is -dim(A) by default"
            check_unused("target_entropy_scale", target_entropy_scale, 0.89, because, "set target_entropy")
        elif target_entropy is not None:  # nats a categorical can have: below 0 alpha dies out, above log |A| explodes
            check_float("target_entropy", target_entropy, 0.0, math.log(self.action_space.n))
        if target_update_env_steps is not None:
            check_int("target_update_env_steps", target_update_env_steps, 1)
        check_float("adam_eps", adam_eps, 0.0, low_open=True)
        check_int("num_critics", num_critics, 1)
        hidden_sizes = check_sizes("hidden_sizes", hidden_sizes)
        if max_grad_norm is not None:
            check_float("max_grad_norm", max_grad_norm, 0.0, low_open=True)
        self._actor_space, self._critic_space = self.observation_views(actor_keys, critic_keys)
        self.save_hyperparameters()
        #: Whether the env gives action masks (Discrete): acting, the expectations and the target over legal actions.
        self.masked = self.discrete and is_masked(self.observation_space)
        with seeded(seed):  # the same initial weights on every rank
            self.actor = self._make_actor(hidden_sizes)
            self.critic = self._make_critics(num_critics, hidden_sizes)
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        if target_entropy is not None:
            self.target_entropy = float(target_entropy)
        elif self.discrete:
            self.target_entropy = target_entropy_scale * math.log(self.action_space.n)
        else:
            self.target_entropy = -float(math.prod(self.action_shape))
        if alpha is None:
            self.log_alpha = nn.Parameter(torch.tensor(math.log(alpha_init)))
        else:  # fixed: a buffer, in the checkpoint and on the module's device, never trained
            self.register_buffer("log_alpha", torch.tensor(math.log(alpha) if alpha > 0 else -math.inf))

    def _make_actor(self, hidden_sizes: Sequence[int]) -> nn.Module:
        """The policy network: categorical for ``Discrete`` actions, a squashed Gaussian for a ``Box``."""
        if self.discrete:
            return CategoricalActor(self._actor_space, self.action_space, hidden_sizes)
        return SquashedGaussianActor(self._actor_space, self.action_space, hidden_sizes)

    def _make_critics(self, num_critics: int, hidden_sizes: Sequence[int]) -> nn.Module:
        """The critic ensemble: Q(s, .) per action for ``Discrete`` actions, Q(s, a) for a ``Box``."""
        if self.discrete:
            return DiscreteCriticEnsemble(self._critic_space, self.action_space, num_critics, hidden_sizes)
        return CriticEnsemble(self._critic_space, self.action_space, num_critics, hidden_sizes)

    @property
    def alpha(self) -> Tensor:
        """The entropy temperature (no gradient)."""
        return self.log_alpha.detach().exp()

    # -- acting ---------------------------------------------------------------------------------

    def explore(self, obs: Tensor, generator: torch.Generator) -> Tensor:
        """A sample of the policy (the squashed Gaussian, or the categorical over the legal actions)."""
        return self.actor.sample(obs, generator)[0]

    def policy_actions(self, obs: Tensor, greedy: bool) -> Tensor:
        """The squashed mean (a Box) or the most likely legal action (Discrete) if ``greedy``, else a sample (torch's
        global RNG)."""
        if self.discrete:
            logits = self.actor(obs)
            self.check_finite_outputs(logits, "policy's logits")
            return logits.argmax(dim=-1) if greedy else sample_masked_categorical(logits)[0]
        actions = self.actor.mode(obs) if greedy else self.actor.sample(obs)[0]
        self.check_finite_outputs(actions, "policy's actions")
        return actions

    def greedy_policy(self) -> nn.Module:
        return GreedyPolicy(self.actor)

    def target_network_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        return [(self.target_critic, self.critic)]

    # -- learning -------------------------------------------------------------------------------

    def update_loss(self, batch: ReplayBufferSamples) -> Tensor:
        outputs = self._discrete_update(batch) if self.discrete else self._box_update(batch)
        loss, metrics = outputs[:2]
        if len(outputs) == 3:  # prioritized replay: the TD errors for the new priorities
            self.update_priorities(batch, outputs[2])
        if self.should_log():
            self.log_metrics({**metrics, **self.prioritized_metrics(batch)})
            self.log_charts()
        return loss

    def _box_update(self, batch: ReplayBufferSamples) -> tuple[Any, ...]:
        # The update's random draws come from its own stream, here (the next actions', then the actions'),
        # so that the update itself is a pure function of tensors (compiled with compile=True).
        # With num_seeds > 1, each seed's from its own stream.
        def arguments(module: SACModule, part: ReplayBufferSamples) -> tuple[Any, ...]:
            shape = (part.rewards.shape[0], math.prod(module.action_shape))
            next_noise = torch.randn(shape, generator=module.update_generator, device=module.device)
            noise = torch.randn(shape, generator=module.update_generator, device=module.device)
            learned_alpha = isinstance(module.log_alpha, nn.Parameter)
            weights = () if part.weights is None else (part.weights,)  # prioritized replay: the weighted loss
            args = (module.actor, module.critic, module.target_critic, module.log_alpha, part, module.discounts(part))
            return (*args, next_noise, noise, module.target_entropy, learned_alpha, *weights)

        return self.seed_update(sac_losses, batch, arguments)

    def _discrete_update(self, batch: ReplayBufferSamples) -> tuple[Any, ...]:
        # The expectations over actions are sums: no random draw (the update generator is not used).
        def arguments(module: SACModule, part: ReplayBufferSamples) -> tuple[Any, ...]:
            learned_alpha = isinstance(module.log_alpha, nn.Parameter)
            weights = () if part.weights is None else (part.weights,)  # prioritized replay: the weighted loss
            args = (module.actor, module.critic, module.target_critic, module.log_alpha, part, module.discounts(part))
            return (*args, module._target_entropies(part.obs), learned_alpha, *weights)

        return self.seed_update(discrete_sac_losses, batch, arguments)

    def _target_entropies(self, obs: Any) -> float | Tensor:
        """The temperature's target in nats: ``target_entropy``, or, with action masks and ``target_entropy=None``,
        ``target_entropy_scale * log(number of legal actions)`` of each state ``(batch,)`` (a state with one legal
        action: 0, the only entropy it can have)."""
        if not self.masked or self.hparams.target_entropy is not None:
            return self.target_entropy
        legal = obs[ACTION_MASK_KEY].bool().sum(dim=-1).clamp(min=1)
        return self.hparams.target_entropy_scale * legal.float().log()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        groups = [{"params": list(self.actor.parameters())}, {"params": list(self.critic.parameters())}]
        if isinstance(self.log_alpha, nn.Parameter):
            groups.append({"params": [self.log_alpha]})
        return torch.optim.Adam(groups, lr=self.hparams.lr, eps=self.hparams.adam_eps, fused=self.use_fused_adam())

    def configure_callbacks(self) -> list[L.Callback]:
        return [
            *super().configure_callbacks(),
            # Polyak after every update, or every target_update_env_steps env steps
            TargetNetworkSync(every_n_env_steps=self.hparams.target_update_env_steps, tau=self.hparams.tau),
        ]


def sac_losses(
    actor: SquashedGaussianActor,
    critic: CriticEnsemble,
    target_critic: CriticEnsemble,
    log_alpha: Tensor,
    batch: ReplayBufferSamples,
    discounts: float | Tensor,
    next_noise: Tensor,
    noise: Tensor,
    target_entropy: float,
    learned_alpha: bool,
    weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]] | tuple[Tensor, dict[str, Tensor], Tensor]:
    """SAC's update as a pure function (``SACModule.update_loss`` calls it, through ``torch.compile`` with
    ``compile=True``): critic + actor (+ temperature) loss, each term reaching only its own parameters, and
    the metrics to log (without gradient); with ``weights`` (prioritized replay), the critics' loss weighted per
    sample and a third output, each sample's largest |Q_i(s, a) - y| over the critics ``(batch,)`` (the new
    priorities).

    Args:
        log_alpha: the temperature's log (a parameter if ``learned_alpha``, else a fixed buffer).
        discounts: ``gamma``, or the per-sample gamma^k of n-step samples.
        next_noise, noise: standard normal ``(batch, action size)`` draws of the next actions a' ~ pi(.|s')
            and of the actions a ~ pi(.|s).
        target_entropy: the entropy the temperature steers the policy to.
        weights: float32 ``(batch,)`` importance weights, or None (uniform replay).
    """
    alpha = log_alpha.detach().exp()
    with torch.no_grad():
        next_actions, next_logprobs = actor.sample(batch.next_obs, noise=next_noise)
        td_targets = compute_sac_target(
            batch.rewards,
            batch.terminated,
            target_critic(batch.next_obs, next_actions),
            next_logprobs,
            alpha,
            discounts,
        )
    q_values = critic(batch.obs, batch.actions)
    if weights is None:
        critic_loss = compute_ensemble_td_loss(q_values, td_targets)
    else:
        critic_loss = compute_weighted_ensemble_td_loss(q_values, td_targets, weights)
    actions, logprobs = actor.sample(batch.obs, noise=noise)
    actor_loss = compute_sac_actor_loss(critic(batch.obs, actions, detach_params=True), logprobs, alpha)
    loss = critic_loss + actor_loss
    metrics = {
        "losses/qf_loss": critic_loss.detach(),
        "losses/qf_values": q_values.detach().mean(),
        "losses/actor_loss": actor_loss.detach(),
        "losses/alpha": alpha,
        "losses/entropy": -logprobs.detach().mean(),
    }
    if learned_alpha:
        alpha_loss = compute_sac_alpha_loss(log_alpha, logprobs, target_entropy)
        loss = loss + alpha_loss
        metrics["losses/alpha_loss"] = alpha_loss.detach()
    if weights is None:
        return loss, metrics
    return loss, metrics, compute_ensemble_td_errors(q_values, td_targets)
