"""Offline RL datasets: a dataset as :class:`Transitions` tensors, :class:`TransitionsDataModule` (uniform batches of
it for a Lightning fit, resumed exactly) and :func:`fill_replay_buffer` (a dataset into a replay buffer, for
offline-to-online). The file formats (Minari, ``.npz``, ``.h5``) are read in :mod:`rl_lightning.data.offline_formats`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import gymnasium as gym
import lightning as L
import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, IterableDataset

from rl_lightning._checks import check_bool, check_int, check_seed
from rl_lightning.data import offline_formats as formats
from rl_lightning.data.her import HindsightReplayBuffer
from rl_lightning.data.replay_buffer import ReplayBuffer, ReplayBufferSamples


class Transitions(NamedTuple):
    """A whole offline dataset, one row per transition ``(s_t, a_t, r_{t+1}, terminated, truncated, s_{t+1})``, on
    the CPU. ``terminated | truncated`` ends an episode; only ``terminated`` cuts a TD target's bootstrap."""

    obs: Tensor  # (N, *obs_shape) float32, or uint8 images
    actions: Tensor  # int64 (N,) for Discrete actions, float32 (N, *action_shape) for Box
    rewards: Tensor  # float32 (N,)
    terminated: Tensor  # bool (N,)
    truncated: Tensor  # bool (N,)
    next_obs: Tensor  # (N, *obs_shape): the true next observation (also where an episode was truncated)

    @property
    def num_transitions(self) -> int:
        """The number of transitions (``len`` is the tuple's: its 6 fields)."""
        return self.rewards.shape[0]

    def check_against(self, spaces: Any) -> Transitions:
        """Raise a ``ValueError`` naming the mismatch where these transitions do not fit ``spaces``: a VectorEnv or
        anything with ``single_observation_space`` / ``observation_space`` and the matching action space (a
        gymnasium env, a :class:`TransitionsDataModule`), or a pair ``(observation_space, action_space)``.
        Observation shape and dtype, action kind, shape and (Discrete) range are compared. Returns ``self``."""
        obs_space, action_space = _spaces_of(spaces)
        if not isinstance(obs_space, gym.spaces.Box):
            raise ValueError(f"the env's observation space is {obs_space!r}: offline datasets take Box observations")
        obs_shape, obs_dtype = tuple(self.obs.shape[1:]), self.obs.dtype
        want_dtype = torch.uint8 if obs_space.dtype == np.uint8 else torch.float32
        if obs_shape != tuple(obs_space.shape) or obs_dtype != want_dtype:
            raise ValueError(
                f"the dataset's observations are {obs_dtype} of shape {obs_shape}, the env's {want_dtype} of shape "
                f"{tuple(obs_space.shape)}"
            )
        if isinstance(action_space, gym.spaces.Discrete):
            if self.actions.dtype != torch.int64 or self.actions.dim() != 1:
                raise ValueError(
                    f"the env's actions are Discrete({action_space.n}), the dataset's are {self.actions.dtype} of "
                    f"shape {tuple(self.actions.shape[1:])} per transition (a Discrete action is an int64 index)"
                )
            if self.num_transitions and (int(self.actions.min()) < 0 or int(self.actions.max()) >= int(action_space.n)):
                raise ValueError(
                    f"the dataset's actions run from {int(self.actions.min())} to {int(self.actions.max())}, outside "
                    f"the env's Discrete({action_space.n})"
                )
        elif isinstance(action_space, gym.spaces.Box):
            if self.actions.dtype != torch.float32 or tuple(self.actions.shape[1:]) != tuple(action_space.shape):
                raise ValueError(
                    f"the dataset's actions are {self.actions.dtype} of shape {tuple(self.actions.shape[1:])}, the "
                    f"env's Box actions float32 of shape {tuple(action_space.shape)}"
                )
        else:
            raise ValueError(f"the env's action space is {action_space!r}: offline datasets take Discrete or Box")
        return self


