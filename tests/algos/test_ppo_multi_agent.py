"""PPO on agents as rows (IPPO / MAPPO): absent agents masked out of the losses and the bootstrap, the agent
networks (shared with the agent id, or separate), the decentralised actor's keys, and the per-agent and team charts.
The envs themselves are tested in tests/envs/test_multi_agent.py."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import lightning as L
import pytest
import torch

from rl_lightning import DQNModule, PPOModule, VPGModule
from rl_lightning.data.episodes import EpisodeTracker
from rl_lightning.envs import registry
from rl_lightning.envs.multi_agent import MultiAgentVectorEnv, multi_agent_space
from rl_lightning.envs.registry import register
from rl_lightning.envs.spaces import TensorTree
from rl_lightning.losses import (
    compute_approx_kl,
    compute_clip_fraction,
    compute_ppo_loss,
    compute_ppo_policy_loss,
    compute_ppo_value_loss,
    normalize_advantages,
    weighted_mean,
)
from rl_lightning.nets.agents import SeparateAgentEncoders, active_weights

EPISODE = 4  # steps per episode of LeavingAgents
LEAVES_AFTER = 2  # agent_1 takes this many steps, then leaves its scene


class LeavingAgents(MultiAgentVectorEnv):
    """Two agents; agent_0 stays the whole episode of 4 steps, agent_1 leaves after 2. Each present agent gets
    reward 1 per step; "obs" is the step index."""

    def __init__(self, num_scenes: int, seed: int | None = None, device: Any = "cpu"):
        self.single_observation_space = multi_agent_space(1, 2, 1, active=True)
        self.single_action_space = gym.spaces.Discrete(2)
        super().__init__(num_scenes, ["agent_0", "agent_1"], seed, device)
        self._t = torch.zeros(num_scenes, dtype=torch.int64)

    def _observe(self, t: torch.Tensor) -> TensorTree:
        active = torch.stack([torch.ones_like(t, dtype=torch.bool), t < LEAVES_AFTER], dim=1)  # (scenes, agents)
        obs = torch.where(active, t.unsqueeze(1).float(), 0.0).unsqueeze(-1)
        return self._rows(obs, t.float().unsqueeze(1), active=active.reshape(-1, 1))

    def _reset_all(self) -> TensorTree:
        self._t = torch.zeros(self.num_scenes, dtype=torch.int64)
        return self._observe(self._t)

    def _step(self, actions: torch.Tensor) -> tuple[Any, ...]:
        present = torch.stack([torch.ones_like(self._t, dtype=torch.bool), self._t < LEAVES_AFTER], dim=1)
        reward = present.float().reshape(-1)
        self._t = self._t + 1
        final = self._observe(self._t)
        done = self._t >= EPISODE
        self._t = torch.where(done, 0, self._t)
        terminated = self.scene_rows(done)
        return self._observe(self._t), reward, terminated, torch.zeros_like(terminated), {"final_observation": final}


@pytest.fixture(autouse=True)
def _leaving_agents_registered():
    """``"LeavingAgents-v0"`` for this file's tests only (registered at import, it would join the env contract
    tests that other files of the same worker parametrise over every registered id)."""
    register("LeavingAgents-v0", lambda num_envs, seed=None, device="cpu": LeavingAgents(num_envs, seed, device))
    yield
    del registry._REGISTRY["LeavingAgents-v0"]


def quiet_trainer(**kwargs: Any) -> L.Trainer:
    return L.Trainer(
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **kwargs,
    )


# -- the weighted loss terms --------------------------------------------------------------------------------------


def test_weighted_loss_terms_equal_the_plain_ones_over_the_weighted_entries():
    generator = torch.Generator().manual_seed(0)
    logprobs, old, advantages, values, old_values, returns, entropy = torch.randn(7, 12, generator=generator)
    keep = torch.tensor([1, 0, 1, 1, 0, 1, 1, 1, 0, 1, 1, 0], dtype=torch.bool)
    weights = keep.float()
    part = [tensor[keep] for tensor in (logprobs, old, advantages, values, old_values, returns, entropy)]
    pairs = [
        (compute_ppo_policy_loss(logprobs, old, advantages, 0.2, weights), compute_ppo_policy_loss(*part[:3], 0.2)),
        (
            compute_ppo_value_loss(values, old_values, returns, 0.2, weights),
            compute_ppo_value_loss(*part[3:6], 0.2),
        ),
        (compute_ppo_value_loss(values, old_values, returns, None, weights), compute_ppo_value_loss(*part[3:6])),
        (compute_approx_kl(logprobs, old, weights), compute_approx_kl(part[0], part[1])),
        (compute_clip_fraction(logprobs, old, 0.1, weights), compute_clip_fraction(part[0], part[1], 0.1)),
        (
            compute_ppo_loss(torch.tensor(0.3), torch.tensor(0.7), entropy, 0.5, 0.01, weights),
            compute_ppo_loss(torch.tensor(0.3), torch.tensor(0.7), part[6], 0.5, 0.01),
        ),
        (normalize_advantages(advantages, weights=weights)[keep], normalize_advantages(part[2])),
    ]
    for weighted, plain in pairs:
        torch.testing.assert_close(weighted, plain)
    # weights of ones are the plain mean; no weight at all counts nothing (0, not NaN)
    torch.testing.assert_close(weighted_mean(values, torch.ones(12)), values.mean())
    assert weighted_mean(values, torch.zeros(12)).item() == 0.0


def test_active_weights_read_the_active_key():
    tree = TensorTree({"obs": torch.zeros(3, 2), "active": torch.tensor([[True], [False], [True]])})
    assert active_weights(tree).tolist() == [1.0, 0.0, 1.0]
    assert active_weights(torch.zeros(3, 2)) is None
    assert active_weights(TensorTree({"obs": torch.zeros(3, 2)})) is None


# -- absent agents in the rollout ------------------------------------------------------------------------------------


def test_an_absent_agent_bootstraps_from_zero_and_its_absent_steps_have_no_advantage():
    module = PPOModule(env_id="LeavingAgents-v0", num_envs=2, num_steps_per_rollout=8, num_minibatches=2, gamma=0.9)
    source = module.make_source(module.make_envs(2, 0))
    collection = source.collect()
    rollout, advantages = collection.rollout, collection.advantages  # rows (scene, agent), steps
    active = rollout.obs["active"].squeeze(-1)
    with torch.no_grad():
        raw_values = module.model.value(rollout.obs)
    leaver = torch.arange(4) % 2 == 1
    # agent_1 is absent at steps 2, 3 of each episode of 4: its value there is 0, and so is its advantage
    assert active[leaver].tolist() == [[True, True, False, False] * 2] * 2
    assert bool((rollout.values[~active] == 0).all()) and bool((advantages[~active] == 0).all())
    torch.testing.assert_close(rollout.values[active], raw_values[active])
    # its last present step (t = 1) bootstraps from 0: A = r - V(s), though its episode goes on
    for step in (1, 5):
        torch.testing.assert_close(advantages[leaver, step], 1.0 - raw_values[leaver, step])
    # agent_0's GAE runs through the whole episode as usual: A_3 = 1 - V_3 (terminated), A_2 = delta_2 + g l A_3
    stayer = ~leaver
    delta_2 = 1.0 + 0.9 * raw_values[stayer, 3] - raw_values[stayer, 2]
    torch.testing.assert_close(advantages[stayer, 3], 1.0 - raw_values[stayer, 3])
    torch.testing.assert_close(advantages[stayer, 2], delta_2 + 0.9 * 0.95 * advantages[stayer, 3])


def test_absent_agents_are_left_out_of_the_ppo_loss():
    from rl_lightning.algos.ppo import ppo_minibatch_loss
    from rl_lightning.data.actor_critic import PPOBatch

    module = PPOModule(env_id="LeavingAgents-v0", num_envs=2, num_steps_per_rollout=8, num_minibatches=1)
    source = module.make_source(module.make_envs(2, 0))
    collection = source.collect()
    batch = PPOBatch(*collection.entries)  # every (row, step) entry
    active = batch.obs["active"].squeeze(-1)
    loss, metrics = ppo_minibatch_loss(module.model, batch, 0.2, True, 0.5, 0.01, True)
    # the same loss from the present entries alone, with the "active" key dropped (every entry counts)
    present = PPOBatch(*(field[active] for field in batch))
    present = present._replace(obs=TensorTree({key: leaf for key, leaf in present.obs.items() if key != "active"}))
    expected, expected_metrics = _loss_without_active_key(module, present)
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(metrics["losses/entropy"], expected_metrics["losses/entropy"])


def _loss_without_active_key(module: PPOModule, batch: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``ppo_minibatch_loss`` of a batch whose observations lack "active": the networks read it, so it is put back as
    all True for the forward pass, while the loss's weights (absent) count every entry."""
    from rl_lightning.algos import ppo

    model = module.model
    obs_with_active = TensorTree({**batch.obs, "active": torch.ones(len(batch.actions), 1, dtype=torch.bool)})
    logprobs, entropy, values = model.evaluate(obs_with_active, batch.actions)
    advantages = ppo.normalize_advantages(batch.advantages)
    policy_loss = ppo.compute_ppo_policy_loss(logprobs, batch.logprobs, advantages, 0.2)
    value_loss = ppo.compute_ppo_value_loss(values, batch.values, batch.returns, 0.2)
    loss = ppo.compute_ppo_loss(policy_loss, value_loss, entropy, 0.5, 0.01)
    return loss, {"losses/entropy": entropy.mean()}


