"""Rainbow (``configs/rainbow_cartpole.yaml``: dueling, C51, noisy layers, prioritized replay, 3-step returns) learns
CartPole-v1 on a seed it was not tuned on (seeds 0-4 were), natively and under ``ATEN_CPU_CAPABILITY=default``."""

from pathlib import Path

import pytest
import yaml

from rl_lightning import DQNModule
from tests.quiet_trainer import fit_until_solved

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "rainbow_cartpole.yaml"
#: CartPole-v1 solved: a greedy mean return over 32 episodes.
SOLVED_RETURN = 475.0
#: Updates the test allows (the config's 10,000 take minutes where a seed stalls): 8,000 updates, 129k env steps,
#: over twice the 29k-57k env steps that the fresh seeds 1000-1002 needed (natively and under
#: ATEN_CPU_CAPABILITY=default; the tuning seeds 0-4 needed 25k-45k).
BUDGET_UPDATES = 8_000
# Every test here asserts a learning threshold (run them alone: pytest -m learning).
pytestmark = pytest.mark.learning


def _rainbow(**overrides) -> DQNModule:
    init_args = yaml.safe_load(CONFIG.read_text())["model"]["init_args"]
    return DQNModule(**{**{key: value for key, value in init_args.items() if key != "network"}, **overrides})


def test_the_rainbow_config_solves_cartpole_on_a_seed_it_was_not_tuned_on():
    """Seed 1001 (not among the tuning seeds 0-4): a greedy mean return >= 475 over 32 episodes within
    BUDGET_UPDATES. Measured: solved at 41,008 env steps (2,500 updates, ~30 s), 57,008 under
    ATEN_CPU_CAPABILITY=default."""
    module = _rainbow(seed=1001)
    evaluation = fit_until_solved(module, SOLVED_RETURN, BUDGET_UPDATES)
    assert evaluation.last_metrics["eval/episodic_return"] >= SOLVED_RETURN, evaluation.history
