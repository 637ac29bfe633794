"""The engine before and after a change: ``bench_engine.py`` of two git revisions, run alternately in separate
processes (one repeat each, ``--rounds`` times: the same load on both), medians of ms per update, and the ratios.

    python benchmarks/compare_engine.py BEFORE_REV [AFTER_REV] [--rounds 3] [--variants lightning plain ...]
        [--rows ...] [--out benchmarks/results/engine_before_after.md]

AFTER_REV defaults to the working tree. Each revision is exported with ``git archive`` to a temporary folder and
imported from there (``PYTHONPATH``), so neither run sees the other's code.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import lightning
import torch
from _time_to_solve import machine_line

ROOT = Path(__file__).resolve().parents[1]
LINE = re.compile(r"^repeat \d+: (?P<row>.+?) (?P<variant>\w+): (?P<ms>[\d.]+) ms per update$")


def export(revision: str, into: Path) -> Path:
    """``revision``'s tree (None: the working tree) in ``into``."""
    if revision == "WORKTREE":
        return ROOT
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", revision], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def run_once(tree: Path, rows: list[str] | None, variants: list[str]) -> dict[tuple[str, str], float]:
    """One repeat of ``bench_engine.py`` from ``tree``: ms per update per (row, variant)."""
    command = [sys.executable, str(tree / "benchmarks" / "bench_engine.py"), "--repeats", "1", "--no-write"]
    command += ["--variants", *variants] + (["--rows", *rows] if rows else [])
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{tree / 'benchmarks'}"}
    result = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, check=True)
    found = {}
    for line in result.stdout.splitlines():
        match = LINE.match(line.strip())
        if match:
            found[(match["row"], match["variant"])] = float(match["ms"])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before")
    parser.add_argument("after", nargs="?", default="WORKTREE")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", nargs="+", default=["lightning", "lightning_k1", "plain"])
    parser.add_argument("--rows", nargs="+", default=None)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/engine_before_after.md"))
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        trees = {name: export(rev, Path(tmp) / name) for name, rev in (("before", args.before), ("after", args.after))}
        times: dict[str, dict[tuple[str, str], list[float]]] = {"before": defaultdict(list), "after": defaultdict(list)}
        for round_ in range(args.rounds):
            for name, tree in trees.items():
                for key, ms in run_once(tree, args.rows, args.variants).items():
                    times[name][key].append(ms)
                print(f"round {round_ + 1}: {name} done", flush=True)
    keys = [key for key in times["before"] if key in times["after"]]
    lines = [
        "# Engine before and after",
        "",
        f"Command: `python benchmarks/compare_engine.py {args.before} {args.after} --rounds {args.rounds}`",
        machine_line({"torch": torch.__version__, "lightning": lightning.__version__}, load_before),
        "ms per update (CPU time, collection included; `bench_engine.py`'s steady state), medians of the rounds; the "
        "two revisions alternate, one process each.",
        "",
        f"| task | variant | before ({args.before}) | after ({args.after}) | after / before |",
        "|---|---|---:|---:|---:|",
    ]
    for row, variant in keys:
        before = statistics.median(times["before"][(row, variant)])
        after = statistics.median(times["after"][(row, variant)])
        lines.append(f"| {row} | {variant} | {before:.3f} | {after:.3f} | {after / before:.2f} |")
    share = []
    for which in ("before", "after"):
        for row in dict.fromkeys(row for row, _ in keys):
            lit, plain = times[which].get((row, "lightning")), times[which].get((row, "plain"))
            if lit and plain:
                ratio = statistics.median(lit) / statistics.median(plain) - 1
                share.append(f"- {which}: {row}: Lightning's share (lightning vs plain) {ratio:+.0%}")
    text = "\n".join([*lines, "", *share]) + "\n"
    print(text)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
