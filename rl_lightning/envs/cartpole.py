"""CartPole-v1 in torch, step for step the same dynamics as gymnasium's ``CartPole-v1``."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from rl_lightning.envs._classic_control import (
    ClassicControlEnv,
    FusedCarry,
    compiled_flags,
    stacks_rows,
    state_observation,
)
from rl_lightning.envs.render import disc, paint, rectangle

# gymnasium.envs.classic_control.cartpole.CartPoleEnv's constants.
GRAVITY = 9.8
MASS_CART = 1.0
MASS_POLE = 0.1
TOTAL_MASS = MASS_POLE + MASS_CART
HALF_POLE_LENGTH = 0.5
POLE_MASS_LENGTH = MASS_POLE * HALF_POLE_LENGTH
FORCE_MAG = 10.0
TAU = 0.02
THETA_THRESHOLD = 12 * 2 * math.pi / 360
X_THRESHOLD = 2.4
RESET_BOUND = 0.05
MAX_EPISODE_STEPS = 500


class CartPoleConstants(NamedTuple):
    """The tensors :func:`cartpole_step` reads, in the state's dtype and device (a Python float
    would be re-wrapped every step; ``addcmul`` needs a tensor input)."""

    force_over_mass: Tensor  # (2,): action -> force / total mass
    gravity: Tensor
    four_thirds_length: Tensor
    x_threshold: Tensor
    theta_threshold: Tensor

    @classmethod
    def make(cls, dtype: torch.dtype, device: torch.device | str) -> CartPoleConstants:
        def constant(value: float) -> Tensor:
            return torch.tensor(value, dtype=dtype, device=device)

        return cls(
            torch.tensor([-FORCE_MAG / TOTAL_MASS, FORCE_MAG / TOTAL_MASS], dtype=dtype, device=device),
            constant(GRAVITY),
            constant(4.0 / 3.0 * HALF_POLE_LENGTH),
            constant(X_THRESHOLD),
            constant(THETA_THRESHOLD),
        )


def cartpole_step(state: Tensor, actions: Tensor, constants: CartPoleConstants) -> tuple[Tensor, Tensor]:
    """One CartPole-v1 step of every env with gymnasium's equations (Euler integration), as a
    pure function: the one copy of the dynamics, for :class:`CartPole` and ``FusedCartPole``.

    Args:
        state: ``(4, n)`` (x, x_dot, theta, theta_dot), float32 or float64.
        actions: int32 or int64 ``(n,)`` in ``{0, 1}``.
        constants: :class:`CartPoleConstants` of ``state``'s dtype and device.

    Returns:
        The next state ``(4, n)`` (before any reset) and terminated, bool ``(n,)``.
    """
    # gymnasium's equations, regrouped so that each line is one fused kernel (addcmul computes
    # a + value * b * c): a step costs ~20 kernels instead of ~35, which is what decides speed
    # for up to a few thousand envs. Constants are folded in float64.
    x, x_dot, theta, theta_dot = state
    # temp = (force + m_p l theta_dot^2 sin) / M
    if torch.compiler.is_compiling():  # a select, not a gather: no indirect load and no bounds check
        force_over_mass = torch.where(actions == 0, constants.force_over_mass[0], constants.force_over_mass[1])
    else:
        force_over_mass = constants.force_over_mass.index_select(0, actions)
    cos_theta, sin_theta = torch.cos(theta), torch.sin(theta)
    temp = torch.addcmul(force_over_mass, theta_dot.square(), sin_theta, value=POLE_MASS_LENGTH / TOTAL_MASS)
    # theta_acc = (g sin - cos temp) / (l (4/3 - m_p cos^2 / M))
    numerator = torch.addcmul(sin_theta.mul_(constants.gravity), cos_theta, temp, value=-1.0)
    denominator = torch.addcmul(
        constants.four_thirds_length, cos_theta, cos_theta, value=-HALF_POLE_LENGTH * MASS_POLE / TOTAL_MASS
    )
    theta_acc = numerator.div_(denominator)
    # x_acc = temp - m_p l theta_acc cos / M
    x_acc = torch.addcmul(temp, theta_acc, cos_theta, value=-POLE_MASS_LENGTH / TOTAL_MASS)

    # Euler integration. Eagerly the rows are written straight into the next state tensor; a
    # compiled step stacks them instead: inductor turns writes into row views of one buffer into
    # a loop over the rows that recomputes the whole step for each (4x the work, measured); vmap has no out=.
    if stacks_rows():
        rows = (x, x_dot), (x_dot, x_acc), (theta, theta_dot), (theta_dot, theta_acc)
        final = torch.stack([torch.add(value, rate, alpha=TAU) for value, rate in rows])
    else:
        final = torch.empty_like(state)
        torch.add(x, x_dot, alpha=TAU, out=final[0])
        torch.add(x_dot, x_acc, alpha=TAU, out=final[1])
        torch.add(theta, theta_dot, alpha=TAU, out=final[2])
        torch.add(theta_dot, theta_acc, alpha=TAU, out=final[3])
    # Two comparisons and an or, not one comparison of both rows and .any(0): a reduction across
    # rows costs 2x the three kernels at 65,536 envs (measured).
    terminated = (final[0].abs() > constants.x_threshold) | (final[2].abs() > constants.theta_threshold)
    return final, terminated


def cartpole_dynamics(state: Tensor, actions: Tensor, constants: CartPoleConstants) -> tuple[Tensor, Tensor, Tensor]:
    """:class:`CartPole`'s dynamics, what ``compile=True`` compiles: :func:`cartpole_step` and the
    reward, float32 +1 on every step.

    Returns:
        The next state ``(4, n)`` (before any reset), reward float32 ``(n,)`` and terminated bool ``(n,)``.
    """
    final, terminated = cartpole_step(state, actions, constants)
    reward = torch.ones_like(terminated, dtype=torch.float32)  # ~1 us less than ones(shape, ...)
    return final, reward, compiled_flags(terminated)


def resets_drawn_in_order(draw: Tensor, done: Tensor, used: Tensor) -> tuple[Tensor, Tensor]:
    """The start states ``(4, n)`` the CPU's index-based reset gives the envs that are ``done`` (the others'
    columns: any numbers) and the numbers it takes, from ``draw``: numbers drawn in order, of which the steps
    before took ``used``. That reset draws a ``(4, k)`` tensor for the ``k`` finished envs in the order of their
    index: env ``j``, the ``r``-th of them, gets number ``used + c * k + r`` for component ``c``."""
    finished = done.sum()
    rank = done.cumsum(0) - 1  # an unfinished env's: its finished predecessor's (or -1), never kept
    components = torch.arange(4, device=done.device).unsqueeze(1)
    return draw[(used + components * finished + rank).clamp(min=0)], used + 4 * finished


class CartPole(ClassicControlEnv):
    """``num_envs`` copies of gymnasium's ``CartPole-v1`` (Euler integration, +1 reward on
    every step including the terminating one, truncation after 500 steps).

    Arguments as :class:`~rl_lightning.envs._classic_control.ClassicControlEnv`'s; float64
    trajectories agree with gymnasium's to rounding. ``env.state`` is ``(num_envs, 4)`` =
    (x, x_dot, theta, theta_dot).
    """

    state_size = 4
    default_max_episode_steps = MAX_EPISODE_STEPS
    cpu_compile_min_envs = 4_096  # at 4,096 envs 28.9 vs 23.8 M steps/s, at 256: 2.3 vs 2.5 (compiled vs eager)
    #: The most envs whose CPU step a fused step covers (:attr:`fuses_step`): drawing 4 numbers for every env on
    #: every step costs ~8 ns each on the CPU, more than the eager index-based reset from a few thousand envs
    #: (4,096 envs: 536 us a fused step vs 186 compiled dynamics + eager reset; 32: 144 vs 141).
    fused_reset_max_envs = 1_024
    dynamics = staticmethod(cartpole_dynamics)
    observe = staticmethod(state_observation)

    def _spaces(self) -> tuple[gym.spaces.Box, gym.spaces.Discrete]:
        high = np.array([X_THRESHOLD * 2, np.inf, THETA_THRESHOLD * 2, np.inf], dtype=np.float32)
        return gym.spaces.Box(-high, high, dtype=np.float32), gym.spaces.Discrete(2)

    def _setup(self) -> None:
        #: Auto-reset without any host read of tensor values (the default off the CPU, where a read
        #: stalls the device; on the CPU the index-based reset draws fewer random numbers).
        self.sync_free = self.device.type != "cpu"
        self._constants = CartPoleConstants.make(self.dtype, self.device)

    @property
    def resets_every_step(self) -> bool:  # type: ignore[override]
        """Sync-free resets draw for every env on every step."""
        return self.sync_free

    @property
    def fuses_step(self) -> bool:
        """With ``compile``, whether the whole step is one compiled function: sync-free, or the CPU's index-based
        reset with at most :attr:`fused_reset_max_envs` envs, whose fused step takes the finished envs' states
        from a draw for every env, in the order that reset draws them (:func:`resets_drawn_in_order`)."""
        return self.compile and type(self).fuses_step_at(self.num_envs, self.device, self.sync_free)

    @classmethod
    def fuses_step_at(cls, num_envs: int, device: torch.device, sync_free: bool | None = None) -> bool:
        sync_free = device.type != "cpu" if sync_free is None else sync_free
        return sync_free or (device.type == "cpu" and num_envs <= cls.fused_reset_max_envs)

    @property
    def resets(self) -> Callable[[Tensor, Tensor, Tensor], tuple[Tensor, Tensor]]:  # type: ignore[override]
        return super().resets if self.sync_free else resets_drawn_in_order

    def _fused_reset_draws(self, count: int) -> list[Tensor]:
        if self.sync_free:
            return super()._fused_reset_draws(count)
        # Enough numbers for every env to finish on every step, shared by the steps; finish_fused_steps sets the
        # generator back and moves it on by as many as the index-based resets would have drawn.
        self._generator_before_draws = self.generator.get_state()
        return [self._random_states(count * self.num_envs).view(-1)] * count

    def finish_fused_steps(self, carry: FusedCarry, count: int) -> None:
        super().finish_fused_steps(carry, count)
        if not self.sync_free:
            used = int(carry.draws_used)  # a host read: free on the CPU
            self.generator.set_state(self._generator_before_draws)
            if used:
                torch.empty(used, dtype=self.dtype).uniform_(-RESET_BOUND, RESET_BOUND, generator=self.generator)

    def _random_states(self, count: int | None = None) -> Tensor:
        states = torch.empty(4, self.num_envs if count is None else count, dtype=self.dtype, device=self.device)
        return states.uniform_(-RESET_BOUND, RESET_BOUND, generator=self.generator)

    def _step(self, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, dict[str, Any]]:
        if actions.dtype not in (torch.int32, torch.int64):
            actions = actions.long()
        if self.fuses_step:
            return self._step_fused(actions)
        final, reward, terminated = self._dynamics(self._state, actions, self._constants)
        truncated, obs = self._end_step(final, terminated)
        # Where no env was reset the state is `final` itself, and obs already a private copy of it;
        # otherwise `final` is referenced by nothing but info["final_observation"] from here on.
        final_obs = obs if self._state is final else self._obs(final, private=True)
        return obs, reward, terminated, truncated, {"final_observation": final_obs}

    def _auto_reset(self, final: Tensor, done: Tensor) -> None:
        if self.sync_free:
            super()._auto_reset(final, done)
            return
        # Only the finished envs get fresh random states (no full-size draw; the host reads which
        # envs finished, free on the CPU).
        done_idx = done.nonzero().squeeze(1)
        if done_idx.numel() > 0:
            self._state = final.index_copy(1, done_idx, self._random_states(done_idx.numel()))
            self._episode_start.index_fill_(0, done_idx, self._clock)
        else:
            self._state = final

    def draw(self, obs: Tensor) -> Tensor:
        return draw_cartpole(obs)


def cartpole_no_velocity_observation(state: Tensor) -> Tensor:
    """:class:`CartPoleNoVel`'s observation ``(n, 2)`` = (x, theta), never aliasing the state."""
    return state[0::2].T.to(torch.float32, copy=True)


