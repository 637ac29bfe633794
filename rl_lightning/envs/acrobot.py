"""Acrobot-v1 in torch, step for step the same dynamics as gymnasium's ``Acrobot-v1``."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from rl_lightning.envs._classic_control import ClassicControlEnv, compiled_flags, stacks_rows
from rl_lightning.envs.render import disc, paint, pixel_grid, rectangle

# gymnasium.envs.classic_control.acrobot.AcrobotEnv's constants ("book" dynamics, no torque noise).
DT = 0.2
LINK_LENGTH_1 = 1.0
LINK_LENGTH_2 = 1.0
LINK_MASS_1 = 1.0
LINK_MASS_2 = 1.0
LINK_COM_POS_1 = 0.5
LINK_COM_POS_2 = 0.5
LINK_MOI = 1.0
GRAVITY = 9.8
MAX_VEL_1 = 4 * math.pi
MAX_VEL_2 = 9 * math.pi
TORQUES = (-1.0, 0.0, 1.0)
RESET_BOUND = 0.1
MAX_EPISODE_STEPS = 500

# The equations of motion's constant coefficients, folded in float64.
_D1_CONSTANT = LINK_MASS_1 * LINK_COM_POS_1**2 + LINK_MASS_2 * (LINK_LENGTH_1**2 + LINK_COM_POS_2**2) + 2 * LINK_MOI
_D1_COS = LINK_MASS_2 * 2 * LINK_LENGTH_1 * LINK_COM_POS_2
_D2_CONSTANT = LINK_MASS_2 * LINK_COM_POS_2**2 + LINK_MOI
_D2_COS = LINK_MASS_2 * LINK_LENGTH_1 * LINK_COM_POS_2
_PHI2 = LINK_MASS_2 * LINK_COM_POS_2 * GRAVITY
_PHI1 = (LINK_MASS_1 * LINK_COM_POS_1 + LINK_MASS_2 * LINK_LENGTH_1) * GRAVITY
_CORIOLIS = LINK_MASS_2 * LINK_LENGTH_1 * LINK_COM_POS_2


class AcrobotConstants(NamedTuple):
    """The tensors :func:`acrobot_dynamics` reads, in the state's dtype and device."""

    torques: Tensor  # (3,): action -> torque
    minus_d1_constant: Tensor
    d2_constant: Tensor
    phi2: Tensor
    turns_per_radian: Tensor
    minus_one: Tensor
    velocity_low: Tensor  # (2, 1)
    velocity_high: Tensor  # (2, 1)

    @classmethod
    def make(cls, dtype: torch.dtype, device: torch.device | str) -> AcrobotConstants:
        def constant(value: float) -> Tensor:
            return torch.tensor(value, dtype=dtype, device=device)

        velocity_high = torch.tensor([[MAX_VEL_1], [MAX_VEL_2]], dtype=dtype, device=device)
        return cls(
            torch.tensor(TORQUES, dtype=dtype, device=device),
            constant(-_D1_CONSTANT),
            constant(_D2_CONSTANT),
            constant(_PHI2),
            constant(1 / (2 * math.pi)),
            constant(-1.0),
            -velocity_high,
            velocity_high,
        )


def acrobot_obs(state: Tensor) -> Tensor:
    """Float32 observations ``(n, 6)`` = (cos theta1, sin theta1, cos theta2, sin theta2, dtheta1,
    dtheta2) of a ``(4, n)`` state, in fresh memory (a transposed view of a ``(6, n)`` tensor)."""
    if stacks_rows():  # rows stacked, not written into views (see cartpole_step)
        cos, sin = torch.cos(state[:2]), torch.sin(state[:2])
        return torch.stack([cos[0], sin[0], cos[1], sin[1], state[2], state[3]]).float().T
    num_envs = state.shape[1]
    obs = torch.empty(3, 2, num_envs, device=state.device)
    torch.cos(state[:2], out=obs[:2, 0])  # (cos theta1, cos theta2)
    torch.sin(state[:2], out=obs[:2, 1])
    obs[2] = state[2:]
    return obs.view(6, num_envs).T


