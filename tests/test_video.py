import os

import imageio.v3 as iio
import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing import event_accumulator, plugin_event_accumulator
from torch.utils.tensorboard import SummaryWriter

from rl_lightning.envs import make_envs
from rl_lightning.video import (
    BLANK_COLOR,
    BORDER_COLOR,
    FLASH_RING_WIDTH,
    Mp4Encoder,
    encode_gif,
    encode_mp4,
    episode_end_flash,
    grid_frames,
    iter_grid_frames,
    video_summary,
    write_summary,
)

PINK = (255, 105, 180)
CELL_H, CELL_W, BORDER = 80, 120, 2  # CartPole's drawing, the default border


def _rollout(env_id: str, num_envs: int, num_steps: int, seed: int = 0):
    """Observations (num_envs, num_steps, *obs_shape) and dones (num_envs, num_steps) of random play."""
    env = make_envs(env_id, num_envs, seed=seed)
    obs, _ = env.reset()
    all_obs, all_dones = [], []
    generator = torch.Generator().manual_seed(seed)
    for _ in range(num_steps):
        all_obs.append(obs)
        actions = torch.randint(0, env.num_actions, (num_envs,), generator=generator)
        obs, _, terminated, truncated, _ = env.step(actions)
        all_dones.append(terminated | truncated)
    return env, torch.stack(all_obs, dim=1), torch.stack(all_dones, dim=1)


