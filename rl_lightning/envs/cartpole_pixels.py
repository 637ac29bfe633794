"""``rl_lightning/CartPolePixels-v1``: gymnasium's CartPole-v1 whose observation is an RGB frame drawn by our
torch rasteriser (no pygame), registered with gymnasium when this module is imported."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

from rl_lightning._checks import check_int
from rl_lightning.envs.cartpole import draw_cartpole

CARTPOLE_PIXELS_ID = "rl_lightning/CartPolePixels-v1"


class CartPolePixelsEnv(gym.ObservationWrapper):
    """gymnasium's CartPole-v1 seen as pixels: the observation is an RGB uint8 ``(height, width, 3)``
    frame of the state, drawn by :func:`~rl_lightning.envs.cartpole.draw_cartpole` (no pygame).

    Registered as ``rl_lightning/CartPolePixels-v1`` (with the 500-step time limit).
    ``render_mode="rgb_array"`` renders the latest observation.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 50}  # noqa: RUF012 - gymnasium's convention

    def __init__(self, height: int = 64, width: int = 96, render_mode: str | None = None):
        super().__init__(CartPoleEnv())
        self.height = check_int("height", height, minimum=8)
        self.width = check_int("width", width, minimum=8)
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self._render_mode = render_mode
        self.observation_space = gym.spaces.Box(0, 255, (self.height, self.width, 3), np.uint8)
        self._frame: np.ndarray | None = None

    @property
    def render_mode(self) -> str | None:
        return self._render_mode

    def observation(self, observation: np.ndarray) -> np.ndarray:
        self._frame = draw_cartpole(torch.from_numpy(observation), self.height, self.width).numpy()
        return self._frame

    def render(self) -> np.ndarray | None:
        return None if self._frame is None or self._render_mode is None else self._frame.copy()


if CARTPOLE_PIXELS_ID not in gym.registry:  # importing this module twice registers once
    gym.register(
        id=CARTPOLE_PIXELS_ID,
        entry_point="rl_lightning.envs.cartpole_pixels:CartPolePixelsEnv",
        max_episode_steps=500,
        reward_threshold=475.0,
    )
