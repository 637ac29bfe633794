"""Pendulum-v1 in torch, step for step the same dynamics as gymnasium's ``Pendulum-v1``."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from rl_lightning._checks import check_float
from rl_lightning.envs._classic_control import ClassicControlEnv, compiled_flags, stacks_rows
from rl_lightning.envs.render import disc, paint, pixel_grid, rectangle

# gymnasium.envs.classic_control.pendulum.PendulumEnv's constants.
MAX_SPEED = 8.0
MAX_TORQUE = 2.0
DT = 0.05
GRAVITY = 10.0
MASS = 1.0
LENGTH = 1.0
RESET_ANGLE, RESET_SPEED = math.pi, 1.0
MAX_EPISODE_STEPS = 200


class PendulumConstants(NamedTuple):
    """What :func:`pendulum_dynamics` reads: tensors in the state's dtype and device, and gravity's gain."""

    pi: Tensor
    torque_gain: Tensor  # float32 like the action: gymnasium multiplies its float32 action in float32 too
    gravity_gain: float  # 3 g / (2 l)

    @classmethod
    def make(cls, gravity: float, dtype: torch.dtype, device: torch.device | str) -> PendulumConstants:
        return cls(
            torch.tensor(math.pi, dtype=dtype, device=device),
            torch.tensor(3.0 / (MASS * LENGTH**2), device=device),
            3 * gravity / (2 * LENGTH),
        )


def pendulum_dynamics(
    state: Tensor, actions: Tensor, constants: PendulumConstants
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """:class:`Pendulum`'s dynamics and observation, what ``compile=True`` compiles: the whole step but
    the truncation (every env on the same step, decided on the host) and its reset.

    Args:
        state: ``(2, n)`` (angle, angular velocity), float32 or float64.
        actions: float32 ``(n, 1)`` torques, clipped to [-2, 2].
        constants: :class:`PendulumConstants` of ``state``'s dtype and device.

    Returns:
        The next state ``(2, n)``, its observation ``(n, 3)``, reward float32 ``(n,)`` and terminated bool
        ``(n,)`` (never).
    """
    angle, speed = state.unbind()
    torque = actions[:, 0]
    # reward = -(normalised angle^2 + 0.1 speed^2 + 0.001 torque^2), of the state before the step.
    cost = torch.remainder(angle + constants.pi, 2 * math.pi).sub_(constants.pi).square_()
    cost.addcmul_(speed, speed, value=0.1).addcmul_(torque, torque, value=0.001)
    reward = cost.neg_().float()

    # speed += (3 g / 2 l sin(angle) + 3 / (m l^2) torque) dt, clipped; angle += speed dt.
    # The torque term is float32 in gymnasium too (numpy keeps its float32 action).
    acceleration = torch.add(torque * constants.torque_gain, torch.sin(angle), alpha=constants.gravity_gain)
    if stacks_rows():  # rows stacked, not written into views (see cartpole_step)
        speed = torch.add(speed, acceleration, alpha=DT).clamp(-MAX_SPEED, MAX_SPEED)
        final = torch.stack([torch.add(angle, speed, alpha=DT), speed])
    else:
        final = torch.empty_like(state)
        torch.add(speed, acceleration, alpha=DT, out=final[1]).clamp_(-MAX_SPEED, MAX_SPEED)
        torch.add(angle, final[1], alpha=DT, out=final[0])
    terminated = torch.zeros(angle.shape, dtype=torch.bool, device=angle.device)
    return final, pendulum_observation(final), reward, compiled_flags(terminated)


def pendulum_observation(state: Tensor) -> Tensor:
    """Float32 observations ``(n, 3)`` = (cos angle, sin angle, angular velocity) of a ``(2, n)`` state, in
    fresh memory (a transposed view of a ``(3, n)`` tensor)."""
    angle, speed = state.unbind()
    if stacks_rows():  # rows stacked, not written into views (see cartpole_step)
        return torch.stack([torch.cos(angle), torch.sin(angle), speed]).float().T
    obs = torch.empty(3, state.shape[1], device=state.device)
    torch.cos(angle, out=obs[0])
    torch.sin(angle, out=obs[1])
    obs[2] = speed
    return obs.T


class Pendulum(ClassicControlEnv):
    """``num_envs`` copies of gymnasium's ``Pendulum-v1``: a torque in [-2, 2] (``Box`` action
    of shape (1,)) swings a pendulum up; reward ``-(angle^2 + 0.1 speed^2 + 0.001 torque^2)``
    (angle normalised to [-pi, pi), 0 is upright), no termination, truncation after 200 steps.

    Arguments as :class:`~rl_lightning.envs._classic_control.ClassicControlEnv`'s (float64: the
    torque terms in float32 as numpy does; trajectories then agree with gymnasium's to rounding),
    and ``gravity``, gymnasium's ``g`` (``gym.make("Pendulum-v1", g=...)``), 10.0 by default.
    ``env.state`` is ``(num_envs, 2)`` = (angle, angular velocity); the angle is not wrapped (as
    in gymnasium).
    """

    state_size = 2
    cpu_compile_min_envs = 65_536  # at 65,536 envs 74 vs 70 M steps/s, at 4,096: 25 vs 27 (compiled vs eager)
    default_max_episode_steps = MAX_EPISODE_STEPS
    render_fps = 30
    dynamics = staticmethod(pendulum_dynamics)
    observe = staticmethod(pendulum_observation)
    # Every env is truncated and reset on the same step, decided on the host: the step between two resets is
    # the dynamics alone (with ``compile=True``, one compiled function with the observation).
    resets_every_step = False

    def __init__(
        self,
        num_envs: int,
        seed: int | None = None,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
        max_episode_steps: int | None = None,
        gravity: float = GRAVITY,
        compile: bool = False,
    ):
        self.gravity = check_float("gravity", gravity)
        super().__init__(num_envs, seed, device, dtype, max_episode_steps, compile)

    def _spaces(self) -> tuple[gym.spaces.Box, gym.spaces.Box]:
        high = np.array([1.0, 1.0, MAX_SPEED], dtype=np.float32)
        observation_space = gym.spaces.Box(-high, high, dtype=np.float32)
        return observation_space, gym.spaces.Box(-MAX_TORQUE, MAX_TORQUE, (1,), dtype=np.float32)

    def _setup(self) -> None:
        # Pendulum never terminates, so every env's episode starts on the same step: one start
        # time on the host says when all of them are truncated and reset, without a device sync.
        self._episode_start = 0
        self._constants = PendulumConstants.make(self.gravity, self.dtype, self.device)

    @property
    def episode_steps(self) -> Tensor:
        """Steps taken so far in each env's current episode, int64 ``(num_envs,)``."""
        return torch.full((self.num_envs,), self._clock - self._episode_start, device=self.device)

    def _random_states(self) -> Tensor:
        states = torch.empty(2, self.num_envs, dtype=self.dtype, device=self.device)
        states[0].uniform_(-RESET_ANGLE, RESET_ANGLE, generator=self.generator)
        states[1].uniform_(-RESET_SPEED, RESET_SPEED, generator=self.generator)
        return states

    def _obs(self, state: Tensor, private: bool = False) -> Tensor:
        return pendulum_observation(state)

    def _reset_all(self) -> Tensor:
        self._state = self._random_states()
        self._episode_start = self._clock
        return self._obs(self._state)

    def _step(self, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, dict[str, Any]]:
        final, final_obs, reward, terminated = self._dynamics(self._state, actions, self._constants)
        self._clock += 1
        if self._clock - self._episode_start < self.max_episode_steps:
            self._state, obs = final, final_obs
            truncated = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        else:  # gymnasium's TimeLimit truncates every env on this step
            obs = self._reset_all()
            truncated = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        return obs, reward, terminated, truncated, {"final_observation": final_obs}

    def draw(self, obs: Tensor) -> Tensor:
        return paint(obs, _pendulum_labels, _PALETTE, 100, 100)


