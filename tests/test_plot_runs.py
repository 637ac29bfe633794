import csv
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


def _write_run(log_dir: Path, returns=RETURNS, step_is_env_steps: bool = False, num_points: int = 4) -> float:
    """A tiny run: the return at 4 points. Older runs (``step_is_env_steps=False``) log it against
    the global step next to ``charts/env_steps``; newer ones log it against the env steps. Returns
    the run's start time."""
    writer = SummaryWriter(log_dir=str(log_dir))
    start = time.time()  # just after the writer's first event (its file-version event)
    points = list(zip(GLOBAL_STEPS, returns, ENV_STEPS, SECONDS, strict=True))[:num_points]
    for step, value, env_steps, seconds in points:
        if step_is_env_steps:
            writer.add_scalar("charts/episodic_return", value, env_steps, walltime=start + seconds)
        else:
            writer.add_scalar("charts/episodic_return", value, step, walltime=start + seconds)
            writer.add_scalar("charts/env_steps", env_steps, step, walltime=start + seconds)
    writer.close()
    return start


def _read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="") as file:
        reader = csv.DictReader(file)
        return reader.fieldnames, list(reader)


def _column(rows: list[dict[str, str]], label: str, name: str) -> list[float]:
    return [float(row[name]) for row in rows if row["label"] == label]


# -- reading runs ---------------------------------------------------------------------------


def test_load_scalars_returns_steps_wall_times_and_values(tmp_path):
    start = _write_run(tmp_path / "version_0")

    steps, wall_times, values = plot_runs.load_scalars(tmp_path / "version_0", "charts/episodic_return")

    assert steps.tolist() == GLOBAL_STEPS
    np.testing.assert_allclose(wall_times - start, SECONDS, atol=1e-3)
    assert values.tolist() == RETURNS


def test_load_curve_maps_global_steps_to_env_steps_through_charts_env_steps(tmp_path):
    _write_run(tmp_path / "version_0")

    curve = plot_runs.load_curve(tmp_path / "version_0", "charts/episodic_return")

    assert curve.has_env_steps
    assert curve.env_steps.tolist() == ENV_STEPS
    assert curve.values.tolist() == RETURNS
    # Seconds since the run's first event, which came a moment before the first scalar.
    np.testing.assert_allclose(np.diff(curve.seconds), np.diff(SECONDS), atol=1e-3)
    assert SECONDS[0] <= curve.seconds[0] < SECONDS[0] + 1.0


def test_load_curve_takes_the_event_step_as_env_steps_without_charts_env_steps(tmp_path):
    _write_run(tmp_path / "run", step_is_env_steps=True)

    curve = plot_runs.load_curve(tmp_path / "run", "charts/episodic_return")

    assert not curve.has_env_steps
    assert curve.env_steps.tolist() == ENV_STEPS
    assert curve.values.tolist() == RETURNS


def test_missing_tag_or_event_files_raise(tmp_path):
    _write_run(tmp_path / "run")
    with pytest.raises(ValueError, match="charts/episodic_return"):
        plot_runs.load_scalars(tmp_path / "run", "losses/td_loss")
    with pytest.raises(ValueError, match="no TensorBoard event files"):
        plot_runs.load_scalars(tmp_path / "empty", "charts/episodic_return")


# -- the numbers ----------------------------------------------------------------------------


def test_resample_step_hold_holds_the_last_value_and_never_extrapolates():
    grid = np.array([50, 100, 150, 200, 299, 300, 301])

    resampled = plot_runs.resample_step_hold(np.array([100, 200, 300]), np.array([1.0, 2.0, 3.0]), grid)

    np.testing.assert_array_equal(resampled, [np.nan, 1.0, 1.0, 2.0, 2.0, 3.0, np.nan])
    # Unsorted x; at a repeated x the value written last wins (a re-logged final evaluation).
    unsorted = plot_runs.resample_step_hold(np.array([10, 0, 10]), np.array([2.0, 1.0, 5.0]), np.array([0, 5, 10]))
    np.testing.assert_array_equal(unsorted, [1.0, 1.0, 5.0])


def test_interquartile_mean_drops_a_quarter_of_the_runs_at_each_end():
    assert plot_runs.interquartile_mean(np.array([4.0, 1.0, 3.0, 2.0])) == 2.5  # mean of 2 and 3
    assert plot_runs.interquartile_mean(np.array([1000.0, 0.0, 20.0, 10.0, 30.0])) == 20.0  # of 10, 20, 30
    assert plot_runs.interquartile_mean(np.arange(1.0, 9.0)) == 4.5  # of 3, 4, 5, 6
    assert plot_runs.interquartile_mean(np.array([1.0, 2.0, 6.0])) == 3.0  # under 4 runs: the mean
    np.testing.assert_array_equal(plot_runs.interquartile_mean(np.array([[1.0, 2, 3, 100], [0, 0, 4, 4]])), [2.5, 2])


