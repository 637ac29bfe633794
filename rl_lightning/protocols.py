"""The contract between the modules and the callbacks, written down.

Callbacks use a LightningModule only through these protocols (``RLModule`` implements
``RLModuleProtocol``; ``DQNModule`` adds the other two), never through a private attribute of a
module or of its data source. A module of your own works with the callbacks once it has the
members of the protocols they need; each callback checks at the start of training and names
what is missing.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor, nn

from rl_lightning.data.rollout import RolloutTensors
from rl_lightning.envs.base import VectorEnv


@runtime_checkable
class RLModuleProtocol(Protocol):
    """What every callback may use: the env, the env-step clock, the run's plan and the policy."""

    hparams: Any  # ``hparams.env_id`` names the env
    device: torch.device

    @property
    def env_steps(self) -> int:
        """Environment steps taken so far by all processes together."""

    @property
    def env_steps_before_batch(self) -> int:
        """``env_steps`` before the data of the current training step was collected."""

    def planned_env_steps(self, optimizer_steps: int) -> int:
        """Env steps (all processes) of a run of ``optimizer_steps`` optimizer steps."""

    def act(self, obs: Any, greedy: bool = False) -> Tensor:
        """Actions for a batch of observations (or one): the most likely if ``greedy``."""

    def greedy_actor(self) -> Any:
        """A callable ``actor(obs, episode_start=None) -> actions`` for the greedy policy (it carries a
        recurrent policy's state)."""

    def make_envs(self, num_envs: int, seed: int, render: bool = False) -> VectorEnv:
        """A fresh instance of the module's env on its device (evaluation, videos); ``render``: one
        able to ``render()`` its frames (a gymnasium env; a native one draws any observation)."""

    def latest_rollout(self) -> RolloutTensors | None:
        """The newest on-policy rollout of the training envs, if the algorithm has one."""


@runtime_checkable
class EpsilonGreedyProtocol(RLModuleProtocol, Protocol):
    """A module that explores epsilon-greedily (``EpsilonDecay`` sets ``epsilon``)."""

    epsilon: float


@runtime_checkable
class EnvStepBudgetProtocol(RLModuleProtocol, Protocol):
    """A module whose run can be sized in env steps (``EnvStepBudget``)."""

    def optimizer_steps_for(self, total_env_steps: int) -> int:
        """The fewest optimizer steps of a run of at least ``total_env_steps`` env steps."""


@runtime_checkable
class TargetNetworkProtocol(RLModuleProtocol, Protocol):
    """A module with target networks (``TargetNetworkSync`` moves them towards the online ones)."""

    def target_network_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        """``(target, online)`` network pairs."""


def require(pl_module: Any, protocol: type, who: str) -> None:
    """Raise ``TypeError`` if ``pl_module`` does not implement ``protocol``, naming the callback
    ``who`` and the missing members."""
    if isinstance(pl_module, protocol):
        return
    members = [
        name
        for klass in protocol.__mro__
        if klass not in (Protocol, object, protocol.__mro__[-1])
        for name in {**getattr(klass, "__annotations__", {}), **vars(klass)}
        if not name.startswith("_")
    ]
    missing = sorted({name for name in members if not hasattr(pl_module, name)})
    raise TypeError(
        f"{who} needs a module implementing rl_lightning.protocols.{protocol.__name__}; "
        f"{type(pl_module).__name__} lacks {', '.join(missing) or 'some of its members'}"
    )
