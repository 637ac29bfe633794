"""Every Python block of the README runs, with short budgets, and the quick start says what is true."""

import re
from pathlib import Path

import lightning as L
import pytest

import rl_lightning.callbacks
from rl_lightning.callbacks import EnvStepBudget

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
PYTHON_BLOCKS = re.findall(r"```python\n(.*?)```", README, flags=re.DOTALL)
# Short budgets: at most a few updates and a few rollouts' env steps, whatever a block asks for.
MAX_STEPS = 4
MAX_ENV_STEPS = 2_048


@pytest.fixture
def short_budgets(monkeypatch, tmp_path):
    trainer_init = L.Trainer.__init__

    def short_trainer(self, *args, **kwargs):
        if kwargs.get("max_steps", -1) not in (-1, None):
            kwargs["max_steps"] = min(kwargs["max_steps"], MAX_STEPS)
        kwargs.setdefault("enable_progress_bar", False)
        trainer_init(self, *args, **kwargs)

    budget_init = EnvStepBudget.__init__

    def short_budget(self, total_env_steps):
        budget_init(self, min(total_env_steps, MAX_ENV_STEPS))

    monkeypatch.setattr(L.Trainer, "__init__", short_trainer)
    monkeypatch.setattr(EnvStepBudget, "__init__", short_budget)
    monkeypatch.chdir(tmp_path)  # lightning_logs/, checkpoints and exports go here


def test_the_readme_has_its_python_blocks():
    assert len(PYTHON_BLOCKS) >= 6
    assert rl_lightning.callbacks.EnvStepBudget is EnvStepBudget


@pytest.mark.parametrize("index", range(len(PYTHON_BLOCKS)), ids=lambda index: f"block{index}")
def test_each_python_block_runs(index, short_budgets, capsys):
    code = PYTHON_BLOCKS[index]
    exec(compile(code, f"README.md python block {index}", "exec"), {"__name__": f"readme_block_{index}"})


def test_the_quick_start_is_two_commands_and_the_test_command_is_what_ci_runs():
    quick_start = README.split("## Quick start", 1)[1].split("## ", 1)[0]
    commands = re.search(r"```bash\n(.*?)```", quick_start, flags=re.DOTALL).group(1).strip().splitlines()
    assert len(commands) == 2
    install, test = commands
    assert install.startswith("python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0")
    assert install.endswith("python scripts/train_vpg.py")
    ci = (ROOT / ".ci" / "run").read_text()
    assert test == ".venv/bin/python -m pytest -q -n auto"
    assert "\npython -m pytest -q -n auto\n" in ci  # the same command, in CI's own venv
