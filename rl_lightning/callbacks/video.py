"""GridVideoLogger: a 4x4 grid video of the agent, as an MP4 file and in every logger of the run (TensorBoard,
W&B, MLflow, CSV)."""

from __future__ import annotations

import functools
import shutil
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import wait as wait_for
from pathlib import Path
from typing import Any, NamedTuple

import lightning as L
from lightning.pytorch.loggers import Logger, MLFlowLogger, TensorBoardLogger, WandbLogger
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch import Tensor

from rl_lightning._checks import check_choice, check_float, check_int, check_seed
from rl_lightning.callbacks.updates import UpdateCallback
from rl_lightning.callbacks.video_background import (
    ClipProgress,
    ClipWorker,
    _Cancelled,
    _frozen_greedy_actor,
    _FrozenGreedyActor,
)
from rl_lightning.callbacks.video_frames import _every_kth_step, greedy_frames, greedy_rollout
from rl_lightning.callbacks.video_frames import _render_or_explain as _render_or_explain  # re-exported
from rl_lightning.callbacks.video_frames import _shrink as _shrink  # re-exported
from rl_lightning.data.rollout import first_episode_stats
from rl_lightning.envs.mujoco_render import is_mujoco_env_id, lighten_mujoco_rendering, software_rendering_note
from rl_lightning.protocols import RLModuleProtocol, require
from rl_lightning.video import encode_mp4, iter_grid_frames, video_summary, write_summary

_CAPTION = (
    "The first 16 envs, row by row. A cell flashes pink for a few frames when its episode ends "
    "(the next frame is the first of a new episode)."
)


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


class _CannotRender(Exception):
    """The env can neither draw its observations nor render its frames: no more videos this run."""


# What a renderer that cannot render raises (see greedy_frames and _render_or_explain).
_RENDER_ERRORS = (NotImplementedError, ValueError, TypeError)


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


