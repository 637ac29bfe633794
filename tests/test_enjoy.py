"""scripts/enjoy.py plays a checkpoint and writes an MP4."""

import os
import subprocess
import sys
from pathlib import Path

import imageio.v3 as iio
import lightning as L
import pytest

from rl_lightning import DQNModule

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    root = tmp_path_factory.mktemp("enjoy")
    module = DQNModule(env_id="CartPole-v1", num_envs=4, learning_starts=16, batch_size=16)
    trainer = L.Trainer(max_steps=5, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(module)
    trainer.save_checkpoint(root / "dqn.ckpt")
    return root / "dqn.ckpt"


def _enjoy(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(ROOT / "scripts" / "enjoy.py"), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("backend", ["torch", "gymnasium"])
def test_enjoy_plays_greedy_episodes_and_writes_an_mp4(tmp_path, checkpoint, backend):
    video = tmp_path / f"{backend}.mp4"
    result = _enjoy("--ckpt_path", str(checkpoint), "--episodes", "2", "--backend", backend, "--video", str(video))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "CartPole-v1: 2 greedy episodes, returns [" in result.stdout
    returns = [float(r) for r in result.stdout.split("returns [")[1].split("]")[0].split(",")]
    frames = iio.imread(video)
    assert len(frames) == sum(returns)  # one frame per step, +1 reward per step
    # the native renderer draws 80 x 120, gymnasium's 400 x 600
    assert frames.shape[1:3] == ((80, 120) if backend == "torch" else (400, 600))


def test_enjoy_says_why_a_file_is_not_a_checkpoint(tmp_path):
    bad = tmp_path / "notes.ckpt"
    bad.write_text("not a checkpoint")
    result = _enjoy("--ckpt_path", str(bad))
    assert result.returncode == 2 and "not a complete torch checkpoint" in result.stderr


def test_enjoy_says_how_the_recording_goes(tmp_path, checkpoint, monkeypatch, capsys):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import enjoy
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    monkeypatch.setattr(enjoy, "PROGRESS_EVERY_S", 0.0)  # a line per frame (5 s apart by default)
    video = tmp_path / "progress.mp4"
    with pytest.raises(SystemExit) as stopped:
        enjoy.main(["--ckpt_path", str(checkpoint), "--episodes", "1", "--video", str(video)])
    assert stopped.value.code == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith(f"recording {video}: ")]
    assert lines and lines[-1].startswith(f"recording {video}: {len(lines):,} frames, ")


def test_enjoy_says_why_a_headless_mujoco_env_cannot_be_recorded(tmp_path):
    pytest.importorskip("mujoco", reason="the mujoco extra is not installed")
    from rl_lightning import SACModule

    module = SACModule(env_id="HalfCheetah-v5", num_envs=1, learning_starts=8, batch_size=8)
    trainer = L.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(module)
    trainer.save_checkpoint(tmp_path / "sac.ckpt")
    environment = {key: value for key, value in os.environ.items() if key not in ("MUJOCO_GL", "DISPLAY")}
    command = [sys.executable, str(ROOT / "scripts" / "enjoy.py"), "--ckpt_path", str(tmp_path / "sac.ckpt")]
    command += ["--video", str(tmp_path / "cheetah.mp4")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, env=environment)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "HalfCheetah-v5 cannot render here: MuJoCo needs an OpenGL context" in result.stderr
    assert "MUJOCO_GL=egl" in result.stderr
