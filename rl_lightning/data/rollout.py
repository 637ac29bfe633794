"""On-policy data: the rollout record, the ``Rollout`` buffer and the ``RolloutSource`` dataset (VPG; the
actor-critic sources in ``actor_critic.py`` are the same source with a critic).

One meaning of done everywhere: ``terminated[:, t]`` / ``truncated[:, t]`` say that step t ended its episode
by termination / by a time limit, ``dones = terminated | truncated``; the obs at t + 1 then starts a new
episode (the envs auto-reset).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import cached_property
from typing import Any, ClassVar, NamedTuple

import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch import Tensor, nn

from rl_lightning.compiling import CompiledFunctions
from rl_lightning.data._fused_collection import _noise_draw, fused_collection_steps, replays_sampling
from rl_lightning.data.episodes import game_steps
from rl_lightning.data.source import EnvSource
from rl_lightning.envs.atari import GAME_REWARD_KEY
from rl_lightning.envs.base import VectorEnv
from rl_lightning.envs.spaces import as_tree, plain
from rl_lightning.nets import PolicyNetwork


class RolloutTensors(NamedTuple):
    """A rollout (or a batch of its envs), every field ``(num_envs, num_steps, ...)``.

    ``actions`` are what the policy sampled (for a ``Box`` space unclipped). ``values`` and
    ``next_values`` are an actor-critic's (None without a critic): ``next_values[:, t]`` is V of the state
    step t reached, V(obs t + 1) inside an episode and V(``info["final_observation"]``) where step t ended
    one (used only where it did not terminate: a time limit is not a terminal state).
    """

    obs: Tensor  # (num_envs, num_steps, *obs_shape), as the envs gave them
    actions: Tensor  # (num_envs, num_steps, *action_shape)
    logprobs: Tensor  # (num_envs, num_steps), log pi(a_t | o_t) under the policy that acted
    rewards: Tensor  # float32 (num_envs, num_steps), as the envs gave them
    terminated: Tensor  # bool (num_envs, num_steps): step t ended its episode by termination
    truncated: Tensor  # bool (num_envs, num_steps): step t ended its episode by a time limit
    values: Tensor | None = None  # (num_envs, num_steps): V(obs t)
    next_values: Tensor | None = None  # (num_envs, num_steps): V of the state step t reached

    @property
    def dones(self) -> Tensor:
        """bool ``(num_envs, num_steps)``: step t ended its episode (terminated or truncated)."""
        return self.terminated | self.truncated

    def select_envs(self, index: slice | Tensor) -> RolloutTensors:
        """The rollout of some envs (a slice: views), every field indexed along its first dimension."""
        return RolloutTensors(*(None if field is None else field[index] for field in self))


_namedtuple_new = RolloutTensors.__new__


def _rollout_tensors_new(
    cls: type[RolloutTensors],
    obs: Tensor,
    actions: Tensor,
    logprobs: Tensor,
    rewards: Tensor,
    terminated: Tensor | None = None,
    truncated: Tensor | None = None,
    values: Tensor | None = None,
    next_values: Tensor | None = None,
    *,
    dones: Tensor | None = None,
) -> RolloutTensors:
    """``RolloutTensors(obs, actions, logprobs, rewards, terminated, truncated, ...)``, and the seeds' call
    ``RolloutTensors(obs, actions, logprobs, rewards, dones)`` (positional or ``dones=``): their one flag, done =
    terminated | truncated, is kept as ``terminated`` with ``truncated`` all False (``dones`` reads it back);
    ``truncated`` None means no step was truncated."""
    if dones is not None:
        if terminated is not None or truncated is not None:
            raise TypeError("RolloutTensors takes terminated (and truncated) or the seeds' dones, not both")
        terminated = dones
    if terminated is None:
        raise TypeError("RolloutTensors needs terminated (or the seeds' dones)")
    if truncated is None:
        truncated = torch.zeros_like(terminated, dtype=torch.bool)
    return _namedtuple_new(cls, obs, actions, logprobs, rewards, terminated, truncated, values, next_values)


# Set on the NamedTuple itself, not in a subclass: torch.compile takes a subclass that overrides __new__ for
# no namedtuple. A call with terminated and truncated builds what the generated __new__ did; only the seeds'
# shorter calls (which raised before) take the new branches.
RolloutTensors.__new__ = staticmethod(_rollout_tensors_new)  # type: ignore[method-assign]


#: What ``Rollout.add_step`` stores per step, in the record's order.
_STEP_FIELDS = RolloutTensors._fields[:7]


class Rollout:
    """Per-step tensors of ``num_envs`` trajectories, stacked once when read.

    The seeds' API, kept (``tests/test_seeds_contract.py``): ``Rollout(max_steps)``, ``add_step(obs, actions,
    logprobs, rewards, dones)``, ``reset()``, ``get()``, ``get_batches(batch_size)``, ``timestep``, ``MAX_SIZE``.

    Args:
        max_steps: the most timesteps it holds; ``add_step`` past that raises ``ValueError``.
    """

    def __init__(self, max_steps: int):
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"max_steps must be a positive int, got {max_steps!r}")
        self.max_steps = max_steps
        # Appending references and stacking once is cheaper than indexed writes per step into a
        # preallocated buffer; each step's tensors are fresh, so references are safe.
        self._steps: list[tuple[Any, ...]] = []
        self._final_obs: list[Tensor] = []

    @property
    def timestep(self) -> int:
        """Number of steps stored."""
        return len(self._steps)

    @property
    def MAX_SIZE(self) -> int:
        """The seeds' name of ``max_steps``."""
        return self.max_steps

    def add_step(
        self,
        obs: Tensor,
        actions: Tensor,
        logprobs: Tensor,
        rewards: Tensor,
        terminated: Tensor | None = None,
        truncated: Tensor | None = None,
        values: Tensor | None = None,
        final_obs: Tensor | None = None,
        *,
        dones: Tensor | None = None,
    ) -> None:
        """Store one timestep of every env.

        The seeds' call ``add_step(obs, actions, logprobs, rewards, dones)`` (positional or ``dones=``) stores their
        one flag, done = terminated | truncated, as ``terminated`` (``get().dones`` reads it back unchanged).

        Args:
            obs: ``(num_envs, *obs_shape)`` the obs the agent acted on.
            actions: ``(num_envs, *action_shape)`` the actions taken (int for Discrete).
            logprobs: ``(num_envs,)`` log pi(a_t | o_t) under the policy that acted.
            rewards: ``(num_envs,)`` the reward for that action.
            terminated, truncated: bool ``(num_envs,)`` whether the step ended the episode by termination /
                by a time limit (truncated None: it did not).
            values: ``(num_envs,)`` V(obs) of an actor-critic, or None.
            final_obs: ``info["final_observation"]`` of the step (kept for :meth:`final_observations`), or None.
            dones: bool ``(num_envs,)``, the seeds' flag (in place of ``terminated`` and ``truncated``).

        Raises:
            ValueError: if the rollout already holds ``max_steps`` steps, or the first step's shapes
                disagree on ``num_envs`` (the later steps' are checked when stacked).
            TypeError: neither ``terminated`` nor ``dones`` given, or ``dones`` with either flag.
        """
        if dones is not None:
            if terminated is not None or truncated is not None:
                raise TypeError("add_step takes terminated (and truncated) or the seeds' dones, not both")
            terminated = dones
        if terminated is None:
            raise TypeError("add_step needs terminated (or the seeds' dones)")
        if self.timestep >= self.max_steps:
            raise ValueError(f"Rollout is full: it already holds max_steps={self.max_steps} steps")
        if truncated is None:
            truncated = torch.zeros_like(terminated, dtype=torch.bool)
        step = (obs, actions, logprobs, rewards, terminated, truncated, values)
        if not self._steps:
            _check_step(step)
        self._steps.append(step)
        if final_obs is not None:
            self._final_obs.append(final_obs)

    def reset(self) -> None:
        """Empty the rollout."""
        self._steps.clear()
        self._final_obs.clear()

    def get(self) -> RolloutTensors:
        """All stored steps as ``(num_envs, timestep, ...)`` tensors (rewards float32, flags bool);
        ``next_values`` is None (a critic's, see ``ActorCriticSource``)."""
        if not self._steps:
            raise ValueError("Rollout is empty: add_step() at least once before get()")
        stacked = []
        for name, column in zip(_STEP_FIELDS, zip(*self._steps, strict=True), strict=True):
            if column[0] is None:
                stacked.append(None)
                continue
            try:
                stacked.append(torch.stack(column, dim=1))
            except RuntimeError as error:  # a later step whose shape differs from the first one's
                raise ValueError(f"the steps' {name} differ in shape: {error}") from None
        obs, actions, logprobs, rewards, terminated, truncated, values = stacked
        return RolloutTensors(obs, actions, logprobs, rewards.float(), terminated.bool(), truncated.bool(), values)

    def get_batches(self, batch_size: int) -> list[RolloutTensors]:
        """:meth:`get` split along the envs into batches of ``batch_size`` whole trajectories (views; the last
        batch holds the remainder where ``batch_size`` does not divide ``num_envs``), as ``torch.split`` cuts.

        Raises:
            ValueError: ``batch_size`` not a positive int, or the rollout empty.
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        rollout = self.get()
        num_envs = rollout.rewards.shape[0]  # obs may be a dict of tensors
        return [rollout.select_envs(slice(start, start + batch_size)) for start in range(0, num_envs, batch_size)]

    def final_observations(self) -> Tensor:
        """The stored steps' ``final_obs``, ``(num_envs, timestep, *obs_shape)``."""
        if len(self._final_obs) != self.timestep:
            raise ValueError(f"final_obs was given for {len(self._final_obs)} of the {self.timestep} steps")
        return torch.stack(self._final_obs, dim=1)


