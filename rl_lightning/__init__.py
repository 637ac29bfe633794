"""rl_lightning: reinforcement learning written as ordinary PyTorch Lightning."""

from rl_lightning.algos.dqn import DQNModule
from rl_lightning.algos.vpg import VPGModule
from rl_lightning.envs import CartPole, VectorEnv, make_envs, register, registered_env_ids
from rl_lightning.nets import PolicyNetwork, QNetwork

__version__ = "0.1.0"

__all__ = [
    "CartPole",
    "DQNModule",
    "PolicyNetwork",
    "QNetwork",
    "VPGModule",
    "VectorEnv",
    "make_envs",
    "register",
    "registered_env_ids",
]
