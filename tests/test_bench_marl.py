"""benchmarks/bench_marl.py: a ``--quick`` run prints every throughput row and both learning rows with positive
numbers, and a report keeps the notes written under its marker."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

pytest.importorskip("vmas")

import bench_marl  # noqa: E402


def _cells(text: str, label: str) -> list[str]:
    line = next((line for line in text.splitlines() if line.startswith(f"| {label} |")), None)
    assert line is not None, f"no row {label!r} in:\n{text}"
    return [cell.strip() for cell in line.strip("|").split("|")[1:]]


def _number(cell: str) -> float:
    return float(cell.replace(",", ""))


@pytest.mark.slow
def test_quick_run_prints_every_row_with_positive_numbers(tmp_path):
    out = tmp_path / "marl.md"
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_marl.py"), "--quick", "--no-write", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert not out.exists()  # --no-write
    text = result.stdout
    for label in bench_marl.ROW_LABELS.values():
        median, each, ratio = _cells(text, label)
        assert _number(median) > 0 and _number(each) > 0 and _number(ratio) > 0, label
    assert _cells(text, bench_marl.ROW_LABELS["raw"])[2] == "1.000"  # the reference
    for algorithm in bench_marl.CONFIGS:
        curve, frames, seconds, rate = _cells(text, algorithm)
        points = [point.split(": ") for point in curve.split(", ")]
        assert [_number(frames) for frames, _ in points] == [0, 60, 120]  # before training, then every 60 frames
        assert all(-100 < float(value) < 100 for _, value in points)
        assert _number(frames) == 120 and _number(seconds) >= 0 and _number(rate) > 0


def test_a_new_report_keeps_the_notes_under_the_marker(tmp_path):
    path = tmp_path / "marl.md"
    assert bench_marl._kept_notes(path) == bench_marl.NOTES_MARKER + "\n"
    path.write_text(f"# old tables\n| a | 1 |\n{bench_marl.NOTES_MARKER}\nBenchMARL's settings differ in ...\n")
    assert bench_marl._kept_notes(path) == f"{bench_marl.NOTES_MARKER}\nBenchMARL's settings differ in ...\n"


def test_both_configs_share_the_env_and_differ_only_in_the_critic():
    ippo, mappo = (bench_marl.config_settings(algorithm) for algorithm in ("IPPO", "MAPPO"))
    assert {key for key in ippo if ippo[key] != mappo[key]} == {"critic_keys"}
    assert bench_marl.env_settings()["n_agents"] == 4 and ippo["num_envs"] * ippo["num_steps_per_rollout"] == 60_000