class GridVideoLogger(UpdateCallback):
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

    Everything after grabbing the clip runs in one background (daemon) thread on rank 0; a failed
    render or encode is a warning, never a crash:

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
    ``benchmarks/bench_video.py``). ``frame_stride`` and the period trade that against the videos.

    MuJoCo without a GPU (``MUJOCO_GL=egl`` or ``osmesa`` on Mesa's llvmpipe) renders in software, ~0.2 CPU s a
    frame at gymnasium's quality: a clip of 16 envs x 250 frames would cost ~15 CPU minutes. ``software_rendering``
    says what to do then, and the first clip's line says what it does.

    A clip never holds the run: the end of training waits for the clip being made at most
    ``final_clip_timeout`` seconds (at once abandoning one that will not finish in time, saying so), and a stop
    request (SIGTERM, Ctrl-C, an error) abandons it within a frame or two.

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
        software_rendering: where MuJoCo renders in software: ``"light"`` draws the clips at the grid
            cell's size (160 px) without anti-aliasing, shadows or reflections (~40x cheaper; where the clip's
            envs run in other processes, Ray's or async, that cannot be done and there are no clips);
            ``"full"`` renders them as on a GPU; ``"off"``: no clips.
        final_clip_timeout: seconds the end of training waits for clips still being made.
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
        software_rendering: str = "light",
        final_clip_timeout: float = 60.0,
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
        self.software_rendering = check_choice("software_rendering", software_rendering, ("light", "full", "off"))
        self.final_clip_timeout = check_float("final_clip_timeout", final_clip_timeout, 0.0)
        self._loggers: list[Logger] = []  # the run's loggers, which each finished clip is handed to
        self._cannot_draw_warned = False
        self._disabled = False  # set when the env turned out unable to render
        self._next_at = 0
        # Read from a closed one-env instance at a fit's first video: the env's render_fps, and its
        # draw (None: it cannot draw its observations, its own renderer films it).
        self._env_fps: int | None = None
        self._draw: Callable[[Tensor], Tensor] | None = None
        self._lighten: bool | None = None  # whether clips render lightened (None: not decided yet this fit)
        self._worker = ClipWorker()
        self._pending: list[Future] = []
        #: Paths of the MP4 files written so far.
        self.video_paths: list[Path] = []
        #: Seconds the training loop spent per video (grabbing the clip, or for a gymnasium env
        #: copying the greedy policy), and in the background thread (playing a gymnasium clip,
        #: drawing, encoding).
        self.training_seconds: list[float] = []
        self.render_seconds: list[float] = []
        #: Env steps at which a clip was due but skipped: the previous clip was still being played.
        self.skipped_env_steps: list[int] = []
        #: Env steps of the clips abandoned unfinished (the end of training or a stop came first).
        self.abandoned_env_steps: list[int] = []
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
        self._lighten = None
        if self._worker.cancelled.is_set():  # a clip abandoned by the last fit may still be ending: not this one's
            self._worker = ClipWorker()

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
            if self._lighten is None:
                self._lighten = self._plan_software_rendering(pl_module.hparams.env_id)
                if self._disabled:
                    return
            if self._pending:  # the previous clip is still being made: never pile clips up
                self.skipped_env_steps.append(env_steps)
                if len(self.skipped_env_steps) == 1:
                    rank_zero_info(
                        f"GridVideoLogger: skipped the clip due at env step {env_steps:,}, the previous one "
                        "is still being rendered (raise every_n_env_steps to get every clip)"
                    )
                return
            actor = _frozen_greedy_actor(pl_module, self._worker.cancelled)
            if actor is not None:
                clip = functools.partial(self._play_and_render, pl_module, actor)
            else:  # no standalone greedy policy to copy: played here, as before
                try:
                    frames, dones, caption = self._play(pl_module, env_steps)
                except _CannotRender as error:
                    self._warn_no_video(error)
                    return
                clip = functools.partial(self._render, frames, dones, _identity, caption=caption)
        job = self._worker.submit(clip, env_steps, fps=fps, path=path, writer=writer)
        self._pending.append(job)
        self.training_seconds.append(time.perf_counter() - start)

    def _plan_software_rendering(self, env_id: str) -> bool:
        """Once a fit, before its first clip of a MuJoCo env: whether MuJoCo renders in software here, and then
        what ``software_rendering`` does about it, said in one line. Returns whether clips render lightened."""
        note = software_rendering_note() if is_mujoco_env_id(env_id) else None
        if note is None:
            return False
        frames = 16 * -(-self.num_steps // self.frame_stride)
        if self.software_rendering == "off":
            self._disabled = True
            rank_zero_info(
                f"GridVideoLogger: {note}; no grid videos this run (software_rendering='off'; 'light' draws them "
                "cheaply, 'full' as on a GPU)"
            )
        elif self.software_rendering == "light":
            rank_zero_info(
                f"GridVideoLogger: {note}: clips are drawn at 160 px without anti-aliasing, shadows or reflections "
                f"(~40x cheaper; {frames:,} frames a clip); GridVideoLogger(software_rendering='full') for "
                "gymnasium's full quality, 'off' for no clips"
            )
        else:
            rank_zero_warn(
                f"GridVideoLogger: {note}: clips render at full quality (software_rendering='full'): {frames:,} "
                "frames a clip at ~0.2 CPU s each, next to training ('light' is ~40x cheaper)"
            )
        return self.software_rendering == "light"

    def _play(
        self, pl_module, env_steps: int, actor: _FrozenGreedyActor | None = None, progress: ClipProgress | None = None
    ) -> tuple[Tensor, Tensor, str]:
        """A greedy clip of an env that renders its own frames: frames, their dones and the caption.

        Raises:
            _CannotRender: if the env cannot render.
        """
        prepare = self._lighten_or_refuse if self._lighten else None
        try:
            frames, all_dones = greedy_frames(
                pl_module,
                16,
                self.num_steps,
                self.seed,
                self.frame_stride,
                actor=actor,
                prepare=prepare,
                on_frame=None if progress is None else progress.advance,
            )
        except _RENDER_ERRORS as error:
            raise _CannotRender(_no_video_message(pl_module.hparams.env_id, error)) from error
        dones = _every_kth_step(frames, all_dones, self.frame_stride)[1]  # frames are every k-th already
        return frames, dones, _greedy_caption(env_steps, all_dones)

    @staticmethod
    def _lighten_or_refuse(envs: Any) -> None:
        if not lighten_mujoco_rendering(envs, max_side=160):
            raise _CannotRender(
                f"{software_rendering_note()}, and the clip's envs ({type(envs).__name__}) render in other processes, "
                "where their rendering cannot be lightened: no grid videos this run "
                "(GridVideoLogger(software_rendering='full') renders them anyway, ~40x the CPU time)"
            )

    def _play_and_render(
        self, pl_module, actor: _FrozenGreedyActor, fps, path: Path, writer, env_steps: int, progress: ClipProgress
    ) -> _Clip | None:
        """In the background thread: play a greedy clip with the frozen ``actor`` on a fresh env
        instance (built, rendered and closed in this thread), then draw and encode it. A
        ``_CannotRender`` is left for the training thread to warn about (see ``_collect``)."""
        start = time.perf_counter()
        progress.total = 2 * -(-self.num_steps // self.frame_stride)  # renders of the 16 envs, then grid frames
        frames, dones, caption = self._play(pl_module, env_steps, actor, progress)
        return self._render(frames, dones, _identity, fps, path, writer, env_steps, caption, progress, start)

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
        self,
        obs,
        dones,
        draw,
        fps,
        path: Path,
        writer,
        env_steps: int,
        caption: str,
        progress: ClipProgress | None = None,
        start: float | None = None,
    ) -> _Clip | None:
        """Draw and encode the clip to ``path`` (and the TensorBoard GIF to ``writer``); the clip for the other
        loggers, or None if it failed (with a warning). A cancelled ``progress`` stops it between frames."""
        start = time.perf_counter() if start is None else start
        if progress is not None and not progress.total:
            progress.total = obs.shape[1]  # the grid frames to draw and encode
        clip = None
        try:
            # One pass over the rendered frames: every frame goes to the MP4, every k-th (copied:
            # the iterator reuses its buffer) is kept for the TensorBoard GIF.
            stride = max(1, self.tensorboard_frame_stride)
            kept: list = []

            def frames_for_mp4():
                for i, frame in enumerate(iter_grid_frames(obs, dones, draw, flash_frames=self.flash_frames)):
                    if progress is not None:
                        progress.advance()  # raises once the clip is cancelled
                    if writer is not None and i % stride == 0:
                        kept.append(frame.copy())
                    yield frame

            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(encode_mp4(frames_for_mp4(), fps))
            if progress is not None:
                progress.check()  # cancelled while the last frames were encoded: no half-logged clip
            self.video_paths.append(path)
            # SummaryWriter queues events for its own writer thread: safe next to Lightning's
            # scalars from the training thread. The last clip is written before the logger is
            # finalized (on_train_end waits for it).
            if writer is not None:
                write_summary(writer, video_summary("videos/grid", kept, fps / stride, _CAPTION), env_steps)
                writer.add_text("videos/caption", caption, env_steps)
            clip = _Clip(path, env_steps, caption)
        except _Cancelled:
            raise
        except Exception as error:  # a video must never take training down
            rank_zero_warn(f"GridVideoLogger could not write the video for env step {env_steps}: {error!r}")
        self.render_seconds.append(time.perf_counter() - start)
        return clip

    def state_dict(self) -> dict[str, Any]:
        return {"next_at": self._next_at}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._next_at = state_dict["next_at"]

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every queued video is written (or has failed, with its warning), at most ``timeout``
        seconds (None: however long it takes); returns whether all were."""
        wait_for(self._pending, timeout=timeout)
        self._collect()
        return not self._pending

    def _finish_clips(self, trainer: L.Trainer, timeout: float) -> None:
        """Wait for the clips still being made at most ``timeout`` seconds, giving up at once on a stop request
        (SIGTERM, Ctrl-C) or where the clip being made will not be done in time at its pace so far; then abandon
        what is left, saying so."""
        self._collect()
        if not self._pending:
            return
        deadline, reason = time.monotonic() + timeout, f"not done within final_clip_timeout={timeout:g} s"
        said = False
        while self._pending:
            now, progress = time.monotonic(), self._worker.current
            remaining = None if progress is None else progress.remaining_seconds()
            if trainer.received_sigterm:
                reason = "a stop request"
                break
            if now >= deadline or (remaining is not None and now + remaining > deadline + 1.0):
                if remaining is not None and now < deadline:
                    reason = f"~{remaining:.0f} s more needed, over final_clip_timeout={timeout:g} s"
                break
            if not said and progress is not None and now + 2.0 < deadline:
                rank_zero_info(
                    f"GridVideoLogger: finishing {progress.describe()}, at most {deadline - now:.0f} s more "
                    "(final_clip_timeout; SIGTERM or Ctrl-C abandons it)"
                )
                said = True
            self.wait(timeout=0.2)
        if self._pending:
            self._abandon(reason)

    def _abandon(self, reason: str) -> None:
        """Cancel the clips still being made and forget them, saying so; give the thread a few seconds to notice
        (it checks between frames), then leave it: it is a daemon, the process does not wait for it."""
        progress = self._worker.current
        what = progress.describe() if progress is not None else "the clip queued"
        self._worker.cancel()
        ended = self._worker.close(timeout=_STOP_GRACE_S)
        self._collect()
        pending_steps = [progress.env_steps] if progress is not None else []
        self.abandoned_env_steps.extend(pending_steps)
        self._pending = []
        left = "" if ended else f" (its thread is still inside a frame after {_STOP_GRACE_S:g} s: left to end alone)"
        rank_zero_info(f"GridVideoLogger: abandoned {what}: {reason}{left}")

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._finish_clips(trainer, self.final_clip_timeout)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._finish_clips(trainer, self.final_clip_timeout)
        self._worker.close(timeout=_STOP_GRACE_S)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        # Lightning calls no teardown after an error or a stop: the clip being made stops at its next frame (it
        # would hold the process for its whole length), and nothing of it is left running at exit.
        if self._pending:
            self._abandon(f"the run stopped ({type(exception).__name__})")
        self._worker.close(timeout=_STOP_GRACE_S)


# Seconds a cancelled clip's thread gets to reach its next frame and end.
_STOP_GRACE_S = 5.0


def _no_video_message(env_id: str, error: BaseException) -> str:
    return f"{env_id} can neither draw its observations nor render its frames ({error}), so no videos are logged"
