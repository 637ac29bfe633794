"""VmasVectorEnv: VMAS scenarios as rows, checked against VMAS itself stepped side by side."""

import random

import numpy as np
import pytest
import torch

from rl_lightning.envs import VmasVectorEnv, make_envs

vmas = pytest.importorskip("vmas")

SEED = 3


def _raw(scenario: str, num_scenes: int, **kwargs):
    """VMAS's own env, reset with ``SEED`` (what the adapter's first reset draws from)."""
    raw = vmas.make_env(scenario, num_envs=num_scenes, terminated_truncated=True, **kwargs)
    return raw, raw.reset(seed=SEED)


def _rows(per_agent: list[torch.Tensor]) -> torch.Tensor:
    """VMAS's per-agent ``(num_scenes, ...)`` tensors as scene-major rows ``(num_scenes * num_agents, ...)``."""
    return torch.stack(per_agent, dim=1).flatten(0, 1)


@pytest.mark.parametrize(
    ("scenario", "continuous", "kwargs"),
    [("balance", True, {"n_agents": 3}), ("navigation", False, {"n_agents": 2})],
)
def test_rows_match_vmas_stepped_side_by_side(scenario, continuous, kwargs):
    num_scenes, max_steps = 3, 4
    env = make_envs(
        scenario, num_scenes, seed=SEED, backend="vmas", continuous_actions=continuous, max_steps=max_steps, **kwargs
    )
    raw, raw_obs = _raw(scenario, num_scenes, continuous_actions=continuous, max_steps=max_steps, **kwargs)
    num_agents = kwargs["n_agents"]
    assert isinstance(env, VmasVectorEnv) and env.device == torch.device("cpu")
    assert (env.num_scenes, env.num_agents, env.num_envs) == (num_scenes, num_agents, num_scenes * num_agents)
    assert env.agent_names == [agent.name for agent in raw.agents]
    obs, _ = env.reset()
    assert torch.equal(obs["obs"], _rows(raw_obs))
    assert torch.equal(obs["agent_id"], torch.eye(num_agents).repeat(num_scenes, 1))
    generator = torch.Generator().manual_seed(0)
    ends = 0
    for _ in range(2 * max_steps + 1):
        actions = env.random_actions(generator)
        obs, reward, terminated, truncated, info = env.step(actions)
        per_scene = actions.view(num_scenes, num_agents, *env.action_shape)
        raw_obs, raw_rewards, raw_terminated, raw_truncated, _ = raw.step(
            [per_scene[:, index].clone() for index in range(num_agents)]
        )
        assert torch.equal(reward, _rows(raw_rewards))  # each agent's own reward
        assert torch.equal(info["final_observation"]["obs"], _rows(raw_obs))
        done = raw_terminated | raw_truncated
        assert torch.equal(terminated, raw_terminated.repeat_interleave(num_agents))
        assert torch.equal(terminated | truncated, done.repeat_interleave(num_agents))  # all rows of a scene
        for index in done.nonzero().flatten().tolist():
            raw_obs = raw.reset_at(index)
            ends += 1
        assert torch.equal(obs["obs"], _rows(raw_obs))
    assert ends >= num_scenes * 2  # every scene was truncated and auto-reset twice


def test_state_is_the_scenes_rows_concatenated_and_padding():
    env = make_envs("simple_adversary", 2, seed=0, backend="vmas", max_steps=5)
    assert env.obs_sizes == [8, 10, 10]  # the adversary sees less: zero-padded to 10
    obs, _ = env.reset()
    assert torch.equal(obs["obs"].view(2, 3, 10)[:, 0, 8:], torch.zeros(2, 2))
    assert torch.equal(obs["state"], env.scene_rows(obs["obs"].view(2, 30)))
    assert env.single_observation_space["state"].shape == (30,)


