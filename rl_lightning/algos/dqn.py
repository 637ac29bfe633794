"""Deep Q-Network as a LightningModule on the off-policy layer (``algos/off_policy.py``).

for each training step k (train_freq=1, gradient_steps=1: one env step of every env, one update):
    source: play train_freq env steps epsilon-greedy with q_network (after update k-1),
            add them to the replay buffer, sample batch_size transitions
    training_step: loss = (r + gamma^n (1 - terminated) Q_target(s', a') - Q(s, a))^2,
                   a' = argmax_a Q(s', a) (double DQN) or argmax_a Q_target(s', a)
    optimizer step: gradient norm clipped to max_grad_norm, then Adam
    callbacks: TargetNetworkSync (every N env steps / Polyak), EpsilonDecay (sets module.epsilon)

Rainbow's pieces (Hessel et al. 2018), each on its own or together: ``dueling`` (a value and an advantage stream),
``distributional`` (``"c51"``: the cross-entropy to the projected target distribution; ``"qr"``: the quantile Huber
loss; :func:`distributional_dqn_loss`), ``noisy`` (noisy layers explore instead of epsilon), with ``prioritized`` and
``n_step`` from the off-policy layer: ``configs/rainbow_cartpole.yaml``, ``configs/rainbow_atari.yaml``.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, ClassVar

import lightning as L
import torch
from torch import Tensor, nn

from rl_lightning._checks import check_bool, check_choice, check_float, check_int, check_sizes, check_unused
from rl_lightning.algos.off_policy import OffPolicyModule
from rl_lightning.callbacks.epsilon import EpsilonDecay
from rl_lightning.callbacks.target_sync import TargetNetworkSync
from rl_lightning.data.her import HERSettings
from rl_lightning.data.replay import ReplayBufferSamples, epsilon_greedy
from rl_lightning.distributional import (
    categorical_cross_entropy,
    categorical_kl,
    project_categorical,
    quantile_huber_loss,
    quantile_td_targets,
)
from rl_lightning.envs.spaces import ACTION_MASK_KEY
from rl_lightning.export import GreedyPolicy
from rl_lightning.losses import compute_td_loss, compute_td_target, compute_weighted_td_loss
from rl_lightning.nets import QNetwork, RainbowQNetwork, flat_keys_encoder, is_masked, masked_logits
from rl_lightning.seeding import seeded


class DQNModule(OffPolicyModule):
    """DQN (optionally double DQN) on a torch vector env.

    The defaults solve CartPole-v1 (greedy mean return >= 475 over 32 episodes) for 10 of 10
    seeds in a median of ~3,500 updates (~57k env steps, ~12 s of one CPU; 49k-69k) within the
    scripts' 10,000-update run (161k env steps; with 5,000 updates they needed 53k-77k of 81k):
    many envs, a large batch, a hard target copy every 10 updates, a short exploration phase, and
    two standard stabilisers that together took seeds 0-9 from 9/10 to 10/10 solved (without them
    seed 4 stalls below 475 for the whole run): double DQN (a max over noisy Q-estimates
    overestimates) and gradient-norm clipping (bounds the step when the targets jump at a hard
    copy). Huber loss instead of MSE (with both) left all 10 seeds at a greedy return of ~10 at
    this lr, with Q-values growing ~2x faster than under MSE early on: keep ``loss="mse"``. These
    are CartPole settings: on Acrobot-v1 the greedy return swings between about -90 and -500 from
    one evaluation to the next.

    Args:
        env_id: a native env id (``rl_lightning.registered_env_ids()``) or any gymnasium id, with a
            ``Discrete`` action space.
        num_envs: envs stepped in lock-step per process.
        buffer_size: replay capacity in transitions (per process).
        batch_size: transitions per TD update.
        learning_starts: env steps of uniformly random play before the first update.
        train_freq: vectorised env steps per collection (``num_envs * train_freq`` transitions per
            collection and process).
        gradient_steps: TD updates per collection.
        steps_per_epoch: training steps per epoch (the data source's length); evaluation and
            checkpoint callbacks run at epoch ends (250 x 16 envs = every 4,000 env steps).
        gamma: discount factor in [0, 1].
        n_step: rewards summed per TD target (1: one-step DQN).
        lr: Adam learning rate.
        max_grad_norm: clip the global gradient norm of each update to this; None: no clipping
            (``Trainer(gradient_clip_val=...)``, when given, takes precedence).
        target_update_env_steps: env steps between target updates; None: after every update.
        tau: target update weight in (0, 1]: 1.0 is a hard copy, small values Polyak averaging.
        epsilon_start: exploration rate at the start.
        epsilon_end: exploration rate after the decay.
        exploration_fraction: part of the run's env steps over which epsilon decays linearly.
        double_dqn: pick the next action with ``q_network`` and value it with ``target_network``.
        loss: ``"mse"`` or ``"huber"``.
        seed: network init (same on every rank); env seed ``seed + global_rank * num_envs``.
        hidden_sizes: hidden layer widths of the Q-network.
        checkpoint_buffer: save the replay buffer in checkpoints (``buffer_size`` x 45 bytes for
            CartPole, per process). Without it a resumed run refills the buffer from scratch
            (``learning_starts`` is not replayed), so it no longer matches an uninterrupted run.
        network: your own encoder (observations -> features; a Linear layer to the Q-values is
            added); None: an MLP of ``hidden_sizes`` (a CNN for image observations). Not saved in
            checkpoints' hyper-parameters: pass it again to ``load_from_checkpoint``.
        env_backend: ``"auto"`` (native torch env where there is one, else gymnasium's),
            ``"torch"``, ``"gymnasium"`` (the adapter, also for a native id), ``"envpool"``, ``"ale_vector"``
            (Atari and EnvPool's MuJoCo tasks in C++: ``EnvPoolVectorEnv``, ``AleVectorEnv``) or ``"ray"``
            (gymnasium's envs in Ray actors: ``RayVectorEnv``; ``env_kwargs={"num_workers": 2}``).
        env_kwargs: for gymnasium envs, e.g. ``{"vectorization_mode": "async"}`` or env arguments.
        compile: the update (:func:`dqn_loss`) and a native env's step through ``torch.compile``
            (``rl_lightning.compiling``); a dict gives ``torch.compile``'s arguments, and
            the whole update is compiled (backward, clipping, Adam, Polyak; ``{"whole_update": False}``: the loss only).
        frame_replay: store each frame of a frame-stack observation (Atari's ``(4, 84, 84)``) once
            (``FrameStackReplayBuffer``: 1M transitions in ~6.7 GiB, not ~53 GiB); None: wherever the
            observation is a frame stack; False: the plain ``ReplayBuffer``.
        updates_per_step: updates per Lightning training step (``OffPolicyModule``): the same run whatever
            its value, Lightning's per-step cost paid once per that many updates.
        prioritized: prioritized experience replay (``OffPolicyModule``): transitions sampled by
            ``(|TD error| + 1e-6)^prioritized_alpha``, each sample's TD loss weighted by its importance weight.
        prioritized_alpha: how much the priorities count, in [0, 1] (0: uniform); only with ``prioritized=True``.
        prioritized_beta: the importance weights' exponent at the start, in [0, 1], annealed linearly to 1 over the
            run; only with ``prioritized=True``.
        dueling: separate value and advantage streams after the encoder, ``Q = V + A - mean_a A`` (Wang et al. 2016).
        distributional: None (scalar Q-values, ``loss``), ``"c51"`` (Bellemare et al. 2017: ``num_atoms`` atoms in
            [v_min, v_max], the cross-entropy to the projected n-step target; prioritized by the KL) or ``"qr"``
            (Dabney et al. 2018 QR-DQN: ``num_quantiles`` quantiles, the quantile Huber loss, kappa 1); Q is the mean.
        num_atoms: C51's atoms (>= 2); only with ``distributional="c51"``.
        v_min: C51's lowest atom, below ``v_max``; only with ``distributional="c51"``.
        v_max: C51's highest atom; only with ``distributional="c51"``.
        num_quantiles: QR-DQN's quantiles, at fractions (2i + 1) / 2N; only with ``distributional="qr"``.
        noisy: factorised Gaussian noisy layers in the head (Fortunato et al. 2018) explore instead of epsilon-greedy
            (epsilon 0: the epsilon settings are refused), new noise before every acting step and every update;
            greedy play, evaluation and exports use the mean weights.
        noisy_sigma: the noisy layers' sigma_0 (initial noise scale); only with ``noisy=True``.
        her: hindsight experience replay for goal-conditioned envs (``OffPolicyModule``): ``HERSettings`` or a dict
            (``{"strategy": "future", "k": 4}``); None: none. The default network then reads the goal env's keys
            concatenated (``rl_lightning.nets.flat_keys_encoder``: state and goal meet in the first layer; the Dict
            encoder without ``her`` reads each key apart, and does not learn bit flipping).
    """

    action_kinds = ("discrete",)
    supports_prioritized = True
    # steps_per_train was train_freq before the off-policy layer's gradient_steps (with gradient_steps=1, the same:
    # vectorised env steps per collection).
    renamed_hyperparameters: ClassVar[dict[str, str]] = {"steps_per_train": "train_freq"}

    def __init__(
        self,
        env_id: str = "CartPole-v1",
        num_envs: int = 16,
        buffer_size: int = 50_000,
        batch_size: int = 512,
        learning_starts: int = 1_000,
        train_freq: int = 1,
        gradient_steps: int = 1,
        steps_per_epoch: int = 250,
        gamma: float = 0.99,
        n_step: int = 1,
        lr: float = 2.5e-3,
        max_grad_norm: float | None = 10.0,
        target_update_env_steps: int | None = 160,
        tau: float = 1.0,
        epsilon_start: float = 1.0,
        epsilon_end: float = 0.05,
        exploration_fraction: float = 0.1,
        double_dqn: bool = True,
        loss: str = "mse",
        seed: int = 0,
        hidden_sizes: Sequence[int] = (120, 84),
        checkpoint_buffer: bool = True,
        network: nn.Module | None = None,
        env_backend: str = "auto",
        env_kwargs: dict[str, Any] | None = None,
        compile: bool | dict[str, Any] = False,
        frame_replay: bool | None = None,
        updates_per_step: int = 10,
        prioritized: bool = False,
        prioritized_alpha: float = 0.6,
        prioritized_beta: float = 0.4,
        num_seeds: int = 1,
        dueling: bool = False,
        distributional: str | None = None,
        num_atoms: int = 51,
        v_min: float = -10.0,
        v_max: float = 10.0,
        num_quantiles: int = 200,
        noisy: bool = False,
        noisy_sigma: float = 0.5,
        her: HERSettings | dict[str, Any] | None = None,
    ):
        super().__init__(**OffPolicyModule.layer_arguments(locals()))
        check_float("lr", lr, 0.0, low_open=True)
        if max_grad_norm is not None:
            check_float("max_grad_norm", max_grad_norm, 0.0, low_open=True)
        if target_update_env_steps is not None:
            check_int("target_update_env_steps", target_update_env_steps, 1)
        check_float("epsilon_start", epsilon_start, 0.0, 1.0)
        check_float("epsilon_end", epsilon_end, 0.0, 1.0)
        check_float("exploration_fraction", exploration_fraction, 0.0, 1.0)
        check_bool("double_dqn", double_dqn)
        check_choice("loss", loss, ("mse", "huber"))
        hidden_sizes = check_sizes("hidden_sizes", hidden_sizes)
        self._check_rainbow_settings(dict(locals()))
        self.save_hyperparameters(ignore=["network"])
        with seeded(seed):  # the same initial weights on every rank
            if network is None and her is not None:  # a goal env: state and goal meet in the first layer
                network = flat_keys_encoder(self.observation_space, hidden_sizes)[0]
            if dueling or distributional is not None or noisy:
                head = (dueling, distributional, num_atoms, v_min, v_max, num_quantiles, noisy, noisy_sigma)
                self.q_network = RainbowQNetwork(
                    self.observation_space, self.action_space, hidden_sizes, network, *head
                )
            else:
                self.q_network = QNetwork(self.observation_space, self.action_space, hidden_sizes, network)
        self.target_network = copy.deepcopy(self.q_network).requires_grad_(False)
        self._epsilon = 0.0 if noisy else float(epsilon_start)  # noisy: the noise explores
        #: Whether the env gives action masks: then acting, exploring and the TD target's max are over legal actions.
        self.masked = is_masked(self.observation_space)

    def _check_rainbow_settings(self, values: dict[str, Any]) -> None:
        """Rainbow's arguments checked; one that the other settings leave without effect is refused."""
        default = DQNModule._default  # DQNModule's signature: a subclass's __init__ may take them as **kwargs
        check_bool("dueling", values["dueling"])
        distributional = check_choice("distributional", values["distributional"], (None, "c51", "qr"))
        check_int("num_atoms", values["num_atoms"], 2)
        v_min, v_max = check_float("v_min", values["v_min"]), check_float("v_max", values["v_max"])
        if v_min >= v_max:
            raise ValueError(f"v_min ({v_min}) must be below v_max ({v_max}): C51's atoms span [v_min, v_max]")
        check_int("num_quantiles", values["num_quantiles"], 1)
        noisy = check_bool("noisy", values["noisy"])
        check_float("noisy_sigma", values["noisy_sigma"], 0.0, low_open=True)
        for name in ("num_atoms", "v_min", "v_max", "num_quantiles"):
            needs = "qr" if name == "num_quantiles" else "c51"
            if distributional != needs:
                because = f"distributional is {distributional!r}"
                check_unused(name, values[name], default(name), because, f"set distributional={needs!r}")
        if distributional is not None:
            trains_on = "the cross-entropy to the projected target" if distributional == "c51" else "its quantile loss"
            because = f"distributional={distributional!r} trains on {trains_on}, not a TD loss"
            check_unused("loss", values["loss"], default("loss"), because, "use distributional=None")
        if not noisy:
            check_unused(
                "noisy_sigma", values["noisy_sigma"], default("noisy_sigma"), "noisy is False", "set noisy=True"
            )
        for name in ("epsilon_start", "epsilon_end", "exploration_fraction") if noisy else ():
            because = "noisy=True explores by the noise (epsilon is 0)"
            check_unused(name, values[name], default(name), because, "use noisy=False for epsilon-greedy")

    # -- acting ---------------------------------------------------------------------------

    @property
    def epsilon(self) -> float:
        """Current exploration rate: its one home (``EpsilonDecay`` sets it, ``explore`` reads it)."""
        return self._epsilon

    @epsilon.setter
    def epsilon(self, value: float) -> None:
        self._epsilon = check_float("epsilon", value, 0.0, 1.0)
        for member in self.seed_modules()[1:]:  # num_seeds > 1: every seed explores alike
            member._epsilon = self._epsilon

    def explore(self, obs: Tensor, generator: torch.Generator) -> Tensor:
        """Epsilon-greedy on the live Q-network (over the legal actions where the env gives masks); ``noisy``: greedy
        on the Q-network with new noise from ``generator`` (epsilon is 0)."""
        if self.hparams.noisy:
            self.q_network.reset_noise(generator)
        return epsilon_greedy(self.q_network(obs), self._epsilon, generator, self._action_mask(obs))

    def policy_actions(self, obs: Tensor, greedy: bool) -> Tensor:
        """argmax Q if ``greedy`` (``noisy``: on the mean weights), else epsilon-greedy with the current ``epsilon``
        (``noisy``: greedy with new noise from torch's global RNG)."""
        if greedy:
            q_values = self(obs)
        else:
            if self.hparams.noisy:
                self.q_network.reset_noise()
            q_values = self.q_network(obs)
        self.check_finite_outputs(q_values, "Q-values")
        return epsilon_greedy(q_values, 0.0 if greedy else self._epsilon, action_mask=self._action_mask(obs))

    def _action_mask(self, obs: Any) -> Tensor | None:
        return obs[ACTION_MASK_KEY] if self.masked else None

    def forward(self, obs: Tensor) -> Tensor:
        """Q-values ``(batch, num_actions)`` (``noisy``: on the mean weights, noise off)."""
        if self.hparams.noisy:
            return self.q_network.q_values(obs, noise=False)
        return self.q_network(obs)

    def greedy_policy(self) -> nn.Module:
        return GreedyPolicy(self.q_network)

    def target_network_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        return [(self.target_network, self.q_network)]

    # -- learning -------------------------------------------------------------------------

    def update_loss(self, batch: ReplayBufferSamples) -> Tensor:
        hp = self.hparams

        def arguments(module: DQNModule, part: ReplayBufferSamples) -> tuple[Any, ...]:
            if hp.noisy:  # new noise for this update, online then target, from the module's own (checkpointed) stream
                module.q_network.reset_noise(module.update_generator)
                module.target_network.reset_noise(module.update_generator)
            mask = module._action_mask(part.next_obs)
            weights = () if part.weights is None else (part.weights,)  # prioritized replay: the weighted loss
            args = (module.q_network, module.target_network, part, module.discounts(part), mask, hp.double_dqn)
            return (*args, *weights) if hp.distributional else (*args, hp.loss, *weights)

        outputs = self.seed_update(distributional_dqn_loss if hp.distributional else dqn_loss, batch, arguments)
        loss, q_mean = outputs[:2]
        if len(outputs) == 3:  # prioritized replay: the TD errors (distributional: the per-sample losses)
            self.update_priorities(batch, outputs[2])
        if self.should_log():
            self.log_metrics(
                {
                    "losses/td_loss": loss.detach(),
                    "losses/q_values": q_mean,
                    "charts/epsilon": self._epsilon,
                    **self.prioritized_metrics(batch),
                }
            )
            self.log_charts()
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.q_network.parameters(), lr=self.hparams.lr, fused=self.use_fused_adam())

    def configure_callbacks(self) -> list[L.Callback]:
        hp = self.hparams
        callbacks = [
            *super().configure_callbacks(),
            TargetNetworkSync(every_n_env_steps=hp.target_update_env_steps, tau=hp.tau),
        ]
        if not hp.noisy:  # noisy: the noise explores, epsilon stays 0
            callbacks.append(EpsilonDecay(start=hp.epsilon_start, end=hp.epsilon_end, fraction=hp.exploration_fraction))
        return callbacks

    # -- checkpoints ----------------------------------------------------------------------

    def extra_checkpoint_state(self) -> dict[str, Any]:
        return {**super().extra_checkpoint_state(), "epsilon": self._epsilon}

    def load_extra_checkpoint_state(self, state: dict[str, Any]) -> None:
        super().load_extra_checkpoint_state(state)
        self._epsilon = float(state.get("epsilon", self._epsilon))


def dqn_loss(
    q_network: nn.Module,
    target_network: nn.Module,
    batch: ReplayBufferSamples,
    discounts: float | Tensor,
    next_mask: Tensor | None,
    double_dqn: bool,
    loss: str,
    weights: Tensor | None = None,
) -> tuple[Tensor, Tensor] | tuple[Tensor, Tensor, Tensor]:
    """DQN's update as a pure function (``DQNModule.update_loss`` calls it, through ``torch.compile`` with
    ``compile=True``): the TD loss of ``batch`` and the mean Q(s, a), without gradient; with ``weights``
    (prioritized replay), the loss weighted per sample and a third output, the TD errors Q(s, a) - y ``(batch,)``
    without gradient (the new priorities).

    Args:
        discounts: ``gamma``, or the per-sample gamma^k of n-step samples.
        next_mask: bool ``(batch, num_actions)``, the next states' legal actions, or None (no masks).
        double_dqn: pick a' with ``q_network``, value it with ``target_network``; else max of the target.
        loss: ``"mse"`` or ``"huber"``.
        weights: float32 ``(batch,)`` importance weights, or None (uniform replay: the plain mean).
    """
    q_values = q_network(batch.obs).gather(1, batch.actions.unsqueeze(1)).squeeze(1)
    with torch.no_grad():
        next_q_target = target_network(batch.next_obs)
        next_q_online = q_network(batch.next_obs) if double_dqn else None
        if next_mask is not None:
            # a' ranges over the next state's legal actions only; a terminal state may have none
            # (its bootstrap is zeroed by the target anyway, so its max is set to 0, not -inf).
            next_q_target = masked_logits(next_q_target, next_mask)
            next_q_online = None if next_q_online is None else masked_logits(next_q_online, next_mask)
        if next_q_online is not None:
            # Double DQN: the online network picks a', the target network values it.
            next_actions = next_q_online.argmax(dim=1, keepdim=True)
            next_q_values = next_q_target.gather(1, next_actions).squeeze(1)
        else:
            next_q_values = next_q_target.max(dim=1).values
        if next_mask is not None:
            next_q_values = torch.where(next_mask.any(dim=1), next_q_values, 0.0)
        td_targets = compute_td_target(batch.rewards, batch.terminated, next_q_values, discounts)
    if weights is None:
        return compute_td_loss(q_values, td_targets, loss), q_values.detach().mean()
    td_loss = compute_weighted_td_loss(q_values, td_targets, weights, loss)
    return td_loss, q_values.detach().mean(), (q_values.detach().float() - td_targets.float())


def distributional_dqn_loss(
    q_network: RainbowQNetwork,
    target_network: RainbowQNetwork,
    batch: ReplayBufferSamples,
    discounts: float | Tensor,
    next_mask: Tensor | None,
    double_dqn: bool,
    weights: Tensor | None = None,
) -> tuple[Tensor, Tensor] | tuple[Tensor, Tensor, Tensor]:
    """Distributional DQN's update as a pure function (``DQNModule.update_loss`` calls it for ``distributional``,
    through ``torch.compile`` with ``compile=True``): the mean per-sample loss of ``batch`` and the mean Q(s, a),
    without gradient; with ``weights`` (prioritized replay), the loss weighted per sample and a third output, the new
    priorities ``(batch,)``: C51's KL divergence of the prediction from its target (Hessel et al. 2018), QR's
    per-sample quantile Huber loss.

    The next action is the argmax of the mean Q: of ``q_network`` (double DQN, as Rainbow) or of ``target_network``
    (C51's and QR-DQN's papers, sb3-contrib); ``target_network``'s distribution of it is the target's, projected
    onto the atoms (C51, :func:`project_categorical`) or shifted quantile by quantile (QR, :func:`quantile_td_targets`).

    Args:
        discounts: ``gamma``, or the per-sample gamma^k of n-step samples.
        next_mask: bool ``(batch, num_actions)``, the next states' legal actions, or None (no masks); a next state
            without one bootstraps from nothing (the scalar loss's value 0).
        double_dqn: pick a' with ``q_network``, value it with ``target_network``; else the target's own argmax.
        weights: float32 ``(batch,)`` importance weights, or None (uniform replay: the plain mean).
    """
    head = q_network.head
    distribution = q_network.distribution(batch.obs)  # (batch, num_actions, N)
    taken_index = batch.actions.long().view(-1, 1, 1).expand(-1, 1, distribution.shape[-1])
    taken = distribution.gather(1, taken_index).squeeze(1)  # (batch, N): log-probabilities (C51) or quantiles (QR)
    with torch.no_grad():
        next_distribution = target_network.distribution(batch.next_obs)
        next_q_values = q_network(batch.next_obs) if double_dqn else head.expectation(next_distribution)
        terminated = batch.terminated.bool()
        if next_mask is not None:
            next_q_values = masked_logits(next_q_values, next_mask)
            terminated = terminated | ~next_mask.any(dim=1)
        next_index = next_q_values.argmax(dim=1).view(-1, 1, 1).expand(-1, 1, next_distribution.shape[-1])
        next_taken = next_distribution.gather(1, next_index).squeeze(1)
        if head.distributional == "c51":
            targets = project_categorical(
                next_taken.exp(), batch.rewards, terminated, discounts, head.support(next_taken.device)
            )
        else:
            targets = quantile_td_targets(next_taken, batch.rewards, terminated, discounts)
    if head.distributional == "c51":
        per_sample = categorical_cross_entropy(targets, taken)
    else:
        per_sample = quantile_huber_loss(taken, targets)
    q_mean = head.expectation(taken.detach()).mean()
    if weights is None:
        return per_sample.mean(), q_mean
    # C51: the KL, zero where prediction and target agree (the cross-entropy never falls below the target's entropy)
    priorities = categorical_kl(targets, taken.detach()) if head.distributional == "c51" else per_sample.detach()
    return (weights.float() * per_sample).mean(), q_mean, priorities
