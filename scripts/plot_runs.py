"""Plot a scalar of TensorBoard runs against env steps and against wall-clock time.

    python scripts/plot_runs.py lightning_logs/version_0 lightning_logs/version_1 \\
        --tag charts/episodic_return --out plot.png --labels vpg dqn

Each RUN_DIR is one run: every event file under it (e.g. a resumed run's several files) is read.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from tensorboard.backend.event_processing import event_accumulator

ENV_STEPS_TAG = "charts/env_steps"


class Curve(NamedTuple):
    """One run's scalar, with both x axes of the plot."""

    #: ``(num_points,)`` env steps at each point (the global step if the run logged no env steps).
    env_steps: np.ndarray
    #: ``(num_points,)`` seconds since the run's first event.
    seconds: np.ndarray
    #: ``(num_points,)`` the scalar.
    values: np.ndarray
    #: Whether ``env_steps`` really are env steps (False: the fallback to the global step).
    has_env_steps: bool


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
        ``(steps, wall_times, values)``, each ``(num_points,)``: int64 global steps, float64 Unix
        times in seconds, float64 values, in the order they were written.
    """
    accumulators = _read_run(run_dir)
    scalars = _scalars(accumulators, tag)
    if scalars is None:
        raise ValueError(f"{run_dir} has no scalar {tag!r}; its scalars: {_scalar_tags(accumulators)}")
    return scalars


def _scalar_tags(accumulators: Sequence[event_accumulator.EventAccumulator]) -> list[str]:
    return sorted({tag for accumulator in accumulators for tag in accumulator.Tags()[event_accumulator.SCALARS]})


def load_curve(run_dir: str | Path, tag: str, env_steps_tag: str = ENV_STEPS_TAG) -> Curve:
    """Read ``tag`` of a run with its env steps and its seconds since the run started.

    Env steps come from the ``env_steps_tag`` scalar logged at the same global steps (between two
    logged global steps they are interpolated); runs without it fall back to the global step.

    Args:
        run_dir: a directory with the run's event files (searched recursively).
        tag: the scalar to plot.
        env_steps_tag: the scalar holding the env steps taken so far.
    """
    accumulators = _read_run(run_dir)
    scalars = _scalars(accumulators, tag)
    if scalars is None:
        raise ValueError(f"{run_dir} has no scalar {tag!r}; its scalars: {_scalar_tags(accumulators)}")
    steps, wall_times, values = scalars
    start_time = min(accumulator.FirstEventTimestamp() for accumulator in accumulators)
    env_steps_scalars = _scalars(accumulators, env_steps_tag)
    if env_steps_scalars is None:
        return Curve(steps.astype(np.float64), wall_times - start_time, values, has_env_steps=False)
    logged_steps, _, logged_env_steps = env_steps_scalars
    order = np.argsort(logged_steps, kind="stable")
    env_steps = np.interp(steps, logged_steps[order], logged_env_steps[order])
    return Curve(env_steps, wall_times - start_time, values, has_env_steps=True)


def plot_curves(
    curves: Sequence[Curve],
    labels: Sequence[str],
    tag: str,
    out: str | Path,
    figsize: tuple[float, float] = (12.0, 4.5),
    dpi: int = 100,
) -> None:
    """Write a PNG of two panels: ``tag`` against env steps (left) and against wall time (right).

    Args:
        curves: one :class:`Curve` per run; labels: the legend name of each run.
        tag: the plotted scalar (the y label and title).
        out: the PNG path; the image is ``figsize * dpi`` pixels.
    """
    if len(curves) != len(labels):
        raise ValueError(f"need one label per run: {len(curves)} runs, {len(labels)} labels")
    figure = Figure(figsize=figsize, dpi=dpi, layout="constrained")
    FigureCanvasAgg(figure)
    by_env_steps, by_time = figure.subplots(1, 2, sharey=True)
    for curve, label in zip(curves, labels, strict=True):
        by_env_steps.plot(curve.env_steps, curve.values, label=label)
        by_time.plot(curve.seconds, curve.values, label=label)
    all_env_steps = all(curve.has_env_steps for curve in curves)
    by_env_steps.set_xlabel("env steps" if all_env_steps else "env steps (global step where not logged)")
    by_time.set_xlabel("wall time (s since the run started)")
    by_env_steps.set_ylabel(tag)
    for axes in (by_env_steps, by_time):
        axes.grid(alpha=0.3)
    by_env_steps.legend()
    figure.suptitle(tag)
    figure.savefig(out, format="png")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="directories of event files, one per run")
    parser.add_argument("--tag", default="charts/episodic_return", help="the scalar to plot")
    parser.add_argument("--out", default="plot.png", help="the PNG to write")
    parser.add_argument("--labels", nargs="+", help="legend names, one per RUN_DIR (default: the paths)")
    parser.add_argument("--env-steps-tag", default=ENV_STEPS_TAG, help="the scalar holding env steps")
    args = parser.parse_args(argv)
    labels = args.labels or args.run_dirs
    if len(labels) != len(args.run_dirs):
        parser.error(f"--labels needs one name per RUN_DIR: {len(args.run_dirs)} runs, {len(labels)} labels")
    curves = [load_curve(run_dir, args.tag, args.env_steps_tag) for run_dir in args.run_dirs]
    plot_curves(curves, labels, args.tag, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
