"""Nothing silently wrong, nothing lost: NaN, I/O faults, SIGTERM, reloads, wrong checkpoints,
Lightning flags users try, and bad inputs (issue 14's list, one test or more per item)."""

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import lightning as L
import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from rl_lightning import DQNModule, PPOModule, VPGModule, make_envs, register
from rl_lightning.checkpoints import AtomicCheckpointIO, CheckpointSaveError, resolve_ckpt_path
from rl_lightning.envs import CartPole
from rl_lightning.envs.registry import _REGISTRY

ROOT = Path(__file__).resolve().parents[1]
TINY_DQN = dict(env_id="Probe4-v0", num_envs=4, buffer_size=200, batch_size=16, learning_starts=16, steps_per_epoch=5)


def _trainer(root=None, **kwargs) -> L.Trainer:
    defaults = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    if root is not None:
        defaults.update(default_root_dir=root)
    return L.Trainer(**{**defaults, **kwargs})


def _script(name: str, *args: str, cwd: Path, **popen) -> subprocess.Popen:
    command = [sys.executable, str(ROOT / "scripts" / name), "--default_root_dir", str(cwd), *args]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, **popen
    )


# -- 1. NaN is detected -------------------------------------------------------------------------


def test_a_diverging_dqn_stops_with_a_clear_error_and_keeps_the_last_good_checkpoint(tmp_path):
    """lr 1e6: the weights blow up within a few updates; the run raises FloatingPointError naming
    the step and what to try, and the checkpoint of the last epoch is the one before, all finite."""
    module = DQNModule(**{**TINY_DQN, "lr": 1e6, "max_grad_norm": None})
    checkpoint = ModelCheckpoint(dirpath=tmp_path, filename="last")
    trainer = _trainer(max_steps=500, callbacks=[checkpoint], enable_checkpointing=True)
    with pytest.raises(FloatingPointError, match=r"became NaN or infinite at optimizer step \d+.*lower learning rate"):
        trainer.fit(module)
    assert trainer.global_step < 500
    if (tmp_path / "last.ckpt").exists():  # written at an earlier epoch end, when all was finite
        saved = torch.load(tmp_path / "last.ckpt", weights_only=False)["state_dict"]
        assert all(torch.isfinite(tensor).all() for tensor in saved.values())


def test_the_dqn_script_exits_non_zero_when_training_diverges(tmp_path):
    args = ("--lr", "1e6", "--max_grad_norm", "none", "--max_steps", "500", "--steps_per_epoch", "50")
    process = _script("train_dqn.py", *args, "--no_video", "--no_stop_when_solved", cwd=tmp_path)
    _, stderr = process.communicate(timeout=240)
    assert process.returncode == 1, stderr[-2000:]
    assert "error: DQNModule: " in stderr and "NaN or infinite" in stderr
    assert "done:" not in stderr


class _NaNRewardProbe(CartPole):
    """CartPole whose rewards turn NaN after 30 steps."""

    def _step(self, actions):
        obs, reward, terminated, truncated, info = super()._step(actions)
        if self._clock > 30:
            reward = torch.full_like(reward, float("nan"))
        return obs, reward, terminated, truncated, info


@pytest.mark.parametrize("cls", [VPGModule, DQNModule, PPOModule])
def test_a_nan_reward_from_the_env_stops_every_algorithm(cls):
    register("_TestNaNReward-v0", _NaNRewardProbe)
    try:
        kwargs = {"VPGModule": dict(num_steps_per_rollout=20), "PPOModule": dict(num_steps_per_rollout=20)}
        extra = kwargs.get(cls.__name__, dict(buffer_size=500, learning_starts=8, batch_size=256))
        module = cls(env_id="_TestNaNReward-v0", num_envs=4, **extra)
        with pytest.raises(FloatingPointError, match="NaN or infinite"):
            _trainer(max_steps=400).fit(module)
    finally:
        del _REGISTRY["_TestNaNReward-v0"]


