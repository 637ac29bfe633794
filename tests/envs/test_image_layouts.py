"""Image observations of every usual shape (issue 32): frame stacks channels first or last,
stacks of RGB frames and grey frames stay uint8 through the adapter, rollouts and replay, and
are scaled to [0, 1] inside the network (and the exported policy)."""

from __future__ import annotations

import importlib.util
import re

import gymnasium as gym
import numpy as np
import pytest
import torch
from quiet_trainer import quiet_fit

from rl_lightning import DQNModule, PPOModule, VPGModule
from rl_lightning.envs import make_envs
from rl_lightning.envs.spaces import image_layout, is_image_leaf, leaf_space
from rl_lightning.nets import ImageEncoder, MultiInputEncoder

SHAPES = {"chw-stack": (4, 84, 84), "hwc-stack": (84, 84, 4), "rgb-stack": (2, 20, 20, 3), "grey": (20, 20)}


class _PixelEnv(gym.Env):
    """Random uint8 observations of ``shape``; two actions, reward 1 for action 1."""

    def __init__(self, shape: tuple[int, ...]):
        self.observation_space = gym.spaces.Box(0, 255, shape, np.uint8)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), float(action), False, False, {}


def _env_id(shape: tuple[int, ...]) -> str:
    env_id = f"rl_lightning_test/Pixels{'x'.join(map(str, shape))}-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=_PixelEnv, max_episode_steps=20, kwargs={"shape": shape})
    return env_id


def _record_image_inputs(module) -> list[tuple[str, torch.dtype, float]]:
    """Hooks on every ImageEncoder and its first Conv2d: what each got (dtype, largest value)."""
    seen: list[tuple[str, torch.dtype, float]] = []
    for encoder in (m for m in module.modules() if isinstance(m, ImageEncoder)):
        first_conv = next(m for m in encoder.modules() if isinstance(m, torch.nn.Conv2d))
        encoder.register_forward_pre_hook(lambda _, args: seen.append(("encoder", args[0].dtype, 0.0)))
        first_conv.register_forward_pre_hook(lambda _, args: seen.append(("conv", args[0].dtype, float(args[0].max()))))
    return seen


@pytest.mark.parametrize(
    ("shape", "dtype", "layout"),
    [
        ((4, 84, 84), np.uint8, "CHW"),
        ((84, 84, 4), np.uint8, "HWC"),
        ((2, 20, 20, 3), np.uint8, "KHWC"),
        ((20, 20), np.uint8, "HW"),
        ((36, 36, 3), np.uint8, "HWC"),  # ImageProbe5
        ((10, 10, 3), np.uint8, "HWC"),  # the structured probes' image key: small, 3 channels last
        ((3, 10, 10), np.uint8, "CHW"),
        ((16, 84, 84), np.uint8, "CHW"),
        ((84, 84, 1), np.uint8, "HWC"),
        ((128,), np.uint8, None),  # Atari RAM: a vector
        ((4, 84, 84), np.float32, "CHW"),  # float images: the CNN, unscaled
        ((8, 20, 8), np.float32, None),  # an ambiguous float array: a vector
        ((20, 20), np.float32, None),
    ],
)
def test_image_layout_is_decided_from_the_shape(shape, dtype, layout):
    space = gym.spaces.Box(0, 255, shape, dtype)
    assert image_layout(space) == layout
    assert is_image_leaf(space) == (layout is not None and dtype == np.uint8)


@pytest.mark.parametrize("shape", [(8, 20, 8), (20, 30, 40), (4, 10, 10), (2, 20, 20, 4)])
def test_an_ambiguous_uint8_shape_is_a_value_error_naming_it_and_what_to_pass(shape):
    with pytest.raises(ValueError, match=rf"shape {re.escape(str(shape))}.*DtypeObservation"):
        image_layout(gym.spaces.Box(0, 255, shape, np.uint8))
    with pytest.raises(ValueError, match=rf"{re.escape(_env_id(shape))}.*shape {re.escape(str(shape))}"):
        make_envs(_env_id(shape), 2, seed=0, backend="gymnasium")
    with pytest.raises(ValueError, match=r"layout="):
        ImageEncoder(shape)
    assert ImageEncoder((8, 20, 8), layout="CHW").conv_shape == (8, 20, 8)


