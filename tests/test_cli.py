import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

import rl_lightning.__main__
from rl_lightning.cli import main, make_cli

ROOT = Path(__file__).resolve().parents[1]
VPG_CONFIG = ROOT / "configs" / "vpg_cartpole.yaml"
DQN_CONFIG = ROOT / "configs" / "dqn_cartpole.yaml"
PPO_CONFIGS = sorted(
    path for path in (ROOT / "configs").glob("ppo_*.yaml") if "atari" not in path.stem and "mujoco" not in path.stem
)
# 2 optimizer steps of 8 envs x 20 steps: a second or two.
TINY_VPG = [
    "--trainer.max_steps=2",
    "--model.init_args.num_envs=8",
    "--model.init_args.num_steps_per_rollout=20",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
]
TINY_DQN = [
    "--trainer.max_steps=5",
    "--model.init_args.num_envs=4",
    "--model.init_args.buffer_size=64",
    "--model.init_args.batch_size=8",
    "--model.init_args.learning_starts=8",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
]


@pytest.fixture(autouse=True)
def _no_pytest_argv(monkeypatch):
    # LightningCLI warns when given both args and a command line (pytest's).
    monkeypatch.setattr(sys, "argv", ["rl-lightning"])
    yield
    torch.set_num_threads(1)


