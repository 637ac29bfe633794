"""DDP on CPU: two gloo processes train, log once, finish, and end with identical weights."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

HERE = Path(__file__).resolve().parent


def _run(tmp_path: Path, strategy: str, algo: str = "vpg") -> tuple[dict, dict]:
    result = subprocess.run(
        [sys.executable, str(HERE / "ddp_fit.py"), str(tmp_path), strategy, algo],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return torch.load(tmp_path / "rank0.pt"), torch.load(tmp_path / "rank1.pt")


@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn"])
def test_vpg_ddp_two_cpu_processes_end_with_identical_weights(tmp_path, strategy):
    rank0, rank1 = _run(tmp_path, strategy)
    assert rank0["world_size"] == rank1["world_size"] == 2
    assert rank0["global_step"] == rank1["global_step"] == 4
    # Env steps are counted globally and identically: 4 rollouts x 8 envs x 50 steps x 2 ranks.
    assert rank0["env_steps"] == rank1["env_steps"] == 4 * 8 * 50 * 2
    for name, tensor in rank0["state_dict"].items():
        torch.testing.assert_close(tensor, rank1["state_dict"][name], rtol=0, atol=0, msg=name)
    # One logger: a single event file from rank 0, with one point per rollout.
    event_files = list(tmp_path.glob("lightning_logs/version_*/events.out.tfevents.*"))
    assert len(event_files) == 1
    events = EventAccumulator(str(event_files[0].parent))
    events.Reload()
    assert [e.value for e in events.Scalars("charts/env_steps")] == [800.0, 1600.0, 2400.0, 3200.0]


def test_ppo_ddp_two_cpu_processes_agree_on_weights_and_running_statistics(tmp_path):
    """4 minibatch updates = 1 rollout of 8 envs x 25 steps per rank; the observation
    normaliser's statistics (buffers) were all-reduced, so both ranks hold the same ones."""
    rank0, rank1 = _run(tmp_path, "ddp", "ppo")
    assert rank0["global_step"] == rank1["global_step"] == 4
    assert rank0["env_steps"] == rank1["env_steps"] == 8 * 25 * 2
    assert "obs_normalizer.stats.count" in rank0["state_dict"]
    assert rank0["state_dict"]["obs_normalizer.stats.count"].item() > 8 * 25 * 2  # both ranks' observations
    for name, tensor in rank0["state_dict"].items():
        torch.testing.assert_close(tensor, rank1["state_dict"][name], rtol=0, atol=0, msg=name)


def test_ppo_ddp_with_two_seeds_each_seed_equals_its_one_seed_ddp_run(tmp_path):
    """num_seeds=2 under DDP: seeds x ranks. Both ranks hold identical weights and statistics for every seed, and
    seed 1 (seed 5) equals a one-seed DDP run with seed 5: its envs on rank r seeded 5 + r * num_envs there too."""
    (tmp_path / "seeds").mkdir()
    (tmp_path / "alone").mkdir()
    rank0, rank1 = _run(tmp_path / "seeds", "ddp", "ppo_seeds")
    alone, _ = _run(tmp_path / "alone", "ddp", "ppo_seed5")
    assert rank0["global_step"] == rank1["global_step"] == 4
    assert rank0["env_steps"] == rank1["env_steps"] == 8 * 25 * 2  # one seed's env steps (each seed took as many)
    for name, tensor in rank0["state_dict"].items():
        torch.testing.assert_close(tensor, rank1["state_dict"][name], rtol=0, atol=0, msg=name)
    for name, tensor in alone["state_dict"].items():
        torch.testing.assert_close(rank0["state_dict"][f"seed_members.0.{name}"], tensor, rtol=0, atol=1e-5, msg=name)
    assert not torch.equal(
        rank0["state_dict"]["obs_normalizer.stats.mean"], alone["state_dict"]["obs_normalizer.stats.mean"]
    )


def test_sac_ddp_two_cpu_processes_end_with_identical_weights_and_their_own_buffers(tmp_path):
    """4 updates; rank r's envs seeded apart, so the buffers differ, but the averaged gradients keep
    actor, critics, temperature and targets identical. Env steps: 32 random (8 vector steps of 2 envs on
    2 ranks) + 4 x 2 x 2."""
    rank0, rank1 = _run(tmp_path, "ddp", "sac")
    assert rank0["global_step"] == rank1["global_step"] == 4
    assert rank0["env_steps"] == rank1["env_steps"] == 32 + 4 * 2 * 2
    assert {"log_alpha", "target_critic.layers.0.weight"} <= rank0["state_dict"].keys()
    for name, tensor in rank0["state_dict"].items():
        torch.testing.assert_close(tensor, rank1["state_dict"][name], rtol=0, atol=0, msg=name)


