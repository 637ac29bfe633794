import inspect
import json
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rl_lightning import DQNModule, PPOModule, SACModule, TD3Module, VPGModule
from rl_lightning.callbacks import EnvStepBudget
from rl_lightning.cli import SCRIPT_TRAINER_FLAGS, ScriptCLI
from rl_lightning.scripting import RunLines

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = {
    "train_vpg.py": VPGModule,
    "train_dqn.py": DQNModule,
    "train_ppo.py": PPOModule,
    "train_sac.py": SACModule,
    "train_td3.py": TD3Module,
}
# The DQN docstring documents these two in one "epsilon_start, epsilon_end:" entry, which
# jsonargparse (docstring_parser) files under neither name.
UNDOCUMENTED: set[str] = set()


@pytest.fixture(autouse=True)
def _keep_num_threads_and_cwd(tmp_path, monkeypatch):
    # ScriptCLI applies --num_threads to this process (leave the other tests theirs), and its Trainer's
    # logger claims lightning_logs/<run>/version_N in the working directory.
    monkeypatch.chdir(tmp_path)
    num_threads = torch.get_num_threads()
    yield
    torch.set_num_threads(num_threads)


def _cli(module_cls, *argv: str) -> ScriptCLI:
    return ScriptCLI(
        module_cls, None, max_steps=10, eval_every_n_env_steps=100, video_every_n_env_steps=1000, args=argv
    )


def _parse(module_cls, *argv: str):
    cli = _cli(module_cls, *argv)
    return cli.model, cli.config


def _run_script_in_process(name: str, *argv: str, monkeypatch) -> int:
    """Run scripts/``name`` in this process (no interpreter start-up); its exit status."""
    monkeypatch.setattr(sys, "argv", [name, *argv])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(ROOT / "scripts" / name), run_name="__main__")
    return exit_info.value.code


def test_train_vpg_script_trains_logs_and_checkpoints(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "train_vpg.py"),
            "--max_steps",
            "2",
            "--num_envs",
            "8",
            "--num_steps_per_rollout",
            "30",
            "--hidden_sizes",
            "[16,16]",
            "--iw_clip",
            "null",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "480 env steps, 2 updates" in result.stdout
    assert "greedy eval return" in result.stdout
    run = tmp_path / "lightning_logs" / "VPG-CartPole-v1" / "version_0"  # the directory says what ran
    checkpoints = sorted(path.name for path in (run / "checkpoints").glob("*.ckpt"))
    assert len(checkpoints) == 2 and "last.ckpt" in checkpoints and checkpoints[0].startswith("best-")
    assert all(name in result.stdout for name in checkpoints)
    assert list(run.glob("events.out.tfevents.*"))
    assert [path.name for path in (run / "videos").glob("*.mp4")] == ["step_240.mp4"]


def test_train_vpg_script_rejects_bad_hyperparameters(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "train_vpg.py"), "--env_id", "Nope-v0", "--max_steps", "1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "usage: train_vpg.py" in result.stderr
    assert "error: unknown env_id 'Nope-v0'" in result.stderr
    assert "Traceback" not in result.stderr


def test_train_vpg_script_resumes_from_last(tmp_path):
    def run(*extra: str) -> str:
        common = ["--num_envs", "8", "--num_steps_per_rollout", "30", "--no_video", "--no_stop_when_solved"]
        result = subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "train_vpg.py"), *common, *extra],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr[-2000:]
        return result.stdout + result.stderr

    first = run("--max_steps", "2")
    assert "480 env steps, 2 updates" in first
    resumed = run("--max_steps", "4", "--ckpt_path", "last")
    assert "resumed from lightning_logs/VPG-CartPole-v1/version_0/checkpoints/last.ckpt at env step 480" in resumed
    assert "960 env steps, 4 updates" in resumed  # the counters went on from 480 and 2