@pytest.mark.parametrize("cls", [VPGModule, DQNModule, PPOModule])
def test_act_refuses_non_finite_network_outputs_instead_of_returning_action_0(cls):
    module = cls(seed=0)
    with torch.no_grad():
        next(module.parameters()).fill_(float("nan"))
    with pytest.raises(FloatingPointError, match="not finite"):
        module.act(torch.zeros(2, 4), greedy=True)


# -- 2. checkpoints survive I/O faults ---------------------------------------------------------------


def _checkpoint_dict(value: float) -> dict:
    return {"state_dict": {"w": torch.full((1000,), value)}, "rl_lightning": {"algorithm": "VPGModule"}}


def test_a_full_disk_keeps_the_previous_checkpoint_whole(tmp_path, monkeypatch):
    io = AtomicCheckpointIO()
    path = tmp_path / "last.ckpt"
    io.save_checkpoint(_checkpoint_dict(1.0), path)
    good = path.read_bytes()

    def full_disk(obj, file):  # writes part of the file, then the disk is full
        file.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(
        CheckpointSaveError, match=rf"disk full while writing {path}.*previous checkpoint {path} is intact"
    ):
        io.save_checkpoint(_checkpoint_dict(2.0), path)
    assert path.read_bytes() == good
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]  # no temporary file left behind


def test_a_full_disk_seen_by_torchs_zip_writer_is_named_too(tmp_path, monkeypatch):
    """On a full disk torch.save's C++ zip writer raises a RuntimeError ("[enforce fail at
    inline_container.cc:672] . unexpected pos"), not an OSError: it is still "disk full", with the
    previous checkpoint intact."""
    io = AtomicCheckpointIO()
    path = tmp_path / "last.ckpt"
    io.save_checkpoint(_checkpoint_dict(1.0), path)
    good = path.read_bytes()

    def zip_writer_fails(obj, file):
        file.write(b"partial")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 4096 vs 3981")

    class NoSpace:
        f_bavail, f_frsize = 0, 4096

    monkeypatch.setattr(torch, "save", zip_writer_fails)
    monkeypatch.setattr(os, "statvfs", lambda directory: NoSpace())
    with pytest.raises(
        CheckpointSaveError, match=rf"disk full while writing {path}.*previous checkpoint {path} is intact"
    ):
        io.save_checkpoint(_checkpoint_dict(2.0), path)
    assert path.read_bytes() == good
    monkeypatch.setattr(torch, "save", lambda obj, file: (_ for _ in ()).throw(RuntimeError("a bug elsewhere")))
    with pytest.raises(RuntimeError, match="a bug elsewhere"):  # other errors are not taken for a full disk
        io.save_checkpoint(_checkpoint_dict(2.0), path)


def test_a_script_whose_checkpoint_cannot_be_written_exits_1_with_one_line(tmp_path):
    (tmp_path / "lightning_logs").mkdir()
    (tmp_path / "lightning_logs" / "PPO-CartPole-v1").write_text("a file where the run's directory goes")
    process = _script("train_ppo.py", "--max_steps", "2", "--num_envs", "4", "--no_video", cwd=tmp_path)
    _, err = process.communicate(timeout=240)
    assert process.returncode in (1, 2), err[-2000:]
    assert "Traceback" not in err and "PPO-CartPole-v1" in err


