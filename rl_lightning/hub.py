"""Policies on the Hugging Face Hub: ``module.save_pretrained(directory)``, ``Module.from_pretrained(dir_or_repo_id)``
and ``module.push_to_hub(repo_id)`` (the ``hub`` extra: ``huggingface_hub`` and ``safetensors``).

A pretrained folder, what :func:`save_pretrained` writes and :func:`push_folder` uploads:

    config.json         the algorithm, the env spec (env id, observation and action spaces as JSON), the
                        hyper-parameters, the env steps trained and the greedy evaluation
    model.safetensors   the module's ``state_dict`` (policy, critics, targets, normalisers)
    policy.pt2          the greedy policy as a ``torch.export`` program (``rl_lightning.export``)
    policy.onnx         the same in ONNX (with the ``onnx`` extra)
    replay.mp4          the greedy policy playing (where the env can draw or render)
    README.md           the model card: the Hub's front matter (``library_name``, tags, a ``model-index`` with the
                        greedy evaluation as ``"mean +/- std"``, as ``huggingface_sb3`` writes it), the command that
                        reproduces the evaluation, the video

Data is not code: loading reads ``config.json`` with ``json`` and ``model.safetensors`` with ``safetensors``, nothing
else (no ``torch.load``, no pickle; from the Hub only those two files are downloaded). The hyper-parameters pass
``rl_lightning.trust``'s allow-list before the module is built, and a folder whose algorithm, env or spaces are not
the ones of the class and env it is loaded into is a ``ValueError`` saying what differs.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch

from rl_lightning._checks import check_bool, check_int, check_seed, check_str
from rl_lightning.trust import as_mapping, check_file_hyperparameters, untrusted

if TYPE_CHECKING:
    from rl_lightning.algos.base import RLModule

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
VIDEO_NAME = "replay.mp4"
CARD_NAME = "README.md"
#: The exported policies' file names by ``export_formats`` entry.
EXPORT_NAMES = {"pt2": "policy.pt2", "onnx": "policy.onnx"}
LIBRARY_NAME = "rl_lightning"
#: The layout version of ``config.json``; a folder of a later version is refused.
FORMAT_VERSION = 1
#: The files :func:`load_pretrained` needs (all that it downloads).
FILES_TO_LOAD = (CONFIG_NAME, WEIGHTS_NAME)
_HUB_EXTRA = "pip install 'rl_lightning[hub]'"


class PretrainedEvaluation(NamedTuple):
    """The greedy evaluation of a pretrained folder: ``episodes`` episodes one after another on one env seeded
    ``seed`` (what ``scripts/enjoy.py --episodes N --seed S --max_episode_steps M`` plays)."""

    episodes: int
    seed: int
    max_episode_steps: int
    #: Each episode's undiscounted return, in order.
    returns: list[float]

    @property
    def mean(self) -> float:
        return float(np.mean(self.returns))

    @property
    def std(self) -> float:
        """Over the episodes (numpy's and SB3's, not an estimate's)."""
        return float(np.std(self.returns))

    @property
    def mean_reward(self) -> str:
        """``"500.00 +/- 0.00"``: the model-index value, as ``huggingface_sb3`` writes it."""
        return f"{self.mean:.2f} +/- {self.std:.2f}"


def _require(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise ImportError(f"the Hugging Face Hub needs {name}: {_HUB_EXTRA}") from error


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


# -- evaluation and video --------------------------------------------------------------------------------------


def default_max_episode_steps(module: RLModule) -> int:
    """One past the env's time limit (the env ends its episodes first), else ``NO_TIME_LIMIT_EVAL_STEPS``."""
    from rl_lightning.envs.gym_adapter import NO_TIME_LIMIT_EVAL_STEPS

    envs = module.make_envs(1, 0)
    try:
        limit = getattr(envs, "max_episode_steps", None)
    finally:
        envs.close()
    return limit + 1 if isinstance(limit, int) and limit > 0 else NO_TIME_LIMIT_EVAL_STEPS


def evaluate_greedy(
    module: RLModule, episodes: int, seed: int = 0, max_episode_steps: int | None = None
) -> PretrainedEvaluation:
    """Play ``episodes`` greedy episodes one after another on one copy of the module's env (its backend and
    ``env_kwargs``) seeded ``seed``, as ``scripts/enjoy.py`` plays them; cut an episode at ``max_episode_steps``
    (None: :func:`default_max_episode_steps`)."""
    from rl_lightning.playing import play_greedy

    check_int("episodes", episodes, 1)
    check_seed("seed", seed)
    max_episode_steps = default_max_episode_steps(module) if max_episode_steps is None else max_episode_steps
    check_int("max_episode_steps", max_episode_steps, 1)
    envs = module.make_envs(1, seed)
    try:
        played = play_greedy(
            module.greedy_actor(), envs, episodes_per_env=episodes, max_episode_steps=max_episode_steps
        )
    finally:
        envs.close()
    cut = int(played.cut.sum())
    if cut:
        warnings.warn(
            f"{cut} of {episodes} evaluation episodes did not end within max_episode_steps={max_episode_steps}: "
            "their returns are partial",
            stacklevel=2,
        )
    return PretrainedEvaluation(episodes, seed, max_episode_steps, played.returns[0].tolist())


def record_video(module: RLModule, path: str | Path, num_steps: int, seed: int = 0) -> Path | None:
    """Write an MP4 of ``num_steps`` greedy steps on one copy of the module's env (episodes follow one another),
    drawn from the observations (native envs) or rendered (gymnasium's); None, with a warning, where the env
    can do neither or the renderer fails."""
    from rl_lightning.video import encode_mp4

    check_int("num_steps", num_steps, 1)
    envs = module.make_envs(1, seed, render=True)
    try:
        if not (envs.can_draw or envs.can_render):
            raise NotImplementedError(f"{type(envs).__name__} can neither draw its observations nor render")
        video = encode_mp4(_greedy_frames(module, envs, num_steps), envs.render_fps)
    except (NotImplementedError, RuntimeError, OSError) as error:  # a renderer's or an encoder's own failure
        warnings.warn(f"no video of {module.hparams.env_id}: {type(error).__name__}: {error}", stacklevel=2)
        return None
    finally:
        envs.close()
    path = Path(path)
    path.write_bytes(video)
    return path


def _greedy_frames(module: RLModule, envs: Any, num_steps: int) -> Iterator[np.ndarray]:
    """The first env's frame before each of ``num_steps`` greedy steps, one at a time (the encoder streams them:
    no clip is held in memory)."""
    actor = module.greedy_actor()
    obs, _ = envs.reset()
    starts = torch.ones(envs.num_envs, dtype=torch.bool, device=envs.device)
    for _ in range(num_steps):
        frame = envs.draw(obs[0]) if envs.can_draw else envs.render()[0]
        yield np.ascontiguousarray(frame.numpy())
        with torch.no_grad():  # not around the yield: the consumer's grad mode is its own
            actions = torch.as_tensor(actor(obs, starts), device=envs.device)
        obs, _, terminated, truncated, _ = envs.step(actions)
        starts = terminated | truncated


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
) -> Path:
    """Write ``module`` to ``directory`` as a pretrained folder (module docstring).

    Args:
        repo_id: where it will live on the Hub (``"user/ppo-CartPole-v1"``), for the card's commands; None: the
            commands name ``directory``.
        eval_episodes: greedy episodes of the card's evaluation (:func:`evaluate_greedy`); 0: no evaluation.
        eval_seed: their env's seed.
        eval_max_episode_steps: their cap (None: one past the env's time limit).
        video_steps: steps of ``replay.mp4``; 0: no video.
        export_formats: the exported policies: ``"pt2"`` (``torch.export``), ``"onnx"`` (skipped, with a warning,
            without the ``onnx`` extra).

    Returns:
        ``directory``.
    """
    safetensors_torch = _require("safetensors.torch")
    check_int("eval_episodes", eval_episodes, 0)
    check_int("video_steps", video_steps, 0)
    check_seed("eval_seed", eval_seed)
    if repo_id is not None:
        check_str("repo_id", repo_id)
    unknown = sorted(set(export_formats) - set(EXPORT_NAMES))
    if isinstance(export_formats, str) or unknown:
        raise ValueError(f"export_formats must be a sequence of {sorted(EXPORT_NAMES)}, got {export_formats!r}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for name in (*EXPORT_NAMES.values(), VIDEO_NAME):  # a previous save's, which this one may not write
        (directory / name).unlink(missing_ok=True)
    was_training = module.training
    module.eval()
    try:
        config = _config(module)
        state = module.state_dict()
        not_tensors = sorted(name for name, value in state.items() if not isinstance(value, torch.Tensor))
        if not_tensors:
            raise ValueError(f"the state_dict holds entries that are not tensors ({not_tensors}): safetensors cannot")
        # Copies: safetensors refuses tensors that share memory (a target network tied to its source).
        weights = {name: value.detach().to("cpu").contiguous().clone() for name, value in state.items()}
        metadata = {"format": "pt", "algorithm": config["algorithm"], "env_id": config["env"]["env_id"]}
        safetensors_torch.save_file(weights, str(directory / WEIGHTS_NAME), metadata=metadata)
        for format in export_formats:
            try:
                module.export_policy(directory / EXPORT_NAMES[format])
            except ImportError as error:
                warnings.warn(f"{EXPORT_NAMES[format]} not written: {error}", stacklevel=2)
        if eval_episodes:
            evaluation = evaluate_greedy(module, eval_episodes, eval_seed, eval_max_episode_steps)
            config["evaluation"] = {**evaluation._asdict(), "mean": evaluation.mean, "std": evaluation.std}
        if video_steps:
            record_video(module, directory / VIDEO_NAME, video_steps, eval_seed)
    finally:
        module.train(was_training)
    (directory / CONFIG_NAME).write_text(json.dumps(config, indent=2, allow_nan=False) + "\n")
    (directory / CARD_NAME).write_text(model_card(config, repo_id or str(directory), _files(directory)))
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


def model_card(config: Mapping[str, Any], source: str, files: Sequence[str]) -> str:
    """The ``README.md`` of a pretrained folder: the Hub's front matter (``library_name``, tags, a ``model-index``
    holding the greedy evaluation as ``huggingface_sb3`` writes it) and the text (``source``: the repo id or folder
    the commands load)."""
    hub = _require("huggingface_hub")
    algorithm, env_id = config["algorithm"], config["env"]["env_id"]
    short = algorithm.removesuffix("Module")
    evaluation = config.get("evaluation")
    results = []
    if evaluation is not None:
        value = PretrainedEvaluation(*(evaluation[name] for name in PretrainedEvaluation._fields)).mean_reward
        results = [
            hub.EvalResult(
                task_type="reinforcement-learning",
                task_name="reinforcement-learning",
                dataset_type=env_id,
                dataset_name=env_id,
                metric_type="mean_reward",
                metric_name="mean_reward",
                metric_value=value,
                verified=False,
            )
        ]
    data = hub.ModelCardData(
        library_name=LIBRARY_NAME,
        tags=["reinforcement-learning", "deep-reinforcement-learning", env_id, short, LIBRARY_NAME],
        model_name=short,
        eval_results=results or None,
    )
    lines = [
        "---",
        data.to_yaml(),
        "---",
        "",
        f"# {short} agent playing {env_id}",
        "",
        f"A **{short}** agent (`rl_lightning.{algorithm}`) trained on **{env_id}** for {config['env_steps']:,} env "
        "steps with rl_lightning (reinforcement learning as ordinary PyTorch Lightning).",
        "",
        "## Evaluation",
        "",
    ]
    play = f"python scripts/enjoy.py --from_pretrained {source}"
    if evaluation is not None:
        returns = ", ".join(f"{value:.1f}" for value in evaluation["returns"])
        play += (
            f" --episodes {evaluation['episodes']} --seed {evaluation['seed']}"
            f" --max_episode_steps {evaluation['max_episode_steps']}"
        )
        lines += [
            f"Greedy policy, {evaluation['episodes']} episodes one after another on one env seeded "
            f"{evaluation['seed']}: mean return **{value}** (returns {returns}).",
            "",
            "Reproduce it (it prints the same returns):",
        ]
    else:
        lines += ["Not evaluated. Play it:"]
    lines += ["", "```bash", play, "```", ""]
    if VIDEO_NAME in files:
        lines += ["## Video", "", f'<video src="{VIDEO_NAME}" controls autoplay loop></video>', ""]
    lines += [
        "## Usage",
        "",
        "```python",
        f"from rl_lightning import {algorithm}",
        "",
        f'module = {algorithm}.from_pretrained("{source}")  # reads config.json and model.safetensors only',
        "actions = module.act(obs, greedy=True)",
        "```",
        "",
    ]
    if EXPORT_NAMES["onnx"] in files or EXPORT_NAMES["pt2"] in files:
        lines += ["Without rl_lightning (observations `(batch, *obs_shape)` in, greedy actions out):", "", "```python"]
        if EXPORT_NAMES["pt2"] in files:
            lines += ["import torch", "", 'policy = torch.export.load("policy.pt2").module()', "actions = policy(obs)"]
        if EXPORT_NAMES["onnx"] in files:
            lines += [""] if EXPORT_NAMES["pt2"] in files else []
            lines += [
                "import onnxruntime",
                "",
                'session = onnxruntime.InferenceSession("policy.onnx")',
                'actions = session.run(None, {"obs": obs})[0]',
            ]
        lines += ["```", ""]
    hyperparameters = json.dumps(config["hyperparameters"], indent=2)
    lines += ["## Hyper-parameters", "", "```json", hyperparameters, "```", "", "## Files", ""]
    lines += [f"- `{name}`" for name in files]
    return "\n".join(lines) + "\n"


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
        trust_remote_code: the folder is yours: allow any class path in its hyper-parameters.
        **hyperparameters: replace the folder's (yours: not checked against the allow-list), e.g. ``env_id`` to play
            on another env with the same spaces.

    Raises:
        ValueError: the folder is not a pretrained folder of ``module_class``'s algorithm, its env or spaces are not
            the ones the module is built with, or its weights do not fit (each message names what differs).
    """
    from rl_lightning import algos

    check_bool("trust_remote_code", trust_remote_code)
    directory = _resolve(source, revision, token, cache_dir)
    where = f"the pretrained folder {source}"
    config = _read_config(directory / CONFIG_NAME, where)
    algorithm = config["algorithm"]
    classes = {cls.__name__: cls for cls in algos.ALGORITHMS}
    if module_class is None or module_class is algos.RLModule:  # the folder says which
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
    if not trust_remote_code:
        check_file_hyperparameters({k: v for k, v in saved.items() if k not in hyperparameters}, where)
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
    _load_weights(module, directory / WEIGHTS_NAME, where)
    return module.eval()


def _resolve(source: str | Path, revision: str | None, token: str | bool | None, cache_dir: Any) -> Path:
    """A local folder as it is; else a repo id, downloaded (only :data:`FILES_TO_LOAD`)."""
    path = Path(source).expanduser()
    if path.is_dir():
        return path
    text = str(source)
    parts = text.split("/")
    if isinstance(source, Path) or len(parts) > 2 or not all(parts) or text.startswith((".", "~")) or "\\" in text:
        raise FileNotFoundError(f"{text} is not a directory (nor a Hub repo id such as 'user/ppo-CartPole-v1')")
    hub = _require("huggingface_hub")
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


def _read_config(path: Path, where: str) -> dict[str, Any]:
    if not path.is_file():
        raise FileNotFoundError(f"{where} has no {CONFIG_NAME}: not a folder save_pretrained wrote")
    try:
        config = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{where}: {CONFIG_NAME} is not JSON: {error}") from error
    if not isinstance(config, dict) or config.get("library") != LIBRARY_NAME:
        raise ValueError(f"{where}: {CONFIG_NAME} is not an rl_lightning config (its 'library' is not 'rl_lightning')")
    version = config.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ValueError(
            f"{where}: {CONFIG_NAME} has format_version {version!r}; this rl_lightning reads up to {FORMAT_VERSION} "
            "(upgrade rl_lightning)"
        )
    env = config.get("env")
    if not (
        isinstance(config.get("algorithm"), str)
        and isinstance(config.get("hyperparameters"), dict)
        and isinstance(env, dict)
        and all(key in env for key in ("env_id", "observation_space", "action_space"))
    ):
        raise ValueError(
            f"{where}: {CONFIG_NAME} lacks 'algorithm', 'hyperparameters' or the env spec (env_id, observation_space, "
            "action_space)"
        )
    return config


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


def _load_weights(module: RLModule, path: Path, where: str) -> None:
    safetensors_torch = _require("safetensors.torch")
    if not path.is_file():
        raise FileNotFoundError(
            f"{where} has no {WEIGHTS_NAME}: rl_lightning loads weights from safetensors only (never a pickle: "
            ".pt, .bin, .pkl files are not read)"
        )
    try:
        weights = safetensors_torch.load_file(str(path), device="cpu")
    except Exception as error:  # safetensors' own error types for a truncated or foreign file
        raise ValueError(f"{where}: {WEIGHTS_NAME} is not a safetensors file: {error}") from error
    state = module.state_dict()
    only_saved, only_own = sorted(set(weights) - set(state)), sorted(set(state) - set(weights))
    if only_saved or only_own:
        raise ValueError(
            f"{where}: its weights are not this {module.algorithm_name()}'s network: only in {WEIGHTS_NAME}: "
            f"{only_saved[:5] or 'none'}, only in the module: {only_own[:5] or 'none'}"
        )
    for name in state:  # in the module's order: the first layer that differs is named
        tensor = weights[name]
        if tuple(tensor.shape) != tuple(state[name].shape):
            raise ValueError(
                f"{where}: {WEIGHTS_NAME}'s {name} has shape {tuple(tensor.shape)} but the module built from its "
                f"hyper-parameters has {tuple(state[name].shape)}"
            )
    module.load_state_dict(weights, strict=True)


def load_checkpoint(ckpt_path: str | Path, env_id: str | None = None, trust_remote_code: bool = False) -> RLModule:
    """The module saved in the Lightning checkpoint ``ckpt_path`` with the class that saved it (read with
    ``weights_only=True``, its hyper-parameters checked against ``rl_lightning.trust``'s allow-list), on the CPU,
    in eval mode; ``env_id`` plays it on another env with the same spaces."""
    from rl_lightning import algos
    from rl_lightning.checkpoints import CHECKPOINT_KEY, load_checkpoint_file

    payload = load_checkpoint_file(ckpt_path).get(CHECKPOINT_KEY) or {}
    algorithm = payload.get("algorithm")
    classes = {cls.__name__: cls for cls in algos.ALGORITHMS}
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
    one commit with ``huggingface_hub.HfApi``; returns its ``CommitInfo``. The token: ``token``, else
    ``HF_TOKEN`` or ``hf auth login``'s."""
    hub = _require("huggingface_hub")
    check_str("repo_id", repo_id)
    directory = Path(directory)
    config = _read_config(directory / CONFIG_NAME, f"the pretrained folder {directory}")
    if not (directory / WEIGHTS_NAME).is_file():
        raise FileNotFoundError(f"{directory} has no {WEIGHTS_NAME}: write it with save_pretrained first")
    api = hub.HfApi(token=token)
    api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
    message = commit_message or f"{config['algorithm'].removesuffix('Module')} on {config['env']['env_id']}"
    return api.upload_folder(
        repo_id=repo_id, folder_path=str(directory), commit_message=message, revision=revision, repo_type="model"
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

    check_str("repo_id", repo_id)
    with contextlib.ExitStack() as stack:
        directory = (
            Path(local_dir) if local_dir is not None else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        )
        save_pretrained(module, directory, repo_id=repo_id, **save_options)
        return push_folder(
            directory, repo_id, private=private, token=token, commit_message=commit_message, revision=revision
        )
