"""The algorithms, each a LightningModule on the shared ``RLModule`` base."""

from rl_lightning.algos.base import RLModule
from rl_lightning.algos.bc import BCModule
from rl_lightning.algos.dqn import DQNModule
from rl_lightning.algos.iql import IQLModule
from rl_lightning.algos.off_policy import OffPolicyModule
from rl_lightning.algos.offline import OfflineModule
from rl_lightning.algos.on_policy import OnPolicyModule
from rl_lightning.algos.ppo import PPOModule
from rl_lightning.algos.registry import algorithm_classes
from rl_lightning.algos.sac import SACModule
from rl_lightning.algos.td3 import TD3Module
from rl_lightning.algos.td3_bc import TD3BCModule
from rl_lightning.algos.vpg import VPGModule

#: Every algorithm module (the CLI's ``--model`` choices, the hints of unsupported-space errors), as
#: ``rl_lightning.algos.registry`` lists them: VPG, DQN, PPO, SAC, TD3, and the offline BC, TD3+BC, IQL.
ALGORITHMS = tuple(algorithm_classes().values())

__all__ = [
    "ALGORITHMS",
    "BCModule",
    "DQNModule",
    "IQLModule",
    "OffPolicyModule",
    "OfflineModule",
    "OnPolicyModule",
    "PPOModule",
    "RLModule",
    "SACModule",
    "TD3BCModule",
    "TD3Module",
    "VPGModule",
]
