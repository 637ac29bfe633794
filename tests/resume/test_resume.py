"""Exact resume: N steps, a checkpoint, resume for M more = N + M steps straight, bit for bit."""

import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from rl_lightning import DQNModule, VPGModule

WORKER = Path(__file__).resolve().parent / "resume_worker.py"
sys.path.insert(0, str(WORKER.parent))
from resume_worker import build  # noqa: E402


class _StopAt(L.Callback):
    """Stop a run early (like an interruption) without changing its planned length, which the
    LR and epsilon schedules depend on."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step >= self.step:
            trainer.should_stop = True


def _fit(module: L.LightningModule, root: Path, max_steps: int, ckpt_path=None, stop_at=None) -> L.Trainer:
    callbacks: list[L.Callback] = [ModelCheckpoint(dirpath=root / "checkpoints", filename="last")]
    if stop_at is not None:
        callbacks.append(_StopAt(stop_at))
    trainer = L.Trainer(
        max_steps=max_steps,
        default_root_dir=root,
        logger=False,
        callbacks=callbacks,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, ckpt_path=ckpt_path)
    return trainer


def _assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


@pytest.mark.parametrize(
    ("algo", "first", "total"), [("vpg", 4, 10), ("dqn", 10, 25), ("ppo", 8, 20), ("sac", 10, 25), ("td3", 5, 25)]
)
def test_resume_from_last_gives_the_same_weights_as_training_straight(tmp_path, algo, first, total):
    straight = build(algo)
    straight_trainer = _fit(straight, tmp_path / "straight", total)

    stopped = _fit(build(algo), tmp_path / "split", total, stop_at=first)  # stops at an epoch's end
    assert stopped.global_step == first
    resumed = build(algo)
    trainer = _fit(resumed, tmp_path / "split", total, ckpt_path="last")

    assert trainer.global_step == total
    assert resumed.env_steps == straight.env_steps
    _assert_same_weights(resumed.state_dict(), straight.state_dict())
    # the optimizer's moments and step counts too (TD3's actor parameters count only their delayed updates)
    optimizer_state = trainer.optimizers[0].state_dict()["state"]
    straight_state = straight_trainer.optimizers[0].state_dict()["state"]
    assert optimizer_state.keys() == straight_state.keys() and optimizer_state
    for key, state in optimizer_state.items():
        _assert_same_weights(state, straight_state[key])
    assert max(int(state["step"]) for state in optimizer_state.values()) == total


@pytest.mark.parametrize("algo", ["ppo", "vpg_split"])
def test_a_checkpoint_in_the_middle_of_a_rollout_resumes_exactly(tmp_path, algo):
    """A checkpoint every 3 updates, written between two updates of a rollout's training step (PPO: 4 per
    rollout; VPG split into 2 batches used twice): the rollout's pending minibatches are in the checkpoint, so
    the resumed run finishes that rollout's updates on exactly the data an uninterrupted one does."""

    def module():
        if algo == "ppo":
            return build("ppo")
        return VPGModule(
            num_envs=8,
            num_steps_per_rollout=20,
            importance_weighting=True,
            num_batches_per_rollout=2,
            rollout_use_count=2,
            seed=5,
        )

    class Every3(L.Callback):
        def __init__(self, root, stop_at):
            self.root, self.stop_at = root, stop_at

        def on_update_end(self, trainer, pl_module, loss):
            if trainer.global_step % 3 == 0:
                trainer.save_checkpoint(self.root / "checkpoints" / "last.ckpt")
            if self.stop_at is not None and trainer.global_step == self.stop_at:
                trainer.should_stop = True  # after this training step

    def fit(root, max_steps, ckpt_path=None, stop_at=None):
        callbacks = [Every3(root, stop_at)]
        trainer = L.Trainer(
            enable_checkpointing=False,
            max_steps=max_steps,
            default_root_dir=root,
            logger=False,
            callbacks=callbacks,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        fitted = module()
        trainer.fit(fitted, ckpt_path=ckpt_path)
        return fitted

    straight = fit(tmp_path / "straight", 14)
    fit(tmp_path / "split", 14, stop_at=5)  # the last checkpoint is at update 6, mid-rollout (the rollout ends at 8)
    checkpoint = torch.load(tmp_path / "split" / "checkpoints" / "last.ckpt", weights_only=False)
    source_state = checkpoint["rl_lightning"]["sources"][0]
    assert checkpoint["global_step"] == 6
    assert source_state["collection"]["position"] == 1  # mid-rollout: the pending batches are saved
    resumed = fit(tmp_path / "split", 14, ckpt_path=tmp_path / "split" / "checkpoints" / "last.ckpt")
    assert resumed.env_steps == straight.env_steps
    _assert_same_weights(resumed.state_dict(), straight.state_dict())


def test_resume_without_replay_buffer_refills_it(tmp_path):
    def module():
        return DQNModule(
            num_envs=4, buffer_size=500, batch_size=32, learning_starts=64, steps_per_epoch=5, checkpoint_buffer=False
        )

    _fit(module(), tmp_path, 15, stop_at=10)
    checkpoint = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=False)
    assert checkpoint["rl_lightning"]["sources"][0]["buffer"] is None
    resumed = module()
    _fit(resumed, tmp_path, 15, ckpt_path="last")
    # The resumed run refilled 64 random transitions, then played 5 more training steps x 4 envs.
    assert resumed.source.buffer.size == 64 + 5 * 4
    assert resumed.env_steps == (64 + 10 * 4) + 64 + 5 * 4


