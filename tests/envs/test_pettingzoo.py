"""PettingZooVectorEnv: PettingZoo parallel envs as rows, checked against the envs stepped side by side, and a tiny
env of the test's own where an agent leaves early."""

import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_lightning.envs import PettingZooVectorEnv, make_envs

pettingzoo = pytest.importorskip("pettingzoo")
mpe2 = pytest.importorskip("mpe2")
from mpe2 import simple_adversary_v3, simple_spread_v3  # noqa: E402


class Leaving(pettingzoo.ParallelEnv):
    """Three agents a, b, c; b leaves (terminates) at step ``leave_at``; the others end together at step ``length``
    (``end_by`` "truncation" or "termination"). Agent i's obs is ``[t, i + 1]``, its reward ``10 * (i + 1) + action``,
    its action mask (``masked``) ``[1, t % 2, 1]``. Actions of agents not in ``agents`` are an error."""

    def __init__(self, leave_at=2, length=4, end_by="truncation", masked=False, other_space=None):
        self.metadata = {"name": "leaving_v0"}
        self.possible_agents = ["a", "b", "c"]
        self.leave_at, self.length, self.end_by, self.masked = leave_at, length, end_by, masked
        self.other_space = other_space

    def observation_space(self, agent):
        box = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        if not self.masked:
            return box
        return gym.spaces.Dict({"observation": box, "action_mask": gym.spaces.Box(0, 1, (3,), np.int8)})

    def action_space(self, agent):
        return self.other_space if agent == "c" and self.other_space is not None else gym.spaces.Discrete(3)

    def _obs(self, agent):
        obs = np.array([self.t, self.possible_agents.index(agent) + 1], np.float32)
        if not self.masked:
            return obs
        return {"observation": obs, "action_mask": np.array([1, self.t % 2, 1], np.int8)}

    def reset(self, seed=None, options=None):
        self.agents, self.t = list(self.possible_agents), 0
        return {agent: self._obs(agent) for agent in self.agents}, {agent: {} for agent in self.agents}

    def step(self, actions):
        assert sorted(actions) == sorted(self.agents), (actions, self.agents)
        self.t += 1
        rewards = {agent: 10.0 * (self.possible_agents.index(agent) + 1) + actions[agent] for agent in self.agents}
        end = self.t >= self.length
        terminated = {
            a: (a == "b" and self.t == self.leave_at) or (end and self.end_by == "termination") for a in self.agents
        }
        truncated = {agent: end and self.end_by == "truncation" for agent in self.agents}
        obs = {agent: self._obs(agent) for agent in self.agents}
        infos = {agent: {} for agent in self.agents}
        self.agents = [agent for agent in self.agents if not (terminated[agent] or truncated[agent])]
        return obs, rewards, terminated, truncated, infos


def _leaving(**kwargs):
    return lambda: Leaving(**kwargs)


def test_an_agent_that_leaves_turns_absent_until_its_scene_ends():
    env = PettingZooVectorEnv(_leaving(), 2, seed=0)
    obs, _ = env.reset()
    assert env.agent_names == ["a", "b", "c"] and env.num_envs == 6
    assert obs["active"].flatten().tolist() == [True] * 6
    assert torch.equal(obs["obs"][:3], torch.tensor([[0.0, 1], [0, 2], [0, 3]]))
    actions = torch.tensor([1, 2, 0, 0, 0, 2])
    history = [env.step(actions) for _ in range(4)]
    rewards = torch.stack([step[1] for step in history])
    assert rewards.tolist() == [
        [11, 22, 30, 10, 20, 32],
        [11, 22, 30, 10, 20, 32],  # b's last reward, as it leaves
        [11, 0, 30, 10, 0, 32],  # b absent: reward 0 (its action not passed: the env asserts)
        [11, 0, 30, 10, 0, 32],
    ]
    obs, _, terminated, truncated, _ = history[1]
    assert obs["active"].flatten().tolist() == [True, False, True] * 2
    assert torch.equal(obs["obs"][1], torch.zeros(2)) and torch.equal(obs["obs"][0], torch.tensor([2.0, 1]))
    assert not terminated.any() and not truncated.any()  # leaving is not an end
    obs, _, terminated, truncated, info = history[3]  # the scene ends by truncation
    assert truncated.tolist() == [True, False, True] * 2
    assert terminated.tolist() == [False, True, False] * 2  # a row absent at the end: terminated
    final = info["final_observation"]
    assert final["active"].flatten().tolist() == [True, False, True] * 2
    assert torch.equal(final["obs"][:3], torch.tensor([[4.0, 1], [0, 0], [4, 3]]))
    assert obs["active"].all() and torch.equal(obs["obs"][:3], torch.tensor([[0.0, 1], [0, 2], [0, 3]]))
    assert torch.equal(obs["state"][:3], obs["obs"][:3].flatten().repeat(3, 1))  # no env.state(): the rows' obs


def test_a_scene_ended_by_termination_terminates_every_row():
    env = PettingZooVectorEnv(_leaving(end_by="termination", length=3), 1, seed=0)
    env.reset()
    flags = [env.step(torch.zeros(3, dtype=torch.int64))[2:4] for _ in range(3)]
    assert [terminated.tolist() for terminated, _ in flags] == [[False] * 3, [False] * 3, [True] * 3]
    assert not any(truncated.any() for _, truncated in flags)


