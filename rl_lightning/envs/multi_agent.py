"""Multi-agent envs behind the :class:`~rl_lightning.envs.base.VectorEnv` contract: agents are rows.

A :class:`MultiAgentVectorEnv` holds ``num_scenes`` independent copies of one multi-agent scene of
``num_agents`` agents (named ``agent_names``) and shows them as ``num_envs == num_scenes * num_agents`` rows,
scene-major: row ``r`` is agent ``r % num_agents`` of scene ``r // num_agents``. Everything else of
``VectorEnv`` holds per row: obs, reward (each agent's own), terminated, truncated,
``info["final_observation"]``, auto-reset inside ``step``, the private generator, ``state_dict``.

**``make_envs(env_id, num_envs, ...)`` of the multi-agent backends (``"vmas"``, ``"pettingzoo"``) and of
``"RoleAssignment-v0"`` takes ``num_envs`` = the number of SCENES** (what VMAS and BenchMARL call num_envs);
the env it builds has ``num_envs = num_scenes * num_agents`` rows.

The observation (``single_observation_space``) is a ``Dict`` of Box leaves:

=================== ================================ =================================================
key                 leaf                             holds
=================== ================================ =================================================
``"obs"``           float32 ``(obs_dim,)``           the agent's own observation; agents whose
                                                     observations differ in size are zero-padded at
                                                     the end to the largest
``"agent_id"``      float32 ``(num_agents,)``        one-hot of the row's agent index
``"state"``         float32 ``(state_dim,)``         the scene's global state, the same on every row of
                                                     a scene: PettingZoo's ``env.state()`` where the env
                                                     implements it, else (and for VMAS) the rows'
                                                     ``"obs"`` of the scene concatenated in agent order
``"active"``        bool ``(1,)`` (PettingZoo only)  whether the agent is in the scene at this step
``"action_mask"``   bool ``(n,)`` (where given)      the legal actions (all True for an absent agent)
=================== ================================ =================================================

Every agent has the same action space (``Discrete`` or ``Box``); differing ones are a ``ValueError`` naming
them. Episodes end per **scene**: all rows of a scene report ``terminated | truncated`` at the same step.
An agent that leaves a PettingZoo scene early does not report terminated then: it becomes absent
(``"active"`` False: zero ``"obs"``, reward 0, its actions ignored) until the scene ends; at the scene's end
a row absent then reports terminated, and a present row the scene's flags: terminated if any agent present
at that step terminated, else truncated. A policy's critic multiplies its values by ``"active"``, which keeps
the returns right without a per-agent done.
"""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from rl_lightning._checks import check_int
from rl_lightning.envs.base import VectorEnv
from rl_lightning.envs.spaces import ACTION_MASK_KEY, ACTIVE_KEY, AGENT_ID_KEY, GLOBAL_STATE_KEY, TensorTree

#: The observation key of an agent's own observation (the keys of a row live in ``rl_lightning.envs.spaces``, below
#: the networks that read them).
OBS_KEY = "obs"
STATE_KEY = GLOBAL_STATE_KEY
#: The extra that installs the multi-agent backends.
MULTIAGENT_EXTRA = 'pip install "rl_lightning[multiagent]"'


def multi_agent_space(
    obs_dim: int, num_agents: int, state_dim: int, active: bool = False, num_actions: int | None = None
) -> gym.spaces.Dict:
    """The ``Dict`` observation space of one row (module docstring); ``active`` adds the ``"active"`` key,
    ``num_actions`` an ``"action_mask"`` of that many actions."""
    spaces: dict[str, gym.Space] = {
        OBS_KEY: gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32),
        AGENT_ID_KEY: gym.spaces.Box(0.0, 1.0, (num_agents,), np.float32),
        STATE_KEY: gym.spaces.Box(-np.inf, np.inf, (state_dim,), np.float32),
    }
    if active:
        spaces[ACTIVE_KEY] = gym.spaces.Box(0, 1, (1,), np.bool_)
    if num_actions is not None:
        spaces[ACTION_MASK_KEY] = gym.spaces.Box(0, 1, (num_actions,), np.bool_)
    return gym.spaces.Dict(spaces)


