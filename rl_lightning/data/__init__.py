"""Data sources: rollouts (VPG) and replay (DQN) as torch IterableDatasets."""

import warnings

from rl_lightning.data.replay import ReplayBuffer, ReplayBufferSamples, ReplaySource, epsilon_greedy
from rl_lightning.data.rollout import Rollout, RolloutSource, RolloutTensors

# Our sources run in the main process (num_workers=0) and define __len__ on purpose: with a
# length Lightning does not prefetch, which keeps on-policy data on-policy. Lightning's
# warning about __len__ with several workers does not apply.
warnings.filterwarnings("ignore", message=r"Your `IterableDataset` has `__len__` defined")
# Our modules log their charts once per epoch (one rollout for VPG), which Lightning writes
# whatever log_every_n_steps is; its hint to lower log_every_n_steps for short epochs is moot.
warnings.filterwarnings(
    "ignore", message=r"The number of training batches \(\d+\) is smaller than the logging interval"
)

__all__ = [
    "ReplayBuffer",
    "ReplayBufferSamples",
    "ReplaySource",
    "Rollout",
    "RolloutSource",
    "RolloutTensors",
    "epsilon_greedy",
]
