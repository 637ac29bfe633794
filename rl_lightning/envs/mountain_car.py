"""MountainCar-v0 and MountainCarContinuous-v0 in torch, step for step the same dynamics as
gymnasium's."""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from rl_lightning.envs._classic_control import ClassicControlEnv, compiled_flags, stacks_rows, state_observation
from rl_lightning.envs.render import disc, paint, pixel_grid, rectangle

# gymnasium.envs.classic_control.mountain_car.MountainCarEnv's constants (the continuous env
# shares all but the goal, the force and the time limit).
MIN_POSITION = -1.2
MAX_POSITION = 0.6
MAX_SPEED = 0.07
GRAVITY = 0.0025
RESET_LOW, RESET_HIGH = -0.6, -0.4
GOAL_VELOCITY = 0.0
FORCE = 0.001  # MountainCar-v0: (action - 1) * FORCE
GOAL_POSITION = 0.5
MAX_EPISODE_STEPS = 200
POWER = 0.0015  # MountainCarContinuous-v0: action * POWER
CONTINUOUS_GOAL_POSITION = 0.45
CONTINUOUS_GOAL_REWARD = 100.0
CONTINUOUS_MAX_EPISODE_STEPS = 999


class MountainCarConstants(NamedTuple):
    """The tensors the MountainCar dynamics read, in the state's dtype and device."""

    three: Tensor
    min_position: Tensor
    goal_position: Tensor
    goal_velocity: Tensor
    zero: Tensor
    forces: Tensor  # (3,): MountainCar-v0's action -> change of velocity
    power: Tensor  # float32 like the action: gymnasium multiplies its float32 action in float32 too
    goal_reward: Tensor

    @classmethod
    def make(cls, goal_position: float, dtype: torch.dtype, device: torch.device | str) -> MountainCarConstants:
        def constant(value: float) -> Tensor:
            return torch.tensor(value, dtype=dtype, device=device)

        return cls(
            constant(3.0),
            constant(MIN_POSITION),
            constant(goal_position),
            constant(GOAL_VELOCITY),
            constant(0.0),
            torch.tensor([-FORCE, 0.0, FORCE], dtype=dtype, device=device),
            torch.tensor(POWER, device=device),
            constant(CONTINUOUS_GOAL_REWARD),
        )


def _move(state: Tensor, acceleration: Tensor, constants: MountainCarConstants) -> tuple[Tensor, Tensor]:
    """The car's motion (the one copy of it): ``state`` ``(2, n)`` after ``velocity += acceleration``
    and ``position += velocity``, in ``state``'s dtype, and terminated."""
    position, velocity = state.unbind()
    if stacks_rows():  # rows stacked, not written into views (see cartpole_step)
        velocity = torch.add(velocity, acceleration).clamp(-MAX_SPEED, MAX_SPEED)
        position = torch.add(position, velocity).clamp(MIN_POSITION, MAX_POSITION)
        velocity = velocity.masked_fill((position == constants.min_position) & (velocity < constants.zero), 0.0)
        final = torch.stack([position, velocity])
    else:
        final = torch.empty_like(state)
        # Both are clipped to their ranges.
        torch.add(velocity, acceleration, out=final[1]).clamp_(-MAX_SPEED, MAX_SPEED)
        torch.add(position, final[1], out=final[0]).clamp_(MIN_POSITION, MAX_POSITION)
        # The left wall stops the car: a velocity into it becomes 0.
        final[1].masked_fill_((final[0] == constants.min_position) & (final[1] < constants.zero), 0.0)
    terminated = (final[0] >= constants.goal_position) & (final[1] >= constants.goal_velocity)
    return final, terminated


def _gravity_step(state: Tensor, force: Tensor, constants: MountainCarConstants) -> tuple[Tensor, Tensor]:
    """gymnasium's step: ``velocity += force - gravity cos(3 position)``, then :func:`_move`."""
    acceleration = torch.add(force, torch.cos(state[0] * constants.three), alpha=-GRAVITY)
    return _move(state, acceleration, constants)


