"""Two "nodes" on the loopback address: each a ``torchrun --nnodes 2 --node_rank r`` of the training script in a
working directory of its own, as two machines would run it. Only the first node's rank 0 writes logs and
checkpoints; the second node leaves no log directory (each extra node used to leave an empty ``version_0``)."""

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rl_lightning.scripting import is_launching_process

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("variables", "launching"),
    [
        ({}, True),
        ({"LOCAL_RANK": "0", "NODE_RANK": "0"}, True),
        ({"LOCAL_RANK": "1"}, False),  # a rank Lightning's launcher started
        ({"NODE_RANK": "1", "LOCAL_RANK": "0"}, False),
        ({"RANK": "2", "LOCAL_RANK": "0", "GROUP_RANK": "1"}, False),  # torchrun's node 1
        ({"RANK": "0", "LOCAL_RANK": "0", "GROUP_RANK": "0"}, True),  # torchrun's node 0
        ({"SLURM_PROCID": "3"}, False),  # a SLURM task other than the first
        ({"SLURM_PROCID": "0"}, True),
    ],
)
def test_only_the_runs_global_rank_0_is_the_launching_process(monkeypatch, variables, launching):
    for name in ("LOCAL_RANK", "NODE_RANK", "RANK", "GROUP_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert is_launching_process() is launching


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_two_torchrun_nodes_on_the_loopback_write_one_log_directory(tmp_path):
    port = _free_port()
    processes = []
    for node_rank in (0, 1):
        directory = tmp_path / f"node{node_rank}"
        directory.mkdir()
        command = [
            sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node_rank", str(node_rank),
            "--nproc_per_node", "1", "--master_addr", "127.0.0.1", "--master_port", str(port),
            str(ROOT / "scripts" / "train_vpg.py"), "--accelerator", "cpu", "--devices", "1", "--num_nodes", "2",
            "--strategy", "ddp", "--max_steps", "2", "--num_envs", "4", "--no_video",
        ]  # fmt: skip
        processes.append(
            subprocess.Popen(command, cwd=directory, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
    outputs = [process.communicate(timeout=240) for process in processes]
    for process, (out, err) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, (out + err)[-3000:]
    first, second = tmp_path / "node0", tmp_path / "node1"
    assert [path.name for path in (first / "lightning_logs" / "VPG-CartPole-v1").iterdir()] == ["version_0"]
    assert (first / "lightning_logs" / "VPG-CartPole-v1" / "version_0" / "checkpoints" / "last.ckpt").is_file()
    assert not (second / "lightning_logs").exists() or not any((second / "lightning_logs").rglob("version_*"))
    # The run's report: once, from the first node (2 processes x 4 envs x 500 steps x 2 rollouts).
    assert "done: " in outputs[0][0] and "8,000 env steps, 2 updates" in outputs[0][0]
    assert "done: " not in outputs[1][0]
