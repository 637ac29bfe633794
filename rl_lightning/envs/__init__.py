"""Torch vector environments: every copy stepped in lock-step as tensors on one device."""

import warnings

import torch

from rl_lightning.deprecations import RLLightningDeprecationWarning
from rl_lightning.envs.acrobot import Acrobot
from rl_lightning.envs.ale_vector import AleVectorEnv
from rl_lightning.envs.base import VectorEnv
from rl_lightning.envs.bit_flipping import BitFlipping, bit_flipping_factory
from rl_lightning.envs.cartpole import CartPole, CartPoleNoVel
from rl_lightning.envs.envpool_adapter import EnvPoolVectorEnv
from rl_lightning.envs.gym_adapter import GymnasiumVectorEnv
from rl_lightning.envs.mountain_car import MountainCar, MountainCarContinuous
from rl_lightning.envs.multi_agent import MultiAgentVectorEnv
from rl_lightning.envs.pendulum import Pendulum
from rl_lightning.envs.pettingzoo_adapter import PettingZooVectorEnv
from rl_lightning.envs.privileged import PrivilegedBandit, PrivilegedBanditContinuous
from rl_lightning.envs.probes import (
    ContinuousProbe1,
    ContinuousProbe2,
    ImageProbe5,
    MemoryProbe,
    Probe1,
    Probe2,
    Probe3,
    Probe4,
    Probe5,
)
from rl_lightning.envs.ray_vector import RayVectorEnv
from rl_lightning.envs.registry import make_envs, register, registered_env_ids, solved_return
from rl_lightning.envs.role_assignment import RoleAssignment, role_assignment_factory
from rl_lightning.envs.structured_probes import DictProbe, MaskedProbe, MultiBinaryProbe, MultiDiscreteProbe
from rl_lightning.envs.vmas_adapter import VmasVectorEnv


def _deprecated_cartpole_gpu(
    num_envs: int, seed: int | None = None, device: torch.device | str = "cpu", compile: bool = False
) -> CartPole:
    """``"CartPole-gpu"``, an older name of ``"CartPole-v1"``: the same env, with a warning."""
    # stacklevel 3: this factory, make_envs, then the caller of make_envs.
    warnings.warn('env id "CartPole-gpu" is deprecated: use "CartPole-v1"', RLLightningDeprecationWarning, stacklevel=3)
    return CartPole(num_envs, seed, device, compile=compile)


# solved_return: gymnasium's reward_threshold where it has one; Pendulum-v1 has none, -200 is the
# usual bar (RL Zoo, CleanRL); MemoryProbe's optimum is 1.
register("CartPole-v1", CartPole, solved_return=475.0)
register("CartPole-gpu", _deprecated_cartpole_gpu, solved_return=475.0)
register("CartPoleNoVel-v1", CartPoleNoVel, solved_return=475.0)
register("MemoryProbe-v0", MemoryProbe, solved_return=1.0)
register("Acrobot-v1", Acrobot, solved_return=-100.0)
register("MountainCar-v0", MountainCar, solved_return=-110.0)
register("MountainCarContinuous-v0", MountainCarContinuous, solved_return=90.0)
register("Pendulum-v1", Pendulum, solved_return=-200.0)
for _probe in (Probe1, Probe2, Probe3, Probe4, Probe5, ContinuousProbe1, ContinuousProbe2, ImageProbe5):
    register(f"{_probe.__name__}-v0", _probe)
register("DictProbe-v0", DictProbe, solved_return=1.0)
register("MultiDiscreteProbe-v0", MultiDiscreteProbe, solved_return=1.0)
register("MultiBinaryProbe-v0", MultiBinaryProbe, solved_return=1.0)
register("MaskedProbe-v0", MaskedProbe)
register("PrivilegedBandit-v0", PrivilegedBandit)
register("PrivilegedBanditContinuous-v0", PrivilegedBanditContinuous)
for _num_bits in (10, 20):  # goal-conditioned (hindsight relabelling: rl_lightning.data.her)
    register(f"BitFlipping{_num_bits}-v0", bit_flipping_factory(_num_bits))
# Multi-agent, agents as rows: num_envs counts scenes of 3 agents (rl_lightning.envs.multi_agent).
register("RoleAssignment-v0", role_assignment_factory)

__all__ = [
    "Acrobot",
    "AleVectorEnv",
    "BitFlipping",
    "CartPole",
    "CartPoleNoVel",
    "ContinuousProbe1",
    "ContinuousProbe2",
    "DictProbe",
    "EnvPoolVectorEnv",
    "GymnasiumVectorEnv",
    "ImageProbe5",
    "MaskedProbe",
    "MemoryProbe",
    "MountainCar",
    "MountainCarContinuous",
    "MultiAgentVectorEnv",
    "MultiBinaryProbe",
    "MultiDiscreteProbe",
    "Pendulum",
    "PettingZooVectorEnv",
    "PrivilegedBandit",
    "PrivilegedBanditContinuous",
    "Probe1",
    "Probe2",
    "Probe3",
    "Probe4",
    "Probe5",
    "RayVectorEnv",
    "RoleAssignment",
    "VectorEnv",
    "VmasVectorEnv",
    "make_envs",
    "register",
    "registered_env_ids",
    "solved_return",
]
