"""The shell commands of the README's Train section run as printed, with their real budgets, and do what their
comments say: each training command ends solved ("done: solved: ..."), the resume picks up the run before it."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
TRAIN = README[README.index("## Train") : README.index("## Watch a run")]
[COMMANDS] = [block for block in re.findall(r"```bash\n(.*?)```", TRAIN, flags=re.DOTALL) if "scripts/" in block]
LINES = [line.split("#")[0].strip() for line in COMMANDS.strip().splitlines()]

pytestmark = [pytest.mark.learning, pytest.mark.timeout(900)]


def _run(command: str, cwd: Path) -> str:
    words = shlex.split(command)
    if words[0] == "python":
        words = [sys.executable, str(ROOT / words[1]), *words[2:]]
    elif words[0] == "rl-lightning":
        words = [sys.executable, "-m", "rl_lightning", *words[1:]]
    words = [str(ROOT / word) if word.startswith("configs/") else word for word in words]
    process = subprocess.run(words, cwd=cwd, capture_output=True, text=True, timeout=600, check=False)
    assert process.returncode == 0, f"{command}\n{(process.stdout + process.stderr)[-3000:]}"
    return process.stdout + process.stderr


def test_the_train_section_shows_these_commands():
    assert LINES == [
        "python scripts/train_ppo.py",
        "python scripts/train_dqn.py",
        "rl-lightning fit --config configs/ppo_pendulum.yaml",
        "rl-lightning fit --config configs/ppo_acrobot.yaml",
        "python scripts/train_vpg.py --max_steps 2",
        "python scripts/train_vpg.py --ckpt_path last",
    ]


@pytest.mark.parametrize("command", LINES[:4])
def test_each_training_command_ends_solved(command, tmp_path):
    """PPO CartPole-v1 >= 475, DQN CartPole-v1 >= 475, PPO Pendulum-v1 >= -200, PPO Acrobot-v1 >= -100."""
    output = _run(command, tmp_path)
    assert re.search(r"done: solved: greedy eval return -?[\d.]+ \+- [\d.]+ \(>= -?\d+\)", output), output[-2000:]


def test_the_resume_command_continues_the_run_before_it_to_solved(tmp_path):
    """VPG on CartPole-v1: 2 updates, then resumed from its last.ckpt until greedy >= 475."""
    first = _run(LINES[4], tmp_path)
    assert "done: budget used up" in first and "2 updates" in first
    second = _run(LINES[5], tmp_path)
    assert "VPG-CartPole-v1/version_0/checkpoints/last.ckpt" in second  # the run it resumed
    assert re.search(r"done: solved: greedy eval return [\d.]+ \+- [\d.]+ \(>= 475\)", second), second[-2000:]
