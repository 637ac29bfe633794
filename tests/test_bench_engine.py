"""benchmarks/bench_engine.py: its plain loop does Trainer.fit's work (the same weights after a short seeded
run, for every algorithm row), and a ``--quick`` run prints the whole table."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_engine  # noqa: E402

ALGORITHM_ROWS = ("ppo_cartpole", "ppo_pendulum", "dqn_cartpole", "sac_pendulum")


@pytest.mark.parametrize("key", ALGORITHM_ROWS)
def test_plain_loop_reproduces_trainer_fit(key):
    row = bench_engine.ROWS[key]
    assert bench_engine.weight_difference(row, torch.device("cpu")) == 0.0


@pytest.mark.parametrize(
    ("key", "skipped"),
    [("ppo_cartpole", "before_update"), ("dqn_cartpole", "after_update"), ("sac_pendulum", "after_update")],
)
def test_check_sees_a_plain_loop_that_skips_a_callback(key, skipped, monkeypatch):
    # Without the LR annealing (PPO), the target copy and epsilon (DQN) or the Polyak update (SAC) the
    # weights differ: the check would catch a plain loop that does less than Trainer.fit.
    monkeypatch.setattr(bench_engine._PlainCallbacks, skipped, lambda self, *args: None)
    assert bench_engine.weight_difference(bench_engine.ROWS[key], torch.device("cpu")) > 0.0


def test_plain_loop_refuses_a_callback_it_does_not_know(monkeypatch):
    row = bench_engine.ROWS["dqn_cartpole"]
    module = bench_engine.build_module(row)
    extra = bench_engine.L.Callback()
    monkeypatch.setattr(type(module), "configure_callbacks", lambda self: [extra])
    with pytest.raises(TypeError, match="does not know what Callback does"):
        bench_engine.plain_loop(module, 2, torch.device("cpu"))


@pytest.mark.slow
def test_quick_run_prints_every_row_with_positive_numbers(tmp_path):
    out = tmp_path / "engine.md"
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_engine.py"),
            "--quick",
            "--no-write",
            "--out",
            str(out),
            "--variants",  # SB3 is the bench extra's, not the test tools'
            "lightning",
            "plain",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert not out.exists()  # --no-write
    text = result.stdout
    rate_table, ms_table = text.split("## ms per update")
    for key in bench_engine.DEFAULT_ROWS:
        label = bench_engine.ROWS[key].label
        tables = (ms_table,) if bench_engine.ROWS[key].module_class is None else (rate_table, ms_table)
        for table in tables:
            line = next(line for line in table.splitlines() if line.startswith(f"| {label} |"))
            cells = [cell.strip() for cell in line.strip("|").split("|")[1:]]
            numbers = [cell for cell in cells if cell != "n/a"]
            assert len(numbers) >= 2, line  # lightning and plain (and the PPO rows' update count)
            for cell in numbers:
                value = float(cell.removesuffix("k")) * (1000 if cell.endswith("k") else 1)
                assert value > 0, line
    assert re.search(r"DQN CartPole-v1: Lightning's share \(lightning vs plain\) [+-]\d+%", text)
    assert re.search(r"bare Lightning step: Lightning's share", text)


def test_compile_cell_is_na_for_an_algorithm_without_compile():
    class WithoutCompile:  # an algorithm before it takes compile=True
        def __init__(self, seed: int = 0):
            raise AssertionError("not built: the cell is n/a")

    row = bench_engine.Row("without", "without compile", WithoutCompile)
    assert not bench_engine.accepts_compile(row)
    assert bench_engine.run_compile(row, 10, torch.device("cpu")) is None
    assert bench_engine.accepts_compile(bench_engine.ROWS["dqn_cartpole"])
