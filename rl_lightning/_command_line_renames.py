"""Former argument names on the command lines: the scripts' flat flags (``--steps_per_train 4``),
``rl-lightning``'s ``--model.init_args.steps_per_train`` / ``--model.steps_per_train``, and the keys of
``--config`` files, spelled as now before jsonargparse reads them (``rl_lightning.deprecations`` holds the rule
and the Python side)."""

from __future__ import annotations

import importlib
import inspect
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
import yaml

from rl_lightning.algos import ALGORITHMS
from rl_lightning.deprecations import RLLightningDeprecationWarning, renames_of, same_value
from rl_lightning.scripting import is_launching_process

MODEL_CLASSES = ALGORITHMS


#: Where the YAML of a ``--config``, a ``--model`` and a ``--model.init_args`` holds the module's arguments (key
#: paths), and how its keys are spelled in messages (``model.init_args.train_freq``).
_MODEL_SCOPES = [(), ("init_args",)]
_TOP_KEYS = [(), ("fit",), ("validate",), ("test",)]  # a --config before the subcommand nests under its name
_CONFIG_SCOPES = {
    "--config": ("", [(*top, "model", *scope) for top in _TOP_KEYS for scope in _MODEL_SCOPES]),
    "--model": ("model.", _MODEL_SCOPES),
    "--model.init_args": ("model.init_args.", [()]),
}


def renamed_arguments(argv: Sequence[str], error: Any, script_class: Any = None) -> list[str]:
    """``argv`` with the former names of the module's arguments (its ``renamed_hyperparameters``) spelled as now:
    in flags (a script's ``--steps_per_train 4``, ``rl-lightning``'s ``--model.init_args.steps_per_train=4`` or
    ``--model.steps_per_train``) and in the YAML of ``--config`` (a file or the text), ``--model`` and
    ``--model.init_args``. Each gives a ``warning:`` line on stderr and a ``DeprecationWarning``; a former name and
    its new one with different values, both as flags or both in one YAML, are ``error`` (exit status 2) naming
    both (a flag after a ``--config`` wins over it, as for any option). A YAML with a former name is passed on
    as its rewritten text (jsonargparse's ActionConfigFile takes a path or the text).

    Args:
        error: the parser's ``error`` (prints the usage line, exits with status 2).
        script_class: a script's module class (flat flags and config keys); None: ``rl-lightning``'s ``--model``.
    """
    if script_class is not None:
        renames, prefixes, configs = renames_of(script_class), ("--",), {"--config": ("", [()])}
    else:
        renames, prefixes, configs = _command_line_renames(argv), ("--model.init_args.", "--model."), _CONFIG_SCOPES
        configs = {**configs, "-c": configs["--config"]}
    if not renames:
        return list(argv)
    result: list[str] = []
    flags: dict[str, list[tuple[str, Any, bool]]] = {}  # new name -> (flag, value, is a former name)
    index = 0
    while index < len(argv):
        token = argv[index]
        index += 1
        option, equals, inline = token.partition("=")
        if not _is_option(token):
            result.append(token)
            continue
        value = inline if equals else argv[index] if index < len(argv) and not _is_option(argv[index]) else None
        prefix = next((prefix for prefix in prefixes if option.startswith(prefix)), "")
        name = option.removeprefix(prefix) if prefix else None
        if name in renames:
            new_option = prefix + renames[name]
            flags.setdefault(renames[name], []).append((option, value, True))
            _warn_renamed(f"{option} is deprecated, use {new_option}")
            token = new_option + equals + inline
        elif name in renames.values():
            flags.setdefault(name, []).append((option, value, False))
        elif option in configs and value is not None:
            rewritten = _renamed_config(value, option, *configs[option], renames, error)
            if rewritten is not None:
                result.append(option)
                token, index = rewritten, index if equals else index + 1
        result.append(token)
    for given in flags.values():
        for old_flag, old_value, _ in (flag for flag in given if flag[2]):
            for new_flag, new_value, _ in (flag for flag in given if not flag[2]):
                if not same_value(_yaml_value(old_value), _yaml_value(new_value)):
                    error(
                        f"{old_flag} {old_value} and {new_flag} {new_value} set one argument ({old_flag} is the "
                        f"former name of {new_flag}): pass only {new_flag}"
                    )
    return result


