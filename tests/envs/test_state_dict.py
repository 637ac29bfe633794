"""Env state_dict / load_state_dict: a restored env continues exactly, and obs never alias state."""

import pytest
import torch

from rl_lightning.envs import make_envs, registered_env_ids

ENV_IDS = [env_id for env_id in registered_env_ids() if env_id != "CartPole-gpu"]


def _play(env, steps: int, seed: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        actions = env.random_actions(generator)
        obs, reward, terminated, truncated, info = env.step(actions)
        out += [obs, reward, terminated, truncated, info["final_observation"]]
    return out


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_restored_env_continues_exactly(env_id):
    env = make_envs(env_id, 16, seed=3)
    env.reset()
    _play(env, 37, seed=0)
    saved = env.state_dict()
    expected = _play(env, 60, seed=1)

    restored = make_envs(env_id, 16, seed=999)  # another seed: everything must come from the state
    restored.reset()
    restored.load_state_dict(saved)
    actual = _play(restored, 60, seed=1)
    for a, b in zip(actual, expected, strict=True):
        if isinstance(a, dict):  # a Dict observation: key by key
            assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)
        else:
            assert torch.equal(a, b)


def test_state_dict_is_a_snapshot():
    env = make_envs("CartPole-v1", 4, seed=0)
    env.reset()
    saved = env.state_dict()
    before = saved["_state"].clone()
    _play(env, 5, seed=0)
    assert torch.equal(saved["_state"], before)


def test_loading_state_of_another_env_or_size_raises():
    cartpole = make_envs("CartPole-v1", 4, seed=0).state_dict()
    with pytest.raises(ValueError, match="CartPole with num_envs=4"):
        make_envs("Probe1-v0", 4, seed=0).load_state_dict(cartpole)
    with pytest.raises(ValueError, match="num_envs=8"):
        make_envs("CartPole-v1", 8, seed=0).load_state_dict(cartpole)


def test_cartpole_obs_never_alias_the_state():
    env = make_envs("CartPole-v1", 8, seed=0)
    obs, _ = env.reset()
    state_before = env.state.clone()
    obs.mul_(0)  # the caller owns its obs
    assert torch.equal(env.state, state_before)
    obs, _, _, _, info = env.step(torch.zeros(8, dtype=torch.long))
    assert obs.reshape(-1).shape == (32,)
    env.state[0, 0] = 1.0  # writes into the env ...
    assert obs[0, 0].item() != 1.0  # ... do not reach observations already returned
    assert info["final_observation"][0, 0].item() != 1.0
