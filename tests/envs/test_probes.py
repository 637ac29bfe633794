"""Probe environments 1-5: the exact rewards, observations and episode lengths of the table in
rl_lightning/envs/probes.py."""

import pytest
import torch

from rl_lightning.envs import Probe1, Probe2, Probe3, Probe4, Probe5, make_envs

NUM_ENVS = 4000


def _step(env, actions=None):
    if actions is None:
        actions = torch.zeros(env.num_envs, dtype=torch.int64)
    return env.step(actions)


@pytest.mark.parametrize(
    ("cls", "num_actions", "episode_length"),
    [(Probe1, 1, 1), (Probe2, 1, 1), (Probe3, 1, 2), (Probe4, 2, 1), (Probe5, 2, 1)],
)
def test_probe_episodes_end_by_termination_after_a_fixed_length(cls, num_actions, episode_length):
    env = make_envs(f"{cls.__name__}-v0", 16, seed=0)
    assert isinstance(env, cls) and env.num_actions == num_actions and env.obs_shape == (1,)
    env.reset()
    for t in range(1, 3 * episode_length + 1):
        _, _, terminated, truncated, _ = _step(env)
        assert terminated.tolist() == [t % episode_length == 0] * 16
        assert not truncated.any()


def test_probe1_obs_zero_reward_one():
    env = Probe1(NUM_ENVS, seed=0)
    obs, _ = env.reset()
    assert torch.equal(obs, torch.zeros(NUM_ENVS, 1))
    obs, reward, _, _, info = _step(env)
    assert torch.equal(reward, torch.ones(NUM_ENVS))
    assert torch.equal(obs, torch.zeros(NUM_ENVS, 1))
    assert torch.equal(info["final_observation"], torch.zeros(NUM_ENVS, 1))


@pytest.mark.parametrize("cls", [Probe2, Probe5])
def test_random_probe_obs_are_a_fair_coin(cls):
    env = cls(NUM_ENVS, seed=0)
    low, high = (-1.0, 1.0) if cls is Probe2 else (0.0, 1.0)
    fractions = []
    obs, _ = env.reset()
    for _ in range(5):
        assert ((obs == low) | (obs == high)).all()
        fractions.append((obs == high).float().mean().item())
        obs, *_ = _step(env)
    # Binomial standard error at 4000 draws: 0.0079; 4 standard errors.
    assert all(abs(fraction - 0.5) < 0.032 for fraction in fractions)
    assert len(set(fractions)) > 1  # fresh coins at every auto-reset


def test_probe2_reward_equals_obs():
    env = Probe2(NUM_ENVS, seed=0)
    obs, _ = env.reset()
    for _ in range(3):
        next_obs, reward, _, _, info = _step(env)
        assert torch.equal(reward, obs[:, 0])
        assert torch.equal(info["final_observation"], obs)  # one-step episodes end where they start
        obs = next_obs


def test_probe3_obs_zero_then_one_reward_zero_then_one():
    env = Probe3(NUM_ENVS, seed=0)
    obs, _ = env.reset()
    assert torch.equal(obs, torch.zeros(NUM_ENVS, 1))
    for _ in range(2):
        obs, reward, terminated, _, info = _step(env)
        assert torch.equal(obs, torch.ones(NUM_ENVS, 1))
        assert torch.equal(info["final_observation"], obs)
        assert torch.equal(reward, torch.zeros(NUM_ENVS)) and not terminated.any()
        obs, reward, terminated, _, _ = _step(env)
        assert torch.equal(obs, torch.zeros(NUM_ENVS, 1))  # auto-reset to the first obs
        assert torch.equal(reward, torch.ones(NUM_ENVS)) and terminated.all()


def test_probe4_reward_is_minus_one_for_action_zero_plus_one_for_action_one():
    env = Probe4(NUM_ENVS, seed=0)
    obs, _ = env.reset()
    assert torch.equal(obs, torch.zeros(NUM_ENVS, 1))
    actions = torch.arange(NUM_ENVS) % 2
    _, reward, *_ = _step(env, actions)
    assert torch.equal(reward, actions.float() * 2 - 1)
    assert reward.sum() == 0 and set(reward.tolist()) == {-1.0, 1.0}


def test_probe5_reward_is_plus_one_iff_action_matches_obs():
    env = Probe5(NUM_ENVS, seed=0)
    obs, _ = env.reset()
    _, reward, *_ = _step(env, obs[:, 0].long())
    assert torch.equal(reward, torch.ones(NUM_ENVS))
    obs = env.reset()[0]
    _, reward, *_ = _step(env, 1 - obs[:, 0].long())
    assert torch.equal(reward, -torch.ones(NUM_ENVS))
    obs = env.reset()[0]
    _, reward, *_ = _step(env, torch.ones(NUM_ENVS, dtype=torch.int64))
    assert torch.equal(reward, torch.where(obs[:, 0] == 1, 1.0, -1.0))


def test_probe_draw_maps_obs_to_grey_levels():
    env = Probe2(2, seed=0)
    frames = env.draw(torch.tensor([[-1.0], [1.0]]))
    assert frames[0].unique().tolist() == [0] and frames[1].unique().tolist() == [255]


def test_continuous_probe1_rewards_the_distance_to_one_half():
    env = make_envs("ContinuousProbe1-v0", 3, seed=0)
    obs, _ = env.reset()
    assert torch.equal(obs, torch.zeros(3, 1))
    obs, reward, terminated, truncated, _ = env.step(torch.tensor([[0.5], [0.0], [-0.5]]))
    assert reward.tolist() == pytest.approx([0.0, -0.25, -1.0])
    assert terminated.all() and not truncated.any()


def test_continuous_probe2_target_depends_on_the_observation():
    env = make_envs("ContinuousProbe2-v0", 64, seed=0)
    obs, _ = env.reset()
    assert set(obs.flatten().tolist()) == {-1.0, 1.0}
    target = obs * torch.tensor([0.5, -0.5])
    _, reward, *_ = env.step(target)
    assert torch.equal(reward, torch.zeros(64))
    obs, _ = env.reset()
    _, reward, *_ = env.step(torch.zeros(64, 2))
    assert reward.tolist() == pytest.approx([-0.5] * 64)  # 0.25 + 0.25 whatever the sign


def test_image_probe5_lights_the_half_that_encodes_the_observation():
    env = make_envs("ImageProbe5-v0", 64, seed=0)
    images, _ = env.reset()
    assert images.shape == (64, 36, 36, 3) and images.dtype == torch.uint8
    right_lit = images[:, :, 18:].float().mean(dim=(1, 2, 3)) == 255
    left_lit = images[:, :, :18].float().mean(dim=(1, 2, 3)) == 255
    assert torch.equal(right_lit, ~left_lit) and 0 < right_lit.sum() < 64
    # Probe5's rule on the hidden obs (right half lit <=> obs 1): +1 for the matching action.
    _, reward, terminated, _, info = env.step(right_lit.long())
    assert torch.equal(reward, torch.ones(64)) and terminated.all()
    assert info["final_observation"].dtype == torch.uint8
    _, reward, *_ = env.step(torch.zeros(64, dtype=torch.int64))
    assert set(reward.tolist()) == {-1.0, 1.0}
    assert torch.equal(env.draw(images[0]), images[0])
