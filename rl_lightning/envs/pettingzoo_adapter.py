"""PettingZoo parallel envs behind :class:`~rl_lightning.envs.multi_agent.MultiAgentVectorEnv`.

``num_scenes`` instances of a PettingZoo ``ParallelEnv`` are stepped in this process through numpy; the rows'
tensors are on the requested device. The agents are ``env.possible_agents``, in that order. Observations:

- an agent's Box observation (any dtype and shape) is flattened to float32, a Discrete one one-hot, and a Dict
  with ``"observation"`` and ``"action_mask"`` gives ``"obs"`` and ``"action_mask"``; observations of different
  sizes are zero-padded to the largest;
- ``"state"`` is ``env.state()`` where the env implements it, else the scene's rows' ``"obs"`` concatenated;
- ``"active"``: whether the agent is in ``env.agents`` (it acts at this step). An absent agent's row has zero
  ``"obs"``, reward 0 and an all-True ``"action_mask"``; its action is not passed to the env.

A scene ends when ``env.agents`` is empty after a step or every agent that acted terminated or truncated. Its rows
then report (module docstring of ``multi_agent``) terminated where any agent that acted terminated, else truncated;
a row absent at the end reports terminated. An agent that leaves earlier reports neither: it turns absent. Its own
last observation is not kept (a policy's value of an absent row is zeroed, as for a termination).

Seeding (as the gymnasium adapter): the first reset (and the first after ``reset(seed=s)``) resets scene ``i`` with
seed ``seed + i``; later resets continue each instance's own RNG. PettingZoo envs cannot save their state:
``restorable = False``.

``make_envs(env_id, backend="pettingzoo")`` resolves ``env_id``, a module path such as ``"mpe2.simple_spread_v3"``,
only inside the packages of :data:`ALLOWED_PACKAGES` (``module.parallel_env(**kwargs)``); the class itself also
takes a callable returning a ``ParallelEnv`` (your own env).
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from rl_lightning._checks import check_bool, check_seed
from rl_lightning.envs.multi_agent import (
    ACTIVE_KEY,
    MULTIAGENT_EXTRA,
    MultiAgentVectorEnv,
    multi_agent_space,
    same_action_space,
)
from rl_lightning.envs.spaces import ACTION_MASK_KEY, OBSERVATION_KEY, TensorTree

#: The packages whose modules ``make_envs(backend="pettingzoo")`` may import an env from.
ALLOWED_PACKAGES = ("pettingzoo", "mpe2")
_MODULE_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")


def resolve_parallel_env(env_id: str) -> Callable[..., Any]:
    """``module.parallel_env`` of the module path ``env_id`` (e.g. ``"mpe2.simple_spread_v3"``), importing only
    inside :data:`ALLOWED_PACKAGES`.

    Raises:
        ValueError: for a path outside the allow-list, a module that does not exist or has no ``parallel_env``.
        ImportError: naming the extra, where the package is not installed.
    """
    allowed = ", ".join(ALLOWED_PACKAGES)
    if not isinstance(env_id, str) or not _MODULE_PATH.match(env_id) or env_id.split(".")[0] not in ALLOWED_PACKAGES:
        raise ValueError(
            f"env_id {env_id!r} for backend='pettingzoo' must be a module path inside {allowed}, e.g. "
            "'mpe2.simple_spread_v3' or 'pettingzoo.butterfly.pistonball_v6' (nothing else is imported); "
            "for your own env pass a callable to PettingZooVectorEnv"
        )
    package = env_id.split(".")[0]
    try:
        importlib.import_module(package)
    except ImportError as error:
        raise ImportError(f"the 'pettingzoo' backend needs {package}: {MULTIAGENT_EXTRA} ({error})") from error
    try:
        module = importlib.import_module(env_id)
    except ModuleNotFoundError as error:
        raise ValueError(f"env_id {env_id!r}: no such module in {package} ({error})") from None
    factory = getattr(module, "parallel_env", None)
    if not callable(factory):
        raise ValueError(f"env_id {env_id!r}: the module has no parallel_env() (a PettingZoo parallel env module)")
    return factory


class _Converter:
    """One agent's observation space -> a flat float32 vector (and its action mask), sized ``size``."""

    def __init__(self, agent: str, space: gym.Space, where: str):
        self.masked = isinstance(space, gym.spaces.Dict) and ACTION_MASK_KEY in space.spaces
        if self.masked:
            if OBSERVATION_KEY not in space.spaces:
                raise ValueError(f"{where}: agent {agent}'s Dict observation has an action_mask but no 'observation'")
            space = space.spaces[OBSERVATION_KEY]
        if isinstance(space, gym.spaces.Box):
            self.one_hot = None
            self.size = int(np.prod(space.shape))
        elif isinstance(space, gym.spaces.Discrete):
            self.one_hot = (int(space.start), int(space.n))
            self.size = int(space.n)
        else:
            raise ValueError(
                f"{where}: agent {agent}'s observation must be a Box, a Discrete, or a Dict of 'observation' and "
                f"'action_mask', got {space}"
            )

    def vector(self, obs: Any) -> np.ndarray:
        if self.masked:
            obs = obs[OBSERVATION_KEY]
        if self.one_hot is not None:
            vector = np.zeros(self.size, np.float32)
            vector[int(obs) - self.one_hot[0]] = 1.0
            return vector
        return np.asarray(obs, dtype=np.float32).reshape(-1)


