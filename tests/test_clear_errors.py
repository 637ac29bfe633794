"""Issue 31, the crashes and poor messages: each setting is refused where it enters, with a message that
names it and what is allowed (a ValueError from Python, exit status 2 from the command line)."""

import importlib.util
import math
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import lightning as L
import numpy as np
import pytest
import torch
from quiet_trainer import quiet_fit

from rl_lightning import DQNModule, SACModule, TD3Module, VPGModule
from rl_lightning.algos.off_policy import check_warmup_settings
from rl_lightning.callbacks.guard import RunGuard, check_trainer_settings
from rl_lightning.cli import make_cli

ROOT = Path(__file__).resolve().parents[1]


class _SpacesEnv(gym.Env):
    """Zeros of ``observation_space``, for any ``action_space``; 10 steps an episode."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space):
        self.observation_space, self.action_space = observation_space, action_space

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}


def _register(env_id: str, observation_space: gym.Space, action_space: gym.Space) -> str:
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=lambda: _SpacesEnv(observation_space, action_space), max_episode_steps=10)
    return env_id


VECTOR = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)


def _huge_bounds_env(bound: float) -> str:
    return _register(
        f"ClearErrorsBounds{int(math.log10(bound))}-v0", VECTOR, gym.spaces.Box(-bound, bound, (1,), np.float32)
    )


# -- learning_starts and n_step ---------------------------------------------------------------------


def test_a_warmup_too_short_for_n_step_samples_is_refused_at_construction():
    # 16 envs, train_freq 1: the first sample needs 3 steps per env, 1 from the first collection and
    # ceil(learning_starts / 16) >= 2 random ones.
    with pytest.raises(ValueError, match=r"learning_starts \(0\).*n_step=3.*learning_starts >= 17"):
        DQNModule(learning_starts=0, n_step=3)
    with pytest.raises(ValueError, match=r"learning_starts >= 17"):
        DQNModule(learning_starts=16, n_step=3)
    with pytest.raises(ValueError, match=r"learning_starts \(1\).*n_step=3.*num_envs=1.*learning_starts >= 2"):
        SACModule(learning_starts=1, n_step=3)
    with pytest.raises(ValueError, match=r"train_freq >= 4"):
        TD3Module(num_envs=2, learning_starts=2, n_step=4, train_freq=2)


def test_the_smallest_accepted_warmup_samples():
    quiet_fit(DQNModule(learning_starts=17, n_step=3, batch_size=8, buffer_size=200), max_steps=2)
    quiet_fit(
        DQNModule(num_envs=4, learning_starts=1, n_step=3, train_freq=2, batch_size=8, buffer_size=200), max_steps=2
    )
    quiet_fit(
        DQNModule(num_envs=4, learning_starts=0, n_step=3, train_freq=3, batch_size=8, buffer_size=200), max_steps=2
    )


def test_the_warmup_of_several_processes_counts_them_all():
    check_warmup_settings(17, num_envs=16, n_step=3, train_freq=1)
    # learning_starts counts every process's env steps: under DDP each plays its share.
    with pytest.raises(ValueError, match=r"2 processes.*learning_starts >= 33"):
        check_warmup_settings(17, num_envs=16, n_step=3, train_freq=1, world_size=2)
    check_warmup_settings(33, num_envs=16, n_step=3, train_freq=1, world_size=2)


# -- compile ----------------------------------------------------------------------------------------


def test_compile_refuses_an_unknown_mode_or_backend_and_mode_with_options():
    with pytest.raises(ValueError, match=r"compile got mode 'fastest'; allowed modes: .*max-autotune"):
        DQNModule(compile={"mode": "fastest"})
    with pytest.raises(ValueError, match=r"compile got backend 'fast'; allowed backends: .*inductor"):
        SACModule(compile={"backend": "fast"})
    with pytest.raises(ValueError, match=r"compile got both mode .* and options"):
        VPGModule(compile={"mode": "max-autotune", "options": {"max_autotune": True}})
    module = DQNModule(compile={"backend": "aot_eager", "mode": "reduce-overhead"})  # torch's names pass
    assert module.compiled.options == {"backend": "aot_eager", "mode": "reduce-overhead"}


# -- Trainer settings from the command line ----------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "words"),
    [
        (["--trainer.precision", "64-true"], ["precision='64-true'", "'32-true'", "'bf16-mixed'"]),
        (["--trainer.accumulate_grad_batches", "2"], ["accumulate_grad_batches=2", "accumulate_grad_batches=1"]),
    ],
)
def test_cli_refuses_unsupported_trainer_settings_with_exit_status_2(tmp_path, monkeypatch, capsys, flag, words):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["rl-lightning"])
    with pytest.raises(SystemExit) as exit_info:
        make_cli(["fit", "--model", "VPGModule", *flag, "--trainer.max_steps", "2"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and all(word in err for word in words), err
    assert not (tmp_path / "lightning_logs").exists()  # refused before the run's directory


def test_script_refuses_an_unsupported_precision_with_exit_status_2(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "train_vpg.py"), "--precision", "64-true", "--no_video"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "precision='64-true'" in result.stderr and "'32-true'" in result.stderr


def test_run_guard_and_the_command_line_share_one_rule():
    with pytest.raises(ValueError, match="precision='64-true'"):
        check_trainer_settings(L.Trainer(precision="64-true", logger=False))
    with pytest.raises(ValueError, match="accumulate_grad_batches=3"):
        check_trainer_settings(L.Trainer(accumulate_grad_batches=3, logger=False))
    check_trainer_settings(L.Trainer(precision="bf16-mixed", logger=False))


# -- action bounds ------------------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", [SACModule, TD3Module])
def test_action_bounds_float32_cannot_square_are_refused_at_construction(algorithm):
    with pytest.raises(ValueError, match=r"action bounds must be within \+-1.8e\+19, got 1e\+38.*RescaleAction"):
        algorithm(env_id=_huge_bounds_env(1e38))


def test_nan_guard_names_huge_action_bounds_instead_of_the_learning_rate():
    guard = RunGuard()
    module = SACModule(env_id=_huge_bounds_env(1e10), hidden_sizes=(8,))
    guard._finite = torch.zeros((), dtype=torch.bool)
    with pytest.raises(FloatingPointError) as error:
        guard._raise_if_not_finite(module)
    message = str(error.value)
    assert "action bounds reach 1e+10" in message and "RescaleAction" in message and "[-1, 1]" in message
    assert "learning rate" not in message
    # Sensible bounds (Pendulum's +-2): the learning rate, as before.
    guard._finite = torch.zeros((), dtype=torch.bool)
    with pytest.raises(FloatingPointError, match=r"lower learning rate \(lr=0.0003\)"):
        guard._raise_if_not_finite(SACModule(hidden_sizes=(8,)))


# -- observations SAC and TD3 cannot take ----------------------------------------------------------


@pytest.mark.parametrize("algorithm", [SACModule, TD3Module])
def test_a_tuple_observation_is_read_as_its_parts_concatenated(algorithm):
    env_id = _register(
        "ClearErrorsTuple-v0", gym.spaces.Tuple((VECTOR, VECTOR)), gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    )
    module = algorithm(env_id=env_id, hidden_sizes=(8,))
    assert list(module.critic.flat.shapes) == ["0", "1"]
    size = sum(math.prod(part.shape) for part in (VECTOR, VECTOR))
    assert module.critic.layers[0].weight.shape[-2:] == (size + 1, 8)


# -- the sweep example -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sweep():
    pytest.importorskip("optuna")
    spec = importlib.util.spec_from_file_location("sweep_optuna", ROOT / "examples" / "sweep_optuna.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["sweep_optuna"] = module
    spec.loader.exec_module(module)
    return module


def _sweep_error(sweep, capsys, *args: str) -> str:
    with pytest.raises(SystemExit) as exit_info:
        sweep.main(["--n_trials", "1", *args])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_sweep_refuses_a_budget_below_one_evaluation(sweep, capsys):
    err = _sweep_error(sweep, capsys, "--budget_env_steps", "100")
    assert "--budget_env_steps (100) must reach the first evaluation point (32,000 env steps)" in err


def test_sweep_refuses_a_storage_it_cannot_write(sweep, capsys, tmp_path):
    err = _sweep_error(sweep, capsys, "--storage", f"sqlite:///{tmp_path / 'no_such_dir' / 'sweep.db'}")
    assert "--storage" in err and "cannot open or write the study there" in err and "unable to open" in err
    # A database opened read-only (what a read-only file is, for a user who is not root).
    sweep.make_study(sweep.SweepSettings(), f"sqlite:///{tmp_path / 'sweep.db'}")
    err = _sweep_error(sweep, capsys, "--storage", f"sqlite:///file:{tmp_path / 'sweep.db'}?mode=ro&uri=true")
    assert "readonly database" in err
