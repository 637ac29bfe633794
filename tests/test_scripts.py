import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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
            "16",
            "16",
            "--clip_coef",
            "none",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "480 env steps, 2 updates" in result.stdout
    assert "greedy eval return" in result.stdout
    run = tmp_path / "lightning_logs" / "version_0"
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
    assert result.returncode != 0
    assert "unknown env_id 'Nope-v0'" in result.stderr


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
    assert "version_0/checkpoints/last.ckpt" in resumed  # Lightning's "Restoring states from ..."
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
    run = tmp_path / "lightning_logs" / "version_0"
    assert (run / "checkpoints" / "last.ckpt").is_file()
    # Greedy clips at the first update (68 env steps) and when the env steps first reach 100.
    assert sorted(path.name for path in (run / "videos").glob("*.mp4")) == ["step_100.mp4", "step_68.mp4"]
