"""configs/{mappo,ippo}_vmas_*.yaml and mappo_simple_spread.yaml (BenchMARL's settings for IPPO / MAPPO on VMAS and
PettingZoo's MPE): each names every PPOModule argument, builds its multi-agent env and trains a few updates at tiny
sizes; MAPPO's critic reads the scene's state and IPPO's what its actor reads."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rl_lightning.cli import main, make_cli

ROOT = Path(__file__).resolve().parents[1]
MARL_CONFIGS = ["mappo_vmas_balance", "ippo_vmas_balance", "mappo_vmas_navigation", "mappo_simple_spread"]
TINY = ["--model.num_envs=2", "--model.num_steps_per_rollout=8", "--model.num_minibatches=2", "--model.update_epochs=1"]


def _config(name: str) -> dict:
    return yaml.safe_load((ROOT / "configs" / f"{name}.yaml").read_text())


@pytest.mark.parametrize("name", MARL_CONFIGS)
def test_each_marl_config_names_every_argument_and_fits_a_few_updates(name, tmp_path, capsys):
    pytest.importorskip("vmas")
    pytest.importorskip("mpe2")
    with pytest.raises(SystemExit):
        main(["fit", "--model", "PPOModule", "--print_config"])
    defaults = yaml.safe_load(capsys.readouterr().out)["model"]["init_args"]
    args = _config(name)["model"]["init_args"]
    assert args.keys() == defaults.keys()
    # with a small evaluation and no video (200 scenes of 100 steps, and a clip of 100 frames, take seconds here)
    config = _config(name)
    config["trainer"]["callbacks"] = [
        callback for callback in config["trainer"]["callbacks"] if not callback["class_path"].endswith("VideoLogger")
    ]
    for callback in config["trainer"]["callbacks"]:
        if callback["class_path"].endswith("Evaluation"):
            callback["init_args"]["num_eval_episodes"] = 2
    small = tmp_path / f"{name}.yaml"
    small.write_text(yaml.safe_dump(config))
    cli = make_cli(
        [
            "fit",
            "--config",
            str(small),
            *TINY,
            "--trainer.max_steps=4",
            "--trainer.enable_progress_bar=false",
            "--trainer.default_root_dir",
            str(tmp_path),
        ]
    )
    module = cli.model
    assert module.env_steps == 2 * 2 * 8  # two rollouts of 2 scenes x 8 steps: frames, not agent rows
    assert module.source.envs.num_envs == 2 * module.num_agents
    critic_keys = set(module.model.critic.encoder[0].shapes)
    actor_keys = set(module.model.actor.encoder[0].shapes)
    assert actor_keys == {"obs", "agent_id"}  # decentralised execution
    assert critic_keys == ({"state", "agent_id"} if name.startswith("mappo") else {"obs", "agent_id"})


def test_the_marl_configs_carry_benchmarl_s_settings():
    for name in MARL_CONFIGS:
        args = _config(name)["model"]["init_args"]
        assert (args["lr"], args["adam_eps"], args["clip_coef"], args["ent_coef"], args["max_grad_norm"]) == (
            5e-5,
            1e-6,
            0.2,
            0.0,
            5.0,
        )
        assert args["gae_lambda"] == 0.9 and args["vf_coef"] == 2.0 and args["norm_adv"] is False
        assert args["update_epochs"] * args["num_minibatches"] == 45  # BenchMARL's minibatch updates per batch
        frames_per_rollout = args["num_envs"] * args["num_steps_per_rollout"]
        if "vmas" in name:
            assert frames_per_rollout == 60_000 and args["gamma"] == 0.9
        else:
            assert frames_per_rollout == 6_000 and args["gamma"] == 0.99
