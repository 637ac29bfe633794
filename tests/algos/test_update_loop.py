"""The update loop inside the training step (``RLModule.training_step``): a rollout's updates per training step
(VPG, PPO), ``updates_per_step`` updates per training step (DQN, SAC, TD3), the same run whatever the chunking.

The loop replaced one in which every update was one Lightning training step (automatic optimisation). On the
cases of ``tests/loop_fingerprint.py`` it was checked against that loop (natively and under
``ATEN_CPU_CAPABILITY=default``): bit-identical weights, optimizer states, env steps, observations and
generator states. The logged records differ in two ways, both fixes: a metric is no longer written again, stale,
at a log step where it was not logged (Lightning kept the previous value of an episode chart), and with
``target_kl`` the loss means cover the updates that ran, not the skipped minibatches' losses too.
"""

import os
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from loop_fingerprint import CASES, differences, fingerprint
from quiet_trainer import quiet_trainer

from rl_lightning import DQNModule, PPOModule, SACModule, VPGModule

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["dqn", "sac", "td3"])
@pytest.mark.parametrize("updates_per_step", [3, 8])
def test_k_updates_per_training_step_give_the_run_of_one(name, updates_per_step):
    """Weights, optimizer state, env steps, every logged metric (same steps, same values) and every generator
    are bit-identical with 1, 3 and 8 updates per training step (8 > steps_per_epoch's cut and max_steps's)."""
    one = fingerprint(name, updates_per_step=1)
    many = fingerprint(name, updates_per_step=updates_per_step)
    assert differences(one, many) == []
    assert one["global_step"] == CASES[name][2]  # global_step counts updates
    assert len(one["metrics"]) >= 10


class WatchesBackward(L.Callback):
    """A callback with a backward hook: the updates then go through Lightning's manual-optimisation path."""

    def __init__(self):
        self.calls = 0

    def on_after_backward(self, trainer, pl_module):
        self.calls += 1


@pytest.mark.parametrize("name", ["vpg", "ppo", "dqn", "td3"])
def test_stepping_directly_and_through_lightnings_path_give_the_same_run(name):
    """Where no hook needs Lightning's manual-optimisation path (one device, float32), an update calls backward and
    the optimizer's step itself (RLModule._can_step_directly): the same run, bit for bit, as through that path,
    whose hooks then run at every update."""
    watcher = WatchesBackward()
    through_lightning = fingerprint(name, callbacks=(watcher,))
    assert watcher.calls > 0
    assert differences(fingerprint(name), through_lightning) == []


def test_k_updates_give_the_same_run_under_the_default_cpu_kernels():
    """The same identity under ATEN_CPU_CAPABILITY=default (other float rounding, the same loop)."""
    code = (
        "import torch; from loop_fingerprint import fingerprint, differences\n"
        "torch.set_num_threads(1)\n"
        "for name in ('dqn', 'td3'):\n"
        "    d = differences(fingerprint(name, updates_per_step=1), fingerprint(name, updates_per_step=5))\n"
        "    assert d == [], d\n"
        "print('same')\n"
    )
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default", "PYTHONPATH": str(ROOT / "tests")}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("same")


class CountHooks(L.Callback):
    def __init__(self):
        self.training_steps, self.updates, self.starts, self.lrs, self.global_steps = 0, 0, 0, [], []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.training_steps += 1

    def on_update_start(self, trainer, pl_module):
        self.starts += 1

    def on_update_end(self, trainer, pl_module, loss):
        self.updates += 1
        self.global_steps.append(trainer.global_step)  # the update is counted when its hook runs
        assert loss.ndim == 0 and not loss.requires_grad
        self.lrs.append(trainer.optimizers[0].param_groups[0]["lr"])


def test_ppo_runs_one_training_step_per_rollout_and_every_update_calls_the_hooks():
    """3 rollouts of 2 epochs x 2 minibatches: 3 training steps, 12 updates, 12 of each per-update hook, and the
    annealed LR constant within a rollout (one value per rollout, decreasing)."""
    module = PPOModule(num_envs=4, num_steps_per_rollout=8, update_epochs=2, num_minibatches=2, seed=1)
    hooks = CountHooks()
    trainer = quiet_trainer(max_steps=12, callbacks=[hooks])
    trainer.fit(module)
    assert (hooks.training_steps, hooks.updates, hooks.starts, trainer.global_step) == (3, 12, 12, 12)
    assert hooks.global_steps == list(range(1, 13))
    assert module.env_steps == 3 * 4 * 8
    per_rollout = [hooks.lrs[i : i + 4] for i in range(0, 12, 4)]
    assert all(len(set(lrs)) == 1 for lrs in per_rollout)
    assert per_rollout[0][0] == pytest.approx(2.5e-3) and per_rollout[0][0] > per_rollout[1][0] > per_rollout[2][0]