def test_train_dqn_script_trains_evaluates_and_checkpoints(tmp_path):
    args = ["--max_steps", "30", "--num_envs", "4", "--learning_starts", "64", "--batch_size", "32"]
    args += ["--steps_per_epoch", "10", "--eval_every_n_env_steps", "40", "--num_eval_episodes", "4"]
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "train_dqn.py"), *args, "--video_every_n_env_steps", "100"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    # 64 random warm-up steps, then 30 updates of one vectorised step of 4 envs.
    assert "184 env steps, 30 updates" in result.stdout
    run = tmp_path / "lightning_logs" / "DQN-CartPole-v1" / "version_0"
    assert (run / "checkpoints" / "last.ckpt").is_file()
    # Greedy clips at the first update (68 env steps) and when the env steps first reach 100.
    assert sorted(path.name for path in (run / "videos").glob("*.mp4")) == ["step_100.mp4", "step_68.mp4"]


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_help_lists_every_hyperparameter_with_type_default_and_doc(script, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "400")  # one line per option
    assert _run_script_in_process(script, "--help", monkeypatch=monkeypatch) == 0
    lines = capsys.readouterr().out.splitlines()
    parameters = [p for p in inspect.signature(SCRIPTS[script].__init__).parameters.values() if p.name != "self"]
    assert len(parameters) >= 20
    for parameter in parameters:
        # "  --lr LR   Adam learning rate. (type: float, default: 0.02)", a long help on the next lines
        start = next(i for i, line in enumerate(lines) if line.lstrip().startswith(f"--{parameter.name} "))
        end = next(i for i in range(start, len(lines)) if "(type:" in lines[i])
        text = " ".join(line.strip() for line in lines[start : end + 1])
        name = re.escape(parameter.name)
        match = re.search(rf"--{name} \S+(?:, --{name}\+ \S+)? +(.*?) *\(type: (.+?), default: (\(.*?\)|[^,)]+)", text)
        assert match, text
        doc, _, default = match.groups()
        assert default == ("null" if parameter.default is None else str(parameter.default)), text
        assert doc or parameter.name in UNDOCUMENTED, f"--{parameter.name} has no help: {text}"
    for flag in ["--config", "--accelerator", "--devices", "--strategy", "--num_nodes", "--precision"]:
        assert any(line.lstrip().startswith(flag + " ") for line in lines), flag
    for flag in ["--max_steps", "--default_root_dir", "--num_threads", "--ckpt_path", "--eval_every_n_env_steps"]:
        assert any(line.lstrip().startswith(flag + " ") for line in lines), flag
    for flag in ["--num_eval_episodes", "--video_every_n_env_steps", "--no_video", "--solved_return"]:
        assert any(line.lstrip().startswith(flag + " ") for line in lines), flag
    assert any(line.lstrip().startswith("--no_stop_when_solved") for line in lines)
    assert "torch.nn.Linear" not in "\n".join(lines)  # not every nn.Module subclass torch has


def test_bools_nones_and_trainer_flags():
    from lightning.pytorch.accelerators import CPUAccelerator
    from lightning.pytorch.callbacks import ModelSummary

    cli = _cli(
        DQNModule,
        *("--double_dqn", "false", "--checkpoint_buffer", "False", "--max_grad_norm", "null"),
        *("--target_update_env_steps", "none", "--tau", "0.01", "--learning_starts", "64", "--batch_size", "32"),
        *("--devices", "auto", "--max_steps", "7", "--ckpt_path", "last", "--no_video", "--num_threads", "2"),
    )
    module, args, trainer = cli.model, cli.config, cli.trainer
    assert module.hparams.double_dqn is False and module.hparams.checkpoint_buffer is False
    assert module.hparams.max_grad_norm is None and module.hparams.target_update_env_steps is None
    assert module.hparams.tau == 0.01 and module.hparams.learning_starts == 64
    assert args.no_video is True and args.no_stop_when_solved is False and args.ckpt_path == "last"
    assert cli.ckpt_path is None  # "last" with no run of DQN on CartPole-v1 here: a fresh start
    assert torch.get_num_threads() == 2
    assert {name: args[name] for name in SCRIPT_TRAINER_FLAGS} == dict(
        accelerator="cpu", devices="auto", strategy="auto", num_nodes=1, precision="32-true", default_root_dir="."
    )
    assert isinstance(trainer.accelerator, CPUAccelerator) and trainer.num_devices == 1 and trainer.num_nodes == 1
    assert trainer.precision == "32-true" and trainer.max_steps == 7 and trainer.log_every_n_steps == 1
    assert not any(isinstance(callback, ModelSummary) for callback in trainer.callbacks)
    assert Path(trainer.logger.log_dir).parent == Path("lightning_logs") / "DQN-CartPole-v1"
    assert _parse(DQNModule, "--devices", "2")[1].devices == 2


@pytest.mark.parametrize(
    "argv", [["--iw_clip", "null"], ["--iw_clip", "none"], ["--iw_clip", "None"], ["--iw_clip=none"]]
)
def test_none_spellings(argv):
    assert _parse(VPGModule, *argv, "--importance_weighting", "true")[0].hparams.iw_clip is None


@pytest.mark.parametrize(
    "argv",
    [
        ["--hidden_sizes", "[32,16]"],  # jsonargparse's form
        ["--hidden_sizes", "[32,", "16]"],  # the same unquoted in a shell: [32, 16]
        ["--hidden_sizes=[32,16]"],
        ["--hidden_sizes", "32", "16"],  # argparse's form, as before
    ],
)
def test_list_spellings(argv):
    module, _ = _parse(PPOModule, *argv, "--lr", "0.001")
    assert tuple(module.hparams.hidden_sizes) == (32, 16) and module.hparams.lr == 0.001
    assert [layer.out_features for layer in module.model.actor.encoder if isinstance(layer, torch.nn.Linear)] == [
        32,
        16,
    ]