def _spaces_of(spaces: Any) -> tuple[gym.Space, gym.Space]:
    if isinstance(spaces, tuple) and len(spaces) == 2:
        return spaces
    for obs_name, action_name in (
        ("single_observation_space", "single_action_space"),
        ("observation_space", "action_space"),
    ):
        if hasattr(spaces, obs_name) and hasattr(spaces, action_name):
            return getattr(spaces, obs_name), getattr(spaces, action_name)
    raise TypeError(
        "spaces must be a VectorEnv, a gymnasium env, a TransitionsDataModule or a pair (observation_space, "
        f"action_space), got {type(spaces).__name__}"
    )


def episode_returns(transitions: Transitions) -> Tensor:
    """The undiscounted return of each complete episode (rows up to and including a ``terminated | truncated`` one),
    in order; rows after the last end (an unfinished episode) count in none. float32 ``(num_episodes,)``."""
    if not isinstance(transitions, Transitions):
        raise TypeError(f"transitions must be a Transitions, got {type(transitions).__name__}")
    ends = (transitions.terminated | transitions.truncated).nonzero().squeeze(1)
    totals = torch.cumsum(transitions.rewards.double(), 0)
    at_ends = totals[ends]
    return torch.diff(at_ends, prepend=at_ends.new_zeros(1)).float()


def transitions_from_arrays(arrays: dict[str, np.ndarray], where: str) -> Transitions:
    """The checked :class:`Transitions` of a reader's arrays (``where`` names the source in errors): float
    observations become float32 (uint8 stays), integer actions of shape ``(N,)`` int64 indices, float ones float32."""
    obs, next_obs, actions = arrays["obs"], arrays["next_obs"], arrays["actions"]
    for name, value in ("observations", obs), ("next observations", next_obs):
        if value.dtype.kind == "O" or isinstance(value, dict):
            raise ValueError(f"{where}: {name} must be a numeric array (Dict observations are not taken, for now)")
        if value.dtype != np.uint8 and value.dtype.kind != "f":
            raise ValueError(f"{where}: {name} must be floating or uint8 (images), got {value.dtype}")
    if obs.shape != next_obs.shape or obs.dtype != next_obs.dtype:
        raise ValueError(
            f"{where}: next observations are {next_obs.dtype} {next_obs.shape}, observations {obs.dtype} {obs.shape}"
        )
    if obs.ndim < 2:
        raise ValueError(f"{where}: observations must be (N, *obs_shape) with obs_shape not empty, got {obs.shape}")
    if actions.dtype.kind in "iu":
        if actions.ndim != 1:
            raise ValueError(f"{where}: integer (Discrete) actions must have shape (N,), got {actions.shape}")
        action_tensor = torch.as_tensor(actions.astype(np.int64))
    elif actions.dtype.kind == "f":
        if actions.ndim < 2:
            raise ValueError(f"{where}: Box actions must have shape (N, *action_shape), got {actions.shape}")
        action_tensor = torch.as_tensor(actions.astype(np.float32))
    else:
        raise ValueError(f"{where}: actions must be integer (Discrete) or floating (Box), got {actions.dtype}")
    obs_dtype = np.uint8 if obs.dtype == np.uint8 else np.float32
    transitions = Transitions(
        torch.as_tensor(np.ascontiguousarray(obs, dtype=obs_dtype)),
        action_tensor,
        torch.as_tensor(np.asarray(arrays["rewards"], dtype=np.float32)).reshape(-1),
        torch.as_tensor(np.asarray(arrays["terminated"], dtype=np.bool_)).reshape(-1),
        torch.as_tensor(np.asarray(arrays["truncated"], dtype=np.bool_)).reshape(-1),
        torch.as_tensor(np.ascontiguousarray(next_obs, dtype=obs_dtype)),
    )
    _check_rows(transitions, where)
    return transitions


def _check_rows(transitions: Transitions, where: str) -> None:
    count = transitions.obs.shape[0]
    if count == 0:
        raise ValueError(f"{where} holds no transitions")
    for name, value in transitions._asdict().items():
        if value.shape[0] != count:
            raise ValueError(f"{where}: {name} has {value.shape[0]} rows, obs has {count}")
    if not bool(torch.isfinite(transitions.rewards).all()):
        raise ValueError(f"{where}: rewards hold NaN or infinite values")