# Label -> colour, for the label maps _pendulum_labels paints.
_PALETTE = torch.tensor([(255, 255, 255), (204, 77, 77), (0, 0, 0)], dtype=torch.uint8)
_BACKGROUND, _ROD, _AXLE = range(3)
# gymnasium's screen, in world units: 2.2 either side of the axle.
_SCREEN_SIZE = 4.4
_ROD_WIDTH, _AXLE_RADIUS = 0.2, 0.05


def _pendulum_labels(obs: Tensor, height: int, width: int) -> Tensor:
    """uint8 label maps ``(batch, height, width)`` of Pendulum observations ``(batch, 3)``, drawn like
    gymnasium's renderer (scaled down): the rod from the axle, upright for angle 0, turning
    counter-clockwise with the angle. gymnasium's arrow of the last torque is left out: the
    observation does not hold it."""
    x, y = pixel_grid(height, width, _SCREEN_SIZE, _SCREEN_SIZE)
    x, y = x - _SCREEN_SIZE / 2, y - _SCREEN_SIZE / 2  # from the axle
    # The rod's direction from the axle is (-sin, cos) of the angle atan2(sin, cos).
    norm = torch.hypot(obs[:, 0], obs[:, 1]).clamp(min=1e-6)
    direction_x = (-obs[:, 1] / norm).view(-1, 1, 1)
    direction_y = (obs[:, 0] / norm).view(-1, 1, 1)
    labels = torch.zeros(obs.shape[0], height, width, dtype=torch.uint8)
    rod = rectangle(x, y, 0.0, 0.0, direction_x, direction_y, LENGTH, _ROD_WIDTH / 2)
    rod |= disc(x, y, 0.0, 0.0, _ROD_WIDTH / 2) | disc(x, y, direction_x, direction_y, _ROD_WIDTH / 2)
    labels.masked_fill_(rod, _ROD)
    labels.masked_fill_(disc(x, y, 0.0, 0.0, _AXLE_RADIUS), _AXLE)
    return labels
