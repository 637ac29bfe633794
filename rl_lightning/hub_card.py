"""What a pretrained folder shows (``rl_lightning.hub``): the greedy evaluation, the video of the greedy policy and
the model card ``README.md`` in the Hub's format."""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from rl_lightning._checks import check_int, check_seed
from rl_lightning.hub_files import EXPORT_NAMES, LIBRARY_NAME, VIDEO_NAME, require

if TYPE_CHECKING:  # the protocol, not rl_lightning.algos.base: the modules' sharing methods import this module
    from rl_lightning.protocols import RLModuleProtocol as RLModule


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
    drawn from the observations (native envs) or rendered (gymnasium's), each frame encoded as it is played (none
    held in memory); None, with a warning, where the env can do neither or the renderer fails."""
    from rl_lightning.playing import first_env_frame, play_greedy
    from rl_lightning.video import Mp4Encoder

    check_int("num_steps", num_steps, 1)
    envs = module.make_envs(1, seed, render=True)
    try:
        if not (envs.can_draw or envs.can_render):
            raise NotImplementedError(f"{type(envs).__name__} can neither draw its observations nor render")
        with Mp4Encoder(envs.render_fps) as video:
            frame = lambda obs: video.append(first_env_frame(envs, obs))  # noqa: E731
            play_greedy(module.greedy_actor(), envs, episodes_per_env=None, num_steps=num_steps, frame=frame)
    except (NotImplementedError, RuntimeError, OSError) as error:  # a renderer's or an encoder's own failure
        warnings.warn(f"no video of {module.hparams.env_id}: {type(error).__name__}: {error}", stacklevel=2)
        return None
    finally:
        envs.close()
    path = Path(path)
    path.write_bytes(video.bytes)
    return path


# -- the model card --------------------------------------------------------------------------------------------


def model_card(config: Mapping[str, Any], source: str, files: Sequence[str]) -> str:
    """The ``README.md`` of a pretrained folder: the Hub's front matter (``library_name``, tags, a ``model-index``
    holding the greedy evaluation as ``huggingface_sb3`` writes it) and the text (``source``: the repo id or folder
    the commands load)."""
    hub = require("huggingface_hub")
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
        space = config["env"].get("policy_observation_space", config["env"]["observation_space"])
        keys = list(space["spaces"]) if space.get("type") == "Dict" else None  # one input per key, in order
        inputs = "observations `(batch, *obs_shape)`" if keys is None else f"one input per key ({', '.join(keys)})"
        lines += [f"Without rl_lightning ({inputs} in, greedy actions out):", "", "```python"]
        if EXPORT_NAMES["pt2"] in files:
            call = "obs" if keys is None else ", ".join(f'obs["{key}"]' for key in keys)
            lines += [
                "import torch",
                "",
                'policy = torch.export.load("policy.pt2").module()',
                f"actions = policy({call})",
            ]
        if EXPORT_NAMES["onnx"] in files:
            feed = '{"obs": obs}' if keys is None else "{" + ", ".join(f'"{key}": obs["{key}"]' for key in keys) + "}"
            lines += [""] if EXPORT_NAMES["pt2"] in files else []
            lines += [
                "import onnxruntime",
                "",
                'session = onnxruntime.InferenceSession("policy.onnx")',
                f"actions = session.run(None, {feed})[0]",
            ]
        lines += ["```", ""]
    hyperparameters = json.dumps(config["hyperparameters"], indent=2)
    lines += ["## Hyper-parameters", "", "```json", hyperparameters, "```", "", "## Files", ""]
    lines += [f"- `{name}`" for name in files]
    return "\n".join(lines) + "\n"