def mountain_car_dynamics(
    state: Tensor, actions: Tensor, constants: MountainCarConstants
) -> tuple[Tensor, Tensor, Tensor]:
    """:class:`MountainCar`'s dynamics, what ``compile=True`` compiles.

    Args:
        state: ``(2, n)`` (position, velocity), float32 or float64.
        actions: int32 or int64 ``(n,)`` in ``{0, 1, 2}``.

    Returns:
        The next state ``(2, n)`` (before any reset), reward float32 ``(n,)`` (-1) and terminated bool ``(n,)``.
    """
    final, terminated = _gravity_step(state, constants.forces.index_select(0, actions), constants)
    reward = torch.full(terminated.shape, -1.0, device=terminated.device)
    return final, reward, compiled_flags(terminated)


def mountain_car_continuous_dynamics(
    state: Tensor,
    actions: Tensor,
    unclipped_actions: Tensor,
    first_step: Tensor | None,
    constants: MountainCarConstants,
) -> tuple[Tensor, Tensor, Tensor]:
    """:class:`MountainCarContinuous`'s dynamics, what ``compile=True`` compiles.

    Args:
        state: ``(2, n)`` (position, velocity), float32 or float64.
        actions: float32 ``(n, 1)`` clipped to [-1, 1]; ``unclipped_actions`` as given.
        first_step: float64 only: bool ``(n,)``, whether it is the episode's first step (None for float32).

    Returns:
        The next state ``(2, n)`` (before any reset), reward float32 ``(n,)`` (``-0.1 action^2``,
        +100 on reaching the flag) and terminated bool ``(n,)``.
    """
    if state.dtype == torch.float32:
        final, terminated = _gravity_step(state, actions[:, 0] * constants.power, constants)
    else:
        final, terminated = _continuous_step_in_gymnasium_precision(
            state, actions, unclipped_actions, first_step, constants
        )
    # gymnasium clips the force but its reward penalises the action as given.
    action = unclipped_actions[:, 0].to(state.dtype)
    bonus = torch.where(terminated, constants.goal_reward, constants.zero)
    reward = torch.addcmul(bonus, action, action, value=-0.1).float()
    return final, reward, compiled_flags(terminated)


def _continuous_step_in_gymnasium_precision(
    state: Tensor, actions: Tensor, unclipped_actions: Tensor, first_step: Tensor, constants: MountainCarConstants
) -> tuple[Tensor, Tensor]:
    """The float64 step: gymnasium's own precision. Its state is float64 after a reset and float32
    after every step, and numpy 2 keeps float32 arithmetic with Python floats. So an episode's first
    step is computed in float64, every later one in float32; the state is stored rounded to float32."""
    force = actions[:, 0]
    within_bounds = force == unclipped_actions[:, 0]
    final64, terminated64 = _move_in(state, torch.float64, force, within_bounds, constants)
    final32, terminated32 = _move_in(state, torch.float32, force, within_bounds, constants)
    final = torch.where(first_step, final64, final32).float().double()
    return final, torch.where(first_step, terminated64, terminated32)


def _move_in(
    state: Tensor, dtype: torch.dtype, force: Tensor, within_bounds: Tensor, constants: MountainCarConstants
) -> tuple[Tensor, Tensor]:
    """gymnasium's step with its state in ``dtype``: the next state (float64) and terminated.
    The cosine is float64 in both dtypes (math.cos), the engine term of a float32 action
    within the bounds float32 in both."""
    state = state.to(dtype)
    gravity_term = torch.cos((state[0] * 3.0).double()).mul_(GRAVITY)
    # A float32 action times and minus Python floats stays float32; a clipped action is the
    # Python float +-1, and its term float64 (rounded only when added to a float32 velocity).
    engine_term = (force * constants.power).sub_(gravity_term.float()).double()
    clipped_term = force.double().mul_(POWER).sub_(gravity_term)
    final, terminated = _move(state, torch.where(within_bounds, engine_term, clipped_term).to(dtype), constants)
    return final.double(), terminated


