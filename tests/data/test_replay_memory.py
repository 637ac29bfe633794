"""Which replay buffer a run gets, what it costs in bytes (stated before allocating), and the refusal of one that
does not fit in the device's memory; the frame-once buffer's samples equal the plain buffer's on the Atari preset."""

import math
import os

import pytest
import torch
from quiet_trainer import quiet_fit

from rl_lightning import DQNModule
from rl_lightning.data import replay
from rl_lightning.data.frame_replay import FrameStackReplayBuffer
from rl_lightning.data.replay import ReplayBuffer, check_fits_in_memory, format_bytes, make_replay_buffer
from rl_lightning.envs import make_envs


@pytest.mark.parametrize(
    ("obs_shape", "obs_dtype", "action_shape", "n_step"),
    [
        ((4,), torch.float32, (), 1),
        ((4, 84, 84), torch.uint8, (), 3),
        ((3,), torch.float32, (2,), 1),
        ({"a": (3,), "b": (2, 5, 5)}, {"a": torch.float32, "b": torch.uint8}, (), 2),
    ],
)
def test_bytes_needed_is_what_the_buffer_allocates(obs_shape, obs_dtype, action_shape, n_step):
    buffer = ReplayBuffer(64, obs_shape, 2, action_shape=action_shape, obs_dtype=obs_dtype, n_step=n_step)
    assert ReplayBuffer.bytes_needed(64, obs_shape, 2, action_shape, obs_dtype, n_step) == buffer.nbytes


def test_a_million_atari_transitions_frame_once_vs_whole():
    frames = FrameStackReplayBuffer.bytes_needed(1_000_000, (4, 84, 84), 1)
    whole = ReplayBuffer.bytes_needed(1_000_000, (4, 84, 84), 1, (), torch.uint8)
    assert 6.5 * 2**30 < frames < 7.0 * 2**30  # the "about 7 GiB" (SB3: ~28 GiB optimised, ~56 GiB)
    assert 52 * 2**30 < whole < 54 * 2**30
    assert format_bytes(frames) == f"{frames / 2**30:.2f} GiB" and format_bytes(2048) == "2,048 bytes"


def _resident_bytes() -> int:
    with open("/proc/self/statm") as file:
        return int(file.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads the resident set from /proc (Linux)")
@pytest.mark.parametrize("frame_once", [True, False])
def test_a_cpu_buffer_takes_memory_as_it_fills_not_at_allocation(frame_once):
    """A 1M-transition Atari buffer must not hold its ~7 GiB resident from the first step (torch.zeros would):
    here ~1 GiB of buffer allocated adds under 64 MiB resident, filling 2,000 rows adds about their bytes, and
    the unfilled rows read as zeros."""
    rows, shape = 40_000, (4, 84, 84)
    before = _resident_bytes()
    if frame_once:
        buffer = FrameStackReplayBuffer(4 * rows, shape, 1)  # 160k frames of 84x84: 1.05 GiB
    else:
        buffer = ReplayBuffer(rows, shape, 1, obs_dtype=torch.uint8)  # obs and next_obs: 1.05 GiB
    assert buffer.nbytes > 2**30
    assert _resident_bytes() - before < 64 * 2**20
    obs = torch.randint(0, 256, (1, *shape), dtype=torch.uint8)
    for _ in range(2_000):
        next_obs = torch.cat([obs[:, 1:], torch.randint(0, 256, (1, 1, 84, 84), dtype=torch.uint8)], dim=1)
        buffer.add(
            obs,
            torch.zeros(1, dtype=torch.int64),
            torch.zeros(1),
            torch.zeros(1, dtype=torch.bool),
            next_obs,
            dones=torch.zeros(1, dtype=torch.bool),
        )
        obs = next_obs
    grown = _resident_bytes() - before
    assert grown < 64 * 2**20 + 2_000 * (2 if not frame_once else 1) * math.prod(shape) * 2
    storage = buffer._frames if frame_once else buffer.obs
    assert int(storage[20_000:20_100].count_nonzero()) == 0  # rows not yet written


def test_a_buffer_larger_than_the_available_memory_is_refused_before_allocating(monkeypatch):
    monkeypatch.setattr(replay, "available_memory", lambda device: 100 * 2**20)
    with pytest.raises(ValueError, match=r"needs 200\.0 MiB on cpu, which has 100\.0 MiB available: lower buffer_size"):
        check_fits_in_memory(200 * 2**20, torch.device("cpu"), "the replay buffer", "lower buffer_size")
    check_fits_in_memory(50 * 2**20, torch.device("cpu"), "the replay buffer", "lower buffer_size")
    envs = make_envs("CartPole-v1", 2)
    with pytest.raises(ValueError, match=r"the replay buffer \(10,000,000 transitions of \(4,\) float32, obs and "):
        make_replay_buffer(envs, 10_000_000, seed=0, n_step=1, gamma=0.99)


def test_the_real_available_memory_is_read():
    available = replay.available_memory(torch.device("cpu"))
    assert available is None or available > 2**20


def test_frame_replay_chooses_the_buffer():
    envs = make_envs("CartPole-v1", 2)
    assert type(make_replay_buffer(envs, 100, 0, 1, 0.99)) is ReplayBuffer
    with pytest.raises(ValueError, match=r"frame_replay=True needs frame-stack observations .* got \(4,\)"):
        make_replay_buffer(envs, 100, 0, 1, 0.99, frame_replay=True)
    with pytest.raises(TypeError, match="frame_replay"):
        DQNModule(frame_replay="yes")


@pytest.mark.parametrize("terminal_on_life_loss", [True, False])
def test_the_preset_frame_once_samples_equal_the_whole_buffer(terminal_on_life_loss):
    """Random play on Breakout with the preset (episodes per life or per game, the ring wrapping twice):
    FrameStackReplayBuffer and ReplayBuffer fed the same adds give the same samples, field by field."""
    pytest.importorskip("ale_py")
    envs = make_envs("ALE/Breakout-v5", 2, seed=5, atari={"terminal_on_life_loss": terminal_on_life_loss})
    frames = make_replay_buffer(envs, 300, seed=7, n_step=3, gamma=0.9)
    whole = make_replay_buffer(envs, 300, seed=7, n_step=3, gamma=0.9, frame_replay=False)
    assert type(frames) is FrameStackReplayBuffer and type(whole) is ReplayBuffer
    assert frames.nbytes < whole.nbytes / 4
    generator = torch.Generator().manual_seed(0)
    obs, _ = envs.reset()
    ends = 0
    try:
        for step in range(700):
            actions = envs.random_actions(generator)
            next_obs, rewards, terminated, truncated, info = envs.step(actions)
            dones = terminated | truncated
            ends += int(dones.sum())
            for buffer in (frames, whole):
                buffer.add(obs, actions, rewards, terminated, info["final_observation"], dones)
            obs = next_obs
            if step % 50 == 49:
                a, b = frames.sample(64), whole.sample(64)
                for name, x, y in zip(a._fields, a, b, strict=True):
                    assert (x is None and y is None) or torch.equal(x, y), name
    finally:
        envs.close()
    assert ends >= 4


def test_dqn_on_the_preset_uses_the_frame_once_buffer():
    pytest.importorskip("ale_py")
    module = DQNModule(
        env_id="ALE/Breakout-v5",
        num_envs=1,
        buffer_size=400,
        learning_starts=64,
        batch_size=8,
        env_kwargs={"atari": True},
    )
    quiet_fit(module, 2)
    assert type(module.source.buffer) is FrameStackReplayBuffer
