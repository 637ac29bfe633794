"""The off-policy layer that DQN, SAC and TD3 share (SB3's ``OffPolicyAlgorithm``), in Lightning.

    warm-up:   learning_starts env steps of uniformly random actions into the replay buffer (the first pull)
    training step: updates_per_step x
        batch = next(dataloader_iter)   the ReplaySource: where a collection is due, train_freq vectorised env
                                        steps with explore(obs) (the weights the previous update left) stored in
                                        the buffer; then batch_size transitions sampled (n-step sums with
                                        n_step > 1; gradient_steps samples per collection)
        update(batch)                   callbacks' on_update_start, update_loss (the algorithm's loss),
                                        optimize (one optimizer step), on_update_end (TargetNetworkSync, schedules)

The loop is ``RLModule.training_step``'s plain one (the layer adds no step to it: collecting, storing and sampling
are the source's, as the design card has it), in the same order and from the same random streams whatever
``updates_per_step``, so Lightning's fixed cost per training step is paid once per ``updates_per_step`` updates.

An algorithm on this layer is its networks, ``explore(obs, generator)``, ``update_loss`` and
``target_network_pairs``: the buffer, the source, the clock in env steps and training steps, ``tau``, and the
checkpointed state (buffer, generators) live here. Every algorithm uses one optimizer (SAC's actor,
critics and temperature as three parameter groups, TorchRL's pattern: each loss term reaches only its
own parameters), so ``global_step``, ``max_steps``, gradient clipping and the NaN guard count and cover
updates for all of them.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import torch
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch import Tensor

from rl_lightning._checks import SettingsError, check_bool, check_float, check_int, check_str, check_unused
from rl_lightning.algos.base import RLModule
from rl_lightning.callbacks.schedule import linear_schedule, planned_updates
from rl_lightning.checkpoints import gather_over_ranks
from rl_lightning.data.her import HERSettings, check_goal_space, check_her_settings
from rl_lightning.data.replay import ReplayBufferSamples, ReplaySource, check_buffer_settings
from rl_lightning.deprecations import keyword_only
from rl_lightning.envs.base import VectorEnv
from rl_lightning.seeding import derive_seed


def check_warmup_settings(
    learning_starts: int, num_envs: int, n_step: int, train_freq: int, world_size: int = 1
) -> None:
    """The first update samples n-step chains: the warm-up and the first collection must leave more than
    ``(n_step - 1) * num_envs`` transitions in each process's buffer, i.e. at least ``n_step`` vectorised
    steps (``ceil(learning_starts / (num_envs * world_size))`` random ones, then ``train_freq``)."""
    missing = n_step - train_freq  # vectorised warm-up steps the first sample needs
    if missing <= 0:
        return
    per_vector_step = num_envs * world_size
    smallest = (missing - 1) * per_vector_step + 1
    if learning_starts < smallest:
        processes = f" and {world_size} processes" if world_size > 1 else ""
        raise SettingsError(
            f"learning_starts ({learning_starts}) is too small for n_step={n_step}: with num_envs={num_envs}"
            f"{processes} and train_freq={train_freq}, the first update would sample {n_step}-step chains from a "
            f"buffer holding {math.ceil(learning_starts / per_vector_step) + train_freq} of the {n_step} steps per "
            f"env they need; use learning_starts >= {smallest}, a smaller n_step, or train_freq >= {n_step}"
        )


@dataclass(frozen=True)
class ReplaySettings:
    """The layer's settings (``OffPolicyModule.replay``), kept by the layer itself: a subclass's
    hyper-parameters need not repeat them."""

    buffer_size: int
    batch_size: int
    learning_starts: int
    train_freq: int
    gradient_steps: int
    steps_per_epoch: int
    gamma: float
    n_step: int
    checkpoint_buffer: bool
    frame_replay: bool | None = None
    updates_per_step: int = 10
    prioritized: bool = False
    prioritized_alpha: float = 0.6
    prioritized_beta: float = 0.4
    her: dict[str, Any] | None = None  # HERSettings.as_dict(): plain values
    initial_dataset: str | None = None  # a dataset path or Minari id, in the buffer before the warm-up


class OffPolicyModule(RLModule):
    """Base of the replay-buffer algorithms (``DQNModule``, ``SACModule``, ``TD3Module``).

    Args:
        env_id: a native env id or any gymnasium id.
        num_envs: envs stepped in lock-step per process.
        seed: network init (the same on every rank), envs (rank r: ``seed + r * num_envs``), exploration,
            replay sampling and the updates' own randomness (named streams, ``rl_lightning.seeding``).
        env_backend: ``"auto"``, ``"torch"``, ``"gymnasium"``, ``"envpool"``, ``"ale_vector"`` or ``"ray"``
            (``make_envs``).
        env_kwargs: for gymnasium envs.
        buffer_size: replay capacity in transitions (per process).
        batch_size: transitions per update.
        learning_starts: env steps (all processes) of uniformly random actions before the first update.
        train_freq: vectorised env steps per collection.
        gradient_steps: updates (training steps) per collection: the update-to-data ratio is
            ``gradient_steps / (train_freq * num_envs)``.
        steps_per_epoch: updates per epoch (evaluation and checkpoint callbacks run at epoch ends).
        gamma: discount factor in [0, 1].
        n_step: rewards summed per TD target (1: one-step TD): cut at an episode's end, a truncated
            episode bootstrapping from its true final observation, a terminated one from zero.
        checkpoint_buffer: save the replay buffer in checkpoints (exact resume); without it a resumed
            run refills ``learning_starts`` random transitions.
        compile: the update functions through ``torch.compile`` (``rl_lightning.compiling``).
        frame_replay: store each frame of a frame-stack observation once (``FrameStackReplayBuffer``: 1M
            Atari transitions in ~6.7 GiB, not ~53 GiB); None: wherever the observation is a frame stack;
            False: the plain ``ReplayBuffer`` (obs and next_obs whole).
        updates_per_step: updates (each with the collection before it, where one is due) per Lightning
            training step: the same updates, env steps and random draws whatever its value; larger pays
            Lightning's per-step cost (~0.35 ms) less often. ``global_step`` and ``max_steps`` count updates.
        prioritized: prioritized experience replay (Schaul et al. 2016, ``rl_lightning.data.prioritized``): sample
            transitions in proportion to ``(|TD error| + 1e-6)^prioritized_alpha`` (new ones at the largest priority
            so far), weight each sample's TD loss by its importance weight, and set the sampled transitions'
            priorities from their TD errors after each update. For algorithms whose loss takes the weights
            (``supports_prioritized``: DQN, SAC, TD3).
        prioritized_alpha: how much the priorities count, in [0, 1] (0: uniform sampling); like
            ``prioritized_beta``, refused unless ``prioritized=True`` (or left at its default).
        prioritized_beta: the importance weights' exponent at the start, in [0, 1], annealed linearly to 1 over
            the run's env steps (1: the weights undo the sampling's bias fully).
        tau: the target networks' update weight in (0, 1] (``TargetNetworkSync``: 1 copies, smaller values
            Polyak-average); None: the algorithm has none.
        her: hindsight experience replay for goal-conditioned envs (``rl_lightning.data.her``): a ``HERSettings`` or
            a dict of its fields (``{"strategy": "future", "k": 4}``): ``k / (k + 1)`` of each batch relabelled at
            sample time with a goal the same episode achieved, its reward (and termination) recomputed by the env's
            ``compute_reward`` (``compute_terminated``). Needs Dict observations with ``"achieved_goal"`` and
            ``"desired_goal"`` keys, n_step=1 and uniform replay. None: no relabelling.
        initial_dataset: offline-to-online: a dataset (a path: a Minari dataset's folder, ``.npz``, ``.h5``; or a
            Minari dataset id) put in the replay buffer when the run's source is built, before the ``learning_starts``
            random warm-up (``rl_lightning.data.offline.fill_replay_buffer``: the newest ``buffer_size`` transitions);
            online collection then continues as usual. A resumed run takes the buffer from its checkpoint and does not
            add the dataset again (without ``checkpoint_buffer``, the dataset is all its buffer starts from). Not with
            ``her`` nor ``frame_replay=True``. None: an empty buffer.
    """

    #: Whether the algorithm's loss takes prioritized replay's importance weights and reports its TD errors
    #: (``prioritized=True``).
    supports_prioritized: ClassVar[bool] = False

    @keyword_only
    def __init__(
        self,
        *,
        env_id: str,
        num_envs: int,
        seed: int,
        env_backend: str,
        env_kwargs: dict[str, Any] | None,
        buffer_size: int,
        batch_size: int,
        learning_starts: int,
        train_freq: int,
        gradient_steps: int,
        steps_per_epoch: int,
        gamma: float,
        n_step: int,
        checkpoint_buffer: bool,
        compile: bool | dict[str, Any] = False,
        frame_replay: bool | None = None,
        updates_per_step: int = 10,
        prioritized: bool = False,
        prioritized_alpha: float = 0.6,
        prioritized_beta: float = 0.4,
        tau: float | None = None,
        num_seeds: int = 1,
        her: HERSettings | dict[str, Any] | None = None,
        initial_dataset: str | None = None,
    ):
        values = locals()
        super().__init__(env_id, num_envs, seed, env_backend, env_kwargs, compile, num_seeds)
        her_settings = HERSettings.of(her)
        if her_settings is not None:
            check_her_settings(n_step, frame_replay, prioritized)
            check_goal_space(self.observation_space, env_id)
        check_int("updates_per_step", updates_per_step, 1)
        if frame_replay is not None:
            check_bool("frame_replay", frame_replay)
        check_buffer_settings(buffer_size, num_envs, n_step, gamma)
        check_int("batch_size", batch_size, 1)
        check_int("learning_starts", learning_starts, 0)
        if learning_starts > buffer_size:
            raise ValueError(
                f"learning_starts ({learning_starts}) must be <= buffer_size ({buffer_size}): a longer random "
                "warm-up would only overwrite itself in the buffer"
            )
        check_int("train_freq", train_freq, 1)
        check_int("gradient_steps", gradient_steps, 1)
        check_int("steps_per_epoch", steps_per_epoch, 1)
        check_bool("checkpoint_buffer", checkpoint_buffer)
        check_warmup_settings(learning_starts, num_envs, n_step, train_freq)
        check_bool("prioritized", prioritized)
        # [0, 1] as in the paper: alpha 100 samples the one largest priority over and over, with weights ~1e-37.
        check_float("prioritized_alpha", prioritized_alpha, 0.0, 1.0)
        check_float("prioritized_beta", prioritized_beta, 0.0, 1.0)
        if tau is not None:
            check_float("tau", tau, 0.0, 1.0, low_open=True)
        if not prioritized:
            for name, value in (("prioritized_alpha", prioritized_alpha), ("prioritized_beta", prioritized_beta)):
                check_unused(name, value, self._default(name), "prioritized is False", "set prioritized=True")
        if prioritized and not self.supports_prioritized:
            raise ValueError(
                f"prioritized=True: {type(self).__name__}'s loss does not take importance weights nor report TD errors "
                "(DQNModule, SACModule and TD3Module do; an algorithm on the off-policy layer that does sets "
                "supports_prioritized = True): use prioritized=False"
            )
        if initial_dataset is not None:
            check_str("initial_dataset", initial_dataset)
            if her_settings is not None or frame_replay:
                raise ValueError(
                    f"initial_dataset={initial_dataset!r} fills a plain replay buffer with whole observations: not "
                    "with her (Dict observations) nor frame_replay=True (single frames); drop one of them"
                )
        self._num_envs = num_envs
        #: The replay settings of the layer.
        values["her"] = None if her_settings is None else her_settings.as_dict()
        self.replay = ReplaySettings(**{f.name: values[f.name] for f in fields(ReplaySettings)})
        self._update_generator: torch.Generator | None = None
        self._update_generator_state: Tensor | None = None  # from a checkpoint, until the generator exists
        self._run_env_steps: float | None = None  # the run's planned env steps (prioritized_beta's schedule)

    def save_hyperparameters(self, *args: Any, frame: Any = None, **kwargs: Any) -> None:
        """Lightning's, with ``her`` as plain values (a dict, not ``HERSettings``): checkpoints load with
        ``weights_only`` and the Hub's config is JSON."""
        current = inspect.currentframe()
        super().save_hyperparameters(*args, frame=frame or (current.f_back if current else None), **kwargs)
        if self.hparams.get("her") is not None:
            self.hparams["her"] = self._hparams_initial["her"] = self.replay.her

    @classmethod
    def _default(cls, name: str) -> Any:
        """The default of the layer's setting ``name`` in the algorithm's signature (the layer's where it has none)."""
        parameter = inspect.signature(cls.__init__).parameters.get(name)
        if parameter is not None and parameter.default is not inspect.Parameter.empty:
            return parameter.default
        return ReplaySettings.__dataclass_fields__[name].default

    @classmethod
    def layer_arguments(cls, values: dict[str, Any]) -> dict[str, Any]:
        """The layer's own arguments among an algorithm's constructor arguments ``values`` (its ``locals()``), for
        ``super().__init__(**OffPolicyModule.layer_arguments(locals()))``: an algorithm does not repeat the list."""
        names = inspect.signature(OffPolicyModule.__init__).parameters
        return {name: values[name] for name in names if name != "self" and name in values}

    # -- what an algorithm provides ----------------------------------------------------------------

    def explore(self, obs: Tensor, generator: torch.Generator) -> Tensor:
        """The behaviour policy: actions for ``(num_envs, *obs_shape)`` observations, its randomness
        drawn from ``generator`` (the source's, saved in checkpoints)."""
        raise NotImplementedError

    def target_network_pairs(self) -> list[tuple[torch.nn.Module, torch.nn.Module]]:
        """``(target, online)`` pairs for ``TargetNetworkSync``."""
        raise NotImplementedError

    def polyak_parameters(self) -> tuple[list[Tensor], list[Tensor]] | None:
        """The target and online parameters of ``target_network_pairs()``, in order, for a compiled whole update
        that moves the targets itself (``compile=True``); None where a target has buffers (they
        are copied, not averaged: ``update_target_network``'s work)."""
        pairs = self.target_network_pairs()
        if any(next(target.buffers(), None) is not None for target, _ in pairs):
            return None
        return [p for target, _ in pairs for p in target.parameters()], [
            p for _, online in pairs for p in online.parameters()
        ]

    # -- the source, the clock ------------------------------------------------------------------------

    def make_source(self, envs: VectorEnv) -> ReplaySource:
        replay = self.replay
        # Under DDP each process plays its share of learning_starts: fewer steps of its own.
        check_warmup_settings(replay.learning_starts, self._num_envs, replay.n_step, replay.train_freq, self.world_size)
        source = ReplaySource(
            envs,
            self.explore,
            buffer_size=replay.buffer_size,
            batch_size=replay.batch_size,
            learning_starts=replay.learning_starts,
            train_freq=replay.train_freq,
            gradient_steps=replay.gradient_steps,
            num_batches=replay.steps_per_epoch,
            buffer_seed=derive_seed(self.hparams.seed, "replay", self.global_rank),
            n_step=replay.n_step,
            gamma=replay.gamma,
            checkpoint_buffer=replay.checkpoint_buffer,
            frame_replay=replay.frame_replay,
            prioritized=replay.prioritized,
            prioritized_alpha=replay.prioritized_alpha,
            prioritized_beta=self.prioritized_beta_at,
            her=HERSettings.of(replay.her),
        )
        if replay.initial_dataset is not None and not self._restores_buffer():
            self._add_initial_dataset(source.buffer)
        return source

    def _restores_buffer(self) -> bool:
        """Whether this source is about to be restored with a checkpoint's replay buffer (``build_source`` restores
        it after ``make_source``)."""
        states = self._restored_sources
        rank = self.global_rank
        state = states[rank] if states is not None and rank < len(states) else None
        return isinstance(state, dict) and state.get("buffer") is not None

    def _add_initial_dataset(self, buffer: Any) -> None:
        """``initial_dataset``'s transitions into ``buffer`` (checked against the env's spaces first)."""
        from rl_lightning.data.offline import fill_replay_buffer, load_transitions

        transitions = load_transitions(self.replay.initial_dataset)[0]
        transitions.check_against((self.observation_space, self.action_space))
        count = fill_replay_buffer(buffer, transitions)
        rank_zero_info(f"initial_dataset: {count:,} transitions of {self.replay.initial_dataset} in the replay buffer")

    @property
    def training_steps_per_collection(self) -> int:
        return self.replay.gradient_steps

    @property
    def updates_per_training_step(self) -> int:  # type: ignore[override]
        return self.replay.updates_per_step

    @property
    def env_steps_per_training_step(self) -> float:
        return self._num_envs * self.replay.train_freq * self.world_size / self.replay.gradient_steps

    def warmup_env_steps(self) -> int:
        """``learning_starts`` rounded up to whole vectorised steps of every process."""
        per_vector_step = self._num_envs * self.world_size
        return math.ceil(self.replay.learning_starts / per_vector_step) * per_vector_step

    # -- prioritized replay -----------------------------------------------------------------------

    def prioritized_beta_at(self, env_steps: int) -> float:
        """The importance weights' exponent after ``env_steps`` env steps: linear from ``prioritized_beta`` to 1 over
        the run's planned env steps (``prioritized_beta`` before a run's length is known). Read at each sample, from
        the source's env steps: a resumed run draws the same weights without saving them."""
        start = self.replay.prioritized_beta
        if self._run_env_steps is None:
            return start
        return linear_schedule(start, 1.0, 1.0, env_steps / self._run_env_steps)

    def update_priorities(self, batch: ReplayBufferSamples, td_errors: Tensor) -> None:
        """Set the priorities of ``batch``'s transitions from their TD errors ``(batch,)`` (nothing for a uniform
        batch, or a batch given by hand without the source's buffer)."""
        if self.source is None:
            return
        if self.num_seeds > 1:  # each seed's batch, TD errors (num_seeds, batch) and buffer
            for source, part, errors in zip(self.source.sources, batch, td_errors, strict=True):
                if part.indices is not None:
                    source.buffer.update_priorities(part.indices, errors)
        elif batch.indices is not None:
            self.source.buffer.update_priorities(batch.indices, td_errors)

    def prioritized_metrics(self, batch: ReplayBufferSamples) -> dict[str, Tensor | float]:
        """The charts of prioritized replay for a sampled batch (none for a uniform one)."""
        parts = list(batch) if self.num_seeds > 1 else [batch]
        if parts[0].weights is None:
            return {}
        weights = [part.weights.mean() for part in parts]
        return {
            "charts/prioritized_beta": self.prioritized_beta_at(self.env_steps),
            "charts/importance_weights": weights[0] if self.num_seeds == 1 else torch.stack(weights),
        }

    def on_train_start(self) -> None:
        super().on_train_start()
        if self.replay.prioritized:
            trainer = self.trainer
            updates = planned_updates(trainer, self)
            if not math.isfinite(updates):
                raise SettingsError(
                    "prioritized=True anneals prioritized_beta to 1 over the run, whose length is unknown: set "
                    "Trainer(max_steps=...) or max_epochs"
                )
            self._run_env_steps = float(self.planned_env_steps(int(updates)))
            for member in self.seed_modules()[1:]:  # each seed's source reads its own module's schedule
                member._run_env_steps = self._run_env_steps

    def discounts(self, batch: ReplayBufferSamples) -> float | Tensor:
        """The bootstrap's discount of each sample: ``gamma``, or gamma^k of n-step samples."""
        return self.replay.gamma if batch.discounts is None else batch.discounts

    @property
    def update_generator(self) -> torch.Generator:
        """The updates' own random stream (SAC's action samples, TD3's target noise), on the module's
        device, seeded per rank and saved in checkpoints (every rank's)."""
        if self._update_generator is None or self._update_generator.device != self.device:
            seed = derive_seed(self.hparams.seed, "updates", self.global_rank)
            self._update_generator = torch.Generator(device=self.device).manual_seed(seed)
            if self._update_generator_state is not None:
                try:
                    self._update_generator.set_state(self._update_generator_state)
                except RuntimeError:  # saved on another kind of device: a fresh stream
                    rank_zero_warn(
                        "the checkpoint's update generator is from another device: it restarts from its seed"
                    )
                self._update_generator_state = None
        return self._update_generator

    # -- checkpoints ---------------------------------------------------------------------------------

    def extra_checkpoint_state(self) -> dict[str, Any]:
        generator = self._update_generator
        # Every rank's stream (Lightning writes rank 0's checkpoint; each rank restores its own).
        state = None if generator is None else generator.get_state()
        return {"update_generators": gather_over_ranks(state, self.world_size)}

    def load_extra_checkpoint_state(self, state: dict[str, Any]) -> None:
        states = state.get("update_generators") or []
        rank = self.global_rank if self._attached else 0
        self._update_generator = None
        self._update_generator_state = states[rank] if rank < len(states) else None
