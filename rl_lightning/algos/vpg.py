"""Vanilla policy gradient (REINFORCE) as a LightningModule.

One training step = one batch of whole trajectories from a rollout of the current policy:

    rollout  = RolloutSource.collect()                 (envs stepped num_steps_per_rollout times)
    G_t      = compute_returns(rewards, dones, gamma)  (optionally normalised)
    J        = mean_t,env[ iw * log pi(a_t|s_t) * (G_t - mean_env G_t) ]
    loss     = -J                                      (Adam minimises -J, i.e. ascends J)

An epoch is ``rollouts_per_epoch`` rollouts (default one), so ``max_epochs`` counts rollouts
and ``max_steps`` counts optimizer updates.
"""

from __future__ import annotations

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
from rl_lightning.callbacks.lr_decay import LinearLRDecay
from rl_lightning.data.rollout import RolloutSource, RolloutTensors, sample_actions
from rl_lightning.envs import make_envs, registered_env_ids
from rl_lightning.losses import (
    compute_importance_weights,
    compute_logprobs,
    compute_reinforce_loss,
    compute_returns,
    normalize_returns,
)
from rl_lightning.nets import PolicyNetwork


class VPGModule(L.LightningModule):
    """REINFORCE with a per-timestep baseline across envs, on torch vector envs.

    Args:
        env_id: a registered env id (``rl_lightning.registered_env_ids()``).
        num_envs: envs stepped in lock-step per process.
        num_steps_per_rollout: steps per env in one rollout.
        lr: Adam learning rate.
        gamma: discount factor in [0, 1].
        normalize_returns: rescale returns to zero mean, unit variance per batch.
        use_iw: weight by importance ratios pi / pi_old (needed to reuse a rollout).
        clip_coef: clamp importance weights to [1 - clip_coef, 1 + clip_coef] (None: no clamp).
        rollout_use_count: updates per batch of each rollout (> 1 needs ``use_iw``).
        num_batches_per_rollout: batches each rollout is split into along envs (> 1 needs
            ``use_iw``; must divide ``num_envs``).
        rollouts_per_epoch: rollouts per Lightning epoch.
        full_reset: reset every env at the start of each rollout.
        use_lr_decay: decay the learning rate linearly (adds a ``LinearLRDecay`` callback).
        lr_end: final learning rate of the decay.
        lr_frac: fraction of the run's env steps over which the decay happens.
        hidden_sizes: widths of the policy MLP's hidden layers.
        adam_eps: Adam's epsilon.
        seed: seeds the network init (identical on every rank) and, plus the rank, the envs
            and action sampling.
    """

    def __init__(
        self,
        env_id: str = "CartPole-v1",
        num_envs: int = 32,
        num_steps_per_rollout: int = 500,
        lr: float = 2e-2,
        gamma: float = 0.99,
        normalize_returns: bool = True,
        use_iw: bool = False,
        clip_coef: float | None = 0.2,
        rollout_use_count: int = 1,
        num_batches_per_rollout: int = 1,
        rollouts_per_epoch: int = 1,
        full_reset: bool = True,
        use_lr_decay: bool = False,
        lr_end: float | None = None,
        lr_frac: float | None = None,
        hidden_sizes: Sequence[int] = (120, 84),
        adam_eps: float = 1e-5,
        seed: int = 1,
    ):
        super().__init__()
        if env_id not in registered_env_ids():
            raise ValueError(f"unknown env_id {env_id!r}; registered env ids: {', '.join(registered_env_ids())}")
        for name, value in (
            ("num_envs", num_envs),
            ("num_steps_per_rollout", num_steps_per_rollout),
            ("rollout_use_count", rollout_use_count),
            ("num_batches_per_rollout", num_batches_per_rollout),
            ("rollouts_per_epoch", rollouts_per_epoch),
        ):
            check_int(name, value, 1)
        check_float("lr", lr, 0.0, float("inf"), low_open=True)
        check_float("gamma", gamma, 0.0, 1.0)
        if clip_coef is not None:
            check_float("clip_coef", clip_coef, 0.0, 1.0, low_open=True, high_open=True)
        if num_envs % num_batches_per_rollout != 0:
            raise ValueError(f"num_batches_per_rollout ({num_batches_per_rollout}) must divide num_envs ({num_envs})")
        if not use_iw and (rollout_use_count != 1 or num_batches_per_rollout != 1):
            raise ValueError(
                "reusing a rollout (rollout_use_count > 1) or splitting it into several batches "
                "(num_batches_per_rollout > 1) makes all but the first update off-policy: set "
                f"use_iw=True, or keep both at 1 (got rollout_use_count={rollout_use_count}, "
                f"num_batches_per_rollout={num_batches_per_rollout})"
            )
        if use_lr_decay:
            if lr_end is None or lr_frac is None:
                raise ValueError("use_lr_decay=True needs both lr_end and lr_frac")
            check_float("lr_end", lr_end, 0.0, float("inf"))
            check_float("lr_frac", lr_frac, 0.0, 1.0, low_open=True)
        check_int("seed", seed, 0)
        check_float("adam_eps", adam_eps, 0.0, float("inf"), low_open=True)
        hidden_sizes = tuple(int(size) for size in hidden_sizes)
        self.save_hyperparameters()

        spec_env = make_envs(env_id, num_envs=1, seed=seed)
        self.obs_shape = spec_env.obs_shape
        self.num_actions = spec_env.num_actions
        # Same seed on every rank: DDP needs identical initial weights.
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            self.policy_network = PolicyNetwork(self.obs_shape, self.num_actions, hidden_sizes)

        self.source: RolloutSource | None = None
        self._env_steps_offset = 0  # env steps not counted by the source (restored from a checkpoint)
        self._restored: dict[str, Any] = {}  # what on_load_checkpoint found, applied in train_dataloader
        self._logged_rollouts = 0
        self._last_log_time = math.nan
        self._last_log_env_steps = 0

    # -- the algorithm ----------------------------------------------------------------------

    def training_step(self, batch: RolloutTensors, batch_idx: int) -> Tensor:
        hp = self.hparams
        # Returns in float32 whatever the precision: they sum hundreds of rewards.
        returns = compute_returns(batch.rewards, batch.dones, hp.gamma)
        if hp.normalize_returns:
            returns = normalize_returns(returns)
        logprobs = compute_logprobs(batch.obs, batch.actions, self.policy_network)
        if hp.use_iw:
            weights = compute_importance_weights(logprobs, batch.logprobs, hp.clip_coef)
            self.log("losses/importance_weight", weights.mean(), on_step=False, on_epoch=True)
        else:
            weights = torch.ones_like(logprobs)
        objective = compute_reinforce_loss(returns, logprobs, weights)
        self.log("losses/policy_objective", objective, on_step=False, on_epoch=True, sync_dist=True)
        self._log_rollout()
        return -objective

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.policy_network.parameters(), lr=self.hparams.lr, eps=self.hparams.adam_eps)

    def train_dataloader(self) -> DataLoader:
        hp = self.hparams
        rank = self.global_rank
        envs = make_envs(hp.env_id, hp.num_envs, seed=hp.seed + rank, device=self.device)
        self.source = RolloutSource(
            envs,
            self.policy_network,
            num_steps=hp.num_steps_per_rollout,
            num_batches=hp.num_batches_per_rollout,
            rollout_use_count=hp.rollout_use_count,
            rollouts_per_epoch=hp.rollouts_per_epoch,
            full_reset=hp.full_reset,
            seed=hp.seed + rank + 1_000_003,
        )
        if restore_source_state(self.source, self._restored.get("sources"), rank, self.world_size):
            # The source's own counter now carries the env steps: no offset on top.
            self._env_steps_offset = self._restored["env_steps"] - self.source.env_steps * self.world_size
            self._logged_rollouts = self.source.num_rollouts
        self._restored = {}
        return DataLoader(self.source, batch_size=None, num_workers=0)

    def configure_callbacks(self) -> list[L.Callback]:
        if not self.hparams.use_lr_decay:
            return []
        return [LinearLRDecay(lr_end=self.hparams.lr_end, lr_frac=self.hparams.lr_frac)]

    @torch.no_grad()
    def act(self, obs: Tensor, greedy: bool = False) -> Tensor:
        """Actions for ``obs`` ``(batch, *obs_shape)`` or one ``obs_shape`` observation (a tensor or
        an array, e.g. from a gymnasium env): the most likely one if ``greedy``, else sampled."""
        logits = self.policy_network(torch.as_tensor(obs, dtype=torch.float32, device=self.device))
        if greedy:
            return logits.argmax(dim=-1)
        return sample_actions(logits)[0]

    # -- env-step bookkeeping -------------------------------------------------------------

    @property
    def world_size(self) -> int:
        return self.trainer.world_size if self._trainer is not None else 1

    @property
    def env_steps(self) -> int:
        """Environment steps taken so far by all processes together."""
        local = self.source.env_steps if self.source is not None else 0
        return self._env_steps_offset + local * self.world_size

    @property
    def env_steps_per_training_step(self) -> float:
        """Env steps (all processes) collected per optimizer step, on average."""
        hp = self.hparams
        rollout_steps = hp.num_envs * hp.num_steps_per_rollout * self.world_size
        return rollout_steps / (hp.num_batches_per_rollout * hp.rollout_use_count)

    def _log_rollout(self) -> None:
        """Log the statistics of the newest rollout, once per rollout."""
        source = self.source
        if source is None or source.num_rollouts == self._logged_rollouts:
            return
        self._logged_rollouts = source.num_rollouts
        stats = source.last_stats
        returns = stats.returns
        now = time.perf_counter()
        env_steps = self.env_steps
        sps = (env_steps - self._last_log_env_steps) / (now - self._last_log_time)
        self._last_log_time, self._last_log_env_steps = now, env_steps
        ci95 = 1.96 * returns.std() / math.sqrt(returns.numel()) if returns.numel() > 1 else torch.zeros(())
        lr = self.trainer.optimizers[0].param_groups[0]["lr"]
        log = dict(on_step=False, on_epoch=True, sync_dist=True)
        self.log("charts/episodic_return", returns.mean(), **log)
        self.log("charts/episodic_return_ci95", ci95, **log)
        self.log("charts/episodic_return_max", returns.max(), **log, reduce_fx="max")
        self.log("charts/episode_length", stats.lengths.mean(), **log)
        self.log("charts/learning_rate", lr, on_step=False, on_epoch=True)
        self.log("charts/env_steps", float(env_steps), on_step=False, on_epoch=True)
        if math.isfinite(sps):
            self.log("charts/SPS", sps, on_step=False, on_epoch=True)
        self.log("env_steps", float(env_steps), prog_bar=True, logger=False, on_step=True, on_epoch=False)
        self.log("return", returns.mean(), prog_bar=True, logger=False, on_step=True, on_epoch=False)
        self.log("lr", lr, prog_bar=True, logger=False, on_step=True, on_epoch=False)

    def on_train_start(self) -> None:
        self._last_log_time = time.perf_counter()
        self._last_log_env_steps = self.env_steps

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["rl_lightning"] = {
            "env_steps": self.env_steps,
            "sources": gather_source_states(self, self.source.state_dict() if self.source is not None else None),
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        check_checkpoint_fits(self, checkpoint)
        self._restored = checkpoint.get("rl_lightning", {})
        self._env_steps_offset = int(self._restored.get("env_steps", 0))
