"""VMAS scenarios (native torch, batched) behind :class:`~rl_lightning.envs.multi_agent.MultiAgentVectorEnv`.

VMAS simulates ``num_scenes`` copies of a scenario as tensors on one device; this adapter shows them as
``num_scenes * num_agents`` rows (agents as rows, scene-major) without leaving the device. ``"state"`` is the
scene's rows' ``"obs"`` concatenated in agent order (VMAS has no global state; BenchMARL's MAPPO critic reads the
same). Episodes end per scene (VMAS's own per-scene done, read with ``terminated_truncated=True``, so that the
``max_steps`` limit is a truncation and the scenario's own end a termination); a scene that ends is reset alone
(``reset_at``, one call per scene: the step reads back which scenes ended, one host read, as VMAS's own code does
elsewhere).

Randomness: VMAS draws from torch's (and numpy's, Python's) *global* RNG, swapped in and out around each call by
VMAS for all of its instances together. The adapter keeps its own saved states (CPU torch, numpy, Python, and the
CUDA device's when on one) and runs every VMAS call inside ``torch.random.fork_rng`` with them set before and read
back after: the user's global RNG is untouched, and two adapters with the same seed give the same trajectories
whatever runs between their steps.
"""

from __future__ import annotations

import contextlib
import math
import random
import warnings
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from rl_lightning._checks import check_bool, check_seed, check_str
from rl_lightning.envs.base import resolve_device
from rl_lightning.envs.multi_agent import MULTIAGENT_EXTRA, MultiAgentVectorEnv, multi_agent_space, same_action_space
from rl_lightning.envs.spaces import TensorTree

#: Side of a rendered frame in pixels.
FRAME_SIZE = 160
_WARNED_NO_MAX_STEPS: set[str] = set()


def _import_vmas() -> Any:
    try:
        import vmas
    except ImportError as error:
        raise ImportError(f"the 'vmas' backend needs the vmas package: {MULTIAGENT_EXTRA} ({error})") from error
    return vmas


def vmas_scenarios() -> list[str]:
    """The names of VMAS's scenarios (its own, debug and MPE ones), sorted."""
    vmas = _import_vmas()
    return sorted({*vmas.scenarios, *vmas.debug_scenarios, *vmas.mpe_scenarios})


def _gymnasium_space(space: Any, where: str) -> gym.Space:
    """VMAS's (old ``gym``) action space of one agent as a gymnasium one: ``Discrete`` or float32 ``Box``."""
    name = type(space).__name__
    if name == "Discrete":
        return gym.spaces.Discrete(int(space.n))
    if name == "Box":
        return gym.spaces.Box(space.low.astype(np.float32), space.high.astype(np.float32), space.shape, np.float32)
    raise ValueError(f"{where}: only Discrete and Box action spaces are supported, got {space}")


