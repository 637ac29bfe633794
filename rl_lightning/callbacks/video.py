"""GridVideoLogger: a 4x4 grid video of the agent, as an MP4 file and in every logger of the run (TensorBoard,
W&B, MLflow, CSV)."""

from __future__ import annotations

import copy
import functools
import itertools
import shutil
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from pathlib import Path
from typing import Any, NamedTuple

import lightning as L
import numpy as np
import torch
from lightning.pytorch.loggers import Logger, MLFlowLogger, TensorBoardLogger, WandbLogger
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from PIL import Image
from torch import Tensor, nn

from rl_lightning._checks import check_int, check_seed
from rl_lightning.callbacks.updates import runs_update_hooks
from rl_lightning.data.rollout import first_episode_stats
from rl_lightning.playing import play_greedy
from rl_lightning.protocols import RLModuleProtocol, require
from rl_lightning.video import encode_mp4, iter_grid_frames, video_summary, write_summary

_CAPTION = (
    "The first 16 envs, row by row. A cell flashes pink for a few frames when its episode ends "
    "(the next frame is the first of a new episode)."
)


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
) -> tuple[Tensor, Tensor]:
    """Play ``num_steps`` greedy steps on a fresh env instance that renders its own frames (a
    gymnasium env with an ``rgb_array`` renderer), keeping every ``frame_stride``-th frame,
    shrunk to at most ``max_side`` pixels a side.

    Args:
        actor: ``actor(obs, episode_start) -> actions``; None: ``pl_module.greedy_actor()``
            (``GridVideoLogger`` passes a frozen copy when it plays in the background).

    Returns:
        uint8 frames ``(num_envs, ceil(num_steps / frame_stride), H, W, 3)`` on the CPU and bool
        dones ``(num_envs, num_steps)``.

    Raises:
        NotImplementedError: if the env cannot render.
    """
    envs = pl_module.make_envs(num_envs, seed, render=True)
    renders = itertools.count()

    def frame(obs: Any) -> Tensor:
        quiet = next(renders) == 0  # GLFW warns with the first render, where the renderer sets up
        return _shrink(_render_or_explain(envs, pl_module.hparams.env_id, quiet=quiet), max_side)

    try:
        if not envs.can_render:
            raise NotImplementedError(f"{type(envs).__name__} cannot render its frames")
        actor = pl_module.greedy_actor() if actor is None else actor
        played = play_greedy(
            actor, envs, episodes_per_env=None, num_steps=num_steps, frame=frame, frame_stride=frame_stride
        )
    finally:
        envs.close()
    return torch.stack(played.frames, dim=1), played.dones.cpu()


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


def _identity(frames: Tensor) -> Tensor:
    return frames


class _Clip(NamedTuple):
    """A written MP4, for the loggers: its path, the env step it shows and its caption."""

    path: Path
    env_steps: int
    caption: str


def _videos_dir(trainer: L.Trainer) -> Path:
    """``videos/`` in the directory of the first logger that has one (TensorBoard's and CSV's ``log_dir``,
    W&B's ``save_dir``; not MLflow's store, which takes each folder in it for an experiment), else in
    ``default_root_dir``. Read from the loggers: ``Trainer.log_dir`` broadcasts, and only rank 0 makes videos."""
    for logger in trainer.loggers:
        directory = getattr(logger, "log_dir", None) or (None if isinstance(logger, MLFlowLogger) else logger.save_dir)
        if directory:
            return Path(directory) / "videos"
    return Path(trainer.default_root_dir) / "videos"


class _Cancelled(Exception):
    """The run stopped with an error while a clip was playing in the background."""


class _CannotRender(Exception):
    """The env can neither draw its observations nor render its frames: no more videos this run."""


# What a renderer that cannot render raises (see greedy_frames and _render_or_explain).
_RENDER_ERRORS = (NotImplementedError, ValueError, TypeError)


