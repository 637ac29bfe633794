"""Proximal policy optimisation with generalized advantage estimation, as a LightningModule.

One epoch = one rollout and its updates:

    rollout    = ActorCriticSource.collect().rollout  (envs stepped num_steps_per_rollout times)
    A          = compute_gae(r, V, V_next, terminated, truncated, gamma, lam)
                 (a truncated episode bootstraps from V(final_observation), a terminated one from 0)
    repeat update_epochs times, for each of num_minibatches shuffled (env, t) minibatches:
        r_t    = pi(a|s) / pi_old(a|s)
        loss   = max(-A r_t, -A clip(r_t, 1 +- clip_coef))          (compute_ppo_policy_loss)
               + vf_coef * 0.5 (V(s) - (A + V_old))^2 (clipped)      (compute_ppo_value_loss)
               - ent_coef * entropy
        one optimizer step (gradient norm clipped to max_grad_norm)

With ``target_kl`` the rest of a rollout's minibatches are skipped (no parameter update) once the
approximate KL of an update epoch exceeds it; they still count as optimizer steps, so ``max_steps`` keeps
meaning rollouts x epochs x minibatches and the run takes the env steps it planned, as CleanRL's fixed
number of iterations does. A rollout and all its updates are one training step (``OnPolicyModule``).
Discrete actions get a categorical policy, ``Box`` actions a diagonal Gaussian (``rl_lightning.nets.ActorCritic``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import torch
from torch import Tensor, nn

from rl_lightning._checks import check_bool, check_choice, check_float, check_int, check_sizes
from rl_lightning.algos.base import as_numpy, is_tensor_input
from rl_lightning.algos.on_policy import OnPolicyModule
from rl_lightning.data.actor_critic import ActorCriticSource, PPOBatch, RecurrentActorCriticSource, RecurrentPPOBatch
from rl_lightning.data.normalization import ObservationNormalizer, RewardScaler
from rl_lightning.envs.base import VectorEnv
from rl_lightning.export import GreedyPolicy, RecurrentGreedyPolicy
from rl_lightning.losses import (
    compute_approx_kl,
    compute_clip_fraction,
    compute_explained_variance,
    compute_ppo_loss,
    compute_ppo_policy_loss,
    compute_ppo_value_loss,
    normalize_advantages,
    weighted_mean,
)
from rl_lightning.nets import ACTIVATIONS, CORES, ActorCritic, RecurrentActorCritic, orthogonal_init
from rl_lightning.nets.agents import active_weights, agent_encoder
from rl_lightning.seeding import seeded


class PPOModule(OnPolicyModule):
    """PPO (clipped surrogate, GAE) on torch vector envs, for Discrete and Box action spaces.

    The defaults solve CartPole-v1 (greedy mean return >= 475 over 32 episodes) in a few seconds on
    one CPU thread (``scripts/train_ppo.py``; ``benchmarks/results/ppo.md``).

    Args:
        env_id: a native env id (``rl_lightning.registered_env_ids()``) or any gymnasium id.
        num_envs: envs stepped in lock-step per process.
        num_steps_per_rollout: steps per env in one rollout.
        lr: Adam learning rate.
        anneal_lr: decay the learning rate linearly from ``lr`` to ``lr_end`` over the first ``lr_frac``
            of the run's env steps (adds a ``LinearLRDecay`` callback).
        lr_end: the learning rate the decay ends at.
        lr_frac: the fraction of the run's env steps the decay takes, in (0, 1].
        gamma: discount factor.
        gae_lambda: GAE's lambda (1: Monte-Carlo returns minus V, 0: one-step TD errors).
        update_epochs: passes over each rollout.
        num_minibatches: minibatches per pass (must divide ``num_envs * num_steps_per_rollout``).
        clip_coef: the surrogate's ratio clip.
        clip_vloss: clip the value update to ``clip_coef`` around the value at collection.
        ent_coef: weight of the entropy bonus.
        vf_coef: weight of the value loss.
        max_grad_norm: clip each update's gradient norm to this; None: no clipping.
        target_kl: skip a rollout's remaining updates once an epoch's approximate KL exceeds it.
        norm_adv: normalise advantages per minibatch.
        normalize_obs: normalise observations with running statistics (saved in checkpoints,
            identical on every rank).
        normalize_rewards: scale rewards by the running std of the discounted return.
        shared_encoder: one encoder for actor and critic; else separate ones (a recurrent policy
            always shares its encoder and core).
        hidden_sizes: widths of the MLP encoders' hidden layers.
        activation: ``"tanh"`` or ``"relu"``.
        adam_eps: Adam's epsilon.
        recurrent: ``"lstm"`` or ``"gru"``: a recurrent core between the encoder and the heads, shared
            by actor and critic (``hidden_sizes`` is then the encoder before it); its state is carried
            across env steps, zeroed where an episode starts, stored at every step of a rollout, and
            a minibatch is a group of whole env sequences replayed from their stored state
            (``num_minibatches`` must divide ``num_envs``). ``act`` then takes and returns the state.
            None: a feed-forward policy.
        core_size: the recurrent core's hidden size.
        seed: seeds the network init (identical on every rank), the envs (``seed + rank *
            num_envs``: no two ranks share env seeds), action sampling and minibatch shuffling.
        network: your own encoder (observations -> features) for the actor (the critic gets a
            copy, or shares it); None: an MLP (a CNN for image observations). Not saved in
            checkpoints' hyper-parameters: pass it again to ``load_from_checkpoint``.
        env_backend: ``"auto"`` (native torch env where there is one, else gymnasium's),
            ``"torch"``, ``"gymnasium"`` (the adapter, also for a native id), ``"envpool"``, ``"ale_vector"``
            (Atari and EnvPool's MuJoCo tasks in C++: ``EnvPoolVectorEnv``, ``AleVectorEnv``), ``"ray"``
            (gymnasium's envs in Ray actors: ``RayVectorEnv``; ``env_kwargs={"num_workers": 2}``), ``"vmas"`` or
            ``"pettingzoo"`` (multi-agent envs, agents as rows: ``agent_networks``; ``num_envs`` counts scenes).
        env_kwargs: for gymnasium envs, e.g. ``{"vectorization_mode": "async"}`` or env arguments (VMAS's and
            PettingZoo's too, e.g. ``{"n_agents": 4, "max_steps": 100}``).
        compile: the minibatch update (:func:`ppo_minibatch_loss`, forward and backward) and, on CUDA, the
            acting step through ``torch.compile`` (``rl_lightning.compiling``); a dict gives ``torch.compile``'s
            arguments (``{"backend": "aot_eager"}``); the whole update is compiled (backward, clipping, Adam;
            ``{"whole_update": False}``: the loss only). The same losses and actions as without, to float tolerance.
        num_seeds: agents trained in lock-step in one fit, with seeds ``seed .. seed + num_seeds - 1``
            (``SeedMembers``).
        actor_keys: the keys of a Dict observation the policy reads (an asymmetric actor-critic); ``act``,
            ``evaluate_policy``, every export and the Hub folder's policy then take only these, so a deployed
            policy never asks for privileged state. None: every key.
        critic_keys: the keys the critic reads (e.g. a simulator's privileged state besides what the actor
            senses); the critic then has its own encoder (``shared_encoder=False``), and a recurrent policy's
            critic is a feed-forward network of these keys beside the core. None: every key.
        agent_networks: on a multi-agent env (``make_envs(..., backend="vmas" | "pettingzoo")``: agents as rows,
            each observation the agent's ``"obs"``, its one-hot ``"agent_id"`` and the scene's ``"state"``):
            ``"shared"`` (IPPO's and MAPPO's usual parameter sharing: one actor and one critic for every agent, their
            keys concatenated so the agent id reaches the first layer) or ``"separate"`` (each agent its own actor and
            critic MLPs: ``rl_lightning.nets.agents.SeparateAgentEncoders``). MAPPO is ``critic_keys=["state",
            "agent_id"]`` (the centralised critic), IPPO ``critic_keys=None``. Agents that leave their scene early
            (the ``"active"`` key) are left out of the losses and bootstrap from 0.
    """

    #: PPO's losses leave out the rows of absent agents (``ppo_minibatch_loss``, ``ActorCriticSource._prepare``).
    masks_absent_agents = True

    action_kinds = ("discrete", "box", "multi_discrete", "multi_binary")

    def __init__(
        self,
        env_id: str = "CartPole-v1",
        num_envs: int = 16,
        num_steps_per_rollout: int = 32,
        lr: float = 2.5e-3,
        anneal_lr: bool = True,
        lr_end: float = 0.0,
        lr_frac: float = 1.0,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        update_epochs: int = 4,
        num_minibatches: int = 4,
        clip_coef: float = 0.2,
        clip_vloss: bool = True,
        ent_coef: float = 0.0,
        vf_coef: float = 0.5,
        max_grad_norm: float | None = 0.5,
        target_kl: float | None = None,
        norm_adv: bool = True,
        normalize_obs: bool = False,
        normalize_rewards: bool = False,
        shared_encoder: bool = False,
        hidden_sizes: Sequence[int] = (64, 64),
        activation: str = "tanh",
        adam_eps: float = 1e-5,
        recurrent: str | None = None,
        core_size: int = 64,
        seed: int = 1,
        network: nn.Module | None = None,
        env_backend: str = "auto",
        env_kwargs: dict[str, Any] | None = None,
        compile: bool | dict[str, Any] = False,
        num_seeds: int = 1,
        actor_keys: Sequence[str] | None = None,
        critic_keys: Sequence[str] | None = None,
        agent_networks: str = "shared",
    ):
        super().__init__(
            env_id=env_id,
            num_envs=num_envs,
            seed=seed,
            env_backend=env_backend,
            env_kwargs=env_kwargs,
            compile=compile,
            num_seeds=num_seeds,
        )
        check_int("num_steps_per_rollout", num_steps_per_rollout, 1)
        check_float("lr", lr, 0.0, low_open=True)
        check_bool("anneal_lr", anneal_lr)
        check_float("lr_end", lr_end, 0.0)
        check_float("lr_frac", lr_frac, 0.0, 1.0, low_open=True)
        check_float("gamma", gamma, 0.0, 1.0)
        check_float("gae_lambda", gae_lambda, 0.0, 1.0)
        check_int("update_epochs", update_epochs, 1)
        check_int("num_minibatches", num_minibatches, 1)
        check_float("clip_coef", clip_coef, 0.0, low_open=True)
        check_bool("clip_vloss", clip_vloss)
        check_float("ent_coef", ent_coef, 0.0)
        check_float("vf_coef", vf_coef, 0.0)
        if max_grad_norm is not None:
            check_float("max_grad_norm", max_grad_norm, 0.0, low_open=True)
        if target_kl is not None:
            check_float("target_kl", target_kl, 0.0, low_open=True)
        for name, value in (
            ("norm_adv", norm_adv),
            ("normalize_obs", normalize_obs),
            ("normalize_rewards", normalize_rewards),
            ("shared_encoder", shared_encoder),
        ):
            check_bool(name, value)
        hidden_sizes = check_sizes("hidden_sizes", hidden_sizes)
        check_choice("activation", activation, ACTIVATIONS)
        check_float("adam_eps", adam_eps, 0.0, low_open=True)
        if (num_envs * num_steps_per_rollout) % num_minibatches != 0:
            raise ValueError(
                f"num_minibatches ({num_minibatches}) must divide num_envs * num_steps_per_rollout "
                f"({num_envs} * {num_steps_per_rollout} = {num_envs * num_steps_per_rollout})"
            )
        minibatch_size = num_envs * num_steps_per_rollout // num_minibatches
        if minibatch_size < 2:
            raise ValueError(
                f"a minibatch of {minibatch_size} entry (num_envs * num_steps_per_rollout / num_minibatches = "
                f"{num_envs} * {num_steps_per_rollout} / {num_minibatches}) cannot be learned from: its advantages' "
                "std is undefined; use fewer num_minibatches or more envs or steps"
            )
        check_int("core_size", core_size, 1)
        if recurrent is not None:
            check_choice("recurrent", recurrent, CORES)
            if num_envs % num_minibatches != 0:
                raise ValueError(
                    f"num_minibatches ({num_minibatches}) must divide num_envs ({num_envs}) for a recurrent "
                    "policy: a minibatch is a group of whole env sequences"
                )
        actor_space, critic_space = self.observation_views(actor_keys, critic_keys)
        agent_encoders = agent_encoder_builder(
            agent_networks, env_id, self.num_agents, hidden_sizes, activation, network, recurrent, shared_encoder
        )
        self.save_hyperparameters(ignore=["network"])
        with seeded(seed):  # the same initial weights on every rank
            if agent_encoders is not None:
                network, critic_network = agent_encoders(actor_space), agent_encoders(critic_space or actor_space)
                self.model: ActorCritic | RecurrentActorCritic = ActorCritic(
                    actor_space,
                    self.action_space,
                    hidden_sizes,
                    network=network,
                    activation=activation,
                    critic_observation_space=critic_space,
                    critic_network=critic_network,
                )
            elif recurrent is None:
                self.model = ActorCritic(
                    actor_space,
                    self.action_space,
                    hidden_sizes,
                    shared_encoder,
                    network,
                    activation,
                    critic_observation_space=critic_space,
                )
            else:
                self.model = RecurrentActorCritic(
                    actor_space,
                    self.action_space,
                    hidden_sizes,
                    recurrent,
                    core_size,
                    network,
                    activation,
                    critic_observation_space=critic_space,
                )
        normalized = self.observation_space if isinstance(self.observation_space, gym.spaces.Dict) else self.obs_shape
        self.obs_normalizer = ObservationNormalizer(normalized) if normalize_obs else None
        self.reward_scaler = RewardScaler(gamma) if normalize_rewards else None
        self._approx_kl: Tensor | None = None  # the newest minibatch's approximate KL

    @property
    def _acting_head(self) -> nn.Module | None:
        return self.model.actor.head if isinstance(self.model, ActorCritic) else None  # recurrent: acts eagerly

    # -- the algorithm ----------------------------------------------------------------------

    def update_loss(self, batch: PPOBatch | RecurrentPPOBatch) -> Tensor:
        hp = self.hparams
        loss, metrics = self.seed_update(
            ppo_minibatch_loss,
            batch,
            lambda module, part: (
                module.model,
                part,
                hp.clip_coef,
                hp.clip_vloss,
                hp.vf_coef,
                hp.ent_coef,
                hp.norm_adv,
            ),
        )
        self._approx_kl = metrics["losses/approx_kl"]  # for target_kl (ends_rollout_early); num_seeds > 1: per seed
        if self.update_in_rollout == 0:  # once per rollout
            explained = [
                compute_explained_variance(c.rollout.values, c.advantages + c.rollout.values)
                for c in (source.collection for source in getattr(self.source, "sources", [self.source]))
            ]
            metrics["losses/explained_variance"] = explained[0] if self.num_seeds == 1 else torch.stack(explained)
            self.log_charts()
        self.log_metrics(metrics)
        return loss

    def ends_rollout_early(self) -> bool | list[bool]:
        """``target_kl``: whether the approximate KL of an update epoch's last minibatch exceeds it (every rank
        decides alike, on the KL of all ranks); the layer then skips the rest of the rollout's updates, counted as
        optimizer steps (``max_steps`` keeps meaning rollouts x epochs x minibatches, and a run takes the env
        steps it planned, as CleanRL's fixed number of iterations does). With ``num_seeds > 1``, each seed's."""
        target_kl = self.hparams.target_kl
        if target_kl is None or (self.update_in_rollout + 1) % self.hparams.num_minibatches != 0:
            return False
        kl = self._approx_kl
        kl = self.trainer.strategy.reduce(kl, reduce_op="mean") if self.world_size > 1 else kl
        return bool(kl > target_kl) if self.num_seeds == 1 else (kl > target_kl).tolist()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(
            self.model.parameters(), lr=self.hparams.lr, eps=self.hparams.adam_eps, fused=self.use_fused_adam()
        )

    # -- what the base needs ----------------------------------------------------------------

    def make_source(self, envs: VectorEnv) -> ActorCriticSource:
        hp = self.hparams
        source_class = ActorCriticSource if hp.recurrent is None else RecurrentActorCriticSource
        return source_class(
            envs,
            self.model,
            num_steps=hp.num_steps_per_rollout,
            update_epochs=hp.update_epochs,
            num_minibatches=hp.num_minibatches,
            gamma=hp.gamma,
            gae_lambda=hp.gae_lambda,
            obs_normalizer=self.obs_normalizer,
            reward_scaler=self.reward_scaler,
            reduce=self._sum_over_processes,
            compiled=self.compiled,
        )

    def _sum_over_processes(self, tensor: Tensor) -> Tensor:
        if self.world_size > 1:
            return self.trainer.strategy.reduce(tensor, reduce_op="sum")
        return tensor

    @property
    def recurrent(self) -> bool:
        return self.hparams.recurrent is not None

    @property
    def batches_seeds(self) -> bool:
        return not self.recurrent  # vmap has no batching rule for nn.LSTM / nn.GRU: num_seeds' losses in turn

    def greedy_policy(self) -> nn.Module:
        if self.recurrent:  # (obs, state, episode_start) -> (actions, next state), as act
            return RecurrentGreedyPolicy(self.model, self.obs_normalizer)
        return GreedyPolicy(self.model.actor, self.obs_normalizer)

    def greedy_actor(self) -> Any:
        if not self.recurrent:
            return super().greedy_actor()
        state: list[Tensor | None] = [None]

        def actor(obs: Any, episode_start: Any = None) -> Any:
            actions, state[0] = self.act(obs, greedy=True, state=state[0], episode_start=episode_start)
            return actions

        return actor

    @torch.no_grad()
    def act(
        self,
        obs: Any,
        greedy: bool = False,
        state: Tensor | None = None,
        episode_start: Any = None,
        action_mask: Any = None,
        seed_index: int | str | None = None,
    ) -> Any:
        """Actions for ``obs`` as :meth:`RLModule.act`; for a recurrent policy also the state: it
        takes the ``state`` from the previous call (None: zeros) and ``episode_start`` (bool per
        observation: zero the state first; None: no new episode) and returns ``(actions, state)``
        (the actions numpy for a numpy observation, the state always a tensor). ``seed_index``: with ``num_seeds > 1``,
        the seed that acts (None: seed 0, this module)."""
        if not self.recurrent:
            return super().act(obs, greedy, action_mask, seed_index)
        check_bool("greedy", greedy)
        tensor_in = is_tensor_input(obs)
        obs, batch_shape = self._inputs.batch(obs, action_mask, self.device)
        batch = math.prod(batch_shape)
        if state is None:
            state = self.model.initial_state(batch, self.device)
        else:
            if not isinstance(state, Tensor) or not state.is_floating_point():
                raise TypeError(f"state must be a floating tensor (the one act returned), got {type(state).__name__}")
            state = state.to(self.device, torch.float32)
        if state.shape != (self.model.num_state, batch, self.model.core_size):
            raise ValueError(
                f"state must have shape {(self.model.num_state, batch, self.model.core_size)} for {batch} "
                f"observations, got {tuple(state.shape)}"
            )
        if episode_start is None:
            episode_start = torch.zeros(batch, dtype=torch.bool, device=self.device)
        episode_start = torch.as_tensor(episode_start, device=self.device)
        if episode_start.numel() != batch:
            raise ValueError(
                f"episode_start must have one flag per observation ({batch}), got shape {tuple(episode_start.shape)}"
            )
        episode_start = episode_start.reshape(batch).bool()
        if self.obs_normalizer is not None:
            obs = self.obs_normalizer(obs)
        actions, params, state = self.model.act(obs, state, episode_start, greedy)
        self.check_finite_outputs(params, "policy's outputs")
        actions = actions.reshape((*batch_shape, *self.action_shape))
        return (actions if tensor_in else self._inputs.gymnasium_actions(as_numpy(actions))), state

    def policy_actions(self, obs: Tensor, greedy: bool) -> Tensor:
        if self.recurrent:  # one step from a zero state (use act with a state for more)
            return self.act(obs, greedy)[0]
        if self.obs_normalizer is not None:
            obs = self.obs_normalizer(obs)
        params = self.model.actor(obs)
        self.check_finite_outputs(params, "policy's outputs")
        head = self.model.actor.head
        return head.mode(params) if greedy else head.sample(params)[0]

    @property
    def training_steps_per_collection(self) -> int:
        return self.hparams.update_epochs * self.hparams.num_minibatches


def ppo_minibatch_loss(
    model: ActorCritic | RecurrentActorCritic,
    batch: PPOBatch | RecurrentPPOBatch,
    clip_coef: float,
    clip_vloss: bool,
    vf_coef: float,
    ent_coef: float,
    norm_adv: bool,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO's update as a pure function (``PPOModule.update_loss`` calls it, through ``torch.compile``
    with ``compile=True``): the loss of one minibatch, differentiable w.r.t. ``model``'s parameters, and
    the metrics it logs (detached): policy and value loss, mean entropy, approximate KL, clip fraction.

    Args:
        model: the actor-critic; a recurrent one replays the batch's whole sequences ``(batch_envs,
            num_steps, ...)`` from their stored state (``RecurrentPPOBatch``).
        batch: the minibatch, each field ``(batch, ...)``.
        clip_coef: the surrogate's ratio clip (and the value clip, with ``clip_vloss``).
        norm_adv: normalise the advantages over the minibatch.
    """
    if isinstance(batch, RecurrentPPOBatch):  # whole sequences from their stored state: (batch_envs, num_steps) each
        logprobs, entropy, values = model.evaluate(batch.obs, batch.actions, batch.states, batch.episode_starts)
        batch = PPOBatch(*(field.flatten(0, 1) for field in batch[:6]))
        logprobs, entropy, values = logprobs.flatten(), entropy.flatten(), values.flatten()
    else:
        logprobs, entropy, values = model.evaluate(batch.obs, batch.actions)
    weights = active_weights(batch.obs)  # a multi-agent env's absent agents count for nothing (None: all count)
    advantages = normalize_advantages(batch.advantages, weights=weights) if norm_adv else batch.advantages
    policy_loss = compute_ppo_policy_loss(logprobs, batch.logprobs, advantages, clip_coef, weights)
    value_loss = compute_ppo_value_loss(values, batch.values, batch.returns, clip_coef if clip_vloss else None, weights)
    loss = compute_ppo_loss(policy_loss, value_loss, entropy, vf_coef, ent_coef, weights)
    with torch.no_grad():
        metrics = {
            "losses/policy_loss": policy_loss.detach(),
            "losses/value_loss": value_loss.detach(),
            "losses/entropy": weighted_mean(entropy.detach(), weights),
            "losses/approx_kl": compute_approx_kl(logprobs, batch.logprobs, weights),
            "losses/clipfrac": compute_clip_fraction(logprobs, batch.logprobs, clip_coef, weights),
        }
    return loss, metrics


#: ``PPOModule(agent_networks=...)``'s choices.
AGENT_NETWORKS = ("shared", "separate")


def agent_encoder_builder(
    agent_networks: str,
    env_id: str,
    num_agents: int,
    hidden_sizes: Sequence[int],
    activation: str,
    network: nn.Module | None,
    recurrent: str | None,
    shared_encoder: bool,
) -> Callable[[gym.spaces.Dict], nn.Module] | None:
    """``agent_networks`` checked against the env and the other settings, and the builder of a multi-agent env's
    default encoders (``rl_lightning.nets.agents.agent_encoder``, orthogonally initialised) for a Dict space; None
    where the usual networks apply (a single-agent env, the user's ``network``, a recurrent policy, a shared
    encoder)."""
    check_choice("agent_networks", agent_networks, AGENT_NETWORKS)
    separate = agent_networks == "separate"
    if separate and num_agents == 1:
        raise ValueError(
            f"agent_networks='separate' gives each agent of a multi-agent env its own networks, but {env_id!r} has "
            "one agent: use agent_networks='shared'"
        )
    if separate and (network is not None or recurrent is not None or shared_encoder):
        raise ValueError(
            "agent_networks='separate' builds each agent's MLPs itself: it takes no network, no recurrent core and "
            "shared_encoder=False"
        )
    if num_agents == 1 or network is not None or recurrent is not None or shared_encoder:
        return None

    def build(space: gym.spaces.Dict) -> nn.Module:
        encoder = agent_encoder(space, hidden_sizes, activation, num_agents if separate else None)[0]
        orthogonal_init(encoder)
        return encoder

    return build