def _derivatives(state: Tensor, torque: Tensor, constants: AcrobotConstants) -> Tensor:
    """gymnasium's ``_dsdt`` ("book" dynamics): d/dt ``(4, n)`` of ``state`` (theta1, theta2, dtheta1,
    dtheta2) under ``torque`` ``(n,)``."""
    theta1, theta2, dtheta1, dtheta2 = state.unbind()
    cos2, sin2 = torch.cos(theta2), torch.sin(theta2)
    # -d1 rather than d1 saves negating ddtheta1 (and negations are exact).
    minus_d1 = torch.add(constants.minus_d1_constant, cos2, alpha=-_D1_COS)
    d2 = torch.add(constants.d2_constant, cos2, alpha=_D2_COS)
    # cos(x - pi/2) = sin(x)
    phi2 = torch.sin(theta1 + theta2).mul_(constants.phi2)
    # phi1 = -c dtheta2^2 sin2 - 2 c dtheta2 dtheta1 sin2 + (m1 lc1 + m2 l1) g sin(theta1) + phi2
    #      = (m1 lc1 + m2 l1) g sin(theta1) + phi2 - c sin2 dtheta2 (dtheta2 + 2 dtheta1),
    # with c = m2 l1 lc2 (_CORIOLIS).
    phi1 = torch.add(phi2, torch.sin(theta1), alpha=_PHI1)
    phi1.addcmul_(sin2 * dtheta2, torch.add(dtheta2, dtheta1, alpha=2.0), value=-_CORIOLIS)
    minus_d2_over_d1 = d2 / minus_d1
    # ddtheta2 = (torque + d2/d1 phi1 - c dtheta1^2 sin2 - phi2) / (m2 lc2^2 + I2 - d2^2/d1)
    numerator = torch.sub(torque, phi2).addcmul_(minus_d2_over_d1, phi1, value=-1.0)
    numerator.addcmul_(dtheta1 * dtheta1, sin2, value=-_CORIOLIS)
    denominator = torch.addcmul(constants.d2_constant, d2, minus_d2_over_d1)
    if stacks_rows():  # rows stacked, not written into views (see cartpole_step)
        ddtheta2 = torch.div(numerator, denominator)
        # ddtheta1 = -(d2 ddtheta2 + phi1) / d1
        ddtheta1 = torch.div(torch.addcmul(phi1, d2, ddtheta2), minus_d1)
        return torch.stack([dtheta1, dtheta2, ddtheta1, ddtheta2])
    out = torch.empty_like(state)
    out[:2].copy_(state[2:])
    ddtheta2 = torch.div(numerator, denominator, out=out[3])
    torch.div(torch.addcmul(phi1, d2, ddtheta2), minus_d1, out=out[2])
    return out


