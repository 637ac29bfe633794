"""The command lines' resume policy: what ``--ckpt_path`` takes from a checkpoint and what it refuses, for
``rl-lightning`` (``--model.init_args.lr``) and the scripts (``--lr``) alike; :mod:`rl_lightning.cli` parses and
applies it, :mod:`rl_lightning.checkpoints` reads the file and finds the last one.

- ``--ckpt_path FILE`` (``rl-lightning``): the module class and the hyper-parameters default to the checkpoint's;
  those given win, and each that differs is named. A checkpoint of another class than ``--model``, or of another env
  than the run's, is refused. (The scripts: the flags and their defaults, which the file must fit.)
- ``--ckpt_path last``: the newest last checkpoint of the module on the run's env; the settings not given come back
  from it, and one given with another value than the checkpoint's is refused: that is another run.
- The hyper-parameters are data: a class path outside ``rl_lightning.trust``'s allow-list is refused before anything
  is imported, and the process-level settings are left out, unless the checkpoint is trusted (``--trust_checkpoint``).

Each refusal is ``error``: the parser's, which prints the usage line and exits with status 2.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

from rl_lightning._command_line_renames import model_class_at
from rl_lightning.algos import ALGORITHMS
from rl_lightning.checkpoints import (
    CHECKPOINT_KEY,
    checkpoint_settings,
    describe_checkpoint,
    differing_settings,
    load_checkpoint_file,
    resolve_ckpt_path,
)
from rl_lightning.deprecations import same_value
from rl_lightning.scripting import is_launching_process
from rl_lightning.trust import (
    UntrustedCheckpointError,
    algorithm_class_paths,
    check_file_hyperparameters,
    local_file_settings,
)


def settings_of_file(
    ckpt_path: str,
    model: Any,
    trusted: bool,
    given_init_args: Callable[[Any], dict[str, Any]],
    error: Callable[[str], NoReturn],
) -> tuple[Any, dict[str, Any], list[str]]:
    """``--ckpt_path FILE``: the module class the run builds, the hyper-parameters it takes from the checkpoint (those
    not given: the flags and ``--config`` values win) and ``"name given (checkpoint: saved)"`` for each given one that
    differs from the checkpoint's. (Lightning's own version silently lets the checkpoint's values replace the flags,
    its class replace ``--model``.) A file that is not an rl_lightning checkpoint, a checkpoint of another class than
    ``model`` or for another env than the run's (given, from ``--config`` or the default), and, unless ``trusted``, a
    class path in its hyper-parameters outside the allow-list (refused before anything is imported) are ``error``.

    Args:
        model: the parsed ``--model`` (None: the checkpoint's class).
        trusted: ``--trust_checkpoint``: any class path and process-level setting the file holds is taken.
        given_init_args: the init args the user gave (:meth:`~rl_lightning.cli.RLLightningCLI._given_init_args`), for
            the module class chosen.
        error: the parser's ``error`` (the usage line, exit status 2).
    """
    try:
        checkpoint = load_checkpoint_file(ckpt_path)
    except ValueError as unreadable:
        error(f"--ckpt_path: {unreadable}")
    hparams = dict(checkpoint.get("hyper_parameters") or {})
    if not trusted:  # data, not code: what it names is checked before anything is imported
        try:
            check_file_hyperparameters(hparams, f"--ckpt_path {ckpt_path}")
        except UntrustedCheckpointError as untrusted:
            error(str(untrusted))
    hparams.pop("_instantiator", None)  # Lightning's: never called
    payload = checkpoint[CHECKPOINT_KEY]
    saved_by, saved_env = payload.get("algorithm"), payload.get("env_id", hparams.get("env_id"))
    class_path = hparams.pop("_class_path", None)
    saved_class = algorithm_class_paths().get(class_path) or (model_class_at(class_path) if trusted else None)
    saved_class = saved_class or {c.__name__: c for c in ALGORITHMS}.get(saved_by)
    if saved_class is None:
        error(f"--ckpt_path {ckpt_path} does not say which module saved it (no class path): pass --model")
    chosen = model_class_at(model.class_path) if model is not None else saved_class
    if chosen is not None and saved_class.algorithm_name() != getattr(chosen, "algorithm_name", lambda: None)():
        error(
            f"--ckpt_path {ckpt_path} is a checkpoint of {saved_class.algorithm_name()} on "
            f"{saved_env}, but --model is {chosen.__name__}: pass a "
            f"{chosen.__name__} checkpoint, or --model {saved_class.__name__} (or no --model: the checkpoint's)"
        )
    if model is not None and saved_env is not None:
        # The run's env, given, from --config or the default, is the checkpoint's identity, not a setting the
        # checkpoint may fill in: a CartPole config with an Acrobot checkpoint is refused.
        env_id = model_init_args(model).get("env_id")
        if env_id is not None and env_id != saved_env:
            error(
                f"--ckpt_path {ckpt_path} is a checkpoint of {saved_class.__name__} on {saved_env}, but the run "
                f"asked for is on {env_id} (from the flags, --config or the default): pass "
                f"--model.init_args.env_id {saved_env}, a {env_id} checkpoint, or no --model / --config (the "
                "checkpoint's settings)"
            )
    hparams = _upgraded(chosen, hparams)  # values saved under a former name, under the new one
    given = given_init_args(chosen)
    replaced = [
        f"{name} {given[name]!r} (checkpoint: {hparams[name]!r})"
        for name in sorted(given)
        if name in hparams and not same_value(given[name], hparams[name])
    ]
    taken = {name: value for name, value in hparams.items() if name not in given}
    if not trusted:  # nor may the file choose where the process connects or what it runs
        taken = local_file_settings(taken, f"--ckpt_path {ckpt_path}")
    return chosen, taken, replaced


def find_last(
    root_dir: str, algorithm: str, env_id: str | None, error: Callable[[str], NoReturn]
) -> tuple[str | None, Any]:
    """``--ckpt_path last``: the newest last checkpoint of ``algorithm`` on ``env_id`` under ``root_dir``
    (:func:`~rl_lightning.checkpoints.resolve_ckpt_path`) and its contents; ``(None, None)`` if there is none
    (a fresh start). One of other runs only, or an unreadable one, is ``error``."""
    try:
        path = resolve_ckpt_path("last", root_dir, algorithm, env_id)
        return (None, None) if path is None else (path, load_checkpoint_file(path))
    except ValueError as unusable:
        error(f"--ckpt_path last: {unusable}")


def settings_of_last(
    found: tuple[str | None, Any],
    model_class: Any,
    given: dict[str, Any],
    prefix: str,
    trusted: bool,
    error: Callable[[str], NoReturn],
) -> dict[str, Any] | None:
    """The hyper-parameters a run takes from ``--ckpt_path last``'s checkpoint (``found``: its path and contents, by
    :func:`find_last`): those not ``given``; None where none was found. A ``given`` one that differs from the
    checkpoint's is ``error`` naming each (``prefix``: the flags' spelling), as is one taken that names a class outside
    the allow-list (unless ``trusted``)."""
    path, checkpoint = found
    if path is None:
        return None
    saved = _upgraded(model_class, checkpoint_settings(checkpoint))
    differing = differing_settings(given, saved, prefix)
    if differing:
        error(
            f"--ckpt_path last is {path} ({describe_checkpoint(path, checkpoint)}), a run with other settings than "
            f"the ones given: {', '.join(differing)}. To continue that run, leave these settings out (its values "
            f"come back); to resume it with yours, pass its path (--ckpt_path {path}); for a new run, leave out "
            "--ckpt_path"
        )
    taken = {name: value for name, value in saved.items() if name not in given}
    if not trusted:
        try:
            check_file_hyperparameters(taken, f"--ckpt_path last ({path})")
        except UntrustedCheckpointError as untrusted:
            error(f"{untrusted} (or give that setting yourself)")
        taken = local_file_settings(taken, f"--ckpt_path last ({path})")
    return taken


def checkpoint_to_resume(
    ckpt_path: str | None,
    root_dir: str,
    module: Any,
    found: tuple[str | None, Any] | None,
    verb: str,
    error: Callable[[str, BaseException], NoReturn],
) -> str | None:
    """``ckpt_path``, or for ``last`` the newest ``last.ckpt`` of ``module``'s algorithm and env under ``root_dir``
    (``found`` when parsing, by :func:`find_last`; this run's own new version_N folder has none for Lightning's lookup
    to find), checked to fit ``module``: the same algorithm, env and network shapes, or ``error`` naming both. A
    ``last`` found is announced (``verb``: ``resuming``, ``loading``)."""
    path = checkpoint = None
    try:
        if ckpt_path == "last" and found is not None:
            path = found[0]
        else:
            path = resolve_ckpt_path(ckpt_path, root_dir, module.algorithm_name(), module.hparams.env_id)
        checkpoint = None if path is None else load_checkpoint_file(path)
        if checkpoint is not None:
            module.check_checkpoint(checkpoint)
    except ValueError as unfit:
        error(f"--ckpt_path {path or ckpt_path}: {unfit}", unfit)
    if ckpt_path == "last" and checkpoint is not None and is_launching_process():
        print(f"--ckpt_path last: {verb} {path} ({describe_checkpoint(path, checkpoint)})", flush=True)
    return path


def model_init_args(model: Any) -> dict[str, Any]:
    """A parsed ``--model``'s init args as a dict (empty if none)."""
    init_args = model.get("init_args") if hasattr(model, "get") else None
    if init_args is None:
        return {}
    return dict(init_args.items()) if hasattr(init_args, "items") else dict(vars(init_args))


def _upgraded(model_class: Any, hparams: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's ``hparams`` with the values saved under a former name (``renamed_hyperparameters``)
    under the new one, the former names gone (the parser knows the current ones only)."""
    renamed = getattr(model_class, "renamed_hyperparameters", {})
    upgraded = {**hparams, **model_class.upgraded_hyperparameters(hparams)} if renamed else dict(hparams)
    return {name: value for name, value in upgraded.items() if name not in renamed}