def infer_spaces(transitions: Transitions) -> tuple[gym.spaces.Box, gym.spaces.Space]:
    """Spaces for data that states none: a Box observation (uint8 in [0, 255], else float32 unbounded), and
    ``Discrete(max + 1)`` for int64 actions or a float32 Box spanning the data's per-dimension min and max."""
    obs_shape = tuple(transitions.obs.shape[1:])
    if transitions.obs.dtype == torch.uint8:
        obs_space = gym.spaces.Box(0, 255, obs_shape, np.uint8)
    else:
        obs_space = gym.spaces.Box(-np.inf, np.inf, obs_shape, np.float32)
    if transitions.actions.dtype == torch.int64:
        return obs_space, gym.spaces.Discrete(int(transitions.actions.max()) + 1)
    low, high = transitions.actions.amin(0).numpy(), transitions.actions.amax(0).numpy()
    return obs_space, gym.spaces.Box(low, high, low.shape, np.float32)


def load_transitions(dataset: str | Path, download: bool = False) -> tuple[Transitions, gym.Space, gym.Space]:
    """Read ``dataset``: an existing path (a Minari dataset's folder, ``.npz``, ``.h5`` / ``.hdf5``), else a Minari
    dataset id under the Minari root (``download``: fetch it if missing). Returns the transitions and the
    dataset's spaces (Minari's, else :func:`infer_spaces`)."""
    path = Path(dataset)
    if path.exists():
        if path.is_dir():
            arrays, obs_space, action_space = formats.read_minari(path)
        else:
            arrays, obs_space, action_space = formats.read_rows(path), None, None
    elif path.suffix.lower() in (*formats.NPZ_SUFFIXES, *formats.HDF5_SUFFIXES):
        raise FileNotFoundError(f"no dataset file {path}")
    else:
        arrays, obs_space, action_space = formats.read_minari(formats.minari_id_folder(str(dataset), download))
    transitions = transitions_from_arrays(arrays, str(dataset))
    if obs_space is None:
        obs_space, action_space = infer_spaces(transitions)
    transitions.check_against((obs_space, action_space))
    return transitions, obs_space, action_space


class UniformBatches(IterableDataset):
    """``steps_per_epoch`` batches per epoch of ``batch_size`` transitions drawn uniformly with replacement from
    ``transitions`` with ``generator``, as :class:`ReplayBufferSamples` on the CPU. An endless stream cut into
    epochs: the generator's state alone says where it is, so a resumed run draws what an uninterrupted one would.
    Under DDP every rank draws the same ``(world_size, batch_size)`` indices and keeps its row: one state for all."""

    def __init__(
        self,
        transitions: Transitions,
        batch_size: int,
        steps_per_epoch: int,
        generator: torch.Generator,
        rank: int = 0,
        world_size: int = 1,
    ):
        super().__init__()
        self.transitions, self.batch_size, self.steps_per_epoch = transitions, batch_size, steps_per_epoch
        self.generator, self.rank, self.world_size = generator, rank, world_size
        self.batches_drawn = 0

    def __len__(self) -> int:
        # A length: Lightning then pulls each batch when it trains on it (no prefetch ahead of a checkpoint).
        return self.steps_per_epoch

    def __iter__(self) -> Iterator[ReplayBufferSamples]:
        for _ in range(self.steps_per_epoch):
            yield self.next_batch()

    def next_batch(self) -> ReplayBufferSamples:
        """The stream's next batch."""
        count = self.transitions.num_transitions
        rows = torch.randint(0, count, (self.world_size, self.batch_size), generator=self.generator)[self.rank]
        self.batches_drawn += 1
        data = self.transitions
        return ReplayBufferSamples(*(data[i].index_select(0, rows) for i in (0, 1, 2, 3, 5)))


