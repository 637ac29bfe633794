"""Plot a scalar of TensorBoard runs aggregated over seeds, against env steps and wall-clock time.

    python scripts/plot_runs.py \\
        --run VPG lightning_logs/VPG-CartPole-v1/version_0 lightning_logs/VPG-CartPole-v1/version_1 \\
        --run DQN lightning_logs/DQN-CartPole-v1/version_0 lightning_logs/DQN-CartPole-v1/version_1 \\
        --tag eval/episodic_return --out curves.png [--stat iqm|mean] [--show_runs] [--csv curves.csv]

    python scripts/plot_runs.py lightning_logs/VPG-CartPole-v1 lightning_logs/DQN-CartPole-v1 --out curves.png

``--run LABEL RUN_DIR [RUN_DIR ...]`` (repeatable) is one group of runs, e.g. an algorithm over
seeds. Positional RUN_DIRs are labelled by what ran: the scripts and the CLI log to
``lightning_logs/<run>/version_N`` (``PPO-CartPole-v1``), so ``.../PPO-CartPole-v1/version_3`` is
labelled ``PPO-CartPole-v1``, and the directory ``lightning_logs/PPO-CartPole-v1`` stands for all its
``version_*`` runs; ``--labels NAME ...`` (one name per RUN_DIR) names them otherwise. Runs that share
a label form one group. Each run is one directory: every event file under it is read (a resumed
run's several files).

Per group, every run's curve is resampled onto the union of the group's logged env steps by
holding its last value; a run counts from its first point to its last (never extrapolated, so
after an early-stopped run ends the aggregate covers fewer runs: see ``num_runs``). The plot shows
the interquartile mean (``--stat iqm``, the mean of the middle 50% of runs, as rliable recommends)
or the mean, a 95% stratified bootstrap confidence band (2,000 resamples of the runs, seeded: the
numbers are reproducible), markers at the env steps where the tag was logged, and with
``--show_runs`` each run faintly. The right panel is the same against seconds since each run
started. The numbers behind the env-steps panel go to a CSV (``--csv``, default: the PNG's path
with ``.csv``) with the columns label, env_steps, iqm (or mean), ci_low, ci_high, num_runs.

A ``num_seeds > 1`` run (one process training several seeds) counts as one run per seed: its per-seed scalars
(``charts_per_seed/episodic_return/seed_<i>``, ``eval_per_seed/episodic_return/seed_<i>``) are read for the tag.

Env steps: a run with the scalar ``charts/env_steps`` (older runs, which logged against the
global step) has each point's global step mapped to env steps through it; otherwise the event's
step is the env-step count (the current logging convention).
"""

from __future__ import annotations

import argparse
import csv
import itertools
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from tensorboard.backend.event_processing import event_accumulator

from rl_lightning.statistics import CONFIDENCE, NUM_RESAMPLES, interquartile_mean, stratified_bootstrap_ci

ENV_STEPS_TAG = "charts/env_steps"
#: Points of the wall-clock panel's grid (the seconds of different runs never coincide).
NUM_TIME_POINTS = 256


class Curve(NamedTuple):
    """One run's scalar, with both x axes of the plot."""

    #: ``(num_points,)`` env steps at each point.
    env_steps: np.ndarray
    #: ``(num_points,)`` seconds since the run's first event.
    seconds: np.ndarray
    #: ``(num_points,)`` the scalar.
    values: np.ndarray
    #: Whether env steps were mapped through the run's ``charts/env_steps`` scalar (False: the
    #: event step is the env step).
    has_env_steps: bool


class Aggregate(NamedTuple):
    """A group of runs on a common grid: the statistic, its confidence band and the run count."""

    #: ``(num_points,)`` the x values (env steps or seconds), increasing.
    grid: np.ndarray
    #: ``(num_points,)`` the statistic over the runs present at each point (NaN where none is).
    statistic: np.ndarray
    #: ``(num_points,)`` lower and upper bounds of the bootstrap confidence interval.
    ci_low: np.ndarray
    ci_high: np.ndarray
    #: ``(num_points,)`` int, runs present at each point (between their first and last point).
    num_runs: np.ndarray


# -- reading runs ---------------------------------------------------------------------------


