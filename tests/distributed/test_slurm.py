"""SLURM on the loopback: the training scripts started as SLURM tasks (the ``SLURM_*`` variables srun sets, which
Lightning's ``SLURMEnvironment`` reads), and SLURM's requeue: the requeue signal (SIGUSR1) writes Lightning's
``hpc_ckpt_N.ckpt`` at a step every rank agrees on, ``scontrol requeue`` is called (a fake ``scontrol`` on PATH
records it), and the requeued job, the same command with the same job id, resumes from that file exactly."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException

from rl_lightning import VPGModule
from rl_lightning.callbacks import CheckpointOnStop

ROOT = Path(__file__).resolve().parents[2]
HELPER = Path(__file__).resolve().parent / "multinode_fit.py"  # a training script that records each rank's weights
QUIET = ["--no_video", "--no_stop_when_solved", "--eval_every_n_env_steps", "1000000", "--num_eval_episodes", "2"]
#: What srun sets, but also what a launcher set in this test's own environment (CI may itself run in SLURM).
_LAUNCHER_VARIABLES = ("LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _fake_scontrol(directory: Path) -> Path:
    """A ``scontrol`` that appends its arguments to ``directory/scontrol.log``; returns the folder to put on PATH."""
    bin_dir = directory / "bin"
    bin_dir.mkdir(parents=True)
    script = bin_dir / "scontrol"
    script.write_text(f'#!/bin/sh\necho "$@" >> "{directory / "scontrol.log"}"\n')
    script.chmod(0o755)
    return bin_dir


def _slurm_variables(job_id: int, num_tasks: int, task: int, bin_dir: Path, port: int) -> dict[str, str]:
    """The environment of SLURM task ``task`` of ``num_tasks``, one task per node, all nodes this machine."""
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("SLURM_") and name not in _LAUNCHER_VARIABLES and name != "RL_LIGHTNING_RUN_VERSIONS"
    }
    environment.update(
        SLURM_JOB_ID=str(job_id),
        SLURM_JOB_NAME="train",  # not "bash" / "interactive", which Lightning reads as "not a SLURM job"
        SLURM_NTASKS=str(num_tasks),
        SLURM_NTASKS_PER_NODE="1",
        SLURM_NNODES=str(num_tasks),
        SLURM_PROCID=str(task),
        SLURM_LOCALID="0",
        SLURM_NODEID=str(task),
        SLURM_NODELIST="127.0.0.1",  # Lightning's MASTER_ADDR: the first node
        MASTER_PORT=str(port),  # (else 15000 + the job id's last 4 digits)
        PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    return environment


def _start_tasks(directory: Path, job_id: int, num_tasks: int, command: list[str]) -> list[subprocess.Popen]:
    port = _free_port()
    return [
        subprocess.Popen(
            [sys.executable, *command],
            cwd=directory,  # a shared file system: every task in one directory
            env=_slurm_variables(job_id, num_tasks, task, directory / "bin", port),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for task in range(num_tasks)
    ]


def _finish(processes: list[subprocess.Popen]) -> list[tuple[int, str, str]]:
    outputs = [process.communicate(timeout=300) for process in processes]
    return [(process.returncode, out, err) for process, (out, err) in zip(processes, outputs, strict=True)]


def _load(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def _assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


def test_two_slurm_tasks_on_the_loopback_form_one_run(tmp_path):
    """Two tasks (two "nodes") of train_vpg.py: one DDP run of 2 processes with Lightning's SLURMEnvironment,
    one log directory and report, each rank's envs seeded apart (seed + rank * num_envs), identical weights."""
    _fake_scontrol(tmp_path)
    command = [str(HELPER), str(tmp_path / "records"), "train_vpg.py", "--num_nodes", "2", "--strategy", "ddp"]
    command += ["--max_steps", "2", "--num_envs", "4", "--num_steps_per_rollout", "64", "--seed", "3", *QUIET]
    results = _finish(_start_tasks(tmp_path, 5501, 2, command))
    for code, out, err in results:
        assert code == 0, (out + err)[-3000:]
    assert [path.name for path in (tmp_path / "lightning_logs" / "VPG-CartPole-v1").iterdir()] == ["version_0"]
    assert (tmp_path / "lightning_logs" / "VPG-CartPole-v1" / "version_0" / "checkpoints" / "last.ckpt").is_file()
    assert "4 envs x 2 processes" in results[0][1] and "1,024 env steps, 2 updates" in results[0][1]
    assert "done: " not in results[1][1]  # the report once, from rank 0
    assert not (tmp_path / "scontrol.log").exists()  # nothing requeued
    rank0, rank1 = _load(tmp_path / "records" / "rank0.pt"), _load(tmp_path / "records" / "rank1.pt")
    assert (rank0["world_size"], rank0["node_rank"], rank1["node_rank"]) == (2, 0, 1)
    assert rank0["seeds"]["env"] == 3 and rank1["seeds"]["env"] == 3 + 4  # no two envs of the run share a seed
    assert rank0["seeds"]["actions"] != rank1["seeds"]["actions"]
    assert rank0["env_steps"] == rank1["env_steps"] == 2 * 2 * 4 * 64  # counted over both ranks
    assert rank0["global_step"] == rank1["global_step"] == 2
    _assert_same_weights(rank0["state_dict"], rank1["state_dict"])


