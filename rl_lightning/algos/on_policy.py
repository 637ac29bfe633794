"""The on-policy layer that VPG and PPO share (SB3's ``OnPolicyAlgorithm``), in Lightning: it owns their loop.

    training step (one rollout's updates):
        for each update (epochs x minibatches, or VPG's batches x rollout_use_count):
            batch = next(dataloader_iter)    the source's next batch of the rollout; the first collects the
                                             rollout with the current weights (num_steps_per_rollout vectorised
                                             steps) and computes its returns / advantages and minibatch order
            update(batch)                    on_update_start (the LR for the rollout, from env steps),
                                             update_loss, optimize (clipped), on_update_end (the NaN guard)
            if ends_rollout_early():         PPO's target_kl, at an update epoch's end: the one break; the
                break                        skipped updates count as optimizer steps

An algorithm on this layer is its networks, its source (``make_source``), ``update_loss`` and settings; the loop,
the clock (a rollout's updates per training step, its env steps per update) and the LR decay live here. An epoch
is ``len(source)`` updates (VPG: ``rollouts_per_epoch`` rollouts, PPO: one), and the charts are logged once per
epoch.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import lightning as L
from torch import Tensor, nn

from rl_lightning.algos.base import RLModule
from rl_lightning.callbacks.lr_decay import LinearLRDecay
from rl_lightning.data.rollout import replays_sampling


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

    def run_updates(self, dataloader_iter: Iterator[Any]) -> Tensor | None:
        """One rollout's updates (module docstring; or the part of them a training step holds where a checkpoint
        period divides them), with the one ``target_kl`` break; returns the last loss, detached."""
        loss = None
        for _ in range(self.updates_in_this_step()):
            batch, _, _ = next(dataloader_iter)
            loss = self.update(batch)
            early = self.ends_rollout_early()
            if self.num_seeds > 1 and not isinstance(early, bool):  # each seed's: it skips the rest of the rollout
                self.source.freeze([index for index, stop in enumerate(early) if stop])
                early = self.source.all_frozen
            if early:
                self.skip_updates(self.source.skip_rest_of_rollout())
                break
        return loss

    @property
    def fuses_env_into_collection(self) -> bool:
        """Whether ``compile`` runs the rollout's steps fused with a fusing env's (``RolloutSource._play_fused``):
        then a CPU run compiles its native envs at any number of copies (``algos._envs``)."""
        return self.compiled.enabled and replays_sampling(self._acting_head)

    @property
    def _acting_head(self) -> nn.Module | None:
        """The policy head the rollout samples from where a compiled step can replay its sampling (else None)."""
        return None

    def ends_rollout_early(self) -> bool | list[bool]:
        """After an update: whether the rest of the rollout's updates are skipped (PPO's ``target_kl``; never
        here; with ``num_seeds > 1`` a list, each seed's: a seed that stops has no update until the next rollout).
        They count as optimizer steps, so ``max_steps`` and the run's env steps keep their plan."""
        return False

    @property
    def update_in_rollout(self) -> int:
        """The index of the newest update's batch among its rollout's ``source.batches_per_rollout`` (0: the
        first update on a rollout just collected)."""
        return self.source.collection.position

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
