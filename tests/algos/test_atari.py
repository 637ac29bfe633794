"""An Atari id through the gymnasium adapter and the CNN encoder: a smoke test of a few updates."""

import lightning as L
import torch

from rl_lightning import DQNModule, PPOModule
from rl_lightning.nets import ImageEncoder


def _fit(module, max_steps):
    trainer = L.Trainer(
        max_steps=max_steps,
        log_every_n_steps=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    before = [p.detach().clone() for p in module.parameters()]
    trainer.fit(module)
    changed = any(not torch.equal(a, b) for a, b in zip(before, module.parameters(), strict=True))
    return trainer, changed


def test_ppo_trains_a_few_updates_on_pong_pixels():
    """ALE/Pong-v5 (210 x 160 RGB uint8): Nature-DQN CNN, uint8 rollouts, finite losses."""
    module = PPOModule(env_id="ALE/Pong-v5", num_envs=2, num_steps_per_rollout=8, num_minibatches=2, update_epochs=1)
    assert isinstance(module.model.actor.encoder, ImageEncoder)
    trainer, changed = _fit(module, max_steps=4)
    assert changed and module.env_steps == 2 * 2 * 8
    assert module.source.collection.rollout.obs.dtype == torch.uint8
    assert all(torch.isfinite(trainer.callback_metrics[f"losses/{name}"]) for name in ("policy_loss", "value_loss"))


def test_dqn_trains_a_few_updates_on_grey_pong_frames():
    """obs_type="grayscale" gives (210, 160) uint8 frames: one channel into the CNN, a uint8 buffer."""
    module = DQNModule(
        env_id="ALE/Pong-v5",
        env_kwargs={"obs_type": "grayscale"},
        num_envs=2,
        buffer_size=100,
        batch_size=8,
        learning_starts=8,
        steps_per_epoch=3,
    )
    assert isinstance(module.q_network.encoder, ImageEncoder) and module.obs_shape == (210, 160)
    trainer, changed = _fit(module, max_steps=3)
    assert changed and module.source.buffer.obs.dtype == torch.uint8
    assert torch.isfinite(trainer.callback_metrics["losses/td_loss"])