def test_the_requeue_signal_writes_an_hpc_checkpoint_requeues_and_the_requeued_job_resumes_exactly(tmp_path):
    """SIGUSR1 to a SLURM task of train_ppo.py mid-fit: it stops at the next safe point, writes last.ckpt and
    hpc_ckpt_1.ckpt, calls `scontrol requeue <job id>` and exits 138. The same command again (the requeued job)
    resumes from hpc_ckpt_1.ckpt and ends bit for bit where a run never stopped ends. (Lightning's own handler saved
    wherever the run was and trained on: in a trial here its requeued job ended 128 env steps and 0.3 in weights off
    a run never stopped.)"""
    script = str(ROOT / "scripts" / "train_ppo.py")
    # long enough that the signal 1.5 s after the start line falls inside the run on a fast machine
    command = [script, "--max_steps", "4000", "--num_envs", "8", "--num_steps_per_rollout", "16", *QUIET]

    job = tmp_path / "job"
    job.mkdir()
    _fake_scontrol(job)
    [process] = _start_tasks(job, 7342, 1, command)
    line = process.stdout.readline()  # the start line: training has started
    assert line.startswith("PPOModule on CartPole-v1"), line + process.stderr.read()
    time.sleep(1.5)
    process.send_signal(signal.SIGUSR1)
    [(code, out, err)] = _finish([process])
    assert code == 138, err[-3000:]
    assert "stopped by SIGUSR1" in err and "Traceback" not in err, err[-3000:]
    assert "SLURM requeue signal: checkpoint hpc_ckpt_1.ckpt; job 7342 requeued" in err
    assert (job / "scontrol.log").read_text() == "requeue 7342\n"
    hpc = _load(job / "hpc_ckpt_1.ckpt")
    last = _load(job / "lightning_logs" / "PPO-CartPole-v1" / "version_0" / "checkpoints" / "last.ckpt")
    assert 0 < hpc["global_step"] < 4000  # it stopped in the middle
    assert hpc["global_step"] == last["global_step"]  # both written at the stop
    assert hpc["rl_lightning"]["env_steps"] == -(-hpc["global_step"] // 16) * 8 * 16  # at a step's boundary
    _assert_same_weights(hpc["state_dict"], last["state_dict"])

    [process] = _start_tasks(job, 7342, 1, command)  # the requeued job: same command, same job id
    [(code, out, err)] = _finish([process])
    assert code == 0, err[-3000:]
    assert "hpc_ckpt_1.ckpt at env step " in out.splitlines()[0], out[:2000]
    assert (job / "scontrol.log").read_text() == "requeue 7342\n"  # not requeued again

    straight = tmp_path / "straight"
    straight.mkdir()
    result = subprocess.run([sys.executable, *command], cwd=straight, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    resumed = _load(job / "lightning_logs" / "PPO-CartPole-v1" / "version_1" / "checkpoints" / "last.ckpt")
    expected = _load(straight / "lightning_logs" / "PPO-CartPole-v1" / "version_0" / "checkpoints" / "last.ckpt")
    assert resumed["global_step"] == expected["global_step"] == 4000
    assert resumed["rl_lightning"]["env_steps"] == expected["rl_lightning"]["env_steps"] == 4000 // 16 * 8 * 16
    _assert_same_weights(resumed["state_dict"], expected["state_dict"])
    _assert_same_weights(resumed["optimizer_states"][0]["state"][0], expected["optimizer_states"][0]["state"][0])


def test_a_requeue_signal_to_one_of_two_slurm_tasks_stops_both_at_one_step_and_the_job_resumes(tmp_path):
    """SLURM signals every task; here only task 0 hears it: both ranks still stop at one step (agreed by an
    all-reduce), the checkpoint holds both ranks' env states, `scontrol requeue` runs once, on rank 0; the
    requeued job resumes on 2 tasks from hpc_ckpt_1.ckpt (run here 2 updates past the stop) with identical
    weights on both ranks."""
    _fake_scontrol(tmp_path)
    args = ["--num_nodes", "2", "--strategy", "ddp", "--num_envs", "4", "--num_steps_per_rollout", "32", *QUIET]
    processes = _start_tasks(
        tmp_path, 8123, 2, [str(HELPER), "records", "train_vpg.py", "--max_steps", "100000", *args]
    )
    line = processes[0].stdout.readline()
    assert line.startswith("VPGModule on CartPole-v1"), line + processes[0].stderr.read()
    time.sleep(1.0)
    processes[0].send_signal(signal.SIGUSR1)
    (code0, _, err0), (code1, _, err1) = _finish(processes)
    assert (code0, code1) == (138, 143), (err0 + err1)[-3000:]
    assert "stopped by SIGUSR1" in err0 and "stopped by a stop request to another process of the run" in err1
    assert (tmp_path / "scontrol.log").read_text() == "requeue 8123\n"
    assert [path.name for path in (tmp_path / "lightning_logs" / "VPG-CartPole-v1").iterdir()] == ["version_0"]
    hpc = _load(tmp_path / "hpc_ckpt_1.ckpt")
    stopped_at = hpc["global_step"]
    assert 0 <= stopped_at < 100000
    assert hpc["rl_lightning"]["env_steps"] == stopped_at * 2 * 4 * 32
    assert len(hpc["rl_lightning"]["sources"]) == 2 and None not in hpc["rl_lightning"]["sources"]

    max_steps = str(stopped_at + 2)
    processes = _start_tasks(
        tmp_path, 8123, 2, [str(HELPER), "records", "train_vpg.py", "--max_steps", max_steps, *args]
    )
    (code0, out0, err0), (code1, _, err1) = _finish(processes)
    assert code0 == code1 == 0, (err0 + err1)[-3000:]
    assert f"resumed from ./hpc_ckpt_1.ckpt at env step {stopped_at * 256:,}" in out0.splitlines()[0]
    rank0, rank1 = _load(tmp_path / "records" / "rank0.pt"), _load(tmp_path / "records" / "rank1.pt")
    assert rank0["global_step"] == rank1["global_step"] == stopped_at + 2
    assert rank0["env_steps"] == rank1["env_steps"] == (stopped_at + 2) * 256
    _assert_same_weights(rank0["state_dict"], rank1["state_dict"])


class _SignalInSetup(L.Callback):
    """Send this process the requeue signal while the Trainer sets up (before any training step)."""

    def setup(self, trainer, pl_module, stage):
        os.kill(os.getpid(), signal.SIGUSR1)


@pytest.mark.filterwarnings("ignore:Checkpoint directory .* exists and is not empty")
def test_a_requeue_signal_before_training_starts_stops_at_the_first_step(tmp_path, monkeypatch):
    """A signal while DDP starts or a checkpoint loads is held until the first training step (a stop in the middle
    of setting up would leave the ranks waiting for each other, and a checkpoint of a module not yet restored);
    after a fit the signal's handler is the one before it. Lightning's handler is never installed."""
    bin_dir = _fake_scontrol(tmp_path)
    for name in [*(name for name in os.environ if name.startswith("SLURM_")), *_LAUNCHER_VARIABLES]:
        monkeypatch.delenv(name, raising=False)
    for name, value in _slurm_variables(9001, 1, 0, bin_dir, _free_port()).items():
        monkeypatch.setenv(name, value)
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL

    def fit(*extra: L.Callback) -> L.Trainer:
        trainer = L.Trainer(
            max_steps=3,
            default_root_dir=tmp_path,
            logger=False,
            callbacks=[ModelCheckpoint(dirpath=tmp_path / "checkpoints", filename="last"), CheckpointOnStop(), *extra],
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        trainer.fit(VPGModule(num_envs=4, num_steps_per_rollout=16, seed=2))
        return trainer

    with pytest.raises(SIGTERMException):
        fit(_SignalInSetup())
    assert (tmp_path / "scontrol.log").read_text() == "requeue 9001\n"
    hpc = _load(tmp_path / "hpc_ckpt_1.ckpt")
    assert hpc["global_step"] == 0 and hpc["rl_lightning"]["env_steps"] == 0
    assert _load(tmp_path / "checkpoints" / "last.ckpt")["global_step"] == 0
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL  # restored after a fit that stopped, too
    trainer = fit()  # Lightning resumes from hpc_ckpt_1.ckpt: under SLURM, with no ckpt_path
    assert str(trainer.ckpt_path).endswith("hpc_ckpt_1.ckpt") and trainer.global_step == 3
    assert trainer.lightning_module.env_steps == 3 * 4 * 16
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL


def test_the_requeue_checkpoint_is_named_as_lightning_resumes_it_and_scontrol_failures_are_said(tmp_path, monkeypatch):
    from lightning.pytorch.trainer.connectors.checkpoint_connector import _CheckpointConnector

    from rl_lightning.callbacks.interrupt import _requeue, hpc_checkpoint_path

    assert hpc_checkpoint_path(tmp_path) == tmp_path / "hpc_ckpt_1.ckpt"
    for name in ("hpc_ckpt_1.ckpt", "hpc_ckpt_3.ckpt", "last.ckpt"):
        (tmp_path / name).write_bytes(b"")
    assert hpc_checkpoint_path(tmp_path) == tmp_path / "hpc_ckpt_4.ckpt"
    assert Path(_CheckpointConnector.hpc_save_path(tmp_path)) == hpc_checkpoint_path(tmp_path)  # Lightning's own

    monkeypatch.setenv("PATH", str(_fake_scontrol(tmp_path)))
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    assert _requeue(Path("h.ckpt")) == "SLURM requeue signal: checkpoint h.ckpt; job 77 requeued: it resumes from there"
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "70")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    assert _requeue(Path("h.ckpt")).endswith("job 70_3 requeued: it resumes from there")  # an array's task
    assert (tmp_path / "scontrol.log").read_text() == "requeue 77\nrequeue 70_3\n"
    (tmp_path / "bin" / "scontrol").write_text("#!/bin/sh\necho 'Requested operation not supported' >&2\nexit 1\n")
    assert _requeue(Path("h.ckpt")) == (
        "SLURM requeue signal: checkpoint h.ckpt; `scontrol requeue 70_3` failed (Requested operation not supported): "
        "resubmit the job"
    )
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert "`scontrol requeue 70_3` failed (" in _requeue(Path("h.ckpt"))  # no scontrol at all
