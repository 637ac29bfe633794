"""The frames of a grid clip: a greedy rollout's observations (an env that draws them), or a greedy clip played on an
env that renders its own frames, shrunk to the grid's cells."""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import Tensor

from rl_lightning.envs.multi_agent import MultiAgentVectorEnv, every_scene
from rl_lightning.playing import play_greedy
from rl_lightning.protocols import RLModuleProtocol


def greedy_rollout(pl_module: RLModuleProtocol, num_envs: int, num_steps: int, seed: int) -> tuple[Tensor, Tensor]:
    """Play ``num_steps`` greedy steps on a fresh env instance.

    Returns:
        obs ``(num_envs, num_steps, *obs_shape)`` and bool dones ``(num_envs, num_steps)``.
    """
    envs = pl_module.make_envs(num_envs, seed)
    played = play_greedy(pl_module.greedy_actor(), envs, episodes_per_env=None, num_steps=num_steps, keep_obs=True)
    return played.obs, played.dones


def greedy_frames(
    pl_module: RLModuleProtocol,
    num_envs: int,
    num_steps: int,
    seed: int,
    frame_stride: int,
    max_side: int = 160,
    actor: Callable[[Tensor, Tensor], Tensor] | None = None,
    prepare: Callable[[Any], None] | None = None,
    on_frame: Callable[[], None] | None = None,
) -> tuple[Tensor, Tensor]:
    """Play ``num_steps`` greedy steps on a fresh env instance that renders its own frames (a
    gymnasium env with an ``rgb_array`` renderer), keeping every ``frame_stride``-th frame,
    shrunk to at most ``max_side`` pixels a side.

    Args:
        actor: ``actor(obs, episode_start) -> actions``; None: ``pl_module.greedy_actor()``
            (``GridVideoLogger`` passes a frozen copy when it plays in the background).
        prepare: called with the envs once built, before the first frame (``GridVideoLogger``
            lightens a software renderer's work there); what it raises ends the clip.
        on_frame: called after each rendered frame (``GridVideoLogger`` counts them, and stops a
            cancelled clip there by raising).

    Returns:
        uint8 frames ``(num_envs, ceil(num_steps / frame_stride), H, W, 3)`` on the CPU and bool
        dones ``(num_envs, num_steps)``. For a multi-agent env (``num_envs`` scenes, a row per agent) one row
        per scene: the grid shows the scenes.

    Raises:
        NotImplementedError: if the env cannot render.
    """
    envs = pl_module.make_envs(num_envs, seed, render=True)
    renders = itertools.count()

    def frame(obs: Any) -> Tensor:
        quiet = next(renders) == 0  # GLFW warns with the first render, where the renderer sets up
        frames = _shrink(_render_or_explain(envs, pl_module.hparams.env_id, quiet=quiet), max_side)
        if on_frame is not None:
            on_frame()
        return frames

    try:
        if not envs.can_render:
            raise NotImplementedError(f"{type(envs).__name__} cannot render its frames")
        if prepare is not None:
            prepare(envs)
        actor = pl_module.greedy_actor() if actor is None else actor
        played = play_greedy(
            actor, envs, episodes_per_env=None, num_steps=num_steps, frame=frame, frame_stride=frame_stride
        )
    finally:
        envs.close()
    frames, dones = torch.stack(played.frames, dim=1), played.dones.cpu()
    if isinstance(envs, MultiAgentVectorEnv):  # a scene's rows share its frame and its episode ends
        return every_scene(frames, envs.num_agents), every_scene(dones, envs.num_agents)
    return frames, dones


def _render_or_explain(envs: Any, env_id: str, quiet: bool = True) -> Tensor:
    """``envs.render()``, or a ``NotImplementedError`` saying why not: a renderer fails in its own ways
    (MuJoCo without a display or an OpenGL platform raises its own errors, GLFW warns first).

    ``quiet`` silences the warnings of this call (GLFW's comes with the first render, where the
    renderer sets up its context). Warning filters are process-wide, so a render played off the
    training thread silences only its first frame: the training thread's own warnings must not
    vanish while a clip plays."""
    try:
        if not quiet:
            return envs.render()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # GLFW's "DISPLAY is missing" ahead of the real error
            return envs.render()
    except Exception as error:
        hint = (
            " (headless MuJoCo renders with MUJOCO_GL=egl, or osmesa)"
            if ("OpenGL" in str(error) or "GL" in str(type(error).__name__)) and "MUJOCO_GL" not in str(error)
            else ""
        )
        raise NotImplementedError(f"{env_id} failed to render: {type(error).__name__}: {error}{hint}") from error


def _shrink(frames: Tensor, max_side: int) -> Tensor:
    """Average-pool uint8 frames ``(n, H, W, 3)`` by the integer factor that fits ``max_side``
    (``(n, H // factor, W // factor, 3)``: a partial block at the edge is dropped)."""
    factor = -(-max(frames.shape[1:3]) // max_side)
    if factor <= 1:
        return frames
    height, width = frames.shape[1] // factor * factor, frames.shape[2] // factor * factor
    # Pillow's box reduce: ~8x faster than a float avg_pool2d on 16 frames of 400 x 600 (8 vs 63 ms),
    # the largest cost of a gymnasium clip after the renderer, and it releases the GIL.
    cropped = np.ascontiguousarray(frames[:, :height, :width].numpy())
    return torch.from_numpy(np.stack([np.asarray(Image.fromarray(frame).reduce(factor)) for frame in cropped]))


def _every_kth_step(obs: Tensor, dones: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """CPU copies of every k-th step's obs ``(n, T, ...)`` and, for each kept step, whether an
    episode ended on it or on one of the k - 1 skipped steps after it."""
    obs, dones = obs.to("cpu"), dones.to("cpu")
    num_steps = dones.shape[1]
    padded = torch.nn.functional.pad(dones, (0, -num_steps % k))
    return obs[:, ::k].clone(), padded.view(dones.shape[0], -1, k).any(dim=2)