def _printed_config(args: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--print_config"])
    assert exit_info.value.code in (0, None)
    return capsys.readouterr().out


def _version_0(root: Path, run: str = "VPG-CartPole-v1") -> Path:
    return root / "lightning_logs" / run / "version_0"


def test_python_m_rl_lightning_fits_the_vpg_config_and_saves_checkpoint_and_config(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "rl_lightning",
            "fit",
            "--config",
            str(VPG_CONFIG),
            *TINY_VPG,
            f"--trainer.default_root_dir={tmp_path}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = _version_0(tmp_path)
    # The config's ModelCheckpoint keeps the best greedy evaluation and the last state.
    checkpoints = sorted(path.name for path in (run_dir / "checkpoints").glob("*.ckpt"))
    assert len(checkpoints) == 2 and "last.ckpt" in checkpoints and checkpoints[0].startswith("best-")
    checkpoint = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    assert checkpoint["rl_lightning"]["env_steps"] == 2 * 8 * 20
    assert checkpoint["hyper_parameters"]["num_envs"] == 8
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["model"]["class_path"] == "rl_lightning.VPGModule"
    assert saved["model"]["init_args"]["num_steps_per_rollout"] == 20
    assert saved["model"]["init_args"]["lr"] == 0.02  # from the config file
    assert saved["trainer"]["max_steps"] == 2
    assert saved["trainer"]["log_every_n_steps"] == 1  # the CLI's Trainer default


def test_print_config_has_the_overrides_and_round_trips(tmp_path, capsys):
    overrides = ["--model.init_args.num_envs=8", "--model.init_args.gamma=0.9", "--trainer.max_steps=7"]
    printed = _printed_config(["fit", "--config", str(VPG_CONFIG), *overrides], capsys)
    config = yaml.safe_load(printed)
    assert config["model"]["class_path"] == "rl_lightning.VPGModule"
    init_args = config["model"]["init_args"]
    assert (init_args["num_envs"], init_args["gamma"], init_args["num_steps_per_rollout"]) == (8, 0.9, 500)
    assert init_args["hidden_sizes"] == [120, 84]
    assert config["trainer"]["max_steps"] == 7
    assert config["trainer"]["accelerator"] == "cpu"
    assert config["num_threads"] == 1

    saved = tmp_path / "printed.yaml"
    saved.write_text(printed)
    assert _printed_config(["fit", "--config", str(saved)], capsys) == printed


@pytest.mark.parametrize(
    ("value", "expected"), [("true", True), ("false", False), ('{"backend": "aot_eager"}', {"backend": "aot_eager"})]
)
def test_compile_takes_a_bool_or_torch_compile_arguments(value, expected, capsys):
    printed = _printed_config(["fit", "--model", "DQNModule", f"--model.compile={value}"], capsys)
    assert yaml.safe_load(printed)["model"]["init_args"]["compile"] == expected


def test_dqn_config_round_trips(tmp_path, capsys):
    printed = _printed_config(["fit", "--config", str(DQN_CONFIG)], capsys)
    assert yaml.safe_load(printed)["model"]["class_path"].endswith("DQNModule")
    saved = tmp_path / "printed.yaml"
    saved.write_text(printed)
    assert _printed_config(["fit", "--config", str(saved)], capsys) == printed


@pytest.mark.parametrize("config_path", [VPG_CONFIG, DQN_CONFIG])
def test_each_config_sets_every_hyper_parameter_to_the_module_default(config_path, capsys):
    # The configs are the tuned defaults written out: the same as --model NAME with no config.
    config = yaml.safe_load(config_path.read_text())
    short_name = config["model"]["class_path"].rsplit(".", 1)[-1]
    defaults = yaml.safe_load(_printed_config(["fit", "--model", short_name], capsys))["model"]["init_args"]
    assert config["model"]["init_args"] == defaults


@pytest.mark.parametrize("config_name", ["ppo_cartpole", "ppo_acrobot", "ppo_pendulum", "ppo_cartpole_novel"])
def test_each_ppo_config_writes_out_every_hyper_parameter(config_name, capsys):
    # The PPO configs are tuned per env, so they differ from the defaults; each still names every argument.
    config = yaml.safe_load((ROOT / "configs" / f"{config_name}.yaml").read_text())
    defaults = yaml.safe_load(_printed_config(["fit", "--model", "PPOModule"], capsys))["model"]["init_args"]
    assert config["model"]["init_args"].keys() == defaults.keys()


def test_model_short_names_select_our_modules_and_nothing_else(capsys):
    printed = yaml.safe_load(_printed_config(["fit", "--model", "DQNModule"], capsys))
    assert printed["model"]["class_path"] in ("rl_lightning.DQNModule", "rl_lightning.algos.dqn.DQNModule")
    assert printed["model"]["init_args"]["buffer_size"] == 50_000

    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--model", "lightning.pytorch.demos.boring_classes.BoringModel"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert (
        "--model must be one of VPGModule, DQNModule, PPOModule, SACModule, TD3Module, BCModule, TD3BCModule, "
        "IQLModule, got lightning.pytorch" in err
    )


def test_dqn_config_fits_with_tiny_settings(tmp_path):
    cli = make_cli(["fit", "--config", str(DQN_CONFIG), *TINY_DQN, "--trainer.default_root_dir", str(tmp_path)])
    assert cli.trainer.global_step == 5
    assert cli.model.hparams.buffer_size == 64
    assert (_version_0(tmp_path, "DQN-CartPole-v1") / "config.yaml").is_file()
    assert (_version_0(tmp_path, "DQN-CartPole-v1") / "checkpoints" / "last.ckpt").is_file()


def test_fit_leaves_a_resume_point_on_sigterm_and_slurm_requeue_as_the_scripts_do(tmp_path):
    from rl_lightning.callbacks import CheckpointOnStop

    cli = make_cli(["fit", "--config", str(VPG_CONFIG), *TINY_VPG, "--trainer.default_root_dir", str(tmp_path)])
    assert sum(isinstance(callback, CheckpointOnStop) for callback in cli.trainer.callbacks) == 1
    assert cli.trainer.global_step == 2


def test_bf16_mixed_precision_fits_vpg_on_cpu(tmp_path):
    cli = make_cli(
        [
            "fit",
            "--config",
            str(VPG_CONFIG),
            *TINY_VPG,
            "--trainer.precision=bf16-mixed",
            f"--trainer.default_root_dir={tmp_path}",
        ]
    )
    assert cli.trainer.precision == "bf16-mixed"
    assert cli.trainer.global_step == 2
    assert cli.model.env_steps == 2 * 8 * 20
    assert torch.isfinite(cli.trainer.callback_metrics["losses/policy_objective"])


def test_fit_resumes_from_ckpt_path_with_the_checkpoints_hyper_parameters(tmp_path):
    root = f"--trainer.default_root_dir={tmp_path}"
    make_cli(["fit", "--config", str(VPG_CONFIG), *TINY_VPG, root])
    checkpoint = _version_0(tmp_path) / "checkpoints" / "last.ckpt"
    # No num_envs / num_steps_per_rollout given (no --config either, which gives them all): the checkpoint's.
    tiny_trainer = [arg for arg in TINY_VPG if arg.startswith("--trainer.") and "max_steps" not in arg]
    cli = make_cli(
        ["fit", "--model=VPGModule", *tiny_trainer, "--trainer.max_steps=4", root, f"--ckpt_path={checkpoint}"]
    )
    assert cli.model.hparams.num_envs == 8 and cli.model.hparams.lr == 0.02
    assert cli.trainer.global_step == 4
    assert cli.model.env_steps == 4 * 8 * 20


def test_num_threads_sets_torch_threads(tmp_path):
    make_cli(
        ["fit", "--config", str(VPG_CONFIG), *TINY_VPG, "--num_threads=2", "--trainer.default_root_dir", str(tmp_path)]
    )
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize(
    ("config_path", "override", "message"),
    [
        (VPG_CONFIG, "--model.init_args.num_envs=0", "error: num_envs must be >= 1, got 0\n"),
        (VPG_CONFIG, "--model.init_args.env_id=Nope-v0", "error: unknown env_id 'Nope-v0'"),
        (DQN_CONFIG, "--model.init_args.loss=l1", "error: loss must be one of 'mse', 'huber'; got 'l1'\n"),
    ],
)
def test_a_value_the_module_rejects_exits_2_with_its_message(config_path, override, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(config_path), override, f"--trainer.default_root_dir={tmp_path}"])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "lightning_logs").exists()


