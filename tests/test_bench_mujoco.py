"""benchmarks/bench_mujoco.py's report: the table's numbers from a runs file (mean +- standard error over seeds,
the difference to SB3 in standard errors, the speed ratio, Tianshou's published value), not the runs themselves."""

import json
import math
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_mujoco  # noqa: E402


def run_row(lib: str, seed: int, final: float, cpu_s: float, steps: int = 100_000) -> dict:
    # [env step, greedy mean, its std, training CPU s, training wall s]
    points = [[0, 0.0, 0.0, 0.0, 0.0], [50_000, final / 2, 1.0, cpu_s / 2, cpu_s / 2]]
    points.append([steps, final, 1.0, cpu_s, cpu_s])
    key = {"algo": "sac", "env_id": "Hopper-v5", "lib": lib, "seed": seed}
    return {**key, "env_steps": steps, "steps_done": steps, "done": True, "cpu_s": cpu_s, "wall_s": cpu_s,
            "machine": "test CPU", "points": points}  # fmt: skip


@pytest.fixture
def paths(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_mujoco, "RUNS", tmp_path / "runs.jsonl")
    monkeypatch.setattr(bench_mujoco, "TABLE", tmp_path / "mujoco.md")
    monkeypatch.setattr(bench_mujoco, "PLOT", tmp_path / "curves.png")
    return tmp_path


def test_difference_is_in_standard_errors_of_the_difference():
    ours, theirs = [10.0, 14.0, 12.0], [8.0, 9.0, 13.0]
    se = math.sqrt(statistics.variance(ours) / 3 + statistics.variance(theirs) / 3)
    assert bench_mujoco.difference(ours, theirs) == f"+2 ({2 / se:+.1f} SE)"
    assert bench_mujoco.difference([5.0], theirs) == "-"  # one seed has no standard error


def test_reference_names_tianshous_step_where_it_differs():
    assert bench_mujoco.reference("sac", "Hopper-v5", 100_000) == "2614 +- 330 (n=10)"
    assert bench_mujoco.reference("ppo", "Walker2d-v5", 100_000) == "426 +- 20 (n=10, at 122,880)"
    assert bench_mujoco.reference("sac", "Ant-v5", 100_000) == "-"


def test_report_row_from_a_runs_file(paths):
    rows = [run_row("ours", 1, 1000.0, 800.0), run_row("ours", 2, 1400.0, 1000.0)]
    rows += [run_row("sb3", 1, 900.0, 1000.0), run_row("sb3", 2, 1100.0, 1250.0)]
    partial = {**run_row("sb3", 3, 5000.0, 100.0, steps=60_000), "done": False}  # unfinished: not counted
    paths.joinpath("runs.jsonl").write_text("".join(json.dumps(row) + "\n" for row in [*rows, partial]))
    bench_mujoco.report(None)
    table = paths.joinpath("mujoco.md").read_text()
    row = next(line for line in table.splitlines() if line.startswith("| SAC | Hopper-v5"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    se = math.sqrt(statistics.variance([1000, 1400]) / 2 + statistics.variance([900, 1100]) / 2)
    assert cells[2:] == [
        "1200 +- 200 (n=2)",  # mean +- stdev / sqrt(2)
        "900",  # median CPU s
        f"{112.5:.0f}",  # median of 125 and 100 env steps / CPU s
        "1000 +- 100 (n=2)",
        "1,125",
        "90",
        f"+200 ({200 / se:+.1f} SE)",
        f"{statistics.median([125, 100]) / statistics.median([100, 80]):.2f}x",
        "2614 +- 330 (n=10)",
    ]
    assert paths.joinpath("curves.png").stat().st_size > 0
