"""The offline layer that BC, TD3+BC and IQL share: the off-policy layer's update plumbing, with the batches of a
dataset instead of a replay source.

    L.Trainer(max_steps=...).fit(TD3BCModule(env_id="Pendulum-v1"), datamodule=TransitionsDataModule(path))

    fit start:      the dataset's statistics (observation mean and std, the range of its episodes' returns), once
                    (a resumed run has them from its checkpoint): ``prepare_dataset``
    training step:  batch = next(dataloader_iter)   the datamodule's ``ReplayBufferSamples`` (moved to the module's
                                                     device); no env is stepped
                    update(batch)                    callbacks' on_update_start, update_loss, optimize (one optimizer
                                                     step), on_update_end (TargetNetworkSync)

An offline module has no env steps: its clock (``env_steps``, the x-axis of the charts, ``Evaluation(
every_n_env_steps=N)``'s period, ``EnvStepBudget``) counts its updates, as D4RL's curves count gradient steps. The env
of ``env_id`` gives the spaces, and the evaluation callbacks, ``evaluate_policy``, ``act`` and the exports play it.
Without a datamodule, ``fit`` reads ``dataset`` (a path or a Minari dataset id) through
``rl_lightning.data.offline.TransitionsDataModule`` with the module's ``batch_size``, ``steps_per_epoch`` and ``seed``.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import torch
from lightning.fabric.utilities.apply_func import move_data_to_device
from torch import Tensor

from rl_lightning._checks import SettingsError, check_bool, check_int, check_str
from rl_lightning.algos.off_policy import OffPolicyModule
from rl_lightning.data.normalization import ObservationNormalizer
from rl_lightning.data.offline import TransitionsDataModule
from rl_lightning.data.replay import ReplayBufferSamples
from rl_lightning.envs.spaces import TensorTree


class OfflineModule(OffPolicyModule):
    """Base of the offline algorithms (``BCModule``, ``TD3BCModule``, ``IQLModule``): one update per training step on
    a dataset's batch; ``global_step``, ``max_steps`` and the clock count updates.

    Args:
        env_id: the env whose spaces the dataset has (evaluation plays it).
        seed: network init, the updates' own randomness and (with ``dataset``) the batches' sampling.
        gamma: discount factor in [0, 1].
        tau: the target networks' Polyak weight in (0, 1]; None: the algorithm has none.
        dataset: what ``fit`` reads without a datamodule: a dataset path or Minari id; None: a datamodule is needed.
        batch_size: transitions per batch, with ``dataset``.
        steps_per_epoch: updates per epoch, with ``dataset`` (evaluation and checkpoints run at epoch ends).
        normalize_obs: normalise observations by the dataset's mean and std (computed once at fit start, kept in the
            module: ``act``, evaluation and every export apply it).
        env_backend: ``"auto"``, ``"torch"``, ``"gymnasium"``, ``"envpool"``, ``"ale_vector"`` or ``"ray"``.
        env_kwargs: for gymnasium envs.
        compile: the update functions through ``torch.compile`` (``rl_lightning.compiling``).
    """

    def __init__(
        self,
        *,
        env_id: str,
        seed: int,
        gamma: float,
        tau: float | None,
        dataset: str | None,
        batch_size: int,
        steps_per_epoch: int,
        normalize_obs: bool,
        env_backend: str,
        env_kwargs: dict[str, Any] | None,
        compile: bool | dict[str, Any],
    ):
        # The replay settings of the layer are unused (no replay source is built): one env for the spaces.
        super().__init__(
            env_id=env_id,
            num_envs=1,
            seed=seed,
            env_backend=env_backend,
            env_kwargs=env_kwargs,
            buffer_size=1,
            batch_size=batch_size,
            learning_starts=0,
            train_freq=1,
            gradient_steps=1,
            steps_per_epoch=steps_per_epoch,
            gamma=gamma,
            n_step=1,
            checkpoint_buffer=False,
            compile=compile,
            updates_per_step=1,
            tau=tau,
        )
        if dataset is not None:
            check_str("dataset", dataset)
        check_bool("normalize_obs", normalize_obs)
        self._dataset_module: Any = None  # the datamodule built from ``dataset`` (fit without a datamodule)

    def make_obs_normalizer(self, observation_space: Any) -> ObservationNormalizer | None:
        """The observation normaliser (``normalize_obs``), its statistics set from the dataset at fit start: unclipped,
        ``(obs - mean) / sqrt(var + 1e-6)`` (TD3+BC's ``(s - mean) / (std + 1e-3)`` up to the epsilon's place)."""
        if not self.hparams.normalize_obs:
            return None
        space = observation_space if isinstance(observation_space, gym.spaces.Dict) else observation_space.shape
        return ObservationNormalizer(space, clip=math.inf, eps=1e-6)

    def normalize(self, obs: Tensor | TensorTree) -> Tensor | TensorTree:
        """``obs`` normalised by the dataset's statistics (unchanged without ``normalize_obs``)."""
        normalizer = getattr(self, "obs_normalizer", None)
        return obs if normalizer is None else normalizer(obs)

    # -- the data -------------------------------------------------------------------------------------------------

    def train_dataloader(self) -> Any:
        """The loader of ``dataset`` (``fit`` without a datamodule)."""
        return self._dataset_datamodule().train_dataloader()

    def _dataset_datamodule(self) -> Any:
        if self.hparams.dataset is None:
            raise SettingsError(
                f"{type(self).__name__} trains on a dataset and steps no env: pass one, "
                "trainer.fit(module, datamodule=TransitionsDataModule(path)) (rl_lightning.data.offline), or "
                "dataset=PATH (a dataset path or Minari id)"
            )
        if self._dataset_module is None:
            hp = self.hparams
            self._dataset_module = TransitionsDataModule(
                hp.dataset, batch_size=hp.batch_size, steps_per_epoch=hp.steps_per_epoch, seed=hp.seed
            )
        return self._dataset_module

    def dataset_transitions(self) -> Any:
        """The whole dataset (``Transitions``: obs, actions, rewards, terminated, truncated, next_obs) of this fit's
        datamodule, or of ``dataset``; None where the datamodule does not give it (a plain ``DataLoader``)."""
        datamodule = getattr(self.trainer, "datamodule", None) if self._attached else None
        if datamodule is None:
            datamodule = self._dataset_datamodule()
        return getattr(datamodule, "transitions", None)

    def on_fit_start(self) -> None:
        super().on_fit_start()
        datamodule = getattr(self.trainer, "datamodule", None)
        if datamodule is not None and self.hparams.dataset is not None:
            raise SettingsError(
                f"{type(self).__name__}(dataset={self.hparams.dataset!r}) was given a datamodule too: pass one of them"
            )
        if self.needs_dataset_statistics():
            transitions = self.dataset_transitions()
            if transitions is None:
                raise SettingsError(
                    f"{type(self).__name__} reads the dataset's statistics ({self.statistics_needed()}), and this "
                    "fit's datamodule has no .transitions: use rl_lightning.data.offline.TransitionsDataModule, or "
                    "turn them off (normalize_obs=False; IQLModule: scale_rewards=False)"
                )
            self.prepare_dataset(transitions)

    def statistics_needed(self) -> str:
        """What the algorithm reads of the whole dataset, in words."""
        return "normalize_obs: the observations' mean and std"

    def needs_dataset_statistics(self) -> bool:
        """Whether the statistics are still to be set (not yet set, nor restored from a checkpoint)."""
        normalizer = getattr(self, "obs_normalizer", None)
        return normalizer is not None and not _is_set(normalizer)

    @torch.no_grad()
    def prepare_dataset(self, transitions: Any) -> None:
        """Set the statistics the algorithm keeps from the whole dataset (the observations' mean and std)."""
        normalizer = getattr(self, "obs_normalizer", None)
        if normalizer is None or _is_set(normalizer):
            return
        obs = transitions.obs
        stats = normalizer.stats
        if isinstance(obs, dict):
            for key, key_stats in stats.items():
                _set_moments(key_stats, torch.as_tensor(obs[key]))
        else:
            _set_moments(stats, torch.as_tensor(obs))

    # -- the clock: updates ---------------------------------------------------------------------------------------

    @property
    def env_steps(self) -> int:
        """The offline clock: updates so far (no env is stepped)."""
        return self.trainer.global_step if self._attached else self._start_env_steps

    @property
    def env_steps_before_batch(self) -> int:
        return self.env_steps

    @property
    def env_steps_per_training_step(self) -> float:
        return 1.0

    @property
    def training_steps_per_collection(self) -> int:
        return 1

    @property
    def updates_per_training_step(self) -> int:  # type: ignore[override]
        return 1

    def warmup_env_steps(self) -> int:
        return 0

    def updates_in_this_step(self) -> int:
        return 1

    def end_training_step(self, dataloader_iter: Any) -> None:
        """Nothing: one update per training step, the datamodule's loader ends its own epochs."""

    def run_updates(self, dataloader_iter: Any) -> Tensor | None:
        batch, _, _ = next(dataloader_iter)
        return self.update(self.batch_on_device(batch))

    def batch_on_device(self, batch: Any) -> ReplayBufferSamples:
        """A datamodule's batch (on the CPU) on the module's device, as ``ReplayBufferSamples``."""
        if not isinstance(batch, ReplayBufferSamples):
            if isinstance(batch, tuple) and len(batch) >= 5:
                batch = ReplayBufferSamples(*batch[:5])
            else:
                raise TypeError(
                    f"{type(self).__name__} takes batches of ReplayBufferSamples(obs, actions, rewards, terminated, "
                    f"next_obs) (rl_lightning.data.offline.TransitionsDataModule), got {type(batch).__name__}"
                )
        return move_data_to_device(batch, self.device)

    def on_train_epoch_end(self) -> None:
        self._charts.end_epoch(self)

    def log_charts(self) -> None:
        """The clock (updates) and the learning rate (no episodes are played in training)."""
        if not self._attached:
            return
        metrics: dict[str, Tensor | float] = {"charts/updates": float(self.global_step)}
        if self.trainer.optimizers:
            metrics["charts/learning_rate"] = self.trainer.optimizers[0].param_groups[0]["lr"]
        self._charts.log(self, metrics)

    def make_source(self, envs: Any) -> Any:
        raise SettingsError(f"{type(self).__name__} steps no env for training: it trains on a dataset")

    def explore(self, obs: Tensor, generator: torch.Generator) -> Tensor:
        return self.policy_actions(obs, greedy=False)

    def target_network_pairs(self) -> list[tuple[torch.nn.Module, torch.nn.Module]]:
        return []


def _is_set(normalizer: ObservationNormalizer) -> bool:
    """Whether the normaliser's statistics were set (a fresh one counts 1e-4 samples)."""
    stats = normalizer.stats.values() if isinstance(normalizer.stats, torch.nn.ModuleDict) else [normalizer.stats]
    return all(float(s.count) > 1.0 for s in stats)


def _set_moments(stats: Any, obs: Tensor) -> None:
    """``stats``' mean and variance those of ``obs`` ``(num_transitions, *shape)``, its count their number."""
    check_int("the dataset's transitions", obs.shape[0], 2)
    values = obs.reshape(obs.shape[0], *stats.shape).to(torch.float64)
    stats.mean.copy_(values.mean(0).to(stats.mean.device))
    stats.var.copy_(values.var(0, unbiased=False).to(stats.var.device))
    stats.count.fill_(float(obs.shape[0]))