def test_private_rng_leaves_the_global_ones_alone_and_two_instances_agree():
    def steps(env, generator, count=6):
        return [env.step(env.random_actions(generator))[0]["obs"] for _ in range(count)]

    torch.manual_seed(123)
    global_states = torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate()
    first = make_envs("navigation", 2, seed=7, backend="vmas", max_steps=3)
    second = make_envs("navigation", 2, seed=7, backend="vmas", max_steps=3)
    other = make_envs("navigation", 2, seed=8, backend="vmas", max_steps=3)
    # interleaved with each other and with a VMAS env of the user's: no instance draws from another's stream
    first_obs = [first.reset()[0]["obs"]]
    raw = vmas.make_env("navigation", num_envs=2, seed=0)
    second_obs = [second.reset()[0]["obs"]]
    raw.reset()
    first_obs += steps(first, torch.Generator().manual_seed(1))
    second_obs += steps(second, torch.Generator().manual_seed(1))
    assert torch.equal(torch.stack(first_obs), torch.stack(second_obs))
    assert not torch.equal(first_obs[0], other.reset()[0]["obs"])
    assert torch.equal(torch.get_rng_state(), global_states[0])
    assert np.array_equal(np.random.get_state()[1], global_states[1]) and random.getstate() == global_states[2]
    # reset(seed) starts the same episodes again
    assert torch.equal(first.reset(seed=7)[0]["obs"], first_obs[0])


def test_a_users_vmas_env_keeps_its_stream_beside_an_adapter():
    def resets(interleave: bool) -> list[torch.Tensor]:
        raw = vmas.make_env("navigation", num_envs=2, seed=0)
        out = []
        for _ in range(3):
            if interleave:
                make_envs("navigation", 2, seed=1, backend="vmas", max_steps=3).reset()
            out.append(raw.reset()[0])
        return out

    assert all(torch.equal(a, b) for a, b in zip(resets(False), resets(True), strict=True))


def test_render_draws_each_scene_on_its_rows():
    env = make_envs("navigation", 3, seed=0, backend="vmas", max_steps=5, n_agents=2)
    env.reset()
    frames = env.render()
    assert env.can_render and not env.can_draw
    assert frames.shape == (6, 160, 160, 3) and frames.dtype == torch.uint8 and frames.device.type == "cpu"
    assert torch.equal(frames[0], frames[1]) and not torch.equal(frames[0], frames[2])
    colour = torch.tensor([round(c * 255) for c in env.vmas_env.agents[0].color[:3]], dtype=torch.uint8)
    assert ((frames[0] == colour).all(-1)).sum() > 20  # agent 0's disc
    assert (frames[0] == 255).all(-1).float().mean() > 0.5  # on white


def test_errors():
    with pytest.raises(ValueError, match=r"same action space.*speaker_0.*listener_0"):
        make_envs("simple_speaker_listener", 2, backend="vmas", max_steps=5)
    env = make_envs("balance", 2, seed=0, backend="vmas", max_steps=5)
    env.reset()
    with pytest.raises(ValueError, match=r"shape \(6, 2\)"):
        env.step(torch.zeros(2, 2))  # one action per scene instead of per row
    with pytest.raises(ValueError, match="max_steps"):
        make_envs("balance", 2, backend="vmas", max_steps=0)
    with pytest.raises(TypeError, match="continuous_actions"):
        make_envs("balance", 2, backend="vmas", continuous_actions="no")
    with pytest.warns(UserWarning, match="infinite horizon"):
        make_envs("wheel", 1, backend="vmas")


def test_state_dict_restarts_fresh():
    env = make_envs("balance", 2, seed=0, backend="vmas", max_steps=5)
    env.reset()
    state = env.state_dict()
    assert state["restorable"] is False and state["env_id"] == "balance"
    with pytest.warns(UserWarning, match="restarts"):
        env.load_state_dict(state)
    with pytest.raises(ValueError, match="env id"):
        make_envs("navigation", 2, seed=0, backend="vmas", max_steps=5).load_state_dict(state)


def test_ppo_builds_and_fits_two_steps_on_vmas():
    from rl_lightning import PPOModule
    from tests.quiet_trainer import quiet_fit

    module = PPOModule(
        env_id="balance", env_backend="vmas", num_envs=4, num_steps_per_rollout=8, env_kwargs={"max_steps": 20}, seed=0
    )
    quiet_fit(module, 2)
    assert module.source.envs.num_envs == 12  # 4 scenes x 3 agents
    assert module.env_steps == 4 * 8  # a frame per scene per step (VMAS's and BenchMARL's count), not per agent row