def test_td3_with_a_policy_delay_under_plain_ddp_says_which_strategy_to_use(tmp_path):
    result = subprocess.run(
        [sys.executable, str(HERE / "ddp_fit.py"), str(tmp_path), "ddp", "td3"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode != 0
    assert "strategy='ddp_find_unused_parameters_true'" in result.stderr
    rank0, rank1 = _run(tmp_path, "ddp_find_unused_parameters_true", "td3")
    for name, tensor in rank0["state_dict"].items():
        torch.testing.assert_close(tensor, rank1["state_dict"][name], rtol=0, atol=0, msg=name)


def test_the_training_script_under_ddp_prints_its_start_line_and_report_once_and_ends(tmp_path):
    """Two gloo processes from scripts/train_vpg.py: the start line and the report (rank 0 only) must not
    wait on a collective the other rank never joins, and Lightning's sync_dist advice for metrics that
    are reduced already is not printed."""
    script = HERE.parents[1] / "scripts" / "train_vpg.py"
    args = [
        "--devices",
        "2",
        "--strategy",
        "ddp",
        "--max_steps",
        "3",
        "--num_envs",
        "8",
        "--num_steps_per_rollout",
        "50",
    ]
    result = subprocess.run(
        [sys.executable, str(script), *args, "--no_video"], cwd=tmp_path, capture_output=True, text=True, timeout=240
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert sum(line.startswith("VPGModule on CartPole-v1") for line in lines) == 1
    assert "8 envs x 2 processes: up to 2,400 env steps (3 updates)" in lines[0]
    assert sum(line.startswith("done: ") for line in lines) == 1
    assert "2,400 env steps, 3 updates" in result.stdout  # 3 rollouts x 8 envs x 50 steps x 2 ranks
    assert "sync_dist" not in result.stderr
    assert (tmp_path / "lightning_logs" / "VPG-CartPole-v1" / "version_0" / "checkpoints" / "last.ckpt").is_file()


def test_a_sigterm_to_a_ddp_script_stops_every_rank_at_one_step_and_resumes_exactly(tmp_path):
    """SIGTERM to the launching rank mid-fit: Lightning's handler broadcast from inside the signal
    handler and hung 4 of 11 tries; now both ranks agree on the step to stop at (an all-reduce at each
    batch's start and in the env loops), write one checkpoint, exit 143, and `--ckpt_path last`
    ends where a run never stopped ends (bit-for-bit resume is tested in one process, tests/resume)."""
    import signal
    import time

    script = HERE.parents[1] / "scripts" / "train_ppo.py"
    args = [
        "--devices",
        "2",
        "--strategy",
        "ddp",
        "--max_steps",
        "800",  # long enough that the SIGTERM 3 s after the start line falls inside the run on a fast machine
        "--num_envs",
        "4",
        "--num_steps_per_rollout",
        "64",
    ]
    args += ["--no_video", "--no_stop_when_solved", "--eval_every_n_env_steps", "1000000", "--env_id", "Acrobot-v1"]

    def run(directory: Path, *extra: str, stop_after: float | None = None) -> tuple[int, str]:
        directory.mkdir(exist_ok=True)
        process = subprocess.Popen(
            [sys.executable, str(script), *args, *extra],
            cwd=directory,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        if stop_after is not None:
            line = process.stdout.readline()  # the start line: both ranks are set up
            assert line.startswith("PPOModule on Acrobot-v1"), line + process.stderr.read()
            time.sleep(stop_after)
            process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=240)
        return process.returncode, err

    def last(directory: Path) -> dict:
        paths = sorted(directory.glob("lightning_logs/PPO-Acrobot-v1/version_*/checkpoints/last.ckpt"))
        return torch.load(paths[-1], weights_only=True)

    code, err = run(tmp_path / "split", stop_after=3.0)
    assert code == 143, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert _processes_in(tmp_path / "split") == []  # no rank left running
    stopped = last(tmp_path / "split")
    assert 0 < stopped["global_step"] < 800
    # The stop checkpoint is at a step boundary of both ranks: each saved its own source state there.
    assert len(stopped["rl_lightning"]["sources"]) == 2
    rollouts = -(-stopped["global_step"] // 16)  # 4 epochs x 4 minibatches per rollout of 2 x 4 x 64 env steps
    assert stopped["rl_lightning"]["env_steps"] == rollouts * 2 * 4 * 64
    code, err = run(tmp_path / "split", "--ckpt_path", "last")
    assert code == 0, err[-3000:]
    resumed = last(tmp_path / "split")
    assert resumed["global_step"] == 800 and resumed["rl_lightning"]["env_steps"] == 50 * 2 * 4 * 64


def _processes_in(directory: Path) -> list[int]:
    """The processes whose working directory is ``directory`` (the script and the ranks it launched)."""
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if Path(os.readlink(proc / "cwd")) == directory:
                pids.append(int(proc.name))
        except (OSError, ValueError):
            continue
    return pids