@pytest.mark.parametrize(
    ("algo", "kill_at", "total"), [("vpg", 5, 8), ("dqn", 13, 20), ("ppo", 10, 16), ("sac", 13, 20)]
)
def test_sigkilled_run_resumes_as_if_never_stopped(tmp_path, algo, kill_at, total):
    """SIGKILL mid-epoch (after the last checkpoint); `ckpt_path="last"` then reaches the same
    weights as a run that was never interrupted."""

    def run(root: Path, *extra: str) -> int:
        cmd = [sys.executable, str(WORKER), algo, str(root), str(total), *extra]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=240).returncode

    assert run(tmp_path / "straight") == 0
    assert run(tmp_path / "killed", "--kill_at_step", str(kill_at)) == -9
    assert (tmp_path / "killed" / "checkpoints" / "last.ckpt").is_file()
    assert not (tmp_path / "killed" / "weights.pt").exists()
    assert run(tmp_path / "killed", "--resume") == 0
    straight = torch.load(tmp_path / "straight" / "weights.pt")
    resumed = torch.load(tmp_path / "killed" / "weights.pt")
    assert resumed["env_steps"] == straight["env_steps"]
    _assert_same_weights(resumed["state_dict"], straight["state_dict"])


def test_loading_a_checkpoint_of_another_env_or_shape_raises(tmp_path):
    _fit(VPGModule(num_envs=4, num_steps_per_rollout=10), tmp_path, 1)
    path = tmp_path / "checkpoints" / "last.ckpt"
    with pytest.raises(ValueError, match=r"trained on env_id 'CartPole-v1'.*'Probe4-v0'"):
        _fit(VPGModule(env_id="Probe4-v0", num_envs=4, num_steps_per_rollout=10), tmp_path / "b", 2, ckpt_path=path)
    with pytest.raises(ValueError, match=r"hidden_sizes=\(120, 84\).*hidden_sizes=\(32,\)"):
        _fit(VPGModule(num_envs=4, num_steps_per_rollout=10, hidden_sizes=(32,)), tmp_path / "c", 2, ckpt_path=path)


def _fit_stoppable(module: L.LightningModule, root: Path, max_steps: int, ckpt_path=None):
    """Fit with a last.ckpt and CheckpointOnStop (which writes it when the run is stopped)."""
    from rl_lightning.callbacks import CheckpointOnStop

    trainer = L.Trainer(
        max_steps=max_steps,
        default_root_dir=root,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[ModelCheckpoint(dirpath=root / "checkpoints", filename="last"), CheckpointOnStop()],
    )
    trainer.fit(module, ckpt_path=ckpt_path)
    return module, trainer