def test_max_steps_inside_a_rollout_stops_at_that_update():
    module = VPGModule(num_envs=4, num_steps_per_rollout=10, importance_weighting=True, rollout_use_count=3, seed=1)
    hooks = CountHooks()
    trainer = quiet_trainer(max_steps=7, callbacks=[hooks])
    trainer.fit(module)
    assert (hooks.training_steps, hooks.updates, trainer.global_step) == (3, 7, 7)
    assert module.env_steps == 3 * 4 * 10


def test_dqn_training_steps_hold_updates_per_step_updates():
    """updates_per_step=4, steps_per_epoch=10: epochs of 4 + 4 + 2 updates (3 training steps), 25 updates in 8."""
    module = DQNModule(num_envs=2, learning_starts=20, steps_per_epoch=10, updates_per_step=4, seed=1)
    hooks = CountHooks()
    trainer = quiet_trainer(max_steps=25, callbacks=[hooks])
    trainer.fit(module)
    assert (hooks.training_steps, hooks.updates, trainer.global_step) == (8, 25, 25)
    assert hooks.global_steps == list(range(1, 26))
    assert trainer.num_training_batches == 10  # Lightning's epoch: the source's 10 batches, pulled 4 + 4 + 2
    assert trainer.estimated_stepping_batches == 25  # counts updates, as global_step does


def test_target_kl_skips_the_rest_of_the_rollout_and_counts_it():
    """A target_kl so small that every rollout stops after its first epoch: half the updates run, all of them
    count (max_steps = 2 rollouts x 2 epochs x 2 minibatches), and the run takes the env steps it planned."""
    module = PPOModule(
        num_envs=4, num_steps_per_rollout=8, update_epochs=2, num_minibatches=2, target_kl=1e-12, lr=1e-2, seed=1
    )
    hooks = CountHooks()
    trainer = quiet_trainer(max_steps=8, callbacks=[hooks])
    trainer.fit(module)
    assert (hooks.training_steps, hooks.updates, trainer.global_step) == (2, 4, 8)
    assert hooks.global_steps == [1, 2, 5, 6]  # each rollout's second epoch (2 slots) skipped and counted
    assert module.env_steps == 2 * 4 * 8


def test_trainer_gradient_clip_val_clips_inside_the_loop_and_is_given_back():
    """Lightning refuses Trainer(gradient_clip_val) under manual optimisation: the loop clips with it instead
    (over max_grad_norm) and the Trainer has it again after fit. A clip of 1e-9 leaves the weights within
    lr * steps of where they started (Adam's step is ~lr whatever the gradient's size, so compare with lr=0)."""

    def weights_after(**trainer_kwargs):
        module = SACModule(
            num_envs=2, learning_starts=16, batch_size=8, hidden_sizes=(8,), seed=1, lr=1e-3, updates_per_step=2
        )
        trainer = quiet_trainer(max_steps=6, **trainer_kwargs)
        trainer.fit(module)
        return trainer, torch.cat([p.detach().flatten() for p in module.critic.parameters()])

    trainer, clipped = weights_after(gradient_clip_val=1e-9, gradient_clip_algorithm="value")
    assert trainer.gradient_clip_val == 1e-9 and trainer.gradient_clip_algorithm == "value"
    _, free = weights_after()
    assert not torch.equal(clipped, free)


def test_gradient_clip_val_by_norm_equals_max_grad_norm():
    """Trainer(gradient_clip_val=0.5) (norm) gives PPO the run max_grad_norm=0.5 gives, bit for bit."""

    def run(max_grad_norm, **trainer_kwargs):
        module = PPOModule(num_envs=4, num_steps_per_rollout=8, max_grad_norm=max_grad_norm, seed=2)
        quiet_trainer(max_steps=8, **trainer_kwargs).fit(module)
        return torch.cat([p.detach().flatten() for p in module.parameters()])

    assert torch.equal(run(None, gradient_clip_val=0.5), run(0.5))
    assert not torch.equal(run(None), run(0.5))


def test_a_checkpoint_period_inside_a_training_step_lowers_the_updates_per_training_step(tmp_path):
    """updates_per_step=4 and a save every 6 updates: the run holds gcd(4, 6) = 2 updates per training step (with
    a warning), so every save happens, at updates 6 and 12, and the run is the one of 4 per step."""
    saved = []

    class Saved(L.Callback):
        def on_save_checkpoint(self, trainer, pl_module, checkpoint):
            saved.append(trainer.global_step)

    module = DQNModule(num_envs=2, learning_starts=20, steps_per_epoch=100, updates_per_step=4, seed=1)
    checkpoint = ModelCheckpoint(every_n_train_steps=6, dirpath=tmp_path, save_top_k=-1)
    trainer = quiet_trainer(max_steps=12, callbacks=[checkpoint, Saved()], enable_checkpointing=True)
    with pytest.warns(UserWarning, match=r"every_n_train_steps=6.*this run holds 2"):
        trainer.fit(module)
    assert saved == [6, 12] and trainer.num_training_batches == 100
    plain = DQNModule(num_envs=2, learning_starts=20, steps_per_epoch=100, updates_per_step=4, seed=1)
    quiet_trainer(max_steps=12).fit(plain)
    assert torch.equal(module.q_network.head.weight, plain.q_network.head.weight)


