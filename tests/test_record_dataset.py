"""scripts/record_dataset.py records a checkpoint's policy (or a random one) with noise, in Minari's format (read back
by minari and by TransitionsDataModule) or as .npz."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch

from rl_lightning import DQNModule, SACModule, TransitionsDataModule

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("record_dataset", ROOT / "scripts" / "record_dataset.py")
record = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(record)


def _checkpoint(module: L.LightningModule, path: Path) -> Path:
    trainer = L.Trainer(max_steps=3, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(module)
    trainer.save_checkpoint(path)
    return path


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("record")
    torch.manual_seed(0)
    sac = SACModule(env_id="Pendulum-v1", num_envs=1, learning_starts=8, batch_size=8)
    dqn = DQNModule(env_id="CartPole-v1", num_envs=4, learning_starts=16, batch_size=16)
    return {"sac": _checkpoint(sac, root / "sac.ckpt"), "dqn": _checkpoint(dqn, root / "dqn.ckpt")}


@pytest.fixture
def minari_root(tmp_path, monkeypatch):
    root = tmp_path / "minari"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    return root


def _greedy(checkpoint: Path, obs: torch.Tensor) -> torch.Tensor:
    module = record.load_checkpoint(checkpoint)
    return torch.cat([module.greedy_actor()(row.unsqueeze(0)) for row in obs])


def test_sac_pendulum_episodes_at_two_noise_levels(checkpoints, minari_root):
    path, episodes, noise_of = record.record_dataset(
        "pendulum/sac-v0", minari_root, checkpoints["sac"], episodes=4, noise=[0.0, 0.3], seed=1
    )
    assert path == minari_root / "pendulum/sac-v0" and noise_of == [0.0, 0.0, 0.3, 0.3]
    assert [len(e["rewards"]) for e in episodes] == [200] * 4  # Pendulum's time limit: each ends truncated
    import minari

    dataset = minari.load_dataset("pendulum/sac-v0")
    assert dataset.total_episodes == 4 and dataset.total_steps == 800
    assert [m["noise"] for m in dataset.storage.get_episode_metadata(range(4))] == [0.0, 0.0, 0.3, 0.3]
    data = TransitionsDataModule("pendulum/sac-v0").transitions
    assert data.num_transitions == 800 and int(data.truncated.sum()) == 4 and not data.terminated.any()
    # Noise 0: the greedy policy's own actions; noise 0.3 (std 0.6 on [-2, 2]): other actions, within bounds.
    greedy = _greedy(checkpoints["sac"], data.obs)
    assert torch.allclose(data.actions[:400], greedy[:400], atol=1e-5)
    assert (data.actions[400:] - greedy[400:]).abs().mean() > 0.2
    assert data.actions.abs().max() <= 2.0
    # The folder itself reads the same.
    assert torch.equal(TransitionsDataModule(path).transitions.actions, data.actions)


def test_dqn_cartpole_steps_with_epsilon_noise(checkpoints, minari_root):
    _, episodes, noise_of = record.record_dataset(
        "cartpole/dqn-v0", minari_root, checkpoints["dqn"], steps=400, noise=[0.0, 0.5], seed=2
    )
    assert sum(len(e["rewards"]) for e in episodes) == 400
    data = TransitionsDataModule("cartpole/dqn-v0").transitions
    assert data.num_transitions == 400 and data.actions.dtype == torch.int64
    zero = sum(len(e["rewards"]) for e, n in zip(episodes, noise_of, strict=True) if n == 0.0)
    assert zero == 200  # the steps split evenly; the level's last episode cut (truncated) where they ran out
    assert bool((data.terminated | data.truncated)[zero - 1])
    greedy = _greedy(checkpoints["dqn"], data.obs)
    assert torch.equal(data.actions[:zero], greedy[:zero])
    differs = (data.actions[zero:] != greedy[zero:]).float().mean()
    assert 0.1 < differs < 0.45  # a random action with chance 0.5, itself the greedy one half the time
    # CartPole: +1 on every step.
    assert torch.equal(data.rewards, torch.ones(400))


def test_random_policy_to_npz_through_the_script(tmp_path):
    command = [sys.executable, str(ROOT / "scripts" / "record_dataset.py"), "--random", "--env-id", "CartPole-v1"]
    command += ["--episodes", "3", "--format", "npz", "--out", str(tmp_path), "--dataset-id", "cartpole/random-v0"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    path = tmp_path / "cartpole/random-v0.npz"
    assert "wrote 3 episodes" in result.stdout and str(path) in result.stdout
    module = TransitionsDataModule(path, batch_size=8)
    assert int(module.transitions.terminated.sum()) == 3  # random CartPole episodes end by falling
    with np.load(path, allow_pickle=False) as arrays:
        assert set(arrays.files) >= {"observations", "next_observations", "actions", "rewards"}
    batch = next(iter(module.train_dataloader()))
    assert batch.obs.shape == (8, 4) and batch.actions.dtype == torch.int64


def test_script_errors(tmp_path, checkpoints, minari_root, capsys):
    with pytest.raises(SystemExit) as exit_info:
        record.main(["--random", "--dataset-id", "test/record-v0", "--out", str(tmp_path)])
    assert exit_info.value.code == 2 and "--random needs --env-id" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        record.main(["--checkpoint", str(checkpoints["dqn"]), "--noise", "1.5", "--dataset-id", "test/record-v0"])
    assert exit_info.value.code == 2 and "noise must be a finite number in [0.0, 1.0]" in capsys.readouterr().err
    argv = ["--random", "--env-id", "CartPole-v1", "--episodes", "1", "--dataset-id", "test/record-v0"]
    with pytest.raises(SystemExit) as exit_info:
        record.main(argv)
    assert exit_info.value.code == 0
    with pytest.raises(SystemExit) as exit_info:
        record.main(argv)
    assert exit_info.value.code == 2 and "is never overwritten" in capsys.readouterr().err
    with pytest.raises(ValueError, match="needs exactly one of num_episodes and num_steps"):
        record.record_dataset("test/other-v0", tmp_path, env_id="CartPole-v1", episodes=2, steps=2)
