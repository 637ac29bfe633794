"""MuJoCo's C-level warnings, routed through Python's ``warnings`` once per message and process; whether MuJoCo
can render here.

MuJoCo prints each warning of its C library to stdout and appends it to ``MUJOCO_LOG.TXT`` in the working
directory, once per occurrence. Loading gymnasium 1.4's HalfCheetah model warns that its ``settotalmass``
compiler attribute is deprecated, at every model load: a SAC run that builds its evaluation envs again and again
printed it 275 times. :func:`route_mujoco_warnings` installs a handler (unless one is installed already, yours):

- MuJoCo's *deprecation* notices about a model's XML attributes are dropped: they concern the model files that
  gymnasium ships, which a user cannot act on (gymnasium updates them), and they say nothing about the run;
- every other MuJoCo warning (a simulation instability, a full contact buffer) becomes one Python
  ``RuntimeWarning`` ("MuJoCo: ...") the first time its text is seen in the process, filterable like any warning.
"""

from __future__ import annotations

import os
import sys
import warnings

_seen: set[str] = set()


def route_mujoco_warnings() -> bool:
    """Install :func:`_warn_once` as MuJoCo's warning handler where MuJoCo is installed and no handler is set;
    returns whether MuJoCo's warnings go through it now."""
    try:
        import mujoco
    except ImportError:
        return False
    handler = mujoco.get_mju_user_warning()
    if handler is None:
        mujoco.set_mju_user_warning(_warn_once)
        return True
    return handler is _warn_once


def _warn_once(message: str) -> None:
    text = " ".join(message.split())
    if "is deprecated" in text or text in _seen:
        return
    _seen.add(text)
    warnings.warn(f"MuJoCo: {text}", RuntimeWarning, stacklevel=2)


def headless_mujoco_can_render() -> bool:
    """Whether a MuJoCo env can open its OpenGL context here: with ``MUJOCO_GL`` set (``egl``, ``osmesa``, ``glfw``:
    MuJoCo's own choice, tried as asked), a display for GLFW, MuJoCo's default, or not on Linux (macOS and Windows
    give GLFW their own window system)."""
    if not sys.platform.startswith("linux"):
        return True
    return bool(os.environ.get("MUJOCO_GL") or os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
