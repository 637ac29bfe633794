"""What a grid video costs: the training loop's share and the background thread's, per stage.

    python benchmarks/bench_video.py

Renders the first 16 envs of a 500-step CartPole rollout as GridVideoLogger does (every second
step, 4x4 grid, flashes), one CPU thread.
"""

from __future__ import annotations

import time

import lightning as L
import torch

from rl_lightning import VPGModule
from rl_lightning.callbacks import GridVideoLogger
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


if __name__ == "__main__":
    main()