def test_an_unwritable_checkpoint_directory_fails_loudly(tmp_path, monkeypatch):
    def read_only(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr("tempfile.mkstemp", read_only)
    trainer = L.Trainer(
        max_steps=2,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[ModelCheckpoint(dirpath=tmp_path / "checkpoints", filename="last")],
    )
    with pytest.raises(CheckpointSaveError, match="Permission denied"):
        trainer.fit(VPGModule(num_envs=2, num_steps_per_rollout=5))


def test_the_module_installs_the_atomic_writer_unless_the_user_chose_one():
    trainer = _trainer(max_steps=1)
    trainer.fit(VPGModule(num_envs=2, num_steps_per_rollout=5))
    assert isinstance(trainer.strategy.checkpoint_io, AtomicCheckpointIO)


# -- 3. a bounded warm-up, and SIGTERM heard everywhere ------------------------------------------------


def test_a_warm_up_longer_than_the_buffer_is_refused():
    with pytest.raises(ValueError, match=r"learning_starts \(1000000000\) must be <= buffer_size \(50000\)"):
        DQNModule(learning_starts=1_000_000_000)


def test_sigterm_during_a_long_warm_up_exits_143_and_leaves_a_resumable_checkpoint(tmp_path):
    """A warm-up of 1,000,000 random env steps of one env (minutes): SIGTERM, sent once fit has
    started (the start line is printed), must stop it within seconds with exit code 143, and the
    resumed run must continue from where it stopped."""
    args = ("--num_envs", "1", "--learning_starts", "1000000", "--buffer_size", "1000000", "--max_steps", "10")
    process = _script("train_dqn.py", *args, "--no_video", cwd=tmp_path)
    stdout_lines = []
    # The start line is printed when training starts: Lightning's signal handlers are installed.
    while not any(line.startswith("DQNModule on CartPole-v1") for line in stdout_lines):
        line = process.stdout.readline()
        assert line, "".join(stdout_lines)[-2000:] + process.stderr.read()[-2000:]  # it ended before fitting
        stdout_lines.append(line)
    time.sleep(2)  # well into the warm-up
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert time.monotonic() - sent < 20
    assert process.returncode == 143, stderr[-2000:]
    assert "resume with --ckpt_path last" in stderr
    [checkpoint] = tmp_path.glob("lightning_logs/DQN-CartPole-v1/version_*/checkpoints/last.ckpt")
    saved = torch.load(checkpoint, weights_only=False)
    stopped_at = saved["rl_lightning"]["env_steps"]
    assert 0 < stopped_at < 1_000_000
    resumed = _script(
        "train_dqn.py", *args, "--no_video", "--ckpt_path", "last", "--learning_starts", "1000000", cwd=tmp_path
    )
    resumed.kill()  # resuming works: it starts from the saved warm-up (not checked to the end here)
    resumed.communicate(timeout=60)


def test_the_sources_hear_a_stop_request_between_rollouts():
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    module = VPGModule(num_envs=2, num_steps_per_rollout=5)
    source = module.make_source(make_envs("CartPole-v1", 2, seed=0))
    source.should_stop = lambda: True
    with pytest.raises(SIGTERMException):
        source.next_batch()


# -- 4. reloading dataloaders keeps the run ------------------------------------------------------------


@pytest.mark.parametrize("cls", [VPGModule, DQNModule])
def test_reload_dataloaders_every_epoch_keeps_env_steps_buffer_and_envs(cls):
    kwargs = dict(num_envs=4, num_steps_per_rollout=10) if cls is VPGModule else TINY_DQN
    reloaded, straight = cls(**kwargs), cls(**kwargs)
    _trainer(max_epochs=3, reload_dataloaders_every_n_epochs=1).fit(reloaded)
    _trainer(max_epochs=3).fit(straight)
    assert reloaded.env_steps == straight.env_steps > 0
    for a, b in zip(reloaded.parameters(), straight.parameters(), strict=True):
        assert torch.equal(a, b)
    if cls is DQNModule:
        assert reloaded.source.buffer.size == straight.source.buffer.size


# -- 5. --ckpt_path last picks the module's own checkpoint ---------------------------------------------


def _save_last(root: Path, module: L.LightningModule, version: int) -> Path:
    directory = root / "lightning_logs" / f"version_{version}" / "checkpoints"
    trainer = _trainer(max_steps=1)
    trainer.fit(module)
    trainer.save_checkpoint(directory / "last.ckpt")
    return directory / "last.ckpt"


def test_ckpt_path_last_picks_the_newest_checkpoint_of_the_same_module_class(tmp_path):
    vpg = _save_last(tmp_path, VPGModule(num_envs=2, num_steps_per_rollout=5), 0)
    time.sleep(0.01)
    dqn = _save_last(tmp_path, DQNModule(**TINY_DQN), 1)  # newer, but another algorithm
    assert resolve_ckpt_path("last", tmp_path, "VPGModule") == str(vpg)
    assert resolve_ckpt_path("last", tmp_path, "DQNModule") == str(dqn)
    with pytest.raises(ValueError, match=r"no last checkpoint of PPOModule.*VPGModule.*DQNModule"):
        resolve_ckpt_path("last", tmp_path, "PPOModule")


# -- 6. Lightning flags users will try ---------------------------------------------------------------


def test_bf16_mixed_with_trainer_gradient_clipping_works_for_dqn():
    trainer = _trainer(max_steps=20, precision="bf16-mixed", gradient_clip_val=1.0)
    trainer.fit(DQNModule(**TINY_DQN))
    assert trainer.global_step == 20


def test_trainer_gradient_clip_val_bounds_the_gradient_norm():
    seen = []

    class Spy(L.Callback):
        def on_before_optimizer_step(self, trainer, pl_module, optimizer):
            pass

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            grads = [p.grad.flatten() for p in pl_module.parameters() if p.grad is not None]
            seen.append(torch.linalg.vector_norm(torch.cat(grads)).item())

    _trainer(max_steps=5, gradient_clip_val=1e-3, callbacks=[Spy()]).fit(
        VPGModule(num_envs=4, num_steps_per_rollout=10)
    )
    assert max(seen) <= 1e-3 * 1.0001


@pytest.mark.parametrize("precision", ["64-true", "bf16-true", "16-true"])
def test_unsupported_precisions_say_which_flag_to_use(precision):
    with pytest.raises(ValueError, match=rf"precision='{precision}'.* use precision='32-true'"):
        _trainer(max_steps=1, precision=precision).fit(VPGModule(num_envs=2, num_steps_per_rollout=5))


def test_gradient_accumulation_is_refused_with_what_to_do_instead():
    with pytest.raises(ValueError, match=r"accumulate_grad_batches=2.*raise num_envs"):
        _trainer(max_steps=1, accumulate_grad_batches=2).fit(VPGModule(num_envs=2, num_steps_per_rollout=5))


# -- 7. messages that help -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seed", "error"), [(-1, ValueError), (2**63, ValueError), (2**64, ValueError), (1.5, TypeError)]
)
def test_seeds_outside_the_generators_range_are_clear_errors(seed, error):
    with pytest.raises(error, match="seed"):
        make_envs("CartPole-v1", 2, seed=seed)
    with pytest.raises(error, match="seed"):
        VPGModule(seed=seed)


