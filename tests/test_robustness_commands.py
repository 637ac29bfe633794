"""Issue 21, the command-line surface: checkpoints that are what they claim (CLI, scripts, enjoy), files
that are no checkpoint read without running their code, the flags winning over a checkpoint's
hyper-parameters, concurrent runs in one directory, envs without a time limit, and the small tools'
bad arguments (enjoy, plot_runs, the Optuna sweep)."""

import importlib.util
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import gymnasium as gym
import lightning as L
import pytest
import torch
from torch.utils.tensorboard import SummaryWriter

from rl_lightning import DQNModule, PPOModule, evaluate_policy, make_envs
from rl_lightning.checkpoints import load_checkpoint_file, resolve_ckpt_path
from rl_lightning.cli import ScriptCLI, make_cli
from rl_lightning.envs import CartPole
from rl_lightning.envs.gym_adapter import NO_TIME_LIMIT_EVAL_STEPS, time_limit
from rl_lightning.scripting import run_logger

ROOT = Path(__file__).resolve().parents[1]
TINY_PPO = dict(num_envs=4, num_steps_per_rollout=8)


def _load_script(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


enjoy = _load_script("enjoy", ROOT / "scripts" / "enjoy.py")
plot_runs = _load_script("plot_runs", ROOT / "scripts" / "plot_runs.py")


@pytest.fixture(autouse=True)
def _no_pytest_argv(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["rl-lightning"])
    yield
    torch.set_num_threads(1)


def _script_cli(module_cls: type[L.LightningModule], argv: list[str]) -> ScriptCLI:
    return ScriptCLI(module_cls, None, max_steps=10, eval_every_n_env_steps=100, video_every_n_env_steps=100, args=argv)


def _save(module: L.LightningModule, path: Path, steps: int = 2) -> Path:
    trainer = L.Trainer(
        max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False
    )
    trainer.fit(module)
    trainer.save_checkpoint(path)
    return path


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("checkpoints")
    return {
        "ppo": _save(PPOModule(**TINY_PPO), root / "ppo.ckpt"),
        "ppo_acrobot": _save(PPOModule(env_id="Acrobot-v1", **TINY_PPO), root / "ppo_acrobot.ckpt"),
        "ppo_lstm": _save(PPOModule(recurrent="lstm", **TINY_PPO), root / "ppo_lstm.ckpt"),
        "dqn": _save(DQNModule(num_envs=4, learning_starts=16, batch_size=16), root / "dqn.ckpt"),
    }


def _bad_files(directory: Path, good: Path) -> dict[str, Path]:
    files = {"empty": b"", "text": b"epoch: 3\ncallbacks: []\n", "truncated": good.read_bytes()[:3000]}
    paths = {}
    for name, content in files.items():
        paths[name] = directory / f"{name}.ckpt"
        paths[name].write_bytes(content)
    return paths


def _cli_error(args: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        make_cli(args)
    assert exit_info.value.code == 2
    return capsys.readouterr().err


# -- the CLI resumes only its own checkpoints, and says which flags won ------------------------------


def test_the_cli_refuses_a_checkpoint_of_another_algorithm_naming_both(tmp_path, checkpoints, capsys):
    root = f"--trainer.default_root_dir={tmp_path}"
    err = _cli_error(["fit", "--model", "PPOModule", "--ckpt_path", str(checkpoints["dqn"]), root], capsys)
    assert "is a checkpoint of DQNModule on CartPole-v1, but --model is PPOModule" in err
    err = _cli_error(["validate", "--model", "DQNModule", "--ckpt_path", str(checkpoints["ppo"]), root], capsys)
    assert "is a checkpoint of PPOModule on CartPole-v1, but --model is DQNModule" in err


def test_the_cli_refuses_a_checkpoint_of_another_env_naming_both(tmp_path, checkpoints, capsys):
    args = ["fit", "--model", "PPOModule", "--model.init_args.env_id", "CartPole-v1"]
    err = _cli_error(
        [*args, "--ckpt_path", str(checkpoints["ppo_acrobot"]), f"--trainer.default_root_dir={tmp_path}"], capsys
    )
    assert "a checkpoint of PPOModule on Acrobot-v1, but the run asked for is on CartPole-v1" in err


def test_cli_flags_win_over_the_checkpoints_hyper_parameters_and_are_named(tmp_path, checkpoints, capsys):
    """ent_coef and lr given with --ckpt_path: the run uses them (Adam's restored lr included), and a
    note names each flag that replaced the checkpoint's value; the rest comes from the checkpoint."""
    cli = make_cli(
        [
            "fit",
            "--model",
            "PPOModule",
            "--model.init_args.ent_coef",
            "0.5",
            "--model.init_args.lr",
            "1e-4",
            "--model.init_args.anneal_lr",
            "false",
            "--trainer.max_steps",
            "4",
            "--trainer.enable_progress_bar=false",
            f"--trainer.default_root_dir={tmp_path}",
            "--ckpt_path",
            str(checkpoints["ppo"]),
        ]
    )
    err = capsys.readouterr().err
    assert cli.model.hparams.ent_coef == 0.5 and cli.model.hparams.lr == 1e-4
    assert cli.model.hparams.num_envs == 4  # not given: the checkpoint's (the default is 4 too, so also:)
    assert cli.model.hparams.num_steps_per_rollout == 8  # the checkpoint's, not the default 128
    assert [group["lr"] for group in cli.trainer.optimizers[0].param_groups] == [pytest.approx(1e-4)]
    assert "the flags win over the hyper-parameters of" in err
    assert "ent_coef 0.5 (checkpoint: 0.0)" in err and "lr 0.0001 (checkpoint: 0.0025)" in err
    assert "anneal_lr False (checkpoint: True)" in err


def test_a_module_given_another_lr_than_its_checkpoint_resumes_with_its_own(tmp_path, checkpoints):
    module = PPOModule(lr=1e-3, anneal_lr=False, **TINY_PPO)
    trainer = L.Trainer(max_steps=3, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(module, ckpt_path=checkpoints["ppo"])
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(1e-3)


@pytest.mark.parametrize("kind", ["empty", "text", "truncated"])
def test_bad_checkpoint_files_exit_2_naming_the_file_in_the_cli_and_the_scripts(tmp_path, checkpoints, kind, capsys):
    path = _bad_files(tmp_path, checkpoints["ppo"])[kind]
    expected = {"empty": "is empty (0 bytes)", "text": "not a complete torch checkpoint", "truncated": "truncated"}[
        kind
    ]
    for subcommand in ("fit", "validate"):
        err = _cli_error([subcommand, "--model", "PPOModule", "--ckpt_path", str(path)], capsys)
        assert str(path) in err and expected in err
    with pytest.raises(SystemExit) as exit_info:
        _script_cli(PPOModule, ["--ckpt_path", str(path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert str(path) in err and expected in err
    with pytest.raises(ValueError, match=re.escape(expected)):
        PPOModule.load_from_checkpoint(path)
    code, err = _enjoy_in_process(capsys, "--ckpt_path", str(path))
    assert code == 2 and expected in err


def test_a_script_refuses_a_checkpoint_of_another_algorithm_or_network_before_training(tmp_path, checkpoints, capsys):
    for path, message in [(checkpoints["dqn"], "saved by DQNModule"), (checkpoints["ppo_lstm"], "recurrent='lstm'")]:
        with pytest.raises(SystemExit) as exit_info:
            _script_cli(PPOModule, ["--ckpt_path", str(path)])
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err


def test_checkpoint_inspection_never_runs_code_stored_in_a_file(tmp_path):
    """A pickle can call any function when loaded with weights_only=False; ours load with
    weights_only=True and refuse, naming what the file wanted to call."""
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    path = tmp_path / "crafted.ckpt"
    torch.save({"state_dict": {}, "rl_lightning": {}, "x": Payload()}, path)
    with pytest.raises(ValueError, match=r"does not unpickle.*weights_only=True.*GLOBAL"):
        load_checkpoint_file(path)
    last = tmp_path / "lightning_logs" / "PPO-CartPole-v1" / "version_0" / "checkpoints" / "last.ckpt"
    last.parent.mkdir(parents=True)
    path.rename(last)
    with pytest.raises(ValueError, match="unreadable"):  # "last" skips it, without running it
        resolve_ckpt_path("last", tmp_path, "PPOModule", "CartPole-v1")
    assert not marker.exists()


@pytest.mark.parametrize(("saved", "loaded"), [("ppo", "lstm"), ("ppo_lstm", None)])
def test_a_feed_forward_checkpoint_into_a_recurrent_module_and_back_names_both_networks(checkpoints, saved, loaded):
    module = PPOModule(recurrent=loaded, **TINY_PPO)
    trainer = L.Trainer(max_steps=3, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    saved_setting = "recurrent='lstm'" if saved == "ppo_lstm" else "recurrent=None"
    own_setting = f"recurrent={loaded!r}"
    with pytest.raises(ValueError, match=rf"built with {saved_setting}.*this module with {own_setting}.*only in"):
        trainer.fit(module, ckpt_path=checkpoints[saved])


# -- devices and Trainer flags ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("device", "error", "message"),
    [
        ("gpu0", ValueError, "device must be a torch device such as 'cpu'"),
        (3, TypeError, "device must be a torch.device or a string"),
        pytest.param(
            "cuda",
            ValueError,
            "torch finds no CUDA device here",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is here"),
        ),
    ],
)
def test_make_envs_names_a_bad_or_absent_device(device, error, message):
    with pytest.raises(error, match=message):
        make_envs("CartPole-v1", 2, device=device)


@pytest.mark.parametrize(
    ("flags", "message"),
    [(["--devices", "0"], "devices=0"), (["--devices", "-3"], "devices"), (["--accelerator", "tpu"], "tpu")],
)
def test_script_trainer_flags_lightning_refuses_exit_2_before_training(flags, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        _script_cli(PPOModule, flags)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "the Trainer flags" in err and message in err


# -- concurrent runs ----------------------------------------------------------------------------------


def test_run_logger_claims_each_version_directory_atomically(tmp_path, monkeypatch):
    module = PPOModule(**TINY_PPO)
    (tmp_path / "lightning_logs" / "PPO-CartPole-v1" / "version_0").mkdir(parents=True)
    real_mkdir = Path.mkdir
    raced = []

    def mkdir_after_another_run(self, *args, **kwargs):
        # Another run creates version_1 between our look and our mkdir: we must go on to version_2.
        if self.name == "version_1" and not raced:
            raced.append(True)
            real_mkdir(self)
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", mkdir_after_another_run)
    logger = run_logger(module, tmp_path)
    assert logger.version == 2 and raced
    assert run_logger(module, tmp_path).version == 3


def test_three_scripts_started_together_in_one_directory_get_three_version_directories(tmp_path):
    args = ["--max_steps", "2", "--num_envs", "4", "--num_steps_per_rollout", "8", "--no_video"]
    processes = [
        subprocess.Popen(
            [sys.executable, str(ROOT / "scripts" / "train_ppo.py"), *args, "--seed", str(seed)],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in range(3)
    ]
    results = [process.communicate(timeout=240) for process in processes]
    assert [process.returncode for process in processes] == [0, 0, 0], [err[-1000:] for _, err in results]
    versions = sorted((tmp_path / "lightning_logs" / "PPO-CartPole-v1").glob("version_*"))
    assert [path.name for path in versions] == ["version_0", "version_1", "version_2"]
    for version in versions:
        assert len(list(version.glob("events.out.tfevents.*"))) == 1
        assert (version / "checkpoints" / "last.ckpt").is_file()
    seeds = {int(torch.load(v / "checkpoints" / "last.ckpt")["hyper_parameters"]["seed"]) for v in versions}
    assert seeds == {0, 1, 2}


# -- envs without a time limit ------------------------------------------------------------------------


def test_an_env_without_a_time_limit_warns_and_evaluation_cuts_its_episodes_saying_so(monkeypatch):
    from rl_lightning.envs import gym_adapter

    monkeypatch.setattr(gym_adapter, "_WARNED_NO_TIME_LIMIT", set())  # once per process: not yet in this test
    with pytest.warns(UserWarning, match="CliffWalking-v1 has no time limit"):
        envs = make_envs("CliffWalking-v1", 2, seed=0)
    assert envs.max_episode_steps is None
    always_up = lambda obs: torch.zeros(obs.shape[0], dtype=torch.int64)  # noqa: E731  never reaches the goal
    with pytest.warns(UserWarning, match=f"cut at max_episode_steps={NO_TIME_LIMIT_EVAL_STEPS}"):
        result = evaluate_policy(always_up, envs)
    assert result.lengths.tolist() == [NO_TIME_LIMIT_EVAL_STEPS] * 2
    with pytest.warns(UserWarning, match="cut at max_episode_steps=20"):
        result = evaluate_policy(always_up, gym.make("CliffWalking-v1"), num_episodes=2, max_episode_steps=20)
    assert result.lengths.tolist() == [20.0, 20.0]
    limited = make_envs("CliffWalking-v1", 2, seed=0, max_episode_steps=30)  # the user's limit: no warning
    assert limited.max_episode_steps == 30
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert evaluate_policy(always_up, limited).lengths.tolist() == [30.0, 30.0]


def test_episodes_ended_by_the_envs_own_time_limit_are_not_reported_as_cut():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = evaluate_policy(
            lambda obs: torch.zeros(obs.shape[0], dtype=torch.int64), CartPole(3, max_episode_steps=5)
        )
    assert result.lengths.tolist() == [5.0, 5.0, 5.0]


def test_time_limits_of_gymnasium_specs():
    assert time_limit(gym.spec("CartPole-v1"), {}) == 500
    assert time_limit(gym.spec("CartPole-v1"), {"max_episode_steps": 20}) == 20
    assert time_limit(gym.spec("CliffWalking-v1"), {}) is None
    atari = gym.envs.registration.EnvSpec("ALE/Fake-v5", entry_point="x:y", kwargs={"frameskip": 4})
    assert time_limit(atari, {}) == 27_000  # ale_py's 108,000 frames, 4 per step


# -- enjoy, plot_runs and the sweep -------------------------------------------------------------------


def _enjoy(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(ROOT / "scripts" / "enjoy.py"), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def _enjoy_in_process(capsys, *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        enjoy.main(list(args))
    return exit_info.value.code, capsys.readouterr().err


def test_enjoy_refuses_no_episodes_or_no_steps(checkpoints, capsys):
    for flag, value in [("--episodes", "0"), ("--episodes", "-2"), ("--max_episode_steps", "0")]:
        code, err = _enjoy_in_process(capsys, "--ckpt_path", str(checkpoints["ppo"]), flag, value)
        assert code == 2 and f"{flag} must be at least 1, got {value}" in err


def test_enjoy_says_when_episodes_were_cut_at_max_episode_steps(checkpoints):
    result = _enjoy("--ckpt_path", str(checkpoints["ppo"]), "--episodes", "2", "--max_episode_steps", "3")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "returns [3.0, 3.0]" in result.stdout
    assert "2 of 2 episodes did not end within --max_episode_steps 3" in result.stderr


def test_enjoy_plays_the_env_with_the_training_env_kwargs(tmp_path, monkeypatch):
    module = PPOModule(env_id="Pendulum-v1", env_backend="gymnasium", env_kwargs={"g": 2.0}, **TINY_PPO)
    built = []
    real_make_envs = enjoy.make_envs

    def make_envs_spy(env_id, num_envs, **kwargs):
        envs = real_make_envs(env_id, num_envs, **kwargs)
        built.append(envs.gymnasium_envs.envs[0].unwrapped.g)
        return envs

    monkeypatch.setattr(enjoy, "make_envs", make_envs_spy)
    enjoy.play(module, episodes=1, seed=0, backend="auto", video=None, max_steps=5)
    enjoy.play(module, episodes=1, seed=0, backend="gymnasium", video=None, max_steps=5)
    assert built == [2.0, 2.0]
    with pytest.raises(ValueError, match=r"env_kwargs \{'g': 2.0\}.*--backend gymnasium"):
        enjoy.play(module, episodes=1, seed=0, backend="torch", video=None, max_steps=5)


def _write_run(log_dir: Path, steps: list[int], start: float) -> None:
    writer = SummaryWriter(log_dir=str(log_dir))
    for index, step in enumerate(steps):
        writer.add_scalar("charts/episodic_return", float(index), step, walltime=start + index)
    writer.close()


def test_plot_runs_warns_when_a_run_directory_holds_several_runs(tmp_path):
    now = time.time()
    _write_run(tmp_path / "runs" / "version_0", [100, 200, 300], now)
    _write_run(tmp_path / "runs" / "version_1", [100, 200, 300], now + 10)  # another seed: overlaps
    with pytest.warns(UserWarning, match="holds several runs, read as one curve"):
        plot_runs.load_curve(tmp_path / "runs", "charts/episodic_return")
    _write_run(tmp_path / "resumed" / "version_0", [100, 200], now)
    _write_run(tmp_path / "resumed" / "version_1", [300, 400], now + 10)  # a resumed run: one after the other
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert plot_runs.load_curve(tmp_path / "resumed", "charts/episodic_return").env_steps.tolist() == [
            100,
            200,
            300,
            400,
        ]


def test_plot_runs_creates_the_outputs_directory_and_names_a_bad_run(tmp_path, capsys):
    _write_run(tmp_path / "run", [100, 200], time.time())
    out = tmp_path / "new" / "dir" / "curves.png"
    plot_runs.main([str(tmp_path / "run"), "--out", str(out)])
    assert out.is_file() and out.with_suffix(".csv").is_file()
    with pytest.raises(SystemExit) as exit_info:
        plot_runs.main([str(tmp_path / "nothing"), "--out", str(out)])
    assert exit_info.value.code == 2 and "no TensorBoard event files" in capsys.readouterr().err


def test_the_sweep_refuses_zero_trials_and_exits_143_on_sigterm(tmp_path, capsys):
    pytest.importorskip("optuna")
    example = str(ROOT / "examples" / "sweep_optuna.py")
    sweep = _load_script("sweep_optuna", ROOT / "examples" / "sweep_optuna.py")
    with pytest.raises(SystemExit) as exit_info:
        sweep.main(["--n_trials", "0"])
    assert exit_info.value.code == 2 and "--n_trials must be at least 1, got 0" in capsys.readouterr().err
    process = subprocess.Popen(
        [sys.executable, example, "--n_trials", "50"], cwd=tmp_path, stderr=subprocess.PIPE, text=True
    )
    # Wait for the state the stop needs, not for a time: from the sweep's start line on, a SIGTERM stops it
    # (inside a trial's fit or between trials) with one message, however slow the machine.
    lines = []
    while not (lines and lines[-1].startswith("study 'vpg_cartpole': 50 trials")):
        lines.append(process.stderr.readline())
        assert lines[-1], "".join(lines)  # the sweep ended before its start line
    time.sleep(2)  # most often inside the first trial's fit; any moment from here on must give the same result
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    err = "".join(lines) + err
    assert process.returncode == 143, err[-2000:]
    assert "stopped by SIGTERM after" in err and "lost (no --storage)" in err


# -- signals ------------------------------------------------------------------------------------------


def _start_script(tmp_path: Path, *args: str) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "train_ppo.py"), *args],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal or a scheduler gives it
    )
    line = process.stdout.readline()  # the start line: training has started
    assert " on Acrobot-v1, " in line, line + process.stderr.read()
    return process


ASYNC = ["--env_id", "Acrobot-v1", "--env_backend", "gymnasium", "--env_kwargs", '{"vectorization_mode": "async"}']
LONG = ["--num_envs", "4", "--max_steps", "100000", "--no_video", "--no_stop_when_solved"]


def test_async_gymnasium_envs_shut_down_without_a_word_at_the_end_and_at_a_sigterm_to_the_group(tmp_path):
    """gymnasium's async workers printed a traceback each at a normal exit and "Received SIGTERM"
    (a handler inherited from the fit) at a SIGTERM; now they ignore the group's signals, the main
    process stops at its safe point and closes them."""
    process = _start_script(tmp_path, *ASYNC, "--num_envs", "4", "--max_steps", "8", "--no_video")
    _, err = process.communicate(timeout=240)
    assert process.returncode == 0 and "Traceback" not in err, err[-3000:]
    for signum, code, name in [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "Ctrl-C")]:
        process = _start_script(tmp_path, *ASYNC, *LONG)
        time.sleep(2)
        os.killpg(process.pid, signum)  # every process of the group: the script and its workers
        _, err = process.communicate(timeout=240)
        assert process.returncode == code, err[-3000:]
        assert err.strip().splitlines() == [f"stopped by {name}: resume with --ckpt_path last"], err[-3000:]


def test_a_second_sigterm_during_the_stop_does_not_kill_the_run(tmp_path):
    process = _start_script(tmp_path, "--env_id", "Acrobot-v1", *LONG)
    time.sleep(2)
    process.send_signal(signal.SIGTERM)
    time.sleep(0.05)
    process.send_signal(signal.SIGTERM)  # 50 ms later, while it stops and checkpoints
    _, err = process.communicate(timeout=240)
    assert process.returncode == 143, err[-3000:]
    [last] = tmp_path.glob("lightning_logs/PPO-Acrobot-v1/version_0/checkpoints/last.ckpt")
    assert load_checkpoint_file(last)["rl_lightning"]["env_steps"] > 0


@pytest.mark.parametrize(
    ("flags", "message"),
    [(["--trainer.devices", "0"], "devices='0'"), (["--trainer.accelerator", "gpu"], "gpu backend")],
)
def test_cli_trainer_flags_lightning_refuses_exit_2(flags, message, capsys):
    if "gpu" in flags and torch.cuda.is_available():
        pytest.skip("a GPU is here")
    err = _cli_error(["fit", "--model", "PPOModule", *flags], capsys)
    assert "the --trainer flags are not usable here" in err and message in err


def test_resuming_with_another_num_envs_than_the_checkpoints_names_both(checkpoints):
    """The flags win over a checkpoint's hyper-parameters, but a resumed run continues the checkpoint's envs:
    another num_envs is a clear error before training, not a mismatch inside the data source."""
    module = PPOModule(num_envs=8, num_steps_per_rollout=8)
    trainer = L.Trainer(max_steps=3, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    with pytest.raises(ValueError, match=r"checkpoint ran num_envs=4 envs per process, this PPOModule has num_envs=8"):
        trainer.fit(module, ckpt_path=checkpoints["ppo"])
    assert PPOModule.load_from_checkpoint(checkpoints["ppo"], num_envs=8).hparams.num_envs == 8  # to play: fine
