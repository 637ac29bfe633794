"""Callbacks keyed on environment steps: schedules, target sync, evaluation and videos."""

from rl_lightning.callbacks.evaluation import Evaluation, evaluate_policy
from rl_lightning.callbacks.lr_decay import LinearLRDecay
from rl_lightning.callbacks.video import GridVideoLogger

__all__ = ["Evaluation", "GridVideoLogger", "LinearLRDecay", "evaluate_policy"]