class CartPoleNoVel(CartPole):
    """CartPole-v1 without the two velocities in the observation, ``(x, theta)``: partially observed,
    as in sb3-contrib's recurrent benchmarks (``CartPoleNoVel-v1``). A policy must infer the
    velocities from what it saw before: feed-forward policies do poorly, recurrent ones solve it."""

    def _spaces(self) -> tuple[gym.spaces.Box, gym.spaces.Discrete]:
        high = np.array([X_THRESHOLD * 2, THETA_THRESHOLD * 2], dtype=np.float32)
        return gym.spaces.Box(-high, high, dtype=np.float32), gym.spaces.Discrete(2)

    def _obs(self, state: Tensor, private: bool = False) -> Tensor:
        return cartpole_no_velocity_observation(state)

    observe = staticmethod(cartpole_no_velocity_observation)

    def draw(self, obs: Tensor) -> Tensor:
        zeros = torch.zeros_like(obs[..., :1])
        return draw_cartpole(torch.cat([obs[..., :1], zeros, obs[..., 1:], zeros], dim=-1))


WHITE = (255, 255, 255)
CART_COLOR = (40, 40, 40)
POLE_COLOR = (202, 152, 101)
AXLE_COLOR = (129, 132, 203)
TRACK_COLOR = (0, 0, 0)
# Label -> colour, for the label maps _cartpole_labels paints.
_PALETTE = torch.tensor([WHITE, CART_COLOR, POLE_COLOR, AXLE_COLOR, TRACK_COLOR], dtype=torch.uint8)
_BACKGROUND, _CART, _POLE, _AXLE, _TRACK = range(5)


