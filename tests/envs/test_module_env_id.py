"""Your own gymnasium env from the shell: gymnasium's ``module:id`` form (``my_envs:Corridor-v0``, which
``gymnasium.make`` imports) in ``make_envs``, the modules, the scripts and the CLI; from a checkpoint only when the
user imported the module (``tests/test_safe_loading.py`` checks the refusal)."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rl_lightning import PPOModule
from rl_lightning.envs import make_envs
from rl_lightning.trust import UntrustedCheckpointError

ROOT = Path(__file__).resolve().parents[2]
CORRIDOR = '''
import gymnasium as gym
import numpy as np


class Corridor(gym.Env):
    """Walk right (action 1) 3 times: reward 1 and the end."""

    observation_space = gym.spaces.Box(0, 3, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.x += int(action)
        done = self.x >= 3
        return np.array([self.x], np.float32), float(done), done, False, {}


gym.register("Corridor-v0", entry_point=Corridor, max_episode_steps=10)
'''


@pytest.fixture
def corridor(tmp_path, monkeypatch):
    """A module ``corridor_envs.py`` in the working directory (not on sys.path), registering Corridor-v0."""
    (tmp_path / "corridor_envs.py").write_text(CORRIDOR)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the cwd that make_envs may add goes again
    sys.modules.pop("corridor_envs", None)
    yield "corridor_envs:Corridor-v0"
    sys.modules.pop("corridor_envs", None)
    import gymnasium as gym

    gym.registry.pop("Corridor-v0", None)


def test_make_envs_imports_the_module_from_the_working_directory_and_steps_it(corridor):
    envs = make_envs(corridor, 2, seed=0)
    assert "corridor_envs" in sys.modules and envs.single_action_space.n == 2
    envs.reset()
    for _ in range(2):
        envs.step(torch.ones(2, dtype=torch.int64))
    _, reward, terminated, _, _ = envs.step(torch.ones(2, dtype=torch.int64))
    assert reward.tolist() == [1.0, 1.0] and terminated.tolist() == [True, True]


def test_a_module_that_cannot_be_imported_or_an_empty_part_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"env_id 'no_such_module_xyz:Corridor-v0': cannot import"):
        make_envs("no_such_module_xyz:Corridor-v0", 2)
    with pytest.raises(ValueError, match=r"both parts non-empty"):
        make_envs(":Corridor-v0", 2)


def test_a_module_trains_on_it_and_names_its_run_without_the_colon(corridor):
    module = PPOModule(env_id=corridor, num_envs=2, num_steps_per_rollout=8)
    assert module.hparams.env_id == corridor and module.run_name == "PPO-corridor_envs_Corridor-v0"


def test_a_checkpoint_naming_it_loads_once_the_user_imported_the_module(corridor, tmp_path):
    import lightning as L

    trainer = L.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(PPOModule(env_id=corridor, num_envs=2, num_steps_per_rollout=8))
    trainer.save_checkpoint(tmp_path / "corridor.ckpt")
    sys.modules.pop("corridor_envs")  # a fresh process that has not imported it
    with pytest.raises(UntrustedCheckpointError, match=r"gymnasium's 'module:id' form, which imports 'corridor_envs'"):
        PPOModule.load_from_checkpoint(tmp_path / "corridor.ckpt")
    assert "corridor_envs" not in sys.modules
    import corridor_envs  # noqa: F401  (the user's own import: allowed)

    loaded = PPOModule.load_from_checkpoint(tmp_path / "corridor.ckpt")
    assert loaded.hparams.env_id == corridor


def test_the_script_trains_your_env_from_the_shell(corridor, tmp_path):
    process = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "train_ppo.py"), "--env_id", corridor, "--max_steps", "4",
         "--num_envs", "2", "--no_video", "--solved_return", "1"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert process.returncode == 0, process.stderr[-3000:]
    assert (tmp_path / "lightning_logs" / "PPO-corridor_envs_Corridor-v0" / "version_0" / "checkpoints").is_dir()
    assert "done: " in process.stdout + process.stderr
