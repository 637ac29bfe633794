import importlib.util
import io
import math
from collections import deque

import numpy as np
import pytest
import torch

from rl_lightning.data.frame_replay import FrameStackReplayBuffer, frame_stack_axis
from rl_lightning.data.replay import ReplayBuffer


class _FakeFrameStacks:
    """``num_envs`` envs stacking K frames along ``stack_axis`` (oldest first), padded with the first frame
    ("reset") or zeros ("zero") at an episode's start, with same-step auto-reset like a ``VectorEnv``.

    Every frame is unique and never all zero: its bytes 0-2 count frames made, byte 3 is the env + 1,
    bytes 4-5 the env's episode (from 1): a frame from another env, step or episode shows. Episodes last
    ``min_length..max_length`` steps and end terminated or truncated at random.
    """

    def __init__(self, num_envs, stack_size, frame_shape, stack_axis, padding, seed=0, min_length=1, max_length=8):
        self.num_envs, self.stack_size, self.frame_shape = num_envs, stack_size, frame_shape
        self.stack_axis, self.padding, self.lengths_between = stack_axis, padding, (min_length, max_length + 1)
        self.rng = np.random.default_rng(seed)
        self.frames_made = 0
        self.episodes = [0] * num_envs

    def _frame(self, env):
        self.frames_made += 1
        flat = ((np.arange(math.prod(self.frame_shape)) * 31 + self.frames_made * 7 + env) % 251 + 1).astype(np.uint8)
        flat[:3] = list(self.frames_made.to_bytes(3, "little"))
        flat[3] = env + 1
        flat[4:6] = list(self.episodes[env].to_bytes(2, "little"))
        return flat.reshape(self.frame_shape)

    def _start(self, env):
        self.episodes[env] += 1
        first = self._frame(env)
        pad = first if self.padding == "reset" else np.zeros_like(first)
        self.stacks[env] = deque([pad] * (self.stack_size - 1) + [first], maxlen=self.stack_size)
        self.lengths[env] = int(self.rng.integers(*self.lengths_between))
        self.steps[env] = 0

    def _obs(self):
        return torch.from_numpy(np.stack([np.stack(stack, axis=self.stack_axis) for stack in self.stacks]))

    def reset(self):
        self.stacks, self.lengths, self.steps = [None] * self.num_envs, [0] * self.num_envs, [0] * self.num_envs
        for env in range(self.num_envs):
            self._start(env)
        return self._obs()

    def step(self):
        """``(next_obs, actions, rewards, terminated, final_obs, dones)`` of one random step."""
        terminated = torch.zeros(self.num_envs, dtype=torch.bool)
        dones = torch.zeros(self.num_envs, dtype=torch.bool)
        for env in range(self.num_envs):
            self.stacks[env].append(self._frame(env))
            self.steps[env] += 1
            if self.steps[env] == self.lengths[env]:
                dones[env], terminated[env] = True, bool(self.rng.random() < 0.5)
        final_obs = self._obs()
        for env in np.flatnonzero(dones.numpy()):
            self._start(int(env))
        actions = torch.from_numpy(self.rng.integers(0, 4, self.num_envs))
        rewards = torch.from_numpy(self.rng.standard_normal(self.num_envs).astype(np.float32))
        return self._obs(), actions, rewards, terminated, final_obs, dones


def _frames_of(stacks, stack_axis):
    """``(batch, K, frame bytes)``: each stack's frames, oldest first."""
    return stacks.movedim(1 + stack_axis % (stacks.dim() - 1), 1).flatten(2)