@pytest.mark.parametrize("module_class", [DQNModule, PPOModule])
def test_every_save_of_a_step_template_happens_under_its_own_update_count(tmp_path, module_class):
    """ModelCheckpoint(filename="s{step}", every_n_train_steps=7), 10 updates per training step (DQN) or 16 per
    rollout (PPO: 7 updates share an env step): 10 saves, 10 files, each named by its own global_step. The modules
    publish "step" (the charts' env steps, as of their last log) where ModelCheckpoint read {step} from: saves after
    a log were named by that log's env steps and overwrote each other (8 of 10 files)."""
    if module_class is DQNModule:
        module = DQNModule(num_envs=2, learning_starts=16, batch_size=16, updates_per_step=10, seed=1)
    else:
        module = PPOModule(num_envs=2, num_steps_per_rollout=8, update_epochs=4, num_minibatches=4, seed=1)
    checkpoint = ModelCheckpoint(dirpath=tmp_path, filename="s{step}", every_n_train_steps=7, save_top_k=-1)
    trainer = quiet_trainer(max_steps=70, callbacks=[checkpoint], log_every_n_steps=20, enable_checkpointing=True)
    with pytest.warns(UserWarning, match=r"every_n_train_steps=7.*this run holds 1"):
        trainer.fit(module)
    names = {path.name: torch.load(path, weights_only=True)["global_step"] for path in tmp_path.glob("*.ckpt")}
    assert names == {f"sstep={step}.ckpt": step for step in range(7, 71, 7)}


def test_updates_per_step_is_checked():
    with pytest.raises(ValueError, match="updates_per_step"):
        DQNModule(updates_per_step=0)
    with pytest.raises(TypeError, match="updates_per_step"):
        SACModule(updates_per_step=2.5)


def test_lightnings_private_counters_the_loop_uses_are_there():
    """The skipped updates' count and the per-update metric writes reach Lightning's manual-optimisation step
    counter and its logger connector: if Lightning renames either, this fails first."""
    trainer = quiet_trainer(max_steps=1)
    progress = trainer.fit_loop.epoch_loop.manual_optimization.optim_step_progress
    assert callable(progress.increment_by)
    connector = trainer._logger_connector
    assert callable(connector.log_metrics)
    for name in ("_callback_metrics", "_logged_metrics", "_progress_bar_metrics"):
        assert isinstance(getattr(connector, name), dict), name


def test_a_former_style_training_step_override_keeps_working_with_a_deprecation_warning():
    """A subclass written for the loop of one update per training step overrides training_step(batch, batch_idx)
    and calls super(): it is that class's update_loss now (batch_idx: the update's index in its epoch), warned."""
    with pytest.warns(DeprecationWarning, match=r"training_step\(batch, batch_idx\).*update_loss\(batch\)"):

        class Recording(DQNModule):
            def training_step(self, batch, batch_idx):
                self.seen.append((batch_idx, batch.obs.shape[0]))
                return super().training_step(batch, batch_idx)

    module = Recording(num_envs=2, learning_starts=20, batch_size=8, steps_per_epoch=4, updates_per_step=2, seed=1)
    module.seen = []
    quiet_trainer(max_steps=6).fit(module)
    assert module.seen == [(0, 8), (1, 8), (2, 8), (3, 8), (0, 8), (1, 8)]
    plain = DQNModule(num_envs=2, learning_starts=20, batch_size=8, steps_per_epoch=4, updates_per_step=2, seed=1)
    quiet_trainer(max_steps=6).fit(plain)
    assert torch.equal(module.q_network.head.weight, plain.q_network.head.weight)  # the same updates


def test_the_layers_take_positional_arguments_with_a_deprecation_warning():
    from rl_lightning import OffPolicyModule

    class Positional(DQNModule):
        def __init__(self):
            OffPolicyModule.__init__(
                self, "CartPole-v1", 2, 1, "auto", None, 100, 8, 20, 1, 1, 10, 0.99, 1, True, False, None
            )

    with pytest.warns(DeprecationWarning, match=r"positional arguments is deprecated: pass them by name"):
        module = Positional()
    assert module.replay.buffer_size == 100 and module.replay.learning_starts == 20
    with pytest.raises(TypeError, match="both positionally and by name"):
        OffPolicyModule.__init__(module, "CartPole-v1", env_id="CartPole-v1")
