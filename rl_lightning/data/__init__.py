"""Data sources: rollouts (VPG) and replay (DQN) as torch IterableDatasets."""

import warnings

from rl_lightning.data.rollout import Rollout, RolloutSource, RolloutTensors

# Our sources run in the main process (num_workers=0) and define __len__ on purpose: with a
# length Lightning does not prefetch, which keeps on-policy data on-policy. Lightning's
# warning about __len__ with several workers does not apply.
warnings.filterwarnings("ignore", message=r"Your `IterableDataset` has `__len__` defined")

__all__ = ["Rollout", "RolloutSource", "RolloutTensors"]
