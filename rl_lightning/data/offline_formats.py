"""Offline datasets on disk: the readers and writers behind :mod:`rl_lightning.data.offline`, and the recorder of
new ones (:func:`record_episodes`, behind ``scripts/record_dataset.py``).

Every reader returns plain numpy arrays by name (``obs``, ``actions``, ``rewards``, ``terminated``, ``truncated``,
``next_obs``, one row per transition) and the dataset's gymnasium spaces where the file states them (Minari), else
None. Three layouts are read:

- **Minari** (a dataset id under ``MINARI_DATASETS_PATH``, or a dataset's folder): per episode, ``observations`` has
  one more entry than ``actions`` (the final observation), so transition t is ``(obs[t], actions[t], rewards[t],
  terminations[t], truncations[t], obs[t + 1])``. Its ``metadata.json`` must state both spaces: without them Minari
  would build the env from the stored env spec, which runs code the file names, so such a dataset is refused.
- **rows** (``.npz``, ``.h5`` / ``.hdf5``): arrays ``observations``, ``actions``, ``rewards``, ``terminations``,
  ``truncations`` of one row per transition, and optionally ``next_observations``. Without it the next observation
  is the following row within an episode; a terminated row's is its own observation (a terminal state's successor
  never enters a TD target); the last row of an episode that ends truncated (or that the file cuts off) has no next
  observation and is **dropped**, the row before it then marked truncated (the episode's return misses that last
  reward). ``.npz`` is read with ``allow_pickle=False``.

Nothing in a dataset file is executed: no pickle, and Minari's env spec stays text.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from rl_lightning._checks import check_float, check_int, check_seed
from rl_lightning.envs.base import VectorEnv

#: The array names of the row layout, and the names the readers give them.
ROW_NAMES = {
    "observations": "obs",
    "actions": "actions",
    "rewards": "rewards",
    "terminations": "terminated",
    "truncations": "truncated",
}
NEXT_OBSERVATIONS = "next_observations"
#: File suffixes read as the row layout.
NPZ_SUFFIXES, HDF5_SUFFIXES = (".npz",), (".h5", ".hdf5")
_INSTALL = 'pip install "rl_lightning[offline]"'

Arrays = dict[str, np.ndarray]


def require(name: str) -> Any:
    """Import the optional package ``name`` (``minari`` or ``h5py``), or an ``ImportError`` saying how to install it."""
    try:
        return __import__(name)
    except ImportError as error:
        raise ImportError(f"offline datasets in this format need the {name} package: {_INSTALL}") from error


# -- Minari ------------------------------------------------------------------------------------------------------


def minari_data_folder(path: str | Path) -> Path | None:
    """The folder holding ``metadata.json`` of the Minari dataset at ``path`` (the dataset's folder or its ``data``
    folder), or None where ``path`` is no Minari dataset."""
    path = Path(path)
    for folder in (path, path / "data"):
        if (folder / "metadata.json").is_file():
            return folder
    return None


def minari_id_folder(dataset_id: str, download: bool) -> Path:
    """The data folder of the Minari dataset ``dataset_id`` under Minari's root (``MINARI_DATASETS_PATH``), downloaded
    first if ``download`` and missing; a ``FileNotFoundError`` where it is not there."""
    minari = require("minari")
    from minari.storage.datasets_root_dir import get_dataset_path

    folder = Path(get_dataset_path(dataset_id)) / "data"
    if not folder.is_dir() and download:
        minari.download_dataset(dataset_id)
    if not folder.is_dir():
        raise FileNotFoundError(
            f"no Minari dataset {dataset_id!r} under the Minari root {get_dataset_path()} (MINARI_DATASETS_PATH): "
            "record one (scripts/record_dataset.py), or pass download=True to fetch it"
        )
    return folder


def read_minari(folder: str | Path) -> tuple[Arrays, gym.Space, gym.Space]:
    """The transitions of the Minari dataset in ``folder`` (the dataset's folder or its ``data`` folder) and its
    spaces."""
    minari = require("minari")
    data = minari_data_folder(folder)
    if data is None:
        raise FileNotFoundError(f"{folder} holds no Minari dataset (no metadata.json in it or in its data folder)")
    metadata = json.loads((data / "metadata.json").read_text())
    missing = [key for key in ("observation_space", "action_space") if key not in metadata]
    if missing:  # Minari would gym.make the stored env spec to find them: code named by a file
        raise ValueError(
            f"the Minari dataset in {data} does not state its {' and '.join(missing)} in metadata.json; rl_lightning "
            "does not build the env its spec names to find them"
        )
    dataset = minari.MinariDataset(data)
    obs_space, action_space = dataset.observation_space, dataset.action_space
    check_spaces(obs_space, action_space, str(data))
    parts: dict[str, list[np.ndarray]] = {name: [] for name in ("obs", "actions", "rewards", "terminated")}
    parts.update(truncated=[], next_obs=[])
    for episode in dataset.iterate_episodes():
        observations, steps = np.asarray(episode.observations), len(episode.rewards)
        if len(observations) != steps + 1 or len(episode.actions) != steps:
            raise ValueError(
                f"episode {episode.id} of {data} has {len(observations)} observations and {len(episode.actions)} "
                f"actions for {steps} rewards; Minari stores one observation more than steps"
            )
        parts["obs"].append(observations[:-1])
        parts["next_obs"].append(observations[1:])
        parts["actions"].append(np.asarray(episode.actions))
        parts["rewards"].append(np.asarray(episode.rewards))
        parts["terminated"].append(np.asarray(episode.terminations))
        parts["truncated"].append(np.asarray(episode.truncations))
    if not parts["obs"]:
        raise ValueError(f"the Minari dataset in {data} holds no episodes")
    return {name: np.concatenate(values) for name, values in parts.items()}, obs_space, action_space


def check_spaces(obs_space: gym.Space, action_space: gym.Space, where: str) -> None:
    """Refuse the spaces offline datasets do not take yet: a ``Box`` observation and a ``Discrete`` or ``Box``
    action are read."""
    if isinstance(obs_space, gym.spaces.Dict):
        raise ValueError(f"{where} has Dict observations: offline datasets take Box observations only, for now")
    if not isinstance(obs_space, gym.spaces.Box):
        raise ValueError(f"{where} has observations of {obs_space!r}: offline datasets take Box observations")
    if not isinstance(action_space, (gym.spaces.Discrete, gym.spaces.Box)):
        raise ValueError(f"{where} has actions of {action_space!r}: offline datasets take Discrete or Box actions")


def write_minari(
    root: str | Path,
    dataset_id: str,
    episodes: Sequence[dict[str, np.ndarray]],
    obs_space: gym.Space,
    action_space: gym.Space,
    metadata: dict[str, Any] | None = None,
    episode_metadata: Sequence[dict[str, Any]] | None = None,
) -> Path:
    """Write ``episodes`` as the Minari dataset ``dataset_id`` under the Minari root ``root`` (Minari's own storage
    writer: ``minari.load_dataset(dataset_id)`` reads it with ``MINARI_DATASETS_PATH=root``); returns its folder.

    Args:
        episodes: one dict per episode of ``observations`` ``(T + 1, *obs_shape)`` (the final one last),
            ``actions`` ``(T, ...)``, ``rewards``, ``terminations``, ``truncations`` ``(T,)``.
        metadata: more of the dataset's metadata (``algorithm_name``, ``description``, ``env_id`` ...): plain values.
        episode_metadata: a plain dict per episode, stored with it (e.g. its noise level).
    """
    minari = require("minari")
    from minari.data_collector.episode_buffer import EpisodeBuffer
    from minari.dataset.minari_dataset import parse_dataset_id
    from minari.dataset.minari_storage import MinariStorage

    parse_dataset_id(dataset_id)  # Minari's own check of the id's form: a ValueError naming it
    folder = Path(root) / dataset_id
    if folder.exists():
        raise FileExistsError(f"{folder} exists: a Minari dataset is never overwritten; choose another id or root")
    folder.mkdir(parents=True)
    storage = MinariStorage.new(
        folder / "data", observation_space=obs_space, action_space=action_space, data_format="hdf5"
    )
    info = {"dataset_id": dataset_id, "minari_version": minari.__version__, **(metadata or {})}
    storage.update_metadata(info)
    buffers = [
        EpisodeBuffer(
            observations=episode["observations"],
            actions=episode["actions"],
            rewards=list(episode["rewards"]),
            terminations=list(episode["terminations"]),
            truncations=list(episode["truncations"]),
        )
        for episode in episodes
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        storage.update_episodes(buffers)
        if episode_metadata is not None:
            storage.update_episode_metadata(list(episode_metadata))
    return folder


# -- rows: .npz, .h5 / .hdf5 -------------------------------------------------------------------------------------


def read_rows(path: str | Path) -> Arrays:
    """The transitions of the row-layout file ``path`` (``.npz``, ``.h5`` or ``.hdf5``: module docstring)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if not path.is_file():
        raise FileNotFoundError(f"no dataset file {path}")
    if suffix in NPZ_SUFFIXES:
        with np.load(path, allow_pickle=False) as file:
            arrays = {name: file[name] for name in file.files}
    elif suffix in HDF5_SUFFIXES:
        h5py = require("h5py")
        with h5py.File(path, "r") as file:
            arrays = {name: file[name][()] for name in file if isinstance(file[name], h5py.Dataset)}
    else:
        raise ValueError(f"{path}: a dataset file must end in .npz, .h5 or .hdf5")
    missing = [name for name in ROW_NAMES if name not in arrays]
    if missing:
        raise ValueError(f"{path} lacks the arrays {missing} (it has {sorted(arrays)})")
    rows = {ROW_NAMES[name]: arrays[name] for name in ROW_NAMES}
    count = len(arrays["rewards"]) if arrays["rewards"].ndim else 0
    for name in (*ROW_NAMES, *([NEXT_OBSERVATIONS] if NEXT_OBSERVATIONS in arrays else [])):
        rows_in = len(arrays[name]) if arrays[name].ndim else 0
        if rows_in != count or count == 0:
            raise ValueError(f"{path}: {name} has {rows_in} rows, rewards has {count} (one row per transition)")
    for name in ("terminated", "truncated"):
        rows[name] = _as_flags(rows[name], f"{path}: {name}")
    if NEXT_OBSERVATIONS in arrays:
        rows["next_obs"] = arrays[NEXT_OBSERVATIONS]
        return rows
    return rows_without_next(rows)


def _as_flags(value: np.ndarray, what: str) -> np.ndarray:
    """``value`` as bool, where it holds only 0 and 1 (or is bool)."""
    if value.dtype == np.bool_:
        return value
    if not np.isin(value, (0, 1)).all():
        raise ValueError(f"{what} must hold booleans (or 0 / 1), got values {np.unique(value)[:5].tolist()}")
    return value.astype(np.bool_)


def rows_without_next(rows: Arrays) -> Arrays:
    """Add ``next_obs`` to rows that lack it: the following row within an episode, a terminated row's own obs;
    a row that ends its episode truncated (or ends the file unended) is dropped, the row before it marked truncated."""
    obs, terminated, truncated = rows["obs"], rows["terminated"], rows["truncated"]
    count = len(obs)
    next_obs = np.empty_like(obs)
    next_obs[:-1] = obs[1:]
    next_obs[terminated] = obs[terminated]  # never bootstrapped from: any value of the right shape does
    unknown = truncated & ~terminated
    if count:
        unknown[-1] |= not terminated[-1]
    keep = ~unknown
    # The row before a dropped one now ends its episode: a cut, not a terminal state.
    before = np.flatnonzero(unknown) - 1
    before = before[before >= 0]
    before = before[~(terminated | truncated)[before]]  # not itself an episode's end (then a one-step one went)
    truncated = truncated.copy()
    truncated[before] = True
    result = {name: value[keep] for name, value in rows.items() if name != "truncated"}
    result.update(truncated=truncated[keep], next_obs=next_obs[keep])
    return result


def write_rows(path: str | Path, rows: Arrays) -> Path:
    """Write transitions (the readers' names: ``obs`` ... ``next_obs``) to ``path`` in the row layout, with
    ``next_observations`` (``.npz``, or ``.h5`` / ``.hdf5`` with h5py)."""
    path = Path(path)
    arrays = {file_name: rows[name] for file_name, name in ROW_NAMES.items()}
    arrays[NEXT_OBSERVATIONS] = rows["next_obs"]
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() in NPZ_SUFFIXES:
        np.savez_compressed(path, **arrays)
    elif path.suffix.lower() in HDF5_SUFFIXES:
        h5py = require("h5py")
        with h5py.File(path, "w") as file:
            for name, value in arrays.items():
                file.create_dataset(name, data=value)
    else:
        raise ValueError(f"{path}: a dataset file must end in .npz, .h5 or .hdf5")
    return path


# -- recording ----------------------------------------------------------------------------------------------------


def split_evenly(total: int, parts: int) -> list[int]:
    """``total`` split over ``parts`` as evenly as ints go, the first parts one larger."""
    return [total // parts + (part < total % parts) for part in range(parts)]


@torch.no_grad()
def record_episodes(
    envs: VectorEnv,
    actor: Callable[[Tensor, Tensor], Tensor] | None,
    noise_levels: Sequence[float],
    num_episodes: int | None = None,
    num_steps: int | None = None,
    seed: int = 0,
) -> tuple[list[dict[str, np.ndarray]], list[float]]:
    """Play ``envs`` (one env copy) and keep its episodes in Minari's form; returns them and each one's noise level.

    The episodes (or steps) are split evenly over ``noise_levels``, played in their order: at level ``sigma`` a
    ``Box`` action gets Gaussian noise of std ``sigma`` times half the action range (``sigma`` itself where a bound is
    infinite), clipped to the bounds; a ``Discrete`` one is replaced by a uniformly random action with probability
    ``sigma``. With ``num_steps``, a level's last episode is cut where its steps run out: marked truncated, with its
    true last observation.

    Args:
        envs: the env, ``num_envs == 1``, a Box observation.
        actor: ``actor(obs, episode_start) -> actions`` (e.g. ``module.greedy_actor()``); None: uniformly random.
        noise_levels: the levels, each in [0, 1] for Discrete actions, >= 0 for Box ones.
        num_episodes, num_steps: how much to record: exactly one of the two.
        seed: seeds the env's reset and the noise.
    """
    if envs.num_envs != 1:
        raise ValueError(f"record_episodes plays one env copy, got num_envs={envs.num_envs}")
    if isinstance(envs.obs_shape, dict):
        raise ValueError("offline datasets take Box observations, for now; this env's are a Dict")
    if envs.action_kind not in ("discrete", "box"):
        raise ValueError(f"offline datasets take Discrete or Box actions, this env's are {envs.action_kind}")
    if (num_episodes is None) == (num_steps is None):
        raise ValueError("record_episodes needs exactly one of num_episodes and num_steps")
    levels = [
        check_float("noise", level, 0.0, 1.0 if envs.action_kind == "discrete" else math.inf) for level in noise_levels
    ]
    if not levels:
        raise ValueError("noise_levels must hold at least one level (0.0: the policy's own actions)")
    total = check_int("num_episodes" if num_steps is None else "num_steps", num_episodes or num_steps, len(levels))
    generator = torch.Generator().manual_seed(check_seed("seed", seed))
    if envs.action_kind == "box":
        low, high = envs.single_action_space.low, envs.single_action_space.high
        finite = np.isfinite(low) & np.isfinite(high)
        scale = torch.as_tensor(np.where(finite, (high - low) / 2, 1.0), dtype=torch.float32)
        low_t, high_t = torch.as_tensor(low, dtype=torch.float32), torch.as_tensor(high, dtype=torch.float32)
    episodes, noise_of = [], []
    obs, _ = envs.reset(seed=seed)
    start = torch.ones(1, dtype=torch.bool)
    for level, budget in zip(levels, split_evenly(total, len(levels)), strict=True):
        steps_left = budget if num_steps is not None else math.inf
        episodes_left = budget if num_episodes is not None else math.inf
        current: dict[str, list[Any]] = {name: [] for name in ("observations", "actions", "rewards", "terms", "truncs")}
        while episodes_left > 0 and steps_left > 0:
            if actor is None:
                actions = envs.random_actions(generator).cpu()
            else:
                actions = torch.as_tensor(actor(obs, start)).cpu()
            if envs.action_kind == "box":
                actions = actions.float()
                if level > 0:
                    actions = actions + level * scale * torch.randn(actions.shape, generator=generator)
                actions = torch.maximum(torch.minimum(actions, high_t), low_t)
            elif level > 0:
                explore = torch.rand(1, generator=generator) < level
                random = torch.randint(0, envs.num_actions, (1,), generator=generator)
                actions = torch.where(explore, random, actions.long())
            next_obs, reward, terminated, truncated, info = envs.step(actions.to(envs.device))
            steps_left -= 1
            done = bool(terminated[0] | truncated[0])
            cut = not done and steps_left == 0
            current["observations"].append(obs[0].cpu().numpy())
            current["actions"].append(actions[0].numpy())
            current["rewards"].append(float(reward[0]))
            current["terms"].append(bool(terminated[0]))
            current["truncs"].append(bool(truncated[0]) or cut)
            start = terminated | truncated
            if done or cut:
                last = info["final_observation"] if done else next_obs
                episodes.append(
                    {
                        "observations": np.stack([*current["observations"], last[0].cpu().numpy()]),
                        "actions": np.stack(current["actions"]),
                        "rewards": np.asarray(current["rewards"], dtype=np.float64),
                        "terminations": np.asarray(current["terms"]),
                        "truncations": np.asarray(current["truncs"]),
                    }
                )
                noise_of.append(level)
                current = {name: [] for name in current}
                episodes_left -= 1
            if cut:  # the env's episode goes on: start a fresh one for the next level
                next_obs, _ = envs.reset()
                start = torch.ones(1, dtype=torch.bool)
            obs = next_obs
    return episodes, noise_of


def episodes_to_rows(episodes: Sequence[dict[str, np.ndarray]]) -> Arrays:
    """Minari-form episodes as one row per transition (the readers' names, with ``next_obs``)."""
    return {
        "obs": np.concatenate([e["observations"][:-1] for e in episodes]),
        "actions": np.concatenate([e["actions"] for e in episodes]),
        "rewards": np.concatenate([e["rewards"] for e in episodes]),
        "terminated": np.concatenate([e["terminations"] for e in episodes]),
        "truncated": np.concatenate([e["truncations"] for e in episodes]),
        "next_obs": np.concatenate([e["observations"][1:] for e in episodes]),
    }