def test_the_cnn_folds_every_layout_into_channels_first_frame_by_frame():
    torch.manual_seed(0)
    channels_first = ImageEncoder((6, 20, 20), layout="CHW")
    pixels = torch.randint(0, 256, (3, 6, 20, 20), dtype=torch.uint8)
    expected = channels_first(pixels)
    stacked = ImageEncoder((2, 20, 20, 3))  # frame k's channel c is channel 3 * k + c
    channels_last = ImageEncoder((20, 20, 6), layout="HWC")
    for encoder in (stacked, channels_last):
        encoder.load_state_dict(channels_first.state_dict())
    torch.testing.assert_close(stacked(pixels.unflatten(1, (2, 3)).permute(0, 1, 3, 4, 2)), expected)
    torch.testing.assert_close(channels_last(pixels.permute(0, 2, 3, 1)), expected)
    torch.testing.assert_close(channels_first(pixels), channels_first(pixels.float() / 255))


def test_a_dict_observation_s_frame_stack_key_is_an_image_and_an_ambiguous_one_names_its_key():
    frames = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    assert leaf_space("frames", frames) is frames
    encoder = MultiInputEncoder(gym.spaces.Dict({"frames": frames, "speed": gym.spaces.Box(-1, 1, (2,))}))
    assert encoder.encoders["frames"].layout == "CHW" and encoder.encoders["frames"].convs[0].in_channels == 4
    with pytest.raises(ValueError, match=r"'frames'.*shape \(8, 20, 8\)"):
        leaf_space("frames", gym.spaces.Box(0, 255, (8, 20, 8), np.uint8))


@pytest.mark.parametrize("shape", list(SHAPES.values()), ids=list(SHAPES))
def test_frame_stacks_stay_uint8_through_the_adapter_and_draw_as_rgb(shape):
    envs = make_envs(_env_id(shape), 2, seed=0, backend="gymnasium")
    assert envs.obs_dtype == torch.uint8 and envs.obs_shape == shape
    obs, _ = envs.reset()
    next_obs, *_ = envs.step(torch.tensor([0, 1]))
    assert obs.dtype == next_obs.dtype == torch.uint8 and tuple(obs.shape) == (2, *shape)
    assert int(obs.max()) > 1  # raw 0-255 pixels: nothing scaled them on the way
    height, width = (84, 84) if 84 in shape else (20, 20)
    assert envs.can_draw and envs.draw(obs).shape == (2, height, width, 3)
    envs.close()


def test_draw_shows_the_newest_frame_of_a_stack():
    envs = make_envs(_env_id((4, 84, 84)), 1, seed=0, backend="gymnasium")
    obs, _ = envs.reset()
    frames = envs.draw(obs)
    assert torch.equal(frames[0, :, :, 0], obs[0, -1]) and torch.equal(frames[..., 0], frames[..., 2])
    envs.close()
    envs = make_envs(_env_id((2, 20, 20, 3)), 1, seed=0, backend="gymnasium")
    obs, _ = envs.reset()
    assert torch.equal(envs.draw(obs)[0], obs[0, -1])
    envs.close()


@pytest.mark.parametrize("shape", list(SHAPES.values()), ids=list(SHAPES))
def test_the_network_gets_uint8_and_its_first_convolution_sees_unit_range_values(shape):
    module = VPGModule(env_id=_env_id(shape), num_envs=2, num_steps_per_rollout=2, seed=0)
    assert module.obs_dtype == torch.uint8
    seen = _record_image_inputs(module)
    quiet_fit(module, max_steps=1)
    assert module.source.collection.rollout.obs.dtype == torch.uint8
    encoder_dtypes = {dtype for where, dtype, _ in seen if where == "encoder"}
    conv_inputs = [(dtype, largest) for where, dtype, largest in seen if where == "conv"]
    assert encoder_dtypes == {torch.uint8} and conv_inputs
    assert all(dtype == torch.float32 and largest <= 1.0 for dtype, largest in conv_inputs)
    assert max(largest for _, largest in conv_inputs) > 0.5  # scaled, not zeroed


