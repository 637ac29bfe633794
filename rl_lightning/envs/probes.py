"""Probe environments 1-5: tiny envs whose values and optimal policies are known exactly.

They isolate one part of an agent at a time (Andy Jones, "Debugging RL"):

============  =======  ======================  ==========================  ==================
env           actions  obs                     reward                      episode
============  =======  ======================  ==========================  ==================
Probe1-v0     1        [0]                     +1                          1 step
Probe2-v0     1        [-1] or [+1] at random  = obs                       1 step
Probe3-v0     1        [0] then [1]            0 then +1                   2 steps
Probe4-v0     2        [0]                     -1 for action 0, +1 for 1   1 step
Probe5-v0     2        [0] or [1] at random    +1 if action == obs else -1 1 step
============  =======  ======================  ==========================  ==================

So V(Probe1) = 1; V(Probe2, obs) = obs; V(Probe3) = [gamma, 1]; Q(Probe4) = [-1, 1];
Q(Probe5, obs=0) = [1, -1] and Q(Probe5, obs=1) = [-1, 1]. Every episode ends by termination
(a real terminal state), never by truncation.

Two more kinds test the other action and observation spaces:

==================  ================  ==========  =================================  =====================
env                 actions           obs         reward                             optimum
==================  ================  ==========  =================================  =====================
ContinuousProbe1    Box [-1, 1]^1     [0]         -(a - 0.5)^2                       a = 0.5, return 0
ContinuousProbe2    Box [-1, 1]^2     [-1]/[+1]   -|a - obs * (0.5, -0.5)|^2         a = obs * (0.5, -0.5)
ImageProbe5         2                 image       as Probe5                          as Probe5
==================  ================  ==========  =================================  =====================

``ImageProbe5``'s observation is a uint8 ``(36, 36, 3)`` image (gymnasium's height, width,
channel layout): the left half lit for Probe5's obs 0, the right half for obs 1, so a network
must see where the light is, not only how much there is.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector.utils import batch_space
from torch import Tensor

from rl_lightning._checks import check_bool, check_int
from rl_lightning.compiling import own_code, torch_compile
from rl_lightning.envs.base import VectorEnv
from rl_lightning.envs.render import paint


class _ProbeEnv(VectorEnv):
    """Shared machinery: a one-dimensional obs, a step counter, auto-reset on termination.

    Args:
        num_envs, seed, device: as :class:`~rl_lightning.envs.base.VectorEnv`'s.
        compile: the whole step (reward, episode clock, auto-reset, observations: :func:`probe_step`) as one
            function through ``torch.compile(dynamic=False)``, built on the first step (the seconds it took:
            :attr:`compile_seconds`); the fresh observations are drawn eagerly from the env's generator on every
            step, as the eager env draws them, so the random streams are the eager env's and the results equal.

    Subclasses give the reward (:meth:`reward`) and the observation after a non-final step (:meth:`next_obs`) as
    pure functions of tensors (``staticmethod``), and the start observations (``_initial_obs``).
    """

    num_actions_: int = 1
    obs_low: float = 0.0
    obs_high: float = 0.0
    episode_length: int = 1
    render_fps = 4
    _state_attributes = ("_obs", "_t")
    #: A module's ``compile=True`` compiles its probe envs' step on GPUs only: on a CPU a compiled call's fixed
    #: ~25 us costs more than the few small ops it fuses (``ClassicControlEnv.cpu_compile_min_envs``).
    cpu_compile_min_envs: int | None = None

    def __init__(
        self, num_envs: int, seed: int | None = None, device: torch.device | str = "cpu", compile: bool = False
    ):
        #: Whether the step runs through ``torch.compile``.
        self.compile = check_bool("compile", compile)
        self._compiled_step: Callable[..., Any] | None = None
        #: Seconds the first compiled step took (compilation included); None before it or without compile.
        self.compile_seconds: float | None = None
        self.single_observation_space = gym.spaces.Box(
            np.array([self.obs_low], dtype=np.float32), np.array([self.obs_high], dtype=np.float32)
        )
        self.single_action_space = self._action_space()
        super().__init__(num_envs, seed, device)
        self._obs = torch.zeros(num_envs, 1, dtype=torch.float32, device=self.device)
        self._t = torch.zeros(num_envs, dtype=torch.int64, device=self.device)

    def _action_space(self) -> gym.Space:
        return gym.spaces.Discrete(self.num_actions_)

    def _initial_obs(self, count: int) -> Tensor:
        return torch.zeros(count, 1, dtype=torch.float32, device=self.device)

    @staticmethod
    def reward(obs: Tensor, t: Tensor, actions: Tensor) -> Tensor:
        """Float32 rewards ``(n,)`` for ``actions`` taken on ``obs`` ``(n, 1)`` at episode step ``t`` ``(n,)``."""
        raise NotImplementedError

    @staticmethod
    def next_obs(obs: Tensor, t: Tensor) -> Tensor:
        """Obs after a step that ``t`` (the steps taken, this one included) says is not final (only Probe3's
        changes)."""
        return obs

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_compiled_step"] = None  # a compiled function cannot be pickled: a copy compiles again
        return state

    def _reset_all(self) -> Tensor:
        self._obs = self._initial_obs(self.num_envs)
        self._t.zero_()
        return self._obs.clone()

    def _step(self, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, dict[str, Any]]:
        fresh = self._initial_obs(self.num_envs)  # drawn on every step, whoever's episode ends
        arguments = (type(self).reward, type(self).next_obs, self._obs, self._t, actions, fresh, self.episode_length)
        if not self.compile:
            outputs = probe_step(*arguments)
        elif self._compiled_step is None:
            self._compiled_step = torch_compile(_probe_step_of(type(self)), fullgraph=True)
            start = time.perf_counter()
            outputs = self._compiled_step(*arguments)
            self.compile_seconds = time.perf_counter() - start
        else:
            outputs = self._compiled_step(*arguments)
        self._obs, self._t, obs, reward, terminated, final_obs = outputs
        return obs, reward, terminated, torch.zeros_like(terminated), {"final_observation": final_obs}

    def draw(self, obs: Tensor) -> Tensor:
        return draw_probe(obs)


class Probe1(_ProbeEnv):
    """One action, obs [0], one step, reward +1: V = 1."""

    @staticmethod
    def reward(obs: Tensor, t: Tensor, actions: Tensor) -> Tensor:
        return torch.ones_like(obs[:, 0])


class Probe2(_ProbeEnv):
    """One action, obs [-1] or [+1] at random, one step, reward = obs: V(obs) = obs."""

    obs_low, obs_high = -1.0, 1.0

    def _initial_obs(self, count: int) -> Tensor:
        coin = torch.rand(count, 1, generator=self.generator, device=self.device) < 0.5
        return torch.where(coin, 1.0, -1.0).float()

    @staticmethod
    def reward(obs: Tensor, t: Tensor, actions: Tensor) -> Tensor:
        return obs[:, 0].clone()


class Probe3(_ProbeEnv):
    """One action, obs [0] then [1], two steps, reward 0 then +1: V = [gamma, 1]."""

    obs_high = 1.0
    episode_length = 2

    @staticmethod
    def reward(obs: Tensor, t: Tensor, actions: Tensor) -> Tensor:
        return (t == 1).float()

    @staticmethod
    def next_obs(obs: Tensor, t: Tensor) -> Tensor:
        return t.float().unsqueeze(1).clamp(max=1.0)


class Probe4(_ProbeEnv):
    """Two actions, obs [0], one step, reward -1 for action 0 and +1 for action 1: Q = [-1, 1]."""

    num_actions_ = 2

    @staticmethod
    def reward(obs: Tensor, t: Tensor, actions: Tensor) -> Tensor:
        return actions.float() * 2 - 1


class Probe5(_ProbeEnv):
    """Two actions, obs [0] or [1] at random, one step, +1 if action == obs else -1."""

    num_actions_ = 2
    obs_high = 1.0

    def _initial_obs(self, count: int) -> Tensor:
        return (torch.rand(count, 1, generator=self.generator, device=self.device) < 0.5).float()

    @staticmethod
    def reward(obs: Tensor, t: Tensor, actions: Tensor) -> Tensor:
        return torch.where(actions == obs[:, 0].long(), 1.0, -1.0).float()


class _ContinuousProbe(_ProbeEnv):
    """One step, reward ``-|a - target(obs)|^2`` with a ``Box(-1, 1, (action_dim,))`` action."""

    action_dim: int = 1

    def _action_space(self) -> gym.Space:
        return gym.spaces.Box(-1.0, 1.0, (self.action_dim,), dtype=np.float32)

    @staticmethod
    def target(obs: Tensor) -> Tensor:
        """The optimal action ``(..., action_dim)`` for observations ``(..., 1)``."""
        raise NotImplementedError

    @classmethod
    def reward(cls, obs: Tensor, t: Tensor, actions: Tensor) -> Tensor:  # type: ignore[override]
        return -(actions - cls.target(obs)).square().sum(dim=1)


class ContinuousProbe1(_ContinuousProbe):
    """Obs [0], one step, reward -(a - 0.5)^2: the optimal action is 0.5 (return 0)."""

    @staticmethod
    def target(obs: Tensor) -> Tensor:
        return torch.full_like(obs, 0.5)


class ContinuousProbe2(_ContinuousProbe):
    """Obs [-1] or [+1] at random, one step, 2-d action, reward -|a - obs * (0.5, -0.5)|^2."""

    obs_low, obs_high = -1.0, 1.0
    action_dim = 2

    def _initial_obs(self, count: int) -> Tensor:
        coin = torch.rand(count, 1, generator=self.generator, device=self.device) < 0.5
        return torch.where(coin, 1.0, -1.0).float()

    @staticmethod
    def target(obs: Tensor) -> Tensor:
        return torch.cat([obs * 0.5, obs * -0.5], dim=-1)  # no constant tensor: a host-to-device copy


IMAGE_SIZE = 36


class ImageProbe5(Probe5):
    """Probe5 seen as a uint8 ``(36, 36, 3)`` image: left half lit for obs 0, right half for 1."""

    def __init__(
        self, num_envs: int, seed: int | None = None, device: torch.device | str = "cpu", compile: bool = False
    ):
        super().__init__(num_envs, seed, device, compile)
        self.single_observation_space = gym.spaces.Box(0, 255, (IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.obs_shape, self.obs_dtype = (IMAGE_SIZE, IMAGE_SIZE, 3), torch.uint8

    def reset(self, seed: int | None = None) -> tuple[Tensor, dict[str, Any]]:
        obs, info = super().reset(seed)
        return self._image(obs), info

    def step(self, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(actions)
        return (
            self._image(obs),
            reward,
            terminated,
            truncated,
            {"final_observation": self._image(info["final_observation"])},
        )

    @staticmethod
    def _image(obs: Tensor) -> Tensor:
        """``(num_envs, 1)`` obs in {0, 1} -> uint8 ``(num_envs, 36, 36, 3)``."""
        right_half = torch.arange(IMAGE_SIZE, device=obs.device) >= IMAGE_SIZE // 2
        lit = right_half == obs.bool()  # (num_envs, width): the lit columns
        image = torch.where(lit, 255, 0).to(torch.uint8)[:, None, :, None]
        return image.expand(-1, IMAGE_SIZE, -1, 3).contiguous()

    def draw(self, obs: Tensor) -> Tensor:
        return obs.detach().to("cpu", torch.uint8).clone()


def probe_step(
    reward: Callable[..., Tensor],
    next_obs: Callable[..., Tensor],
    obs: Tensor,
    t: Tensor,
    actions: Tensor,
    fresh: Tensor,
    episode_length: int,
) -> tuple[Tensor, ...]:
    """One step of every probe env as a pure function (what ``compile=True`` compiles): the reward, the episode
    clock, termination after ``episode_length`` steps and the auto-reset to ``fresh`` ``(n, 1)`` start obs.

    Returns:
        ``(next_obs, next_t, obs, reward, terminated, final_obs)``: the env's new obs and clock, the obs handed out
        (a copy), the reward, the flags and the obs each env reached before any reset.
    """
    rewards = reward(obs, t, actions)
    t = t + 1
    terminated = t >= episode_length
    final_obs = next_obs(obs, t)
    new_obs = torch.where(terminated.unsqueeze(1), fresh, final_obs)
    return new_obs, torch.where(terminated, 0, t), new_obs.clone(), rewards, terminated, final_obs.clone()


@functools.cache
def _probe_step_of(env_class: type) -> Callable[..., Any]:
    """:func:`probe_step` named after the probe class (``probe_step_Probe1`` in dynamo's logs and profiles)."""
    return own_code(probe_step, f"probe_step_{env_class.__name__}")


class MemoryProbe(VectorEnv):
    """A cue to remember: at the first step the observation shows a cue of -1 or +1 (random), then
    ``delay`` steps show 0; at the last step (the second observation entry says it is the last) the
    action must name the cue: +1 for action 1 after a +1 cue (0 after -1), else -1. Rewards are 0
    before. Optimal return 1; a policy without memory sees the same observations whatever the cue,
    so it cannot beat chance (expected return 0).

    Observation ``(cue or 0, 1 at the last step else 0)``; two actions; episodes of ``delay + 2``
    steps, ending by termination.
    """

    render_fps = 4
    _state_attributes = ("_cue", "_t")

    def __init__(self, num_envs: int, seed: int | None = None, device: torch.device | str = "cpu", delay: int = 3):
        self.delay = check_int("delay", delay, 0)
        self.single_observation_space = gym.spaces.Box(
            np.array([-1.0, 0.0], dtype=np.float32), np.array([1.0, 1.0], dtype=np.float32)
        )
        self.single_action_space = gym.spaces.Discrete(2)
        super().__init__(num_envs, seed, device)
        self._cue = torch.zeros(num_envs, device=self.device)
        self._t = torch.zeros(num_envs, dtype=torch.int64, device=self.device)

    @property
    def episode_length(self) -> int:
        return self.delay + 2

    def _observe(self) -> Tensor:
        cue = torch.where(self._t == 0, self._cue, 0.0)
        return torch.stack([cue, (self._t == self.episode_length - 1).float()], dim=1)

    def _new_cues(self, count: int) -> Tensor:
        return torch.where(torch.rand(count, generator=self.generator, device=self.device) < 0.5, 1.0, -1.0)

    def _reset_all(self) -> Tensor:
        self._cue = self._new_cues(self.num_envs)
        self._t.zero_()
        return self._observe()

    def _step(self, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, dict[str, Any]]:
        last = self._t == self.episode_length - 1
        right = actions.long() == (self._cue > 0).long()
        reward = torch.where(last, torch.where(right, 1.0, -1.0), 0.0)
        self._t = self._t + 1
        terminated = last
        final_obs = self._observe()
        self._cue = torch.where(terminated, self._new_cues(self.num_envs), self._cue)
        self._t = torch.where(terminated, 0, self._t)
        return self._observe(), reward, terminated, torch.zeros_like(terminated), {"final_observation": final_obs}

    def draw(self, obs: Tensor) -> Tensor:
        return draw_probe(obs[..., :1])


# Grey levels: label i is the colour (i, i, i).
_GREYS = torch.arange(256, dtype=torch.uint8).view(-1, 1).expand(-1, 3).contiguous()


def draw_probe(obs: Tensor, height: int = 32, width: int = 32) -> Tensor:
    """Draw a probe env's scalar observations ``(*batch, 1)`` as grey levels (obs -1 black .. +1
    white): uint8 ``(*batch, height, width, 3)`` on the CPU."""
    return paint(obs, _grey_labels, _GREYS, height, width)


def _grey_labels(obs: Tensor, height: int, width: int) -> Tensor:
    level = ((obs[:, 0].clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
    return level.view(-1, 1, 1).expand(-1, height, width)