class TransitionsDataModule(L.LightningDataModule):
    """An offline dataset for ``Trainer.fit``: ``steps_per_epoch`` batches per epoch of ``batch_size`` transitions
    drawn uniformly with replacement (:class:`ReplayBufferSamples` with ``discounts``, ``weights`` and ``indices``
    None, on the CPU: Lightning moves them to the module's device). Its ``state_dict`` (saved in Lightning's
    checkpoints) holds the sampler's generator, so a resumed fit draws the batches an uninterrupted one would.

    Args:
        dataset: a Minari dataset id (under ``MINARI_DATASETS_PATH``), a path (a Minari dataset's folder, ``.npz``,
            ``.h5`` / ``.hdf5``: :mod:`rl_lightning.data.offline_formats`) or :class:`Transitions`.
        batch_size: transitions per batch.
        steps_per_epoch: batches per Lightning epoch.
        seed: seed of the sampling generator.
        download: fetch a Minari id missing locally (in ``prepare_data``).
    """

    def __init__(
        self,
        dataset: str | Path | Transitions,
        batch_size: int = 256,
        steps_per_epoch: int = 1000,
        seed: int = 0,
        download: bool = False,
    ):
        super().__init__()
        if isinstance(dataset, Transitions):
            _check_rows(dataset, "dataset")
        elif isinstance(dataset, Path) or (isinstance(dataset, str) and dataset):
            dataset = str(dataset)
        else:
            raise TypeError(
                f"dataset must be a Minari dataset id, a path (folder, .npz, .h5, .hdf5) or Transitions, got "
                f"{type(dataset).__name__} {dataset!r}"
            )
        self.dataset = dataset
        self.batch_size = check_int("batch_size", batch_size, 1)
        self.steps_per_epoch = check_int("steps_per_epoch", steps_per_epoch, 1)
        self.seed = check_seed("seed", seed)
        self.download = check_bool("download", download)
        if download and isinstance(dataset, Transitions):
            raise ValueError("download=True fetches a Minari dataset id; dataset is Transitions already")
        self.generator = torch.Generator().manual_seed(self.seed)
        self.batches_drawn = 0
        self._loaded: tuple[Transitions, gym.Space, gym.Space] | None = None
        self._sampler: UniformBatches | None = None

    def prepare_data(self) -> None:
        """Download a Minari dataset id missing locally (with ``download=True``; once per node)."""
        if self.download and not Path(self.dataset).exists():
            formats.minari_id_folder(str(self.dataset), download=True)

    def setup(self, stage: str | None = None) -> None:
        """Load the dataset (once)."""
        if self._loaded is not None:
            return
        if isinstance(self.dataset, Transitions):
            self._loaded = (self.dataset, *infer_spaces(self.dataset))
            self.dataset.check_against(self._loaded[1:])
        else:
            self._loaded = load_transitions(self.dataset, self.download)

    @property
    def transitions(self) -> Transitions:
        """The loaded dataset (loaded on first use)."""
        self.setup()
        return self._loaded[0]  # type: ignore[index]

    @property
    def observation_space(self) -> gym.Space:
        """The dataset's observation space: Minari's metadata, else inferred from the data (:func:`infer_spaces`)."""
        self.setup()
        return self._loaded[1]  # type: ignore[index]

    @property
    def action_space(self) -> gym.Space:
        """The dataset's action space: Minari's metadata, else inferred from the data (:func:`infer_spaces`)."""
        self.setup()
        return self._loaded[2]  # type: ignore[index]

    def train_dataloader(self) -> DataLoader:
        trainer = getattr(self, "trainer", None)
        rank, world_size = (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)
        self._sampler = UniformBatches(
            self.transitions, self.batch_size, self.steps_per_epoch, self.generator, rank, world_size
        )
        self._sampler.batches_drawn = self.batches_drawn
        return _ResumableLoader(self._sampler)

    def _drawn(self) -> int:
        return self._sampler.batches_drawn if self._sampler is not None else self.batches_drawn

    def state_dict(self) -> dict[str, Any]:
        """The sampler's generator state and the batches drawn so far."""
        return {"generator": self.generator.get_state(), "batches_drawn": self._drawn(), "seed": self.seed}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved: the next batch drawn is the one after the last one saved."""
        self.generator.set_state(state_dict["generator"])
        self.batches_drawn = int(state_dict["batches_drawn"])
        if self._sampler is not None:
            self._sampler.batches_drawn = self.batches_drawn


class _ResumableLoader(DataLoader):
    """The sampler as built, one batch per item (no collation, no workers). Its state lives in the DataModule's
    ``state_dict``; it says it is resumable, so Lightning does not warn on a resume inside an epoch."""

    def __init__(self, sampler: UniformBatches):
        super().__init__(sampler, batch_size=None, num_workers=0, collate_fn=_as_built)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Nothing: the DataModule's state restores the sampler."""


