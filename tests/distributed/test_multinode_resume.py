"""A multi-process run whose processes start from different points (one resumed a checkpoint, another found none,
as nodes without a shared directory do under ``--ckpt_path last``) fails on every rank with a clear error instead
of hanging in its first collective."""

import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

pytestmark = pytest.mark.timeout(300)


def test_ranks_resuming_from_different_points_fail_clearly_not_hang(tmp_path):
    script = str(HERE / "ddp_resume_mismatch.py")
    first = subprocess.run([sys.executable, script, str(tmp_path)], capture_output=True, text=True, timeout=200)
    assert first.returncode == 0, first.stderr[-3000:]
    [checkpoint] = tmp_path.rglob("*.ckpt")
    second = subprocess.run(
        [sys.executable, script, str(tmp_path), str(checkpoint)], capture_output=True, text=True, timeout=200
    )
    assert second.returncode != 0
    message = "the processes of this run start from different points (rank 0: a checkpoint at env step 320, rank 1: "
    assert second.stderr.count(message + "no checkpoint)") == 2  # on both ranks
    assert "zero length" not in second.stderr
