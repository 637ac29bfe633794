"""benchmarks/bench_configs.py's table: the rows it writes read back as the same runs, one summary row per config
and label (solved k/n, the median env steps to solve against the budget, the lowest fresh return), and the
reference env of an id gymnasium lacks. Not the runs themselves (tests/test_configs_fresh_seeds.py trains)."""

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_configs  # noqa: E402
from bench_configs import Run  # noqa: E402


def _run(seed: int, solved_at: int | None, fresh: float, label: str = "after", config: str = "td3_pendulum") -> Run:
    return Run(
        label, config, seed, solved_at is not None, solved_at, 13_000, -180.0, fresh, -200.0, "Pendulum-v1", 70.0
    )


def test_the_table_reads_back_its_runs_and_keeps_the_notes(tmp_path):
    path = tmp_path / "configs.md"
    runs = [_run(1000, 6_500, -150.25), _run(1001, None, -232.0), _run(1000, 15_360, 500.0, "before", "ppo_cartpole")]
    bench_configs.write_table(path, runs, notes="Tuned on seeds 0-9.")
    back = bench_configs.read_runs(path)
    assert sorted(back) == sorted(run._replace(fresh_return=round(run.fresh_return, 1)) for run in runs)
    assert bench_configs._notes(path).strip() == "Tuned on seeds 0-9."
    text = path.read_text()
    assert "| before | ppo_cartpole | Pendulum-v1 | -200 | 1000 | 1/1 | 15,360 (118%) | 13,000 | 500.0 | 1/1 |" in text
    assert (
        "| after | td3_pendulum | Pendulum-v1 | -200 | 1000-1001 | 1/2 | 6,500 (50%) | 13,000 | -232.0 | 1/2 |" in text
    )
    assert "| after | td3_pendulum | 1001 | not solved | 13,000 | -180.0 | -232.0 | -200 | Pendulum-v1 | 70 |" in text


def test_the_median_to_solve_is_over_the_solved_seeds():
    [row] = bench_configs.summary_rows(
        [_run(1000, 4_000, -150.0), _run(1001, 6_000, -160.0), _run(1002, 9_000, -170.0)]
    )
    assert "| 3/3 | 6,000 (46%) | 13,000 | -170.0 | 3/3 |" in row


@pytest.mark.parametrize(("text", "seeds"), [("1000-1009", list(range(1000, 1010))), ("0-2,9", [0, 1, 2, 9])])
def test_seeds_are_ranges_or_lists(text, seeds):
    assert bench_configs.parse_seeds(text) == seeds
    assert bench_configs.seed_range(seeds) == ("1000-1009" if text == "1000-1009" else "0-2, 9")


@pytest.mark.parametrize(
    ("seeds", "shown"),
    [([*range(10), *range(301, 311)], "0-9, 301-310"), ([5], "5"), ([1, 3, 4], "1, 3-4"), ([0, 1], "0-1")],
)
def test_the_table_names_seeds_as_runs_of_consecutive_ones(seeds, shown):
    assert bench_configs.seed_range(seeds) == shown


def test_cartpole_novel_is_measured_on_gymnasiums_cartpole_seen_as_x_and_theta():
    env = bench_configs.reference_env("CartPoleNoVel-v1")
    obs, _ = env.reset(seed=3)
    full, _ = env.unwrapped.reset(seed=3)
    assert env.observation_space.shape == (2,)
    np.testing.assert_array_equal(obs, full[[0, 2]])
    assert bench_configs.reference_env("Pendulum-v1").spec.id == "Pendulum-v1"


def test_an_unknown_or_unmeasured_config_is_a_usage_error(capsys):
    with pytest.raises(SystemExit):
        bench_configs.main(["--configs", "no_such_config"])
    assert "no configs/no_such_config.yaml" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench_configs.main(["--configs", "td3_mujoco"])
    assert "td3_mujoco is not measured here" in capsys.readouterr().err
