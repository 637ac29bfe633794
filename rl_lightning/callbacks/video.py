"""GridVideoLogger: a 4x4 grid video of the agent, as an MP4 file and in TensorBoard."""

from __future__ import annotations

import time
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor

from rl_lightning._checks import check_int, check_seed
from rl_lightning.data.rollout import first_episode_stats
from rl_lightning.protocols import RLModuleProtocol, require
from rl_lightning.video import encode_mp4, iter_grid_frames, video_summary, write_summary

_CAPTION = (
    "The first 16 envs, row by row. A cell flashes pink for a few frames when its episode ends "
    "(the next frame is the first of a new episode)."
)


@torch.no_grad()
def greedy_rollout(pl_module: RLModuleProtocol, num_envs: int, num_steps: int, seed: int) -> tuple[Tensor, Tensor]:
    """Play ``num_steps`` greedy steps on a fresh env instance.

    Returns:
        obs ``(num_envs, num_steps, *obs_shape)`` and bool dones ``(num_envs, num_steps)``.
    """
    envs = pl_module.make_envs(num_envs, seed)
    obs, _ = envs.reset()
    actor = pl_module.greedy_actor()  # carries a recurrent policy's state
    all_obs, all_dones = [], []
    done = torch.ones(num_envs, dtype=torch.bool, device=obs.device)
    for _ in range(num_steps):
        next_obs, _, terminated, truncated, _ = envs.step(actor(obs, done))
        done = terminated | truncated
        all_obs.append(obs)
        all_dones.append(done)
        obs = next_obs
    return torch.stack(all_obs, dim=1), torch.stack(all_dones, dim=1)


@torch.no_grad()
def greedy_frames(
    pl_module: RLModuleProtocol, num_envs: int, num_steps: int, seed: int, frame_stride: int, max_side: int = 160
) -> tuple[Tensor, Tensor]:
    """Play ``num_steps`` greedy steps on a fresh env instance that renders its own frames (a
    gymnasium env with an ``rgb_array`` renderer), keeping every ``frame_stride``-th frame,
    shrunk to at most ``max_side`` pixels a side.

    Returns:
        uint8 frames ``(num_envs, ceil(num_steps / frame_stride), H, W, 3)`` on the CPU and bool
        dones ``(num_envs, num_steps)``.

    Raises:
        NotImplementedError: if the env cannot render.
    """
    envs = pl_module.make_envs(num_envs, seed, render=True)
    try:
        if not envs.can_render:
            raise NotImplementedError(f"{type(envs).__name__} cannot render its frames")
        obs, _ = envs.reset()
        actor = pl_module.greedy_actor()
        frames, dones = [], [torch.ones(num_envs, dtype=torch.bool, device=obs.device)]
        for t in range(num_steps):
            if t % frame_stride == 0:
                frames.append(_shrink(_render_or_explain(envs, pl_module.hparams.env_id), max_side))
            obs, _, terminated, truncated, _ = envs.step(actor(obs, dones[-1]))
            dones.append(terminated | truncated)
        dones = dones[1:]
    finally:
        envs.close()
    return torch.stack(frames, dim=1), torch.stack(dones, dim=1).cpu()


