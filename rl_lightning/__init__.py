"""rl_lightning: reinforcement learning written as ordinary PyTorch Lightning."""

from rl_lightning.algos import (
    BCModule,
    DQNModule,
    IQLModule,
    OfflineModule,
    OffPolicyModule,
    OnPolicyModule,
    PPOModule,
    RLModule,
    SACModule,
    TD3BCModule,
    TD3Module,
    VPGModule,
)
from rl_lightning.callbacks.evaluation import EvalResult, evaluate_policy
from rl_lightning.data.her import HERSettings
from rl_lightning.data.offline import Transitions, TransitionsDataModule, fill_replay_buffer
from rl_lightning.envs import (
    Acrobot,
    AleVectorEnv,
    CartPole,
    EnvPoolVectorEnv,
    GymnasiumVectorEnv,
    MountainCar,
    MountainCarContinuous,
    Pendulum,
    VectorEnv,
    make_envs,
    register,
    registered_env_ids,
)
from rl_lightning.nets import PolicyNetwork, QNetwork
from rl_lightning.playing import GreedyPlay, play_greedy

__version__ = "0.1.0"

__all__ = [
    "Acrobot",
    "AleVectorEnv",
    "BCModule",
    "CartPole",
    "DQNModule",
    "EnvPoolVectorEnv",
    "EvalResult",
    "GreedyPlay",
    "GymnasiumVectorEnv",
    "HERSettings",
    "IQLModule",
    "MountainCar",
    "MountainCarContinuous",
    "OffPolicyModule",
    "OfflineModule",
    "OnPolicyModule",
    "PPOModule",
    "Pendulum",
    "PolicyNetwork",
    "QNetwork",
    "RLModule",
    "SACModule",
    "TD3BCModule",
    "TD3Module",
    "Transitions",
    "TransitionsDataModule",
    "VPGModule",
    "VectorEnv",
    "evaluate_policy",
    "fill_replay_buffer",
    "make_envs",
    "play_greedy",
    "register",
    "registered_env_ids",
]
