"""The algorithms, each a LightningModule on the shared ``RLModule`` base."""

from rl_lightning.algos.base import RLModule
from rl_lightning.algos.dqn import DQNModule
from rl_lightning.algos.ppo import PPOModule
from rl_lightning.algos.vpg import VPGModule

#: Every algorithm module (the CLI's ``--model`` choices, the hints of unsupported-space errors).
ALGORITHMS = (VPGModule, DQNModule, PPOModule)

__all__ = ["ALGORITHMS", "DQNModule", "PPOModule", "RLModule", "VPGModule"]