def test_algorithms_that_do_not_mask_absent_agents_refuse_such_envs():
    for module_class in (VPGModule, DQNModule):
        with pytest.raises(ValueError, match=r"does not mask absent agents.*PPOModule"):
            module_class(env_id="LeavingAgents-v0", num_envs=2)


# -- the networks --------------------------------------------------------------------------------------------------


def test_a_multi_agent_actor_reads_its_own_observation_and_id_and_mappo_s_critic_the_state():
    ippo = PPOModule(env_id="RoleAssignment-v0", num_envs=2)
    # (gymnasium's Dict sorts its keys)
    assert list(ippo.policy_observation_space.spaces) == ["agent_id", "obs"]  # decentralised: no "state"
    assert list(ippo.model.critic.encoder[0].shapes) == ["agent_id", "obs"]  # IPPO: the actor's keys
    mappo = PPOModule(env_id="RoleAssignment-v0", num_envs=2, critic_keys=["state", "agent_id"])
    assert list(mappo.model.actor.encoder[0].shapes) == ["agent_id", "obs"]
    assert list(mappo.model.critic.encoder[0].shapes) == ["agent_id", "state"]
    # the act() of a deployed policy takes the agent's keys only
    obs = {"obs": torch.zeros(5, 2), "agent_id": torch.eye(3)[[0, 1, 2, 0, 1]]}
    assert mappo.act(obs).shape == (5,)


