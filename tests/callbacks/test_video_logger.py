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


def test_video_logger_captions_a_rollout_clip_with_its_first_episodes_mean_return(video_run):
    _, logger = video_run
    events = EventAccumulator(logger.log_dir, size_guidance={"tensors": 0})
    events.Reload()
    captions = [event.tensor_proto.string_val[0].decode() for event in events.Tensors("videos/caption/text_summary")]
    assert [caption.split(":")[0] for caption in captions] == ["env steps 960", "env steps 1,920"]
    assert all(caption.split(": ")[1].startswith("rollout, mean first-episode return ") for caption in captions)


def test_mean_first_episode_length_counts_up_to_the_first_end_or_the_whole_clip():
    import torch

    from rl_lightning.callbacks.video import _mean_first_episode_length

    dones = torch.tensor([[False, True, False, True], [False, False, False, False], [True, False, False, False]])
    assert _mean_first_episode_length(dones) == pytest.approx((2 + 4 + 1) / 3)  # float32


def test_the_env_is_built_once_per_fit_for_its_fps_and_drawing(tmp_path, monkeypatch):
    built = []
    make_envs = VPGModule.make_envs

    def counting_make_envs(self, num_envs, seed, render=False):
        built.append(num_envs)
        return make_envs(self, num_envs, seed, render)

    monkeypatch.setattr(VPGModule, "make_envs", counting_make_envs)
    video = GridVideoLogger(every_n_env_steps=1, num_steps=5)
    L.Trainer(
        max_steps=3, default_root_dir=tmp_path, callbacks=[video], enable_progress_bar=False, enable_checkpointing=False
    ).fit(VPGModule(num_envs=4, num_steps_per_rollout=5))
    video.wait()
    assert len(video.video_paths) == 3 and built == [4, 1]  # the training envs, then one spec for all videos


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
    import threading

    from rl_lightning import SACModule
    from rl_lightning.envs.gym_adapter import GymnasiumVectorEnv

    class FatalError(Exception):  # stands for mujoco.FatalError
        pass

    calls = []

    def failing_render(self):
        calls.append(threading.get_ident())
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
    assert calls[0] != threading.get_ident()  # tried in the background, warned about on the training thread


# -- gymnasium clips, played in the background ---------------------------------------------------


def _mountain_car(**kwargs):
    return VPGModule(env_id="MountainCar-v0", env_backend="gymnasium", num_envs=2, num_steps_per_rollout=4, **kwargs)


def _trainer(tmp_path, callbacks, max_steps):
    return L.Trainer(
        max_steps=max_steps,
        default_root_dir=tmp_path,
        callbacks=callbacks,
        enable_progress_bar=False,
        enable_checkpointing=False,
    )


class _ChangeWeightsOnce(L.Callback):
    """Right after the video logger took its copy (it comes first in the callbacks): keep the
    weights the copy was taken from, change them so that the greedy action is always the last
    one, then let the clip play."""

    def __init__(self, changed):
        self.changed = changed
        self.weights_of_the_copy = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        import copy

        import torch

        if self.weights_of_the_copy is None:
            self.weights_of_the_copy = copy.deepcopy(pl_module.state_dict())
            logits = [layer for layer in pl_module.modules() if isinstance(layer, torch.nn.Linear)][-1]
            with torch.no_grad():
                logits.weight.zero_()
                logits.bias.copy_(torch.arange(logits.bias.numel(), dtype=torch.float32) * 100)
            self.changed.set()


def test_a_gymnasium_clip_is_played_in_the_background_by_a_frozen_copy_of_the_policy(tmp_path, monkeypatch):
    """Training pays only for the copy: the clip's env is built, stepped and rendered on the video
    thread, with the weights of when the clip was due (not those changed right after), and the
    video is there when fit returns."""
    import threading

    import torch

    from rl_lightning.callbacks.video import greedy_frames
    from rl_lightning.envs.gym_adapter import GymnasiumVectorEnv

    changed = threading.Event()
    render, step = GymnasiumVectorEnv.render, GymnasiumVectorEnv.step
    render_threads, clip_actions, waited_for_the_change = [], [], []

    def recording_render(self):
        if not render_threads:  # the first frame waits until the weights have changed
            waited_for_the_change.append(changed.wait(timeout=30))
        render_threads.append(threading.get_ident())
        return render(self)

    def recording_step(self, actions):
        if self.can_render:  # the clip's env, not the training envs
            clip_actions.append(actions.clone())
        return step(self, actions)

    monkeypatch.setattr(GymnasiumVectorEnv, "render", recording_render)
    monkeypatch.setattr(GymnasiumVectorEnv, "step", recording_step)
    video = GridVideoLogger(every_n_env_steps=10**9, num_steps=6, frame_stride=2)
    change = _ChangeWeightsOnce(changed)
    module = _mountain_car(seed=0)
    _trainer(tmp_path, [video, change], max_steps=2).fit(module)

    assert waited_for_the_change == [True]
    assert len(render_threads) == 3 and threading.get_ident() not in render_threads
    assert [path.name for path in video.video_paths] == ["step_8.mp4"] and video.video_paths[0].is_file()
    assert len(video.training_seconds) == len(video.render_seconds) == 1
    played = torch.stack(clip_actions)
    # The same clip played again by the module with the copied weights, then with its own.
    clip_actions.clear()
    changed_weights = {name: tensor.clone() for name, tensor in module.state_dict().items()}
    module.load_state_dict(change.weights_of_the_copy)
    greedy_frames(module, 16, 6, video.seed, 2)
    assert torch.equal(torch.stack(clip_actions), played)
    clip_actions.clear()
    module.load_state_dict(changed_weights)
    greedy_frames(module, 16, 6, video.seed, 2)
    assert (torch.stack(clip_actions) == 2).all() and not (played == 2).all()


