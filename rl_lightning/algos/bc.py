"""Behaviour cloning as a LightningModule on the offline layer (``algos/offline.py``).

    per training step, on a dataset batch (s, a):
        Box:       loss = mean (pi(s) - a)^2           pi deterministic, tanh-squashed into the bounds   compute_bc_loss
        Discrete:  loss = -mean log pi(a|s)            a categorical policy                     compute_discrete_bc_loss
        one Adam step

The baseline every offline algorithm is measured against: it copies the dataset's behaviour, good and bad alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from rl_lightning._checks import check_float, check_sizes
from rl_lightning.algos.offline import OfflineModule
from rl_lightning.data.replay import ReplayBufferSamples
from rl_lightning.envs.base import space_kind
from rl_lightning.export import GreedyPolicy
from rl_lightning.nets import CategoricalActor, DeterministicActor, sample_masked_categorical
from rl_lightning.offline_losses import compute_bc_loss, compute_discrete_bc_loss
from rl_lightning.seeding import seeded


class BCModule(OfflineModule):
    """Behaviour cloning: a deterministic policy regressed on the dataset's ``Box`` actions (mean squared error), or a
    categorical one on its ``Discrete`` actions (cross-entropy).

    Args:
        env_id: the env whose spaces the dataset has (evaluation plays it).
        lr: Adam learning rate.
        hidden_sizes: the policy's hidden widths (ReLU).
        normalize_obs: normalise observations by the dataset's mean and std (kept in the module, applied by ``act``,
            evaluation and exports).
        seed: network init and (with ``dataset``) the batches' sampling.
        dataset: what ``fit`` reads without a datamodule: a dataset path or Minari id.
        batch_size: transitions per batch, with ``dataset``.
        steps_per_epoch: updates per epoch, with ``dataset``.
        max_grad_norm: clip each update's global gradient norm to this; None: no clipping.
        env_backend: ``"auto"``, ``"torch"``, ``"gymnasium"``, ``"envpool"``, ``"ale_vector"`` or ``"ray"``.
        env_kwargs: for gymnasium envs.
        compile: the update through ``torch.compile`` (``rl_lightning.compiling``).
    """

    action_kinds = ("box", "discrete")

    def __init__(
        self,
        env_id: str = "Pendulum-v1",
        lr: float = 3e-4,
        hidden_sizes: Sequence[int] = (256, 256),
        normalize_obs: bool = True,
        seed: int = 0,
        dataset: str | None = None,
        batch_size: int = 256,
        steps_per_epoch: int = 1_000,
        max_grad_norm: float | None = None,
        env_backend: str = "auto",
        env_kwargs: dict[str, Any] | None = None,
        compile: bool | dict[str, Any] = False,
    ):
        super().__init__(
            env_id=env_id,
            seed=seed,
            gamma=0.99,
            tau=None,
            dataset=dataset,
            batch_size=batch_size,
            steps_per_epoch=steps_per_epoch,
            normalize_obs=normalize_obs,
            env_backend=env_backend,
            env_kwargs=env_kwargs,
            compile=compile,
        )
        check_float("lr", lr, 0.0, low_open=True)
        hidden_sizes = check_sizes("hidden_sizes", hidden_sizes)
        if max_grad_norm is not None:
            check_float("max_grad_norm", max_grad_norm, 0.0, low_open=True)
        self.save_hyperparameters()
        #: Whether the actions are ``Discrete`` (a categorical policy, cross-entropy), not a ``Box``.
        self.discrete = space_kind(self.action_space) == "discrete"
        self.obs_normalizer = self.make_obs_normalizer(self.policy_observation_space)
        with seeded(seed):
            if self.discrete:
                self.actor: nn.Module = CategoricalActor(self.policy_observation_space, self.action_space, hidden_sizes)
            else:
                self.actor = DeterministicActor(self.policy_observation_space, self.action_space, hidden_sizes)

    def policy_actions(self, obs: Tensor, greedy: bool) -> Tensor:
        """The policy's action (a Box: deterministic either way); a Discrete one's sample unless ``greedy``."""
        obs = self.normalize(obs)
        if self.discrete:
            logits = self.actor(obs)
            self.check_finite_outputs(logits, "policy's logits")
            return logits.argmax(dim=-1) if greedy else sample_masked_categorical(logits)[0]
        actions = self.actor(obs)
        self.check_finite_outputs(actions, "policy's actions")
        return actions

    def greedy_policy(self) -> nn.Module:
        return GreedyPolicy(self.actor, self.obs_normalizer)

    def update_loss(self, batch: ReplayBufferSamples) -> Tensor:
        def arguments(module: BCModule, part: ReplayBufferSamples) -> tuple[Any, ...]:
            return module.actor, module.normalize(part.obs), part.actions, module.discrete

        loss, metrics = self.seed_update(bc_losses, batch, arguments)
        if self.should_log():
            self.log_metrics(metrics)
            self.log_charts()
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.actor.parameters(), lr=self.hparams.lr, fused=self.use_fused_adam())


def bc_losses(actor: nn.Module, obs: Tensor, actions: Tensor, discrete: bool) -> tuple[Tensor, dict[str, Tensor]]:
    """Behaviour cloning's loss as a pure function, and its metrics (without gradient).

    Args:
        obs: ``(batch, *obs_shape)`` normalised observations.
        actions: the dataset's ``(batch, *action_shape)`` Box actions, or int64 ``(batch,)`` Discrete ones.
        discrete: whether ``actor`` gives logits (cross-entropy) rather than actions (squared error).
    """
    outputs = actor(obs)
    loss = compute_discrete_bc_loss(outputs, actions) if discrete else compute_bc_loss(outputs, actions)
    return loss, {"losses/bc_loss": loss.detach()}
