"""The multi-agent rows contract (rl_lightning/envs/multi_agent.py), RoleAssignment-v0 by hand, the video's one row
per scene and the multi-agent backends' errors."""

from types import SimpleNamespace

import gymnasium as gym
import pytest
import torch

from rl_lightning.callbacks.video_frames import greedy_frames
from rl_lightning.envs import MultiAgentVectorEnv, RoleAssignment, make_envs
from rl_lightning.envs.multi_agent import every_scene, multi_agent_space, same_action_space
from rl_lightning.envs.pettingzoo_adapter import resolve_parallel_env

# The expected team reward per step of agents that pick their roles uniformly at random (N = 3): 1 - (2/3)^3.
UNIFORM_REWARD = 19 / 27


def test_role_assignment_rows_are_scene_major_with_one_hot_agent_ids():
    env = make_envs("RoleAssignment-v0", 4, seed=0)
    assert isinstance(env, MultiAgentVectorEnv)
    assert (env.num_scenes, env.num_agents, env.num_envs) == (4, 3, 12)
    assert env.agent_names == ["agent_0", "agent_1", "agent_2"]
    obs, _ = env.reset()
    assert obs.keys() == {"obs", "agent_id", "state"}
    assert torch.equal(obs["agent_id"], torch.eye(3).repeat(4, 1))
    # row r is agent r % 3 of scene r // 3: the cue and the state are the scene's, on each of its rows
    cue = obs["obs"].view(4, 3, 2)
    assert torch.equal(cue, cue[:, :1].expand(4, 3, 2)) and not torch.equal(cue[0, 0], cue[1, 0])
    assert cue.abs().max() <= 1
    assert torch.equal(obs["state"].view(4, 3, -1)[:, 0, :2], cue[:, 0])
    assert torch.equal(obs["state"][:, 2:], torch.zeros(12, 9))  # no previous roles after a reset


def test_role_assignment_reward_and_state_by_hand():
    env = RoleAssignment(4, seed=1)
    env.reset()
    roles = torch.tensor([[0, 1, 2], [0, 0, 0], [1, 1, 2], [2, 0, 2]])
    obs, reward, terminated, truncated, _ = env.step(roles.flatten())
    assert torch.allclose(reward, torch.tensor([1.0, 1 / 3, 2 / 3, 2 / 3]).repeat_interleave(3))
    assert not terminated.any() and not truncated.any()
    previous = torch.nn.functional.one_hot(roles, 3).float().flatten(1)  # (4, 9): agent 0's one-hot first
    assert torch.equal(obs["state"][::3, 2:], previous)
    assert torch.equal(obs["state"][::3, :2], obs["obs"][::3])
    assert RoleAssignment.team_reward(torch.tensor([[3, 3, 1, 0]]), 4).item() == 0.75


def test_role_assignment_truncates_every_row_of_a_scene_after_eight_steps_and_resets():
    env = RoleAssignment(2, seed=2)
    env.reset()
    distinct = torch.arange(3).repeat(2)  # agent i plays role i: the team's best
    returns = torch.zeros(6)
    for step in range(1, 9):
        obs, reward, terminated, truncated, info = env.step(distinct)
        returns += reward
        assert not terminated.any()
        assert truncated.tolist() == [step == 8] * 6
    assert torch.equal(returns, torch.full((6,), 8.0))
    final = info["final_observation"]
    assert torch.equal(final["state"][:, 2:], torch.eye(3).flatten().repeat(6, 1))  # the last roles
    assert torch.equal(obs["state"][:, 2:], torch.zeros(6, 9))  # a new episode
    assert not torch.equal(final["obs"], obs["obs"])


def test_role_assignment_random_roles_earn_the_uniform_share():
    env = RoleAssignment(4096, seed=3)
    env.reset()
    generator = torch.Generator().manual_seed(0)
    rewards = torch.stack([env.step(env.random_actions(generator))[1] for _ in range(4)])
    assert abs(rewards.mean().item() - UNIFORM_REWARD) < 0.01


def test_role_assignment_is_deterministic_and_leaves_the_global_rng_alone():
    def play(env):
        generator = torch.Generator().manual_seed(4)
        out = [env.reset()[0]["obs"]]
        out += [env.step(env.random_actions(generator))[0]["obs"] for _ in range(10)]
        return torch.stack(out)

    global_state = torch.get_rng_state()
    first, second, other = play(RoleAssignment(3, seed=5)), play(RoleAssignment(3, seed=5)), play(RoleAssignment(3, 6))
    assert torch.equal(torch.get_rng_state(), global_state)
    assert torch.equal(first, second) and not torch.equal(first, other)


