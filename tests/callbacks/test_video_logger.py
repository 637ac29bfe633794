import imageio.v3 as iio
import lightning as L
import numpy as np
import pytest
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rl_lightning import VPGModule
from rl_lightning.callbacks.video import GridVideoLogger


@pytest.fixture(scope="module")
def video_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("video")
    video = GridVideoLogger(every_n_env_steps=1000, num_steps=40)
    logger = TensorBoardLogger(root, name="run")
    trainer = L.Trainer(
        max_steps=2,
        logger=logger,
        callbacks=[video],
        enable_progress_bar=False,
        enable_checkpointing=False,
    )
    trainer.fit(VPGModule(num_envs=16, num_steps_per_rollout=60, seed=0))
    return video, logger


def test_video_logger_writes_decodable_grid_mp4(video_run):
    video, logger = video_run
    # Due at env step 0 and again once 1000 more steps passed: after rollouts 1 (960) and 2 (1920).
    assert [path.name for path in video.video_paths] == ["step_960.mp4", "step_1920.mp4"]
    assert all(path.parent.name == "videos" and str(path).startswith(logger.log_dir) for path in video.video_paths)
    frames = iio.imread(video.video_paths[0])
    # 4 x 4 cells of 80 x 120 with 2-pixel borders: 326 x 486, already even.
    # 40 env steps drawn every second step (frame_stride=2): 20 frames.
    assert frames.shape == (20, 326, 486, 3)
    assert len({frame.tobytes() for frame in frames}) > 1


def test_video_logger_flashes_where_an_env_reset(video_run):
    video, _ = video_run
    frames = iio.imread(video.video_paths[0]).astype(np.int16)
    pink = np.array([255, 105, 180])
    # The top-left 3x3 pixels of a cell are background unless the cell flashes.
    corner_is_pink = [np.abs(frame[0:3, 0:3] - pink).max() < 40 for frame in frames]
    assert any(corner_is_pink) and not all(corner_is_pink)


def test_video_logger_adds_animated_image_summary(video_run):
    _, logger = video_run
    events = EventAccumulator(logger.log_dir, size_guidance={"images": 0})
    events.Reload()
    images = events.Images("videos/grid")
    assert [image.step for image in images] == [960, 1920]
    assert images[0].encoded_image_string[:6] == b"GIF89a"
    assert (images[0].width, images[0].height) == (486, 326)


def test_video_logger_records_its_costs(video_run):
    video, _ = video_run
    # One entry per video for each side (timings are reported by benchmarks/bench_video.py).
    assert len(video.render_seconds) == len(video.training_seconds) == 2


def test_failed_encode_is_a_warning_not_a_crash(tmp_path, monkeypatch):
    import rl_lightning.callbacks.video as video_module

    def broken(*args, **kwargs):
        raise RuntimeError("no encoder")

    monkeypatch.setattr(video_module, "encode_mp4", broken)
    video = GridVideoLogger(every_n_env_steps=1, num_steps=5)
    trainer = L.Trainer(
        max_steps=1, default_root_dir=tmp_path, callbacks=[video], enable_progress_bar=False, enable_checkpointing=False
    )
    with pytest.warns(UserWarning, match="no encoder"):
        trainer.fit(VPGModule(num_envs=4, num_steps_per_rollout=5))
    assert trainer.global_step == 1
    assert video.video_paths == []


def test_every_kth_step_keeps_flashes_of_skipped_steps():
    import torch

    from rl_lightning.callbacks.video import _every_kth_step

    obs = torch.arange(2 * 7, dtype=torch.float32).view(2, 7, 1)
    dones = torch.zeros(2, 7, dtype=torch.bool)
    dones[0, 1] = dones[1, 6] = True  # step 1 is skipped by stride 2; step 6 is kept
    kept_obs, kept_dones = _every_kth_step(obs, dones, 2)
    assert kept_obs[:, :, 0].tolist() == [[0, 2, 4, 6], [7, 9, 11, 13]]
    assert kept_dones.tolist() == [[True, False, False, False], [False, False, False, True]]