def test_env_kwargs_and_network_reach_the_module():
    env_kwargs = {"vectorization_mode": "sync"}
    network = {"class_path": "torch.nn.Linear", "init_args": {"in_features": 4, "out_features": 16}}
    module, _ = _parse(
        VPGModule,
        "--env_backend",
        "gymnasium",
        "--env_kwargs",
        json.dumps(env_kwargs),
        "--network",
        json.dumps(network),
    )
    assert module.hparams.env_kwargs == env_kwargs and module.hparams.env_backend == "gymnasium"
    encoder = module.policy_network.encoder
    assert type(encoder) is torch.nn.Linear and encoder.out_features == 16
    assert module.policy_network.head.in_features == 16
    # The dotted form of the same network.
    module, _ = _parse(
        VPGModule, "--network", "torch.nn.Linear", "--network.in_features", "4", "--network.out_features", "8"
    )
    assert module.policy_network.encoder.out_features == 8


def test_config_file_round_trip(tmp_path, capsys):
    with pytest.raises(SystemExit):
        _parse(DQNModule, "--lr", "0.01", "--hidden_sizes", "[8]", "--max_grad_norm", "null", "--print_config")
    config = tmp_path / "dqn.yaml"
    config.write_text(capsys.readouterr().out)
    module, args = _parse(DQNModule, "--config", str(config), "--seed", "3")
    assert module.hparams.lr == 0.01 and tuple(module.hparams.hidden_sizes) == (8,)
    assert module.hparams.max_grad_norm is None and module.hparams.seed == 3 and args.max_steps == 10


@pytest.mark.parametrize(
    ("script", "argv", "message"),
    [
        ("train_vpg.py", ["--num_envs", "many"], 'Parser key "num_envs"'),
        ("train_vpg.py", ["--lr", "-1"], "error: lr must be a finite number in (0.0, inf], got -1.0"),
        ("train_dqn.py", ["--double_dqn", "maybe"], 'Parser key "double_dqn"'),
        ("train_ppo.py", ["--hidden_sizes", "16", "wide"], 'Parser key "hidden_sizes"'),
        ("train_ppo.py", ["--num_envs", "0"], "error: num_envs must be >= 1, got 0"),
        ("train_dqn.py", ["--learning_rate", "0.1"], "unrecognized arguments: --learning_rate"),
    ],
)
def test_bad_values_exit_with_status_2_naming_the_option(script, argv, message, monkeypatch, capsys):
    assert _run_script_in_process(script, *argv, monkeypatch=monkeypatch) == 2
    stderr = capsys.readouterr().err
    assert message in stderr and f"usage: {script}" in stderr