def test_a_stop_during_the_dqn_warm_up_resumes_exactly(tmp_path, monkeypatch):
    """A SIGTERM heard inside the random warm-up (the source checks between chunks of 256 vector steps):
    CheckpointOnStop saves the half-filled buffer and the epsilon its collection started with; the resumed
    run ends with the weights and Adam state of a run never stopped."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    def module():
        return DQNModule(
            num_envs=2,
            buffer_size=3_000,
            batch_size=32,
            learning_starts=2_000,
            steps_per_epoch=5,
            exploration_fraction=0.5,
            seed=5,
        )

    def fit(root, ckpt_path=None):
        return _fit_stoppable(module(), root, 20, ckpt_path)

    straight, straight_trainer = fit(tmp_path / "straight")
    checks = iter([False, False, False])  # the batch's own check, then two warm-up chunks: stop at the third
    monkeypatch.setattr(DQNModule, "_received_sigterm", lambda self: next(checks, True))
    with pytest.raises(SIGTERMException):
        fit(tmp_path / "split")
    monkeypatch.undo()
    saved = torch.load(tmp_path / "split" / "checkpoints" / "last.ckpt", weights_only=False)
    assert saved["rl_lightning"]["env_steps"] == 2 * 256 * 2 and saved["global_step"] == 0  # mid warm-up
    resumed, trainer = fit(tmp_path / "split", ckpt_path="last")
    assert resumed.env_steps == straight.env_steps and resumed.epsilon == straight.epsilon
    _assert_same_weights(resumed.state_dict(), straight.state_dict())
    for key, state in trainer.optimizers[0].state_dict()["state"].items():
        _assert_same_weights(state, straight_trainer.optimizers[0].state_dict()["state"][key])


@pytest.mark.parametrize("script", ["train_ppo.py", "train_dqn.py"])
def test_ctrl_c_mid_fit_exits_130_and_resumes_exactly(tmp_path, script):
    """Ctrl-C (SIGINT) while a script trains stops at the same safe point as a SIGTERM: exit 130, a
    last.ckpt, and `--ckpt_path last` reaches the weights of a run never interrupted."""
    import signal
    import time

    root = Path(__file__).resolve().parents[2]
    if script == "train_ppo.py":
        # long enough that the Ctrl-C 1.5 s after the start line falls inside the run on a fast machine
        args = ["--max_steps", "4000", "--num_envs", "8", "--num_steps_per_rollout", "16"]
    else:
        args = ["--max_steps", "2000", "--learning_starts", "200", "--batch_size", "64", "--steps_per_epoch", "100"]
    args += ["--no_video", "--no_stop_when_solved", "--eval_every_n_env_steps", "1000000"]

    def run(directory, *extra, interrupt=False):
        directory.mkdir(exist_ok=True)
        process = subprocess.Popen(
            [sys.executable, str(root / "scripts" / script), *args, *extra],
            cwd=directory,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        if interrupt:
            line = process.stdout.readline()  # the start line: training has started
            assert " on CartPole-v1, " in line, line + process.stderr.read()
            time.sleep(1.5)
            process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=240)
        return process.returncode, err

    def final_weights(directory):
        [path] = directory.glob("lightning_logs/*/version_*/checkpoints/last.ckpt")
        checkpoint = torch.load(path, weights_only=False)
        return checkpoint["state_dict"], checkpoint["rl_lightning"]["env_steps"]

    code, err = run(tmp_path / "split", interrupt=True)
    assert code == 130, err[-2000:]
    assert "stopped by Ctrl-C: resume with --ckpt_path last" in err
    if script == "train_dqn.py":  # its exact resume after a stop: test_a_stop_during_the_dqn_warm_up_...
        assert final_weights(tmp_path / "split")[1] > 0
        return
    code, err = run(tmp_path / "straight")
    assert code == 0, err[-2000:]
    _, stopped_at = final_weights(tmp_path / "split")
    straight_state, straight_steps = final_weights(tmp_path / "straight")
    assert 0 < stopped_at < straight_steps  # it stopped in the middle
    code, err = run(tmp_path / "split", "--ckpt_path", "last")
    assert code == 0, err[-2000:]
    paths = sorted((tmp_path / "split").glob("lightning_logs/*/version_*/checkpoints/last.ckpt"))
    resumed = torch.load(paths[-1], weights_only=False)
    assert resumed["rl_lightning"]["env_steps"] == straight_steps
    _assert_same_weights(resumed["state_dict"], straight_state)


@pytest.mark.parametrize("kind", ["vpg", "ppo", "ppo_lstm"])
def test_a_stop_in_the_middle_of_a_long_rollout_comes_at_once_and_resumes_exactly(tmp_path, monkeypatch, kind):
    """The stop flag is checked every 64 vector steps inside a rollout, not only between rollouts
    (a SIGTERM during 4 envs x 30,000 steps waited for the whole rollout and an update): the source
    goes back to the rollout's start, the checkpoint holds that, and the resumed run replays the
    rollout and ends with the weights of a run never stopped."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from rl_lightning import PPOModule

    def module():
        if kind == "vpg":
            return VPGModule(num_envs=4, num_steps_per_rollout=512, seed=3)
        recurrent = "lstm" if kind == "ppo_lstm" else None
        return PPOModule(
            num_envs=4, num_steps_per_rollout=512, num_minibatches=2, update_epochs=1, recurrent=recurrent, seed=3
        )

    updates_per_rollout = 1 if kind == "vpg" else 2

    def fit(root, ckpt_path=None):
        return _fit_stoppable(module(), root, 3 * updates_per_rollout, ckpt_path)

    straight, _ = fit(tmp_path / "straight")
    calls = []

    def stop_in_the_second_rollout(self):
        calls.append(True)
        return len(calls) > 1 + 8 + 3  # rollout 1: its start + 8 checks (512 / 64); rollout 2: its start + 2

    monkeypatch.setattr(type(straight), "_received_sigterm", stop_in_the_second_rollout)
    with pytest.raises(SIGTERMException):
        fit(tmp_path / "split")
    monkeypatch.undo()
    saved = torch.load(tmp_path / "split" / "checkpoints" / "last.ckpt", weights_only=True)
    # Stopped at vector step 192 of rollout 2; saved as the state before it: one rollout, its updates.
    assert saved["rl_lightning"]["env_steps"] == 4 * 512 and saved["global_step"] == updates_per_rollout
    resumed, _ = fit(tmp_path / "split", ckpt_path="last")
    assert resumed.env_steps == straight.env_steps == 3 * 4 * 512
    _assert_same_weights(resumed.state_dict(), straight.state_dict())