def test_bootstrap_ci_of_two_runs_spans_their_values():
    # Resamples of [0, 1] have means 0, 0.5 and 1 (probability 1/4, 1/2, 1/4): the 95% interval is [0, 1].
    for statistic in (plot_runs.interquartile_mean, np.mean):
        assert plot_runs.stratified_bootstrap_ci(np.array([0.0, 1.0]), statistic) == (0.0, 1.0)
    assert plot_runs.stratified_bootstrap_ci(np.array([7.0])) == (7.0, 7.0)


def test_bootstrap_ci_of_the_mean_matches_the_normal_approximation():
    scores = np.arange(100.0)
    half_width = 1.96 * scores.std() / np.sqrt(scores.size)  # 5.66

    low, high = plot_runs.stratified_bootstrap_ci(scores, np.mean, num_resamples=2_000, seed=0)

    assert low == pytest.approx(49.5 - half_width, abs=0.6)
    assert high == pytest.approx(49.5 + half_width, abs=0.6)


def test_bootstrap_ci_is_reproducible_from_its_seed():
    scores = np.array([3.0, 9.0, 1.0, 40.0, 7.0, 2.0])

    first = plot_runs.stratified_bootstrap_ci(scores, seed=3)

    assert plot_runs.stratified_bootstrap_ci(scores, seed=3) == first
    assert plot_runs.stratified_bootstrap_ci(scores, seed=4) != first


def test_stratified_bootstrap_resamples_runs_within_each_task():
    # Task 0's runs score 0 and 1, task 1's both 7: every resample keeps one 7-column, so the mean
    # is (mean of task 0's resample + 7) / 2 in {3.5, 3.75, 4}. Pooling the four scores would not.
    scores = np.array([[0.0, 7.0], [1.0, 7.0]])

    assert plot_runs.stratified_bootstrap_ci(scores, np.mean) == (3.5, 4.0)


def test_aggregate_runs_uses_the_union_grid_and_counts_the_runs_present():
    xs = [np.array([100, 200, 300]), np.array([150, 250])]
    values = [np.array([1.0, 2.0, 3.0]), np.array([10.0, 20.0])]

    aggregate = plot_runs.aggregate_runs(xs, values, stat="mean")

    assert aggregate.grid.tolist() == [100, 150, 200, 250, 300]
    assert aggregate.num_runs.tolist() == [1, 2, 2, 2, 1]
    np.testing.assert_array_equal(aggregate.statistic, [1.0, 5.5, 6.0, 11.0, 3.0])
    # One run: a zero-width interval; two runs: exactly their two values (see above).
    np.testing.assert_array_equal(aggregate.ci_low, [1.0, 1.0, 2.0, 2.0, 3.0])
    np.testing.assert_array_equal(aggregate.ci_high, [1.0, 10.0, 10.0, 20.0, 3.0])
    with pytest.raises(ValueError, match="stat must be one of"):
        plot_runs.aggregate_runs(xs, values, stat="median")


# -- the command line -----------------------------------------------------------------------

OFFSETS = [0.0, 10.0, 20.0, 1000.0]  # four seeds: the IQM is RETURNS + 15, the mean RETURNS + 257.5


def _write_groups(root: Path) -> list[str]:
    """Four VPG runs (two per step convention, returns RETURNS + OFFSETS) and two DQN runs, one
    stopped after three points. Returns the ``--run`` arguments."""
    vpg = []
    for seed, offset in enumerate(OFFSETS):
        _write_run(root / f"vpg_{seed}", [value + offset for value in RETURNS], step_is_env_steps=seed % 2 == 1)
        vpg.append(str(root / f"vpg_{seed}"))
    _write_run(root / "dqn_0", [1.0, 2.0, 3.0, 4.0], step_is_env_steps=True)
    _write_run(root / "dqn_1", [5.0, 6.0, 7.0, 8.0], step_is_env_steps=True, num_points=3)
    return ["--run", "VPG", *vpg, "--run", "DQN", str(root / "dqn_0"), str(root / "dqn_1")]


