"""The algorithms, each a LightningModule on the shared ``RLModule`` base."""

from rl_lightning.algos.base import RLModule
from rl_lightning.algos.dqn import DQNModule
from rl_lightning.algos.off_policy import OffPolicyModule
from rl_lightning.algos.on_policy import OnPolicyModule
from rl_lightning.algos.ppo import PPOModule
from rl_lightning.algos.registry import algorithm_classes
from rl_lightning.algos.sac import SACModule
from rl_lightning.algos.td3 import TD3Module
from rl_lightning.algos.vpg import VPGModule

#: Every algorithm module (the CLI's ``--model`` choices, the hints of unsupported-space errors), as
#: ``rl_lightning.algos.registry`` lists them: VPG, DQN, PPO, SAC, TD3.
ALGORITHMS = tuple(algorithm_classes().values())

__all__ = [
    "ALGORITHMS",
    "DQNModule",
    "OffPolicyModule",
    "OnPolicyModule",
    "PPOModule",
    "RLModule",
    "SACModule",
    "TD3Module",
    "VPGModule",
]
