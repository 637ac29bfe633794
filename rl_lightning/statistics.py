"""Aggregates over seeds, as rliable recommends them: the interquartile mean and its stratified bootstrap confidence
interval. One implementation, for the live charts of a ``num_seeds > 1`` run (``rl_lightning.algos._charts``) and
for ``scripts/plot_runs.py``."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

#: Bootstrap resamples of the runs.
NUM_RESAMPLES = 2_000
#: The confidence interval's coverage.
CONFIDENCE = 0.95


def interquartile_mean(values: np.ndarray, axis: int = -1) -> np.ndarray:
    """The mean of the middle 50%: ``floor(n / 4)`` values cut from each end along ``axis``
    (``scipy.stats.trim_mean(values, 0.25)``, rliable's IQM)."""
    values = np.sort(np.asarray(values, np.float64), axis=axis)
    num_values = values.shape[axis]
    cut = num_values // 4
    return np.take(values, np.arange(cut, num_values - cut), axis=axis).mean(axis=axis)


def stratified_bootstrap_ci(
    scores: np.ndarray,
    statistic: Callable[..., np.ndarray] = interquartile_mean,
    num_resamples: int = NUM_RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of ``statistic`` over runs, resampling the runs
    with replacement within each task (rliable's ``StratifiedBootstrap``).

    Args:
        scores: ``(num_runs,)`` (one task) or ``(num_runs, num_tasks)``.
        statistic: of the flattened ``(num_runs * num_tasks)`` scores of a resample, along ``axis``.
        num_resamples: bootstrap resamples.
        confidence: the interval's coverage, e.g. 0.95: the 2.5th and 97.5th percentiles.
        seed: seeds the resampling (the same seed and run count give the same resamples).

    Returns:
        ``(low, high)``.
    """
    scores = np.asarray(scores, np.float64)
    if scores.ndim == 1:
        scores = scores[:, None]
    if scores.ndim != 2 or scores.shape[0] == 0:
        raise ValueError(f"scores must be (num_runs,) or (num_runs, num_tasks) with num_runs >= 1, got {scores.shape}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    num_runs, num_tasks = scores.shape
    rng = np.random.default_rng(seed)
    runs = rng.integers(0, num_runs, size=(num_resamples, num_runs, num_tasks))
    resampled = scores[runs, np.arange(num_tasks)]  # (num_resamples, num_runs, num_tasks)
    estimates = statistic(resampled.reshape(num_resamples, -1), axis=-1)
    tail = 100.0 * (1.0 - confidence) / 2.0
    low, high = np.percentile(estimates, [tail, 100.0 - tail])
    return float(low), float(high)


def seed_aggregates(name: str, values: list[float]) -> dict[str, float]:
    """The aggregates over seeds of a metric ``name`` (one value per seed; NaN: a seed without one, left out):
    ``name_iqm`` with its 95% stratified bootstrap interval ``name_iqm_ci_low`` / ``name_iqm_ci_high``, and
    ``name_min`` (the worst seed: ``EarlyStopping(monitor="eval/episodic_return_min", ...)`` stops when every seed
    got there). Empty where no seed has a value."""
    scores = np.asarray([value for value in values if value == value], np.float64)
    if scores.size == 0:
        return {}
    low, high = stratified_bootstrap_ci(scores)
    return {
        f"{name}_iqm": float(interquartile_mean(scores)),
        f"{name}_iqm_ci_low": low,
        f"{name}_iqm_ci_high": high,
        f"{name}_min": float(scores.min()),
    }
