"""What every data source shares: the envs, the observation to act on next, a private generator
for the policy's draws, the env-step counter and the episode tracker."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch import Tensor
from torch.utils.data import DataLoader, IterableDataset

from rl_lightning._checks import check_int, check_seed
from rl_lightning.data.episodes import EpisodeTracker
from rl_lightning.envs.base import VectorEnv
from rl_lightning.envs.spaces import as_tree, plain

#: Vector steps between two checks of the stop flag inside a rollout.
STOP_CHECK_EVERY = 64


class EnvSource(IterableDataset):
    """Base of the data sources (``RolloutSource`` and its actor-critics, ``ReplaySource``): a torch
    ``IterableDataset`` that steps ``envs`` itself, one training batch per item, generated when the item is
    pulled (the module's training step pulls each update's batch after the previous update:
    ``training_step(self, dataloader_iter)``), with a length (update slots per epoch). Subclasses implement
    ``next_batch``.

    ``env_steps`` counts the env steps of *all* processes (``num_envs * world_size`` per vectorised
    step): every rank steps the same number of envs in lock-step, so each rank's counter holds the
    run's total without a collective.

    Args:
        envs: the vector env (its device is the source's device).
        seed: seed of the generator the policy draws its actions from.
        world_size: processes each running their own source.
        env_steps: env steps already taken (a resumed run).
    """

    def __init__(self, envs: VectorEnv, seed: int = 0, world_size: int = 1, env_steps: int = 0):
        super().__init__()
        if not isinstance(envs, VectorEnv):
            raise TypeError(f"envs must be a rl_lightning VectorEnv (see make_envs), got {type(envs).__name__}")
        self.envs = envs
        self.device = envs.device
        self.world_size = check_int("world_size", world_size, 1)
        self.env_steps = check_int("env_steps", env_steps, 0)
        #: ``env_steps`` before the data of the newest batch was collected (schedules key on it:
        #: an update's learning rate is the one for the env steps taken before its data).
        self.env_steps_before_batch = self.env_steps
        self.generator = torch.Generator(device=self.device).manual_seed(check_seed("seed", seed))
        self.episodes = EpisodeTracker(envs.num_envs, self.device, getattr(envs, "num_agents", 1))
        self._obs: Tensor | None = None  # the envs are reset on the first step, not at construction
        #: Whether the run was asked to stop (the module wires Lightning's SIGTERM flag here); the
        #: env loops check it between rollouts and every few hundred steps of a long warm-up.
        self.should_stop: Callable[[], bool] = lambda: False

    def configure_run(self, seed: int, world_size: int, env_steps: int) -> None:
        """Set what the run decides, not the algorithm (``RLModule`` calls it on the source
        ``make_source`` returned, with values it checked): the generator's seed, the processes and the
        env steps already taken."""
        self.generator.manual_seed(seed)
        self.world_size = world_size
        self.env_steps = self.env_steps_before_batch = env_steps

    def __len__(self) -> int:
        raise NotImplementedError

    def __iter__(self) -> Iterator[Any]:
        # One Lightning epoch: ``len(self)`` items of an endless stream. The stream, not the epoch,
        # decides when to collect, so a resumed run (whose first epoch Lightning may count from a
        # batch index other than 0) yields exactly the items an uninterrupted one would.
        for _ in range(len(self)):
            yield self.next_batch()

    def next_batch(self) -> Any:
        """The next training batch, stepping the envs when its data must be collected."""
        raise NotImplementedError

    def check_stop(self) -> None:
        """Raise Lightning's ``SIGTERMException`` if the run was asked to stop (SIGTERM): Lightning
        then ends the run as it does between batches."""
        if self.should_stop():
            raise SIGTERMException()

    def rollout_snapshot(self) -> dict[str, Any] | None:
        """Check for a stop request, then take the state a rollout starts from (None where the envs
        cannot restore theirs): a stop heard in the middle of the rollout returns to it with
        :meth:`restore_snapshot`, so the checkpoint resumes exactly, replaying that rollout."""
        self.check_stop()
        return self.state_dict() if self.envs.restorable else None

    def stop_requested_in_rollout(self, step: int) -> bool:
        """Whether to stop at vector step ``step`` of a rollout (checked every
        ``STOP_CHECK_EVERY`` steps: a long rollout stops within a fraction of a second)."""
        return step % STOP_CHECK_EVERY == STOP_CHECK_EVERY - 1 and self.should_stop()

    def restore_snapshot(self, snapshot: dict[str, Any] | None) -> None:
        """Go back to a :meth:`rollout_snapshot` (a stop in the middle of a rollout)."""
        if snapshot is not None:
            self.load_state_dict(snapshot)

    def reset_envs(self) -> Tensor:
        """Reset every env (their unfinished episodes are not counted) and return the first obs."""
        self._obs, _ = self.envs.reset()
        self.episodes.reset()
        return self._obs

    @property
    def obs(self) -> Tensor:
        """The observation the policy acts on next (the envs are reset on first use)."""
        return self.reset_envs() if self._obs is None else self._obs

    def count(self, vector_steps: int) -> None:
        """Count ``vector_steps`` lock-step steps of every env of every process."""
        self.env_steps += vector_steps * self.envs.env_steps_per_step * self.world_size

    def state_dict(self) -> dict[str, Any]:
        """Envs, generator, counters, the current obs and the running episodes: a restored source
        continues exactly where this one is."""
        return {
            "envs": self.envs.state_dict(),
            "generator": self.generator.get_state(),
            "env_steps": self.env_steps,
            "env_steps_before_batch": self.env_steps_before_batch,
            "obs": None if self._obs is None else plain(self._obs.clone()),
            "episodes": self.episodes.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` of a source over the same env id and ``num_envs``."""
        self.envs.load_state_dict(state["envs"])
        self.generator.set_state(state["generator"])
        self.env_steps = state["env_steps"]
        self.env_steps_before_batch = state["env_steps_before_batch"]
        self.episodes.load_state_dict(state["episodes"])
        if self.envs.restorable:
            self._obs = None if state["obs"] is None else as_tree(state["obs"]).to(self.device)
        else:  # the envs restart fresh: so do their episodes
            self._obs = None
            self.episodes.reset()


class SourceLoader(DataLoader):
    """The ``DataLoader`` Lightning iterates for a module: the source itself, one batch per item, as the source
    builds it (on its device, no collation, no worker processes: the envs step in this process).

    It is resumable, and says so to Lightning (``state_dict`` / ``load_state_dict``, so a resume inside an epoch
    is not warned about): the source's state (envs, generators, counters, buffer, a rollout in progress) is saved
    and restored with the module's checkpoint payload, so the loader has no state of its own.
    """

    def __init__(self, source: EnvSource):
        super().__init__(source, batch_size=None, num_workers=0, collate_fn=_as_built)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Nothing: the module's checkpoint payload restores the source."""


def _as_built(batch: Any) -> Any:
    return batch