def test_a_default_script_run_prints_nothing_but_the_projects_own_lines(tmp_path):
    """No Lightning tips, GPU/TPU lines, progress-bar override notice, model summary or LeafSpec warning:
    a start line, status lines, and the summary."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "train_vpg.py"), "--max_steps", "2"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    # The project's own line where the last video clip is still being made as the run ends (final_clip_timeout).
    assert [line for line in result.stderr.splitlines() if not line.startswith("GridVideoLogger: ")] == []
    lines = result.stdout.splitlines()
    run_dir = "lightning_logs/VPG-CartPole-v1/version_0"
    assert lines[0] == (
        "VPGModule on CartPole-v1, 10,934 parameters, 32 envs: up to 32,000 env steps (2 updates), until the "
        f"greedy eval return reaches 475; logs in {run_dir}"
    )
    patterns = [
        r"env steps [\d,]+/32,000 \(\d+%\), [\d.]+ s(, ETA [\d.]+ s)?(, SPS [\d,]+)?"
        r"(, return [-\d.]+)?(, eval [-\d.]+)?",
        r"done: (solved|budget used up, not solved): greedy eval return [-\d.]+ \+- [\d.]+ \([<>=]+ 475\); "
        r"[\d.]+ s wall, 32,000 env steps, 2 updates",
        rf"  best checkpoint:  {run_dir}/checkpoints/best-env_steps=(16000|32000)\.ckpt",
        rf"  last checkpoint:  {run_dir}/checkpoints/last\.ckpt  \(resume: --ckpt_path last\)",
        rf"  videos:           {run_dir}/videos \(1 mp4\)",
        rf"  TensorBoard logs: {run_dir}  \(tensorboard --logdir lightning_logs\)",
    ]
    for line in lines[1:]:
        assert any(re.fullmatch(pattern, line) for pattern in patterns), line
    assert lines[-5].startswith("done: ")


def test_total_env_steps_sizes_the_run_in_env_steps(tmp_path):
    """--total_env_steps (SB3's total_timesteps) instead of --max_steps: PPO's 16 x 32 rollouts, 2,000 env
    steps -> 4 rollouts (2,048) of 16 updates; the progress bar and the LR schedule plan over them."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "train_ppo.py"), "--total_env_steps", "2000", "--no_video"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "up to 2,048 env steps (64 updates)" in result.stdout.splitlines()[0]
    assert "2,048 env steps, 64 updates" in result.stdout


def test_total_env_steps_and_max_steps_are_one_budget_each():
    trainer = _cli(PPOModule, "--total_env_steps", "5000").trainer
    assert trainer.max_steps == -1 and trainer.max_epochs == -1
    [budget] = [callback for callback in trainer.callbacks if isinstance(callback, EnvStepBudget)]
    assert budget.total_env_steps == 5000
    assert _cli(PPOModule).trainer.max_steps == 10  # the script's default budget
    with pytest.raises(SystemExit) as exit_info:
        _parse(PPOModule, "--total_env_steps", "5000", "--max_steps", "20")
    assert exit_info.value.code == 2


@pytest.mark.parametrize(
    ("env_id", "argv", "threshold"),
    [
        ("CartPole-v1", [], 475.0),
        ("Acrobot-v1", [], -100.0),
        ("Pendulum-v1", [], -200.0),
        ("MountainCar-v0", [], -110.0),
        ("MountainCarContinuous-v0", [], 90.0),
        ("FrozenLake-v1", [], 0.7),  # gymnasium's spec.reward_threshold
        ("Acrobot-v1", ["--solved_return", "-80"], -80.0),
        ("Probe1-v0", [], None),  # none known: no early stop, and the start line says so
        ("CartPole-v1", ["--no_stop_when_solved"], None),
    ],
)
def test_solved_return_defaults_per_env(env_id, argv, threshold):
    from lightning.pytorch.callbacks import EarlyStopping

    callbacks = _cli(PPOModule, "--env_id", env_id, *argv).trainer.callbacks
    stoppers = [callback for callback in callbacks if isinstance(callback, EarlyStopping)]
    assert [stopper.stopping_threshold for stopper in stoppers] == ([] if threshold is None else [threshold])
    [run_lines] = [callback for callback in callbacks if isinstance(callback, RunLines)]
    if env_id == "Probe1-v0":
        assert run_lines.note == "no solved return known for Probe1-v0: trains for the whole budget " + (
            "(--solved_return R stops it at R)"
        )


def test_train_sac_script_trains_evaluates_and_reports(tmp_path):
    args = ["--max_steps", "20", "--learning_starts", "100", "--hidden_sizes", "[16]", "--eval_every_n_env_steps", "50"]
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "train_sac.py"), *args, "--steps_per_epoch", "10", "--no_video"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("SACModule on Pendulum-v1, ")
    assert "until the greedy eval return reaches -200" in result.stdout.splitlines()[0]
    assert "120 env steps, 20 updates" in result.stdout
    assert (tmp_path / "lightning_logs" / "SAC-Pendulum-v1" / "version_0" / "checkpoints" / "last.ckpt").is_file()


def test_a_script_leaves_the_global_seed_alone_and_writes_no_config():
    """No seed_everything (LightningCLI's default without --seed_everything would draw a random global
    seed): the module seeds itself from --seed. A script writes no config.yaml (``--print_config`` does)."""
    from lightning.pytorch.cli import SaveConfigCallback

    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    cli = _cli(VPGModule, "--num_envs", "4", "--seed", "5")
    torch.testing.assert_close(torch.rand(3), expected, rtol=0, atol=0)
    assert cli.model.hparams.seed == 5
    assert not any(isinstance(callback, SaveConfigCallback) for callback in cli.trainer.callbacks)


def test_a_script_and_rl_lightning_fit_share_one_parser_path():
    """The scripts' ScriptCLI is the rl-lightning LightningCLI with one module's flags flat: the same
    --num_threads and --total_env_steps, the same run plumbing (logger, budget, first and last lines)."""
    from rl_lightning.cli import RLLightningCLI

    cli = _cli(PPOModule, "--total_env_steps", "600", "--num_envs", "4", "--num_steps_per_rollout", "8")
    assert isinstance(cli, RLLightningCLI)
    [budget] = [callback for callback in cli.trainer.callbacks if isinstance(callback, EnvStepBudget)]
    assert budget.total_env_steps == 600
    assert sum(isinstance(callback, RunLines) for callback in cli.trainer.callbacks) == 1
    assert Path(cli.trainer.logger.log_dir) == Path("lightning_logs") / "PPO-CartPole-v1" / "version_0"