def _cell(frames: np.ndarray, index: int, cols: int = 4) -> np.ndarray:
    """The pixels of grid cell ``index`` (row-major) of CartPole-sized cells: (T, 80, 120, 3)."""
    top, left = (index // cols) * (CELL_H + BORDER), (index % cols) * (CELL_W + BORDER)
    return frames[:, top : top + CELL_H, left : left + CELL_W]


def _is_pink(pixels: np.ndarray) -> np.ndarray:
    return (pixels == PINK).all(axis=-1)


def test_grid_of_16_cartpoles_has_each_env_in_its_cell_and_borders_between():
    env, obs, _ = _rollout("CartPole-v1", 16, 6)
    no_dones = torch.zeros(16, 6, dtype=torch.bool)

    frames = grid_frames(obs, no_dones, env.draw)

    assert frames.dtype == np.uint8
    assert frames.shape == (6, 4 * 80 + 3 * 2, 4 * 120 + 3 * 2, 3) == (6, 326, 486, 3)
    drawings = env.draw(obs).numpy()
    for index in range(16):
        np.testing.assert_array_equal(_cell(frames, index), drawings[index])
    # Border lines between rows/columns (rows 80-81, cols 120-121, ...) are the border colour.
    assert (frames[:, 80:82] == BORDER_COLOR).all()
    assert (frames[:, :, 242:244] == BORDER_COLOR).all()


def test_fewer_envs_than_cells_leave_blank_cells_and_keep_the_frame_size():
    env, obs, dones = _rollout("CartPole-v1", 5, 4)

    frames = grid_frames(obs, dones, env.draw)

    assert frames.shape == (4, 326, 486, 3)
    np.testing.assert_array_equal(_cell(frames, 4), env.draw(obs[4]).numpy())
    for index in range(5, 16):
        assert (_cell(frames, index) == BLANK_COLOR).all()


def test_more_envs_than_cells_show_the_first_ones():
    env, obs, dones = _rollout("CartPole-v1", 6, 3)

    frames = grid_frames(obs, dones, env.draw, grid=(1, 2), border=0)

    assert frames.shape == (3, 80, 240, 3)
    np.testing.assert_array_equal(frames[:, :, 120:], env.draw(obs[1]).numpy())


def test_episode_end_flash_lasts_flash_frames_from_the_done_step_and_is_cut_at_the_end():
    dones = torch.zeros(2, 8, dtype=torch.bool)
    dones[0, 1] = dones[0, 3] = dones[1, 6] = True

    flash = episode_end_flash(dones, flash_frames=3)

    assert flash.int().tolist() == [[0, 1, 1, 1, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0, 1, 1]]
    assert not episode_end_flash(dones, flash_frames=0).any()


def test_cells_flash_pink_exactly_on_the_frames_after_their_episode_ended():
    env, obs, _ = _rollout("CartPole-v1", 16, 10)
    dones = torch.zeros(16, 10, dtype=torch.bool)
    dones[3, 4] = True  # cell 3 flashes on frames 4, 5, 6
    dones[9, 8] = True  # cell 9 flashes on frames 8, 9 (the video ends)

    frames = grid_frames(obs, dones, env.draw, flash_frames=3)

    flashing = {3: [4, 5, 6], 9: [8, 9]}
    for index in range(16):
        pink_frames = np.flatnonzero(_is_pink(_cell(frames, index)).any(axis=(1, 2))).tolist()
        assert pink_frames == flashing.get(index, []), f"cell {index}"
    # The flashing cell: its white background and an edge ring are pink, the cart and pole are not.
    drawing, flashed = env.draw(obs[3, 5]).numpy(), _cell(frames, 3)[5]
    white = (drawing == 255).all(axis=-1)
    ring = np.ones((CELL_H, CELL_W), dtype=bool)
    ring[FLASH_RING_WIDTH:-FLASH_RING_WIDTH, FLASH_RING_WIDTH:-FLASH_RING_WIDTH] = False
    np.testing.assert_array_equal(_is_pink(flashed), white | ring)
    np.testing.assert_array_equal(flashed[~(white | ring)], drawing[~(white | ring)])
    assert white.mean() > 0.8  # so the flash covers most of the cell
    # Borders never flash.
    assert (frames[:, 80:82] == BORDER_COLOR).all()


def test_flash_is_visible_on_drawings_without_white_background():
    env, obs, _ = _rollout("Probe1-v0", 2, 3)  # grey 32x32 squares
    dones = torch.tensor([[False, True, False], [False, False, False]])

    frames = grid_frames(obs, dones, env.draw, grid=(1, 2), flash_frames=1, border=2)

    assert frames.shape == (3, 32, 66, 3)
    pink = _is_pink(frames)
    assert pink[1, :, :32].sum() >= 32 * 32 - (32 - 2 * FLASH_RING_WIDTH) ** 2  # at least the ring
    assert pink.sum() == pink[1, :, :32].sum()


def test_iter_grid_frames_streams_the_same_frames_in_chunks():
    env, obs, dones = _rollout("Probe2-v0", 16, 40)  # 16 envs: 16 steps per draw call

    streamed = np.stack([frame.copy() for frame in iter_grid_frames(obs, dones, env.draw)])

    np.testing.assert_array_equal(streamed, grid_frames(obs, dones, env.draw))
    assert streamed.shape == (40, 4 * 32 + 3 * 2, 4 * 32 + 3 * 2, 3)


def test_grid_frames_rejects_mismatched_shapes_and_bad_grids():
    env, obs, dones = _rollout("CartPole-v1", 4, 3)
    with pytest.raises(ValueError, match="dones"):
        grid_frames(obs, dones[:, :2], env.draw)
    with pytest.raises(ValueError, match="grid"):
        grid_frames(obs, dones, env.draw, grid=(0, 4))


@pytest.fixture(scope="module")
def cartpole_video():
    env, obs, dones = _rollout("CartPole-v1", 16, 20, seed=1)
    return grid_frames(obs, dones, env.draw)


def test_mp4_decodes_to_every_frame_at_the_grid_size(cartpole_video):
    mp4 = encode_mp4(cartpole_video, fps=50)

    decoded = iio.imread(mp4, index=None, extension=".mp4")
    assert decoded.shape == (20, 326, 486, 3)
    assert len({frame.tobytes() for frame in decoded}) > 1
    # Lossy, but close: mean absolute error of a few grey levels.
    assert np.abs(decoded.astype(np.int16) - cartpole_video).mean() < 5


def test_mp4_pads_odd_sizes_to_even():
    frames = np.random.default_rng(0).integers(0, 256, (7, 33, 45, 3), dtype=np.uint8)

    decoded = iio.imread(encode_mp4(frames, fps=10), index=None, extension=".mp4")

    assert decoded.shape == (7, 34, 46, 3)


def test_the_mp4_encoder_takes_frames_one_at_a_time_and_leaves_nothing_behind():
    """Mp4Encoder: what encode_mp4 is built on, frames appended as they are made (the Hub's replay.mp4 and
    scripts/enjoy.py encode while they play); its temporary folder is gone after the block."""
    frames = np.random.default_rng(1).integers(0, 256, (6, 17, 24, 3), dtype=np.uint8)
    with Mp4Encoder(fps=10) as video:
        for frame in frames:
            video.append(frame)
        folder = video._tmp.name
    decoded = iio.imread(video.bytes, index=None, extension=".mp4")
    assert decoded.shape == (6, 18, 24, 3)
    assert not os.path.exists(folder)
    with pytest.raises(ValueError, match="no frames"), Mp4Encoder(fps=10):
        pass


def test_gif_is_lossless_looping_and_timed_by_fps(cartpole_video):
    gif = encode_gif(cartpole_video, fps=50)

    decoded = iio.imread(gif, index=None, extension=".gif")
    np.testing.assert_array_equal(decoded[..., :3], cartpole_video)
    meta = iio.immeta(gif, extension=".gif")
    assert meta["loop"] == 0
    assert meta["duration"] == 20


def test_gif_with_more_than_256_colours_still_has_every_frame():
    frames = np.random.default_rng(0).integers(0, 256, (5, 20, 24, 3), dtype=np.uint8)

    decoded = iio.imread(encode_gif(frames, fps=10), index=None, extension=".gif")

    assert decoded.shape[:3] == (5, 20, 24)


def test_encoders_reject_empty_and_non_rgb_frames():
    with pytest.raises(ValueError, match="no frames"):
        encode_gif([], fps=10)
    with pytest.raises(ValueError, match="uint8"):
        encode_mp4(np.zeros((3, 8, 8), dtype=np.float32), fps=10)


def test_video_summary_round_trips_through_a_tensorboard_event_file(tmp_path, cartpole_video):
    writer = SummaryWriter(log_dir=str(tmp_path))
    summary = video_summary("videos/rollout", cartpole_video, fps=50, caption="pink: episode ended")
    write_summary(writer, summary, step=7)
    writer.close()

    accumulator = event_accumulator.EventAccumulator(str(tmp_path), size_guidance={event_accumulator.IMAGES: 0})
    accumulator.Reload()
    assert accumulator.Tags()["images"] == ["videos/rollout"]
    (image,) = accumulator.Images("videos/rollout")
    assert (image.step, image.height, image.width) == (7, 326, 486)
    assert image.encoded_image_string.startswith(b"GIF89a")
    assert iio.imread(image.encoded_image_string, index=None, extension=".gif").shape[:3] == (20, 326, 486)
    # What TensorBoard's Images tab reads: the legacy image migrated to the image plugin,
    # with the caption as the card's description.
    plugin_accumulator = plugin_event_accumulator.EventAccumulator(str(tmp_path))
    plugin_accumulator.Reload()
    assert plugin_accumulator.PluginTagToContent("images").keys() == {"videos/rollout"}
    assert plugin_accumulator.SummaryMetadata("videos/rollout").summary_description == "pink: episode ended"
