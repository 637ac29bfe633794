"""MuJoCo through the adapter (the ``mujoco`` extra): SAC trains on Hopper-v5 and acts in its bounds."""

import lightning as L
import pytest
import torch

pytest.importorskip("mujoco")

from rl_lightning import SACModule


def test_sac_trains_a_few_hundred_steps_on_hopper_v5():
    module = SACModule(
        env_id="Hopper-v5",
        num_envs=2,
        buffer_size=2_000,
        batch_size=64,
        learning_starts=200,
        steps_per_epoch=100,
        hidden_sizes=(32, 32),
    )
    assert type(module.make_envs(1, 0)).__name__ == "GymnasiumVectorEnv"
    assert module.obs_shape == (11,) and module.action_shape == (3,)
    trainer = L.Trainer(max_steps=300, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(module)
    assert module.env_steps == 200 + 300 * 2 and module.source.buffer.size == 800
    assert all(torch.isfinite(p).all() for p in module.parameters())
    actions = module.act(torch.randn(5, 11) * 10, greedy=True)
    assert actions.shape == (5, 3) and (actions.abs() <= 1).all()


def test_the_halfcheetah_config_fits_a_few_updates(tmp_path, monkeypatch):
    import sys
    from pathlib import Path

    from rl_lightning.cli import make_cli

    monkeypatch.setattr(sys, "argv", ["rl-lightning"])  # not pytest's command line
    config = Path(__file__).resolve().parents[2] / "configs" / "sac_halfcheetah.yaml"
    overrides = ["--model.init_args.buffer_size=1000", "--model.init_args.learning_starts=100"]
    cli = make_cli(
        [
            "fit",
            "--config",
            str(config),
            *overrides,
            "--trainer.max_steps=3",
            "--trainer.enable_progress_bar=false",
            f"--trainer.default_root_dir={tmp_path}",
        ]
    )
    assert cli.model.hparams.env_id == "HalfCheetah-v5" and cli.model.env_steps == 103