class _FrozenGreedyActor:
    """``actor(obs, episode_start) -> actions`` of a CPU copy of a greedy policy, as
    :meth:`RLModule.greedy_actor` plays it (a recurrent policy's state carried from call to call,
    zeroed where ``episode_start``), for a clip played in the background while training goes on:
    the copy shares no tensor with the module, so later weight updates never reach it.

    Args:
        policy: ``pl_module.greedy_policy()``: obs -> actions, or a recurrent one (it has
            ``initial_state(batch)``): ``(obs, state, episode_start) -> (actions, state)``.
        cancelled: set when the run stops with an error: the next step raises ``_Cancelled``.
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


def _mean_first_episode_length(dones: Tensor) -> float:
    """The mean over envs of their first episode's length in steps (the whole clip where none ended).

    Args:
        dones: bool ``(num_envs, num_steps)``: an episode ended on step t.
    """
    dones = dones.cpu().int()
    return ((dones.cumsum(dim=1) - dones) == 0).sum(dim=1).float().mean().item()  # no end strictly before t


def _greedy_caption(env_steps: int, all_dones: Tensor) -> str:
    length = _mean_first_episode_length(all_dones)
    return f"env steps {env_steps:,}: greedy policy, mean first-episode length {length:.1f}"


class GridVideoLogger(L.Callback):
    """Every ``every_n_env_steps`` env steps (or every ``every_n_train_steps`` training steps),
    render the first 16 envs as a 4x4 grid video.

    The clip is the rollout just collected when the module has one (VPG: no extra env steps),
    otherwise a greedy rollout of ``num_steps`` steps on a separate env instance (DQN). It is
    written to ``<dirpath>/step_<env_steps>.mp4`` and reaches every logger of the run, at its env step:

    - TensorBoard (the first ``TensorBoardLogger``): an animated image ``videos/grid``, its caption as
      text ``videos/caption``;
    - W&B (``WandbLogger``): a ``wandb.Video`` ``videos/grid`` with its caption (``logger.log_video``);
    - MLflow (``MLFlowLogger``): the MP4 as the artifact ``videos/step_<env_steps>.mp4``, its caption as
      ``videos/step_<env_steps>.txt``;
    - any other logger with a ``log_dir`` of its own (CSV): a copy of the MP4 in ``<log_dir>/videos``;
      a logger with neither gets the scalars only.

    Everything after grabbing the clip runs in one background thread on rank 0; a failed render
    or encode is a warning, never a crash:

    - an env that draws its observations (the native ones): training copies the observations
      (a few ms) and the thread draws and encodes them;
    - an env that renders its own frames (gymnasium's, through the adapter): the thread also
      plays the clip, on its own env instance, with a frozen CPU copy of ``greedy_policy()``
      taken when the clip is due (training waits only for that copy, about a millisecond for
      these networks). Such a clip takes seconds (16 gymnasium renderers), so at most one is in
      flight: a clip that falls due while the previous one is still being made is skipped (its
      env step goes to ``skipped_env_steps``), never queued. A module with no standalone greedy
      policy plays its clip on the training thread, as before.

    The thread shares the CPU cores and the GIL with training (gymnasium's renderers are Python
    and pygame): while a gymnasium clip plays, training steps are slower (about 2x on 2 cores,
    ``benchmarks/bench_video.py``): on few cores such a clip still costs training as much time
    in all as playing it inline, or more; it just no longer stalls a step. ``frame_stride`` and
    the period trade that against the videos.

    The last clip is finished at the end of training (``on_train_end`` / ``teardown``); a run that
    stops with an error cancels the clip being played instead.

    Args:
        every_n_env_steps: period in env steps (ignored if ``every_n_train_steps`` is given).
        every_n_train_steps: period in training steps.
        num_steps: env steps of a greedy clip (and the most steps taken from a rollout).
        frame_stride: draw every k-th env step (a cell still flashes if its episode ended on a
            skipped step); the clip plays at ``fps / k`` so it keeps the env's real-time speed
            while rendering and encoding k times less.
        fps: env steps per second of playback (default: the env's ``render_fps``).
        flash_frames: frames a cell flashes when its episode ends.
        tensorboard_frame_stride: keep every k-th frame in the TensorBoard GIF (the MP4 keeps all).
        seed: seed of the envs of greedy clips.
        dirpath: where the MP4 files go (None: ``videos/`` in the directory of the first logger that has
            one: TensorBoard's and CSV's ``log_dir``, W&B's ``save_dir``; else the Trainer's
            ``default_root_dir``).
    """

    def __init__(
        self,
        every_n_env_steps: int = 100_000,
        every_n_train_steps: int | None = None,
        num_steps: int = 500,
        frame_stride: int = 2,
        fps: int | None = None,
        flash_frames: int = 3,
        tensorboard_frame_stride: int = 3,
        seed: int = 20_000,
        dirpath: str | Path | None = None,
    ):
        self.every_n_env_steps = check_int("every_n_env_steps", every_n_env_steps, 1)
        if every_n_train_steps is not None:
            check_int("every_n_train_steps", every_n_train_steps, 1)
        self.every_n_train_steps = every_n_train_steps
        self.num_steps = check_int("num_steps", num_steps, 1)
        self.frame_stride = check_int("frame_stride", frame_stride, 1)
        self.fps = None if fps is None else check_int("fps", fps, 1)
        self.flash_frames = check_int("flash_frames", flash_frames, 0)
        self.tensorboard_frame_stride = check_int("tensorboard_frame_stride", tensorboard_frame_stride, 1)
        self.seed = check_seed("seed", seed)
        self.dirpath = dirpath
        self._loggers: list[Logger] = []  # the run's loggers, which each finished clip is handed to
        self._cannot_draw_warned = False
        self._disabled = False  # set when the env turned out unable to render
        self._next_at = 0
        # Read from a closed one-env instance at a fit's first video: the env's render_fps, and its
        # draw (None: it cannot draw its observations, its own renderer films it).
        self._env_fps: int | None = None
        self._draw: Callable[[Tensor], Tensor] | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._pending: list[Future] = []
        self._cancelled = threading.Event()  # set by on_exception: a clip being played stops
        #: Paths of the MP4 files written so far.
        self.video_paths: list[Path] = []
        #: Seconds the training loop spent per video (grabbing the clip, or for a gymnasium env
        #: copying the greedy policy), and in the background thread (playing a gymnasium clip,
        #: drawing, encoding).
        self.training_seconds: list[float] = []
        self.render_seconds: list[float] = []
        #: Env steps at which a clip was due but skipped: the previous clip was still being played.
        self.skipped_env_steps: list[int] = []
        #: Where the MP4 files go (``dirpath``, or found from the loggers when the first clip is due).
        self.video_dir: Path | None = None if dirpath is None else Path(dirpath)

    def _due(self, trainer: L.Trainer, pl_module: L.LightningModule) -> bool:
        now = trainer.global_step if self.every_n_train_steps else pl_module.env_steps
        if now < self._next_at:
            return False
        period = self.every_n_train_steps or self.every_n_env_steps
        self._next_at = (now // period + 1) * period  # the next multiple of the period
        return True

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        require(pl_module, RLModuleProtocol, "GridVideoLogger")
        self._env_fps = None  # a new fit may train another module
        self._cancelled.clear()

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx) -> None:
        if not runs_update_hooks(pl_module):  # a module of yours: one update per training step
            self.on_update_end(trainer, pl_module, outputs)

    def on_update_end(self, trainer: L.Trainer, pl_module: L.LightningModule, loss: Any) -> None:
        """After every update (``rl_lightning.callbacks.updates``): a clip when one is due."""
        if not trainer.is_global_zero:
            return
        self._collect()  # first: a background clip that could not render disables the videos
        if self._disabled or not self._due(trainer, pl_module):
            return
        start = time.perf_counter()
        if self._env_fps is None:
            spec_env = pl_module.make_envs(1, 0)
            spec_env.close()
            self._env_fps, self._draw = spec_env.render_fps, spec_env.draw if spec_env.can_draw else None
        fps = (self.fps or self._env_fps) / self.frame_stride
        self.video_dir = Path(self.dirpath) if self.dirpath is not None else _videos_dir(trainer)
        path = self.video_dir / f"step_{pl_module.env_steps}.mp4"
        self._loggers = list(trainer.loggers)
        tensorboard = next((logger for logger in self._loggers if isinstance(logger, TensorBoardLogger)), None)
        writer = tensorboard.experiment if tensorboard is not None else None
        env_steps = pl_module.env_steps
        rollout = pl_module.latest_rollout() if self._draw is not None else None
        if rollout is not None:  # the newest training rollout: its first 16 envs
            obs, dones = rollout.obs[:16, : self.num_steps], rollout.dones[:16, : self.num_steps]
            mean_return = first_episode_stats(rollout.rewards[:16, : self.num_steps], dones).returns.mean().item()
            caption = f"env steps {env_steps:,}: rollout, mean first-episode return {mean_return:.1f}"
            obs, dones = _every_kth_step(obs.detach(), dones, self.frame_stride)
            clip = functools.partial(self._render, obs, dones, self._draw, caption=caption)
        elif self._draw is not None:
            obs, all_dones = greedy_rollout(pl_module, 16, self.num_steps, self.seed)
            obs, dones = _every_kth_step(obs, all_dones, self.frame_stride)
            caption = _greedy_caption(env_steps, all_dones)
            clip = functools.partial(self._render, obs, dones, self._draw, caption=caption)
        else:  # e.g. a gymnasium env: its own renderer draws the current state, slowly
            if self._pending:  # the previous clip is still being made: never pile clips up
                self.skipped_env_steps.append(env_steps)
                if len(self.skipped_env_steps) == 1:
                    rank_zero_info(
                        f"GridVideoLogger: skipped the clip due at env step {env_steps:,}, the previous one "
                        "is still being rendered (raise every_n_env_steps to get every clip)"
                    )
                return
            actor = _frozen_greedy_actor(pl_module, self._cancelled)
            if actor is not None:
                clip = functools.partial(self._play_and_render, pl_module, actor)
            else:  # no standalone greedy policy to copy: played here, as before
                try:
                    frames, dones, caption = self._play(pl_module, env_steps)
                except _CannotRender as error:
                    self._warn_no_video(error)
                    return
                clip = functools.partial(self._render, frames, dones, _identity, caption=caption)
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grid-video")
        self._pending.append(self._executor.submit(clip, fps=fps, path=path, writer=writer, env_steps=env_steps))
        self.training_seconds.append(time.perf_counter() - start)

    def _play(self, pl_module, env_steps: int, actor: _FrozenGreedyActor | None = None) -> tuple[Tensor, Tensor, str]:
        """A greedy clip of an env that renders its own frames: frames, their dones and the caption.

        Raises:
            _CannotRender: if the env cannot render.
        """
        try:
            frames, all_dones = greedy_frames(pl_module, 16, self.num_steps, self.seed, self.frame_stride, actor=actor)
        except _RENDER_ERRORS as error:
            raise _CannotRender(_no_video_message(pl_module.hparams.env_id, error)) from error
        dones = _every_kth_step(frames, all_dones, self.frame_stride)[1]  # frames are every k-th already
        return frames, dones, _greedy_caption(env_steps, all_dones)

    def _play_and_render(
        self, pl_module, actor: _FrozenGreedyActor, fps, path: Path, writer, env_steps: int
    ) -> _Clip | None:
        """In the background thread: play a greedy clip with the frozen ``actor`` on a fresh env
        instance (built, rendered and closed in this thread), then draw and encode it. A
        ``_CannotRender`` is left for the training thread to warn about (see ``_collect``)."""
        start = time.perf_counter()
        frames, dones, caption = self._play(pl_module, env_steps, actor)
        return self._render(frames, dones, _identity, fps, path, writer, env_steps, caption, start)

    def _collect(self) -> None:
        """On the training thread: hand the finished clips to the loggers other than TensorBoard (their
        clients are not made to be called from a second thread) and forget them; warn (once) and stop
        the videos if a background clip found the env unable to render, warn if it failed otherwise."""
        if not self._pending:
            return
        running = []
        for future in self._pending:
            if not future.done():
                running.append(future)
                continue
            error = future.exception()
            if isinstance(error, _CannotRender):
                self._warn_no_video(error)
            elif error is not None and not isinstance(error, _Cancelled):  # a video never stops training
                rank_zero_warn(f"GridVideoLogger could not play the greedy clip: {error!r}")
            elif error is None and future.result() is not None:  # None: it failed, with its warning
                self._send_to_loggers(future.result())
        self._pending = running

    def _send_to_loggers(self, clip: _Clip) -> None:
        """``clip`` to W&B, MLflow and the ``log_dir`` of every other logger that has one (TensorBoard got
        it in the background thread); a logger that fails is a warning, never a crash."""
        for logger in self._loggers:
            try:
                if isinstance(logger, TensorBoardLogger):
                    continue
                if isinstance(logger, WandbLogger):
                    logger.log_video("videos/grid", [str(clip.path)], step=clip.env_steps, caption=[clip.caption])
                elif isinstance(logger, MLFlowLogger):
                    logger.experiment.log_artifact(logger.run_id, str(clip.path), artifact_path="videos")
                    logger.experiment.log_text(logger.run_id, clip.caption, f"videos/{clip.path.stem}.txt")
                elif getattr(logger, "log_dir", None):  # CSV, or a logger of yours that keeps files
                    target = Path(logger.log_dir) / "videos" / clip.path.name
                    if target.resolve() != clip.path.resolve():
                        target.parent.mkdir(parents=True, exist_ok=True)
                        shutil.copyfile(clip.path, target)
            except Exception as error:  # a video must never take training down
                rank_zero_warn(
                    f"GridVideoLogger could not hand the video of env step {clip.env_steps:,} to "
                    f"{type(logger).__name__}: {error!r}"
                )

    def _warn_no_video(self, error: _CannotRender) -> None:
        self._disabled = True  # the env cannot render: no more tries this run
        if not self._cannot_draw_warned:
            rank_zero_warn(f"GridVideoLogger: {error}; training goes on")
            self._cannot_draw_warned = True

    def _render(
        self, obs, dones, draw, fps, path: Path, writer, env_steps: int, caption: str, start: float | None = None
    ) -> _Clip | None:
        """Draw and encode the clip to ``path`` (and the TensorBoard GIF to ``writer``); the clip for the other
        loggers, or None if it failed (with a warning)."""
        start = time.perf_counter() if start is None else start
        clip = None
        try:
            # One pass over the rendered frames: every frame goes to the MP4, every k-th (copied:
            # the iterator reuses its buffer) is kept for the TensorBoard GIF.
            stride = max(1, self.tensorboard_frame_stride)
            kept: list = []

            def frames_for_mp4():
                for i, frame in enumerate(iter_grid_frames(obs, dones, draw, flash_frames=self.flash_frames)):
                    if writer is not None and i % stride == 0:
                        kept.append(frame.copy())
                    yield frame

            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(encode_mp4(frames_for_mp4(), fps))
            self.video_paths.append(path)
            # SummaryWriter queues events for its own writer thread: safe next to Lightning's
            # scalars from the training thread. The last clip is written before the logger is
            # finalized (on_train_end waits for it).
            if writer is not None:
                write_summary(writer, video_summary("videos/grid", kept, fps / stride, _CAPTION), env_steps)
                writer.add_text("videos/caption", caption, env_steps)
            clip = _Clip(path, env_steps, caption)
        except Exception as error:  # a video must never take training down
            rank_zero_warn(f"GridVideoLogger could not write the video for env step {env_steps}: {error!r}")
        self.render_seconds.append(time.perf_counter() - start)
        return clip

    def state_dict(self) -> dict[str, Any]:
        return {"next_at": self._next_at}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._next_at = state_dict["next_at"]

    def wait(self) -> None:
        """Block until every queued video is written (or has failed, with its warning)."""
        wait_for(self._pending)
        self._collect()

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.wait()

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.wait()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        # Lightning calls no teardown after an error: stop a clip being played (it would hold the
        # process for its whole length) and the thread here, leaving nothing running at exit.
        self._cancelled.set()
        self.teardown(trainer, pl_module, "fit")


def _no_video_message(env_id: str, error: BaseException) -> str:
    return f"{env_id} can neither draw its observations nor render its frames ({error}), so no videos are logged"