@pytest.mark.parametrize("content", [b"", b"hello, not a checkpoint", None])
def test_empty_text_and_foreign_files_are_not_checkpoints(tmp_path, content):
    path = tmp_path / "bad.ckpt"
    if content is None:
        torch.save({"weights": torch.zeros(3)}, path)  # a torch file, not a Lightning checkpoint
    else:
        path.write_bytes(content)
    with pytest.raises(ValueError, match=r"bad\.ckpt"):
        VPGModule.load_from_checkpoint(path)
    with pytest.raises(ValueError, match=r"bad\.ckpt"):
        resolve_ckpt_path(str(path), tmp_path)


def test_loading_with_another_env_id_names_the_env_not_the_hidden_sizes(tmp_path):
    path = _save_last(tmp_path, VPGModule(num_envs=2, num_steps_per_rollout=5), 0)
    with pytest.raises(ValueError, match=r"trained on env_id 'CartPole-v1'.*'Acrobot-v1'"):
        VPGModule.load_from_checkpoint(path, env_id="Acrobot-v1")


def test_a_factory_returning_a_gymnasium_env_is_a_clear_error():
    register("_TestGymFactory-v0", lambda num_envs, seed, device: gym.make("CartPole-v1"))
    try:
        with pytest.raises(TypeError, match=r"returned a TimeLimit, not a rl_lightning VectorEnv.*gymnasium id"):
            make_envs("_TestGymFactory-v0", 2)
    finally:
        del _REGISTRY["_TestGymFactory-v0"]


