"""DQN on the probe environments reaches their exact Q-values (the seeds' tolerances)."""

import lightning as L
import pytest
import torch
from probe_settings import DQN_PROBE_LEARNING_STARTS, DQN_PROBE_UPDATES, DQN_PROBES, dqn_probe_module

# Every test here asserts a learning threshold (run them alone: pytest -m learning).
pytestmark = pytest.mark.learning


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


def test_dqn_learns_image_probe5_through_the_cnn_within_1e_2():
    """ImageProbe5 (Probe5 seen as a 36x36 RGB image): the Nature-DQN encoder is picked, the
    buffer keeps uint8 pixels, and Q(image of obs 0) = [1, -1], Q(image of obs 1) = [-1, 1]."""
    from rl_lightning.envs.probes import ImageProbe5
    from rl_lightning.nets import ImageEncoder

    module = dqn_probe_module(5, env_id="ImageProbe5-v0")
    assert isinstance(module.q_network.encoder, ImageEncoder)
    trainer = L.Trainer(
        max_steps=300, logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False
    )
    trainer.fit(module)
    assert module.source.buffer.obs.dtype == torch.uint8
    with torch.no_grad():
        q_values = module.q_network(ImageProbe5._image(torch.tensor([[0.0], [1.0]])))
    torch.testing.assert_close(q_values, torch.tensor([[1.0, -1.0], [-1.0, 1.0]]), atol=1e-2, rtol=0)