def test_a_gymnasium_clip_due_while_the_last_one_is_rendering_is_skipped(tmp_path, monkeypatch):
    import threading

    from rl_lightning.envs.gym_adapter import GymnasiumVectorEnv

    released = threading.Event()
    render = GymnasiumVectorEnv.render

    def slow_render(self):
        released.wait(timeout=30)
        return render(self)

    class ReleaseAtTheEnd(L.Callback):  # before the video logger, which waits for its clip
        def on_train_end(self, trainer, pl_module):
            released.set()

    monkeypatch.setattr(GymnasiumVectorEnv, "render", slow_render)
    video = GridVideoLogger(every_n_env_steps=1, num_steps=4)
    _trainer(tmp_path, [ReleaseAtTheEnd(), video], max_steps=3).fit(_mountain_car())
    # Due after every rollout (8 env steps): one clip in flight at a time, the others skipped.
    assert [path.name for path in video.video_paths] == ["step_8.mp4"]
    assert video.skipped_env_steps == [16, 24] and len(video.training_seconds) == 1


def test_an_error_in_training_cancels_the_clip_being_played(tmp_path, monkeypatch):
    import threading
    import time

    from rl_lightning.envs.gym_adapter import GymnasiumVectorEnv

    render = GymnasiumVectorEnv.render
    renders = []

    def slow_render(self):
        renders.append(1)
        time.sleep(0.02)  # a whole clip: 100 frames, 2 s
        return render(self)

    class Crash(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_step == 2:
                raise RuntimeError("crash")

    monkeypatch.setattr(GymnasiumVectorEnv, "render", slow_render)
    video = GridVideoLogger(every_n_env_steps=10**9, num_steps=200)
    with pytest.raises(RuntimeError, match="crash"):
        _trainer(tmp_path, [video, Crash()], max_steps=5).fit(_mountain_car())
    # Stopped at its next step, nothing written, and no video thread left running.
    assert 0 < len(renders) < 50 and video.video_paths == []
    assert not [thread for thread in threading.enumerate() if thread.name.startswith("grid-video")]


@pytest.mark.parametrize("recurrent", [None, "gru"])
def test_the_frozen_copy_plays_the_clip_the_module_plays(recurrent):
    """A recurrent policy's copy carries its state from step to step, zeroed at episode starts, as
    the module's greedy actor does (a copy that never zeroed it plays another clip)."""
    import threading

    import torch

    from rl_lightning import PPOModule
    from rl_lightning.callbacks.video import _frozen_greedy_actor, greedy_frames

    module = PPOModule(
        env_id="MountainCar-v0", env_backend="gymnasium", num_envs=4, num_minibatches=2, recurrent=recurrent, seed=3
    )
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # weights of unit scale: the fresh ones' greedy action is always the same
        for parameter in module.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator))
    actor = _frozen_greedy_actor(module, threading.Event())
    if actor is None:
        pytest.skip("this PPOModule has no standalone recurrent greedy policy: it is filmed on the training thread")
    frames, dones = greedy_frames(module, 4, 250, seed=1, frame_stride=5, actor=actor)
    own_frames, own_dones = greedy_frames(module, 4, 250, seed=1, frame_stride=5)
    assert dones.any()  # MountainCar truncates at 200 steps: the state is reset mid-clip
    assert torch.equal(dones, own_dones) and torch.equal(frames, own_frames)
    if recurrent is not None:  # the clip tells the state's resets apart
        fresh = _frozen_greedy_actor(module, threading.Event())
        never_reset = greedy_frames(module, 4, 250, 1, 5, actor=lambda obs, start: fresh(obs, torch.zeros_like(start)))
        assert not torch.equal(never_reset[0], frames)


def test_shrink_is_a_box_average_that_drops_partial_blocks():
    import torch

    from rl_lightning.callbacks.video import _shrink

    frames = torch.randint(0, 256, (2, 10, 13, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    shrunk = _shrink(frames, max_side=5)  # factor ceil(13 / 5) = 3
    reference = torch.nn.functional.avg_pool2d(frames.permute(0, 3, 1, 2).float(), 3).permute(0, 2, 3, 1)
    assert shrunk.shape == (2, 3, 4, 3) and shrunk.dtype == torch.uint8
    assert (shrunk.float() - reference).abs().max() < 1  # the mean rounded up or down
    assert _shrink(frames, max_side=13) is frames


def test_a_module_without_a_standalone_greedy_policy_plays_its_clip_on_the_training_thread(tmp_path, monkeypatch):
    import threading

    from rl_lightning.envs.gym_adapter import GymnasiumVectorEnv

    render = GymnasiumVectorEnv.render
    render_threads = []

    def recording_render(self):
        render_threads.append(threading.get_ident())
        return render(self)

    def no_greedy_policy(self):
        raise NotImplementedError

    monkeypatch.setattr(GymnasiumVectorEnv, "render", recording_render)
    monkeypatch.setattr(VPGModule, "greedy_policy", no_greedy_policy)
    video = GridVideoLogger(every_n_env_steps=10**9, num_steps=4)
    _trainer(tmp_path, [video], max_steps=1).fit(_mountain_car())
    assert render_threads == [threading.get_ident()] * 2 and video.video_paths[0].is_file()