def test_fit_validate_and_test_are_the_subcommands(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["predict", "--config", str(VPG_CONFIG)])
    assert exit_info.value.code == 2
    assert "invalid choice: 'predict' (choose from 'fit', 'validate', 'test')" in capsys.readouterr().err


@pytest.mark.parametrize(("subcommand", "prefix"), [("validate", "eval"), ("test", "test")])
def test_validate_and_test_a_checkpoint_take_class_and_hyperparameters_from_it(tmp_path, subcommand, prefix, capsys):
    """`rl-lightning validate --ckpt_path X`: no --model or --config needed; the greedy policy runs
    RLModule.eval_episodes episodes on the checkpoint's env, prints one line and writes nothing."""
    root = ["--trainer.default_root_dir", str(tmp_path)]
    tiny = ["--model", "PPOModule", "--model.env_id", "Probe3-v0", "--model.num_envs", "4"]
    make_cli(["fit", *tiny, "--model.num_steps_per_rollout", "8", "--trainer.max_steps", "16", *root])
    [checkpoint] = tmp_path.glob("lightning_logs/PPO-Probe3-v0/version_0/checkpoints/*.ckpt")
    before = sorted(tmp_path.rglob("*"))
    capsys.readouterr()
    cli = make_cli([subcommand, "--ckpt_path", str(checkpoint), *root])
    assert type(cli.model).__name__ == "PPOModule" and cli.model.hparams.env_id == "Probe3-v0"
    assert cli.trainer.callback_metrics[f"{prefix}/episodic_return"] == 1.0
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        f"{subcommand}: greedy {prefix} return 1.0 +- 0.0, length 2.0, 32 episodes of PPOModule on Probe3-v0 "
        f"from {checkpoint}; nothing written"
    ]
    # Neither Lightning's results table, "Please add the following callbacks", "The dirpath has changed" nor
    # a new version_N with a config.yaml.
    assert "callbacks" not in err and "dirpath" not in err and "DataLoader" not in out
    assert sorted(tmp_path.rglob("*")) == before


def test_validate_without_a_model_or_checkpoint_says_what_is_needed(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["validate"])
    assert exit_info.value.code == 2
    assert "a model is required" in capsys.readouterr().err


def test_a_value_of_the_wrong_type_exits_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(VPG_CONFIG), "--model.init_args.num_envs=many"])
    assert exit_info.value.code == 2
    assert "num_envs" in capsys.readouterr().err


def test_console_script_and_python_m_run_the_same_main():
    assert 'rl-lightning = "rl_lightning.cli:main"' in (ROOT / "pyproject.toml").read_text()
    (entry_point,) = importlib.metadata.entry_points(group="console_scripts", name="rl-lightning")
    assert entry_point.load() is main
    assert rl_lightning.__main__.main is main


def test_ckpt_path_last_resumes_the_newest_run(tmp_path):
    root = f"--trainer.default_root_dir={tmp_path}"
    make_cli(["fit", "--config", str(VPG_CONFIG), *TINY_VPG, root])
    tiny_trainer = [arg for arg in TINY_VPG if "max_steps" not in arg]  # the same settings: the same run
    cli = make_cli(
        ["fit", "--config", str(VPG_CONFIG), *tiny_trainer, "--trainer.max_steps=3", root, "--ckpt_path=last"]
    )
    assert cli.trainer.global_step == 3
    assert cli.model.env_steps == 3 * 8 * 20