def test_greedy_clip_for_modules_without_a_rollout(tmp_path):
    from rl_lightning.callbacks.video import greedy_rollout

    module = VPGModule(num_envs=4, num_steps_per_rollout=5)
    obs, dones = greedy_rollout(module, num_envs=16, num_steps=200, seed=0)
    assert obs.shape == (16, 200, 4) and dones.shape == (16, 200)
    assert dones.any()  # an untrained greedy policy drops the pole within 200 steps


def test_a_gymnasium_env_that_cannot_draw_is_filmed_through_its_own_renderer(tmp_path):
    """MountainCar-v0 through the adapter (float observations, no `draw`): the clip is a greedy
    rollout of envs built with render_mode="rgb_array", frames shrunk to at most 160 px a side."""
    video = GridVideoLogger(every_n_env_steps=10**9, num_steps=6, frame_stride=2)
    trainer = L.Trainer(
        max_steps=1, default_root_dir=tmp_path, callbacks=[video], enable_progress_bar=False, enable_checkpointing=False
    )
    module = VPGModule(env_id="MountainCar-v0", env_backend="gymnasium", num_envs=2, num_steps_per_rollout=4)
    trainer.fit(module)
    video.wait()
    frames = iio.imread(video.video_paths[0])
    # gymnasium draws 400 x 600; shrunk by 4 to 100 x 150 per cell, 4 x 4 cells with borders
    assert frames.shape == (3, 4 * 100 + 6, 4 * 150 + 6, 3)


def test_an_env_that_can_neither_draw_nor_render_warns_once_and_training_goes_on(tmp_path):
    import gymnasium as gym

    class Blind(gym.Env):
        observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def reset(self, seed=None, options=None):
            super().reset(seed=seed)
            return np.zeros(2, np.float32), {}

        def step(self, action):
            return np.zeros(2, np.float32), 1.0, False, False, {}

    gym.register("_TestBlind-v0", entry_point=Blind, max_episode_steps=3)
    try:
        video = GridVideoLogger(every_n_env_steps=1, num_steps=3)
        trainer = L.Trainer(
            max_steps=3,
            default_root_dir=tmp_path,
            callbacks=[video],
            enable_progress_bar=False,
            enable_checkpointing=False,
        )
        with pytest.warns(UserWarning, match="can neither draw its observations nor render") as record:
            trainer.fit(VPGModule(env_id="_TestBlind-v0", num_envs=2, num_steps_per_rollout=3))
        assert sum("GridVideoLogger" in str(warning.message) for warning in record) == 1
        assert trainer.global_step == 3 and video.video_paths == []
    finally:
        del gym.registry["_TestBlind-v0"]


def test_a_renderer_that_fails_its_own_way_warns_once_and_stops_trying(tmp_path, monkeypatch):
    """A renderer raising its own error (MuJoCo without an OpenGL platform raises mujoco.FatalError): one
    warning naming the error and the remedy, no crash, and no second attempt (building envs to fail again)."""
    from rl_lightning import SACModule
    from rl_lightning.envs.gym_adapter import GymnasiumVectorEnv

    class FatalError(Exception):  # stands for mujoco.FatalError
        pass

    calls = []

    def failing_render(self):
        calls.append(1)
        raise FatalError("an OpenGL platform library has not been loaded into this process")

    monkeypatch.setattr(GymnasiumVectorEnv, "render", failing_render)
    video = GridVideoLogger(every_n_env_steps=1, num_steps=3)
    trainer = L.Trainer(
        max_steps=4, default_root_dir=tmp_path, callbacks=[video], enable_progress_bar=False, enable_checkpointing=False
    )
    module = SACModule(env_backend="gymnasium", buffer_size=100, batch_size=8, learning_starts=8, hidden_sizes=(8,))
    with pytest.warns(UserWarning, match=r"failed to render: FatalError.*MUJOCO_GL=egl") as record:
        trainer.fit(module)
    assert sum("GridVideoLogger" in str(warning.message) for warning in record) == 1
    assert trainer.global_step == 4 and video.video_paths == [] and len(calls) == 1
