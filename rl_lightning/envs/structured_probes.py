"""Probes with known answers for the richer spaces: a Dict observation, MultiDiscrete and
MultiBinary actions, and an action mask whose unmasked optimum is illegal.

Every episode is one step, ending by termination; the state is a few random bits drawn at reset.

==================  ======================  =====================================  ===================  =======
env                 actions                 obs                                    optimum              return
==================  ======================  =====================================  ===================  =======
DictProbe           Discrete(4)             {"vector": (v, noise), "image": lit    2 * v + (right half  1
                                            left or right half, uint8 (10, 10, 3)}  lit)
MultiDiscreteProbe  MultiDiscrete([2, 3])   (b0, b1)                               (b0, 2 * b1)         1
MultiBinaryProbe    MultiBinary(3)          (b0, b1, b2)                           (1 - b0, ...)        1
MaskedProbe         Discrete(4)             {"observation": (b,), "action_mask"}   b: 1, else 3         0.25
==================  ======================  =====================================  ===================  =======

- DictProbe: +1 for the optimal action, else -1; it depends on one entry of the vector key and on
  the image key, so a policy that ignores either key is right half the time (return 0).
- MultiDiscreteProbe: +0.5 per right dimension, -0.5 per wrong one (a policy right in one
  dimension only gets 0).
- MultiBinaryProbe: per bit +1/3 if right, -1/3 if wrong.
- MaskedProbe: rewards (+1, +0.5, -0.5, 0) for actions 0-3; action 0 is never legal and action 1
  only when b = 1, so the best legal action is 1 (0.5) when b = 1 and 3 (0) when b = 0. A learner
  that ignored the mask would pick action 0; the env counts the illegal actions it is given
  (``illegal_actions``) and still pays their reward, so only the count shows them.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from rl_lightning.envs.base import VectorEnv
from rl_lightning.envs.spaces import ACTION_MASK_KEY, OBSERVATION_KEY, TensorTree

DICT_IMAGE_SIZE = 10


class _OneStepProbe(VectorEnv):
    """Random bits ``(num_envs, num_bits)`` drawn at every reset, one step per episode."""

    num_bits: int = 1
    render_fps = 4
    can_draw = False
    _state_attributes = ("_bits",)

    def __init__(self, num_envs: int, seed: int | None = None, device: torch.device | str = "cpu"):
        super().__init__(num_envs, seed, device)
        self._bits = torch.zeros(num_envs, self.num_bits, dtype=torch.int64, device=self.device)  # drawn by reset

    def _draw(self, count: int) -> Tensor:
        return (torch.rand(count, self.num_bits, generator=self.generator, device=self.device) < 0.5).long()

    def _observe(self, bits: Tensor) -> Tensor | TensorTree:
        return bits.float()

    def _reward(self, bits: Tensor, actions: Tensor) -> Tensor:
        raise NotImplementedError

    def _reset_all(self) -> Tensor | TensorTree:
        self._bits = self._draw(self.num_envs)
        return self._observe(self._bits)

    def _step(self, actions: Tensor) -> tuple[Any, Tensor, Tensor, Tensor, dict[str, Any]]:
        reward = self._reward(self._bits, actions).float()
        final_obs = self._observe(self._bits)
        terminated = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        self._bits = self._draw(self.num_envs)
        return (
            self._observe(self._bits),
            reward,
            terminated,
            torch.zeros_like(terminated),
            {"final_observation": final_obs},
        )


class DictProbe(_OneStepProbe):
    """A Dict observation: the optimal action of four is ``2 * vector[0] + (image's right half lit)``."""

    num_bits = 3  # the vector's bit, its noise entry, the image's bit

    def __init__(self, num_envs: int, seed: int | None = None, device: torch.device | str = "cpu"):
        size = DICT_IMAGE_SIZE
        self.single_observation_space = gym.spaces.Dict(
            {
                "vector": gym.spaces.Box(0.0, 1.0, (2,), np.float32),
                "image": gym.spaces.Box(0, 255, (size, size, 3), np.uint8),
            }
        )
        self.single_action_space = gym.spaces.Discrete(4)
        super().__init__(num_envs, seed, device)

    def _observe(self, bits: Tensor) -> TensorTree:
        right_half = torch.arange(DICT_IMAGE_SIZE, device=self.device) >= DICT_IMAGE_SIZE // 2
        lit = right_half == bits[:, 2:3].bool()  # (num_envs, width)
        image = torch.where(lit, 255, 0).to(torch.uint8)[:, None, :, None]
        return TensorTree(
            {"vector": bits[:, :2].float(), "image": image.expand(-1, DICT_IMAGE_SIZE, -1, 3).contiguous()}
        )

    @staticmethod
    def optimal_actions(bits: Tensor) -> Tensor:
        return 2 * bits[:, 0] + bits[:, 2]

    def _reward(self, bits: Tensor, actions: Tensor) -> Tensor:
        return torch.where(actions == self.optimal_actions(bits), 1.0, -1.0)


class MultiDiscreteProbe(_OneStepProbe):
    """MultiDiscrete([2, 3]) actions: the optimum is ``(b0, 2 * b1)`` for the observation ``(b0, b1)``."""

    num_bits = 2

    def __init__(self, num_envs: int, seed: int | None = None, device: torch.device | str = "cpu"):
        self.single_observation_space = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
        self.single_action_space = gym.spaces.MultiDiscrete([2, 3])
        super().__init__(num_envs, seed, device)

    @staticmethod
    def optimal_actions(bits: Tensor) -> Tensor:
        return torch.stack([bits[:, 0], 2 * bits[:, 1]], dim=1)

    def _reward(self, bits: Tensor, actions: Tensor) -> Tensor:
        right = (actions == self.optimal_actions(bits)).float()
        return (right - 0.5).sum(dim=1)


class MultiBinaryProbe(_OneStepProbe):
    """MultiBinary(3) actions: the optimum is ``1 - b`` for the observation ``b``."""

    num_bits = 3

    def __init__(self, num_envs: int, seed: int | None = None, device: torch.device | str = "cpu"):
        self.single_observation_space = gym.spaces.Box(0.0, 1.0, (3,), np.float32)
        self.single_action_space = gym.spaces.MultiBinary(3)
        super().__init__(num_envs, seed, device)

    @staticmethod
    def optimal_actions(bits: Tensor) -> Tensor:
        return 1 - bits

    def _reward(self, bits: Tensor, actions: Tensor) -> Tensor:
        right = (actions == self.optimal_actions(bits)).float()
        return (2 * right - 1).mean(dim=1)


class MaskedProbe(_OneStepProbe):
    """An action mask whose unmasked optimum (action 0) is never legal; see the module's table."""

    num_bits = 1
    rewards = (1.0, 0.5, -0.5, 0.0)
    _state_attributes = ("_bits", "_illegal_actions")

    def __init__(self, num_envs: int, seed: int | None = None, device: torch.device | str = "cpu"):
        self.single_observation_space = gym.spaces.Dict(
            {
                OBSERVATION_KEY: gym.spaces.Box(0.0, 1.0, (1,), np.float32),
                ACTION_MASK_KEY: gym.spaces.Box(0, 1, (4,), np.bool_),
            }
        )
        self.single_action_space = gym.spaces.Discrete(4)
        super().__init__(num_envs, seed, device)
        self._illegal_actions = torch.zeros((), dtype=torch.int64, device=self.device)  # counted on the device
        self._reward_table = torch.tensor(self.rewards, device=self.device)

    @property
    def illegal_actions(self) -> int:
        """Illegal actions this env was given (it pays them anyway: only this count shows them)."""
        return int(self._illegal_actions)

    @staticmethod
    def masks(bits: Tensor) -> Tensor:
        """Bool ``(num_envs, 4)``: action 0 never, action 1 where b = 1, actions 2 and 3 always."""
        always = torch.ones_like(bits[:, 0], dtype=torch.bool)
        return torch.stack([~always, bits[:, 0].bool(), always, always], dim=1)

    @staticmethod
    def optimal_actions(bits: Tensor) -> Tensor:
        return torch.where(bits[:, 0] == 1, 1, 3)

    def _observe(self, bits: Tensor) -> TensorTree:
        return TensorTree({OBSERVATION_KEY: bits.float(), ACTION_MASK_KEY: self.masks(bits)})

    def _reward(self, bits: Tensor, actions: Tensor) -> Tensor:
        legal = self.masks(bits).gather(1, actions.long().unsqueeze(1)).squeeze(1)
        self._illegal_actions += (~legal).sum()
        return self._reward_table[actions.long()]