def test_ckpt_path_last_counts_a_config_value_equal_to_the_default_as_given(tmp_path, capsys):
    """A run with lr 1e-3; `--config C --ckpt_path last`, C saying lr: 0.0025 (PPOModule's default), is another
    run: exit 2 naming lr (it counted as not given, and the run went on with the checkpoint's 1e-3)."""
    root = f"--trainer.default_root_dir={tmp_path}"
    tiny = ["--model.init_args.num_envs=2", "--model.init_args.num_steps_per_rollout=8"]
    config = tmp_path / "ppo.yaml"
    text = (
        "model:\n  class_path: rl_lightning.PPOModule\n  init_args:\n    lr: {lr}\n"
        "trainer:\n  callbacks:\n    - class_path: lightning.pytorch.callbacks.ModelCheckpoint\n"
        "      init_args:\n        filename: last\n"
    )
    config.write_text(text.format(lr=0.001))
    make_cli(["fit", "--config", str(config), *tiny, "--trainer.max_steps=1", root])
    config.write_text(text.format(lr=0.0025))
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        make_cli(["fit", "--config", str(config), *tiny, "--trainer.max_steps=2", root, "--ckpt_path=last"])
    assert exit_info.value.code == 2
    assert "a run with other settings than the ones given: --model.init_args.lr 0.0025 (checkpoint: 0.001)." in (
        capsys.readouterr().err
    )
    config.write_text(text.format(lr=0.001))
    cli = make_cli(["fit", "--config", str(config), *tiny, "--trainer.max_steps=2", root, "--ckpt_path=last"])
    assert cli.trainer.global_step == 2 and cli.model.hparams.lr == 0.001


@pytest.mark.parametrize("config_path", PPO_CONFIGS, ids=lambda path: path.stem)
def test_each_ppo_config_fits_a_few_updates(config_path, tmp_path):
    """configs/ppo_{cartpole,acrobot,pendulum,cartpole_novel}.yaml parse, build their env and train (2 rollouts)."""
    config = yaml.safe_load(config_path.read_text())
    args = config["model"]["init_args"]
    updates = args["update_epochs"] * args["num_minibatches"]
    cli = make_cli(
        [
            "fit",
            "--config",
            str(config_path),
            f"--trainer.max_steps={2 * updates}",
            "--trainer.enable_progress_bar=false",
            "--trainer.default_root_dir",
            str(tmp_path),
        ]
    )
    assert cli.model.hparams.env_id == args["env_id"]
    assert cli.model.env_steps == 2 * args["num_envs"] * args["num_steps_per_rollout"]
    assert len(PPO_CONFIGS) == 4


@pytest.mark.parametrize(
    ("config_name", "small"),
    [
        ("sac_mujoco", ["--model.init_args.learning_starts=200", "--total_env_steps=260"]),
        ("td3_mujoco", ["--model.init_args.learning_starts=200", "--total_env_steps=260"]),
        ("ppo_mujoco", ["--model.init_args.num_steps_per_rollout=64", "--total_env_steps=128"]),
    ],
)
def test_each_mujoco_config_fits_any_mujoco_id(config_name, small, tmp_path, capsys):
    """configs/{sac,td3,ppo}_mujoco.yaml name every hyper-parameter of their module and train on the MuJoCo id
    given on the command line (Hopper-v5 here, HalfCheetah-v5 in the files)."""
    pytest.importorskip("mujoco")
    config = yaml.safe_load((ROOT / "configs" / f"{config_name}.yaml").read_text())
    short_name = config["model"]["class_path"].rsplit(".", 1)[-1]
    defaults = yaml.safe_load(_printed_config(["fit", "--model", short_name], capsys))["model"]["init_args"]
    assert config["model"]["init_args"].keys() == defaults.keys()
    cli = make_cli(
        [
            "fit",
            "--config",
            str(ROOT / "configs" / f"{config_name}.yaml"),
            "--model.env_id",
            "Hopper-v5",
            *small,
            "--trainer.enable_progress_bar=false",
            "--trainer.default_root_dir",
            str(tmp_path),
        ]
    )
    assert cli.model.hparams.env_id == "Hopper-v5" and cli.model.action_shape == (3,)
    assert cli.model.env_steps >= int(small[-1].split("=")[1])
    assert cli.trainer.global_step > 0
    settings = config["model"]["init_args"]
    for name in ("batch_size", "tau", "lr", "num_steps_per_rollout"):
        if name in settings and name not in " ".join(small):
            assert cli.model.hparams[name] == settings[name]


