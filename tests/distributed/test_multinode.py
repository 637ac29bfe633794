"""Two "nodes" on the loopback address: each a ``torchrun --nnodes 2 --node_rank r`` of the training script in a
working directory of its own, as two machines would run it. Only the first node's rank 0 writes logs and
checkpoints; the second node leaves no log directory (each extra node used to leave an empty ``version_0``); the
ranks' envs are seeded apart and their weights stay identical. (SLURM's tasks: ``test_slurm.py``.)"""

import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rl_lightning.scripting import is_launching_process

ROOT = Path(__file__).resolve().parents[2]
HELPER = Path(__file__).resolve().parent / "multinode_fit.py"  # train_vpg.py, recording each rank's weights and seeds


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


def test_two_torchrun_nodes_on_the_loopback_form_one_run_and_a_one_node_resume_says_it_is_not_exact(tmp_path):
    """Two torchrun nodes of train_vpg.py (run with a callback that records each rank's weights and seeds): one log
    directory and report, each global rank's envs seeded apart, identical weights on both. The run's checkpoint,
    resumed on one node, continues from its weights and counters with a warning that the envs start fresh."""
    port = _free_port()
    records = tmp_path / "records"
    processes = []
    for node_rank in (0, 1):
        directory = tmp_path / f"node{node_rank}"
        directory.mkdir()
        command = [
            sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node_rank", str(node_rank),
            "--nproc_per_node", "1", "--master_addr", "127.0.0.1", "--master_port", str(port),
            str(HELPER), str(records), "train_vpg.py", "--accelerator", "cpu", "--devices", "1", "--num_nodes", "2",
            "--strategy", "ddp", "--max_steps", "2", "--num_envs", "4", "--seed", "3", "--no_video",
        ]  # fmt: skip
        processes.append(
            subprocess.Popen(command, cwd=directory, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
    outputs = [process.communicate(timeout=300) for process in processes]
    for process, (out, err) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, (out + err)[-3000:]
    first, second = tmp_path / "node0", tmp_path / "node1"
    assert [path.name for path in (first / "lightning_logs" / "VPG-CartPole-v1").iterdir()] == ["version_0"]
    last = first / "lightning_logs" / "VPG-CartPole-v1" / "version_0" / "checkpoints" / "last.ckpt"
    assert last.is_file()
    assert not (second / "lightning_logs").exists() or not any((second / "lightning_logs").rglob("version_*"))
    # The run's report: once, from the first node (2 processes x 4 envs x 500 steps x 2 rollouts).
    assert "done: " in outputs[0][0] and "8,000 env steps, 2 updates" in outputs[0][0]
    assert "done: " not in outputs[1][0]
    rank0 = torch.load(records / "rank0.pt", weights_only=True)
    rank1 = torch.load(records / "rank1.pt", weights_only=True)
    assert (rank0["world_size"], rank0["node_rank"], rank1["node_rank"]) == (2, 0, 1)
    assert rank0["seeds"]["env"] == 3 and rank1["seeds"]["env"] == 3 + 4  # seed + global rank x num_envs
    assert rank0["seeds"]["actions"] != rank1["seeds"]["actions"]
    assert rank0["env_steps"] == rank1["env_steps"] == 8000 and rank0["global_step"] == rank1["global_step"] == 2
    assert rank0["state_dict"].keys() == rank1["state_dict"].keys()
    for name, tensor in rank0["state_dict"].items():
        assert torch.equal(tensor, rank1["state_dict"][name]), name

    # The same checkpoint on one node of one process: a clear warning, then one more update of 4 x 500 env steps.
    command = [str(ROOT / "scripts" / "train_vpg.py"), "--ckpt_path", str(last), "--max_steps", "3"]
    command += ["--num_envs", "4", "--seed", "3", "--no_video"]
    result = subprocess.run([sys.executable, *command], cwd=first, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    warning = " ".join(result.stderr.split())
    assert "not an exact resume: the checkpoint was saved by a run of 2 process(es) (num_nodes x devices), " in warning
    assert "this run has 1; weights, optimizer and env-step counter are restored" in warning
    assert "Resume on 2 process(es) in all to continue exactly" in warning
    assert "at env step 8,000" in result.stdout.splitlines()[0]
    assert "10,000 env steps, 3 updates" in result.stdout