def _assert_one_episode(sample, stack_axis, num_envs):
    """Every frame of obs and next_obs is padding or from the episode of obs's newest frame (next_obs
    too where the episode ended: its final frame, never the next episode's first)."""
    obs, next_obs = _frames_of(sample.obs, stack_axis), _frames_of(sample.next_obs, stack_axis)
    newest = obs[:, -1, 3:6].unsqueeze(1)  # env and episode of the transition
    assert bool((newest[:, 0, 0] >= 1).all()) and bool((newest[:, 0, 0] <= num_envs).all())
    for frames in (obs, next_obs):
        zero = (frames == 0).all(dim=2)
        assert bool(((frames[:, :, 3:6] == newest).all(dim=2) | zero).all())
    # next_obs is one step on: its frames [:-1] are obs's [1:], its newest is newer than obs's newest.
    assert torch.equal(next_obs[:, :-1], obs[:, 1:]) or sample.discounts is not None
    assert bool(
        (
            next_obs[:, -1, :3].long() @ torch.tensor([1, 256, 65536])
            > obs[:, -1, :3].long() @ torch.tensor([1, 256, 65536])
        ).all()
    )


def _assert_same_samples(frame_buffer, plain, batch_size):
    ours, theirs = frame_buffer.sample(batch_size), plain.sample(batch_size)
    for name in ("obs", "actions", "rewards", "terminated", "next_obs"):
        assert torch.equal(getattr(ours, name), getattr(theirs, name)), name
    assert (ours.discounts is None) == (theirs.discounts is None)
    if ours.discounts is not None:
        assert torch.equal(ours.discounts, theirs.discounts)
    return ours


def _buffers(obs_shape, num_envs, n_step, stack_axis, padding, buffer_size=40, seed=3):
    frame_buffer = FrameStackReplayBuffer(
        buffer_size, obs_shape, num_envs, seed=seed, n_step=n_step, gamma=0.9, stack_axis=stack_axis, padding=padding
    )
    plain = ReplayBuffer(buffer_size, obs_shape, num_envs, seed=seed, obs_dtype=torch.uint8, n_step=n_step, gamma=0.9)
    return frame_buffer, plain


def _play(envs, buffers, obs, num_adds, check=None, check_every=10):
    for add in range(num_adds):
        next_obs, actions, rewards, terminated, final_obs, dones = envs.step()
        for buffer in buffers:
            buffer.add(obs, actions, rewards, terminated, final_obs, dones)
        obs = next_obs
        if check is not None and add % check_every == check_every - 1:
            check()
    return obs