def _check_step(step: tuple[Any, ...]) -> None:
    obs, actions = step[0], step[1]
    num_envs = obs.shape[0] if isinstance(obs, Tensor) else actions.shape[0]  # a dict observation: by its actions
    if actions.shape[:1] != (num_envs,):
        raise ValueError(f"actions must have shape ({num_envs}, ...) like obs, got {tuple(actions.shape)}")
    for name, value in zip(_STEP_FIELDS[2:], step[2:], strict=True):
        if value is not None and value.shape != (num_envs,):
            raise ValueError(f"{name} must have shape ({num_envs},) like obs, got {tuple(value.shape)}")


@dataclass
class RolloutCollection:
    """The newest rollout and where training is in it (``source.collection``).

    ``position`` is the index of the newest batch among the rollout's ``source.batches_per_rollout``
    (0: the first batch of a rollout just collected). The other fields are what an actor-critic's
    minibatches are cut from (None for VPG).
    """

    rollout: RolloutTensors  # as the envs gave it (raw obs and rewards), see ``RolloutTensors``
    advantages: Tensor | None = None  # (num_envs, num_steps), GAE of the (scaled) rewards
    position: int = -1
    policy_obs: Tensor | None = None  # the obs as the policy saw them (normalised); None: rollout.obs
    order: Tensor | None = None  # int64 (batches_per_rollout, batch_size): each minibatch's entries
    initial_state: Tensor | None = None  # (num_state, num_envs, core_size): a recurrent policy's state at t = 0
    episode_starts: Tensor | None = None  # bool (num_envs, num_steps): obs t starts an episode (recurrent)

    @property
    def training_obs(self) -> Tensor:
        """The observations training evaluates the policy on: what it saw when it acted."""
        return self.rollout.obs if self.policy_obs is None else self.policy_obs

    @cached_property
    def entries(self) -> tuple[Tensor, ...]:
        """An actor-critic's ``(env, t)`` entries, each field ``(num_envs * num_steps, ...)``: the
        training obs, actions, logprobs, values, advantages and returns (advantages + values)."""
        rollout, advantages = self.rollout, self.advantages
        columns = (self.training_obs, rollout.actions, rollout.logprobs, rollout.values, advantages)
        return (*(column.flatten(0, 1) for column in columns), (advantages + rollout.values).flatten())

    def state_dict(self) -> dict[str, Any]:
        # Plain dicts: checkpoints load with torch.load(weights_only=True), which knows no NamedTuple.
        state = {field.name: plain(getattr(self, field.name)) for field in fields(self)}
        state["rollout"] = {name: plain(value) for name, value in self.rollout._asdict().items()}
        return state

    @classmethod
    def from_state_dict(cls, state: dict[str, Any], device: torch.device) -> RolloutCollection:
        def load(value: Any) -> Any:
            return as_tree(value).to(device) if isinstance(value, (Tensor, dict)) else value

        rollout = RolloutTensors(**{name: load(value) for name, value in state["rollout"].items()})
        return cls(rollout, **{name: load(value) for name, value in state.items() if name != "rollout"})


