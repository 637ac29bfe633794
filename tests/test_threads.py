"""A bare ``Trainer().fit(module)`` on the CPU takes one torch thread for small networks, as the scripts do, unless
the user chose a number; the count is restored after the fit."""

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import Callback

from rl_lightning import VPGModule
from rl_lightning import threads as threads_module


class _Threads(Callback):
    def on_train_start(self, trainer, pl_module):
        self.during_fit = torch.get_num_threads()


def _fit(module) -> int:
    spy = _Threads()
    L.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False, callbacks=[spy]).fit(
        module
    )
    return spy.during_fit


@pytest.fixture
def two_threads_by_default(monkeypatch):
    """As in a process that never set a thread count, on a machine of 2 cores."""
    previous = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads_module, "THREADS_AT_IMPORT", 2)
    monkeypatch.setattr(threads_module, "_chosen", None)
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(previous)


def test_a_fit_of_small_networks_uses_one_thread_and_restores_the_default(two_threads_by_default):
    assert _fit(VPGModule(num_envs=4, num_steps_per_rollout=8)) == 1
    assert torch.get_num_threads() == 2  # restored


def test_a_thread_count_the_user_chose_or_large_networks_are_left_alone(two_threads_by_default, monkeypatch):
    torch.set_num_threads(3)  # the user's choice after importing rl_lightning
    assert _fit(VPGModule(num_envs=4, num_steps_per_rollout=8)) == 3
    torch.set_num_threads(2)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert _fit(VPGModule(num_envs=4, num_steps_per_rollout=8)) == 2
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr(threads_module, "SMALL_NETWORK_PARAMETERS", 10_000)  # 10,934 parameters: not small
    assert _fit(VPGModule(num_envs=4, num_steps_per_rollout=8)) == 2


def test_a_count_chosen_through_use_threads_is_kept_even_when_it_is_torch_s_default(two_threads_by_default):
    # the CLI's --num_threads 2 on a 2-core machine: the same count as torch's default, but chosen
    threads_module.use_threads(2)
    assert _fit(VPGModule(num_envs=4, num_steps_per_rollout=8)) == 2
