"""UpdateCallback: the one per-update hook. The loop of an rl_lightning module calls it at every update (several
per training step); on a LightningModule without that loop the batch hooks call it, once per training step."""

import lightning as L
import torch
from quiet_trainer import quiet_trainer
from torch.utils.data import DataLoader, TensorDataset

from rl_lightning import PPOModule
from rl_lightning.callbacks import TargetNetworkSync, UpdateCallback
from rl_lightning.callbacks.updates import update_hook_owners


class Counting(UpdateCallback):
    def __init__(self):
        self.starts: list[int] = []
        self.ends: list[tuple[int, float]] = []

    def on_update_start(self, trainer, pl_module):
        self.starts.append(trainer.global_step)

    def on_update_end(self, trainer, pl_module, loss):
        self.ends.append((trainer.global_step, float(loss)))


def test_the_loop_calls_it_at_every_update_of_a_training_step():
    # One rollout per training step: 2 epochs x 2 minibatches = 4 updates each, 3 rollouts = 12 updates.
    module = PPOModule(num_envs=4, num_steps_per_rollout=8, update_epochs=2, num_minibatches=2, seed=0)
    counting = Counting()
    trainer = quiet_trainer(max_steps=12, callbacks=[counting])
    trainer.fit(module)
    assert trainer.global_step == 12
    assert counting.starts == list(range(12))  # before each update's step
    assert [step for step, _ in counting.ends] == list(range(1, 13))  # after it: global_step counts it
    assert all(torch.isfinite(torch.tensor([loss for _, loss in counting.ends])))


class _Regression(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        data = TensorDataset(torch.randn(20, 2), torch.randn(20, 1))
        return DataLoader(data, batch_size=4)


def test_a_lightning_module_without_the_loop_gets_it_once_per_training_step():
    counting = Counting()
    trainer = quiet_trainer(max_steps=5, callbacks=[counting])
    trainer.fit(_Regression())
    assert counting.starts == [0, 1, 2, 3, 4]
    assert [step for step, _ in counting.ends] == [1, 2, 3, 4, 5]


def test_the_loop_calls_only_the_hooks_a_callback_overrides():
    class EndOnly(UpdateCallback):
        def on_update_end(self, trainer, pl_module, loss):
            pass

    class Plain(L.Callback):  # a plain callback that defines the hook is called too
        def on_update_start(self, trainer, pl_module):
            pass

    end_only, plain, sync, other = EndOnly(), Plain(), TargetNetworkSync(), L.Callback()
    callbacks = [end_only, plain, sync, other]
    assert update_hook_owners(callbacks, "on_update_start") == [plain]
    assert update_hook_owners(callbacks, "on_update_end") == [end_only, sync]
