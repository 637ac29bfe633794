"""Torch vector environments: every copy stepped in lock-step as tensors on one device."""

from rl_lightning.envs.acrobot import Acrobot
from rl_lightning.envs.base import VectorEnv
from rl_lightning.envs.cartpole import CartPole, CartPoleNoVel
from rl_lightning.envs.fused import FusedCartPole
from rl_lightning.envs.gym_adapter import GymnasiumVectorEnv
from rl_lightning.envs.mountain_car import MountainCar, MountainCarContinuous
from rl_lightning.envs.pendulum import Pendulum
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
from rl_lightning.envs.registry import make_envs, register, registered_env_ids

register("CartPole-v1", CartPole)
register("CartPole-gpu", CartPole)  # the seeds' name, kept as an alias
register("CartPoleNoVel-v1", CartPoleNoVel)
register("MemoryProbe-v0", MemoryProbe)
register("Acrobot-v1", Acrobot)
register("MountainCar-v0", MountainCar)
register("MountainCarContinuous-v0", MountainCarContinuous)
register("Pendulum-v1", Pendulum)
for _probe in (Probe1, Probe2, Probe3, Probe4, Probe5, ContinuousProbe1, ContinuousProbe2, ImageProbe5):
    register(f"{_probe.__name__}-v0", _probe)

__all__ = [
    "Acrobot",
    "CartPole",
    "CartPoleNoVel",
    "ContinuousProbe1",
    "ContinuousProbe2",
    "FusedCartPole",
    "GymnasiumVectorEnv",
    "ImageProbe5",
    "MemoryProbe",
    "MountainCar",
    "MountainCarContinuous",
    "Pendulum",
    "Probe1",
    "Probe2",
    "Probe3",
    "Probe4",
    "Probe5",
    "VectorEnv",
    "make_envs",
    "register",
    "registered_env_ids",
]
