"""The on-policy layer that VPG and PPO share (SB3's ``OnPolicyAlgorithm``), in Lightning.

    for each training step (one rollout):
        source:   the rollout, collected with the current policy (num_steps_per_rollout vectorised steps),
                  its returns or advantages, the minibatches' order
        for each of the rollout's updates (epochs x minibatches, or VPG's batches x rollout_use_count):
            callbacks:    on_update_start (the LR schedule: one value per rollout)
            update_loss:  the algorithm's loss; one optimizer step (gradient norm clipped)
            callbacks:    on_update_end (the NaN guard)
            updates_to_skip: PPO's target_kl ends the rollout's updates early

An algorithm on this layer is its networks, its source (``make_source``) and ``update_loss``; the loop,
the clock (a rollout's updates per training step, its env steps per update) and the LR decay live here.
An epoch is ``len(source)`` updates (VPG: ``rollouts_per_epoch`` rollouts, PPO: one), and the charts are
logged once per epoch.
"""

from __future__ import annotations

from typing import Any

import lightning as L

from rl_lightning.algos.base import RLModule
from rl_lightning.callbacks.lr_decay import LinearLRDecay
from rl_lightning.deprecations import keyword_only


class OnPolicyModule(RLModule):
    """Base of the rollout algorithms (``VPGModule``, ``PPOModule``): one training step per rollout.

    The subclass saves hyper-parameters named ``num_envs``, ``num_steps_per_rollout`` and (for the LR decay)
    ``anneal_lr``, ``lr_end``, ``lr_frac``, and sets ``training_steps_per_collection`` (a rollout's updates).

    Args:
        env_id: a native env id or any gymnasium id.
        num_envs: envs stepped in lock-step per process.
        seed: network init, envs (rank r: ``seed + r * num_envs``), action sampling, minibatch order.
        env_backend: ``"auto"``, ``"torch"``, ``"gymnasium"``, ``"envpool"``, ``"ale_vector"`` or ``"ray"``
            (``make_envs``).
        env_kwargs: for gymnasium envs.
        compile: the update functions through ``torch.compile`` (``rl_lightning.compiling``).
    """

    log_per_epoch = True

    @keyword_only
    def __init__(
        self,
        *,
        env_id: str,
        num_envs: int,
        seed: int,
        env_backend: str = "auto",
        env_kwargs: dict[str, Any] | None = None,
        compile: bool | dict[str, Any] = False,
    ):
        super().__init__(env_id, num_envs, seed, env_backend, env_kwargs, compile)

    @property
    def updates_per_training_step(self) -> int:  # type: ignore[override]
        """A rollout's updates: one training step per rollout."""
        return self.training_steps_per_collection

    @property
    def env_steps_per_training_step(self) -> float:
        hp = self.hparams
        return hp.num_envs * hp.num_steps_per_rollout * self.world_size / self.training_steps_per_collection

    def configure_callbacks(self) -> list[L.Callback]:
        callbacks = super().configure_callbacks()
        if self.hparams.get("anneal_lr"):
            callbacks.append(LinearLRDecay(lr_end=self.hparams.lr_end, lr_frac=self.hparams.lr_frac))
        return callbacks