def _assert_png(path: Path, size: tuple[int, int]) -> np.ndarray:
    with Image.open(path) as image:
        assert image.format == "PNG"
        assert image.size == size
        pixels = np.asarray(image.convert("RGB"))
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 10  # lines and text, not a blank image
    return pixels


def test_cli_writes_the_iqm_of_each_group_over_env_steps_to_a_png_and_a_csv(tmp_path, capsys):
    runs = _write_groups(tmp_path)
    out = tmp_path / "curves.png"

    plot_runs.main([*runs, "--tag", "charts/episodic_return", "--out", str(out)])

    assert "wrote" in capsys.readouterr().out
    _assert_png(out, (1200, 450))  # figsize (12, 4.5) at 100 dpi
    columns, rows = _read_csv(tmp_path / "curves.csv")  # the default: the PNG's path with .csv
    assert columns == ["label", "env_steps", "iqm", "ci_low", "ci_high", "num_runs"]
    assert [row["label"] for row in rows] == ["VPG"] * 4 + ["DQN"] * 4
    # Both step conventions land on the same env steps: one grid, every run at every point.
    assert _column(rows, "VPG", "env_steps") == ENV_STEPS
    assert _column(rows, "VPG", "num_runs") == [4, 4, 4, 4]
    np.testing.assert_allclose(_column(rows, "VPG", "iqm"), np.array(RETURNS) + 15.0)
    for iqm, low, high in zip(*(_column(rows, "VPG", name) for name in ("iqm", "ci_low", "ci_high")), strict=True):
        assert RETURNS[0] <= low <= iqm <= high <= RETURNS[-1] + 1000.0
        assert low < high
    # The stopped DQN run is held to its last point only: one run at the last env step.
    assert _column(rows, "DQN", "env_steps") == ENV_STEPS
    assert _column(rows, "DQN", "num_runs") == [2, 2, 2, 1]
    np.testing.assert_allclose(_column(rows, "DQN", "iqm"), [3.0, 4.0, 5.0, 4.0])  # under 4 runs: the mean
    assert _column(rows, "DQN", "ci_low") == [1.0, 2.0, 3.0, 4.0]
    assert _column(rows, "DQN", "ci_high") == [5.0, 6.0, 7.0, 4.0]


def test_cli_stat_mean_and_csv_path(tmp_path):
    runs = _write_groups(tmp_path)
    out, table = tmp_path / "curves.png", tmp_path / "numbers" / "mean.csv"
    table.parent.mkdir()

    plot_runs.main([*runs, "--stat", "mean", "--out", str(out), "--csv", str(table)])

    columns, rows = _read_csv(table)
    assert columns[2] == "mean"
    np.testing.assert_allclose(_column(rows, "VPG", "mean"), np.array(RETURNS) + 257.5)
    assert not (tmp_path / "curves.csv").exists()


def test_cli_show_runs_draws_the_runs(tmp_path):
    runs = _write_groups(tmp_path)

    plot_runs.main([*runs, "--out", str(tmp_path / "aggregate.png")])
    plot_runs.main([*runs, "--out", str(tmp_path / "with_runs.png"), "--show_runs"])

    aggregate = _assert_png(tmp_path / "aggregate.png", (1200, 450))
    with_runs = _assert_png(tmp_path / "with_runs.png", (1200, 450))
    assert (aggregate != with_runs).any(axis=-1).sum() > 500  # the faint lines of six runs


def test_cli_positional_runs_with_equal_labels_are_aggregated(tmp_path):
    _write_run(tmp_path / "lightning_logs" / "version_0")
    _write_run(tmp_path / "lightning_logs" / "version_1", [value + 2.0 for value in RETURNS], step_is_env_steps=True)
    out = tmp_path / "plot.png"

    plot_runs.main(
        [
            str(tmp_path / "lightning_logs" / "version_0"),
            str(tmp_path / "lightning_logs" / "version_1"),
            "--out",
            str(out),
            "--labels",
            "vpg",
            "vpg",
        ]
    )

    _assert_png(out, (1200, 450))
    _, rows = _read_csv(tmp_path / "plot.csv")
    assert _column(rows, "vpg", "num_runs") == [2, 2, 2, 2]
    np.testing.assert_allclose(_column(rows, "vpg", "iqm"), np.array(RETURNS) + 1.0)


def test_cli_rejects_bad_run_arguments(tmp_path):
    _write_run(tmp_path / "run")
    out = ["--out", str(tmp_path / "p.png")]
    with pytest.raises(SystemExit):  # one label per positional run
        plot_runs.main([str(tmp_path / "run"), "--labels", "a", "b", *out])
    with pytest.raises(SystemExit):  # a label without runs
        plot_runs.main(["--run", "VPG", *out])
    with pytest.raises(SystemExit):  # no runs at all
        plot_runs.main(out)