def test_nan_observations_to_act_are_caught_by_the_output_check():
    module = VPGModule(seed=0)
    with pytest.raises(FloatingPointError, match="not finite"):
        module.act(np.full(4, np.nan, dtype=np.float32))


# -- issue 21: silently wrong inputs and settings ---------------------------------------------------------


def test_vpg_with_one_env_per_batch_is_refused_since_its_baseline_zeroes_every_advantage():
    with pytest.raises(ValueError, match=r"at least 2 envs per batch \(num_envs=1"):
        VPGModule(num_envs=1)
    with pytest.raises(ValueError, match=r"num_envs=4, num_batches_per_rollout=4"):
        VPGModule(num_envs=4, num_batches_per_rollout=4, importance_weighting=True)


def test_lr_decay_settings_are_checked_even_when_the_decay_is_off():
    with pytest.raises(TypeError, match="lr_end"):
        VPGModule(lr_end="abc", lr_frac=0.5)
    with pytest.raises(ValueError, match="lr_frac"):
        VPGModule(lr_end=1e-3, lr_frac=7)


def test_ppo_minibatches_of_one_entry_are_refused_naming_the_size():
    with pytest.raises(ValueError, match=r"a minibatch of 1 entry \(.* = 2 \* 2 / 4\)"):
        PPOModule(num_envs=2, num_steps_per_rollout=2, num_minibatches=4)


def test_float_images_are_refused_where_uint8_pixels_are_expected():
    module = DQNModule(env_id="ImageProbe5-v0", learning_starts=10, batch_size=8)
    with pytest.raises(TypeError, match=r"uint8 pixels \(0-255\).*got torch.float32"):
        module.act(torch.rand(2, 36, 36, 3))
    with pytest.raises(TypeError, match=r"got torch\.int64"):
        module.act(np.full((36, 36, 3), 300))
    assert module.act(torch.zeros(2, 36, 36, 3, dtype=torch.uint8)).shape == (2,)


def test_recurrent_act_names_a_wrong_episode_start_or_state():
    module = PPOModule(env_id="MemoryProbe-v0", num_envs=4, num_minibatches=2, recurrent="lstm")
    with pytest.raises(ValueError, match=r"episode_start must have one flag per observation \(3\), got shape \(5,\)"):
        module.act(torch.zeros(3, 2), episode_start=torch.ones(5, dtype=torch.bool))
    with pytest.raises(TypeError, match="state must be a floating tensor"):
        module.act(torch.zeros(3, 2), state=torch.zeros(2, 3, 64, dtype=torch.int64))
    actions, state = module.act(torch.zeros(3, 2), state=torch.zeros(2, 3, 64, dtype=torch.float64))  # converted
    assert actions.shape == (3,) and state.dtype == torch.float32


def test_discrete_observations_act_and_evaluate_as_gymnasium_gives_them():
    """FrozenLake's observation is an int: act takes it (as the adapter one-hot encodes it in training),
    and evaluate_policy on a gymnasium Env instance encodes it the same way."""
    import gymnasium as gym

    from rl_lightning import evaluate_policy

    module = PPOModule(env_id="FrozenLake-v1", num_envs=4, num_minibatches=2)
    env = gym.make("FrozenLake-v1")
    obs, _ = env.reset(seed=0)
    action = module.act(obs, greedy=True)
    assert isinstance(action, np.int64)
    one_hot = torch.zeros(1, 16)
    one_hot[0, obs] = 1.0
    assert action == module.act(one_hot, greedy=True).item()
    assert module.act(np.arange(16), greedy=True).shape == (16,)  # 16 indices, not one one-hot row
    result = evaluate_policy(module, env, num_episodes=3, seed=0)
    assert result.lengths.min() >= 1 and set(result.returns.tolist()) <= {0.0, 1.0}