def same_action_space(spaces: dict[str, gym.Space], where: str) -> gym.Space:
    """The one action space that every agent of ``spaces`` (agent name -> space) has.

    Raises:
        ValueError: naming the agents and their spaces, where they differ.
    """
    names = list(spaces)
    first = spaces[names[0]]
    differ = [name for name in names[1:] if spaces[name] != first]
    if differ:
        listed = ", ".join(f"{name}: {spaces[name]}" for name in names)
        raise ValueError(
            f"{where}: every agent must have the same action space (rl_lightning shares one policy over the agents' "
            f"rows), but {names[0]} and {', '.join(differ)} differ: {listed}"
        )
    return first


def check_agent_names(agent_names: Sequence[str]) -> list[str]:
    """``agent_names`` as a list of distinct non-empty strings (at least one)."""
    names = list(agent_names)
    if not names or not all(isinstance(name, str) and name for name in names) or len(set(names)) != len(names):
        raise ValueError(f"agent_names must be distinct non-empty strings, at least one, got {agent_names!r}")
    return names


class MultiAgentVectorEnv(VectorEnv):
    """``num_scenes`` copies of a multi-agent scene as ``num_scenes * num_agents`` rows (module docstring).

    Subclasses set ``single_observation_space`` (:func:`multi_agent_space`) and ``single_action_space``
    before calling ``super().__init__``, and implement ``_reset_all`` and ``_step`` over rows.

    Args:
        num_scenes: independent copies of the scene, >= 1.
        agent_names: the agents of a scene, in row order.
        seed: the private generator's seed.
        device: where every tensor lives.
    """

    can_draw = False

    def __init__(
        self, num_scenes: int, agent_names: Sequence[str], seed: int | None = None, device: torch.device | str = "cpu"
    ):
        #: Independent copies of the multi-agent scene.
        self.num_scenes = check_int("num_scenes", num_scenes, 1)
        #: The agents of one scene, in row order.
        self.agent_names = check_agent_names(agent_names)
        #: Agents per scene (rows per scene).
        self.num_agents = len(self.agent_names)
        super().__init__(self.num_scenes * self.num_agents, seed, device)
        #: float32 ``(num_envs, num_agents)``: each row's one-hot agent id.
        self.agent_ids = torch.eye(self.num_agents, device=self.device).repeat(self.num_scenes, 1)

    @property
    def env_steps_per_step(self) -> int:
        """A step counts one env step (frame) per scene, not per agent: env steps and the schedules keyed on them
        count as VMAS and BenchMARL count frames, and a module's ``num_envs`` (scenes) plans them."""
        return self.num_scenes

    def scene_rows(self, per_scene: Tensor) -> Tensor:
        """``(num_scenes, *shape)`` -> ``(num_envs, *shape)``: each scene's value on each of its rows."""
        return per_scene.repeat_interleave(self.num_agents, dim=0)

    def per_scene(self, rows: Tensor) -> Tensor:
        """``(num_envs, *shape)`` -> ``(num_scenes, num_agents, *shape)``."""
        return rows.reshape(self.num_scenes, self.num_agents, *rows.shape[1:])

    def _rows(self, obs: Tensor, state: Tensor, **extra: Tensor) -> TensorTree:
        """The observation of every row from ``obs`` ``(num_scenes, num_agents, obs_dim)`` and ``state``
        ``(num_scenes, state_dim)``; ``extra`` leaves are per row already."""
        tree = {
            OBS_KEY: obs.reshape(self.num_envs, -1),
            AGENT_ID_KEY: self.agent_ids.clone(),
            STATE_KEY: self.scene_rows(state),
        }
        return TensorTree({**tree, **extra})

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_scenes={self.num_scenes}, num_agents={self.num_agents}, "
            f"num_envs={self.num_envs}, device={self.device})"
        )


def every_scene(frames: Tensor, num_agents: int) -> Tensor:
    """One row per scene (every ``num_agents``-th row, agent 0's) of per-row ``frames`` ``(num_envs, ...)``."""
    return frames[::num_agents]