def test_cli_labels_runs_by_what_ran_and_takes_a_directory_of_runs(tmp_path):
    """The scripts and the CLI log to lightning_logs/<run>/version_N: a run is labelled by <run>, and
    lightning_logs/<run> stands for its version_* runs."""
    logs = tmp_path / "lightning_logs"
    for version in range(3):
        _write_run(logs / "VPG-CartPole-v1" / f"version_{version}", [v + version for v in RETURNS], True)
    _write_run(logs / "DQN-CartPole-v1" / "version_0", step_is_env_steps=True)
    assert plot_runs.run_label(logs / "VPG-CartPole-v1" / "version_2") == "VPG-CartPole-v1"
    assert plot_runs.run_label(logs / "version_2") == str(logs / "version_2")  # a Trainer's default layout
    out = tmp_path / "plot.png"

    plot_runs.main([str(logs / "VPG-CartPole-v1"), str(logs / "DQN-CartPole-v1" / "version_0"), "--out", str(out)])

    _, rows = _read_csv(tmp_path / "plot.csv")
    assert _column(rows, "VPG-CartPole-v1", "num_runs") == [3, 3, 3, 3]
    np.testing.assert_allclose(_column(rows, "VPG-CartPole-v1", "iqm"), np.array(RETURNS) + 1.0)
    assert _column(rows, "DQN-CartPole-v1", "num_runs") == [1, 1, 1, 1]


def test_a_run_without_event_files_in_a_directory_of_runs_is_skipped_with_a_warning(tmp_path, capsys):
    """One run of lightning_logs/<run> that logged nothing (stopped at once, or a W&B-only run) no longer refuses
    the whole directory: it is skipped, named on stderr; the others are plotted."""
    logs = tmp_path / "lightning_logs" / "VPG-CartPole-v1"
    for version in (0, 2):
        _write_run(logs / f"version_{version}", [v + version for v in RETURNS], True)
    (logs / "version_1" / "checkpoints").mkdir(parents=True)  # a run with no events
    out = tmp_path / "plot.png"

    plot_runs.main([str(logs), "--stat", "mean", "--out", str(out)])

    assert f"warning: skipped {logs / 'version_1'}: no TensorBoard event files in it" in capsys.readouterr().err
    _, rows = _read_csv(tmp_path / "plot.csv")
    assert _column(rows, "VPG-CartPole-v1", "num_runs") == [2, 2, 2, 2]
    np.testing.assert_allclose(_column(rows, "VPG-CartPole-v1", "mean"), np.array(RETURNS) + 1.0)
    empty = tmp_path / "empty" / "PPO-CartPole-v1"
    (empty / "version_0").mkdir(parents=True)
    with pytest.raises(SystemExit) as exit_info:  # no run with events at all: the error names the directory
        plot_runs.main([str(empty), "--out", str(out)])
    assert exit_info.value.code == 2 and f"no TensorBoard event files (events.out.tfevents.*) under {empty}" in (
        capsys.readouterr().err
    )


def test_a_run_of_several_seeds_counts_each_seed_as_a_run(tmp_path):
    """A num_seeds > 1 run logs each seed's value under <group>_per_seed/<name>/seed_<i>: each is one run."""
    writer = SummaryWriter(log_dir=str(tmp_path / "seeds"))
    for step, values in enumerate([(10.0, 20.0, 30.0), (40.0, 50.0, 60.0)]):
        writer.add_scalar("eval/episodic_return", sum(values) / 3, step * 100)
        for index, value in enumerate(values):
            writer.add_scalar(f"eval_per_seed/episodic_return/seed_{index}", value, step * 100)
    writer.close()
    curves = plot_runs.load_seed_curves(tmp_path / "seeds", "eval/episodic_return")
    assert [curve.values.tolist() for curve in curves] == [[10.0, 40.0], [20.0, 50.0], [30.0, 60.0]]
    out = tmp_path / "curves.png"
    plot_runs.main([str(tmp_path / "seeds"), "--tag", "eval/episodic_return", "--out", str(out), "--stat", "mean"])
    _, rows = _read_csv(out.with_suffix(".csv"))
    assert [float(row["mean"]) for row in rows] == [20.0, 50.0] and {row["num_runs"] for row in rows} == {"3"}
