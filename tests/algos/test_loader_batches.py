"""Lightning iterates the source itself (``SourceLoader``): the loader yields real batches, a training step pulls
its updates' batches from it (``training_step(self, dataloader_iter)``), each generated after the previous update,
and Lightning's epochs hold ``len(source)`` update slots, whatever the skips and resumes."""

import warnings

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from quiet_trainer import quiet_trainer

from rl_lightning import DQNModule, PPOModule, SACModule, VPGModule
from rl_lightning.data import ReplayBufferSamples, RolloutTensors
from rl_lightning.data.actor_critic import PPOBatch


class SeesBatches(L.Callback):
    """What a user's batch hooks receive."""

    def __init__(self):
        self.starts, self.ends = [], []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.starts.append(batch)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.ends.append(batch)


@pytest.mark.parametrize(
    ("module", "kind"),
    [
        (VPGModule(num_envs=4, num_steps_per_rollout=8, seed=1), RolloutTensors),
        (PPOModule(num_envs=4, num_steps_per_rollout=8, update_epochs=2, num_minibatches=2, seed=1), PPOBatch),
        (DQNModule(num_envs=2, learning_starts=20, batch_size=8, steps_per_epoch=6, updates_per_step=4), None),
    ],
)
def test_a_users_batch_hooks_see_data_or_none(module, kind):
    """on_train_batch_end gets the training step's last batch, on_train_batch_start the one before it (None at an
    epoch's start): data as the loss takes it, never an internal ticket."""
    kind = kind or ReplayBufferSamples
    hooks = SeesBatches()
    quiet_trainer(max_steps=12, callbacks=[hooks]).fit(module)
    assert hooks.ends and all(isinstance(batch, kind) for batch in hooks.ends)
    assert all(batch is None or isinstance(batch, kind) for batch in hooks.starts)
    assert hooks.starts[0] is None
    if kind is ReplayBufferSamples:
        assert hooks.ends[0].obs.shape == (8, 4)  # a sampled batch of 8 transitions


class WeightsSeen(L.Callback):
    """The Q-network's weights after every update (to compare with those each collection acted with)."""

    def __init__(self):
        self.after_update = []

    def on_update_end(self, trainer, pl_module, loss):
        self.after_update.append(pl_module.q_network.head.weight.detach().clone())


def test_each_collection_acts_with_the_weights_the_previous_update_left():
    """8 updates per training step, one collection before each (train_freq=1): every collection after the warm-up
    acts with the weights the update just before it left (no batch generated ahead of its update)."""
    module = DQNModule(num_envs=2, learning_starts=20, batch_size=8, train_freq=1, updates_per_step=8, seed=3)
    acted_with = []
    explore = module.explore

    def recording_explore(obs, generator):
        acted_with.append(module.q_network.head.weight.detach().clone())
        return explore(obs, generator)

    module.explore = recording_explore
    weights = WeightsSeen()
    quiet_trainer(max_steps=16, callbacks=[weights]).fit(module)
    first_update_collection = len(acted_with) - 16  # the warm-up's random steps act without the network
    assert first_update_collection >= 0 and len(weights.after_update) == 16
    for k in range(1, 16):  # the collection of update k acted with the weights update k - 1 left
        assert torch.equal(acted_with[first_update_collection + k], weights.after_update[k - 1]), k
    assert not torch.equal(weights.after_update[0], weights.after_update[14])  # the weights did move


def test_an_epoch_with_skipped_updates_ends_at_its_slots():
    """target_kl stops every rollout after its first epoch (2 of 4 updates): Lightning's epoch still ends after the
    rollout's 4 slots, so 3 epochs are 3 rollouts and 12 counted updates (a loader counting only the batches pulled
    would run a second rollout inside each epoch)."""
    module = PPOModule(
        num_envs=4, num_steps_per_rollout=8, update_epochs=2, num_minibatches=2, target_kl=1e-12, lr=1e-2, seed=1
    )
    trainer = quiet_trainer(max_epochs=3)
    trainer.fit(module)
    assert (trainer.global_step, trainer.current_epoch, module.source.num_rollouts) == (12, 3, 3)


