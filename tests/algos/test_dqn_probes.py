"""DQN on the probe environments reaches their exact Q-values (the seeds' tolerances)."""

import lightning as L
import pytest
import torch

from rl_lightning.algos.dqn import DQNModule

GAMMA = 0.99
# env id, probe observations, expected Q-values (num_obs, num_actions), tolerance
PROBES = {
    1: ([[0.0]], [[1.0]], 5e-4),
    2: ([[-1.0], [1.0]], [[-1.0], [1.0]], 5e-4),
    3: ([[0.0], [1.0]], [[GAMMA], [1.0]], 5e-4),
    4: ([[0.0]], [[-1.0, 1.0]], 5e-4),
    5: ([[0.0], [1.0]], [[1.0, -1.0], [-1.0, 1.0]], 1e-3),
}


@pytest.mark.parametrize("probe", sorted(PROBES))
def test_dqn_learns_probe_q_values(probe):
    obs, expected, tolerance = PROBES[probe]
    module = DQNModule(
        env_id=f"Probe{probe}-v0",
        num_envs=4,
        buffer_size=500,
        batch_size=128,
        learning_starts=100,
        steps_per_train=1,
        gamma=GAMMA,
        lr=1e-3,
        target_update_env_steps=80,  # every 20 training steps of 4 env steps
        epsilon_start=1.0,
        epsilon_end=0.5,  # probes 4 and 5 need both actions in the buffer to the end
        exploration_fraction=0.5,
        seed=0,
    )
    trainer = L.Trainer(
        max_steps=600,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module)
    assert module.env_steps == 100 + 600 * 4
    with torch.no_grad():
        q_values = module.q_network(torch.tensor(obs))
    torch.testing.assert_close(q_values, torch.tensor(expected), atol=tolerance, rtol=0)