class EpisodeStats(NamedTuple):
    """Undiscounted return and length of each env's first episode in a rollout."""

    returns: Tensor
    lengths: Tensor


def first_episode_stats(rewards: Tensor, dones: Tensor) -> EpisodeStats:
    """Return and length of each env's first episode (cut at the window if it never ends).

    Args:
        rewards: ``(num_envs, num_steps)``; dones: bool ``(num_envs, num_steps)``.
    """
    dones = dones.int()
    in_first = (dones.cumsum(dim=1) - dones) == 0  # no done strictly before this step
    return EpisodeStats((rewards.float() * in_first).sum(dim=1), in_first.sum(dim=1).float())


class RolloutSource(EnvSource):
    """Yields on-policy rollouts of ``policy`` on ``envs``, one training batch per item.

    Each rollout gives ``batches_per_rollout = num_batches * rollout_use_count`` batches (VPG: its envs
    split into ``num_batches`` batches of whole trajectories, each yielded ``rollout_use_count`` times); an
    epoch is ``rollouts_per_epoch`` rollouts' worth. A rollout is collected only when the first of its
    batches is requested, with the policy's weights at that moment. The dataset has a length, so
    Lightning does not prefetch: the rollout used by training step k is generated by the weights
    after update k - 1. ``collection`` holds the newest rollout and the position of the newest batch in it.

    The module checks the hyper-parameters; a source built directly takes any positive counts (batches
    are split as evenly as ``torch.tensor_split`` does).

    Args:
        envs: the vector env (on the policy's device).
        policy: a :class:`~rl_lightning.nets.PolicyNetwork` (anything with
            ``sample(obs, generator) -> (actions, logprobs)``).
        num_steps: steps per env per rollout.
        num_batches: batches per rollout (split along envs).
        rollout_use_count: how many times each rollout's batches are yielded.
        rollouts_per_epoch: rollouts per ``__iter__``.
        full_reset: reset every env at the start of each rollout (so each env's first
            episode starts at step 0 and the first-episode return is a real episode return).
        seed: seed of the action-sampling generator.
        world_size: processes each running their own source (``env_steps`` counts them all).
        env_steps: env steps already taken (a resumed run).
        compiled: ``RLModule.compiled``: with ``compile`` on, the acting steps (:func:`policy_step`: forward pass
            and sampling on random numbers drawn beforehand from the source's generator, the same stream as eager
            sampling; a categorical or Gaussian head only, others act eagerly) run compiled: with the env's steps
            where those are one compiled function (``envs.fuses_step``), :attr:`fused_steps_per_call` steps of
            acting, env and storing per call (:meth:`_play_fused`, on any device); else on CUDA alone
            (``compiled_acting_devices``). None: eager.
    """

    #: Whether the rollout keeps every step's ``info["final_observation"]`` (a critic bootstraps from it).
    keeps_final_observations = False
    #: Device types on which ``compile`` compiles the acting step alone, where the env's step is not one compiled
    #: function. Not the CPU: there a compiled call's fixed cost (guards, the wrapper, the extern matmuls, ~100 us)
    #: is what fusing a small policy's ~20 ops saves, and a CartPole rollout (32 envs x 32 steps) took 8.9-10.2 ms
    #: compiled vs 7.3-8.4 ms eager; on CUDA the step is launch-bound, and fusing its elementwise kernels cuts
    #: launches.
    compiled_acting_devices: ClassVar[tuple[str, ...]] = ("cuda",)
    #: Whether ``compile`` fuses the acting steps with the env's where the env's step is one compiled function
    #: (``envs.fuses_step``, on any device): :attr:`fused_steps_per_call` collection steps (policy forward,
    #: sampling, env step, storing) as one compiled function (``data._fused_collection.fused_collection_steps``).
    fuses_acting_with_env: ClassVar[bool] = True
    #: The most collection steps one fused call covers (the largest divisor of ``num_steps`` up to it): one call's
    #: fixed cost is shared by them, and compilation grows with them. Measured on the 2-core CPU, PPO's CartPole
    #: rollout (32 envs x 32 steps): 5.1 ms a rollout at 1 step a call (6.5 s to compile), 3.4 ms at 4 (12.6 s),
    #: 2.7 ms at 32 (79 s); eager 8-10 ms.
    fused_steps_per_call: ClassVar[int] = 4

    def __init__(
        self,
        envs: VectorEnv,
        policy: nn.Module,
        num_steps: int,
        num_batches: int = 1,
        rollout_use_count: int = 1,
        rollouts_per_epoch: int = 1,
        full_reset: bool = True,
        seed: int = 0,
        world_size: int = 1,
        env_steps: int = 0,
        compiled: CompiledFunctions | None = None,
    ):
        super().__init__(envs, seed=seed, world_size=world_size, env_steps=env_steps)
        self.policy = policy
        self.compiled = compiled
        self.rollout = Rollout(num_steps)
        self.num_steps = num_steps
        self.num_batches = num_batches
        self.rollout_use_count = rollout_use_count
        self.rollouts_per_epoch = rollouts_per_epoch
        self.full_reset = full_reset
        #: Number of rollouts collected so far.
        self.num_rollouts = 0
        #: The newest rollout and where training is in it (None before the first).
        self.collection: RolloutCollection | None = None
        # Whether the obs to act on next starts an episode (a recurrent policy zeroes its state there).
        self._episode_start = torch.ones(envs.num_envs, dtype=torch.bool, device=self.device)
        #: Whether the envs give the game's own score (the Atari preset): episodes are then counted per step.
        self._game_steps = False

    def __len__(self) -> int:
        return self.rollouts_per_epoch * self.batches_per_rollout

    @property
    def batches_per_rollout(self) -> int:
        return self.num_batches * self.rollout_use_count

    def reset_envs(self) -> Tensor:
        self._episode_start = torch.ones_like(self._episode_start)
        return super().reset_envs()

    def state_dict(self) -> dict[str, Any]:
        # Mid-rollout (a checkpoint between two of its batches) the collection is saved too.
        collection = self.collection
        mid_rollout = collection is not None and 0 <= collection.position < self.batches_per_rollout - 1
        return {
            **super().state_dict(),
            "num_rollouts": self.num_rollouts,
            "episode_start": self._episode_start.clone(),
            "collection": collection.state_dict() if mid_rollout else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "collection" not in state:
            state = _state_before_the_rollout_record(state, self._episode_start)
        super().load_state_dict(state)
        self.num_rollouts = state["num_rollouts"]
        self._episode_start = state["episode_start"].to(self.device)
        collection = state["collection"]
        self.collection = None if collection is None else RolloutCollection.from_state_dict(collection, self.device)

    def next_batch(self) -> Any:
        collection = self.collection
        if collection is None or collection.position + 1 >= self.batches_per_rollout:
            collection = self.collect()
        collection.position += 1
        return self._batch(collection)

    def skip_rest_of_rollout(self) -> int:
        """Drop the newest rollout's remaining batches (PPO's ``target_kl``): the stream's next batch is the first
        of a new rollout. Returns how many were dropped."""
        collection = self.collection
        if collection is None:
            return 0
        skipped = max(self.batches_per_rollout - 1 - collection.position, 0)
        collection.position = max(collection.position, self.batches_per_rollout - 1)
        return skipped

    def _batch(self, collection: RolloutCollection) -> RolloutTensors:
        """The training batch at ``collection.position``: a slice of envs (views)."""
        # Batch i of k over n envs, as torch.tensor_split cuts them (equal where k divides n).
        index = collection.position % self.num_batches
        size, larger = divmod(self.envs.num_envs, self.num_batches)
        start = index * size + min(index, larger)
        return collection.rollout.select_envs(slice(start, start + size + (index < larger)))

    def collect(self, played: bool = False) -> RolloutCollection:
        """Collect a rollout with the current policy (``played``: it is in ``self.rollout``) and prepare it for
        training: the new ``collection``."""
        self.collection = self._prepare(self._collect_rollout(played))
        return self.collection

    def _prepare(self, rollout: RolloutTensors) -> RolloutCollection:
        """What training needs of a rollout (VPG: the rollout itself)."""
        return RolloutCollection(rollout)

    def _collect_rollout(self, played: bool = False) -> RolloutTensors:
        """Step every env ``num_steps`` times with actions sampled from the current policy (``played``: they were,
        into ``self.rollout``, by ``data._fused_collection.play_fused_together`` with other seeds' sources)."""
        if not played:
            snapshot = self.rollout_snapshot()
            self.env_steps_before_batch = self.env_steps
            try:
                self._play()
            except SIGTERMException:  # heard in the middle of the rollout: back to its start
                self.restore_snapshot(snapshot)
                raise
        self.count(self.num_steps)
        self.num_rollouts += 1
        # Stacked outside inference mode, so the rollout is an ordinary tensor that the loss
        # can feed through the policy with autograd.
        rollout = self.rollout.get()
        if not self._game_steps:  # else counted step by step, of the game's own score (game_steps)
            self.episodes.update(rollout.rewards, rollout.dones)  # once per rollout, not per step
        return rollout

    @torch.inference_mode()  # ~15% less per-op overhead than no_grad for these tiny ops
    def _play(self) -> None:
        """Every on-policy source's collection: ``num_steps`` steps into ``self.rollout``, fused or eagerly."""
        obs = self.reset_envs() if self.full_reset else self.obs
        self.rollout.reset()
        was_training = self.policy.training
        self.policy.eval()
        try:
            play = self._play_fused if self._fused_collection else self._play_eagerly
            self._obs, self._episode_start = play(obs, self._episode_start)
        finally:
            self.policy.train(was_training)

    def _play_eagerly(self, obs: Tensor, episode_start: Tensor) -> tuple[Tensor, Tensor]:
        """The collection loop, a step at a time. Returns the next obs and which of them start an episode."""
        act, step, add_step = self._act, self.envs.step, self.rollout.add_step
        keep_final = self.keeps_final_observations
        for t in range(self.num_steps):
            actions, logprobs, values = act(obs, episode_start)
            next_obs, rewards, terminated, truncated, info = step(actions)
            final_obs = info["final_observation"] if keep_final else None
            add_step(obs, actions, logprobs, rewards, terminated, truncated, values, final_obs)
            if GAME_REWARD_KEY in info:
                self._game_steps = True
                self.episodes.update(*game_steps(rewards, terminated | truncated, info))
            # The envs auto-reset on either flag: the next obs starts an episode.
            obs, episode_start = next_obs, terminated | truncated
            if self.stop_requested_in_rollout(t):
                raise SIGTERMException()
        return obs, episode_start

    def _act(self, obs: Tensor, episode_start: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
        """One step of the policy on ``obs``: actions, their log-probabilities and the values (None without
        a critic). ``episode_start`` ``(num_envs,)`` says which obs start an episode."""
        if self._compiled_acting:
            actions, logprobs = self.compiled(policy_step)(self.policy, obs, self._draw_noise())
        else:
            actions, logprobs = self.policy.sample(obs, self.generator)
        return actions, logprobs, None

    def _play_fused(self, obs: Tensor, episode_start: Tensor) -> tuple[Tensor, Tensor]:
        """The collection loop where the env's step is one compiled function: :attr:`fused_steps_per_call` steps
        (acting, the env's step, storing) per call of one compiled function
        (``data._fused_collection.fused_collection_steps``). Returns the next obs and which of them start an
        episode (``episode_start``: the first obs's, which a feed-forward policy does not read)."""
        del episode_start
        envs, add_step, keep_final = self.envs, self.rollout.add_step, self.keeps_final_observations
        count = max(d for d in range(1, self.fused_steps_per_call + 1) if self.num_steps % d == 0)
        act, act_arguments = self._fused_acting()
        for first in range(0, self.num_steps, count):
            env_step, env_arguments, carry, reset_draws = envs.fused_steps_arguments(count)
            noises = self._draw_noise(count)
            name = f"fused_collection_{act.__name__}_{env_step.__name__}"
            collect = self.compiled.own_copy(fused_collection_steps, name)
            carry, obs, steps = collect(act, act_arguments, env_step, env_arguments, carry, obs, noises, reset_draws)
            envs.finish_fused_steps(carry, count)
            acted_on, actions, logprobs, rewards, terminated, truncated, values, final_obs = steps
            terminated, truncated = terminated.bool(), truncated.bool()
            for t in range(count):
                value, final = None if values is None else values[t], final_obs[t] if keep_final else None
                add_step(acted_on[t], actions[t], logprobs[t], rewards[t], terminated[t], truncated[t], value, final)
            if any(self.stop_requested_in_rollout(t) for t in range(first, first + count)):
                raise SIGTERMException()
        return obs, terminated[-1] | truncated[-1]

    def _fused_acting(self) -> tuple[Callable[..., tuple[Tensor, Tensor, Tensor | None]], tuple[Any, ...]]:
        """The acting step the fused collection calls, ``act(*arguments, obs, noise)``, and its arguments."""
        return policy_acting, (self.policy,)

    @cached_property
    def _fused_collection(self) -> bool:
        """Whether the collection steps run fused (:meth:`_play_fused`): ``compile`` is on, the head's random numbers
        can be drawn ahead and the env's step is one compiled function (a native env with ``compile``)."""
        return (
            self.fuses_acting_with_env
            and self._compiles_acting
            and replays_sampling(self._policy_head)
            and bool(getattr(self.envs, "fuses_step", False))
        )

    @property
    def _policy_head(self) -> nn.Module | None:
        """The head whose sampling a compiled step replays (None: acting stays eager)."""
        return self.policy.head if isinstance(self.policy, PolicyNetwork) else None

    @property
    def _compiles_acting(self) -> bool:
        return self.compiled is not None and self.compiled.enabled

    @cached_property
    def _compiled_acting(self) -> bool:
        """Whether acting alone runs compiled (the env's step apart): ``compile`` is on, on a device of
        ``compiled_acting_devices``, and the head's random numbers can be drawn ahead."""
        return (
            self._compiles_acting
            and self.device.type in self.compiled_acting_devices
            and replays_sampling(self._policy_head)
        )

    def _draw_noise(self, count: int | None = None) -> Tensor | list[Tensor]:
        """The random numbers the policy head's ``sample`` would draw for one step of every env (``count``: for
        each of that many steps, a list), from the source's generator (drawn outside the compiled function: a
        ``torch.Generator`` cannot be traced)."""
        draw, shape = _noise_draw(self._policy_head)
        size, generator, device = (self.envs.num_envs, *shape), self.generator, self.device
        if count is None:
            return draw(size, generator=generator, device=device)
        return [draw(size, generator=generator, device=device) for _ in range(count)]


def policy_step(policy: nn.Module, obs: Tensor, noise: Tensor) -> tuple[Tensor, Tensor]:
    """One acting step of a ``PolicyNetwork`` as a pure function (compiled with ``compile``): actions and
    their log-probabilities for ``obs`` ``(num_envs, *obs_shape)`` from the drawn ``noise``."""
    return policy.head.sample(policy(obs), noise=noise)


def policy_acting(policy: nn.Module, obs: Tensor, noise: Tensor) -> tuple[Tensor, Tensor, None]:
    """:func:`policy_step` as the fused collection's acting step: actions, log-probabilities and no values."""
    actions, logprobs = policy_step(policy, obs, noise)
    return actions, logprobs, None


def _state_before_the_rollout_record(state: dict[str, Any], episode_start: Tensor) -> dict[str, Any]:
    """A source state saved before the rollout record (``rollout`` / ``entries`` in place of
    ``collection``) in today's layout; one saved in the middle of a rollout cannot be resumed."""
    if state.get("rollout") is not None or state.get("entries") is not None:
        raise ValueError(
            "this checkpoint was saved in the middle of a rollout by an earlier rl_lightning, whose pending "
            "batches this version cannot read: resume from a checkpoint saved at the end of an epoch, or load "
            "only the weights (load_from_checkpoint)"
        )
    # "starts" (actor-critics) meant what episode_start means; VPG kept none (and needs none).
    starts = state.get("starts", torch.ones_like(episode_start))
    return {**state, "episode_start": starts, "collection": None}