def test_separate_agent_networks_give_each_agent_its_own_parameters():
    module = PPOModule(env_id="RoleAssignment-v0", num_envs=2, agent_networks="separate", seed=3)
    encoder = module.model.actor.encoder
    assert isinstance(encoder, SeparateAgentEncoders) and len(encoder.trunks) == 3
    obs = TensorTree({"obs": torch.randn(6, 2), "agent_id": torch.eye(3)[[0, 1, 2, 0, 1, 2]]})
    before = module.model.actor(obs)
    with torch.no_grad():
        for parameter in encoder.trunks[1].parameters():
            parameter.add_(1.0)
    after = module.model.actor(obs)
    agent_1 = torch.tensor([False, True, False, False, True, False])
    torch.testing.assert_close(after[~agent_1], before[~agent_1])  # the other agents' outputs are untouched
    assert not torch.allclose(after[agent_1], before[agent_1])
    # each agent has its own output weights too: the head's columns of its block (and of its one-hot)
    head, width = module.model.actor.head, 64
    used = []
    for agent in range(3):
        module.model.zero_grad()
        module.model.actor(obs[torch.arange(6) % 3 == agent]).sum().backward()
        used.append(head.weight.grad.abs().sum(dim=0) > 0)
    for agent in range(3):
        block = torch.zeros(3 * width + 3, dtype=torch.bool)
        block[agent * width : (agent + 1) * width] = True
        block[3 * width + agent] = True
        assert bool(used[agent][~block].any()) is False and bool(used[agent][block].any())


