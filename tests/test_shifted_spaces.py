"""Shifted action spaces (``Discrete(3, start=-1)``, ``MultiDiscrete([3, 4], start=[-1, 2])``): our envs
and networks use indices ``k``; ``act`` on gymnasium observations, ``evaluate_policy`` on a gymnasium
``Env`` and an export with ``action_start`` answer in gymnasium's values ``start + k``."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_lightning import VPGModule, evaluate_policy
from rl_lightning.envs import make_envs
from rl_lightning.export import export_policy

SPACES = {
    "Discrete": gym.spaces.Discrete(3, start=-1),
    "MultiDiscrete": gym.spaces.MultiDiscrete([3, 4], start=[-1, 2]),
}


class _RecordingEnv(gym.Env):
    """Refuses an action outside its space (what gymnasium's own env would play wrong or fail on) and
    records the ones it is given, in every instance (``played``). Episodes of 6 steps."""

    played: list = []  # noqa: RUF012 - shared by the instances a test builds

    def __init__(self, action_space: gym.Space):
        self.action_space = action_space
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.steps = 0

    def _obs(self) -> np.ndarray:
        return self.np_random.uniform(-1, 1, 2).astype(np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return self._obs(), {}

    def step(self, action):
        if not self.action_space.contains(action):
            raise ValueError(f"{action!r} is not in {self.action_space}")
        _RecordingEnv.played.append(np.asarray(action).tolist())
        self.steps += 1
        return self._obs(), 1.0, self.steps >= 6, False, {}


def _env_id(name: str) -> str:
    env_id = f"rl_lightning_test/Shifted{name}-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=_RecordingEnv, max_episode_steps=10, kwargs={"action_space": SPACES[name]})
    return env_id


def _values(name: str) -> set:
    """Every action value gymnasium's space holds (a tuple per MultiDiscrete action)."""
    space = SPACES[name]
    if name == "Discrete":
        return set(range(int(space.start), int(space.start + space.n)))
    low, high = space.start, space.start + space.nvec
    return {(a, b) for a in range(low[0], high[0]) for b in range(low[1], high[1])}


def _played_values(name: str) -> set:
    return {tuple(value) if isinstance(value, list) else value for value in _RecordingEnv.played}


@pytest.fixture(autouse=True)
def _fresh_record():
    _RecordingEnv.played = []


@pytest.fixture(scope="module", params=list(SPACES))
def shifted(request):
    torch.manual_seed(0)
    return request.param, VPGModule(env_id=_env_id(request.param), num_envs=2, seed=0)


def test_act_on_gymnasium_observations_plays_gymnasiums_own_env(shifted):
    name, module = shifted
    env = gym.make(_env_id(name))
    obs, _ = env.reset(seed=0)
    torch.manual_seed(1)
    for _ in range(300):  # sampled: every value comes up, each inside the space (the env checks)
        obs, _, terminated, truncated, _ = env.step(module.act(obs))
        if terminated or truncated:
            obs, _ = env.reset()
    assert _played_values(name) == _values(name)


def test_act_answers_numpy_in_gymnasiums_values_and_tensors_in_our_indices(shifted):
    name, module = shifted
    start = SPACES[name].start
    obs = np.random.default_rng(0).uniform(-1, 1, (64, 2)).astype(np.float32)
    indices = module.act(torch.from_numpy(obs), greedy=True)
    values = module.act(obs, greedy=True)
    assert isinstance(indices, torch.Tensor) and indices.min() >= 0
    assert isinstance(values, np.ndarray) and values.dtype == SPACES[name].dtype
    assert np.array_equal(values, indices.numpy() + start)
    one = module.act(obs[0], greedy=True)  # one observation: one action, in gymnasium's values
    assert np.array_equal(one, indices[0].numpy() + start)
    assert SPACES[name].contains(one if name == "MultiDiscrete" else int(one))


def test_our_envs_still_take_indices_and_step_gymnasium_with_start_plus_index(shifted):
    name, module = shifted
    envs = make_envs(_env_id(name), 2, seed=0)
    assert envs.gymnasium_action_space == SPACES[name]
    obs, _ = envs.reset()
    indices = module.act(obs, greedy=True)
    envs.step(indices)
    expected = indices.numpy() + SPACES[name].start
    assert [np.asarray(value).tolist() for value in _RecordingEnv.played] == expected.tolist()


def test_evaluate_policy_plays_gymnasiums_values_on_a_gymnasium_env(shifted):
    name, module = shifted
    result = evaluate_policy(module, gym.make(_env_id(name)), num_episodes=3, seed=0)
    assert result.lengths.tolist() == [6.0, 6.0, 6.0] and result.returns.tolist() == [6.0, 6.0, 6.0]
    assert len(_RecordingEnv.played) == 18 and _played_values(name) <= _values(name)
    env = gym.make(_env_id(name))  # the greedy actions, replayed with act on gymnasium's observations
    obs, _ = env.reset(seed=0)
    expected = [np.asarray(module.act(obs, greedy=True)).tolist()]
    assert _RecordingEnv.played[0] == expected[0]


def test_an_export_with_action_start_answers_in_gymnasiums_values(shifted, tmp_path):
    name, module = shifted
    start = make_envs(_env_id(name), 1).gymnasium_action_space.start
    path = export_policy(module.greedy_policy(), torch.zeros(2, 2), tmp_path / "policy.pt2", action_start=start)
    loaded = torch.export.load(path).module()
    obs = np.random.default_rng(1).uniform(-1, 1, (16, 2)).astype(np.float32)
    actions = loaded(torch.from_numpy(obs))
    assert np.array_equal(actions.numpy(), module.act(obs, greedy=True))
    assert np.array_equal(actions.numpy(), module.act(torch.from_numpy(obs), greedy=True).numpy() + start)
    # a callable's actions are the env's own: the export plays gymnasium's env as it answers
    result = evaluate_policy(loaded, gym.make(_env_id(name)), num_episodes=2, seed=0)
    assert result.lengths.tolist() == [6.0, 6.0] and _played_values(name) <= _values(name)
    traced = torch.jit.load(
        str(export_policy(module.greedy_policy(), torch.zeros(2, 2), tmp_path / "p.pt", None, start))
    )
    assert torch.equal(traced(torch.from_numpy(obs)), actions)
    unshifted = export_policy(module.greedy_policy(), torch.zeros(2, 2), tmp_path / "indices.pt2")
    indices = torch.export.load(unshifted).module()(torch.from_numpy(obs))
    assert torch.equal(indices, actions - torch.as_tensor(start))


def test_module_export_policy_answers_in_gymnasiums_values(shifted, tmp_path):
    _, module = shifted
    loaded = torch.export.load(module.export_policy(tmp_path / "policy.pt2")).module()
    obs = np.random.default_rng(2).uniform(-1, 1, (16, 2)).astype(np.float32)
    assert np.array_equal(loaded(torch.from_numpy(obs)).numpy(), module.act(obs, greedy=True))


@pytest.mark.parametrize("name", list(SPACES))
def test_a_recurrent_ppo_acts_in_gymnasiums_values_too(name):
    from rl_lightning import PPOModule

    module = PPOModule(env_id=_env_id(name), num_envs=4, recurrent="lstm", seed=0)
    obs = np.random.default_rng(3).uniform(-1, 1, (64, 2)).astype(np.float32)
    actions, state = module.act(obs)
    assert state.shape[1] == 64
    assert all(SPACES[name].contains(np.asarray(action, dtype=SPACES[name].dtype)) for action in actions)
    greedy, _ = module.act(obs, greedy=True)
    indices, _ = module.act(torch.from_numpy(obs), greedy=True)  # tensors: our indices
    assert np.array_equal(greedy - np.asarray(SPACES[name].start), indices.numpy())