class _MountainCarBase(ClassicControlEnv):
    """The dynamics both MountainCars share; subclasses give the force and the reward."""

    state_size = 2
    # compiled vs eager: at 65,536 envs 78 vs 62 M steps/s (continuous: 57 vs 45), at 4,096: 30 vs 29
    cpu_compile_min_envs = 65_536
    render_fps = 30
    goal_position: float

    def _spaces(self) -> tuple[gym.spaces.Box, gym.spaces.Discrete | gym.spaces.Box]:
        low = np.array([MIN_POSITION, -MAX_SPEED], dtype=np.float32)
        high = np.array([MAX_POSITION, MAX_SPEED], dtype=np.float32)
        return gym.spaces.Box(low, high, dtype=np.float32), self._action_space()

    def _action_space(self) -> gym.spaces.Discrete | gym.spaces.Box:
        raise NotImplementedError

    observe = staticmethod(state_observation)

    def _setup(self) -> None:
        self._constants = MountainCarConstants.make(self.goal_position, self.dtype, self.device)

    def _random_states(self) -> Tensor:
        states = torch.zeros(2, self.num_envs, dtype=self.dtype, device=self.device)
        states[0].uniform_(RESET_LOW, RESET_HIGH, generator=self.generator)
        return states

    def _finish_step(
        self, final: Tensor, reward: Tensor, terminated: Tensor
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, dict[str, Any]]:
        final_obs = self._obs(final, private=True)  # the env keeps no reference to `final`
        truncated, obs = self._end_step(final, terminated)
        return obs, reward, terminated, truncated, {"final_observation": final_obs}

    def draw(self, obs: Tensor) -> Tensor:
        return paint(obs, functools.partial(_mountain_car_labels, goal_position=self.goal_position), _PALETTE, 80, 120)


class MountainCar(_MountainCarBase):
    """``num_envs`` copies of gymnasium's ``MountainCar-v0``: push left, don't push, push right
    (actions 0, 1, 2) to swing up to the flag at position 0.5; reward -1 on every step,
    truncation after 200 steps.

    Arguments as :class:`~rl_lightning.envs._classic_control.ClassicControlEnv`'s; float64
    trajectories agree with gymnasium's to rounding. ``env.state`` is ``(num_envs, 2)`` = (position,
    velocity).
    """

    goal_position = GOAL_POSITION
    default_max_episode_steps = MAX_EPISODE_STEPS
    dynamics = staticmethod(mountain_car_dynamics)

    def _action_space(self) -> gym.spaces.Discrete:
        return gym.spaces.Discrete(3)

    def _step(self, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, dict[str, Any]]:
        if actions.dtype not in (torch.int32, torch.int64):
            actions = actions.long()
        if self.fuses_step:
            return self._step_fused(actions)
        return self._finish_step(*self._dynamics(self._state, actions, self._constants))


class MountainCarContinuous(_MountainCarBase):
    """``num_envs`` copies of gymnasium's ``MountainCarContinuous-v0``: a force in [-1, 1]
    (``Box`` action of shape (1,)) swings the car up to the flag at position 0.45; reward
    ``-0.1 action^2`` on every step, +100 on reaching the flag, truncation after 999 steps.

    Like gymnasium, the force is the clipped action but the reward penalises the action as
    given: an action of 3 pushes like 1 and costs 0.9.

    Arguments as :class:`~rl_lightning.envs._classic_control.ClassicControlEnv`'s; float64 is
    gymnasium's own arithmetic, float64 on an episode's first step and float32 after it
    (gymnasium stores its state as float32): whole trajectories then agree with it exactly (but
    for the last bit of a cosine now and then). ``env.state`` is ``(num_envs, 2)`` = (position,
    velocity).
    """

    goal_position = CONTINUOUS_GOAL_POSITION
    default_max_episode_steps = CONTINUOUS_MAX_EPISODE_STEPS
    dynamics = staticmethod(mountain_car_continuous_dynamics)

    def _action_space(self) -> gym.spaces.Box:
        return gym.spaces.Box(-1.0, 1.0, (1,), dtype=np.float32)

    def step(self, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, dict[str, Any]]:
        self._check_actions(actions)
        if self.fuses_step:
            return self._step_fused(actions)
        actions = actions.float()
        # gymnasium clips the force but its reward penalises the action as given.
        return self._step(actions.clamp(-1.0, 1.0), unclipped_actions=actions)

    @staticmethod
    def fused_inputs(actions: Tensor, first_step: Tensor, in_float64: bool, constants: Any) -> tuple[Any, ...]:
        """The force clipped to [-1, 1], the action as given (the reward's), the first-step flags where the env
        computes in float64 (see :func:`_continuous_step_in_gymnasium_precision`; None for float32), the constants."""
        actions = actions.float()
        return (actions.clamp(-1.0, 1.0), actions, first_step if in_float64 else None, constants)

    def _fused_extras(self) -> tuple[Any, ...]:
        return (self.dtype == torch.float64, self._constants)

    def _step(
        self, actions: Tensor, unclipped_actions: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, dict[str, Any]]:
        if unclipped_actions is None:
            unclipped_actions = actions
        # float64 computes an episode's first step in float64 (see _continuous_step_in_gymnasium_precision).
        first_step = None if self.dtype == torch.float32 else self._episode_start == self._clock
        dynamics = self._dynamics(self._state, actions, unclipped_actions, first_step, self._constants)
        return self._finish_step(*dynamics)