@pytest.mark.parametrize(
    ("num_envs", "frame_shape", "stack_axis", "env_padding", "buffer_padding", "n_step"),
    [
        (3, (6, 7), 0, "reset", "auto", 1),
        (3, (6, 7), 0, "reset", "reset", 3),
        (3, (6, 7), 0, "zero", "auto", 3),
        (3, (6, 7), 0, "zero", "zero", 1),
        (3, (6, 7), -1, "reset", "auto", 3),
        (2, (6, 7), -1, "zero", "auto", 1),
        (3, (5, 4, 3), 0, "reset", "auto", 3),
        (1, (6, 7), 0, "zero", "auto", 3),
    ],
)
def test_samples_are_the_stacks_the_envs_gave(num_envs, frame_shape, stack_axis, env_padding, buffer_padding, n_step):
    """Random episodes of 1..8 steps, terminated or truncated, every env ending at its own steps, the
    ring (40 slots) wrapped ~20 times: the samples equal a plain ReplayBuffer's field by field."""
    envs = _FakeFrameStacks(num_envs, 4, frame_shape, stack_axis, env_padding, seed=num_envs + n_step)
    obs_shape = tuple(envs.reset().shape[1:])
    frame_buffer, plain = _buffers(obs_shape, num_envs, n_step, stack_axis, buffer_padding)
    checked = []

    def check():
        sample = _assert_same_samples(frame_buffer, plain, 256)
        _assert_one_episode(sample, stack_axis, num_envs)
        checked.append(sample)

    _play(envs, [frame_buffer, plain], envs.reset(), 800 // num_envs, check)
    assert frame_buffer.padding == env_padding
    assert len(frame_buffer) == len(plain) == 40 and frame_buffer.pos == plain.pos
    assert len(checked) >= 26
    terminated = torch.cat([sample.terminated for sample in checked])
    assert 0.1 < terminated.float().mean() < 0.6  # terminated and truncated ends both sampled
    # Episodes average 4.5 steps: the ends store (6 frames at first) grew to hold them.
    assert len(frame_buffer._ends) > 6


def test_envs_reset_outside_step_start_new_episodes():
    """A resumed run's envs restart without a done (non-restorable envs): the last transitions keep
    their next_obs, the new stacks start episodes. (One step: an n-step chain of the plain buffer, and so
    of this one, would run on into the new episodes, as nothing marks their start.)"""
    envs = _FakeFrameStacks(3, 4, (6, 7), 0, "reset", seed=1, max_length=30)
    frame_buffer, plain = _buffers((4, 6, 7), 3, 1, 0, "auto", buffer_size=60)
    _play(envs, [frame_buffer, plain], envs.reset(), 25)
    _play(envs, [frame_buffer, plain], envs.reset(), 10)  # the last next_obs ended no episode: new ones start
    for _ in range(5):
        _assert_one_episode(_assert_same_samples(frame_buffer, plain, 256), 0, 3)


def test_state_dict_round_trip_continues_identically():
    envs = _FakeFrameStacks(3, 4, (6, 7), -1, "zero", seed=5)
    frame_buffer, plain = _buffers((6, 7, 4), 3, 3, -1, "auto")
    obs = _play(envs, [frame_buffer, plain], envs.reset(), 70)
    file = io.BytesIO()
    torch.save(frame_buffer.state_dict(), file)
    file.seek(0)
    restored = FrameStackReplayBuffer(40, (6, 7, 4), 3, seed=99, n_step=3, gamma=0.9, stack_axis=-1)
    restored.load_state_dict(torch.load(file, weights_only=True))
    assert restored.padding == "zero" and len(restored) == len(frame_buffer) and restored.pos == frame_buffer.pos

    def check():  # the restored buffer continues with the same adds and draws as the original
        restored_sample = _assert_same_samples(restored, plain, 128)
        original_sample = frame_buffer.sample(128)
        assert all(torch.equal(a, b) for a, b in zip(restored_sample[:5], original_sample[:5], strict=True))

    _play(envs, [frame_buffer, restored, plain], obs, 60, check)


def test_state_dict_of_an_empty_buffer():
    buffer = FrameStackReplayBuffer(10, (4, 5, 5), 2)
    other = FrameStackReplayBuffer(10, (4, 5, 5), 2)
    other.load_state_dict(buffer.state_dict())
    assert len(other) == 0
    with pytest.raises(ValueError, match="obs_shape"):
        FrameStackReplayBuffer(10, (4, 6, 6), 2).load_state_dict(buffer.state_dict())
    with pytest.raises(ValueError, match="not a FrameStackReplayBuffer"):
        other.load_state_dict(ReplayBuffer(10, (4, 5, 5), 2, obs_dtype=torch.uint8).state_dict())


def test_obs_that_does_not_continue_its_episode_is_refused():
    envs = _FakeFrameStacks(2, 4, (6, 7), 0, "reset", min_length=20, max_length=30)
    buffer = FrameStackReplayBuffer(20, (4, 6, 7), 2)
    obs = _play(envs, [buffer], envs.reset(), 3)
    _, actions, rewards, terminated, final_obs, dones = envs.step()
    mixed, mixed_final = obs.clone(), final_obs.clone()
    mixed[1], mixed_final[1] = obs[0], final_obs[0]  # env 1 given env 0's stacks: shifted, but not its own
    with pytest.raises(ValueError, match=r"env 1 at add 3 .*not the previous next_obs.*frame_replay=False"):
        buffer.add(mixed, actions, rewards, terminated, mixed_final, dones)
    assert len(buffer) == 6 and buffer.pos == 6
    buffer.add(obs, actions, rewards, terminated, final_obs, dones)  # the right stacks are still taken
    assert len(buffer) == 8


def test_a_start_padded_otherwise_than_said_is_refused():
    envs = _FakeFrameStacks(2, 4, (6, 7), 0, "zero", max_length=3)
    buffer = FrameStackReplayBuffer(20, (4, 6, 7), 2, padding="reset")
    with pytest.raises(ValueError, match=r"its episode ended at the previous add.*padded with its first frame"):
        _play(envs, [buffer], envs.reset(), 10)


def test_frame_stack_axis():
    uint8 = torch.uint8
    assert frame_stack_axis((4, 84, 84), uint8) == 0
    assert frame_stack_axis((84, 84, 4), uint8) == -1
    assert frame_stack_axis((4, 84, 84, 3), uint8) == 0 and frame_stack_axis((4, 84, 84, 1), np.uint8) == 0
    assert frame_stack_axis((2, 84, 84), uint8) == 0 and frame_stack_axis((84, 84, 16), uint8) == -1
    for shape in [(3, 84, 84), (84, 84, 3), (1, 84, 84), (84, 84, 1), (84, 84), (1, 84, 84, 3), (20, 30, 40), (7056,)]:
        assert frame_stack_axis(shape, uint8) is None, shape
    assert frame_stack_axis((4, 84, 84), torch.float32) is None
    assert frame_stack_axis({"image": (4, 84, 84)}, uint8) is None


def test_one_frame_per_transition():
    """1M Atari transitions of (4, 84, 84) uint8: ~6.7 GiB, against ReplayBuffer's ~53 GiB."""
    for shape, num_envs, axis in [((4, 84, 84), 1, 0), ((84, 84, 4), 8, -1), ((4, 10, 12, 3), 3, 0)]:
        buffer = FrameStackReplayBuffer(1000, shape, num_envs, stack_axis=axis)
        assert buffer.nbytes == FrameStackReplayBuffer.bytes_needed(1000, shape, num_envs, stack_axis=axis)
    gib = FrameStackReplayBuffer.bytes_needed(1_000_000, (4, 84, 84), 1) / 2**30
    assert 6.6 < gib < 6.8
    plain = ReplayBuffer(1000, (4, 84, 84), 1, obs_dtype=torch.uint8).bytes_per_transition
    assert plain == 2 * 4 * 84 * 84 + 8 + 4 + 1
    assert plain * 1_000_000 / 2**30 > 7.5 * gib
    per_transition = FrameStackReplayBuffer(1000, (4, 84, 84), 1).bytes_per_transition
    assert 84 * 84 + 23 <= per_transition < 1.03 * 84 * 84 + 23  # a frame, the fields, the reserve for episode ends


def test_sampling_errors():
    buffer = FrameStackReplayBuffer(20, (4, 6, 7), 2, n_step=3)
    with pytest.raises(RuntimeError, match="empty"):
        buffer.sample(4)
    envs = _FakeFrameStacks(2, 4, (6, 7), 0, "reset")
    _play(envs, [buffer], envs.reset(), 2)
    with pytest.raises(RuntimeError, match="n_step=3 needs more than 4"):
        buffer.sample(4)
    with pytest.raises(ValueError, match=r"obs_shape\[0\] \(the frames of a stack\) must be >= 2"):
        FrameStackReplayBuffer(20, (1, 6, 7), 2)


@pytest.mark.skipif(importlib.util.find_spec("cv2") is None, reason="gymnasium's AtariPreprocessing needs opencv (cv2)")
@pytest.mark.parametrize(("padding", "n_step"), [("reset", 1), ("zero", 3)])
def test_breakout_frame_stacks_sample_as_the_plain_buffer(padding, n_step):
    """gymnasium's AtariPreprocessing + FrameStackObservation(4) through the adapter: 2 envs, lives
    lost (terminated) and 40-step time limits (truncated), the 200-slot ring wrapped: the same samples."""
    pytest.importorskip("ale_py")
    from rl_lightning.envs.gym_adapter import GymnasiumVectorEnv

    wrappers = [
        {"class_path": "gymnasium.wrappers.AtariPreprocessing", "init_args": {"terminal_on_life_loss": True}},
        {
            "class_path": "gymnasium.wrappers.FrameStackObservation",
            "init_args": {"stack_size": 4, "padding_type": padding},
        },
    ]
    envs = GymnasiumVectorEnv("ALE/Breakout-v5", 2, seed=0, frameskip=1, max_episode_steps=160, wrappers=wrappers)
    try:
        assert envs.obs_shape == (4, 84, 84) and envs.obs_dtype == torch.uint8
        frame_buffer = FrameStackReplayBuffer.for_env(envs, 200, seed=7, n_step=n_step)
        plain = ReplayBuffer.for_env(envs, 200, seed=7, n_step=n_step)
        generator = torch.Generator().manual_seed(0)
        obs, _ = envs.reset()
        ended = {"terminated": 0, "truncated": 0}
        for step in range(300):
            actions = envs.random_actions(generator)
            next_obs, rewards, terminated, truncated, info = envs.step(actions)
            dones = terminated | truncated
            for buffer in (frame_buffer, plain):
                buffer.add(obs, actions, rewards, terminated, info["final_observation"], dones)
            ended["terminated"] += int(terminated.sum())
            ended["truncated"] += int((truncated & ~terminated).sum())
            obs = next_obs
            if step % 25 == 24:
                _assert_same_samples(frame_buffer, plain, 64)
        assert ended["terminated"] >= 2 and ended["truncated"] >= 2, ended
        assert frame_buffer.padding == padding and len(frame_buffer) == 200
        assert frame_buffer.nbytes < plain.nbytes / 6
    finally:
        envs.close()


@pytest.mark.parametrize("frame_shape", [(8, 8), (6, 7)])  # rows compared 8 bytes at a time, and byte by byte
def test_one_byte_off_is_refused(frame_shape):
    envs = _FakeFrameStacks(2, 4, frame_shape, 0, "reset", min_length=20, max_length=30)
    buffer = FrameStackReplayBuffer(20, (4, *frame_shape), 2)
    obs = _play(envs, [buffer], envs.reset(), 3)
    _, actions, rewards, terminated, final_obs, dones = envs.step()
    bad_obs, bad_final = obs.clone(), final_obs.clone()
    bad_obs[1, 0, -1, -1] += 1  # the oldest frame's last byte
    with pytest.raises(ValueError, match=r"env 1 at add 3 .*not the previous next_obs"):
        buffer.add(bad_obs, actions, rewards, terminated, final_obs, dones)
    bad_final[0, 2, 3, 1] += 1
    with pytest.raises(ValueError, match=r"env 0 at add 3 .*not obs shifted by one frame"):
        buffer.add(obs, actions, rewards, terminated, bad_final, dones)
    buffer.add(obs, actions, rewards, terminated, final_obs, dones)
    assert len(buffer) == 8


def test_the_accelerator_path_samples_the_same(monkeypatch):
    """On an accelerator the newest next frames are picked with torch.where (no host sync); here on CPU."""
    import rl_lightning.data.frame_replay as frame_replay

    envs = _FakeFrameStacks(3, 4, (6, 7), 0, "zero", seed=2)
    frame_buffer, plain = _buffers((4, 6, 7), 3, 3, 0, "auto")
    _play(envs, [frame_buffer, plain], envs.reset(), 50)
    monkeypatch.setattr(frame_replay, "_host_mask_is_free", lambda device: False)
    for _ in range(5):
        _assert_one_episode(_assert_same_samples(frame_buffer, plain, 256), 0, 3)
