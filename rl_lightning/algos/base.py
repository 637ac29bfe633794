"""The shared base of every algorithm: ``RLModule``.

It owns what is the same for all of them: the env's spaces and the training envs (built on the module's device,
rank r's seeded ``seed + r * num_envs``; ``_envs.py``), the env-step clock and the run's plan in env steps, the
charts, ``act``, export, greedy validation and test, the checkpoint payload (``_checkpointing.py``), and the pieces
of an update the layers' loops share: :meth:`RLModule.update` (the callbacks' per-update hooks around
``update_loss``) and :meth:`RLModule.optimize` (backward, clipping, step: the one place an optimizer steps). A
subclass implements ``make_source``, ``policy_actions``, ``greedy_policy``, ``env_steps_per_training_step`` and
``update_loss``; a layer (``OnPolicyModule``, ``OffPolicyModule``) owns the loop and sets
``updates_per_training_step``.

Lightning iterates the source (a torch ``IterableDataset``: rollouts' batches or replay samples) and a training
step pulls the batches of its updates from it (``training_step(self, dataloader_iter)``), each generated when
pulled, after the previous update. So ``global_step`` and ``max_steps`` count updates, and the per-update
callbacks act at the same updates and env steps as with one update per training step.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, ClassVar

import lightning as L
import torch
from torch import Tensor, nn

from rl_lightning._checks import check_choice, check_int, check_seed, check_str
from rl_lightning.algos import _envs, _run
from rl_lightning.algos._acting import Acting
from rl_lightning.algos._charts import Charts
from rl_lightning.algos._checkpointing import CheckpointPayload
from rl_lightning.algos._greedy_evaluation import GreedyEvaluation
from rl_lightning.algos._inputs import ObservationInputs, as_numpy, is_tensor_input
from rl_lightning.algos._seeds import SeedMembers, builds_seed_members, optimizes_every_seed
from rl_lightning.algos._sharing import PolicySharing
from rl_lightning.algos._update_loop import (
    adopt_training_step_as_update_loss,
    count_optimizer_steps,
    is_update_loop,
    updates_per_step_for,
)
from rl_lightning.callbacks.guard import RunGuard
from rl_lightning.checkpoints import StepInNames
from rl_lightning.compiling import CompiledFunctions, check_compile
from rl_lightning.data.rollout import RolloutTensors
from rl_lightning.data.seed_sources import latest_rollout_of
from rl_lightning.data.source import EnvSource, SourceLoader
from rl_lightning.deprecations import wrap_init
from rl_lightning.envs.base import VectorEnv
from rl_lightning.envs.registry import BACKENDS, is_native_env_id
from rl_lightning.envs.spaces import ACTION_MASK_KEY, ACTIVE_KEY, GLOBAL_STATE_KEY, observation_view
from rl_lightning.stopping import CollectiveStop

__all__ = ["RLModule", "as_numpy", "is_tensor_input"]


class RLModule(SeedMembers, Acting, PolicySharing, GreedyEvaluation, CheckpointPayload, L.LightningModule):
    """Base class of the algorithm modules (``VPGModule``, ``DQNModule``, ...).

    Args:
        env_id: a native env id (``rl_lightning.registered_env_ids()``) or any gymnasium id.
        num_envs: envs stepped in lock-step per process.
        seed: seeds everything: network init (the same on every rank), the envs (rank r's with
            ``seed + r * num_envs``) and the other named streams (``rl_lightning.seeding``).
        env_backend: ``"auto"`` (the native torch env where there is one, else gymnasium's through
            the adapter), ``"torch"``, ``"gymnasium"`` (the adapter even for a native id), ``"envpool"``,
            ``"ale_vector"`` (Atari and EnvPool's MuJoCo tasks in C++: ``EnvPoolVectorEnv``, ``AleVectorEnv``) or
            ``"ray"`` (gymnasium's envs stepped in Ray actors, ``RayVectorEnv``: the training, evaluation and
            video envs alike; each DDP rank its own workers).
        env_kwargs: passed to gymnasium envs (``make_envs``), e.g. ``{"vectorization_mode": "async"}``; for
            ``"ray"`` also ``num_workers``, ``envs_per_worker``, ``address``, ``num_cpus_per_worker``.
        compile: run the update functions through ``torch.compile`` (``rl_lightning.compiling``), and a
            native env's step too; a dict gives ``torch.compile``'s arguments (``{"mode": "max-autotune"}``), and
            the whole update is compiled (backward, clipping, Adam, Polyak; ``{"whole_update": False}``: the loss only).
        num_seeds: independent agents trained in lock-step, seeds ``seed .. seed + num_seeds - 1``, each equal to
            its one-seed run (``rl_lightning.algos._seeds``); this module is seed 0, ``seed_module(i)`` seed i.
    """

    #: Action spaces the algorithm can learn: "discrete", "box".
    action_kinds: ClassVar[tuple[str, ...]] = ("discrete", "box")
    #: Former names of hyper-parameters (``{"use_iw": "importance_weighting"}``): the constructor, the command
    #: lines and configs take them with a ``DeprecationWarning``, and a checkpoint saved with one loads with its value.
    renamed_hyperparameters: ClassVar[dict[str, str]] = {}
    #: Log the charts once per epoch (on-policy algorithms: an epoch is a rollout) instead of
    #: every ``Trainer(log_every_n_steps)`` optimizer steps.
    log_per_epoch: ClassVar[bool] = False
    #: The training step calls the callbacks' per-update hooks (``rl_lightning.callbacks.updates``).
    runs_update_hooks: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # The subclass's __init__ also takes the former names (rl_lightning.deprecations.wrap_init: the signature,
        # the hparams and an unknown keyword's TypeError stay the real ones).
        super().__init_subclass__(**kwargs)
        step = vars(cls).get("training_step")
        if step is not None and "update_loss" not in vars(cls) and not is_update_loop(step):
            loop = next(vars(klass)["training_step"] for klass in cls.__mro__[1:] if "training_step" in vars(klass))
            adopt_training_step_as_update_loss(cls, loop)
        if "__init__" in vars(cls):
            cls.__init__ = builds_seed_members(cls, vars(cls)["__init__"])
        if "configure_optimizers" in vars(cls):
            cls.configure_optimizers = optimizes_every_seed(vars(cls)["configure_optimizers"])
        if cls.renamed_hyperparameters and ("__init__" in vars(cls) or "renamed_hyperparameters" in vars(cls)):
            cls.__init__ = wrap_init(cls.__init__, cls.renamed_hyperparameters, cls.__name__)

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        seed: int,
        env_backend: str = "auto",
        env_kwargs: dict[str, Any] | None = None,
        compile: bool | dict[str, Any] = False,
        num_seeds: int = 1,
    ):
        super().__init__()
        check_str("env_id", env_id)
        check_int("num_envs", num_envs, 1)
        check_seed("seed", seed)
        #: Agents trained in lock-step (seed 0 is this module; ``seed_module``).
        self.num_seeds = check_int("num_seeds", num_seeds, 1)
        self._diverged_seeds: set[int] = set()
        self._seed_scores: dict[str, list[float]] = {}  # each seed's newest mean return ("eval", "train")
        check_choice("env_backend", env_backend, BACKENDS)
        if env_kwargs is not None and not isinstance(env_kwargs, dict):
            raise TypeError(f"env_kwargs must be a dict or None, got {type(env_kwargs).__name__}")
        self._env_options = {"backend": env_backend, **(env_kwargs or {})}
        self._gymnasium_env = env_backend in ("gymnasium", "ray") or (
            env_backend == "auto" and not is_native_env_id(env_id)
        )
        #: Whether ``make_envs(render=True)`` builds envs that render their own frames (gymnasium's, EnvPool's).
        self._renders_frames = self._gymnasium_env or env_backend in ("envpool", "pettingzoo")
        # A one-copy instance of the env gives its spaces (and checks env_id and the action space).
        spec_env = _envs.spec_env(self, env_id, num_envs, seed)
        self._env_class = type(spec_env)
        self.observation_space = spec_env.single_observation_space
        #: What the policy reads of the observation (``observation_views``): act, evaluation and exports take it.
        self.policy_observation_space = self.observation_space
        self.action_space = spec_env.single_action_space
        #: Agents per scene of a multi-agent env (its rows are ``num_envs * num_agents`` agents); 1 for the others.
        self.num_agents: int = getattr(spec_env, "num_agents", 1)
        if ACTIVE_KEY in getattr(self.observation_space, "spaces", {}) and not self.masks_absent_agents:
            raise ValueError(
                f"{env_id!r}'s agents can leave their scene before it ends (its observations' {ACTIVE_KEY!r} key), "
                f"and {type(self).__name__} does not mask absent agents out of its losses: use PPOModule"
            )
        self._inputs = ObservationInputs(spec_env, env_id)  # what act() takes
        self.obs_shape, self.obs_dtype = spec_env.obs_shape, spec_env.obs_dtype
        self.action_shape = spec_env.action_shape
        #: The data source, built in ``train_dataloader``.
        self.source: EnvSource | None = None
        self._start_env_steps = 0  # env steps before the source exists (from a checkpoint)
        self._stop = CollectiveStop()  # a SIGTERM every DDP rank agrees on
        self._restored_sources: list[dict[str, Any] | None] | None = None
        self._charts = Charts()
        #: ``compile``'s functions (``rl_lightning.compiling``).
        self.compiled = CompiledFunctions(check_compile(compile))
        # The update loop is the algorithm's (module docstring): Lightning's manual optimisation.
        self.automatic_optimization = False
        self._gradient_clipping: tuple[float, str] | None = None  # Trainer(gradient_clip_val=...), taken over
        self._update_callbacks: tuple[list[Any], list[Any]] = ([], [])  # (on_update_start, on_update_end) owners
        self._direct_steps = False  # step the optimizer without Lightning's manual path (_can_step_directly)
        self._step_updates = 1  # updates per training step in this run (updates_per_step_for)

    # -- what a subclass provides ----------------------------------------------------------

    def make_source(self, envs: VectorEnv) -> EnvSource:
        """The algorithm's data source over ``envs`` (the base then sets its seed, clock and world
        size: ``EnvSource.configure_run``)."""
        raise NotImplementedError

    def observation_views(self, actor_keys: Any, critic_keys: Any) -> tuple[Any, Any]:
        """The actor's and the critic's parts of a Dict observation (an asymmetric actor-critic: ``actor_keys`` /
        ``critic_keys``, None: every key; ``rl_lightning.envs.spaces.observation_view``). The actor's becomes
        ``policy_observation_space``: ``act``, ``evaluate_policy``, every export and the Hub folder's policy take
        only those keys, so a deployed policy never asks for the critic's privileged state. On a multi-agent env
        (``num_agents > 1``) None is every key but the scene's global ``"state"`` (and ``"active"``, which only
        weighs the losses): each agent acts on what it observes (decentralised execution), and the critic reads the
        same unless ``critic_keys`` says otherwise (IPPO; MAPPO's centralised critic is ``critic_keys=["state",
        "agent_id"]``)."""
        if self.num_agents > 1 and actor_keys is None:
            not_features = (GLOBAL_STATE_KEY, ACTION_MASK_KEY, ACTIVE_KEY)  # "active" only weighs the losses
            actor_keys = [key for key in self.observation_space.spaces if key not in not_features]
        if self.num_agents > 1 and critic_keys is None:
            critic_keys = [key for key in actor_keys if key != ACTION_MASK_KEY]
        actor = observation_view(self.observation_space, actor_keys, "actor_keys", policy=True)
        critic = observation_view(self.observation_space, critic_keys, "critic_keys")
        self.policy_observation_space = self._inputs.policy_space = actor
        return actor, critic

    def policy_actions(self, obs: Tensor, greedy: bool) -> Tensor:
        """Actions for ``obs`` ``(batch, *obs_shape)`` of the env's dtype on the module's device."""
        raise NotImplementedError

    @property
    def env_steps_per_training_step(self) -> float:
        """Env steps (all processes) collected per optimizer step, on average."""
        raise NotImplementedError

    def greedy_policy(self) -> nn.Module:
        """The greedy policy as a plain module, observations -> actions (a recurrent one also takes and
        returns its state; see ``rl_lightning.export``)."""
        raise NotImplementedError

    def warmup_env_steps(self) -> int:
        """Env steps (all processes) taken before the first optimizer step (random play)."""
        return 0

    def update_loss(self, batch: Any) -> Tensor:
        """One update's loss on ``batch`` (the source's next batch), differentiable w.r.t. the parameters the
        optimizer steps; logs its metrics (``log_metrics``). Called by :meth:`update`, in the layer's loop."""
        raise NotImplementedError

    #: Whether the losses leave out the rows of absent agents (a multi-agent env's ``"active"`` key): PPO's do.
    masks_absent_agents: ClassVar[bool] = False

    #: Updates one training step runs (a layer's setting): a rollout's (on-policy) or ``updates_per_step``.
    updates_per_training_step: int = 1

    def __setattr__(self, name: str, value: Any) -> None:
        # Lightning names the running hook in ``_current_fx_name`` around every hook it calls (44 times
        # per training step); nn.Module's __setattr__ costs ~2.4 us for it (it checks for parameters and
        # submodules), ~5% of a DQN update. The value is a str or None: a plain attribute.
        if name == "_current_fx_name":
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)

    # -- the env-step clock ------------------------------------------------------------------

    @property
    def _attached(self) -> bool:
        """Whether a Trainer runs the module (``training_step`` may also be called by hand)."""
        return self._trainer is not None

    @property
    def world_size(self) -> int:
        return self.trainer.world_size if self._attached else 1

    @property
    def env_steps(self) -> int:
        """Environment steps taken so far by all processes together."""
        return self.source.env_steps if self.source is not None else self._start_env_steps

    @property
    def env_steps_before_batch(self) -> int:
        """``env_steps`` before the data of the current training step was collected (a rollout's
        minibatches share its value): the clock of per-update schedules such as the LR's."""
        return self.source.env_steps_before_batch if self.source is not None else self._start_env_steps

    #: Training steps that share one collection of data (a rollout's batches; 1 for replay).
    training_steps_per_collection: int = 1

    def planned_env_steps(self, optimizer_steps: int) -> int:
        """Env steps (all processes) of a run of ``optimizer_steps`` optimizer steps, warm-up included
        (whole rollouts: a run that stops within one has collected all of it)."""
        per_collection = self.training_steps_per_collection
        collections = math.ceil(optimizer_steps / per_collection)
        return self.warmup_env_steps() + round(collections * per_collection * self.env_steps_per_training_step)

    def optimizer_steps_for(self, total_env_steps: int) -> int:
        """The fewest optimizer steps of a run that takes at least ``total_env_steps`` env steps (all
        processes, warm-up included, whole collections, at least one): the inverse of
        :meth:`planned_env_steps`, for budgets in env steps (SB3's ``total_timesteps``)."""
        check_int("total_env_steps", total_env_steps, 1)
        per_collection = self.training_steps_per_collection
        env_steps_per_collection = per_collection * self.env_steps_per_training_step
        collections = max(math.ceil((total_env_steps - self.warmup_env_steps()) / env_steps_per_collection), 1)
        return collections * per_collection

    @property
    def run_name(self) -> str:
        """What ran, as a log directory name: ``"PPO-CartPole-v1"`` (``ALE/Pong-v5`` -> ``ALE_Pong-v5``,
        ``my_envs:Corridor-v0`` -> ``my_envs_Corridor-v0``)."""
        algorithm = self.algorithm_name().removesuffix("Module")
        return f"{algorithm}-{self.hparams.env_id}".replace("/", "_").replace("\\", "_").replace(":", "_")

    # -- envs and data -------------------------------------------------------------------

    def make_envs(
        self, num_envs: int, seed: int, render: bool = False, compile: bool = False, workers: bool = False
    ) -> VectorEnv:
        """A fresh instance of the module's env with ``num_envs`` copies on its device; ``render``
        builds a gymnasium env able to ``render()`` its frames (native envs ``draw`` any obs); ``compile``
        runs a native env's dynamics through ``torch.compile`` (the training envs of ``compile=True``); ``workers``:
        in the Ray env workers of ``env_backend="ray"`` (the training envs). Other envs of a Ray run (evaluation,
        videos, the Hub card) are the same gymnasium env in this process: a few copies, no frames over the network,
        and a renderer that fails is a warning here, not a dead worker."""
        return _envs.module_envs(self, num_envs, seed, render, compile, workers)

    @property
    def compile_seconds(self) -> dict[str, float]:
        """Seconds ``compile`` spent compiling so far, per function (the updates, ``"env step"``: the training
        envs' dynamics); empty without ``compile``."""
        seconds = dict(self.compiled.compile_seconds)
        env_seconds = getattr(getattr(self.source, "envs", None), "compile_seconds", None)
        if env_seconds:
            seconds["env step"] = float(env_seconds)
        return seconds

    def latest_rollout(self) -> RolloutTensors | None:
        """The newest on-policy rollout of the training envs, as the envs gave it (None for off-policy
        algorithms, whose sources have no ``collection``); with ``num_seeds > 1`` the first env of each seed
        (``GridVideoLogger``: a cell per seed)."""
        return latest_rollout_of(getattr(self.source, "sources", [self.source]))

    def train_dataloader(self) -> SourceLoader:
        # A reload (Trainer(reload_dataloaders_every_n_epochs=...)) or a second fit keeps the
        # source: rebuilding it would reset the envs, the counters and any replay buffer.
        if self.source is None or self.source.device != self.device:
            self.source = self._build_source()
        per_step = self.updates_per_training_step
        self._step_updates = updates_per_step_for(self.trainer, per_step) if self._attached else per_step
        # Lightning iterates the source itself: one batch per update, generated when the training step pulls it.
        return SourceLoader(self.source)

    def _build_source(self) -> EnvSource:
        return _envs.build_source(self) if self.num_seeds == 1 else self.build_seed_sources(_envs.build_source)

    def _received_sigterm(self) -> bool:
        """Whether the run was asked to stop (under DDP agreed by every rank: ``rl_lightning.stopping``)."""
        return self._stop.requested(self.trainer) if self._attached else False

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        if self._stop.active:
            self._received_sigterm()  # every rank, every step: a request heard anywhere stops all at this step

    # -- the update loop (run_updates: the layer's) -----------------------------------------------------

    def training_step(self, dataloader_iter: Iterator[Any], batch_idx: int | None = None) -> Tensor | None:
        """This training step's updates (:meth:`run_updates`, the layer's loop); returns the last loss (detached).
        Called by hand with a data batch (``batch_idx`` ignored): that batch's loss (``update_loss``), no update."""
        if not isinstance(dataloader_iter, Iterator):
            return self.loss_of(dataloader_iter)
        loss = self.run_updates(dataloader_iter)
        self.end_training_step(dataloader_iter)
        return loss

    def run_updates(self, dataloader_iter: Iterator[Any]) -> Tensor | None:
        """``updates_in_this_step()`` x (pull the next batch: the source collects it then, with the weights the previous
        update left; :meth:`update`): the off-policy layer's loop; ``OnPolicyModule`` adds its ``target_kl`` break."""
        loss = None
        for _ in range(self.updates_in_this_step()):
            batch, _, _ = next(dataloader_iter)
            loss = self.update(batch)
        return loss

    def loss_of(self, batch: Any) -> Tensor:
        """``update_loss(batch)`` (inside a former-style ``training_step``'s ``super()`` call, its parent's)."""
        legacy = self.__dict__.get("_legacy_update_loss")
        return legacy(batch) if legacy is not None else self.update_loss(batch)

    def updates_in_this_step(self) -> int:
        """The updates this training step holds: up to the next multiple of ``updates_per_training_step`` within
        the epoch (a run resumed from a stop inside a training step finishes it), the epoch's end and
        ``max_steps``."""
        trainer = self.trainer
        done, per_epoch = trainer.global_step, len(self.source)
        in_epoch = done % per_epoch
        updates = min(self._step_updates - in_epoch % self._step_updates, per_epoch - in_epoch)
        return min(updates, trainer.max_steps - done) if trainer.max_steps >= 0 else updates

    def update(self, batch: Any) -> Tensor:
        """One update on ``batch``: the callbacks' ``on_update_start``, ``update_loss``, :meth:`optimize`, the
        callbacks' ``on_update_end`` (``rl_lightning.callbacks.updates``); returns the loss, detached."""
        trainer = self.trainer
        starts, ends = self._update_callbacks
        for callback in starts:
            callback.on_update_start(trainer, self)
        loss = self.optimize(self.update_loss(batch))
        for callback in ends:
            callback.on_update_end(trainer, self, loss)
        self._charts.flush(self)
        return loss

    def optimize(self, loss: Tensor) -> Tensor:
        """One optimizer step on ``loss``: zero the gradients, backward, clip (``on_before_optimizer_step``),
        step, and count it in ``global_step``; the only place an optimizer steps. Under
        ``compile={"whole_update": True}`` the compiled update stepped it already (inside ``update_loss``): here
        it is counted. Returns ``loss`` detached."""
        trainer = self.trainer
        if self.num_seeds > 1:  # each seed's loss: backward of their sum, each seed's gradients its own
            loss, reported = self.seed_loss(loss)
            self._step(loss, trainer)
            return reported
        return self._step(loss, trainer)

    def _step(self, loss: Tensor, trainer: L.Trainer) -> Tensor:
        if self.compiled.whole_update is not None:
            if loss.requires_grad:
                raise RuntimeError(
                    f"{type(self).__name__}.update_loss returned a loss with a gradient under "
                    "compile={'whole_update': True}: its loss function must go through self.compiled.update(...), "
                    "which steps the optimizer inside the compiled update"
                )
            count_optimizer_steps(trainer, 1)
        elif self._direct_steps:  # what Lightning's manual path does here, without its hook dispatch (_run)
            optimizer = self.optimizers().optimizer
            optimizer.zero_grad()
            loss.backward()
            self.on_before_optimizer_step(optimizer)
            optimizer.step()
            count_optimizer_steps(trainer, 1)
        else:
            optimizer = self.optimizers()
            optimizer.zero_grad()
            self.manual_backward(loss)
            optimizer.step()  # clips first: on_before_optimizer_step
        return loss.detach()

    def skip_updates(self, count: int) -> None:
        """Count ``count`` update slots as done without running them (PPO's ``target_kl``; at most what
        ``max_steps`` leaves), so ``max_steps`` and the run's env steps keep their plan."""
        trainer = self.trainer
        if trainer.max_steps >= 0:
            count = min(count, trainer.max_steps - trainer.global_step)
        if count > 0:
            count_optimizer_steps(trainer, count)

    def end_training_step(self, dataloader_iter: Iterator[Any]) -> None:
        """Where this step's updates end the epoch (``len(source)`` slots), tell Lightning's loader, which counts
        batches pulled: an epoch with skipped updates, or resumed inside, pulls fewer."""
        if self.trainer.global_step % len(self.source) == 0 and not getattr(dataloader_iter, "done", True):
            # Lightning 2.6: _DataFetcherWrapper.data_fetcher.done ends the epoch after this step (no public API).
            dataloader_iter.data_fetcher.done = True

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        # After the gradients are unscaled (16-mixed), before the step: clip to max_grad_norm or the Trainer's value.
        clipping = self._gradient_clipping
        if clipping is None and self.hparams.get("max_grad_norm") is not None:
            clipping = (self.hparams.max_grad_norm, "norm")
        if self.num_seeds > 1:
            self.step_per_seed(clipping)
        elif clipping is not None:
            self.clip_gradients(optimizer, *clipping)

    def teardown(self, stage: str) -> None:
        _run.end_run(self)

    # -- logging (``rl_lightning.algos._charts``) ------------------------------------------------

    def should_log(self) -> bool:
        """Whether Lightning writes this step's metrics (calling ``self.log`` costs ~0.1 ms)."""
        return self._charts.should_log(self)

    def log_metrics(self, metrics: dict[str, Tensor | float], prog_bar: tuple[str, ...] = ()) -> None:
        """Log ``metrics`` (already reduced over processes) with the algorithm's cadence: at once for
        per-step algorithms (call it only when ``should_log()``), averaged over the epoch for per-epoch ones."""
        self._charts.log(self, metrics, prog_bar)

    def log(self, name: str, value: Any, *args: Any, **kwargs: Any) -> None:
        """Lightning's ``self.log``; ``batch_size`` defaults to 1 (each value logged counts once in an epoch's mean):
        Lightning cannot read a batch size off the batches a ``training_step(self, dataloader_iter)`` pulls, and
        would refuse a call without one."""
        if kwargs.get("batch_size") is None and len(args) < 10:  # batch_size is log's 12th argument
            kwargs["batch_size"] = 1
        super().log(name, value, *args, **kwargs)

    def log_charts(self) -> None:
        """The charts of every algorithm: episodic return and length (the episodes that finished since the
        last log, all processes), SPS, env steps and learning rate, and the progress bar's fields."""
        self._charts.log_charts(self)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        # The epoch's last update done (a run that max_steps ends inside an epoch logs no partial epoch).
        if self.source is not None and self.trainer.global_step % len(self.source) == 0:
            self._charts.end_epoch(self)

    def use_fused_adam(self) -> bool:
        """Whether Adam can be the fused kernel (~0.25 ms faster per step for these tiny nets): in float32
        on the CPU or CUDA. (Under mixed precision Lightning cannot clip a fused Adam's gradients: its
        scaler unscales them inside the step, too late.)"""
        float32 = not self._attached or str(self.trainer.precision) in ("32-true", "32")
        return float32 and self.device.type in ("cpu", "cuda")

    # -- Lightning hooks ------------------------------------------------------------------

    def configure_callbacks(self) -> list[L.Callback]:
        """:class:`~rl_lightning.callbacks.guard.RunGuard`, ``StepInNames`` (``{step}`` in checkpoint names), and
        Lightning's progress bar replaced by ``RLProgressBar``; subclasses add to ``super().configure_callbacks()``."""
        guard = RunGuard()
        if self._attached:
            _run.prepare_trainer(self)
            guard.enter_warning_scope(self.trainer)  # before Lightning checks the loop (its dataloader_iter note)
        return [guard, StepInNames()]

    def on_fit_start(self) -> None:
        _run.start_fit(self)

    def on_train_start(self) -> None:
        _run.start_training(self, RLModule)

    @classmethod
    def algorithm_name(cls) -> str:
        """The rl_lightning module class this class is (or derives from), e.g. ``"VPGModule"``."""
        for klass in cls.__mro__:  # an algorithm's module, not the base's or its parts' (algos/_*.py)
            module = klass.__module__
            algorithm = module.startswith("rl_lightning.algos.") and not module.startswith("rl_lightning.algos._")
            if algorithm and klass is not RLModule:
                return klass.__name__
        return cls.__name__