def _render_or_explain(envs: Any, env_id: str) -> Tensor:
    """``envs.render()``, or a ``NotImplementedError`` saying why not: a renderer fails in its own ways
    (MuJoCo without a display or an OpenGL platform raises its own errors, GLFW warns first)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # GLFW's "DISPLAY is missing" ahead of the real error
            return envs.render()
    except Exception as error:
        hint = (
            " (headless MuJoCo renders with MUJOCO_GL=egl, or osmesa)"
            if "OpenGL" in str(error) or "GL" in str(type(error).__name__)
            else ""
        )
        raise NotImplementedError(f"{env_id} failed to render: {type(error).__name__}: {error}{hint}") from error


def _shrink(frames: Tensor, max_side: int) -> Tensor:
    """Average-pool uint8 frames ``(n, H, W, 3)`` by the integer factor that fits ``max_side``."""
    factor = -(-max(frames.shape[1:3]) // max_side)
    if factor <= 1:
        return frames
    pooled = torch.nn.functional.avg_pool2d(frames.permute(0, 3, 1, 2).float(), factor)
    return pooled.round().to(torch.uint8).permute(0, 2, 3, 1).contiguous()


def _every_kth_step(obs: Tensor, dones: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """CPU copies of every k-th step's obs ``(n, T, ...)`` and, for each kept step, whether an
    episode ended on it or on one of the k - 1 skipped steps after it."""
    obs, dones = obs.to("cpu"), dones.to("cpu")
    num_steps = dones.shape[1]
    padded = torch.nn.functional.pad(dones, (0, -num_steps % k))
    return obs[:, ::k].clone(), padded.view(dones.shape[0], -1, k).any(dim=2)


def _identity(frames: Tensor) -> Tensor:
    return frames


class GridVideoLogger(L.Callback):
    """Every ``every_n_env_steps`` env steps (or every ``every_n_train_steps`` training steps),
    render the first 16 envs as a 4x4 grid video.

    The clip is the rollout just collected when the module has one (VPG: no extra env steps),
    otherwise a greedy rollout of ``num_steps`` steps on a separate env instance (DQN). It is
    written to ``<log_dir>/videos/step_<env_steps>.mp4`` and, with a TensorBoard logger, as an
    animated image ``videos/grid`` (with its caption as text ``videos/caption``).

    Rendering and encoding run in a background thread on rank 0, so training only pays for
    copying the clip; a failed render or encode is a warning, never a crash.

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
        self._cannot_draw_warned = False
        self._disabled = False  # set when the env turned out unable to render
        self._next_at = 0
        self._executor: ThreadPoolExecutor | None = None
        self._pending: list[Future] = []
        #: Paths of the MP4 files written so far.
        self.video_paths: list[Path] = []
        #: Seconds the training loop spent per video (grabbing the clip), and in the background
        #: thread (drawing + encoding).
        self.training_seconds: list[float] = []
        self.render_seconds: list[float] = []

    def _due(self, trainer: L.Trainer, pl_module: L.LightningModule) -> bool:
        now = trainer.global_step if self.every_n_train_steps else pl_module.env_steps
        if now < self._next_at:
            return False
        period = self.every_n_train_steps or self.every_n_env_steps
        self._next_at = (now // period + 1) * period  # the next multiple of the period
        return True

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        require(pl_module, RLModuleProtocol, "GridVideoLogger")

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx) -> None:
        if not trainer.is_global_zero or self._disabled or not self._due(trainer, pl_module):
            return
        start = time.perf_counter()
        spec_env = pl_module.make_envs(1, 0)
        spec_env.close()
        fps = (self.fps or spec_env.render_fps) / self.frame_stride
        rollout = pl_module.latest_rollout() if spec_env.can_draw else None
        if rollout is not None:
            obs, dones = rollout.obs[:16, : self.num_steps], rollout.dones[:16, : self.num_steps]
            mean_return = first_episode_stats(rollout.rewards[:16, : self.num_steps], dones).returns.mean().item()
            caption = f"env steps {pl_module.env_steps:,}: rollout, mean first-episode return {mean_return:.1f}"
            obs, dones = _every_kth_step(obs.detach(), dones, self.frame_stride)
            draw = spec_env.draw
        else:
            if spec_env.can_draw:
                obs, all_dones = greedy_rollout(pl_module, 16, self.num_steps, self.seed)
                obs, dones = _every_kth_step(obs, all_dones, self.frame_stride)
                draw = spec_env.draw
            else:  # e.g. a gymnasium env: its own renderer draws the current state
                try:
                    obs, all_dones = greedy_frames(pl_module, 16, self.num_steps, self.seed, self.frame_stride)
                except (NotImplementedError, ValueError, TypeError) as error:
                    self._warn_no_video(pl_module, error)
                    self._disabled = True  # the env cannot render: no more tries this run
                    return
                dones = _every_kth_step(obs, all_dones, self.frame_stride)[1]  # obs are every k-th already
                draw = _identity
            length = first_episode_stats(torch.ones(all_dones.shape), all_dones.cpu()).lengths.mean().item()
            caption = f"env steps {pl_module.env_steps:,}: greedy policy, mean first-episode length {length:.1f}"
        log_dir = Path(trainer.logger.log_dir if trainer.logger is not None else trainer.default_root_dir)
        path = log_dir / "videos" / f"step_{pl_module.env_steps}.mp4"
        writer = trainer.logger.experiment if isinstance(trainer.logger, TensorBoardLogger) else None
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grid-video")
        self._pending.append(
            self._executor.submit(self._render, obs, dones, draw, fps, path, writer, pl_module.env_steps, caption)
        )
        self.training_seconds.append(time.perf_counter() - start)

    def _warn_no_video(self, pl_module: RLModuleProtocol, error: BaseException) -> None:
        if not self._cannot_draw_warned:
            rank_zero_warn(
                f"GridVideoLogger: {pl_module.hparams.env_id} can neither draw its observations nor render "
                f"its frames ({error}), so no videos are logged; training goes on"
            )
            self._cannot_draw_warned = True

    def _render(self, obs, dones, draw, fps, path: Path, writer, env_steps: int, caption: str) -> None:
        start = time.perf_counter()
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
            if writer is not None:
                write_summary(writer, video_summary("videos/grid", kept, fps / stride, _CAPTION), env_steps)
                writer.add_text("videos/caption", caption, env_steps)
        except Exception as error:  # a video must never take training down
            rank_zero_warn(f"GridVideoLogger could not write the video for env step {env_steps}: {error!r}")
        self.render_seconds.append(time.perf_counter() - start)

    def state_dict(self) -> dict[str, Any]:
        return {"next_at": self._next_at}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._next_at = state_dict["next_at"]

    def wait(self) -> None:
        """Block until every queued video is written."""
        for future in self._pending:
            future.result()
        self._pending.clear()

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.wait()

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.wait()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
