"""Policies on the Hugging Face Hub: ``module.save_pretrained(directory)``, ``Module.from_pretrained(dir_or_repo_id)``
and ``module.push_to_hub(repo_id)`` (the ``hub`` extra: ``huggingface_hub`` and ``safetensors``).

A pretrained folder, what :func:`save_pretrained` writes and :func:`push_folder` uploads:

    config.json         the algorithm, the env spec (env id, observation and action spaces as JSON), the
                        hyper-parameters, the env steps trained, the greedy evaluation and the other files written
                        with their SHA-256
    model.safetensors   the module's ``state_dict`` (policy, critics, targets, normalisers)
    policy.pt2          the greedy policy as a ``torch.export`` program (``rl_lightning.export``)
    policy.onnx         the same in ONNX (with the ``onnx`` extra)
    replay.mp4          the greedy policy playing (where the env can draw or render)
    README.md           the model card (``rl_lightning.hub_card``): the Hub's front matter (``library_name``, tags,
                        a ``model-index`` with the greedy evaluation as ``"mean +/- std"``, as ``huggingface_sb3``
                        writes it), the command that reproduces the evaluation, the video

Saving writes only these names, only inside ``directory``, and replaces only files an earlier save wrote
(``rl_lightning.hub_files``: ``overwrite=True`` replaces others). Data is not code: loading reads ``config.json``
with ``json`` and ``model.safetensors`` with ``safetensors``, each with bounds on what it parses, nothing else (no
``torch.load``, no pickle; from the Hub only those two files are downloaded). The hyper-parameters pass
``rl_lightning.trust``'s allow-list before the module is built, and a folder whose algorithm, env, spaces or tensors
are not the ones of the class and env it is loaded into is a ``ValueError`` saying what differs.
"""

from __future__ import annotations

import contextlib
import json
import math
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch

from rl_lightning._checks import check_bool, check_int, check_seed
from rl_lightning.algos.registry import algorithm_classes
from rl_lightning.hub_card import (
    PretrainedEvaluation,
    default_max_episode_steps,
    evaluate_greedy,
    model_card,
    record_video,
)
from rl_lightning.hub_files import (
    CARD_NAME,
    CONFIG_NAME,
    EXPORT_NAMES,
    FILES_TO_LOAD,
    FORMAT_VERSION,
    LIBRARY_NAME,
    MANIFEST_KEY,
    SAVED_NAMES,
    VIDEO_NAME,
    WEIGHTS_NAME,
    check_replaceable,
    check_repo_id,
    move_into,
    read_config,
    read_weights,
    require,
    sha256,
    staging_folder,
)
from rl_lightning.trust import as_mapping, check_file_hyperparameters, local_file_settings, untrusted

if TYPE_CHECKING:  # the protocol, not rl_lightning.algos.base: the modules' sharing methods import this module
    from rl_lightning.protocols import RLModuleProtocol as RLModule

__all__ = [
    "CARD_NAME",
    "CONFIG_NAME",
    "EXPORT_NAMES",
    "FILES_TO_LOAD",
    "FORMAT_VERSION",
    "LIBRARY_NAME",
    "VIDEO_NAME",
    "WEIGHTS_NAME",
    "PretrainedEvaluation",
    "default_max_episode_steps",
    "evaluate_greedy",
    "load_checkpoint",
    "load_pretrained",
    "model_card",
    "push_folder",
    "push_to_hub",
    "record_video",
    "save_pretrained",
    "space_to_json",
]


# -- spaces and hyper-parameters as JSON ----------------------------------------------------------------------