def test_ppo_trains_one_step_on_the_issues_frame_stack():
    module = PPOModule(
        env_id=_env_id((4, 84, 84)), num_envs=2, num_steps_per_rollout=4, num_minibatches=2, update_epochs=1
    )
    conv = module.model.actor.encoder.convs[0]
    assert (conv.in_channels, conv.kernel_size) == (4, (8, 8))  # Nature-DQN CNN over the 4 frames
    seen = _record_image_inputs(module)
    quiet_fit(module, max_steps=1)
    assert module.source.collection.rollout.obs.dtype == torch.uint8
    assert all(largest <= 1.0 for where, _, largest in seen if where == "conv")


@pytest.mark.parametrize("shape", [(4, 84, 84), (2, 20, 20, 3)], ids=["chw-stack", "rgb-stack"])
def test_dqn_replay_stores_frame_stacks_as_uint8(shape):
    settings = dict(
        env_id=_env_id(shape), num_envs=2, buffer_size=16, batch_size=4, learning_starts=4, steps_per_epoch=2
    )
    # This env's "stacks" are random pixels, not frames shifting by one per step: the frame-once buffer (the default
    # for a frame-stack shape) refuses them at the first add rather than storing them wrong.
    with pytest.raises(ValueError, match=r"env 0 at add 0 .*not obs shifted by one frame.*frame_replay=False"):
        quiet_fit(DQNModule(**settings, seed=0), max_steps=2)
    module = DQNModule(**settings, seed=0, frame_replay=False)
    quiet_fit(module, max_steps=2)
    buffer = module.source.buffer
    assert len(buffer) > 0
    assert buffer.obs.dtype == buffer.next_obs.dtype == torch.uint8 and tuple(buffer.obs.shape[-len(shape) :]) == shape


def test_the_exported_policy_takes_uint8_and_scales_inside(tmp_path):
    module = PPOModule(env_id=_env_id((4, 20, 20)), num_envs=2, num_steps_per_rollout=4, seed=0)
    path = module.export_policy(tmp_path / "x.pt2")
    policy = torch.export.load(str(path)).module()
    obs = torch.randint(0, 256, (6, 4, 20, 20), dtype=torch.uint8)
    assert torch.equal(policy(obs), module.act(obs, greedy=True))


def _fit_recording(module) -> list[tuple[str, torch.dtype, float]]:
    """What the image encoders and their first convolutions got during one training step."""
    seen = _record_image_inputs(module)
    quiet_fit(module, max_steps=1)
    return seen


def test_ppo_on_grey_breakout_frame_stacks_through_the_adapter():
    """ALE/Breakout-v5 grey (210, 160) frames stacked by gymnasium's FrameStackObservation: (4, 210, 160) uint8."""
    pytest.importorskip("ale_py")
    wrappers = [{"class_path": "gymnasium.wrappers.FrameStackObservation", "init_args": {"stack_size": 4}}]
    module = PPOModule(
        env_id="ALE/Breakout-v5",
        env_kwargs={"obs_type": "grayscale", "wrappers": wrappers},
        num_envs=2,
        num_steps_per_rollout=8,
        num_minibatches=2,
        update_epochs=1,
    )
    assert module.obs_shape == (4, 210, 160) and module.obs_dtype == torch.uint8
    seen = _fit_recording(module)
    assert module.source.collection.rollout.obs.dtype == torch.uint8
    assert seen and all(largest <= 1.0 for where, _, largest in seen if where == "conv")


@pytest.mark.skipif(importlib.util.find_spec("cv2") is None, reason="gymnasium's AtariPreprocessing needs opencv (cv2)")
def test_ppo_on_the_atari_preprocessing_pipeline():
    """AtariPreprocessing (84 x 84 grey) + FrameStackObservation(4): the issue's (4, 84, 84) uint8 frames."""
    pytest.importorskip("ale_py")
    wrappers = [
        {"class_path": "gymnasium.wrappers.AtariPreprocessing", "init_args": {}},
        {"class_path": "gymnasium.wrappers.FrameStackObservation", "init_args": {"stack_size": 4}},
    ]
    module = PPOModule(
        env_id="ALE/Breakout-v5",
        env_kwargs={"frameskip": 1, "wrappers": wrappers},
        num_envs=2,
        num_steps_per_rollout=8,
    )
    assert module.obs_shape == (4, 84, 84) and module.obs_dtype == torch.uint8
    seen = _fit_recording(module)
    assert module.source.collection.rollout.obs.dtype == torch.uint8
    assert seen and all(largest <= 1.0 for where, _, largest in seen if where == "conv")