def test_agent_networks_errors():
    with pytest.raises(ValueError, match="agent_networks"):
        PPOModule(env_id="RoleAssignment-v0", num_envs=2, agent_networks="independent")
    with pytest.raises(ValueError, match="has one agent"):
        PPOModule(env_id="CartPole-v1", num_envs=2, agent_networks="separate")
    with pytest.raises(ValueError, match="no network, no recurrent core"):
        PPOModule(env_id="RoleAssignment-v0", num_envs=4, agent_networks="separate", recurrent="gru")
    with pytest.raises(ValueError, match="agent_id"):
        PPOModule(env_id="RoleAssignment-v0", num_envs=2, agent_networks="separate", actor_keys=["obs"])


# -- the charts ----------------------------------------------------------------------------------------------------


def test_episode_tracker_sums_each_agent_s_returns():
    rewards = torch.tensor([[1.0, 2.0, 3.0], [10.0, 20.0, 30.0], [4.0, 5.0, 6.0], [40.0, 50.0, 60.0]])
    dones = torch.tensor([[False, True, False], [False, True, False], [False, False, True], [False, False, True]])
    block, steps = EpisodeTracker(4, num_agents=2), EpisodeTracker(4, num_agents=2)
    block.update(rewards, dones)
    for t in range(3):
        steps.update(rewards[:, t], dones[:, t])
    for tracker in (block, steps):
        finished = tracker.pop()
        # episodes: scene 0 ends at t=1 (agents 3 and 30), scene 1 at t=2 (15 and 150)
        assert finished.tolist() == [198.0, 10.0, 4.0, 18.0, 180.0]
        assert tracker.pop().tolist() == [0.0] * 5
    assert EpisodeTracker(4).pop().shape == (3,)  # a single-agent env's as before


def test_ppo_charts_each_agent_s_return_and_the_team_s(tmp_path):
    from lightning.pytorch.loggers import CSVLogger

    module = PPOModule(env_id="LeavingAgents-v0", num_envs=2, num_steps_per_rollout=8, num_minibatches=2)
    trainer = L.Trainer(
        max_steps=8,
        logger=CSVLogger(tmp_path),
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module)
    metrics = trainer.logged_metrics
    # agent_0 earns 4 per episode, agent_1 2 (it leaves after 2 steps); the team 6; the mean agent 3
    assert metrics["charts/agent_returns/agent_0"].item() == 4.0
    assert metrics["charts/agent_returns/agent_1"].item() == 2.0
    assert metrics["charts/team_return"].item() == 6.0
    assert metrics["charts/episodic_return"].item() == 3.0
    assert metrics["charts/episodic_length"].item() == EPISODE


def test_env_steps_count_a_frame_per_scene_as_the_run_plans_them():
    module = PPOModule(env_id="RoleAssignment-v0", num_envs=2, num_steps_per_rollout=8, num_minibatches=2)
    updates = 2 * module.training_steps_per_collection  # two rollouts
    quiet_trainer(max_steps=updates).fit(module)
    assert module.source.envs.num_envs == 6  # 2 scenes x 3 agents
    assert module.env_steps == 2 * 2 * 8 == module.planned_env_steps(updates)  # scenes x steps x rollouts
    # so the learning rate's linear decay ends where the run does
    assert module.trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(module.hparams.lr / 2)