def test_a_run_resumed_inside_an_epoch_ends_its_epochs_where_a_straight_one_does(tmp_path):
    """Epochs of 10 updates, 4 per training step (4 + 4 + 2), a checkpoint every 4 updates, a crash after 8 (inside
    epoch 0), resumed for max_epochs=3: the resumed epoch 0 ends after its 2 remaining updates (Lightning counts the
    resumed training steps, not the updates, as pulled), 30 updates in 3 epochs, the straight run's weights."""

    def build():
        return SACModule(
            num_envs=2, learning_starts=16, batch_size=8, hidden_sizes=(8,), steps_per_epoch=10, updates_per_step=4
        )

    class CrashAfter8(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if trainer.global_step >= 8:
                raise RuntimeError("crash")

    def fit(module, callbacks=(), ckpt_path=None):
        save = ModelCheckpoint(dirpath=tmp_path, filename="last", every_n_train_steps=4)
        trainer = quiet_trainer(max_epochs=3, callbacks=[save, *callbacks], enable_checkpointing=True)
        trainer.fit(module, ckpt_path=ckpt_path)
        return trainer

    with pytest.raises(RuntimeError, match="crash"):
        fit(build(), [CrashAfter8()])
    assert torch.load(tmp_path / "last.ckpt", weights_only=True)["global_step"] == 8
    resumed = build()
    trainer = fit(resumed, ckpt_path=tmp_path / "last.ckpt")
    straight = build()
    straight_trainer = quiet_trainer(max_epochs=3)
    straight_trainer.fit(straight)
    assert (trainer.global_step, trainer.current_epoch) == (straight_trainer.global_step, 3) == (30, 3)
    for name, value in straight.state_dict().items():
        assert torch.equal(resumed.state_dict()[name], value), name


def test_lightnings_note_on_the_dataloader_iter_form_is_not_shown():
    """Lightning calls training_step(self, dataloader_iter) experimental, twice per run, before the module's setup:
    the layers use it by design, so the module's RunGuard silences it from configure_callbacks on."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_trainer(max_steps=2).fit(PPOModule(num_envs=2, num_steps_per_rollout=4, num_minibatches=1, seed=1))
    assert not [str(w.message) for w in caught if "dataloader_iter" in str(w.message)]
    with warnings.catch_warnings(record=True) as caught:  # the filters are gone after the run
        warnings.simplefilter("always")
        warnings.warn(
            "Found `dataloader_iter` argument in the `training_step` (a later one)", UserWarning, stacklevel=1
        )
    assert len(caught) == 1


class LogsLikeAnyCallback(L.Callback):
    """A user's callback logging as it would with any LightningModule: no batch_size."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        pl_module.log("mine/step_value", 2.0)
        pl_module.log("mine/epoch_mean", float(trainer.global_step), on_step=False, on_epoch=True)
        pl_module.log_dict({"mine/dict_value": 3.0})


def test_a_users_self_log_works_without_batch_size():
    """Lightning refuses self.log(...) without batch_size under training_step(self, dataloader_iter); the modules
    default it to 1: each value counts once in an epoch's mean (here the mean of global_step over 2 DQN training
    steps of 4 updates each: (4 + 8) / 2)."""
    module = DQNModule(num_envs=2, learning_starts=20, batch_size=8, steps_per_epoch=8, updates_per_step=4, seed=1)
    trainer = quiet_trainer(max_steps=8, callbacks=[LogsLikeAnyCallback()])
    trainer.fit(module)
    metrics = trainer.callback_metrics
    assert metrics["mine/step_value"] == 2.0 and metrics["mine/dict_value"] == 3.0
    assert metrics["mine/epoch_mean"] == 6.0
