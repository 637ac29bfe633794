"""The grid video's background work: one daemon thread that makes the clips in order, each clip's progress (which
a stop checks between frames), and the frozen copy of the greedy policy a background clip plays.

A clip never holds a run: the thread is a daemon (the interpreter does not join it at exit, unlike a
``ThreadPoolExecutor``'s), a cancelled clip stops at its next frame, and whoever waits for one waits a bounded time.
"""

from __future__ import annotations

import copy
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import torch
from torch import Tensor, nn

from rl_lightning.protocols import RLModuleProtocol


class _Cancelled(Exception):
    """The clip was cancelled (the run stopped, or gave up waiting for it) while it was being made."""


# Units of a clip done (after its first) before its pace is judged.
_UNITS_TO_JUDGE = 3


class ClipProgress:
    """How far a clip is, in frames rendered plus frames encoded; :meth:`advance` raises ``_Cancelled`` once the
    clip is cancelled, so calling it between frames is what makes a clip stop promptly.

    Args:
        env_steps: the env step the clip shows.
        cancelled: set to cancel.
    """

    def __init__(self, env_steps: int, cancelled: threading.Event):
        self.env_steps = env_steps
        self.cancelled = cancelled
        self.total = 0  # units of work (frames to render, then to encode): set by the clip when it knows
        self.done = 0
        self.started: float | None = None  # time.monotonic() when the thread took it up
        self._first_done: float | None = None  # ... and when the first unit was done (set-up excluded from the pace)
        self._first_units = 0

    def advance(self, units: int = 1) -> None:
        """``units`` more done; raises ``_Cancelled`` if the clip was cancelled."""
        if self.cancelled.is_set():
            raise _Cancelled
        self.done += units
        if self._first_done is None:
            self._first_done, self._first_units = time.monotonic(), self.done

    def check(self) -> None:
        """Raise ``_Cancelled`` if the clip was cancelled."""
        if self.cancelled.is_set():
            raise _Cancelled

    def elapsed(self) -> float:
        return 0.0 if self.started is None else time.monotonic() - self.started

    def remaining_seconds(self) -> float | None:
        """Seconds left at the pace since the first unit (the renderer's and the encoder's set-up excluded); None
        until a few units tell it."""
        if self._first_done is None or not self.total or self.done - self._first_units < _UNITS_TO_JUDGE:
            return None
        pace = (time.monotonic() - self._first_done) / (self.done - self._first_units)
        return pace * max(self.total - self.done, 0)

    def describe(self) -> str:
        """``"the clip of env step 5,000 (40% made in 12 s)"``."""
        made = f"{min(self.done / self.total, 1):.0%} made" if self.total else "started"
        return f"the clip of env step {self.env_steps:,} ({made} in {self.elapsed():.0f} s)"


class ClipWorker:
    """One daemon thread that runs clip jobs in order; :meth:`cancel` stops the one being made at its next frame
    and fails the queued ones with ``_Cancelled``. A worker once cancelled stays so: make a new one for a new fit.

    Args:
        name: the thread's name.
    """

    def __init__(self, name: str = "grid-video"):
        self.name = name
        self.cancelled = threading.Event()
        self.current: ClipProgress | None = None  # the clip being made
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def submit(self, job: Callable[..., Any], env_steps: int, **kwargs: Any) -> Future:
        """Queue ``job(env_steps=env_steps, progress=ClipProgress, **kwargs)``; its result or exception reaches the
        returned future."""
        future: Future = Future()
        self._jobs.put((future, job, ClipProgress(env_steps, self.cancelled), {"env_steps": env_steps, **kwargs}))
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()
        return future

    def _run(self) -> None:
        while (item := self._jobs.get()) is not None:
            future, job, progress, kwargs = item
            if not future.set_running_or_notify_cancel():
                continue
            if self.cancelled.is_set():
                future.set_exception(_Cancelled())
                continue
            progress.started = time.monotonic()
            self.current = progress
            try:
                future.set_result(job(progress=progress, **kwargs))
            except BaseException as error:  # handed to whoever collects the future
                future.set_exception(error)
            finally:
                self.current = None

    def cancel(self) -> None:
        """Stop the clip being made at its next frame; fail the queued ones."""
        self.cancelled.set()

    def close(self, timeout: float) -> bool:
        """Let the thread end after the queued jobs (cancel first to drop them), waiting at most ``timeout``
        seconds; returns whether it ended (if not, it is a daemon: it ends with the process at the latest)."""
        if self._thread is None:
            return True
        self._jobs.put(None)
        self._thread.join(timeout)
        return not self._thread.is_alive()


class _FrozenGreedyActor:
    """``actor(obs, episode_start) -> actions`` of a CPU copy of a greedy policy, as
    :meth:`RLModule.greedy_actor` plays it (a recurrent policy's state carried from call to call,
    zeroed where ``episode_start``), for a clip played in the background while training goes on:
    the copy shares no tensor with the module, so later weight updates never reach it.

    Args:
        policy: ``pl_module.greedy_policy()``: obs -> actions, or a recurrent one (it has
            ``initial_state(batch)``): ``(obs, state, episode_start) -> (actions, state)``.
        cancelled: set when the clip is cancelled: the next step raises ``_Cancelled``.
    """

    def __init__(self, policy: nn.Module, cancelled: threading.Event):
        self.policy = copy.deepcopy(policy).cpu().eval()
        self.recurrent = callable(getattr(self.policy, "initial_state", None))
        self.state: Tensor | None = None
        self.cancelled = cancelled

    def __call__(self, obs: Tensor, episode_start: Tensor | None = None) -> Tensor:
        if self.cancelled.is_set():
            raise _Cancelled
        cpu_obs = obs.cpu()
        if not self.recurrent:
            return self.policy(cpu_obs).to(obs.device)
        if self.state is None:
            self.state = self.policy.initial_state(cpu_obs.shape[0])
        if episode_start is None:
            episode_start = torch.zeros(cpu_obs.shape[0], dtype=torch.bool)
        actions, self.state = self.policy(cpu_obs, self.state, episode_start.cpu())
        return actions.to(obs.device)


def _frozen_greedy_actor(pl_module: RLModuleProtocol, cancelled: threading.Event) -> _FrozenGreedyActor | None:
    """A frozen CPU copy of the module's greedy policy (taken now, on the training thread), or None
    if the module has no standalone one (then its clip is played on the training thread)."""
    # greedy_policy is RLModule's, not (yet) part of RLModuleProtocol: a module of your own without
    # it keeps the old path.
    greedy_policy = getattr(pl_module, "greedy_policy", None)
    if greedy_policy is None:
        return None
    try:
        policy = greedy_policy()
    except (NotImplementedError, ValueError):  # e.g. a recurrent PPO before it could be exported
        return None
    return _FrozenGreedyActor(policy, cancelled)
