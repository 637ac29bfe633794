"""Graph safety, proven on the CPU (issue 48, item 4): every algorithm's update and the on-policy collection steps
(fused with the env's) compile with ``fullgraph=True`` on native envs, so a graph break (what would keep the CUDA
path from one captured graph) is a test failure here, every day, though CI has no GPU. (The native envs' steps
compile with ``fullgraph=True`` already: ``rl_lightning.envs._classic_control``.)"""

import pytest
import torch
from quiet_trainer import quiet_trainer

from rl_lightning import DQNModule, PPOModule, SACModule, TD3Module, VPGModule
from rl_lightning.data.actor_critic import actor_critic_step
from rl_lightning.data.rollout import _noise_draw, policy_step

# (module, settings, the compiled functions: the update's loss, the on-policy collection fused with CartPole's step)
CASES = {
    "vpg": (
        VPGModule,
        dict(num_envs=4, num_steps_per_rollout=8),
        {"vpg_loss", "fused_collection_policy_acting_fused_step_CartPole"},
    ),
    "ppo": (
        PPOModule,
        dict(num_envs=4, num_steps_per_rollout=8, num_minibatches=2, update_epochs=1),
        {"ppo_minibatch_loss", "fused_collection_actor_critic_step_fused_step_CartPole"},
    ),
    "dqn": (DQNModule, dict(num_envs=2, learning_starts=16, batch_size=8), {"dqn_loss"}),
    "sac": (SACModule, dict(num_envs=2, learning_starts=16, batch_size=8, hidden_sizes=(8,)), {"sac_losses"}),
    # 4 updates: TD3's delayed actor step (every policy_delay=2) compiles too
    "td3": (TD3Module, dict(num_envs=2, learning_starts=16, batch_size=8, hidden_sizes=(8,)), {"td3_losses"}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_update_compiles_as_one_graph(name):
    cls, hparams, functions = CASES[name]
    # The loss with its backward pass as one graph (the whole update is split at backward by design: each side one
    # graph; the default compile=True runs it, tests/algos/test_compile_whole_update.py), and the on-policy
    # collection's fused steps (acting, CartPole's step, storing) as one graph.
    module = cls(compile={"fullgraph": True, "whole_update": False}, seed=1, **hparams)
    trainer = quiet_trainer(max_steps=4)
    trainer.fit(module)  # a graph break raises under fullgraph=True
    assert trainer.global_step == 4
    assert set(module.compile_seconds) == functions


@pytest.mark.parametrize(
    ("cls", "env_id"), [(VPGModule, "CartPole-v1"), (PPOModule, "CartPole-v1"), (PPOModule, "Pendulum-v1")]
)
def test_the_acting_step_compiles_as_one_graph_and_samples_as_eagerly(cls, env_id):
    """The collection's acting step (forward pass and sampling from drawn noise: ``policy_step``, PPO's
    ``actor_critic_step`` with its observation normaliser; compiled on CUDA with ``compile=True``) with
    ``fullgraph=True`` on the CPU: the same actions, log-probabilities (and values) as the eager step."""
    if cls is VPGModule:
        module = cls(env_id=env_id, num_envs=8, seed=2)
        step, networks, head = policy_step, (module.policy_network,), module.policy_network.head
    else:
        module = cls(env_id=env_id, num_envs=8, normalize_obs=True, seed=2)
        step, networks, head = actor_critic_step, (module.model, module.obs_normalizer), module.model.actor.head
    obs, _ = module.make_envs(8, seed=2).reset()
    draw, shape = _noise_draw(head)
    noise = draw((8, *shape), generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        compiled = torch.compile(step, fullgraph=True)(*networks, obs, noise)
        eager = step(*networks, obs, noise)
    for got, expected in zip(compiled, eager, strict=True):
        torch.testing.assert_close(got, expected)