def test_action_masks_map_to_the_mask_key_and_absent_agents_allow_all():
    env = PettingZooVectorEnv(_leaving(masked=True), 1, seed=0)
    obs, _ = env.reset()
    assert obs.keys() == {"obs", "agent_id", "state", "active", "action_mask"}
    assert env.has_action_mask and obs["action_mask"].dtype == torch.bool
    assert obs["action_mask"].tolist() == [[True, False, True]] * 3
    obs, *_ = env.step(torch.zeros(3, dtype=torch.int64))
    assert obs["action_mask"].tolist() == [[True, True, True]] * 3
    obs, *_ = env.step(torch.zeros(3, dtype=torch.int64))  # b leaves
    assert obs["action_mask"].tolist() == [[True, False, True], [True, True, True], [True, False, True]]
    assert torch.equal(obs["obs"][0], torch.tensor([2.0, 1]))


def test_rows_match_mpe2_stepped_side_by_side():
    num_scenes, seed = 2, 5
    env = make_envs("mpe2.simple_spread_v3", num_scenes, seed=seed, backend="pettingzoo", max_cycles=3)
    raws = [simple_spread_v3.parallel_env(max_cycles=3) for _ in range(num_scenes)]
    raw_obs = [raw.reset(seed=seed + index)[0] for index, raw in enumerate(raws)]
    names = raws[0].possible_agents
    obs, _ = env.reset()
    generator = torch.Generator().manual_seed(0)
    ends = 0
    for _ in range(7):
        expected = torch.tensor(np.stack([[raw_obs[i][name] for name in names] for i in range(num_scenes)]))
        assert torch.equal(obs["obs"], expected.flatten(0, 1))
        states = torch.tensor(np.stack([raw.state() for raw in raws]))
        assert torch.equal(obs["state"], states.repeat_interleave(3, dim=0))
        actions = env.random_actions(generator)
        obs, reward, terminated, truncated, info = env.step(actions)
        for index, raw in enumerate(raws):
            step_actions = {name: int(actions[index * 3 + k]) for k, name in enumerate(names)}
            raw_obs[index], rewards, _, truncations, _ = raw.step(step_actions)
            rows = slice(3 * index, 3 * index + 3)
            assert reward[rows].tolist() == pytest.approx([rewards[name] for name in names], abs=1e-6)
            assert truncated[rows].tolist() == [truncations[name] for name in names]
            final = torch.tensor(np.stack([raw_obs[index][name] for name in names]))
            assert torch.equal(info["final_observation"]["obs"][rows], final)
            if not raw.agents:
                raw_obs[index] = raw.reset()[0]
                ends += 1
        assert not terminated.any()
    assert ends == 2 * num_scenes


def test_padding_and_box_actions():
    env = make_envs("mpe2.simple_adversary_v3", 2, seed=0, backend="pettingzoo", continuous_actions=True)
    raw = simple_adversary_v3.parallel_env(continuous_actions=True)
    assert isinstance(env.single_action_space, gym.spaces.Box) and env.action_shape == (5,)
    obs, _ = env.reset()
    assert env.obs_shape["obs"] == (10,)  # the adversary's 8 padded to the agents' 10
    raw_obs, _ = raw.reset(seed=0)
    assert torch.equal(obs["obs"][0], torch.tensor(np.concatenate([raw_obs["adversary_0"], np.zeros(2, np.float32)])))
    actions = torch.full((6, 5), 0.5)
    _, reward, *_ = env.step(actions)
    _, raw_rewards, *_ = raw.step({name: np.full(5, 0.5, np.float32) for name in raw.agents})
    assert reward[:3].tolist() == pytest.approx([raw_rewards[name] for name in raw.possible_agents], abs=1e-6)


def test_determinism_and_the_global_rng():
    def play(env):
        generator = torch.Generator().manual_seed(1)
        out = [env.reset()[0]["obs"]]
        return torch.stack(out + [env.step(env.random_actions(generator))[0]["obs"] for _ in range(30)])

    global_state = torch.get_rng_state()
    kwargs = {"backend": "pettingzoo", "max_cycles": 10}
    first = play(make_envs("mpe2.simple_spread_v3", 2, seed=3, **kwargs))
    second = play(make_envs("mpe2.simple_spread_v3", 2, seed=3, **kwargs))
    other = play(make_envs("mpe2.simple_spread_v3", 2, seed=4, **kwargs))
    assert torch.equal(torch.get_rng_state(), global_state)
    assert torch.equal(first, second) and not torch.equal(first[0], other[0])


def test_render_gives_each_scene_on_its_rows():
    env = make_envs("mpe2.simple_spread_v3", 2, seed=0, backend="pettingzoo", render=True)
    env.reset()
    frames = env.render()
    assert env.can_render and frames.shape == (6, 700, 700, 3) and frames.dtype == torch.uint8
    assert torch.equal(frames[0], frames[2]) and not torch.equal(frames[0], frames[3])
    with pytest.raises(NotImplementedError, match="render=True"):
        make_envs("mpe2.simple_spread_v3", 1, backend="pettingzoo").render()


def test_errors_and_state_dict():
    with pytest.raises(ValueError, match=r"same action space.*a and c differ.*c: Discrete\(4\)"):
        PettingZooVectorEnv(_leaving(other_space=gym.spaces.Discrete(4)), 1)
    env = PettingZooVectorEnv(_leaving(), 2, seed=0)
    env.reset()
    with pytest.raises(ValueError, match=r"shape \(6,\)"):
        env.step(torch.zeros(2, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"in \[0, 3\)"):
        env.step(torch.full((6,), 3))
    state = env.state_dict()
    assert state["restorable"] is False
    with pytest.warns(UserWarning, match="restarts"):
        env.load_state_dict(state)


def test_missing_packages_name_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpe2", None)
    with pytest.raises(ImportError, match=r"rl_lightning\[multiagent\]"):
        make_envs("mpe2.simple_spread_v3", 1, backend="pettingzoo")
    monkeypatch.setitem(sys.modules, "vmas", None)
    with pytest.raises(ImportError, match=r"rl_lightning\[multiagent\]"):
        make_envs("balance", 1, backend="vmas")