class PettingZooVectorEnv(MultiAgentVectorEnv):
    """``num_scenes`` instances of a PettingZoo parallel env as rows (module docstring).

    Args:
        env: a module path inside :data:`ALLOWED_PACKAGES` (``"mpe2.simple_spread_v3"``), or a callable
            ``env(**env_kwargs) -> ParallelEnv``.
        num_scenes: instances (the env has ``num_scenes * num_agents`` rows).
        seed: the first reset's seed (scene ``i`` gets ``seed + i``) and the private generator's.
        device: where the rows' tensors are returned.
        render: build the instances with ``render_mode="rgb_array"`` so that :meth:`render` works.
        **env_kwargs: passed to the env's constructor, e.g. ``max_cycles=25``, ``continuous_actions=True``.
    """

    restorable = False  # PettingZoo envs cannot save their state

    def __init__(
        self,
        env: str | Callable[..., Any],
        num_scenes: int,
        seed: int | None = None,
        device: torch.device | str = "cpu",
        render: bool = False,
        **env_kwargs: Any,
    ):
        check_bool("render", render)
        if isinstance(num_scenes, bool) or not isinstance(num_scenes, int) or num_scenes < 1:
            raise ValueError(f"num_envs (the number of scenes) must be a positive int, got {num_scenes!r}")
        if seed is None:
            seed = int(torch.randint(0, 2**62, (1,)).item())
        check_seed("seed", seed)
        factory = env if callable(env) and not isinstance(env, str) else resolve_parallel_env(env)
        self.env_id = env if isinstance(env, str) else getattr(env, "__name__", type(env).__name__)
        if render:
            os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame renderers, headless
            env_kwargs = {**env_kwargs, "render_mode": "rgb_array"}
        #: The PettingZoo instances, one per scene.
        self.scenes = [factory(**env_kwargs) for _ in range(num_scenes)]
        try:
            self._convert_spaces(self.scenes[0])
            super().__init__(num_scenes, list(self.scenes[0].possible_agents), seed, device)
        except BaseException:
            self.close()
            raise
        self.can_render = render
        fps = getattr(self.scenes[0], "metadata", {}).get("render_fps")
        if isinstance(fps, (int, float)) and not isinstance(fps, bool) and fps > 0:
            self.render_fps = max(1, round(fps))
        self._live: list[list[str]] = [[] for _ in range(num_scenes)]
        self._needs_reset = True

    def _convert_spaces(self, scene: Any) -> None:
        """The rows' spaces from the first instance's agents (one probing reset, for ``state()``)."""
        where = f"PettingZoo env {self.env_id!r}"
        agents = list(scene.possible_agents)
        actions = same_action_space({agent: scene.action_space(agent) for agent in agents}, where)
        if isinstance(actions, gym.spaces.Discrete):
            self._action_start = int(actions.start)
            self.single_action_space = gym.spaces.Discrete(int(actions.n))
        elif isinstance(actions, gym.spaces.Box) and np.issubdtype(actions.dtype, np.floating):
            self._action_dtype = actions.dtype
            self.single_action_space = gym.spaces.Box(
                actions.low.astype(np.float32), actions.high.astype(np.float32), actions.shape, np.float32
            )
        else:
            raise ValueError(f"{where}: only Discrete and floating Box action spaces are supported, got {actions}")
        self._converters = [_Converter(agent, scene.observation_space(agent), where) for agent in agents]
        self._obs_dim = max(converter.size for converter in self._converters)
        self._masked = any(converter.masked for converter in self._converters)
        if self._masked and not isinstance(actions, gym.spaces.Discrete):
            raise ValueError(f"{where}: action masks need Discrete actions, got {actions}")
        scene.reset(seed=0)
        try:
            state = np.asarray(scene.state(), dtype=np.float32).reshape(-1)
            self._state_dim, self._has_state = int(state.size), True
        except (NotImplementedError, AttributeError):
            self._state_dim, self._has_state = self._obs_dim * len(agents), False
        self.single_observation_space = multi_agent_space(
            self._obs_dim,
            len(agents),
            self._state_dim,
            active=True,
            num_actions=int(actions.n) if self._masked else None,
        )

    # -- the contract -----------------------------------------------------------------------------------

    def seed(self, seed: int | None) -> None:
        """Seed the private generator and the next reset (scene ``i`` gets ``seed + i``; ``None``: drawn)."""
        if seed is None:
            seed = int(torch.randint(0, 2**62, (1,)).item())
        super().seed(seed)
        self._reset_seed: int | None = seed

    def _empty(self) -> dict[str, np.ndarray]:
        scenes, agents = self.num_scenes, self.num_agents
        arrays = {
            "obs": np.zeros((scenes, agents, self._obs_dim), np.float32),
            "active": np.zeros((scenes, agents), np.bool_),
            "state": np.zeros((scenes, self._state_dim), np.float32),
        }
        if self._masked:
            arrays["mask"] = np.ones((scenes, agents, self.num_actions), np.bool_)
        return arrays

    def _fill(self, arrays: dict[str, np.ndarray], index: int, obs: dict[str, Any], present: list[str]) -> None:
        """Scene ``index``'s rows of ``arrays`` from its obs dict, for the agents in ``present``."""
        scene = self.scenes[index]
        for agent_index, agent in enumerate(self.agent_names):
            if agent not in present or agent not in obs:
                continue
            converter = self._converters[agent_index]
            vector = converter.vector(obs[agent])
            arrays["obs"][index, agent_index, : vector.size] = vector
            arrays["active"][index, agent_index] = True
            if converter.masked:
                arrays["mask"][index, agent_index] = np.asarray(obs[agent][ACTION_MASK_KEY]).reshape(-1) != 0
        if self._has_state:
            arrays["state"][index] = np.asarray(scene.state(), dtype=np.float32).reshape(-1)
        else:
            arrays["state"][index] = arrays["obs"][index].reshape(-1)

    def _tree(self, arrays: dict[str, np.ndarray]) -> TensorTree:
        def tensor(array: np.ndarray) -> Tensor:
            return torch.from_numpy(array).to(self.device)

        extra = {ACTIVE_KEY: tensor(arrays["active"]).reshape(self.num_envs, 1)}
        if self._masked:
            extra[ACTION_MASK_KEY] = tensor(arrays["mask"]).reshape(self.num_envs, -1)
        return self._rows(tensor(arrays["obs"]), tensor(arrays["state"]), **extra)

    def _reset_scene(self, arrays: dict[str, np.ndarray], index: int, seed: int | None) -> None:
        obs, _ = self.scenes[index].reset(seed=seed)
        self._live[index] = list(self.scenes[index].agents)
        self._fill(arrays, index, obs, self._live[index])

    def _reset_all(self) -> TensorTree:
        arrays = self._empty()
        seed, self._reset_seed = self._reset_seed, None  # later resets continue each instance's RNG
        for index in range(self.num_scenes):
            self._reset_scene(arrays, index, None if seed is None else seed + index)
        self._needs_reset = False
        return self._tree(arrays)

    def _step(self, actions: Tensor) -> tuple[TensorTree, Tensor, Tensor, Tensor, dict[str, Any]]:
        if self._needs_reset:
            self._reset_all()
        actions = self.per_scene(actions).cpu().numpy()
        final, after = self._empty(), self._empty()
        reward = np.zeros((self.num_scenes, self.num_agents), np.float32)
        terminated = np.zeros((self.num_scenes, self.num_agents), np.bool_)
        truncated = np.zeros((self.num_scenes, self.num_agents), np.bool_)
        for index, scene in enumerate(self.scenes):
            acting = self._live[index]
            obs, rewards, terminations, truncations, _ = scene.step(
                {agent: self._action(actions[index, self.agent_names.index(agent)]) for agent in acting}
            )
            for agent_index, agent in enumerate(self.agent_names):
                reward[index, agent_index] = float(rewards.get(agent, 0.0)) if agent in acting else 0.0
            left = [agent for agent in acting if terminations.get(agent, False) or truncations.get(agent, False)]
            present = [agent for agent in scene.agents if agent not in left]
            if present:  # the scene goes on; agents that left turn absent
                self._fill(final, index, obs, present)
                self._live[index] = present
                continue
            # The scene ended: every row reports it.
            self._fill(final, index, obs, acting)
            ended_by_termination = any(terminations.get(agent, False) for agent in acting) or not left
            for agent_index, agent in enumerate(self.agent_names):
                if agent in acting and not ended_by_termination:
                    truncated[index, agent_index] = True
                else:
                    terminated[index, agent_index] = True
            self._reset_scene(after, index, None)
        going_on = ~(terminated | truncated).any(axis=1)
        for key in final:  # the scenes that went on: the same obs
            after[key][going_on] = final[key][going_on]

        def tensor(array: np.ndarray) -> Tensor:
            return torch.from_numpy(array).to(self.device).reshape(self.num_envs)

        info = {"final_observation": self._tree(final)}
        return self._tree(after), tensor(reward), tensor(terminated), tensor(truncated), info

    def _action(self, action: np.ndarray) -> Any:
        if self.action_kind == "discrete":
            return int(action) + self._action_start
        return np.asarray(action, dtype=self._action_dtype)

    def render(self) -> Tensor:
        """The current frame of every row (a scene's rows share it), uint8 ``(num_envs, H, W, 3)`` on the CPU
        (needs ``render=True``)."""
        if not self.can_render:
            raise NotImplementedError(f"build PettingZooVectorEnv({self.env_id!r}, ...) with render=True to render it")
        if self._needs_reset:
            self._reset_all()
        frames = torch.from_numpy(np.stack([np.asarray(scene.render())[..., :3] for scene in self.scenes]))
        return self.scene_rows(frames)

    def close(self) -> None:
        """Close every instance."""
        for scene in getattr(self, "scenes", []):
            scene.close()

    def state_dict(self) -> dict[str, Any]:
        """The env id, ``num_envs`` and the private generator; ``"restorable": False``."""
        return {**super().state_dict(), "env_id": self.env_id, "restorable": False}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the private generator, warn, and restart every scene fresh (PettingZoo envs cannot be restored)."""
        self._restart_fresh(state, "PettingZoo envs")
