"""DQN on the probe environments reaches their exact Q-values (the seeds' tolerances)."""

import lightning as L
import pytest
import torch
from probe_settings import DQN_PROBE_LEARNING_STARTS, DQN_PROBE_UPDATES, DQN_PROBES, dqn_probe_module


@pytest.mark.parametrize("probe", sorted(DQN_PROBES))
def test_dqn_learns_probe_q_values(probe):
    obs, expected, tolerance = DQN_PROBES[probe]
    module = dqn_probe_module(probe)
    trainer = L.Trainer(
        max_steps=DQN_PROBE_UPDATES,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module)
    assert module.env_steps == DQN_PROBE_LEARNING_STARTS + DQN_PROBE_UPDATES * 4
    with torch.no_grad():
        q_values = module.q_network(torch.tensor(obs))
    torch.testing.assert_close(q_values, torch.tensor(expected), atol=tolerance, rtol=0)
