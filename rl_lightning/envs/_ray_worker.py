"""The Ray actor of :class:`~rl_lightning.envs.ray_vector.RayVectorEnv`: one worker's gymnasium vector env.

Sent to the workers by value (``ray.cloudpickle.register_pickle_by_value``), so it imports gymnasium and numpy
only: a worker does not import this package (torch, Lightning) to start.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import concatenate, create_empty_array, iterate


class EnvWorker:
    """One Ray actor's envs: a gymnasium vector env (``"sync"``) of ``num_envs`` copies, stepped on request."""

    def __init__(
        self,
        spec: gym.envs.registration.EnvSpec,
        num_envs: int,
        env_kwargs: dict[str, Any],
        setup: Callable[[], Any] | None = None,
    ):
        if setup is not None:  # e.g. MuJoCo's warnings routed (sent by value too)
            setup()
        # From the learner's spec, not this process's registry: an env the user registered in their script
        # (its entry point a class importable here, or sent by value) is built as it is there.
        self.envs = gym.make_vec(
            spec,
            num_envs=num_envs,
            vectorization_mode="sync",
            # copy=False: Ray copies the arrays into its object store as the call returns.
            vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP, "copy": False},
            **env_kwargs,
        )

    def spaces(self) -> tuple[gym.Space, gym.Space, dict[str, Any]]:
        return self.envs.single_observation_space, self.envs.single_action_space, dict(self.envs.metadata)

    def reset(self, seed: int | None, options: dict[str, Any] | None) -> tuple[Any, dict[str, Any]]:
        return self.envs.reset(seed=seed, options=options)

    def step(self, actions: np.ndarray) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.envs.step(actions)
        ended = info.get("_final_obs")
        if ended is not None:
            # One dense array (the batch's layout) instead of an object array of per-env observations.
            space = self.envs.single_observation_space
            items = [
                info["final_obs"][i] if ended[i] else item
                for i, item in enumerate(iterate(self.envs.observation_space, obs))
            ]
            info["final_obs"] = concatenate(space, items, create_empty_array(space, len(items)))
        return obs, reward, terminated, truncated, info

    def render(self) -> list[np.ndarray]:
        return list(self.envs.render())

    def close(self) -> None:
        self.envs.close()
