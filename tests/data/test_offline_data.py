"""Offline datasets: the readers against each other and by hand, the sampler's batches, determinism and exact resume
through a Lightning checkpoint, fill_replay_buffer, and every error (rl_lightning.data.offline, offline_formats)."""

import json
import sys

import gymnasium as gym
import lightning as L
import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from rl_lightning import Transitions, TransitionsDataModule, fill_replay_buffer
from rl_lightning.data import FrameStackReplayBuffer, PrioritizedReplayBuffer, ReplayBuffer, ReplayBufferSamples
from rl_lightning.data.offline import episode_returns, load_transitions
from rl_lightning.data.offline_formats import read_rows, rows_without_next, write_minari, write_rows
from rl_lightning.envs import make_envs
from tests.quiet_trainer import quiet_trainer

OBS_SPACE = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
BOX_ACTIONS = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
#: (steps, how it ends) of the episodes of :func:`_episodes`.
EPISODES = [(3, "terminated"), (4, "truncated"), (2, "terminated")]


def _episodes(discrete: bool = False, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Minari-form episodes: ``observations`` one longer than ``actions``; rewards 1, 2, 3 ... over the dataset."""
    rng, reward = np.random.default_rng(seed), 1.0
    episodes = []
    for steps, end in EPISODES:
        actions = rng.integers(0, 3, steps) if discrete else rng.uniform(-1, 1, (steps, 2)).astype(np.float32)
        episodes.append(
            {
                "observations": rng.normal(size=(steps + 1, 3)).astype(np.float32),
                "actions": actions,
                "rewards": np.arange(reward, reward + steps),
                "terminations": np.arange(steps) == steps - 1 if end == "terminated" else np.zeros(steps, bool),
                "truncations": np.arange(steps) == steps - 1 if end == "truncated" else np.zeros(steps, bool),
            }
        )
        reward += steps
    return episodes


def _rows(episodes) -> dict[str, np.ndarray]:
    """The episodes as one row per transition, with next observations (the readers' names)."""
    return {
        "obs": np.concatenate([e["observations"][:-1] for e in episodes]),
        "actions": np.concatenate([e["actions"] for e in episodes]),
        "rewards": np.concatenate([e["rewards"] for e in episodes]),
        "terminated": np.concatenate([e["terminations"] for e in episodes]),
        "truncated": np.concatenate([e["truncations"] for e in episodes]),
        "next_obs": np.concatenate([e["observations"][1:] for e in episodes]),
    }


@pytest.fixture
def minari_root(tmp_path, monkeypatch):
    root = tmp_path / "minari"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    return root


def _assert_same(a: Transitions, b: Transitions) -> None:
    for name, x, y in zip(Transitions._fields, a, b, strict=True):
        assert x.dtype == y.dtype and torch.equal(x, y), name


# -- readers ------------------------------------------------------------------------------------------------------


def test_minari_episodes_become_transitions_by_hand(minari_root):
    episodes = _episodes()
    folder = write_minari(minari_root, "test/hand-v0", episodes, OBS_SPACE, BOX_ACTIONS)
    data, obs_space, action_space = load_transitions("test/hand-v0")
    assert data.num_transitions == 9 and obs_space == OBS_SPACE and action_space == BOX_ACTIONS
    # Episode 2's first step is row 3: its obs is observations[0], its next obs observations[1].
    assert torch.equal(data.obs[3], torch.from_numpy(episodes[1]["observations"][0]))
    assert torch.equal(data.next_obs[3], torch.from_numpy(episodes[1]["observations"][1]))
    # Episode 1 ends terminated at row 2 with its final observation as next obs; episode 2 truncated at row 6.
    assert torch.equal(data.next_obs[2], torch.from_numpy(episodes[0]["observations"][3]))
    assert data.terminated.tolist() == [False, False, True, False, False, False, False, False, True]
    assert data.truncated.tolist() == [False, False, False, False, False, False, True, False, False]
    assert torch.equal(data.next_obs[6], torch.from_numpy(episodes[1]["observations"][4]))  # the true last one
    assert data.rewards.tolist() == list(range(1, 10)) and data.rewards.dtype == torch.float32
    assert episode_returns(data).tolist() == [1 + 2 + 3, 4 + 5 + 6 + 7, 8 + 9]
    # The folder itself reads the same, and minari reads what we wrote.
    _assert_same(load_transitions(folder)[0], data)
    import minari

    dataset = minari.load_dataset("test/hand-v0")
    assert dataset.total_episodes == 3 and dataset.total_steps == 9


@pytest.mark.parametrize("suffix", [".npz", ".h5", ".hdf5"])
def test_row_files_read_as_minari_does(minari_root, tmp_path, suffix):
    episodes = _episodes(discrete=True)
    write_minari(minari_root, "test/rows-v0", episodes, OBS_SPACE, gym.spaces.Discrete(3))
    path = write_rows(tmp_path / f"data{suffix}", _rows(episodes))
    from_minari, from_rows = load_transitions("test/rows-v0")[0], load_transitions(path)[0]
    _assert_same(from_rows, from_minari)
    assert from_rows.actions.dtype == torch.int64 and from_rows.obs.dtype == torch.float32


def test_rows_without_next_observations_drop_truncated_ends():
    episodes = _episodes()
    rows = _rows(episodes)
    del rows["next_obs"]
    out = rows_without_next(rows)
    full = _rows(episodes)
    # Row 6 (episode 2's truncated last step) is dropped; row 5 now ends that episode truncated.
    kept = [0, 1, 2, 3, 4, 5, 7, 8]
    assert np.array_equal(out["rewards"], full["rewards"][kept])
    assert out["truncated"].tolist() == [False, False, False, False, False, True, False, False]
    assert out["terminated"].tolist() == [False, False, True, False, False, False, False, True]
    # Within an episode the next obs is the following row; a terminated row's is its own obs (never bootstrapped).
    assert np.array_equal(out["next_obs"][:2], full["obs"][1:3])
    assert np.array_equal(out["next_obs"][5], full["obs"][6])
    assert np.array_equal(out["next_obs"][2], full["obs"][2])


def test_rows_without_next_drop_the_unended_last_row(tmp_path):
    rows = _rows(_episodes())
    np.savez(
        tmp_path / "cut.npz",
        observations=rows["obs"][:8],
        actions=rows["actions"][:8],
        rewards=rows["rewards"][:8],
        terminations=rows["terminated"][:8].astype(np.int8),  # 0 / 1 flags are read as bool
        truncations=rows["truncated"][:8],
    )
    out = read_rows(tmp_path / "cut.npz")
    # Row 6 ends episode 2 truncated, row 7 (episode 3's first) is cut off by the file: both go.
    assert out["rewards"].tolist() == [1, 2, 3, 4, 5, 6]
    assert out["truncated"].tolist() == [False] * 5 + [True]
    data = load_transitions(tmp_path / "cut.npz")[0]
    assert episode_returns(data).tolist() == [6, 4 + 5 + 6]


def test_inferred_spaces_and_uint8_images(tmp_path):
    images = np.random.default_rng(0).integers(0, 256, (5, 2, 4, 4), dtype=np.uint8)
    path = tmp_path / "images.npz"
    np.savez(
        path,
        observations=images,
        next_observations=images[::-1],
        actions=np.array([[0.5, -2.0], [1.5, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]], np.float64),
        rewards=np.ones(5),
        terminations=np.array([0, 0, 0, 0, 1]),
        truncations=np.zeros(5, bool),
    )
    module = TransitionsDataModule(path, batch_size=3, steps_per_epoch=1)
    assert module.transitions.obs.dtype == torch.uint8 and module.transitions.actions.dtype == torch.float32
    assert module.observation_space == gym.spaces.Box(0, 255, (2, 4, 4), np.uint8)
    assert module.action_space.low.tolist() == [0.0, -2.0] and module.action_space.high.tolist() == [1.5, 0.0]
    batch = next(iter(module.train_dataloader()))
    assert batch.obs.dtype == torch.uint8 and batch.obs.shape == (3, 2, 4, 4)


# -- the sampler --------------------------------------------------------------------------------------------------


def _transitions(count: int = 50) -> Transitions:
    return Transitions(
        torch.arange(count, dtype=torch.float32).unsqueeze(1).repeat(1, 3),
        torch.arange(count) % 3,
        torch.arange(count, dtype=torch.float32),
        torch.arange(count) % 7 == 6,
        torch.zeros(count, dtype=torch.bool),
        torch.arange(count, dtype=torch.float32).unsqueeze(1).repeat(1, 3) + 0.5,
    )


def _draw(module: TransitionsDataModule, count: int) -> list[ReplayBufferSamples]:
    loader = iter(module.train_dataloader())
    return [next(loader) for _ in range(count)]


def test_batches_are_rows_of_the_dataset_with_their_dtypes_and_shapes():
    data = _transitions()
    batches = _draw(TransitionsDataModule(data, batch_size=8, steps_per_epoch=5), 5)
    for batch in batches:
        assert type(batch) is ReplayBufferSamples
        assert batch.obs.shape == (8, 3) and batch.obs.dtype == torch.float32
        assert batch.actions.shape == (8,) and batch.actions.dtype == torch.int64
        assert batch.rewards.dtype == torch.float32 and batch.terminated.dtype == torch.bool
        assert batch.discounts is None and batch.weights is None and batch.indices is None
        rows = batch.rewards.long()  # each field from the same row
        assert torch.equal(batch.obs[:, 0], batch.rewards) and torch.equal(batch.next_obs[:, 2], batch.rewards + 0.5)
        assert torch.equal(batch.actions, rows % 3) and torch.equal(batch.terminated, rows % 7 == 6)
    rows = torch.cat([b.rewards for b in batches]).long()
    assert len(set(rows.tolist())) > 20  # 40 draws with replacement over 50 rows


def test_sampler_is_seeded():
    data = _transitions()
    first = _draw(TransitionsDataModule(data, batch_size=16, seed=3), 4)
    again = _draw(TransitionsDataModule(data, batch_size=16, seed=3), 4)
    other = _draw(TransitionsDataModule(data, batch_size=16, seed=4), 4)
    assert all(torch.equal(a.rewards, b.rewards) for a, b in zip(first, again, strict=True))
    assert not torch.equal(first[0].rewards, other[0].rewards)
    # The stream goes on across epochs (a new iterator does not restart it).
    module = TransitionsDataModule(data, batch_size=16, steps_per_epoch=2, seed=3)
    epochs = list(module.train_dataloader()) + list(module.train_dataloader())
    assert [b.rewards.tolist() for b in epochs] == [b.rewards.tolist() for b in first]


class _Recorder(L.LightningModule):
    """A tiny module that records the rows of each batch it trains on (on its device, after Lightning's transfer)."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(3))
        self.seen: list[list[float]] = []

    def training_step(self, batch, batch_idx):
        assert type(batch) is ReplayBufferSamples and batch.discounts is None and batch.indices is None
        assert batch.obs.device == self.device
        self.seen.append(batch.rewards.tolist())
        return ((batch.obs - self.weight) ** 2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


@pytest.mark.parametrize("stop_at", [4, 6])  # inside an epoch of 3 batches, and at an epoch's end
def test_resumed_fit_draws_the_batches_of_an_uninterrupted_one(tmp_path, stop_at):
    data = _transitions()

    def fit(max_steps, ckpt_path=None, callbacks=()):
        module = _Recorder()
        trainer = quiet_trainer(max_steps=max_steps, callbacks=list(callbacks), enable_checkpointing=bool(callbacks))
        datamodule = TransitionsDataModule(data, batch_size=4, steps_per_epoch=3, seed=11)
        trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path)
        return module.seen

    whole = fit(9)
    assert len(whole) == 9
    checkpoint = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=stop_at, save_top_k=-1)
    first = fit(stop_at, callbacks=[checkpoint])
    (saved,) = list(tmp_path.glob(f"*step={stop_at}.ckpt"))
    assert torch.load(saved, weights_only=False)["TransitionsDataModule"]["batches_drawn"] == stop_at
    rest = fit(9, ckpt_path=str(saved), callbacks=[checkpoint])
    assert first + rest == whole


# -- fill_replay_buffer -------------------------------------------------------------------------------------------


def test_fill_replay_buffer_inserts_every_row_once():
    data = _transitions(12)
    buffer = ReplayBuffer(100, (3,), num_envs=1, action_shape=())
    assert fill_replay_buffer(buffer, data) == 12 and buffer.size == 12
    assert buffer.rewards[:12].tolist() == list(range(12))
    assert torch.equal(buffer.next_obs[:12], data.next_obs) and torch.equal(buffer.actions[:12], data.actions)


def test_fill_replay_buffer_keeps_the_newest_whole_adds():
    data = _transitions(23)
    buffer = ReplayBuffer(10, (3,), num_envs=4, action_shape=())
    assert fill_replay_buffer(buffer, data) == 8  # min(23, 10) rounded down to whole adds of 4 envs
    assert sorted(buffer.rewards[:8].tolist()) == list(range(15, 23))
    # Env column e holds one contiguous stream: rows 15, 16 in column 0, 17, 18 in column 1 ...
    assert buffer.rewards[:8].tolist() == [15, 17, 19, 21, 16, 18, 20, 22]


def test_fill_n_step_buffer_cuts_chains_at_episode_ends_and_gaps():
    count = 10
    obs = torch.arange(count + 1, dtype=torch.float32).unsqueeze(1)
    next_obs = obs[1:].clone()
    next_obs[4] = 100.0  # row 4 is followed by a row that does not continue it (a gap in the data)
    terminated = torch.zeros(count, dtype=torch.bool)
    terminated[1] = True  # episode ends at row 1
    data = Transitions(obs[:-1], torch.zeros(count, 1), torch.ones(count), terminated, terminated & False, next_obs)
    buffer = ReplayBuffer(50, (1,), num_envs=1, action_shape=(1,), n_step=3, gamma=0.5)
    fill_replay_buffer(buffer, data)
    assert buffer._storage["dones"][:count].tolist() == [i in (1, 4, 9) for i in range(count)]
    sample = buffer._samples_at(torch.tensor([0, 1, 3, 5]))
    assert sample.rewards.tolist() == [1.5, 1.0, 1.5, 1.75]  # 0: cut at the end, 3: cut at the gap
    assert sample.next_obs[:, 0].tolist() == [2.0, 2.0, 100.0, 8.0]


def test_fill_prioritized_buffer_and_refusals():
    data = _transitions(6)
    prioritized = PrioritizedReplayBuffer(10, (3,), num_envs=2, action_shape=())
    assert fill_replay_buffer(prioritized, data) == 6 and prioritized.sample(4).weights is not None
    with pytest.raises(TypeError, match="fill_replay_buffer takes a ReplayBuffer"):
        fill_replay_buffer(object(), data)
    with pytest.raises(ValueError, match=r"actions are torch.int64 of shape \(\), the buffer stores torch.float32"):
        fill_replay_buffer(ReplayBuffer(10, (3,), 1, action_shape=(2,)), data)
    with pytest.raises(ValueError, match=r"observations are torch.float32 of shape \(3,\), the buffer stores"):
        fill_replay_buffer(ReplayBuffer(10, (4,), 1), data)
    with pytest.raises(ValueError, match="fill no add"):
        fill_replay_buffer(ReplayBuffer(10, (3,), 10), _transitions(6))
    with pytest.raises(TypeError, match="transitions must be a Transitions"):
        fill_replay_buffer(ReplayBuffer(10, (3,), 1), tuple(data))


def test_fill_refuses_a_frame_stack_buffer():
    buffer = FrameStackReplayBuffer(16, (4, 8, 8), num_envs=1)
    frames = torch.zeros(4, 4, 8, 8, dtype=torch.uint8)
    data = Transitions(
        frames, torch.zeros(4, dtype=torch.long), torch.zeros(4), *(torch.zeros(4, dtype=bool),) * 2, frames
    )
    with pytest.raises(TypeError, match="frame-stack buffer stores single frames"):
        fill_replay_buffer(buffer, data)


# -- check_against and errors -------------------------------------------------------------------------------------


def test_check_against_names_the_mismatch():
    data = _transitions()
    envs = make_envs("CartPole-v1", 2, seed=0)  # obs (4,), Discrete(2)
    with pytest.raises(ValueError, match=r"observations are torch.float32 of shape \(3,\), the env's torch.float32"):
        data.check_against(envs)
    spaces = (gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Discrete(2))
    with pytest.raises(ValueError, match="actions run from 0 to 2, outside the env's Discrete\\(2\\)"):
        data.check_against(spaces)
    assert data.check_against((spaces[0], gym.spaces.Discrete(3))) is data
    with pytest.raises(ValueError, match="Box actions float32 of shape \\(1,\\)"):
        data.check_against((spaces[0], gym.spaces.Box(-1, 1, (1,), np.float32)))
    with pytest.raises(ValueError, match=r"the env's torch\.uint8"):
        data.check_against((gym.spaces.Box(0, 255, (3,), np.uint8), gym.spaces.Discrete(3)))
    with pytest.raises(TypeError, match="spaces must be a VectorEnv"):
        data.check_against("CartPole-v1")


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"dataset": 3}, TypeError, "dataset must be a Minari dataset id, a path"),
        ({"dataset": ""}, TypeError, "dataset must be a Minari dataset id"),
        ({"batch_size": 0}, ValueError, "batch_size must be >= 1"),
        ({"batch_size": 2.0}, TypeError, "batch_size must be an int"),
        ({"steps_per_epoch": 0}, ValueError, "steps_per_epoch must be >= 1"),
        ({"seed": -1}, ValueError, "seed must be >= 0"),
        ({"download": "yes"}, TypeError, "download must be a bool"),
        ({"download": True}, ValueError, "download=True fetches a Minari dataset id"),
    ],
)
def test_datamodule_arguments_are_checked(kwargs, error, match):
    with pytest.raises(error, match=match):
        TransitionsDataModule(**{"dataset": _transitions(), **kwargs})


def test_dataset_errors(tmp_path, minari_root):
    with pytest.raises(FileNotFoundError, match="no Minari dataset 'test/absent-v0' under the Minari root"):
        TransitionsDataModule("test/absent-v0").setup()
    with pytest.raises(FileNotFoundError, match="no dataset file"):
        load_transitions(tmp_path / "absent.npz")
    (tmp_path / "data.csv").write_text("1,2")
    with pytest.raises(ValueError, match=r"must end in \.npz, \.h5 or \.hdf5"):
        load_transitions(tmp_path / "data.csv")
    np.savez(tmp_path / "partial.npz", observations=np.zeros((3, 2)), actions=np.zeros(3, int))
    with pytest.raises(ValueError, match=r"lacks the arrays \['rewards', 'terminations', 'truncations'\]"):
        load_transitions(tmp_path / "partial.npz")
    rows = {"observations": np.zeros((3, 2)), "actions": np.zeros(3, int), "rewards": np.zeros(2)}
    np.savez(tmp_path / "short.npz", terminations=np.ones(3), truncations=np.zeros(3), **rows)
    with pytest.raises(ValueError, match="observations has 3 rows, rewards has 2"):
        load_transitions(tmp_path / "short.npz")
    rows["rewards"] = np.zeros(3)
    np.savez(tmp_path / "flags.npz", terminations=np.full(3, 2), truncations=np.zeros(3), **rows)
    with pytest.raises(ValueError, match="terminated must hold booleans"):
        load_transitions(tmp_path / "flags.npz")
    np.savez(
        tmp_path / "pickled.npz",
        terminations=np.ones(3),
        truncations=np.zeros(3),
        **{**rows, "actions": np.array([{}, {}, {}])},
    )
    with pytest.raises(ValueError, match="allow_pickle"):  # numpy refuses: nothing is unpickled
        load_transitions(tmp_path / "pickled.npz")
    np.savez(
        tmp_path / "strings.npz",
        terminations=np.ones(3),
        truncations=np.zeros(3),
        **{**rows, "actions": np.array(["a"] * 3)},
    )
    with pytest.raises(ValueError, match="actions must be integer \\(Discrete\\) or floating \\(Box\\)"):
        load_transitions(tmp_path / "strings.npz")
    np.savez(
        tmp_path / "nan.npz",
        terminations=np.ones(3),
        truncations=np.zeros(3),
        **{**rows, "rewards": np.full(3, np.nan)},
    )
    with pytest.raises(ValueError, match="rewards hold NaN"):
        load_transitions(tmp_path / "nan.npz")


def test_minari_datasets_that_are_refused(minari_root):
    dict_space = gym.spaces.Dict({"x": OBS_SPACE})
    episode = {key: value for key, value in _episodes()[0].items()}
    episode["observations"] = {"x": episode["observations"]}
    write_minari(minari_root, "test/dict-v0", [episode], dict_space, BOX_ACTIONS)
    with pytest.raises(ValueError, match="Dict observations: offline datasets take Box observations only"):
        load_transitions("test/dict-v0")
    folder = write_minari(minari_root, "test/nospace-v0", _episodes()[:1], OBS_SPACE, BOX_ACTIONS)
    metadata_file = folder / "data" / "metadata.json"
    metadata = json.loads(metadata_file.read_text())
    del metadata["observation_space"]
    metadata["env_spec"] = json.dumps({"id": "Evil-v0", "entry_point": "os:system"})
    metadata_file.write_text(json.dumps(metadata))
    with pytest.raises(ValueError, match=r"does not state its observation_space in metadata\.json"):
        load_transitions(folder)
    with pytest.raises(FileExistsError, match="never overwritten"):
        write_minari(minari_root, "test/nospace-v0", _episodes()[:1], OBS_SPACE, BOX_ACTIONS)


def test_missing_minari_says_how_to_install(minari_root, monkeypatch):
    write_minari(minari_root, "test/there-v0", _episodes()[:1], OBS_SPACE, BOX_ACTIONS)
    monkeypatch.setitem(sys.modules, "minari", None)
    with pytest.raises(ImportError, match=r'pip install "rl_lightning\[offline\]"'):
        load_transitions("test/there-v0")