class VmasVectorEnv(MultiAgentVectorEnv):
    """``num_scenes`` copies of the VMAS scenario ``env_id`` as rows (module docstring).

    Args:
        env_id: a VMAS scenario name (:func:`vmas_scenarios`), e.g. ``"balance"``, ``"navigation"``, ``"transport"``.
        num_scenes: copies of the scenario (VMAS's ``num_envs``); the env has ``num_scenes * num_agents`` rows.
        seed: seeds the private generator and the adapter's VMAS RNG states (``None``: drawn from torch's global RNG).
        device: where VMAS simulates and every tensor lives.
        continuous_actions: ``Box`` actions (VMAS's default) or, if False, ``Discrete`` ones.
        max_steps: the time limit of an episode (a truncation); ``None``: VMAS's infinite horizon (only the
            scenario's own end ends an episode: a warning).
        render: accepted for the other adapters' sake; the frames are drawn with torch, always available.
        **scenario_kwargs: the scenario's own keyword arguments, e.g. ``n_agents=4``.
    """

    can_render = True
    restorable = False  # VMAS's world cannot be saved
    render_fps = 20

    def __init__(
        self,
        env_id: str,
        num_scenes: int,
        seed: int | None = None,
        device: torch.device | str = "cpu",
        continuous_actions: bool = True,
        max_steps: int | None = None,
        render: bool = False,
        **scenario_kwargs: Any,
    ):
        check_str("env_id", env_id)
        check_bool("continuous_actions", continuous_actions)
        check_bool("render", render)
        if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1):
            raise ValueError(f"max_steps must be a positive int or None, got {max_steps!r}")
        if isinstance(num_scenes, bool) or not isinstance(num_scenes, int) or num_scenes < 1:
            raise ValueError(f"num_envs (the number of scenes) must be a positive int, got {num_scenes!r}")
        scenarios = vmas_scenarios()
        if env_id not in scenarios:
            raise ValueError(f"unknown VMAS scenario {env_id!r}; VMAS's scenarios: {', '.join(scenarios)}")
        if max_steps is None and env_id not in _WARNED_NO_MAX_STEPS:
            _WARNED_NO_MAX_STEPS.add(env_id)
            warnings.warn(
                f"VMAS scenario {env_id!r} without max_steps has an infinite horizon: an episode ends only where the "
                "scenario ends it; set env_kwargs={'max_steps': N}",
                stacklevel=2,
            )
        self.env_id = env_id
        self.device = resolve_device(device)
        seed = self._seed_or_draw(seed)  # drawn once: the construction and the first reset share it
        self._seed_vmas(seed)
        vmas = _import_vmas()
        with self._vmas_rng():
            #: VMAS's environment doing the work.
            self.vmas_env = vmas.make_env(
                env_id,
                num_envs=num_scenes,
                device=self.device,
                continuous_actions=continuous_actions,
                max_steps=max_steps,
                terminated_truncated=True,
                **scenario_kwargs,
            )
        self.max_steps = max_steps
        agents = self.vmas_env.agents
        names = [agent.name for agent in agents]
        where = f"VMAS scenario {env_id!r}"
        spaces = {
            name: _gymnasium_space(space, where) for name, space in zip(names, self.vmas_env.action_space, strict=True)
        }
        self.single_action_space = same_action_space(spaces, where)
        obs_sizes = []
        for name, space in zip(names, self.vmas_env.observation_space, strict=True):
            if type(space).__name__ != "Box":
                raise ValueError(f"{where}: agent {name}'s observation must be a Box, got {space}")
            obs_sizes.append(math.prod(space.shape))
        #: Each agent's observation size (``"obs"`` is padded to the largest).
        self.obs_sizes = obs_sizes
        obs_dim = max(obs_sizes)
        self.single_observation_space = multi_agent_space(obs_dim, len(names), obs_dim * len(names))
        super().__init__(num_scenes, names, seed, device)

    # -- randomness -------------------------------------------------------------------------------------

    def _seed_or_draw(self, seed: int | None) -> int:
        return int(torch.randint(0, 2**62, (1,)).item()) if seed is None else check_seed("seed", seed)

    def _seed_vmas(self, seed: int) -> None:
        """Fresh VMAS RNG states from ``seed``: CPU torch, numpy, Python, and the CUDA device's."""
        self._torch_state = torch.Generator().manual_seed(seed).get_state()
        self._numpy_state = np.random.RandomState(seed % 2**32).get_state()
        self._python_state = random.Random(seed).getstate()
        self._cuda_state = None
        if self.device.type == "cuda":
            with torch.random.fork_rng(devices=[self.device]), torch.cuda.device(self.device):
                torch.cuda.manual_seed(seed)
                self._cuda_state = torch.cuda.get_rng_state(self.device)

    def seed(self, seed: int | None) -> None:
        """Re-seed the private generator and the adapter's VMAS RNG states (``None``: torch's global RNG draws it)."""
        seed = self._seed_or_draw(seed)
        super().seed(seed)
        self._seed_vmas(seed)

    @contextlib.contextmanager
    def _vmas_rng(self) -> Iterator[None]:
        """Run VMAS with the adapter's RNG states (set before, read back after), the global ones untouched."""
        from vmas.simulator.environment.environment import Environment

        # VMAS's one saved state for all its instances, swapped in per call: ours while we run, then theirs again
        # (another VMAS env of the process goes on with its own stream).
        shared = Environment.vmas_random_state
        saved_shared = list(shared)
        cuda = [self.device] if self.device.type == "cuda" else []
        saved_numpy, saved_python = np.random.get_state(), random.getstate()
        with torch.random.fork_rng(devices=cuda):
            shared[0], shared[1], shared[2] = self._torch_state, self._numpy_state, self._python_state
            torch.set_rng_state(self._torch_state)
            if cuda:
                torch.cuda.set_rng_state(self._cuda_state, self.device)
            try:
                yield
            finally:
                self._torch_state, self._numpy_state, self._python_state = shared[0], shared[1], shared[2]
                shared[:] = saved_shared
                if cuda:
                    self._cuda_state = torch.cuda.get_rng_state(self.device)
                np.random.set_state(saved_numpy)
                random.setstate(saved_python)

    # -- the contract -----------------------------------------------------------------------------------

    def _observe(self, per_agent: list[Tensor]) -> TensorTree:
        """Rows from VMAS's observations (one ``(num_scenes, size_i)`` tensor per agent), zero-padded."""
        obs_dim = self.obs_shape["obs"][0]
        padded = [
            torch.nn.functional.pad(obs.reshape(self.num_scenes, -1).float(), (0, obs_dim - obs.shape[-1]))
            for obs in per_agent
        ]
        obs = torch.stack(padded, dim=1)
        return self._rows(obs, obs.flatten(1))

    def _reset_all(self) -> TensorTree:
        with self._vmas_rng():
            per_agent = self.vmas_env.reset()
        return self._observe(per_agent)

    def _step(self, actions: Tensor) -> tuple[TensorTree, Tensor, Tensor, Tensor, dict[str, Any]]:
        actions = self.per_scene(actions)
        per_agent = [actions[:, index].clone() for index in range(self.num_agents)]
        with self._vmas_rng():
            obs, rewards, terminated, truncated, _ = self.vmas_env.step(per_agent)
            final_obs = self._observe(obs)
            # A time limit reached at the scenario's own end is a termination (no bootstrap).
            truncated = truncated & ~terminated
            done = terminated | truncated
            ended = done.nonzero().flatten().tolist()  # VMAS resets one scene per call
            for index in ended:
                self.vmas_env.reset_at(index, return_observations=False)
            next_obs = (
                self._observe(self.vmas_env.get_from_scenario(True, False, False, False)[0]) if ended else final_obs
            )
        reward = torch.stack(rewards, dim=1).reshape(self.num_envs).float()
        info = {"final_observation": final_obs}
        return next_obs, reward, self.scene_rows(terminated), self.scene_rows(truncated), info

    def render(self) -> Tensor:
        """The current frame of every row (a scene's rows share it), uint8 ``(num_envs, H, W, 3)`` on the CPU:
        the world's entities drawn with torch (module docstring), no display needed."""
        return self.scene_rows(draw_world(self.vmas_env, FRAME_SIZE)).cpu()

    def state_dict(self) -> dict[str, Any]:
        """The env id, ``num_envs`` and the private generator; ``"restorable": False``."""
        return {**super().state_dict(), "env_id": self.env_id, "restorable": False}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the private generator, warn, and restart every scene fresh (VMAS's world cannot be restored)."""
        self._restart_fresh(state, "VMAS scenes")

    def __repr__(self) -> str:
        return (
            f"VmasVectorEnv({self.env_id!r}, num_scenes={self.num_scenes}, num_agents={self.num_agents}, "
            f"num_envs={self.num_envs}, device={self.device})"
        )


def _colour(entity: Any, device: torch.device) -> Tensor:
    """An entity's colour as uint8 ``(3,)`` (VMAS colours are RGB(A) floats in [0, 1])."""
    colour = entity.color
    colour = torch.as_tensor(colour.tolist() if isinstance(colour, Tensor) else list(colour), dtype=torch.float32)
    return (colour.flatten()[:3].clamp(0, 1) * 255).round().to(torch.uint8).to(device)


def draw_world(vmas_env: Any, size: int) -> Tensor:
    """uint8 ``(num_scenes, size, size, 3)``: every entity of each scene of ``vmas_env`` as a filled shape in its
    colour (spheres as discs, boxes and lines as rotated rectangles), landmarks first then agents, on white, in a
    view of ``viewer_zoom`` around the scenario's render origin widened to fit every agent of the scene."""
    world, scenario = vmas_env.world, vmas_env.scenario
    device = vmas_env.device
    agents = [agent.state.pos for agent in world.agents]
    origin = torch.as_tensor(scenario.render_origin, dtype=torch.float32, device=device)
    radius = max(agent.shape.circumscribed_radius() for agent in world.agents)
    reach = (torch.stack(agents, dim=1) - origin).abs().amax(dim=(1, 2)) + 2 * radius  # (num_scenes,)
    half = torch.clamp(reach, min=float(scenario.viewer_zoom))
    axis = (torch.arange(size, device=device, dtype=torch.float32) + 0.5) / size * 2 - 1  # [-1, 1]
    # Pixel centres in world coordinates per scene: x to the right, y up.
    xs = origin[0] + axis.view(1, 1, size) * half.view(-1, 1, 1)
    ys = origin[1] - axis.view(1, size, 1) * half.view(-1, 1, 1)
    frames = torch.full((vmas_env.num_envs, size, size, 3), 255, dtype=torch.uint8, device=device)
    for entity in [*world.landmarks, *world.agents]:
        inside = _inside(entity, xs, ys)
        if inside is None:
            continue
        frames[inside] = _colour(entity, device)
    return frames


def _inside(entity: Any, xs: Tensor, ys: Tensor) -> Tensor | None:
    """bool ``(num_scenes, size, size)``: the pixels inside ``entity`` (None: a shape not drawn, or not rendered)."""
    pos = entity.state.pos
    if pos is None:
        return None
    dx, dy = xs - pos[:, 0].view(-1, 1, 1), ys - pos[:, 1].view(-1, 1, 1)
    shape = entity.shape
    kind = type(shape).__name__
    if kind == "Sphere":
        inside = dx * dx + dy * dy <= shape.radius**2
    elif kind in ("Box", "Line"):
        rot = entity.state.rot.view(-1, 1, 1) if entity.state.rot is not None else torch.zeros_like(dx[:, :1, :1])
        cos, sin = torch.cos(rot), torch.sin(rot)
        along, across = cos * dx + sin * dy, -sin * dx + cos * dy
        length = shape.length
        width = shape.width if kind == "Box" else 0.01
        inside = (along.abs() <= length / 2) & (across.abs() <= width / 2)
    else:
        return None
    rendering = getattr(entity, "is_rendering", None)
    if isinstance(rendering, Tensor) and rendering.shape == inside.shape[:1]:
        inside = inside & rendering.view(-1, 1, 1)
    return inside
