"""Data sources: rollouts (VPG) and replay (DQN) as torch IterableDatasets that step their envs."""

from rl_lightning.data.episodes import EpisodeTracker
from rl_lightning.data.frame_replay import FrameStackReplayBuffer
from rl_lightning.data.offline import Transitions, TransitionsDataModule, episode_returns, fill_replay_buffer
from rl_lightning.data.prioritized import PrioritizedFrameStackReplayBuffer, PrioritizedReplayBuffer, SumTree
from rl_lightning.data.replay import ReplaySource, epsilon_greedy
from rl_lightning.data.replay_buffer import ReplayBuffer, ReplayBufferSamples
from rl_lightning.data.rollout import Rollout, RolloutSource, RolloutTensors
from rl_lightning.data.source import EnvSource

__all__ = [
    "EnvSource",
    "EpisodeTracker",
    "FrameStackReplayBuffer",
    "PrioritizedFrameStackReplayBuffer",
    "PrioritizedReplayBuffer",
    "ReplayBuffer",
    "ReplayBufferSamples",
    "ReplaySource",
    "Rollout",
    "RolloutSource",
    "RolloutTensors",
    "SumTree",
    "Transitions",
    "TransitionsDataModule",
    "episode_returns",
    "epsilon_greedy",
    "fill_replay_buffer",
]
