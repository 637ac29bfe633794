"""CartPole-v1 in torch, step for step the same dynamics as gymnasium's ``CartPole-v1``."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector.utils import batch_space
from torch import Tensor

from rl_lightning.envs.base import VectorEnv

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


class CartPole(VectorEnv):
    """``num_envs`` copies of gymnasium's ``CartPole-v1`` (Euler integration, +1 reward on
    every step including the terminating one, truncation after 500 steps).

    Args:
        num_envs: number of copies.
        seed: seed of the private generator.
        device: where the state lives.
        dtype: ``torch.float32`` (default, fastest) or ``torch.float64`` (gymnasium computes in
            float64: whole trajectories then agree with it to rounding). Observations are
            float32 either way.
        max_episode_steps: the time limit (500 for ``CartPole-v1``).

    ``env.state`` is the physical state ``(num_envs, 4)`` = (x, x_dot, theta, theta_dot); it
    may be read and assigned (``env.state = s`` or ``env.state[i] = s_i``).
    """

    def __init__(
        self,
        num_envs: int,
        seed: int | None = None,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
        max_episode_steps: int = MAX_EPISODE_STEPS,
    ):
        if dtype not in (torch.float32, torch.float64):
            raise TypeError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
        if isinstance(max_episode_steps, bool) or not isinstance(max_episode_steps, int):
            raise TypeError(f"max_episode_steps must be an int, got {max_episode_steps!r}")
        if max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be >= 1, got {max_episode_steps}")
        high = np.array(
            [X_THRESHOLD * 2, np.inf, THETA_THRESHOLD * 2, np.inf],
            dtype=np.float32,
        )
        self.single_observation_space = gym.spaces.Box(-high, high, dtype=np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        super().__init__(num_envs, seed, device)
        self.dtype = dtype
        self.max_episode_steps = max_episode_steps
        #: Auto-reset without any host read of tensor values (the default off the CPU, where a read
        #: stalls the device; on the CPU the index-based reset draws fewer random numbers).
        self.sync_free = self.device.type != "cpu"
        # Stored as (4, num_envs): each physical quantity is one contiguous row, so every
        # elementwise kernel of the dynamics runs over contiguous memory.
        self._state = torch.zeros(4, num_envs, dtype=dtype, device=self.device)
        self._clock = 0
        self._episode_start = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        self._force_over_mass = torch.tensor(
            [-FORCE_MAG / TOTAL_MASS, FORCE_MAG / TOTAL_MASS], dtype=dtype, device=self.device
        )
        # 0-dim tensors of the state's dtype: a Python float would be re-wrapped every step.
        self._gravity = torch.tensor(GRAVITY, dtype=dtype, device=self.device)
        self._x_threshold = torch.tensor(X_THRESHOLD, dtype=dtype, device=self.device)
        self._theta_threshold = torch.tensor(THETA_THRESHOLD, dtype=dtype, device=self.device)
        self._four_thirds_length = torch.tensor(4.0 / 3.0 * HALF_POLE_LENGTH, dtype=dtype, device=self.device)
        # A valid state before the first reset, drawn without advancing the generator, so that
        # `CartPole(n, seed=s).reset()` starts exactly like `reset(seed=s)` (and that state).
        generator_state = self.generator.get_state()
        self._reset_all()
        self.generator.set_state(generator_state)

    @property
    def episode_steps(self) -> Tensor:
        """Steps taken so far in each env's current episode, int64 ``(num_envs,)``."""
        return self._clock - self._episode_start

    @property
    def state(self) -> Tensor:
        """Physical state ``(num_envs, 4)``: a view, so in-place writes reach the env."""
        return self._state.T

    @state.setter
    def state(self, value: Tensor) -> None:
        value = torch.as_tensor(value, dtype=self.dtype, device=self.device)
        if value.shape != (self.num_envs, 4):
            raise ValueError(f"state must have shape ({self.num_envs}, 4), got {tuple(value.shape)}")
        # Always a copy: a (1, 4) value's transpose is already contiguous and would alias it.
        self._state = value.T.clone(memory_format=torch.contiguous_format)

    def _obs(self, state: Tensor, private: bool = False) -> Tensor:
        """Observations ``(num_envs, 4)`` of a ``(4, num_envs)`` state, as a transposed view of
        memory the env never reads again (a copy unless ``private``), so callers may keep or
        modify them. A contiguous (4, N) copy is a memcpy; a transposing copy costs ~10x more,
        so observations are not contiguous: use ``.reshape``, not ``.view``."""
        if self.dtype != torch.float32:
            return state.T.float()  # float64 -> float32 is a copy anyway
        return state.T if private else state.clone().T

    def _random_states(self, count: int) -> Tensor:
        states = torch.empty(4, count, dtype=self.dtype, device=self.device)
        return states.uniform_(-RESET_BOUND, RESET_BOUND, generator=self.generator)

    def _reset_all(self) -> Tensor:
        self._state = self._random_states(self.num_envs)
        self._episode_start.fill_(self._clock)
        return self._obs(self._state)

    def _step(self, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, dict[str, Any]]:
        # gymnasium's equations, regrouped so that each line is one fused kernel (addcmul
        # computes a + value * b * c): a step costs ~20 kernels instead of ~35, which is what
        # decides speed for up to a few thousand envs. Constants are folded in float64.
        x, x_dot, theta, theta_dot = self._state
        if actions.dtype not in (torch.int32, torch.int64):
            actions = actions.long()
        # temp = (force + m_p l theta_dot^2 sin) / M
        force_over_mass = self._force_over_mass.index_select(0, actions)
        cos_theta, sin_theta = torch.cos(theta), torch.sin(theta)
        temp = torch.addcmul(force_over_mass, theta_dot.square(), sin_theta, value=POLE_MASS_LENGTH / TOTAL_MASS)
        # theta_acc = (g sin - cos temp) / (l (4/3 - m_p cos^2 / M))
        numerator = torch.addcmul(sin_theta.mul_(self._gravity), cos_theta, temp, value=-1.0)
        denominator = torch.addcmul(
            self._four_thirds_length, cos_theta, cos_theta, value=-HALF_POLE_LENGTH * MASS_POLE / TOTAL_MASS
        )
        theta_acc = numerator.div_(denominator)
        # x_acc = temp - m_p l theta_acc cos / M
        x_acc = torch.addcmul(temp, theta_acc, cos_theta, value=-POLE_MASS_LENGTH / TOTAL_MASS)

        # Euler integration, written straight into the next state tensor.
        final = torch.empty_like(self._state)
        torch.add(x, x_dot, alpha=TAU, out=final[0])
        torch.add(x_dot, x_acc, alpha=TAU, out=final[1])
        torch.add(theta, theta_dot, alpha=TAU, out=final[2])
        torch.add(theta_dot, theta_acc, alpha=TAU, out=final[3])

        terminated = (final[0].abs() > self._x_threshold) | (final[2].abs() > self._theta_threshold)
        # Episode lengths are kept as start times against a host-side clock: one comparison
        # per step instead of an increment and a comparison.
        self._clock += 1
        truncated = self._episode_start <= self._clock - self.max_episode_steps
        done = terminated | truncated

        if self.sync_free:
            # Auto-reset without reading `done` on the host (on a GPU that read is a sync): every
            # env draws a fresh state and the finished ones take it.
            self._state = torch.where(done, self._random_states(self.num_envs), final)
            self._episode_start = torch.where(done, self._clock, self._episode_start)
            obs, final_obs = self._obs(self._state), self._obs(final, private=True)
        else:
            # Auto-reset: only the finished envs get fresh random states (no full-size draw; the
            # host reads which envs finished, free on the CPU).
            done_idx = done.nonzero().squeeze(1)
            if done_idx.numel() > 0:
                self._state = final.index_copy(1, done_idx, self._random_states(done_idx.numel()))
                self._episode_start.index_fill_(0, done_idx, self._clock)
                # `final` is referenced by nothing but info["final_observation"] from here on.
                obs, final_obs = self._obs(self._state), self._obs(final, private=True)
            else:
                self._state = final
                obs = final_obs = self._obs(final)  # nothing reset: the same values, one copy
        reward = torch.ones(self.num_envs, dtype=torch.float32, device=self.device)
        return obs, reward, terminated, truncated, {"final_observation": final_obs}

    _state_attributes = ("_state", "_clock", "_episode_start")

    def draw(self, obs: Tensor) -> Tensor:
        from rl_lightning.envs.render import draw_cartpole

        return draw_cartpole(obs)


class CartPoleNoVel(CartPole):
    """CartPole-v1 without the two velocities in the observation, ``(x, theta)``: partially observed,
    as in sb3-contrib's recurrent benchmarks (``CartPoleNoVel-v1``). A policy must infer the
    velocities from what it saw before: feed-forward policies do poorly, recurrent ones solve it."""

    def __init__(self, num_envs: int, seed: int | None = None, device: torch.device | str = "cpu", **kwargs: Any):
        super().__init__(num_envs, seed, device, **kwargs)
        high = np.array([X_THRESHOLD * 2, THETA_THRESHOLD * 2], dtype=np.float32)
        self.single_observation_space = gym.spaces.Box(-high, high, dtype=np.float32)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.obs_shape = (2,)

    def _obs(self, state: Tensor, private: bool = False) -> Tensor:
        return state[0::2].T.to(torch.float32, copy=True)  # (x, theta), never aliasing the state

    def draw(self, obs: Tensor) -> Tensor:
        from rl_lightning.envs.render import draw_cartpole

        zeros = torch.zeros_like(obs[..., :1])
        return draw_cartpole(torch.cat([obs[..., :1], zeros, obs[..., 1:], zeros], dim=-1))
