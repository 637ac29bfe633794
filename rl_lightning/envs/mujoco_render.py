"""Whether MuJoCo renders in software here, and a cheaper way to render its frames when it does.

Headless MuJoCo (``MUJOCO_GL=egl`` or ``osmesa``) on a machine without a GPU renders through Mesa's llvmpipe on the
CPU. gymnasium's MuJoCo envs render 480 x 480 frames with 4x anti-aliasing, a 4096 x 4096 shadow map and floor
reflections: about 0.2 CPU s a frame for Hopper-v5 on a 2-core Xeon, so a grid clip of 16 envs x 250 frames costs
~15 CPU minutes, next to training. :func:`lighten_mujoco_rendering` draws the same scene at the grid cell's size
with none of the three: ~5 CPU ms a frame (Hopper, HalfCheetah, Walker2d; Humanoid ~9 ms).
"""

from __future__ import annotations

import functools
import os
from typing import Any

from rl_lightning.envs.mujoco_warnings import headless_mujoco_can_render

# What software OpenGL implementations call themselves in GL_RENDERER (Mesa's llvmpipe, softpipe and swrast,
# Google's SwiftShader, Windows' fallback).
_SOFTWARE_RENDERERS = ("llvmpipe", "softpipe", "swrast", "swiftshader", "software", "microsoft basic render")


def is_mujoco_env_id(env_id: str) -> bool:
    """Whether ``env_id`` is a gymnasium env built on MuJoCo (``gymnasium.envs.mujoco`` or a ``mujoco`` entry
    point); False for any id gymnasium does not know."""
    try:
        import gymnasium

        entry_point = gymnasium.spec(env_id).entry_point
    except Exception:  # not a gymnasium id (a native env, a module:id not imported yet): not MuJoCo's
        return False
    return "mujoco" in str(entry_point).lower()


@functools.cache
def mujoco_opengl_renderer() -> str | None:
    """The OpenGL renderer MuJoCo's offscreen contexts get in this process (GL_RENDERER, e.g.
    ``"llvmpipe (LLVM 15.0.6, 256 bits)"``, ``"NVIDIA H200/PCIe/SSE2"``), read once from a 1 x 1 context of
    ``MUJOCO_GL``'s backend; None where MuJoCo cannot open one here (not installed, no display and no
    ``MUJOCO_GL``, or the context fails)."""
    if not headless_mujoco_can_render():
        return None
    try:
        import mujoco
        from OpenGL import GL

        context = mujoco.GLContext(1, 1)
    except Exception:
        return None
    try:
        context.make_current()
        name = GL.glGetString(GL.GL_RENDERER)
    except Exception:
        return None
    finally:
        context.free()
    return name.decode(errors="replace") if isinstance(name, bytes) else None


def is_software_renderer(renderer: str | None) -> bool:
    """Whether an OpenGL renderer name (GL_RENDERER) is a software rasteriser (llvmpipe, softpipe, SwiftShader...)."""
    return renderer is not None and any(word in renderer.lower() for word in _SOFTWARE_RENDERERS)


def software_rendering_note() -> str | None:
    """``"MUJOCO_GL=egl renders in software here (llvmpipe ...)"`` where MuJoCo's OpenGL is a software one, else
    None."""
    renderer = mujoco_opengl_renderer()
    if not is_software_renderer(renderer):
        return None
    backend = os.environ.get("MUJOCO_GL") or "glfw"
    return f"MuJoCo renders in software here (MUJOCO_GL={backend}: OpenGL renderer {renderer!r}, no GPU)"


def lighten_mujoco_rendering(envs: Any, max_side: int) -> bool:
    """Make the MuJoCo envs of a not yet rendered ``GymnasiumVectorEnv`` (``render=True``, ``"sync"`` mode: its
    envs in this process) render at most ``max_side`` pixels a side (the aspect kept), without anti-aliasing,
    shadows or reflections: ~40x less work for a software renderer. Changes the models of these envs only.

    Returns:
        Whether every env was lightened (False: they are in other processes, or not MuJoCo's; nothing changed).
    """
    sub_envs = getattr(getattr(envs, "gymnasium_envs", None), "envs", None)
    if not sub_envs:
        return False
    unwrapped = [env.unwrapped for env in sub_envs]
    renderers = [getattr(env, "mujoco_renderer", None) for env in unwrapped]
    if any(renderer is None or renderer.width is None or renderer.height is None for renderer in renderers):
        return False
    for env, renderer in zip(unwrapped, renderers, strict=True):
        scale = min(1.0, max_side / max(renderer.width, renderer.height))
        renderer.width, renderer.height = max(1, round(renderer.width * scale)), max(1, round(renderer.height * scale))
        env.model.vis.quality.offsamples = 0  # no multisample anti-aliasing
        env.model.light_castshadow[:] = 0  # no shadow pass (a 4096 x 4096 map by default: most of the cost) ...
        env.model.vis.quality.shadowsize = 0  # ... and no shadow buffer (its context sets up in 0.3 s, not 0.5)
        env.model.mat_reflectance[:] = 0  # no second pass for the floor's reflection
    return True