def _read_run(run_dir: str | Path) -> list[event_accumulator.EventAccumulator]:
    """Load every directory of event files under ``run_dir``, keeping every scalar point."""
    event_dirs = sorted({path.parent for path in Path(run_dir).rglob("events.out.tfevents.*")})
    if not event_dirs:
        raise ValueError(f"no TensorBoard event files (events.out.tfevents.*) under {run_dir}")
    accumulators = []
    for event_dir in event_dirs:
        # size_guidance 0 keeps every point (the default samples scalars down to 10,000).
        accumulator = event_accumulator.EventAccumulator(str(event_dir), size_guidance={event_accumulator.SCALARS: 0})
        accumulators.append(accumulator.Reload())
    return accumulators


def _scalars(
    accumulators: Sequence[event_accumulator.EventAccumulator], tag: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``(steps, wall_times, values)`` of ``tag`` in wall-time order, or None if no file has it."""
    events = [
        event
        for accumulator in accumulators
        if tag in accumulator.Tags()[event_accumulator.SCALARS]
        for event in accumulator.Scalars(tag)
    ]
    if not events:
        return None
    events.sort(key=lambda event: (event.wall_time, event.step))
    return (
        np.array([event.step for event in events], dtype=np.int64),
        np.array([event.wall_time for event in events], dtype=np.float64),
        np.array([event.value for event in events], dtype=np.float64),
    )


def load_scalars(run_dir: str | Path, tag: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Read one scalar of a run.

    Args:
        run_dir: a directory with the run's event files (searched recursively).
        tag: the scalar's tag, e.g. ``"charts/episodic_return"``.

    Returns:
        ``(steps, wall_times, values)``, each ``(num_points,)``: int64 event steps, float64 Unix
        times in seconds, float64 values, in the order they were written.
    """
    accumulators = _read_run(run_dir)
    scalars = _scalars(accumulators, tag)
    if scalars is None:
        raise ValueError(f"{run_dir} has no scalar {tag!r}; its scalars: {_scalar_tags(accumulators)}")
    return scalars


def _warn_if_several_runs(
    run_dir: str | Path, accumulators: Sequence[event_accumulator.EventAccumulator], tag: str
) -> None:
    """Warn when the event files under ``run_dir`` overlap in steps: not one run (a resumed run's files
    follow one another) but several, which would be read as one interleaved curve."""
    spans = []
    for accumulator in accumulators:
        scalars = _scalars([accumulator], tag)
        if scalars is not None:
            spans.append((float(scalars[1].min()), int(scalars[0].min()), int(scalars[0].max()), accumulator.path))
    spans.sort()
    for (_, _, last, first_dir), (_, start, _, second_dir) in itertools.pairwise(spans):
        if start < last:
            warnings.warn(
                f"{run_dir} holds several runs, read as one curve: {second_dir} starts at step {start}, before "
                f"{first_dir} ends ({last}); pass each run's directory (a directory of version_* runs as a "
                f"positional RUN_DIR is split into its runs)",
                stacklevel=3,
            )
            return


def _scalar_tags(accumulators: Sequence[event_accumulator.EventAccumulator]) -> list[str]:
    return sorted({tag for accumulator in accumulators for tag in accumulator.Tags()[event_accumulator.SCALARS]})


def load_curve(run_dir: str | Path, tag: str, env_steps_tag: str = ENV_STEPS_TAG) -> Curve:
    """Read ``tag`` of a run with its env steps and its seconds since the run started.

    If the run has the ``env_steps_tag`` scalar (older runs: logged against the global step), each
    point's global step is mapped to env steps through it (interpolated between two logged global
    steps); otherwise the event step is the env-step count.

    Args:
        run_dir: a directory with the run's event files (searched recursively).
        tag: the scalar to plot.
        env_steps_tag: the scalar holding the env steps taken so far.
    """
    accumulators = _read_run(run_dir)
    scalars = _scalars(accumulators, tag)
    if scalars is None:
        raise ValueError(f"{run_dir} has no scalar {tag!r}; its scalars: {_scalar_tags(accumulators)}")
    _warn_if_several_runs(run_dir, accumulators, tag)
    steps, wall_times, values = scalars
    start_time = min(accumulator.FirstEventTimestamp() for accumulator in accumulators)
    env_steps_scalars = _scalars(accumulators, env_steps_tag)
    if env_steps_scalars is None:
        return Curve(steps.astype(np.float64), wall_times - start_time, values, has_env_steps=False)
    logged_steps, _, logged_env_steps = env_steps_scalars
    order = np.argsort(logged_steps, kind="stable")
    env_steps = np.interp(steps, logged_steps[order], logged_env_steps[order])
    return Curve(env_steps, wall_times - start_time, values, has_env_steps=True)


def load_seed_curves(run_dir: str | Path, tag: str, env_steps_tag: str = ENV_STEPS_TAG) -> list[Curve]:
    """A run's curves of ``tag``: one per seed for a ``num_seeds > 1`` run (its per-seed scalars,
    ``<group>_per_seed/<name>/seed_<i>``: ``charts_per_seed/episodic_return/seed_3``, ``eval_per_seed/...``), each
    counted as a run of its own; otherwise the one :func:`load_curve` reads."""
    group, _, name = tag.partition("/")
    prefix = f"{group}_per_seed/{name or group}/seed_"
    seeds = [t for t in _scalar_tags(_read_run(run_dir)) if t.startswith(prefix) and t[len(prefix) :].isdigit()]
    seeds.sort(key=lambda seed_tag: int(seed_tag[len(prefix) :]))
    return [load_curve(run_dir, seed_tag, env_steps_tag) for seed_tag in seeds] or [
        load_curve(run_dir, tag, env_steps_tag)
    ]


# -- the numbers ----------------------------------------------------------------------------


def resample_step_hold(x: np.ndarray, values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """A run's curve on ``grid``: at each grid point the last value logged at or before it.

    Args:
        x: ``(num_points,)`` where the values were logged (any order; at a repeated x the value
            written last wins).
        values: ``(num_points,)`` the run's values.
        grid: ``(num_grid,)`` where to read the curve.

    Returns:
        float64 ``(num_grid,)``; NaN before the run's first point and after its last.
    """
    x, values, grid = np.asarray(x, np.float64), np.asarray(values, np.float64), np.asarray(grid, np.float64)
    if x.shape != values.shape or x.ndim != 1 or x.size == 0:
        raise ValueError(f"x and values must be non-empty and of the same 1-d shape, got {x.shape} and {values.shape}")
    order = np.argsort(x, kind="stable")  # stable: equal x stay in writing order
    x, values = x[order], values[order]
    index = np.searchsorted(x, grid, side="right") - 1
    resampled = values[np.clip(index, 0, None)]
    return np.where((grid >= x[0]) & (grid <= x[-1]), resampled, np.nan)


def _mean(values: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.asarray(values, np.float64).mean(axis=axis)


#: ``--stat`` name -> statistic over the last axis.
STATISTICS: dict[str, Callable[..., np.ndarray]] = {"iqm": interquartile_mean, "mean": _mean}


def aggregate_runs(
    xs: Sequence[np.ndarray],
    values: Sequence[np.ndarray],
    grid: np.ndarray | None = None,
    stat: str = "iqm",
    num_resamples: int = NUM_RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> Aggregate:
    """Resample each run onto ``grid`` (:func:`resample_step_hold`) and compute, at each grid
    point, ``stat`` over the runs present there with its bootstrap confidence interval.

    Args:
        xs, values: per run, ``(num_points,)`` x values (env steps or seconds) and values.
        grid: ``(num_grid,)``; None: the sorted union of every run's x values.
        stat: ``"iqm"`` or ``"mean"``.
        num_resamples, confidence, seed: of :func:`stratified_bootstrap_ci` (the same seed at every
            point, so where the same runs are present the band uses the same resamples).
    """
    if stat not in STATISTICS:
        raise ValueError(f"stat must be one of {sorted(STATISTICS)}, got {stat!r}")
    if len(xs) != len(values) or not xs:
        raise ValueError(f"need one values array per x array and at least one run, got {len(xs)} and {len(values)}")
    grid = np.unique(np.concatenate([np.asarray(x, np.float64) for x in xs])) if grid is None else np.asarray(grid)
    runs = np.stack([resample_step_hold(x, v, grid) for x, v in zip(xs, values, strict=True)])  # (runs, grid)
    statistic_fn = STATISTICS[stat]
    statistic, ci_low, ci_high = (np.full(grid.shape, np.nan) for _ in range(3))
    num_runs = (~np.isnan(runs)).sum(axis=0)
    for point in np.flatnonzero(num_runs):
        present = runs[~np.isnan(runs[:, point]), point]
        statistic[point] = statistic_fn(present)
        ci_low[point], ci_high[point] = stratified_bootstrap_ci(present, statistic_fn, num_resamples, confidence, seed)
    return Aggregate(grid, statistic, ci_low, ci_high, num_runs)


# -- the figure and the CSV -----------------------------------------------------------------


def _groups(curves: Sequence[Curve], labels: Sequence[str]) -> dict[str, list[Curve]]:
    """The curves by label, labels in order of first appearance."""
    if len(curves) != len(labels):
        raise ValueError(f"need one label per run: {len(curves)} runs, {len(labels)} labels")
    groups: dict[str, list[Curve]] = {}
    for curve, label in zip(curves, labels, strict=True):
        groups.setdefault(label, []).append(curve)
    return groups


def _draw(axes, aggregate: Aggregate, color: str, label: str | None, markers: bool) -> None:
    axes.step(aggregate.grid, aggregate.statistic, where="post", color=color, label=label)
    axes.fill_between(aggregate.grid, aggregate.ci_low, aggregate.ci_high, step="post", color=color, alpha=0.2)
    if markers:
        axes.plot(aggregate.grid, aggregate.statistic, "o", color=color, markersize=3)


def plot_curves(
    curves: Sequence[Curve],
    labels: Sequence[str],
    tag: str,
    out: str | Path,
    stat: str = "iqm",
    show_runs: bool = False,
    num_resamples: int = NUM_RESAMPLES,
    seed: int = 0,
    figsize: tuple[float, float] = (12.0, 4.5),
    dpi: int = 100,
) -> dict[str, Aggregate]:
    """Write a PNG of two panels: per label, ``stat`` of its runs' ``tag`` with a 95% bootstrap
    band against env steps (left, markers at the logged points) and against wall time (right).

    Args:
        curves: one :class:`Curve` per run; labels: the group of each run (runs sharing a label
            are aggregated).
        tag: the plotted scalar (the y label and title).
        out: the PNG path; the image is ``figsize * dpi`` pixels.
        stat: ``"iqm"`` or ``"mean"``.
        show_runs: also draw each run, faintly.
        num_resamples, seed: of the bootstrap.

    Returns:
        The env-steps :class:`Aggregate` of each label, in order of first appearance.
    """
    groups = _groups(curves, labels)
    figure = Figure(figsize=figsize, dpi=dpi, layout="constrained")
    FigureCanvasAgg(figure)
    by_env_steps, by_time = figure.subplots(1, 2, sharey=True)
    aggregates = {}
    for index, (label, runs) in enumerate(groups.items()):
        color = f"C{index % 10}"
        aggregates[label] = aggregate_runs(
            [run.env_steps for run in runs], [run.values for run in runs], None, stat, num_resamples, seed=seed
        )
        end_seconds = max(run.seconds.max() for run in runs)
        start_seconds = min(run.seconds.min() for run in runs)
        by_time_aggregate = aggregate_runs(
            [run.seconds for run in runs],
            [run.values for run in runs],
            np.linspace(start_seconds, end_seconds, NUM_TIME_POINTS),
            stat,
            num_resamples,
            seed=seed,
        )
        runs_text = f"{len(runs)} run" + ("s" if len(runs) > 1 else "")
        _draw(by_env_steps, aggregates[label], color, f"{label} ({runs_text})", markers=True)
        _draw(by_time, by_time_aggregate, color, None, markers=False)
        if show_runs:
            for run in runs:
                order = np.argsort(run.env_steps, kind="stable")
                by_env_steps.step(
                    run.env_steps[order], run.values[order], where="post", color=color, alpha=0.25, lw=0.8
                )
                by_time.step(run.seconds, run.values, where="post", color=color, alpha=0.25, lw=0.8)
    by_env_steps.set_xlabel("env steps")
    by_time.set_xlabel("wall time (s since the run started)")
    by_env_steps.set_ylabel(f"{tag} ({stat.upper() if stat == 'iqm' else stat}, {CONFIDENCE:.0%} bootstrap CI)")
    for axes in (by_env_steps, by_time):
        axes.grid(alpha=0.3)
    by_env_steps.legend()
    figure.suptitle(tag)
    figure.savefig(out, format="png")
    return aggregates


def _format_number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else float(value)


def write_csv(aggregates: dict[str, Aggregate], stat: str, path: str | Path) -> None:
    """Write the numbers of the env-steps panel: one row per label and grid point with the
    columns ``label, env_steps, <stat>, ci_low, ci_high, num_runs`` (points with no run are left out)."""
    with open(path, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["label", "env_steps", stat, "ci_low", "ci_high", "num_runs"])
        for label, aggregate in aggregates.items():
            for point in np.flatnonzero(aggregate.num_runs):
                writer.writerow(
                    [
                        label,
                        _format_number(aggregate.grid[point]),
                        float(aggregate.statistic[point]),
                        float(aggregate.ci_low[point]),
                        float(aggregate.ci_high[point]),
                        int(aggregate.num_runs[point]),
                    ]
                )


def run_label(run_dir: str | Path) -> str:
    """A run's label from where it logged: ``lightning_logs/PPO-CartPole-v1/version_3`` ->
    ``PPO-CartPole-v1``; a directory of another layout is its own label (its path)."""
    path = Path(run_dir)
    if path.name.startswith("version_") and path.parent.name not in ("", ".", "lightning_logs"):
        return path.parent.name
    return str(run_dir)


def expand_runs(run_dir: str | Path) -> list[str]:
    """``run_dir`` itself, or, for a directory of runs (``lightning_logs/PPO-CartPole-v1``: ``version_*``
    subdirectories and no event file of its own), each of its runs in version order; a run there without
    TensorBoard event files (stopped before its first log, or logged elsewhere: W&B, MLflow) is skipped with a
    warning on stderr, unless none has any (then the directory stays, for its error)."""
    path = Path(run_dir)
    versions = [child for child in path.glob("version_*") if child.is_dir()]
    if versions and not list(path.glob("events.out.tfevents.*")):
        versions.sort(key=lambda child: int(child.name[8:]) if child.name[8:].isdigit() else -1)
        logged = [child for child in versions if next(child.rglob("events.out.tfevents.*"), None) is not None]
        if not logged:
            return [str(run_dir)]
        for child in versions:
            if child not in logged:
                print(f"warning: skipped {child}: no TensorBoard event files in it", file=sys.stderr)
        return [str(child) for child in logged]
    return [str(run_dir)]


def main(argv: Sequence[str] | None = None) -> None:
    summary, _, details = __doc__.partition("\n\n")
    parser = argparse.ArgumentParser(
        description=summary, epilog=details, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--run",
        nargs="+",
        action="append",
        default=[],
        metavar=("LABEL", "RUN_DIR"),
        help="a label and its runs (repeat for each group)",
    )
    parser.add_argument(
        "run_dirs", nargs="*", metavar="RUN_DIR", help="runs (or directories of version_* runs), labelled by what ran"
    )
    parser.add_argument("--labels", nargs="+", help="one name per positional RUN_DIR; equal names are aggregated")
    parser.add_argument("--tag", default="charts/episodic_return", help="the scalar to plot")
    parser.add_argument("--stat", choices=sorted(STATISTICS), default="iqm", help="the aggregate (default: iqm)")
    parser.add_argument("--show_runs", action="store_true", help="also draw each run, faintly")
    parser.add_argument("--out", default="plot.png", help="the PNG to write (default: plot.png)")
    parser.add_argument("--csv", help="the CSV of the numbers (default: the PNG's path with .csv)")
    parser.add_argument("--seed", type=int, default=0, help="the bootstrap's seed (default: 0)")
    parser.add_argument("--env-steps-tag", default=ENV_STEPS_TAG, help="the scalar holding env steps in older runs")
    args = parser.parse_args(argv)
    if args.labels is not None and len(args.labels) != len(args.run_dirs):
        parser.error(f"--labels needs one name per RUN_DIR: {len(args.run_dirs)} runs, {len(args.labels)} labels")
    if args.labels is not None:
        run_dirs, labels = list(args.run_dirs), list(args.labels)
    else:
        run_dirs = [run for run_dir in args.run_dirs for run in expand_runs(run_dir)]
        labels = [run_label(run) for run in run_dirs]
    for group in args.run:
        if len(group) < 2:
            parser.error(f"--run needs a label and at least one RUN_DIR, got {group}")
        run_dirs += group[1:]
        labels += [group[0]] * (len(group) - 1)
    if not run_dirs:
        parser.error("give runs: --run LABEL RUN_DIR [RUN_DIR ...] (repeatable) or RUN_DIR ... [--labels NAME ...]")
    try:  # a num_seeds > 1 run: each of its seeds a run of the group
        seed_curves = [load_seed_curves(run_dir, args.tag, args.env_steps_tag) for run_dir in run_dirs]
    except ValueError as error:
        parser.error(str(error))
    curves = [curve for run_curves in seed_curves for curve in run_curves]
    labels = [label for label, run_curves in zip(labels, seed_curves, strict=True) for _ in run_curves]
    csv_path = args.csv or str(Path(args.out).with_suffix(".csv"))
    for path in (args.out, csv_path):
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            parser.error(f"cannot create the directory of {path}: {error.strerror or error}")
    aggregates = plot_curves(
        curves, labels, args.tag, args.out, stat=args.stat, show_runs=args.show_runs, seed=args.seed
    )
    write_csv(aggregates, args.stat, csv_path)
    print(f"wrote {args.out} and {csv_path}")


if __name__ == "__main__":
    main()