def test_role_assignment_rejects_bad_arguments_and_actions():
    with pytest.raises(ValueError, match="num_agents"):
        RoleAssignment(2, num_agents=1)
    with pytest.raises(ValueError, match="num_scenes"):
        RoleAssignment(0)
    env = RoleAssignment(2, seed=0)
    env.reset()
    with pytest.raises(ValueError, match=r"shape \(6,\)"):
        env.step(torch.zeros(2, dtype=torch.int64))  # one action per scene instead of per row
    with pytest.raises(ValueError, match=r"in \[0, 3\)"):
        env.step(torch.full((6,), 3))


def test_space_helpers():
    space = multi_agent_space(4, 2, 8, active=True, num_actions=5)
    assert {key: leaf.shape for key, leaf in space.spaces.items()} == {
        "obs": (4,),
        "agent_id": (2,),
        "state": (8,),
        "active": (1,),
        "action_mask": (5,),
    }
    same = {"a": gym.spaces.Discrete(3), "b": gym.spaces.Discrete(3)}
    assert same_action_space(same, "here") == gym.spaces.Discrete(3)
    with pytest.raises(ValueError, match=r"same action space.*a and c differ.*c: Discrete\(4\)"):
        same_action_space({**same, "c": gym.spaces.Discrete(4)}, "here")
    assert torch.equal(every_scene(torch.arange(12), 3), torch.tensor([0, 3, 6, 9]))


class _PaintedRoles(RoleAssignment):
    """RoleAssignment whose frame of scene s is filled with s (and its step counter in the first pixel)."""

    can_render = True

    def render(self):
        frames = torch.arange(self.num_scenes, dtype=torch.uint8).view(-1, 1, 1, 1).expand(-1, 4, 4, 3).clone()
        frames[:, 0, 0, 0] = self._t.to(torch.uint8)
        return self.scene_rows(frames)


def test_video_frames_take_one_row_per_scene():
    def make(num_envs, seed, render=False):
        return _PaintedRoles(num_envs, seed, episode_length=3)

    module = SimpleNamespace(
        make_envs=make,
        greedy_actor=lambda: lambda obs, start: obs["agent_id"].argmax(dim=1),
        hparams=SimpleNamespace(env_id="painted"),
    )
    frames, dones = greedy_frames(module, num_envs=5, num_steps=4, seed=0, frame_stride=1)
    assert frames.shape == (5, 4, 4, 4, 3) and dones.shape == (5, 4)
    assert frames[:, 0, 1, 1, 0].tolist() == [0, 1, 2, 3, 4]  # scene s's tile is scene s
    assert frames[0, :, 0, 0, 0].tolist() == [0, 1, 2, 0]
    assert dones.tolist() == [[False, False, True, False]] * 5


@pytest.mark.parametrize(
    "env_id",
    ["os", "subprocess.run", "os.path", "pettingzoo", "mpe2.simple_spread_v3; import os", "mpe2..x", "torch.nn"],
)
def test_pettingzoo_ids_outside_the_allow_list_are_refused(env_id):
    with pytest.raises(ValueError, match="inside pettingzoo, mpe2"):
        resolve_parallel_env(env_id)


def test_multi_agent_backend_errors():
    with pytest.raises(ValueError, match="no such module"):
        make_envs("mpe2.no_such_env_v0", 2, backend="pettingzoo")
    with pytest.raises(ValueError, match="no parallel_env"):
        make_envs("mpe2.all_modules", 2, backend="pettingzoo")
    with pytest.raises(ValueError, match=r"unknown VMAS scenario .CartPole-v1.*balance"):
        make_envs("CartPole-v1", 2, backend="vmas")
    with pytest.raises(ValueError, match="unknown VMAS scenario"):
        make_envs("../scenarios/balance", 2, backend="vmas")
    with pytest.raises(ValueError, match="compile=True"):
        make_envs("balance", 2, backend="vmas", compile=True)
    with pytest.raises(ValueError, match="backend"):
        make_envs("balance", 2, backend="vmas_typo")
    with pytest.raises(ValueError, match="number of scenes"):
        make_envs("balance", 0, backend="vmas")