def _as_built(batch: Any) -> Any:
    return batch


def fill_replay_buffer(buffer: ReplayBuffer, transitions: Transitions) -> int:
    """Insert ``transitions`` into ``buffer`` (offline-to-online) through its ``add``; returns how many went in.

    The buffer takes ``num_envs`` rows per ``add``: the dataset is laid out as ``num_envs`` contiguous streams,
    one per env's slot column, so an n-step chain (``num_envs`` slots apart) follows a stream; ``dones`` (for an
    n-step buffer) are the episodes' ends, plus every place the data is not contiguous (a next obs that is not the
    following obs) and each stream's last row, so no chain crosses two episodes. Only the newest
    ``min(len, buffer_size)`` rows, rounded down to a multiple of ``num_envs``, are inserted: a dataset larger than
    the buffer keeps its newest transitions, and up to ``num_envs - 1`` of the oldest are left out.

    A ``ReplayBuffer`` (uniform or prioritized, one-step or n-step) is taken; a frame-stack buffer (it rebuilds
    stacks from single frames) and a hindsight buffer (Dict observations) are refused.

    Args:
        buffer: the replay buffer, e.g. ``ReplayBuffer.for_env(envs, ...)``; its observation shape and dtype and its
            action shape must be the dataset's.
        transitions: the dataset (its rows in episode order, as read).
    """
    if not isinstance(transitions, Transitions):
        raise TypeError(f"transitions must be a Transitions, got {type(transitions).__name__}")
    if not isinstance(buffer, ReplayBuffer) or isinstance(buffer, HindsightReplayBuffer):
        raise TypeError(
            f"fill_replay_buffer takes a ReplayBuffer (or PrioritizedReplayBuffer), got {type(buffer).__name__}: a "
            "frame-stack buffer stores single frames and a hindsight buffer Dict observations, not whole observations"
        )
    if isinstance(buffer.obs_shape, dict):
        raise ValueError("the buffer stores Dict observations; offline datasets hold Box observations")
    num_envs = buffer.num_envs
    count = min(transitions.num_transitions, buffer.buffer_size) // num_envs * num_envs
    if count == 0:
        raise ValueError(
            f"the dataset's {transitions.num_transitions} transitions fill no add of the buffer's {num_envs} envs"
        )
    obs, actions, rewards, terminated, truncated, next_obs = (field[-count:] for field in transitions)
    expected = buffer._specs["actions"]
    if tuple(actions.shape[1:]) != tuple(expected[0]) or actions.dtype != expected[1]:
        raise ValueError(
            f"the dataset's actions are {actions.dtype} of shape {tuple(actions.shape[1:])}, the buffer stores "
            f"{expected[1]} of shape {tuple(expected[0])}"
        )
    if tuple(obs.shape[1:]) != tuple(buffer.obs_shape) or obs.dtype != buffer._specs["obs"][1]:
        raise ValueError(
            f"the dataset's observations are {obs.dtype} of shape {tuple(obs.shape[1:])}, the buffer stores "
            f"{buffer._specs['obs'][1]} of shape {tuple(buffer.obs_shape)}"
        )
    steps = count // num_envs
    dones = terminated | truncated
    dones[:-1] |= (next_obs[:-1] != obs[1:]).flatten(1).any(1)  # not contiguous: a cut
    columns = torch.arange(count).view(num_envs, steps)  # env e's stream: rows e * steps ... (e + 1) * steps - 1
    dones[columns[:, -1]] = True  # each stream's end: online data follows in that column
    device = buffer.device
    for step in range(steps):
        rows = columns[:, step]
        buffer.add(
            obs.index_select(0, rows).to(device),
            actions.index_select(0, rows).to(device),
            rewards.index_select(0, rows).to(device),
            terminated.index_select(0, rows).to(device),
            next_obs.index_select(0, rows).to(device),
            dones=dones.index_select(0, rows).to(device),
        )
    return count