def acrobot_dynamics(
    state: Tensor, actions: Tensor, constants: AcrobotConstants
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """:class:`Acrobot`'s dynamics, what ``compile=True`` compiles: gymnasium's rk4 step of every
    env, the angles wrapped and the velocities clipped.

    Args:
        state: ``(4, n)`` (theta1, theta2, dtheta1, dtheta2), float32 or float64.
        actions: int32 or int64 ``(n,)`` in ``{0, 1, 2}``.
        constants: :class:`AcrobotConstants` of ``state``'s dtype and device.

    Returns:
        The next state ``(4, n)`` (before any reset), its observation ``(n, 6)``, reward float32
        ``(n,)`` (-1, 0 on the terminating step) and terminated bool ``(n,)``.
    """
    torque = constants.torques.index_select(0, actions)
    # gymnasium's rk4 over [0, dt]: one classical Runge-Kutta step, the torque held constant.
    k1 = _derivatives(state, torque, constants)
    k2 = _derivatives(torch.add(state, k1, alpha=DT / 2), torque, constants)
    k3 = _derivatives(torch.add(state, k2, alpha=DT / 2), torque, constants)
    k4 = _derivatives(torch.add(state, k3, alpha=DT), torque, constants)
    slope = k1.add_(k2, alpha=2.0).add_(k3, alpha=2.0).add_(k4)
    final = torch.add(state, slope, alpha=DT / 6.0)

    # Angles wrapped into [-pi, pi] by whole turns (gymnasium subtracts 2 pi while above pi,
    # adds it while below -pi; one turn takes one exact subtraction, like its first),
    # velocities clipped.
    angles = final[:2]
    if stacks_rows():  # rows concatenated, not written into views (see cartpole_step)
        wrapped = torch.sub(angles, torch.round(angles * constants.turns_per_radian), alpha=2 * math.pi)
        final = torch.cat([wrapped, final[2:].clamp(constants.velocity_low, constants.velocity_high)])
    else:
        angles.sub_(torch.round(angles * constants.turns_per_radian), alpha=2 * math.pi)
        final[2:].clamp_(constants.velocity_low, constants.velocity_high)

    final_obs = acrobot_obs(final)
    # The free end is above the line: -cos(theta1) - cos(theta1 + theta2) > 1.
    cos1 = final_obs[:, 0] if state.dtype == torch.float32 else torch.cos(final[0])
    terminated = torch.cos(final[0] + final[1]).add_(cos1) < constants.minus_one
    reward = terminated.float().sub_(1.0)
    return final, final_obs, reward, compiled_flags(terminated)


class Acrobot(ClassicControlEnv):
    """``num_envs`` copies of gymnasium's ``Acrobot-v1``: two links hang from a pivot; a torque
    of -1, 0 or +1 (actions 0, 1, 2) on the joint between them swings the free end above the
    line one link length over the pivot. Reward -1 per step and 0 on the terminating step,
    truncation after 500 steps. gymnasium's "book" dynamics, integrated with its 4th-order
    Runge-Kutta step of 0.2 s, angles wrapped to [-pi, pi], velocities clipped to 4 pi, 9 pi.

    Arguments as :class:`~rl_lightning.envs._classic_control.ClassicControlEnv`'s; float64
    trajectories agree with gymnasium's to rounding, until the chaotic dynamics amplify it.
    ``env.state`` is ``(num_envs, 4)`` = (theta1, theta2, dtheta1, dtheta2).
    """

    state_size = 4
    default_max_episode_steps = MAX_EPISODE_STEPS
    cpu_compile_min_envs = 1  # at 16 envs 95k vs 37k steps/s, at 4,096: 10.9 vs 6.1 M (compiled vs eager)
    render_fps = 15
    dynamics = staticmethod(acrobot_dynamics)
    observe = staticmethod(acrobot_obs)

    def _spaces(self) -> tuple[gym.spaces.Box, gym.spaces.Discrete]:
        high = np.array([1.0, 1.0, 1.0, 1.0, MAX_VEL_1, MAX_VEL_2], dtype=np.float32)
        return gym.spaces.Box(-high, high, dtype=np.float32), gym.spaces.Discrete(3)

    def _setup(self) -> None:
        self._constants = AcrobotConstants.make(self.dtype, self.device)

    def _random_states(self) -> Tensor:
        # gymnasium draws float64 and rounds to float32 (its first step then computes in float64).
        states = torch.empty(4, self.num_envs, dtype=torch.float32, device=self.device)
        return states.uniform_(-RESET_BOUND, RESET_BOUND, generator=self.generator).to(self.dtype)

    def _obs(self, state: Tensor, private: bool = False) -> Tensor:
        return acrobot_obs(state)

    def _step(self, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, dict[str, Any]]:
        if actions.dtype not in (torch.int32, torch.int64):
            actions = actions.long()
        if self.fuses_step:
            return self._step_fused(actions)
        final, final_obs, reward, terminated = self._dynamics(self._state, actions, self._constants)
        truncated, obs = self._end_step(final, terminated)
        return obs, reward, terminated, truncated, {"final_observation": final_obs}

    def draw(self, obs: Tensor) -> Tensor:
        return paint(obs, _acrobot_labels, _PALETTE, 100, 100)


# Label -> colour, for the label maps _acrobot_labels paints.
_PALETTE = torch.tensor([(255, 255, 255), (0, 0, 0), (0, 204, 204), (204, 204, 0)], dtype=torch.uint8)
_BACKGROUND, _LINE, _LINK, _JOINT = range(4)
# gymnasium's screen, in world units: 2.2 either side of the pivot.
_SCREEN_SIZE = 2 * (LINK_LENGTH_1 + LINK_LENGTH_2 + 0.2)
_LINK_HALF_WIDTH, _JOINT_RADIUS = 0.1, 0.1


def _acrobot_labels(obs: Tensor, height: int, width: int) -> Tensor:
    """uint8 label maps ``(batch, height, width)`` of Acrobot observations ``(batch, 6)``, drawn like
    gymnasium's renderer (scaled down): the two links hanging from the pivot (both down for angles
    0), their joints, and the line the free end must pass."""
    x, y = pixel_grid(height, width, _SCREEN_SIZE, _SCREEN_SIZE)
    x, y = x - _SCREEN_SIZE / 2, y - _SCREEN_SIZE / 2  # from the pivot
    labels = torch.zeros(obs.shape[0], height, width, dtype=torch.uint8)
    # The target line, about one pixel thick.
    labels[:, ((y - LINK_LENGTH_1).abs() <= 0.6 * _SCREEN_SIZE / height).view(-1), :] = _LINE

    cos1, sin1, cos2, sin2 = (obs[:, i].view(-1, 1, 1) for i in range(4))
    # Link 1 points along (sin theta1, -cos theta1), link 2 along the same of theta1 + theta2.
    link1_x, link1_y = sin1, -cos1
    link2_x, link2_y = sin1 * cos2 + cos1 * sin2, sin1 * sin2 - cos1 * cos2
    joint_x, joint_y = link1_x * LINK_LENGTH_1, link1_y * LINK_LENGTH_1
    labels.masked_fill_(rectangle(x, y, 0.0, 0.0, link1_x, link1_y, LINK_LENGTH_1, _LINK_HALF_WIDTH), _LINK)
    labels.masked_fill_(disc(x, y, 0.0, 0.0, _JOINT_RADIUS), _JOINT)
    labels.masked_fill_(rectangle(x, y, joint_x, joint_y, link2_x, link2_y, LINK_LENGTH_2, _LINK_HALF_WIDTH), _LINK)
    labels.masked_fill_(disc(x, y, joint_x, joint_y, _JOINT_RADIUS), _JOINT)
    return labels
