"""Deep Q-Network as a LightningModule: a ReplaySource feeds sampled batches, one TD update each.

Env steps happen in the data source (``rl_lightning.data.replay.ReplaySource``), the target
network and epsilon are moved by callbacks keyed on ``env_steps`` (``configure_callbacks``):

    for each training step k:
        source: play steps_per_train env steps epsilon-greedy with q_network (after update k-1),
                add them to the replay buffer, sample batch_size transitions
        training_step: loss = (r + gamma (1 - terminated) Q_target(s', a') - Q(s, a))^2,
                       a' = argmax_a Q(s', a) (double DQN) or argmax_a Q_target(s', a)
        optimizer step: gradient norm clipped to max_grad_norm, then Adam
        callbacks: TargetNetworkSync (every N env steps / Polyak), EpsilonDecay
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Sequence
from typing import Any

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import DataLoader

from rl_lightning._checks import check_float, check_int
from rl_lightning.algos.checkpointing import check_checkpoint_fits, gather_source_states, restore_source_state
from rl_lightning.callbacks.epsilon import EpsilonDecay
from rl_lightning.callbacks.target_sync import TargetNetworkSync
from rl_lightning.data.replay import ReplayBuffer, ReplayBufferSamples, ReplaySource, epsilon_greedy
from rl_lightning.envs import make_envs
from rl_lightning.losses import compute_td_loss, compute_td_target
from rl_lightning.nets import QNetwork

_CHECKPOINT_KEY = "rl_lightning.dqn"


class DQNModule(L.LightningModule):
    """DQN (optionally double DQN) on a torch vector env.

    The defaults solve CartPole-v1 (greedy mean return >= 475 over 32 episodes) for 10 of 10
    seeds in a median of ~3,400 updates (~56k env steps, ~9 s of one CPU) within the scripts'
    5,000-update run: many envs, a large batch, a hard target copy every 10 updates, a short
    exploration phase, and two standard stabilisers that together took seeds 0-9 from 9/10 to
    10/10 solved (without them seed 4 stalls below 475 for the whole run): double DQN (a max
    over noisy Q-estimates overestimates) and gradient-norm clipping (bounds the step when the
    targets jump at a hard copy). Huber loss instead of MSE (with both) left all 10 seeds at a greedy return of ~10 at
    this lr, with Q-values growing ~2x faster than under MSE early on: keep ``loss="mse"``.

    Args:
        env_id: a registered env id (``rl_lightning.envs.registered_env_ids()``).
        num_envs: envs stepped in lock-step per process.
        buffer_size: replay capacity in transitions (per process).
        batch_size: transitions per TD update.
        learning_starts: env steps of uniformly random play before the first update.
        steps_per_train: vectorised env steps per TD update (``num_envs * steps_per_train``
            transitions per update and process).
        steps_per_epoch: training steps per epoch (the data source's length); evaluation and
            checkpoint callbacks run at epoch ends (250 x 16 envs = every 4,000 env steps).
        gamma: discount factor in [0, 1].
        lr: Adam learning rate.
        max_grad_norm: clip the global gradient norm of each update to this; None: no clipping
            (``Trainer(gradient_clip_val=...)``, when given, takes precedence).
        target_update_env_steps: env steps between target updates; None: after every update.
        tau: target update weight in (0, 1]: 1.0 is a hard copy, small values Polyak averaging.
        epsilon_start, epsilon_end: exploration rate at the start and after the decay.
        exploration_fraction: part of the run's env steps over which epsilon decays linearly.
        double_dqn: pick the next action with ``q_network`` and value it with ``target_network``.
        loss: ``"mse"`` or ``"huber"``.
        seed: network init (same on every rank); env seed ``seed + global_rank``.
        hidden_sizes: hidden layer widths of the Q-network.
        checkpoint_buffer: save the replay buffer in checkpoints (``buffer_size`` x 45 bytes for
            CartPole, per process). Without it a resumed run refills the buffer from scratch
            (``learning_starts`` is not replayed), so it no longer matches an uninterrupted run.
    """

    def __init__(
        self,
        env_id: str = "CartPole-v1",
        num_envs: int = 16,
        buffer_size: int = 50_000,
        batch_size: int = 512,
        learning_starts: int = 1_000,
        steps_per_train: int = 1,
        steps_per_epoch: int = 250,
        gamma: float = 0.99,
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
    ):
        super().__init__()
        if not isinstance(env_id, str):
            raise TypeError(f"env_id must be a str, got {type(env_id).__name__}")
        check_int("num_envs", num_envs, 1)
        check_int("buffer_size", buffer_size, num_envs)
        check_int("batch_size", batch_size, 1)
        check_int("learning_starts", learning_starts, 0)
        check_int("steps_per_train", steps_per_train, 1)
        check_int("steps_per_epoch", steps_per_epoch, 1)
        check_float("gamma", gamma, 0.0, 1.0)
        check_float("lr", lr, 0.0, float("inf"), low_open=True)
        if max_grad_norm is not None:
            check_float("max_grad_norm", max_grad_norm, 0.0, float("inf"), low_open=True)
        if target_update_env_steps is not None:
            check_int("target_update_env_steps", target_update_env_steps, 1)
        check_float("tau", tau, 0.0, 1.0, low_open=True)
        check_float("epsilon_start", epsilon_start, 0.0, 1.0)
        check_float("epsilon_end", epsilon_end, 0.0, 1.0)
        check_float("exploration_fraction", exploration_fraction, 0.0, 1.0)
        if not isinstance(checkpoint_buffer, bool):
            raise TypeError(f"checkpoint_buffer must be a bool, got {type(checkpoint_buffer).__name__}")
        if not isinstance(double_dqn, bool):
            raise TypeError(f"double_dqn must be a bool, got {type(double_dqn).__name__}")
        if loss not in ("mse", "huber"):
            raise ValueError(f"loss must be 'mse' or 'huber', got {loss!r}")
        check_int("seed", seed, 0)
        if isinstance(hidden_sizes, (str, bytes)) or not all(
            isinstance(size, int) and not isinstance(size, bool) and size >= 1 for size in hidden_sizes
        ):
            raise ValueError(f"hidden_sizes must be a sequence of positive ints, got {hidden_sizes!r}")
        hidden_sizes = tuple(hidden_sizes)
        self.save_hyperparameters()

        # A throwaway env (1 copy) gives the spaces; also validates env_id early.
        probe_env = make_envs(env_id, num_envs=1, seed=seed)
        self.obs_shape, self.num_actions = probe_env.obs_shape, probe_env.num_actions
        # Same init on every rank, without touching the global RNG.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.q_network = QNetwork(self.obs_shape, self.num_actions, hidden_sizes)
        self.target_network = copy.deepcopy(self.q_network).requires_grad_(False)

        self.source: ReplaySource | None = None  # built in train_dataloader, on the module's device
        self._epsilon = float(epsilon_start)
        self._env_steps = 0  # until the source exists (or from a checkpoint)
        self._restored_sources: list[dict[str, Any] | None] | None = None  # from a checkpoint
        self._last_log: tuple[float, int] | None = None  # (time, env_steps) for SPS

    # -- acting ---------------------------------------------------------------------------

    @property
    def env_steps(self) -> int:
        """Environment steps taken so far, over all processes."""
        return self.source.env_steps if self.source is not None else self._env_steps

    @property
    def env_steps_per_training_step(self) -> int:
        world_size = self.trainer.world_size if self._trainer is not None else 1
        return self.hparams.num_envs * self.hparams.steps_per_train * world_size

    def planned_env_steps(self, optimizer_steps: int) -> int:
        """Env steps (all processes) of a run of ``optimizer_steps`` updates: the random warm-up of
        ``learning_starts`` (rounded up to whole vectorised steps) plus the steps between updates."""
        per_vector_step = self.hparams.num_envs * (self.trainer.world_size if self._trainer is not None else 1)
        warmup = math.ceil(self.hparams.learning_starts / per_vector_step) * per_vector_step
        return warmup + optimizer_steps * self.env_steps_per_training_step

    @property
    def epsilon(self) -> float:
        """Current exploration rate (set by :class:`EpsilonDecay`)."""
        return self._epsilon

    @epsilon.setter
    def epsilon(self, value: float) -> None:
        self._epsilon = float(value)
        if self.source is not None:
            self.source.epsilon = self._epsilon

    @torch.no_grad()
    def act(self, obs: Tensor, greedy: bool) -> Tensor:
        """Actions for ``obs`` ``(batch, *obs_shape)`` or one ``obs_shape`` observation (a tensor or
        an array, e.g. from a gymnasium env): argmax Q if ``greedy``, else epsilon-greedy with the
        current ``epsilon`` (torch's global RNG)."""
        obs = torch.as_tensor(obs, dtype=torch.float32, device=self.device)
        q_values = self.q_network(obs.reshape(-1, *self.obs_shape))
        actions = epsilon_greedy(q_values, 0.0 if greedy else self._epsilon)
        return actions.reshape(obs.shape[: obs.dim() - len(self.obs_shape)])

    def forward(self, obs: Tensor) -> Tensor:
        """Q-values ``(batch, num_actions)``."""
        return self.q_network(obs)

    # -- data -----------------------------------------------------------------------------

    def train_dataloader(self) -> DataLoader:
        hp = self.hparams
        rank, world_size = self.global_rank, self.trainer.world_size
        envs = make_envs(hp.env_id, hp.num_envs, seed=hp.seed + rank, device=self.device)
        buffer = ReplayBuffer(hp.buffer_size, envs.obs_shape, hp.num_envs, seed=hp.seed + rank, device=self.device)
        self.source = ReplaySource(
            envs,
            buffer,
            self.q_network,
            batch_size=hp.batch_size,
            learning_starts=hp.learning_starts,
            steps_per_train=hp.steps_per_train,
            num_batches=hp.steps_per_epoch,
            seed=hp.seed + rank,
            epsilon=self._epsilon,
            world_size=world_size,
            env_steps=self._env_steps,
        )
        restore_source_state(self.source, self._restored_sources, rank, world_size)
        self._restored_sources = None
        return DataLoader(self.source, batch_size=None, num_workers=0)

    # -- learning -------------------------------------------------------------------------

    def training_step(self, batch: ReplayBufferSamples, batch_idx: int) -> Tensor:
        q_values = self.q_network(batch.obs).gather(1, batch.actions.unsqueeze(1)).squeeze(1)
        with torch.no_grad():
            next_q_target = self.target_network(batch.next_obs)
            if self.hparams.double_dqn:
                # Double DQN: the online network picks a', the target network values it.
                next_actions = self.q_network(batch.next_obs).argmax(dim=1, keepdim=True)
                next_q_values = next_q_target.gather(1, next_actions).squeeze(1)
            else:
                next_q_values = next_q_target.max(dim=1).values
            td_targets = compute_td_target(batch.rewards, batch.terminated, next_q_values, self.hparams.gamma)
        loss = compute_td_loss(q_values, td_targets, self.hparams.loss)
        if self._should_log():
            self._log_metrics(loss, q_values)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        # The fused kernel is ~0.25 ms faster per step than the per-tensor loop for these tiny nets.
        # Under a GradScaler (16-mixed) a fused Adam unscales inside its step, too late to clip:
        # then clipping needs the plain Adam, which Lightning unscales first.
        fused = self.device.type in ("cpu", "cuda") and not (self._grad_scaler() and self.hparams.max_grad_norm)
        return torch.optim.Adam(self.q_network.parameters(), lr=self.hparams.lr, fused=fused)

    def configure_gradient_clipping(
        self, optimizer: torch.optim.Optimizer, gradient_clip_val: float | None = None, gradient_clip_algorithm=None
    ) -> None:
        max_norm = self.hparams.max_grad_norm
        if gradient_clip_val is not None or max_norm is None:  # Trainer(gradient_clip_val=...) wins
            self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)
        elif self._grad_scaler():
            self.clip_gradients(optimizer, max_norm, "norm")
        else:
            # Without a scaler the gradients are already true ones; Lightning's clip_gradients
            # would refuse the fused Adam under any mixed precision, bf16 included.
            torch.nn.utils.clip_grad_norm_(self.q_network.parameters(), max_norm)

    def _grad_scaler(self) -> bool:
        return self._trainer is not None and getattr(self.trainer.precision_plugin, "scaler", None) is not None

    def configure_callbacks(self) -> list[L.Callback]:
        hp = self.hparams
        return [
            TargetNetworkSync(every_n_env_steps=hp.target_update_env_steps, tau=hp.tau),
            EpsilonDecay(start=hp.epsilon_start, end=hp.epsilon_end, fraction=hp.exploration_fraction),
        ]

    # -- logging --------------------------------------------------------------------------

    def _should_log(self) -> bool:
        # Lightning writes step metrics when (optimizer steps so far + 1) % log_every_n_steps == 0;
        # calling self.log only then saves ~0.1 ms per step, which is ~10% of a CartPole step.
        if self._trainer is None:  # training_step called by hand (tests)
            return False
        every = self.trainer.log_every_n_steps
        return every > 0 and (self.global_step + 1) % every == 0

    def _log_metrics(self, loss: Tensor, q_values: Tensor) -> None:
        now, env_steps = time.perf_counter(), self.env_steps
        self.log("losses/td_loss", loss.detach())
        self.log("losses/q_values", q_values.detach().mean())
        self.log("charts/epsilon", self._epsilon, prog_bar=True)
        self.log("charts/env_steps", float(env_steps), prog_bar=True)
        if self._last_log is not None and now > self._last_log[0]:
            self.log("charts/SPS", (env_steps - self._last_log[1]) / (now - self._last_log[0]))
        self._last_log = (now, env_steps)
        stats = self.source.pop_episode_stats() if self.source is not None else torch.zeros(3)
        if self.trainer.world_size > 1:
            stats = self.trainer.strategy.reduce(stats, reduce_op="sum")
        count = stats[2].item()
        if count > 0:
            self.log("charts/episodic_return", (stats[0] / count).item(), prog_bar=True)
            self.log("charts/episode_length", (stats[1] / count).item())

    # -- checkpoints ----------------------------------------------------------------------

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # Every rank's envs, RNGs, counters and (unless checkpoint_buffer=False) replay buffer.
        state = None if self.source is None else self.source.state_dict(self.hparams.checkpoint_buffer)
        states = gather_source_states(self, state) if self.source is not None else None
        checkpoint[_CHECKPOINT_KEY] = {"env_steps": self.env_steps, "epsilon": self._epsilon, "sources": states}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        check_checkpoint_fits(self, checkpoint)
        state = checkpoint.get(_CHECKPOINT_KEY)
        if state is not None:
            self._env_steps = state["env_steps"]
            self._epsilon = state["epsilon"]
            self._restored_sources = state.get("sources")