def test_fit_prints_a_start_line_and_the_scripts_summary_and_names_its_log_directory(tmp_path, capsys):
    cli = make_cli(["fit", "--config", str(VPG_CONFIG), *TINY_VPG, f"--trainer.default_root_dir={tmp_path}"])
    lines = capsys.readouterr().out.splitlines()
    run_dir = _version_0(tmp_path)
    assert cli.trainer.log_dir == str(run_dir)
    assert lines[0] == (
        "VPGModule on CartPole-v1, 10,934 parameters, 8 envs: up to 320 env steps (2 updates), until the greedy "
        f"eval return reaches 475; logs in {run_dir}"
    )
    assert lines[-5].startswith("done: budget used up, not solved: greedy eval return ")
    assert lines[-5].endswith(" 320 env steps, 2 updates")
    assert lines[-3] == f"  last checkpoint:  {run_dir / 'checkpoints' / 'last.ckpt'}  (resume: --ckpt_path last)"


def test_total_env_steps_sizes_a_cli_run_in_env_steps(tmp_path, capsys):
    """--total_env_steps replaces the config's max_steps: 1,000 env steps of 8 x 20 are 7 rollouts (1,120)."""
    cli = make_cli(
        [
            "fit",
            "--config",
            str(VPG_CONFIG),
            *TINY_VPG,
            "--total_env_steps=1000",
            f"--trainer.default_root_dir={tmp_path}",
        ]
    )
    assert cli.model.env_steps == 1_120 and cli.trainer.global_step == 7
    assert "up to 1,120 env steps (7 updates)" in capsys.readouterr().out


@pytest.mark.parametrize(("config_name", "model"), [("sac_pendulum", "SACModule"), ("td3_pendulum", "TD3Module")])
def test_the_sac_and_td3_configs_write_out_every_argument_and_fit_a_few_updates(config_name, model, tmp_path, capsys):
    config_path = ROOT / "configs" / f"{config_name}.yaml"
    config = yaml.safe_load(config_path.read_text())
    defaults = yaml.safe_load(_printed_config(["fit", "--model", model], capsys))["model"]["init_args"]
    assert config["model"]["init_args"].keys() == defaults.keys()
    cli = make_cli(
        [
            "fit",
            "--config",
            str(config_path),
            "--model.init_args.learning_starts=100",
            "--trainer.max_steps=5",
            "--trainer.enable_progress_bar=false",
            f"--trainer.default_root_dir={tmp_path}",
        ]
    )
    assert type(cli.model).__name__ == model and cli.model.env_steps == 100 + 5
    assert (tmp_path / "lightning_logs" / f"{model.removesuffix('Module')}-Pendulum-v1" / "version_0").is_dir()


def test_rl_lightning_fit_takes_sac_by_its_short_name(tmp_path):
    cli = make_cli(
        [
            "fit",
            "--model",
            "SACModule",
            "--model.learning_starts=50",
            "--model.hidden_sizes=[8]",
            "--trainer.max_steps=3",
            "--trainer.enable_progress_bar=false",
            f"--trainer.default_root_dir={tmp_path}",
        ]
    )
    assert cli.model.hparams.env_id == "Pendulum-v1" and cli.trainer.global_step == 3


@pytest.mark.parametrize("config_name", ["ppo_atari", "dqn_atari"])
def test_the_atari_configs_fit_any_ale_id(config_name, tmp_path):
    """configs/{ppo,dqn}_atari.yaml with another ALE id, as the README shows (`--model.env_id ALE/Pong-v5`):
    the preset's uint8 (4, 84, 84) stacks and a few updates (games cut at 100 steps: the evaluations stay short)."""
    pytest.importorskip("ale_py")
    preset = '{"atari": {"terminal_on_life_loss": true, "repeat_action_probability": 0.0, "max_episode_steps": 100}}'
    small = (
        ["--model.init_args.num_steps_per_rollout=16", "--total_env_steps=256"]
        if config_name == "ppo_atari"
        else [
            "--model.init_args.buffer_size=2000",
            "--model.init_args.learning_starts=400",
            "--model.init_args.steps_per_epoch=25",
            "--total_env_steps=600",
        ]
    )
    cli = make_cli(
        [
            "fit",
            "--config",
            str(ROOT / "configs" / f"{config_name}.yaml"),
            "--model.env_id",
            "ALE/Pong-v5",
            "--model.init_args.env_kwargs",
            preset,
            *small,
            "--trainer.enable_progress_bar=false",
            "--trainer.default_root_dir",
            str(tmp_path),
        ]
    )
    assert cli.model.hparams.env_id == "ALE/Pong-v5"
    assert cli.model.hparams.env_kwargs["atari"]["max_episode_steps"] == 100
    assert cli.model.obs_shape == (4, 84, 84) and cli.model.source.envs.obs_dtype == torch.uint8
    assert cli.model.env_steps >= (256 if config_name == "ppo_atari" else 600)
    assert cli.trainer.global_step > 0
