"""What a grid video costs: the training loop's share and the background thread's, per stage.

    python benchmarks/bench_video.py

Renders the first 16 envs of a 500-step CartPole rollout as GridVideoLogger does (every second
step, 4x4 grid, flashes), one CPU thread. Then a gymnasium env that renders its own frames
(LunarLander-v3 when Box2D imports, else MountainCar-v0, both through the adapter): 16 envs x 500
greedy steps rendered by gymnasium, played on the training thread (as GridVideoLogger did before)
and by GridVideoLogger in the background during a PPO run, with the training loop's pace while the
clip plays next to a run without videos.
"""

from __future__ import annotations

import importlib.util
import threading
import time

import lightning as L
import torch

from rl_lightning import PPOModule, VPGModule
from rl_lightning.callbacks import GridVideoLogger
from rl_lightning.callbacks.video import _frozen_greedy_actor, _shrink, greedy_frames
from rl_lightning.envs import make_envs
from rl_lightning.video import encode_gif, encode_mp4, grid_frames


def main() -> None:
    torch.set_num_threads(1)
    env = make_envs("CartPole-v1", 16, seed=0)
    generator = torch.Generator().manual_seed(0)
    obs, _ = env.reset()
    observations, dones = [], []
    for _ in range(500):
        actions = torch.randint(0, 2, (16,), generator=generator)
        next_obs, _, terminated, truncated, _ = env.step(actions)
        observations.append(obs)
        dones.append(terminated | truncated)
        obs = next_obs
    obs, dones = torch.stack(observations, 1)[:, ::2], torch.stack(dones, 1)[:, ::2]

    start = time.perf_counter()
    env.draw(obs)
    draw_s = time.perf_counter() - start
    start = time.perf_counter()
    frames = grid_frames(obs, dones, env.draw)
    grid_s = time.perf_counter() - start
    start = time.perf_counter()
    mp4 = encode_mp4(frames, fps=25)
    mp4_s = time.perf_counter() - start
    start = time.perf_counter()
    gif = encode_gif(frames[::3], fps=25 / 3)
    gif_mb = len(gif) / 1e6
    gif_s = time.perf_counter() - start
    print(f"250 frames of 16 CartPole envs: env.draw {draw_s:.2f} s, grid + flashes (draw included) {grid_s:.2f} s,")
    print(
        f"  MP4 {mp4_s:.2f} s ({len(mp4) / 1e6:.2f} MB), "
        f"TensorBoard GIF of every 3rd frame {gif_s:.2f} s ({gif_mb:.2f} MB)"
    )

    video = GridVideoLogger(every_n_env_steps=1)
    trainer = L.Trainer(
        max_steps=3,
        default_root_dir="/tmp/bench_video",
        callbacks=[video],
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    trainer.fit(VPGModule(seed=1))
    print(
        "GridVideoLogger on VPG's 32 x 500 rollouts: training loop "
        + ", ".join(f"{s * 1000:.1f} ms" for s in video.training_seconds)
        + "; background thread "
        + ", ".join(f"{s:.2f} s" for s in video.render_seconds)
    )

    gymnasium_clip()


class _StepTimes(L.Callback):
    """When each training step ended (perf_counter seconds); stops the run once ``video`` wrote a clip."""

    def __init__(self, video: GridVideoLogger | None = None):
        self.video = video
        self.ends: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.ends.append(time.perf_counter())
        if self.video is not None and self.video.render_seconds:
            trainer.should_stop = True


def _fit(env_id: str, max_steps: int, video: GridVideoLogger | None) -> _StepTimes:
    steps = _StepTimes(video)
    trainer = L.Trainer(
        max_steps=max_steps,
        default_root_dir="/tmp/bench_video",
        callbacks=[steps] + ([video] if video is not None else []),
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    trainer.fit(PPOModule(env_id=env_id, env_backend="gymnasium", seed=1))
    return steps


def _avg_pool_shrink(frames: torch.Tensor, factor: int) -> torch.Tensor:
    """The shrink GridVideoLogger used before Pillow's box reduce."""
    pooled = torch.nn.functional.avg_pool2d(frames.permute(0, 3, 1, 2).float(), factor)
    return pooled.round().to(torch.uint8).permute(0, 2, 3, 1).contiguous()


def gymnasium_clip() -> None:
    env_id = "LunarLander-v3" if importlib.util.find_spec("Box2D") else "MountainCar-v0"
    module = PPOModule(env_id=env_id, env_backend="gymnasium", seed=1)
    envs = module.make_envs(16, 0, render=True)
    envs.reset()
    frames = envs.render()
    envs.close()
    factor = -(-max(frames.shape[1:3]) // 160)
    shrink_ms = {}
    shrinks = {"avg_pool2d": lambda: _avg_pool_shrink(frames, factor), "Pillow": lambda: _shrink(frames, 160)}
    for name, shrink in shrinks.items():
        shrink()
        start = time.perf_counter()
        for _ in range(10):
            shrink()
        shrink_ms[name] = (time.perf_counter() - start) * 100
    start = time.perf_counter()
    greedy_frames(module, 16, 500, seed=20_000, frame_stride=2)
    on_training_thread_s = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(10):
        _frozen_greedy_actor(module, threading.Event())
    snapshot_ms = (time.perf_counter() - start) * 100

    # One clip, due at the first step; PPO trains on while it plays and stops once it is written. The
    # same number of steps without videos gives the training loop's own pace.
    video = GridVideoLogger(every_n_train_steps=10**9)
    with_video = _fit(env_id, 100_000, video)
    without_video = _fit(env_id, len(with_video.ends), None)
    ends = torch.tensor(with_video.ends, dtype=torch.float64)
    clip_end = ends[0] + video.render_seconds[0]  # the clip started at the first step's end
    during = ends.diff()[ends[1:] <= clip_end]  # the steps that ended while it played
    baseline = torch.tensor(without_video.ends, dtype=torch.float64).diff()[: len(during)]
    print(
        f"{env_id}, 16 envs x 500 greedy steps rendered by gymnasium ({frames.shape[1]} x {frames.shape[2]}, "
        f"every 2nd step):"
    )
    print(
        f"  before: played on the training thread {on_training_thread_s:.2f} s per clip (shrinking the 16 frames "
        f"of a step: avg_pool2d {shrink_ms['avg_pool2d']:.1f} ms, Pillow {shrink_ms['Pillow']:.1f} ms, 250 per clip)"
    )
    print(
        f"  after: training loop {video.training_seconds[0] * 1000:.1f} ms for the run's first clip (it also builds "
        f"a one-env spec), {snapshot_ms:.2f} ms per later clip (copying the greedy policy); background thread "
        f"{video.render_seconds[0]:.2f} s (play + render + encode)"
    )
    # The thread shares the GIL with training: gymnasium's renderers are Python and pygame.
    print(
        f"  PPO steps while the clip played: {during.mean() * 1000:.2f} ms each over {len(during)} steps, "
        f"{baseline.mean() * 1000:.2f} ms without videos ({during.sum() - baseline.sum():.1f} s longer in all)"
    )


if __name__ == "__main__":
    main()
