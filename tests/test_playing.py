import pytest
import torch

from rl_lightning.envs import make_envs
from rl_lightning.playing import play_greedy


class _Recording:
    """An actor that plays ``action`` and keeps what it was called with."""

    def __init__(self, action=0):
        self.action = action
        self.obs, self.starts = [], []

    def __call__(self, obs, episode_start=None):
        self.obs.append(obs.clone())
        self.starts.append(episode_start.clone())
        return torch.full((obs.shape[0],), self.action, dtype=torch.int64)


def test_one_episode_per_env_counts_whole_episodes_and_stops():
    # Probe3: two steps, rewards 0 then 1: every episode returns 1 in 2 steps.
    actor = _Recording()
    played = play_greedy(actor, make_envs("Probe3-v0", 5, seed=0), seed=0)
    assert played.returns.tolist() == [[1.0]] * 5 and played.lengths.tolist() == [[2.0]] * 5
    assert not played.cut.any() and played.obs is None and played.frames == []
    assert played.dones.tolist() == [[False, True]] * 5  # stopped once every env ended its episode
    assert [start.tolist() for start in actor.starts] == [[True] * 5, [False] * 5]


def test_episodes_one_after_another_are_cut_at_the_cap_and_the_env_reset():
    # CartPole pushed left falls within about 10 steps: a cap of 4 cuts every episode there.
    envs = make_envs("CartPole-v1", 1, seed=3)
    resets = []
    reset = envs.reset
    envs.reset = lambda seed=None: resets.append(seed) or reset(seed)
    actor = _Recording()
    played = play_greedy(actor, envs, seed=3, episodes_per_env=3, max_episode_steps=4)
    assert played.returns.tolist() == [[4.0, 4.0, 4.0]] and played.lengths.tolist() == [[4.0, 4.0, 4.0]]
    assert played.cut.tolist() == [[True, True, True]] and not played.dones.any()
    assert resets == [3, None, None]  # seeded once; no reset after the last episode
    assert [start.item() for start in actor.starts] == [True, False, False, False] * 3
    fresh, _ = make_envs("CartPole-v1", 1, seed=3).reset()
    torch.testing.assert_close(actor.obs[0], fresh)


def test_episodes_that_end_go_on_in_the_env_that_started_the_next_one():
    # Probe3 ends every 2 steps and resets itself: three episodes of one env in 6 steps, no reset.
    actor = _Recording()
    played = play_greedy(actor, make_envs("Probe3-v0", 1, seed=0), episodes_per_env=3, max_episode_steps=2)
    assert played.returns.tolist() == [[1.0, 1.0, 1.0]] and not played.cut.any()
    assert played.dones.tolist() == [[False, True] * 3]
    assert [start.item() for start in actor.starts] == [True, False] * 3


def test_a_fixed_number_of_steps_keeps_observations_and_frames():
    envs = make_envs("CartPole-v1", 3, seed=1)
    actor = _Recording()
    played = play_greedy(
        actor,
        envs,
        episodes_per_env=None,
        num_steps=30,
        keep_obs=True,
        frame=lambda obs: obs[:, 0].clone(),
        frame_stride=4,
    )
    assert played.returns.shape == (3, 0) and played.dones.shape == (3, 30) and played.dones.any()
    assert torch.equal(played.obs, torch.stack(actor.obs, dim=1))
    assert len(played.frames) == 8  # steps 0, 4, ..., 28
    assert all(torch.equal(frame, actor.obs[4 * i][:, 0]) for i, frame in enumerate(played.frames))
    # episode_start: True on the first step and on the step after each end
    starts = torch.stack(actor.starts, dim=1)
    assert starts[:, 0].all() and torch.equal(starts[:, 1:], played.dones[:, :-1])


def test_bad_arguments_are_named():
    envs = make_envs("Probe3-v0", 2, seed=0)
    with pytest.raises(ValueError, match="episodes_per_env or num_steps"):
        play_greedy(_Recording(), envs, episodes_per_env=None)
    with pytest.raises(ValueError, match="num_steps"):
        play_greedy(_Recording(), envs, num_steps=0)
    with pytest.raises(ValueError, match="max_episode_steps"):
        play_greedy(_Recording(), envs, max_episode_steps=0)
    with pytest.raises(ValueError, match="frame_stride"):
        play_greedy(_Recording(), envs, frame_stride=0)
    with pytest.raises(ValueError, match="pass a single env, got num_envs=2"):
        play_greedy(_Recording(), envs, episodes_per_env=2, max_episode_steps=5)


def test_episodes_still_running_when_the_steps_run_out_are_kept_as_far_as_they_got():
    # CartPole pushed left lasts more than 3 steps: after 3 steps each env is in its first episode.
    played = play_greedy(_Recording(), make_envs("CartPole-v1", 2, seed=0), episodes_per_env=2, num_steps=3)
    assert played.lengths.tolist() == [[3.0, 0.0]] * 2 and played.returns.tolist() == [[3.0, 0.0]] * 2
    assert not played.cut.any() and played.dones.shape == (2, 3)