def space_to_json(space: gym.Space) -> dict[str, Any]:
    """``space`` as plain JSON data (a ``Box``'s bounds one number where they are all equal, infinities as
    ``"inf"`` / ``"-inf"``): two spaces are the same where their JSON is."""
    if isinstance(space, gym.spaces.Box):
        return {
            "type": "Box",
            "shape": list(space.shape),
            "dtype": str(space.dtype),
            "low": _bound(space.low),
            "high": _bound(space.high),
        }
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": space.nvec.tolist(), "start": space.start.tolist()}
    if isinstance(space, gym.spaces.MultiBinary):
        return {"type": "MultiBinary", "n": np.asarray(space.n).tolist()}
    if isinstance(space, gym.spaces.Dict):
        return {"type": "Dict", "spaces": {key: space_to_json(part) for key, part in space.spaces.items()}}
    if isinstance(space, gym.spaces.Tuple):
        return {"type": "Tuple", "spaces": [space_to_json(part) for part in space.spaces]}
    return {"type": type(space).__name__, "repr": repr(space)}


def _bound(values: np.ndarray) -> Any:
    values = np.asarray(values)
    listed = values.flat[0].item() if values.size and (values == values.flat[0]).all() else values.tolist()
    return _finite_json(listed)


def _finite_json(value: Any) -> Any:
    if isinstance(value, list):
        return [_finite_json(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def _json_data(value: Any, key: str) -> Any:
    """A hyper-parameter as JSON data (tuples as lists); anything else is a ``ValueError`` naming ``key``."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(
                f"hyper-parameter {key} is {value}, which JSON cannot hold: a pretrained folder holds data"
            )
        return value
    if isinstance(value, (list, tuple)):
        return [_json_data(item, f"{key}[{index}]") for index, item in enumerate(value)]
    mapping = as_mapping(value)
    if mapping is not None:
        return {str(name): _json_data(item, f"{key}[{name!r}]") for name, item in mapping.items()}
    raise ValueError(
        f"hyper-parameter {key} is {value!r} ({type(value).__name__}), not JSON data: a pretrained folder holds plain "
        "values only (numbers, strings, lists, dicts; class paths as strings)"
    )


# -- saving --------------------------------------------------------------------------------------------------


def save_pretrained(
    module: RLModule,
    directory: str | Path,
    *,
    repo_id: str | None = None,
    eval_episodes: int = 10,
    eval_seed: int = 0,
    eval_max_episode_steps: int | None = None,
    video_steps: int = 500,
    export_formats: Sequence[str] = ("pt2", "onnx"),
    overwrite: bool = False,
) -> Path:
    """Write ``module`` to ``directory`` as a pretrained folder (module docstring): the files are written in a hidden
    folder inside it, then moved in, so a save that fails leaves ``directory`` as it was.

    Args:
        repo_id: where it will live on the Hub (``"user/ppo-CartPole-v1"``), for the card's commands; None: the
            commands name ``directory``.
        eval_episodes: greedy episodes of the card's evaluation (:func:`evaluate_greedy`); 0: no evaluation.
        eval_seed: their env's seed.
        eval_max_episode_steps: their cap (None: one past the env's time limit).
        video_steps: steps of ``replay.mp4``; 0: no video.
        export_formats: the exported policies: ``"pt2"`` (``torch.export``), ``"onnx"`` (skipped, with a warning,
            without the ``onnx`` extra).
        overwrite: replace files of the folder's names (``README.md``, ``config.json``, ...) that no earlier save
            wrote, or that changed since (a card edited by hand), and links of those names (the link, not its
            target). Without it such a file is a ``FileExistsError`` before anything is written; the files of an
            earlier save are replaced either way, and other files in ``directory`` are never touched.

    Returns:
        ``directory``.
    """
    safetensors_torch = require("safetensors.torch")
    check_int("eval_episodes", eval_episodes, 0)
    check_int("video_steps", video_steps, 0)
    check_seed("eval_seed", eval_seed)
    check_bool("overwrite", overwrite)
    if repo_id is not None:
        check_repo_id("repo_id", repo_id)
    unknown = sorted(set(export_formats) - set(EXPORT_NAMES))
    if isinstance(export_formats, str) or unknown:
        raise ValueError(f"export_formats must be a sequence of {sorted(EXPORT_NAMES)}, got {export_formats!r}")
    directory = Path(directory)
    check_replaceable(directory, overwrite)
    was_training = module.training
    module.eval()
    with staging_folder(directory) as staging:
        try:
            config = _config(module)
            state = module.state_dict()
            not_tensors = sorted(name for name, value in state.items() if not isinstance(value, torch.Tensor))
            if not_tensors:
                raise ValueError(
                    f"the state_dict holds entries that are not tensors ({not_tensors}): safetensors cannot"
                )
            # Copies: safetensors refuses tensors that share memory (a target network tied to its source).
            weights = {name: value.detach().to("cpu").contiguous().clone() for name, value in state.items()}
            metadata = {"format": "pt", "algorithm": config["algorithm"], "env_id": config["env"]["env_id"]}
            safetensors_torch.save_file(weights, str(staging / WEIGHTS_NAME), metadata=metadata)
            for format in export_formats:
                try:
                    module.export_policy(staging / EXPORT_NAMES[format])
                except ImportError as error:
                    warnings.warn(f"{EXPORT_NAMES[format]} not written: {error}", stacklevel=2)
            if eval_episodes:
                evaluation = evaluate_greedy(module, eval_episodes, eval_seed, eval_max_episode_steps)
                config["evaluation"] = {**evaluation._asdict(), "mean": evaluation.mean, "std": evaluation.std}
            if video_steps:
                record_video(module, staging / VIDEO_NAME, video_steps, eval_seed)
        finally:
            module.train(was_training)
        (staging / CARD_NAME).write_text(model_card(config, repo_id or str(directory), _files(staging)))
        written = [name for name in SAVED_NAMES if name != CONFIG_NAME and (staging / name).is_file()]
        config[MANIFEST_KEY] = {name: sha256(staging / name) for name in written}
        (staging / CONFIG_NAME).write_text(json.dumps(config, indent=2, allow_nan=False) + "\n")
        move_into(staging, directory)
    return directory


def _config(module: RLModule) -> dict[str, Any]:
    algorithm = module.algorithm_name()
    hyperparameters = {
        name: _json_data(value, name) for name, value in module.hparams.items() if name not in ("_class_path",)
    }
    return {
        "library": LIBRARY_NAME,
        "library_version": _library_version(),
        "format_version": FORMAT_VERSION,
        "algorithm": algorithm,
        "env": {
            "env_id": module.hparams.env_id,
            "observation_space": space_to_json(module.observation_space),
            "action_space": space_to_json(module.action_space),
            # What the exported policies take (an asymmetric actor-critic's actor_keys), where it is not all of it.
            **(
                {"policy_observation_space": space_to_json(module.policy_observation_space)}
                if module.policy_observation_space is not module.observation_space
                else {}
            ),
        },
        "hyperparameters": hyperparameters,
        "env_steps": int(module.env_steps),
    }


def _library_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rl_lightning")
    except PackageNotFoundError:
        return "unknown"


def _files(directory: Path) -> list[str]:
    wanted = (CONFIG_NAME, WEIGHTS_NAME, *EXPORT_NAMES.values(), VIDEO_NAME)
    return [name for name in wanted if name == CONFIG_NAME or (directory / name).is_file()]


# -- loading ---------------------------------------------------------------------------------------------------


def load_pretrained(
    source: str | Path,
    module_class: type[RLModule] | None = None,
    *,
    revision: str | None = None,
    token: str | bool | None = None,
    cache_dir: str | Path | None = None,
    trust_remote_code: bool = False,
    **hyperparameters: Any,
) -> RLModule:
    """The module saved in ``source`` (a pretrained folder, or a Hub repo id whose ``config.json`` and
    ``model.safetensors`` are downloaded with ``huggingface_hub.snapshot_download``), on the CPU, in eval mode.

    Args:
        module_class: the class to load into (its algorithm must be the folder's); None: the folder's algorithm,
            one of ``rl_lightning.algos.ALGORITHMS``.
        revision, token, cache_dir: ``snapshot_download``'s, for a repo id.
        trust_remote_code: the folder is yours: allow any class path in its hyper-parameters and keep its
            process-level settings; without it ``env_backend="ray"``, Ray's addresses and compile's options from the
            folder are replaced by local ones, with a note (``rl_lightning.trust.local_file_settings``).
        **hyperparameters: replace the folder's (yours: not checked against the allow-list), e.g. ``env_id`` to play
            on another env with the same spaces.

    Raises:
        ValueError: the folder is not a pretrained folder of ``module_class``'s algorithm, its env or spaces are not
            the ones the module is built with, or its weights do not fit (each message names what differs).
    """
    check_bool("trust_remote_code", trust_remote_code)
    directory = _resolve(source, revision, token, cache_dir)
    where = f"the pretrained folder {source}"
    config = read_config(directory / CONFIG_NAME, where)
    algorithm = config["algorithm"]
    classes = algorithm_classes()
    if module_class is None or module_class.algorithm_name() == "RLModule":  # RLModule's: the folder says which
        if algorithm not in classes:
            raise ValueError(f"{where} holds a {algorithm!r}, not one of {', '.join(classes)}")
        module_class = classes[algorithm]
    elif module_class.algorithm_name() != algorithm:
        raise ValueError(
            f"{where} holds a {algorithm} but is loaded into {module_class.algorithm_name()}: "
            f"load it with {algorithm}.from_pretrained(...)"
        )
    env, saved = config["env"], dict(config["hyperparameters"])
    if saved.get("env_id") != env["env_id"]:
        raise ValueError(
            f"{where}: config.json's env spec is for env_id {env['env_id']!r} but its hyper-parameters say "
            f"{saved.get('env_id')!r}: the file was edited"
        )
    if not trust_remote_code:  # the folder's own settings: checked, and it may not choose where the process connects
        from_file = {name: value for name, value in saved.items() if name not in hyperparameters}
        check_file_hyperparameters(from_file, where)
        saved = {**saved, **local_file_settings(from_file, where)}
    saved.pop("_class_path", None)
    saved.pop("_instantiator", None)
    settings = {**module_class.upgraded_hyperparameters(saved), **hyperparameters}
    trusted = trust_remote_code or "env_kwargs" in hyperparameters
    with contextlib.nullcontext() if trusted else untrusted(where):
        try:
            module = module_class(**settings)
        except TypeError as error:  # a name this version does not know
            raise ValueError(f"{where}: its hyper-parameters do not fit {module_class.__name__}: {error}") from error
    _check_spaces(module, env, where)
    module.load_state_dict(read_weights(directory / WEIGHTS_NAME, module.state_dict(), where), strict=True)
    return module.eval()


def _resolve(source: str | Path, revision: str | None, token: str | bool | None, cache_dir: Any) -> Path:
    """A local folder as it is; else a repo id, downloaded (only :data:`FILES_TO_LOAD`)."""
    path = Path(source).expanduser()
    if path.is_dir():
        return path
    text = str(source)
    try:
        repo_id = None if isinstance(source, Path) else check_repo_id("source", text)
    except ValueError:  # not by the Hub's rules either: one message for both
        repo_id = None
    if repo_id is None:
        raise FileNotFoundError(f"{text} is not a directory (nor a Hub repo id such as 'user/ppo-CartPole-v1')")
    hub = require("huggingface_hub")
    try:
        downloaded = hub.snapshot_download(
            text,
            revision=revision,
            token=token,
            cache_dir=cache_dir,
            allow_patterns=list(FILES_TO_LOAD),
            library_name=LIBRARY_NAME,
            library_version=_library_version(),
        )
    except Exception as error:  # the Hub's errors (not found, gated, offline) as one OSError naming the repo
        raise OSError(
            f"could not download {text} from the Hugging Face Hub (nor is it a folder here): {type(error).__name__}: "
            f"{error}"
        ) from error
    return Path(downloaded)


def _check_spaces(module: RLModule, env: Mapping[str, Any], where: str) -> None:
    env_id = module.hparams.env_id
    for name in ("observation_space", "action_space"):
        built, saved = space_to_json(getattr(module, name)), env[name]
        if built != saved:
            trained = env["env_id"]
            on = f"{env_id} (loaded for it)" if env_id != trained else env_id
            raise ValueError(
                f"{where}: its {name} is not the env's: the folder says {json.dumps(saved)}, {on} has "
                f"{json.dumps(built)}"
                + ("" if env_id != trained else " (the folder's spaces were edited, or the env changed)")
            )


def load_checkpoint(ckpt_path: str | Path, env_id: str | None = None, trust_remote_code: bool = False) -> RLModule:
    """The module saved in the Lightning checkpoint ``ckpt_path`` with the class that saved it (read with
    ``weights_only=True``, its hyper-parameters checked against ``rl_lightning.trust``'s allow-list), on the CPU,
    in eval mode; ``env_id`` plays it on another env with the same spaces."""
    from rl_lightning.checkpoints import CHECKPOINT_KEY, load_checkpoint_file

    payload = load_checkpoint_file(ckpt_path).get(CHECKPOINT_KEY) or {}
    algorithm = payload.get("algorithm")
    classes = algorithm_classes()
    if algorithm not in classes:
        raise ValueError(f"{ckpt_path} was saved by {algorithm!r}, not one of {', '.join(classes)}")
    overrides = {"env_id": env_id} if env_id else {}
    module = classes[algorithm].load_from_checkpoint(
        ckpt_path, map_location="cpu", trust_remote_code=trust_remote_code, **overrides
    )
    return module.eval()


# -- pushing ---------------------------------------------------------------------------------------------------


def push_folder(
    directory: str | Path,
    repo_id: str,
    *,
    private: bool | None = None,
    token: str | None = None,
    commit_message: str | None = None,
    revision: str | None = None,
) -> Any:
    """Upload the pretrained folder ``directory`` to the model repo ``repo_id`` (created if it does not exist) in
    one commit with ``huggingface_hub.HfApi``; returns its ``CommitInfo``. Only the files of save_pretrained's names
    are sent (``config.json``, ``model.safetensors``, ``README.md``, ...): nothing else in ``directory``. The token:
    ``token``, else ``HF_TOKEN`` or ``hf auth login``'s."""
    hub = require("huggingface_hub")
    check_repo_id("repo_id", repo_id)
    directory = Path(directory)
    config = read_config(directory / CONFIG_NAME, f"the pretrained folder {directory}")
    if not (directory / WEIGHTS_NAME).is_file():
        raise FileNotFoundError(f"{directory} has no {WEIGHTS_NAME}: write it with save_pretrained first")
    links = [name for name in SAVED_NAMES if (directory / name).is_symlink()]
    if links:
        raise ValueError(f"{directory}: {', '.join(links)} are symbolic links: push_folder sends plain files only")
    names = [name for name in SAVED_NAMES if (directory / name).is_file()]
    api = hub.HfApi(token=token)
    api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
    message = commit_message or f"{config['algorithm'].removesuffix('Module')} on {config['env']['env_id']}"
    return api.upload_folder(
        repo_id=repo_id,
        folder_path=str(directory),
        commit_message=message,
        revision=revision,
        repo_type="model",
        allow_patterns=names,
    )


def push_to_hub(
    module: RLModule,
    repo_id: str,
    *,
    local_dir: str | Path | None = None,
    private: bool | None = None,
    token: str | None = None,
    commit_message: str | None = None,
    revision: str | None = None,
    **save_options: Any,
) -> Any:
    """:func:`save_pretrained` ``module`` (into ``local_dir``, or a temporary folder) with the card's commands
    naming ``repo_id``, then :func:`push_folder` it; returns the ``CommitInfo``. ``save_options``: those of
    :func:`save_pretrained` (``eval_episodes``, ``video_steps``, ...)."""
    import tempfile

    check_repo_id("repo_id", repo_id)
    with contextlib.ExitStack() as stack:
        directory = (
            Path(local_dir) if local_dir is not None else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        )
        save_pretrained(module, directory, repo_id=repo_id, **save_options)
        return push_folder(
            directory, repo_id, private=private, token=token, commit_message=commit_message, revision=revision
        )
