"""Former names of public arguments keep working: a value given under an old name moves to its new one, with
an :class:`RLLightningDeprecationWarning` (a ``DeprecationWarning``) naming the new one.

One rule, :func:`renamed`, applied where a value enters: a module's constructor (its ``renamed_hyperparameters``,
through ``RLModule.__init_subclass__`` and :func:`wrap_init`), a function's keywords (:func:`renamed_keywords`:
``QNetwork``, ``evaluate_policy``), a checkpoint's hyper-parameters (:func:`renamed_in_checkpoint`) and the
command lines' flags and config keys (``rl_lightning.cli``). :func:`renames_of` lists what an owner accepts.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from lightning.pytorch.core.mixins import HyperparametersMixin

__all__ = [
    "RLLightningDeprecationWarning",
    "renamed",
    "renamed_in_checkpoint",
    "renamed_keywords",
    "renames_of",
    "same_value",
    "wrap_init",
]

F = TypeVar("F", bound=Callable[..., Any])


class RLLightningDeprecationWarning(DeprecationWarning):
    """A former name or use of rl_lightning's own API: the warning of every deprecation of this package, so that
    a filter can tell it from the deprecations of the libraries below (the tests make it an error)."""


def renamed(kwargs: dict[str, Any], renames: Mapping[str, str], owner: str, stacklevel: int = 3) -> dict[str, Any]:
    """``kwargs`` with each value given under a former name (a key of ``renames``) under its new name, and a
    ``DeprecationWarning`` per former name (``stacklevel`` 3: the caller of the function that calls this).

    Raises:
        TypeError: a former name and its new one both given, with different values.
    """
    for old in [name for name in kwargs if name in renames]:
        new = renames[old]
        value = kwargs.pop(old)
        if new in kwargs and not same_value(kwargs[new], value):
            raise TypeError(
                f"{owner}() got {old}={value!r} and {new}={kwargs[new]!r}: {old} is the former name of {new}, "
                f"pass only {new}"
            )
        warnings.warn(
            f"{owner}({old}=...) is deprecated: use {new}", RLLightningDeprecationWarning, stacklevel=stacklevel
        )
        kwargs[new] = value
    return kwargs


def renamed_in_checkpoint(saved: Mapping[str, Any], renames: Mapping[str, str], owner: str) -> dict[str, Any]:
    """A checkpoint's hyper-parameters ``saved`` as ``owner`` spells them now: a value saved under a former name
    under its new one (the former name gone, a ``DeprecationWarning`` for each), everything else as saved."""
    upgraded = {name: value for name, value in saved.items() if name not in renames}
    for old, new in renames.items():
        if old in saved and new not in saved:
            warnings.warn(
                f"the checkpoint's hyper-parameter {old} is {owner}'s {new} now: loaded as {new}={saved[old]!r}",
                RLLightningDeprecationWarning,
                stacklevel=4,  # the caller of load_from_checkpoint
            )
            upgraded[new] = saved[old]
    return upgraded


def renamed_keywords(**renames: str) -> Callable[[F], F]:
    """Decorator: the function (or ``__init__``) also takes each former keyword ``old="new"`` (warning, as
    :func:`renamed`); its signature stays the real one and an unknown keyword is still a ``TypeError``."""

    def decorate(function: F) -> F:
        owner = function.__qualname__.removesuffix(".__init__")

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return function(*args, **renamed(kwargs, renames, owner))

        wrapper.__signature__ = inspect.signature(function)  # type: ignore[attr-defined]
        wrapper.renamed_keywords = dict(renames)  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate


class _InitLink(HyperparametersMixin):
    """The ``__class__`` of :func:`wrap_init`'s wrapper frame. ``save_hyperparameters()`` collects the init args
    of every ``__init__`` frame on the way out from the module's, and stops at the first that is not one
    (with a ``__class__`` of a ``HyperparametersMixin`` and the arguments of that class's ``__init__``): this
    makes the wrapper one with no arguments of its own, so a subclass's arguments above it are still collected."""

    def __init__(self) -> None: ...


def wrap_init(init: Callable[..., None], renames: Mapping[str, str], owner: str) -> Callable[..., None]:
    """A module class's ``__init__`` taking its former argument names too (:func:`renamed`); ``init`` itself
    when none applies. The signature (``inspect.signature``, ``getfullargspec``: what jsonargparse and
    Lightning read) stays the real one, with no ``**kwargs``, and ``save_hyperparameters()`` records the
    arguments under their new names, a subclass's too."""
    renames = _applicable(renames, inspect.signature(init))
    if not renames:
        return init
    __class__ = _InitLink  # the wrapper frame's __class__, for save_hyperparameters

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # named __init__: save_hyperparameters checks
        __class__  # noqa: B018 (a free variable of this frame: see _InitLink)
        init(self, *args, **renamed(kwargs, renames, owner))

    __init__.__signature__ = inspect.signature(init)  # type: ignore[attr-defined]
    return __init__


def renames_of(owner: Any) -> dict[str, str]:
    """The former argument names ``owner`` (a module class, another class or a function) accepts, old -> new."""
    if isinstance(owner, type):
        declared = getattr(owner, "renamed_hyperparameters", None) or getattr(owner.__init__, "renamed_keywords", {})
        return _applicable(declared, inspect.signature(owner.__init__))
    return dict(getattr(owner, "renamed_keywords", {}))


def _applicable(renames: Mapping[str, str], signature: inspect.Signature) -> dict[str, str]:
    """The renames a callable of ``signature`` can take: not a current parameter (a subclass may take the
    name back), and to one it has (or its ``**kwargs``)."""
    parameters = signature.parameters
    takes_any = any(parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in parameters.values())
    return {old: new for old, new in renames.items() if old not in parameters and (new in parameters or takes_any)}


def same_value(a: Any, b: Any) -> bool:
    """``a == b``, with lists and tuples alike (a YAML list is a checkpoint's tuple)."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    try:
        return bool(a == b)
    except Exception:  # values without a plain truth value (arrays): differ
        return False


def keyword_only(init: F) -> F:
    """``init`` (keyword-only after ``self``) also taking its arguments positionally, in the order of its former
    positional signature, with a ``DeprecationWarning`` saying to pass them by name (a layer's constructor, e.g.
    ``OffPolicyModule.__init__``, which subclasses used to call with 15 positional arguments)."""
    names = [p.name for p in inspect.signature(init).parameters.values() if p.kind is p.KEYWORD_ONLY]
    owner = init.__qualname__.rsplit(".", 1)[0]

    @functools.wraps(init)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> None:
        if args:
            if len(args) > len(names):
                raise TypeError(f"{owner}() takes at most {len(names)} arguments, got {len(args)} positional")
            given = dict(zip(names, args, strict=False))
            twice = sorted(set(given) & set(kwargs))
            if twice:
                raise TypeError(f"{owner}() got {', '.join(twice)} both positionally and by name")
            warnings.warn(
                f"{owner}(...) with positional arguments is deprecated: pass them by name "
                f"({', '.join(f'{name}=...' for name in given)})",
                RLLightningDeprecationWarning,
                stacklevel=2,
            )
            kwargs = {**given, **kwargs}
        init(self, **kwargs)

    return wrapper  # type: ignore[return-value]
