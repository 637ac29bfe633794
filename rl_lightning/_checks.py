"""The one way arguments are checked: a ``TypeError`` for the wrong type, a ``ValueError`` for a
value out of range, each naming the argument and what is allowed. Nothing is coerced: ``"false"``
is not a bool, ``2.5`` is not an int, ``inf`` and ``nan`` are not learning rates.

Each value is checked once, where it enters (a module's or a callback's ``__init__``, a public
function); the checks return the value so a call can read ``self.lr = check_float("lr", lr, ...)``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


class SettingsError(ValueError):
    """A setting refused once a run starts, where it meets what only the run knows (the env's observations, the
    machine's memory, the checkpoint resumed from): scripts and the command line print it as one line,
    ``error: ...``, and exit with status 2, as for a bad value refused before the run
    (:func:`rl_lightning.scripting.run_script`). A ``ValueError``, for code that catches those."""


def _type_name(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"


def check_int(name: str, value: Any, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` must be an int (not a bool) in ``[minimum, maximum]`` (None: unbounded)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {_type_name(value)}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return value


def check_float(
    name: str,
    value: Any,
    low: float = -math.inf,
    high: float = math.inf,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """``value`` must be a finite real number (int or float, not a bool) between ``low`` and
    ``high`` (open ends if asked). Returns it as a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a float, got {_type_name(value)}")
    value = float(value)
    above = low < value if low_open else low <= value
    below = value < high if high_open else value <= high
    if not (math.isfinite(value) and above and below):
        interval = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        raise ValueError(f"{name} must be a finite number in {interval}, got {value}")
    return value


def check_bool(name: str, value: Any) -> bool:
    """``value`` must be a bool (``"false"``, ``0`` or ``None`` are not)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool (True or False), got {_type_name(value)}")
    return value


def check_str(name: str, value: Any) -> str:
    """``value`` must be a non-empty str."""
    if not isinstance(value, str) or not value:
        raise TypeError(f"{name} must be a non-empty str, got {_type_name(value)}")
    return value


def check_choice(name: str, value: Any, choices: Iterable[T]) -> T:
    """``value`` must be one of ``choices``."""
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return value


def check_sizes(name: str, value: Any, allow_empty: bool = True) -> tuple[int, ...]:
    """``value`` must be a sequence (list or tuple) of positive ints; returns it as a tuple."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"{name} must be a list or tuple of positive ints, got {_type_name(value)}")
    for size in value:
        if isinstance(size, bool) or not isinstance(size, int):
            raise TypeError(f"{name} must be a list or tuple of positive ints, got {list(value)!r}")
        if size < 1:
            raise ValueError(f"{name} must all be >= 1, got {list(value)!r}")
    if not value and not allow_empty:
        raise ValueError(f"{name} must not be empty")
    return tuple(value)


def check_seed(name: str, value: Any) -> int:
    """``value`` must be an int in [0, 2**63) (what ``torch.Generator.manual_seed`` takes)."""
    return check_int(name, value, 0, 2**63 - 1)


def check_device(name: str, value: Any) -> Any:
    """``value`` as a ``torch.device`` that exists here: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"``
    or a ``torch.device``; a misspelt one, or CUDA / MPS on a machine without it, is a ``ValueError``."""
    import torch

    if not isinstance(value, (str, torch.device)):
        raise TypeError(f"{name} must be a torch.device or a string such as 'cpu' or 'cuda:0', got {value!r}")
    try:
        device = torch.device(value)
    except RuntimeError:
        raise ValueError(
            f"{name} must be a torch device such as 'cpu', 'cuda', 'cuda:1' or 'mps', got {value!r}"
        ) from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{name}={value!r}, but torch finds no CUDA device here: use {name}='cpu'")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(
                f"{name}={value!r}, but there are only {torch.cuda.device_count()} CUDA devices "
                f"(cuda:0 .. cuda:{torch.cuda.device_count() - 1})"
            )
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"{name}={value!r}, but MPS is not available here: use {name}='cpu'")
    return device


def check_unused(name: str, value: Any, default: Any, because: str, instead: str) -> None:
    """``value`` must be left at ``default`` where another setting (``because``: "prioritized is False") means it
    would have no effect; ``instead`` says what to do ("set prioritized=True")."""
    if value != default:
        raise ValueError(
            f"{name} is set ({value!r}) but {because}: it would have no effect; {instead}, "
            f"or leave {name} at its default ({default!r})"
        )