def draw_cartpole(obs: Tensor, height: int = 80, width: int = 120) -> Tensor:
    """Draw CartPole observations ``(*batch, 4)`` (x, x_dot, theta, theta_dot) like gymnasium's
    renderer (scaled down): uint8 ``(*batch, height, width, 3)`` on the CPU.

    Every shape is found with broadcasting of per-row and per-column quantities, so a frame
    costs a handful of byte-sized passes (~0.1 ms for 100x150), not float geometry per pixel."""
    return paint(obs, _cartpole_labels, _PALETTE, height, width)


def _cartpole_labels(obs: Tensor, height: int, width: int) -> Tensor:
    """uint8 label maps ``(batch, height, width)`` of CartPole scenes."""
    x = obs[:, 0].view(-1, 1, 1)
    theta = obs[:, 2].view(-1, 1, 1)
    scale = width / (2 * 2.4)
    # Pixel centres, y measured upwards from the bottom row like gymnasium's flipped surface.
    py = (height - 1 - torch.arange(height, dtype=torch.float32)).view(1, -1, 1)
    px = torch.arange(width, dtype=torch.float32).view(1, 1, -1)

    cart_y = 0.2 * height
    cart_w, cart_h = 50.0 * width / 600, 30.0 * height / 400
    cart_x = x * scale + width / 2.0
    labels = torch.zeros(obs.shape[0], height, width, dtype=torch.uint8)
    labels[:, (py.view(-1) - cart_y).abs() < 0.6, :] = _TRACK
    labels.masked_fill_(rectangle(px, py, cart_x, cart_y, 0.0, 1.0, cart_h, cart_w / 2), _CART)

    # The pole leans by theta (clockwise positive) from the axle: on row y its centre is at
    # axle_x + (y - axle_y) tan(theta), and it is pole_half_w / cos(theta) wide horizontally
    # (its ends are cut along the rows, which rectangle() would not do).
    pole_len = scale * 2 * 0.5
    pole_half_w = max(1.0, 10.0 * width / 600 / 2)
    axle_x, axle_y = cart_x, cart_y + cart_h * 0.75
    cos_theta = torch.cos(theta).clamp(min=0.05)
    along = (py - axle_y) / cos_theta  # distance along the pole of row y's crossing
    centre = axle_x + (py - axle_y) * torch.tan(theta)
    pole = (along >= 0) & (along <= pole_len) & ((px - centre).abs() <= pole_half_w / cos_theta)
    labels.masked_fill_(pole, _POLE)
    labels.masked_fill_(disc(px, py, axle_x, axle_y, pole_half_w), _AXLE)
    return labels
