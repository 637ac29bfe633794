"""Settings refused once a run starts (``SettingsError``: the env's observations, the machine's memory, the
checkpoint resumed from) end a script or ``python -m rl_lightning fit`` as a bad value before the run does: one line
``error: ...`` and exit status 2, no traceback."""

import os
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
from lightning.pytorch.callbacks import ModelCheckpoint

from rl_lightning import DQNModule
from rl_lightning._checks import SettingsError
from rl_lightning.algos.off_policy import check_warmup_settings
from rl_lightning.scripting import run_script

ROOT = Path(__file__).resolve().parents[1]
SMALL = ("--num_envs", "2", "--learning_starts", "16", "--batch_size", "8", "--steps_per_epoch", "5")


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=env, timeout=240)


def _train_dqn(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    script = str(ROOT / "scripts" / "train_dqn.py")
    return _run([sys.executable, script, "--default_root_dir", str(cwd), *SMALL, "--max_steps", "5", *args], cwd)


def _error_line(result: subprocess.CompletedProcess) -> str:
    """The run's one error line, checked to be the last line of stderr, with exit status 2 and no traceback."""
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ")
    return last


def test_run_script_prints_a_settings_error_as_one_line_and_exits_2(capsys):
    def main():
        raise SettingsError("buffer_size: too big")

    with pytest.raises(SystemExit) as exit_:
        run_script(main)
    assert exit_.value.code == 2
    assert capsys.readouterr().err == "error: buffer_size: too big\n"
    assert issubclass(SettingsError, ValueError)  # code catching ValueError still catches it


def test_the_warm_up_refused_for_the_processes_of_a_run_is_a_settings_error():
    with pytest.raises(SettingsError, match=r"2 processes.*learning_starts >= 33"):
        check_warmup_settings(17, num_envs=16, n_step=3, train_freq=1, world_size=2)


def test_frame_replay_on_a_non_image_env_exits_2_with_one_line(tmp_path):
    line = _error_line(_train_dqn("--frame_replay", "true", cwd=tmp_path))
    assert line == (
        "error: frame_replay=True needs frame-stack observations (uint8 (K, H, W), (H, W, K) or (K, H, W, C) with "
        "K >= 2), got (4,) torch.float32: pass frame_replay=None (or False)"
    )


def test_a_replay_buffer_too_big_for_memory_exits_2_with_one_line(tmp_path):
    command = [sys.executable, "-m", "rl_lightning", "fit", "--model", "DQNModule", "--model.buffer_size", str(10**11)]
    command += ["--model.num_envs", "2", "--trainer.max_steps", "5", "--trainer.default_root_dir", str(tmp_path)]
    line = _error_line(_run(command, tmp_path))
    assert line.startswith("error: the replay buffer (100,000,000,000 transitions of (4,) float32, obs and next_obs ")
    assert "GiB on cpu, which has" in line and line.endswith("available: lower buffer_size")


def test_a_resume_with_another_prioritized_alpha_exits_2_with_one_line(tmp_path):
    module = DQNModule(num_envs=2, learning_starts=16, batch_size=8, steps_per_epoch=5, prioritized=True)
    checkpoint = ModelCheckpoint(dirpath=tmp_path, filename="last")
    L.Trainer(
        max_steps=5, logger=False, callbacks=[checkpoint], enable_progress_bar=False, enable_model_summary=False
    ).fit(module)
    resumed = _train_dqn(
        "--prioritized", "true", "--prioritized_alpha", "0.5", "--ckpt_path", str(tmp_path / "last.ckpt"), cwd=tmp_path
    )
    assert _error_line(resumed) == (
        "error: state_dict is from a buffer with alpha=0.6, this one has 0.5: its priorities are p^alpha of the "
        "other alpha (a resumed run: keep prioritized_alpha=0.6)"
    )
