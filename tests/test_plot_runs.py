import importlib.util
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from torch.utils.tensorboard import SummaryWriter

_SCRIPT = Path(__file__).parents[1] / "scripts" / "plot_runs.py"
_spec = importlib.util.spec_from_file_location("plot_runs", _SCRIPT)
plot_runs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plot_runs)

GLOBAL_STEPS = [0, 10, 20, 30]
RETURNS = [9.0, 21.5, 60.0, 200.0]
ENV_STEPS = [512, 5632, 10752, 15872]  # 512 env steps per global step, after a first rollout
SECONDS = [1.0, 2.5, 4.0, 30.0]


def _write_run(log_dir: Path, with_env_steps: bool = True) -> float:
    """A tiny run: the return (and env steps) at 4 global steps. Returns its start time."""
    writer = SummaryWriter(log_dir=str(log_dir))
    start = time.time()  # just after the writer's first event (its file-version event)
    for step, value, env_steps, seconds in zip(GLOBAL_STEPS, RETURNS, ENV_STEPS, SECONDS, strict=True):
        writer.add_scalar("charts/episodic_return", value, step, walltime=start + seconds)
        if with_env_steps:
            writer.add_scalar("charts/env_steps", env_steps, step, walltime=start + seconds)
    writer.close()
    return start


def test_load_scalars_returns_steps_wall_times_and_values(tmp_path):
    start = _write_run(tmp_path / "version_0")

    steps, wall_times, values = plot_runs.load_scalars(tmp_path / "version_0", "charts/episodic_return")

    assert steps.tolist() == GLOBAL_STEPS
    np.testing.assert_allclose(wall_times - start, SECONDS, atol=1e-3)
    assert values.tolist() == RETURNS


def test_load_curve_maps_steps_to_env_steps_and_times_from_the_run_start(tmp_path):
    _write_run(tmp_path / "version_0")

    curve = plot_runs.load_curve(tmp_path / "version_0", "charts/episodic_return")

    assert curve.has_env_steps
    assert curve.env_steps.tolist() == ENV_STEPS
    assert curve.values.tolist() == RETURNS
    # Seconds since the run's first event, which came a moment before the first scalar.
    np.testing.assert_allclose(np.diff(curve.seconds), np.diff(SECONDS), atol=1e-3)
    assert SECONDS[0] <= curve.seconds[0] < SECONDS[0] + 1.0


def test_load_curve_falls_back_to_the_global_step_without_env_steps(tmp_path):
    _write_run(tmp_path / "run", with_env_steps=False)

    curve = plot_runs.load_curve(tmp_path / "run", "charts/episodic_return")

    assert not curve.has_env_steps
    assert curve.env_steps.tolist() == GLOBAL_STEPS


def test_missing_tag_or_event_files_raise(tmp_path):
    _write_run(tmp_path / "run")
    with pytest.raises(ValueError, match="charts/episodic_return"):
        plot_runs.load_scalars(tmp_path / "run", "losses/td_loss")
    with pytest.raises(ValueError, match="no TensorBoard event files"):
        plot_runs.load_scalars(tmp_path / "empty", "charts/episodic_return")


def test_cli_writes_a_two_panel_png_of_the_requested_size(tmp_path, capsys):
    _write_run(tmp_path / "lightning_logs" / "version_0")
    _write_run(tmp_path / "lightning_logs" / "version_1", with_env_steps=False)
    out = tmp_path / "plot.png"

    plot_runs.main(
        [
            str(tmp_path / "lightning_logs" / "version_0"),
            str(tmp_path / "lightning_logs" / "version_1"),
            "--tag",
            "charts/episodic_return",
            "--out",
            str(out),
            "--labels",
            "vpg",
            "dqn",
        ]
    )

    assert "wrote" in capsys.readouterr().out
    with Image.open(out) as image:
        assert image.format == "PNG"
        assert image.size == (1200, 450)  # figsize (12, 4.5) at 100 dpi
        pixels = np.asarray(image.convert("RGB"))
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 10  # lines and text, not a blank image


def test_cli_needs_one_label_per_run(tmp_path):
    _write_run(tmp_path / "run")
    with pytest.raises(SystemExit):
        plot_runs.main([str(tmp_path / "run"), "--labels", "a", "b", "--out", str(tmp_path / "p.png")])
