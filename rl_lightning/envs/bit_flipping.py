"""Bit flipping (Andrychowicz et al. 2017, "Hindsight Experience Replay", section 3.1): the goal-conditioned toy task
where a sparse reward defeats plain exploration and hindsight relabelling solves it.

The state is ``num_bits`` bits, the goal another ``num_bits`` bits, both drawn at reset (the goal uniform among the
patterns that differ from the state). Action ``i`` flips bit ``i``. The reward is 0 when the state equals the goal,
else -1. Reaching the goal terminates the episode (there is no action that keeps the state, so the goal could not be
held); an episode that has not reached it is truncated after ``max_episode_steps`` steps (``num_bits`` by default:
enough to reach any goal). So an episode's return is ``-(steps - 1)`` when it reached the goal, ``-max_episode_steps``
when it did not: :func:`reached_goal` tells them apart. A random policy reaches one of the ``2**n`` patterns in ``n``
steps rarely (for ``n = 20``, about once in 10^5 episodes).

The observation is the goal-conditioned Dict of gymnasium-robotics (``rl_lightning.data.her``'s contract):

=================== ====================================================
key                 holds
=================== ====================================================
``"observation"``   the state's bits, float32 ``(num_bits,)``
``"achieved_goal"`` the state's bits (what the goal is compared with)
``"desired_goal"``  the goal's bits
=================== ====================================================

:meth:`BitFlipping.compute_reward` and :meth:`BitFlipping.compute_terminated` give the reward and the termination of
any batch of achieved and desired goals, in torch: hindsight relabelling recomputes both for the goals it substitutes
(a relabelled transition that reaches its new goal is terminal, as the env's own would be).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from rl_lightning._checks import check_int
from rl_lightning.envs.base import VectorEnv
from rl_lightning.envs.spaces import OBSERVATION_KEY, TensorTree

ACHIEVED_GOAL_KEY = "achieved_goal"
DESIRED_GOAL_KEY = "desired_goal"
#: The most bits a state holds (a goal is drawn as one int64 pattern).
MAX_BITS = 62


class BitFlipping(VectorEnv):
    """``num_envs`` bit-flipping tasks of ``num_bits`` bits (module docstring).

    Args:
        num_envs: copies stepped in lock-step.
        seed: the private generator's seed (states and goals).
        device: where the state lives.
        num_bits: bits of the state and of the goal (the actions), in [2, 62].
        max_episode_steps: steps before an episode that has not reached its goal is truncated; None: ``num_bits``.
    """

    render_fps = 4
    can_draw = False
    _state_attributes = ("_state", "_goal", "_t")

    def __init__(
        self,
        num_envs: int,
        seed: int | None = None,
        device: torch.device | str = "cpu",
        num_bits: int = 10,
        max_episode_steps: int | None = None,
    ):
        self.num_bits = check_int("num_bits", num_bits, 2, MAX_BITS)
        #: Steps before a truncation.
        self.max_episode_steps = (
            num_bits if max_episode_steps is None else check_int("max_episode_steps", max_episode_steps, 1)
        )
        bits = gym.spaces.Box(0.0, 1.0, (num_bits,), np.float32)
        self.single_observation_space = gym.spaces.Dict(
            {OBSERVATION_KEY: bits, ACHIEVED_GOAL_KEY: bits, DESIRED_GOAL_KEY: bits}
        )
        self.single_action_space = gym.spaces.Discrete(num_bits)
        super().__init__(num_envs, seed, device)
        self._powers = 2 ** torch.arange(num_bits, device=self.device)
        self._state = torch.zeros(num_envs, num_bits, dtype=torch.bool, device=self.device)
        self._goal = torch.ones_like(self._state)
        self._t = torch.zeros(num_envs, dtype=torch.int64, device=self.device)

    # -- the goal-conditioned contract ----------------------------------------------------------------

    @staticmethod
    def compute_reward(achieved_goal: Tensor, desired_goal: Tensor, info: Any = None) -> Tensor:
        """float32 ``(batch,)``: 0 where ``achieved_goal`` equals ``desired_goal`` (both ``(batch, num_bits)``), else
        -1. ``info`` is not read (gymnasium-robotics' signature)."""
        return (achieved_goal == desired_goal).all(dim=-1).float() - 1.0

    @staticmethod
    def compute_terminated(achieved_goal: Tensor, desired_goal: Tensor, info: Any = None) -> Tensor:
        """bool ``(batch,)``: whether ``achieved_goal`` equals ``desired_goal`` (reaching the goal ends an episode)."""
        return (achieved_goal == desired_goal).all(dim=-1)

    # -- the vector env ---------------------------------------------------------------------------------

    def _draw_tasks(self) -> tuple[Tensor, Tensor]:
        """A state per env, uniform, and a goal uniform among the other ``2**num_bits - 1`` patterns (the state
        XOR a nonzero pattern)."""
        shape = (self.num_envs, self.num_bits)
        state = torch.rand(shape, generator=self.generator, device=self.device) < 0.5
        flips = torch.randint(1, 2**self.num_bits, (self.num_envs, 1), generator=self.generator, device=self.device)
        return state, state ^ ((flips & self._powers) != 0)

    def _observe(self, state: Tensor, goal: Tensor) -> TensorTree:
        bits = state.float()
        return TensorTree({OBSERVATION_KEY: bits, ACHIEVED_GOAL_KEY: bits.clone(), DESIRED_GOAL_KEY: goal.float()})

    def _reset_all(self) -> TensorTree:
        self._state, self._goal = self._draw_tasks()
        self._t = torch.zeros_like(self._t)
        return self._observe(self._state, self._goal)

    def _step(self, actions: Tensor) -> tuple[TensorTree, Tensor, Tensor, Tensor, dict[str, Any]]:
        flip = torch.nn.functional.one_hot(actions.long(), self.num_bits).bool()
        state = self._state ^ flip
        self._t = self._t + 1
        terminated = (state == self._goal).all(dim=1)
        reward = terminated.float() - 1.0
        truncated = (self._t >= self.max_episode_steps) & ~terminated
        final_obs = self._observe(state, self._goal)
        # Every env draws a new task each step (only the ended ones take it), so the generator advances alike
        # whoever ends.
        new_state, new_goal = self._draw_tasks()
        done = (terminated | truncated).unsqueeze(1)
        self._state = torch.where(done, new_state, state)
        self._goal = torch.where(done, new_goal, self._goal)
        self._t = torch.where(done.squeeze(1), 0, self._t)
        obs = self._observe(self._state, self._goal)
        return obs, reward, terminated, truncated, {"final_observation": final_obs}

    def __repr__(self) -> str:
        return f"BitFlipping(num_envs={self.num_envs}, num_bits={self.num_bits}, device={self.device})"


def reached_goal(returns: Tensor, max_episode_steps: int) -> Tensor:
    """bool, like ``returns``: which bit-flipping episodes reached their goal (a return above
    ``-max_episode_steps``; an episode that did not pays -1 at each of its ``max_episode_steps`` steps)."""
    return returns > -max_episode_steps


def bit_flipping_factory(num_bits: int) -> Any:
    """``factory(num_envs, seed, device)`` of :class:`BitFlipping` with ``num_bits`` bits (a registered id)."""

    def make(num_envs: int, seed: int | None = None, device: torch.device | str = "cpu") -> BitFlipping:
        return BitFlipping(num_envs, seed, device, num_bits=num_bits)

    make.__name__ = f"BitFlipping{num_bits}"
    return make
