"""Callbacks keyed on environment steps: the budget, schedules, target sync, evaluation and videos."""

from rl_lightning.callbacks.budget import EnvStepBudget
from rl_lightning.callbacks.epsilon import EpsilonDecay
from rl_lightning.callbacks.evaluation import Evaluation, StopWhenSolved, evaluate_policy
from rl_lightning.callbacks.interrupt import CheckpointOnStop
from rl_lightning.callbacks.lr_decay import LinearLRDecay
from rl_lightning.callbacks.target_sync import TargetNetworkSync, update_target_network
from rl_lightning.callbacks.updates import UpdateCallback
from rl_lightning.callbacks.video import GridVideoLogger
from rl_lightning.checkpoints import EnvStepCheckpoint

__all__ = [
    "CheckpointOnStop",
    "EnvStepBudget",
    "EnvStepCheckpoint",
    "EpsilonDecay",
    "Evaluation",
    "GridVideoLogger",
    "LinearLRDecay",
    "StopWhenSolved",
    "TargetNetworkSync",
    "UpdateCallback",
    "evaluate_policy",
    "update_target_network",
]