def _renamed_config(
    value: str, option: str, spelling: str, scopes: Sequence[tuple[str, ...]], renames: dict[str, str], error: Any
) -> str | None:
    """The YAML of ``option value`` (a file or the text) rewritten with the former names under ``scopes`` (key
    paths of mappings of the module's arguments) spelled as now; None if it has none."""
    data, path = _config_data(value)
    if not isinstance(data, dict):
        return None
    where = f"{option} {path}" if path else option
    changed = False
    for scope in scopes:
        node: Any = data
        for key in scope:
            node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            continue
        keys = spelling + "".join(f"{key}." for key in scope)
        for old in [key for key in node if key in renames]:
            new, old_value = renames[old], node.pop(old)
            if new in node and not same_value(node[new], old_value):
                error(
                    f"{keys}{old}: {old_value!r} and {keys}{new}: {node[new]!r} in {where} set one argument ({old} is "
                    f"the former name of {new}): keep only {new}"
                )
            node.setdefault(new, old_value)
            _warn_renamed(f"{keys}{old} in {where} is deprecated, use {keys}{new}")
            changed = True
    return yaml.safe_dump(data, sort_keys=False) if changed else None


def _command_line_renames(argv: Sequence[str]) -> dict[str, str]:
    """The former argument names of the module ``rl-lightning``'s command line names (its last ``--model``,
    ``--model.class_path`` or ``--config`` with a ``model``); with none named (``--ckpt_path`` alone), those
    that mean the same in every module and are no module's current argument."""
    model_class = None
    for index, token in enumerate(argv):
        option, equals, value = token.partition("=")
        if not equals:
            value = argv[index + 1] if index + 1 < len(argv) else ""
        if option in ("--model", "--model.class_path"):
            model_class = _namedmodel_class_at(_config_data(value)[0]) or model_class
        elif option in ("--config", "-c") and isinstance(data := _config_data(value)[0], dict):
            for node in (data, *(data.get(c) for c in ("fit", "validate", "test"))):
                if isinstance(node, dict) and "model" in node:
                    model_class = _namedmodel_class_at(node["model"]) or model_class
    if model_class is not None:
        return renames_of(model_class)
    current = {name for klass in MODEL_CLASSES for name in inspect.signature(klass.__init__).parameters}
    news: dict[str, set[str]] = {}
    for klass in MODEL_CLASSES:
        for old, new in renames_of(klass).items():
            news.setdefault(old, set()).add(new)
    return {old: next(iter(new)) for old, new in news.items() if len(new) == 1 and old not in current}


def _namedmodel_class_at(spec: Any) -> Any:
    """The module class a ``--model`` value names (a short name, a class path, or a mapping with ``class_path``)."""
    if isinstance(spec, dict):
        spec = spec.get("class_path")
    if not isinstance(spec, str):
        return None
    model_class = {klass.__name__: klass for klass in MODEL_CLASSES}.get(spec) or model_class_at(spec)
    return model_class if isinstance(model_class, type) and issubclass(model_class, L.LightningModule) else None


def _config_data(value: str) -> tuple[Any, str | None]:
    """The YAML of a config option's value: a file's (and its path) or the text's; None if it does not parse."""
    try:
        path = value if Path(value).is_file() else None
        data = yaml.safe_load(Path(value).read_text() if path else value)
    except (OSError, ValueError, yaml.YAMLError):  # a name too long for a path, text that is not YAML
        return None, None
    return data, path


def _yaml_value(value: str | None) -> Any:
    """A flag's value as jsonargparse reads it (``4`` and ``4`` alike, ``true`` and ``True``)."""
    try:
        return yaml.safe_load(value) if value is not None else None
    except yaml.YAMLError:
        return value


def _is_option(token: str) -> bool:
    return token.startswith("-") and not token.lstrip("-")[:1].isdigit()  # -1 and -0.5 are values


def _warn_renamed(message: str) -> None:
    """A former argument name: an ``RLLightningDeprecationWarning``, and a line on stderr (Python hides the
    warning outside ``__main__``); once, not per DDP rank."""
    warnings.warn(message, RLLightningDeprecationWarning, stacklevel=3)
    if is_launching_process():
        print(f"warning: {message}", file=sys.stderr, flush=True)


def model_class_at(class_path: str | None) -> Any:
    """The class at ``class_path`` (``rl_lightning.algos.ppo.PPOModule``); None if there is none."""
    if not class_path:
        return None
    module_name, _, class_name = class_path.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError, ValueError):
        return None
