"""On-policy data for actor-critic methods (PPO): ``RolloutSource`` with a critic.

The source collects one rollout with the current policy (the same loop as VPG's, the critic's values
recorded at every step), computes generalized advantages, then yields ``update_epochs x
num_minibatches`` shuffled minibatches of ``(env, timestep)`` entries (the seeds' ``batches``), each one
optimizer step, before it collects the next rollout.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import torch
from torch import Tensor, nn

from rl_lightning._checks import check_int
from rl_lightning.compiling import CompiledFunctions
from rl_lightning.data.normalization import ObservationNormalizer, Reduce, RewardScaler
from rl_lightning.data.rollout import RolloutCollection, RolloutSource, RolloutTensors
from rl_lightning.envs.base import VectorEnv
from rl_lightning.losses import compute_gae
from rl_lightning.nets import ActorCritic
from rl_lightning.nets.agents import active_weights


class PPOBatch(NamedTuple):
    """A minibatch of ``(env, timestep)`` entries, each field ``(batch, ...)``."""

    obs: Tensor  # as the policy saw them (normalised if asked)
    actions: Tensor
    logprobs: Tensor  # at collection
    values: Tensor  # at collection
    advantages: Tensor
    returns: Tensor  # advantages + values: the value targets


def shuffled_minibatches(num_entries: int, batch_size: int, count: int, generator: torch.Generator) -> Tensor:
    """``count`` minibatches of ``batch_size`` entry indices, int64 ``(count, batch_size)``, cut
    from an endless stream of shuffled passes over ``range(num_entries)`` (the seed's ``entries``
    and ``batches``): with ``batch_size * k == num_entries`` every k consecutive minibatches cover
    every entry exactly once."""
    check_int("batch_size", batch_size, 1)
    needed = batch_size * check_int("count", count, 1)
    passes = math.ceil(needed / num_entries)
    device = generator.device
    stream = torch.cat([torch.randperm(num_entries, generator=generator, device=device) for _ in range(passes)])
    return stream[:needed].view(count, batch_size)


class ActorCriticSource(RolloutSource):
    """Collects a rollout with ``model``, then yields its shuffled minibatches (``PPOBatch``).

    The dataset's length is ``update_epochs * num_minibatches``: one epoch is one rollout and its
    updates. The next rollout is collected only when its first minibatch is requested, with the
    weights after the last update of the previous one (``collection.position`` says where in its
    rollout the newest minibatch is). The rollout (``collection.rollout``) holds the raw observations
    and rewards; the policy acts on, and trains on, the normalised observations, and the advantages are
    those of the scaled rewards.

    The module checks the hyper-parameters; a source built directly cuts minibatches of
    ``num_envs * num_steps // num_minibatches`` entries from the endless shuffled stream.

    Args:
        envs: the vector env.
        model: the :class:`~rl_lightning.nets.ActorCritic` that acts and values.
        num_steps: steps per env per rollout.
        update_epochs: passes over the rollout.
        num_minibatches: minibatches per pass.
        gamma, gae_lambda: discount and GAE lambda.
        seed: seed of the generator for actions and shuffling.
        world_size: processes each running their own source (``env_steps`` counts them all).
        env_steps: env steps already taken (a resumed run).
        obs_normalizer: normalise observations with running statistics (updated per rollout).
        reward_scaler: scale rewards by the running std of the discounted return.
        reduce: sums a tensor over all processes (for the running statistics under DDP).
        compiled: ``RLModule.compiled``: with ``compile`` on, the collection steps run compiled where they can (see
            :class:`~rl_lightning.data.rollout.RolloutSource`: with a fusing env's steps, several steps of acting
            (:func:`actor_critic_step`: normalisation, forward pass, sampling), env and storing per call; else, on
            CUDA, each acting step); None: eager.
    """

    keeps_final_observations = True

    def __init__(
        self,
        envs: VectorEnv,
        model: ActorCritic,
        num_steps: int,
        update_epochs: int = 4,
        num_minibatches: int = 4,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        seed: int = 0,
        world_size: int = 1,
        env_steps: int = 0,
        obs_normalizer: ObservationNormalizer | None = None,
        reward_scaler: RewardScaler | None = None,
        reduce: Reduce | None = None,
        compiled: CompiledFunctions | None = None,
    ):
        # A pass over the rollout is VPG's "use" of it, a minibatch its batch; the envs run on across rollouts.
        super().__init__(
            envs,
            model,
            num_steps,
            num_batches=num_minibatches,
            rollout_use_count=update_epochs,
            full_reset=False,
            seed=seed,
            world_size=world_size,
            env_steps=env_steps,
            compiled=compiled,
        )
        self.update_epochs = update_epochs
        self.num_minibatches = num_minibatches
        #: Entries minibatches are drawn from: one per ``(env, t)``.
        self.num_entries = envs.num_envs * num_steps
        self.minibatch_size = self.num_entries // num_minibatches
        self.gamma = gamma
        self.gae_lambda = gae_lambda
        self.obs_normalizer = obs_normalizer
        self.reward_scaler = reward_scaler
        self.reduce = reduce or (lambda tensor: tensor)
        self._discounted_returns = torch.zeros(envs.num_envs, device=self.device)

    @property
    def model(self) -> ActorCritic:
        """The actor-critic (the source's ``policy``)."""
        return self.policy

    def reset_envs(self) -> Tensor:
        self._discounted_returns = torch.zeros_like(self._discounted_returns)
        return super().reset_envs()

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "discounted_returns": self._discounted_returns.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._discounted_returns = state["discounted_returns"].to(self.device)

    def _normalize(self, obs: Tensor) -> Tensor:
        return obs if self.obs_normalizer is None else self.obs_normalizer(obs)

    def _act(self, obs: Tensor, episode_start: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
        if self._compiled_acting:
            return self.compiled(actor_critic_step)(self.model, self.obs_normalizer, obs, self._draw_noise())
        return self.policy.sample(self._normalize(obs), self.generator)

    def _fused_acting(self) -> tuple[Callable[..., tuple[Tensor, Tensor, Tensor]], tuple[Any, ...]]:
        return actor_critic_step, (self.model, self.obs_normalizer)

    @property
    def _policy_head(self) -> nn.Module | None:
        return self.model.actor.head if isinstance(self.model, ActorCritic) else None

    def _prepare(self, rollout: RolloutTensors) -> RolloutCollection:
        """The critic's bootstrap values, the advantages and the shuffled minibatches of a rollout."""
        with torch.no_grad():
            # Normalised with the statistics the policy acted with (elementwise: the same numbers as
            # at each step); they are updated with this rollout only afterwards.
            policy_obs = None if self.obs_normalizer is None else self._normalize(rollout.obs)
            # V of every step's final observation in one batched pass; used only where an episode
            # ended (elsewhere the next step's value is V(obs t + 1)).
            final_values = self._final_values(self._normalize(self.rollout.final_observations()))
            last_values = self._last_values(self._normalize(self.obs))
        active = active_weights(rollout.obs)
        if active is not None:
            # A multi-agent env's absent agent (its "active" key False) is worth 0: the agent that left the scene gets
            # nothing more, so its last step bootstraps from 0 without a per-agent done, and its absent steps have zero
            # advantages (the losses leave them out too: ``ppo_minibatch_loss``).
            rollout = rollout._replace(values=rollout.values * active)
            final_values = final_values * active_weights(self.rollout.final_observations())
            last_values = last_values * active_weights(self.obs)
        following = torch.cat([rollout.values[:, 1:], last_values.unsqueeze(1)], dim=1)
        rollout = rollout._replace(next_values=torch.where(rollout.dones, final_values, following))
        rewards = rollout.rewards
        if self.reward_scaler is not None:
            rewards, self._discounted_returns = self.reward_scaler.scale(
                rollout.rewards, rollout.dones, self._discounted_returns, self.reduce
            )
        if self.obs_normalizer is not None:  # after the rollout: its statistics were fixed during it
            self.obs_normalizer.update(rollout.obs, self.reduce)
        advantages = compute_gae(
            rewards,
            rollout.values,
            rollout.next_values,
            rollout.terminated,
            rollout.truncated,
            self.gamma,
            self.gae_lambda,
        )
        order = shuffled_minibatches(self.num_entries, self.minibatch_size, self.batches_per_rollout, self.generator)
        return RolloutCollection(rollout, advantages, policy_obs=policy_obs, order=order)

    def _final_values(self, final_obs: Tensor) -> Tensor:
        """V of every step's final observation ``(num_envs, num_steps, *obs_shape)``."""
        return self.model.value(final_obs)

    def _last_values(self, obs: Tensor) -> Tensor:
        """V of the obs after the rollout's last step ``(num_envs, *obs_shape)``."""
        return self.model.value(obs)

    def _batch(self, collection: RolloutCollection) -> PPOBatch:
        indices = collection.order[collection.position]
        return PPOBatch(*(field.index_select(0, indices) for field in collection.entries))


def actor_critic_step(
    model: ActorCritic, obs_normalizer: ObservationNormalizer | None, obs: Tensor, noise: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """One acting step of an ``ActorCritic`` as a pure function (compiled with ``compile``): actions, their
    log-probabilities and the values of ``obs`` ``(num_envs, *obs_shape)`` (normalised first, if
    ``obs_normalizer``), sampled from the drawn ``noise``."""
    params, values = model(obs if obs_normalizer is None else obs_normalizer(obs))
    actions, logprobs = model.actor.head.sample(params, noise=noise)
    return actions, logprobs, values


class RecurrentPPOBatch(NamedTuple):
    """A minibatch of whole env sequences, each field ``(batch_envs, num_steps, ...)``, with the
    recurrent state each sequence started from and where its episodes start."""

    obs: Tensor
    actions: Tensor
    logprobs: Tensor
    values: Tensor
    advantages: Tensor
    returns: Tensor
    states: Tensor  # (num_state, batch_envs, core_size): the state before the rollout's first step
    episode_starts: Tensor  # bool (batch_envs, num_steps): the state is zeroed before these steps


class RecurrentActorCriticSource(ActorCriticSource):
    """``ActorCriticSource`` for a :class:`~rl_lightning.nets.RecurrentActorCritic`. Its step function
    carries the state across env steps (zeroed where an episode starts) and records it at every step,
    and a minibatch is a group of envs with their whole sequences, replayed in training from their
    initial state with the same masking, so the first update's log-probabilities equal the recorded
    ones. The module checks that ``num_minibatches`` divides ``num_envs``."""

    fuses_acting_with_env: ClassVar[bool] = False  # its acting step carries the recurrent state: eager

    def __init__(self, envs: VectorEnv, model: Any, num_steps: int, num_minibatches: int = 4, **kwargs: Any):
        super().__init__(envs, model, num_steps, num_minibatches=num_minibatches, **kwargs)
        self.num_entries = envs.num_envs  # one entry per env: its whole sequence
        self.minibatch_size = envs.num_envs // num_minibatches
        #: The live recurrent state of every env ``(num_state, num_envs, core_size)``.
        self.state = model.initial_state(envs.num_envs, self.device)
        # The state and episode-start flags each step of the current rollout started from.
        self._step_states: list[Tensor] = []
        self._step_starts: list[Tensor] = []

    def reset_envs(self) -> Tensor:
        self.state = torch.zeros_like(self.state)
        return super().reset_envs()

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "state": self.state.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.state = state["state"].to(self.device)

    def _play(self) -> None:
        self._step_states, self._step_starts = [], []
        super()._play()

    def _act(self, obs: Tensor, episode_start: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
        self._step_states.append(self.state)
        self._step_starts.append(episode_start)
        actions, logprobs, values, self.state = self.policy.sample(
            self._normalize(obs), self.state, episode_start, self.generator
        )
        return actions, logprobs, values

    def _final_values(self, final_obs: Tensor) -> Tensor:
        # V(final obs of step t) from the state after step t: the episode's memory, not reset.
        after = torch.stack([*self._step_states[1:], self.state], dim=2)  # (num_state, num_envs, num_steps, core)
        num_envs, num_steps = self.envs.num_envs, len(self._step_states)
        no_start = torch.zeros(num_envs * num_steps, dtype=torch.bool, device=self.device)
        values = self.model.value(final_obs.flatten(0, 1), after.flatten(1, 2), no_start)
        return values.view(num_envs, num_steps)

    def _last_values(self, obs: Tensor) -> Tensor:
        return self.model.value(obs, self.state, self._episode_start)

    def _prepare(self, rollout: RolloutTensors) -> RolloutCollection:
        collection = super()._prepare(rollout)
        collection.initial_state = self._step_states[0]
        collection.episode_starts = torch.stack(self._step_starts, dim=1)
        return collection

    def _batch(self, collection: RolloutCollection) -> RecurrentPPOBatch:
        """Whole sequences of a group of envs, with their initial state and episode starts."""
        indices = collection.order[collection.position]
        rollout = collection.rollout

        def envs(field: Tensor) -> Tensor:
            return field.index_select(0, indices)

        values, advantages = envs(rollout.values), envs(collection.advantages)
        return RecurrentPPOBatch(
            envs(collection.training_obs),
            envs(rollout.actions),
            envs(rollout.logprobs),
            values,
            advantages,
            advantages + values,
            collection.initial_state.index_select(1, indices),
            envs(collection.episode_starts),
        )