# Label -> colour, for the label maps _mountain_car_labels paints.
_PALETTE = torch.tensor([(255, 255, 255), (0, 0, 0), (128, 128, 128), (204, 204, 0)], dtype=torch.uint8)
_BACKGROUND, _BLACK, _WHEEL, _FLAG = range(4)
# gymnasium's screen (pixels) and its scene, in those pixels.
_SCREEN_WIDTH, _SCREEN_HEIGHT = 600, 400
_SCALE = _SCREEN_WIDTH / (MAX_POSITION - MIN_POSITION)
_CAR_WIDTH, _CAR_HEIGHT, _CLEARANCE, _WHEEL_RADIUS = 40.0, 20.0, 10.0, 8.0


def _hill_height(position: Tensor | float) -> Tensor | float:
    """The track's height at ``position``, in world units (gymnasium's ``_height``)."""
    sin = torch.sin(3 * position) if isinstance(position, Tensor) else math.sin(3 * position)
    return sin * 0.45 + 0.55


def _mountain_car_labels(obs: Tensor, height: int, width: int, goal_position: float) -> Tensor:
    """uint8 label maps ``(batch, height, width)`` of MountainCar observations ``(batch, 2)``, drawn
    like gymnasium's renderer (scaled down): the track, the car tilted by gymnasium's angle
    ``cos(3 position)``, its wheels and the flag at ``goal_position``."""
    x, y = pixel_grid(height, width, _SCREEN_HEIGHT, _SCREEN_WIDTH)
    # Lines are gymnasium's 1 pixel thick scaled up to about one of ours, so they stay visible.
    half_line = 0.6 * _SCREEN_WIDTH / width
    labels = torch.zeros(obs.shape[0], height, width, dtype=torch.uint8)

    # The track: distance to the curve across its slope.
    track_position = x / _SCALE + MIN_POSITION
    track_y = _hill_height(track_position) * _SCALE
    slope = 1.35 * torch.cos(3 * track_position)
    labels.masked_fill_((y - track_y).abs() <= half_line * torch.sqrt(1 + slope.square()), _BLACK)

    # The car: a rectangle standing on the track, turned by cos(3 position), the wheels on its
    # bottom edge.
    position = obs[:, 0].view(-1, 1, 1)
    angle = torch.cos(3 * position)
    along_x, along_y = torch.cos(angle), torch.sin(angle)
    anchor_x = (position - MIN_POSITION) * _SCALE
    anchor_y = _CLEARANCE + _hill_height(position) * _SCALE
    # The body's axis runs from its rear to its front, half its height above the anchor.
    rear_x = anchor_x - along_x * _CAR_WIDTH / 2 - along_y * _CAR_HEIGHT / 2
    rear_y = anchor_y - along_y * _CAR_WIDTH / 2 + along_x * _CAR_HEIGHT / 2
    body = rectangle(x, y, rear_x, rear_y, along_x, along_y, _CAR_WIDTH, _CAR_HEIGHT / 2)
    labels.masked_fill_(body, _BLACK)
    for offset in (_CAR_WIDTH / 4, -_CAR_WIDTH / 4):
        wheel = disc(x, y, anchor_x + along_x * offset, anchor_y + along_y * offset, _WHEEL_RADIUS)
        labels.masked_fill_(wheel, _WHEEL)

    # The flag: a pole 50 pixels high with a yellow pennant at its top.
    flag_x = int((goal_position - MIN_POSITION) * _SCALE)
    flag_bottom = int(_hill_height(goal_position) * _SCALE)
    flag_top = flag_bottom + 50
    pole = ((x - flag_x).abs() <= half_line) & (y >= flag_bottom) & (y <= flag_top)
    labels.masked_fill_(pole, _BLACK)
    pennant_reach = 1 - (x - flag_x) / 25  # the pennant narrows from the pole to its tip
    pennant = (x >= flag_x) & ((y - (flag_top - 5)).abs() <= 5 * pennant_reach)
    labels.masked_fill_(pennant, _FLAG)
    return labels
