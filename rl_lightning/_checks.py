"""Argument checks shared by the modules and data classes: a TypeError for the wrong type, a
ValueError for a value out of range, each naming the argument and what is allowed."""

from __future__ import annotations

from typing import Any


def check_int(name: str, value: Any, minimum: int) -> None:
    """``value`` must be an int (not a bool) >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def check_float(
    name: str, value: Any, low: float, high: float, low_open: bool = False, high_open: bool = False
) -> None:
    """``value`` must be a real number in the interval from ``low`` to ``high`` (open ends if asked)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a float, got {type(value).__name__} {value!r}")
    above = low < value if low_open else low <= value
    below = value < high if high_open else value <= high
    if not (above and below):
        interval = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        raise ValueError(f"{name} must be in {interval}, got {value}")
