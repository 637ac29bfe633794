import copy

import pytest
import torch
from fake_module import FakeModule
from torch import nn

from rl_lightning.callbacks.target_sync import TargetNetworkSync, update_target_network


def _module():
    torch.manual_seed(0)
    online = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    target = copy.deepcopy(online).requires_grad_(False)
    with torch.no_grad():
        for param in online.parameters():
            param.add_(1.0)
        online[1].running_mean.fill_(7.0)
    return FakeModule(q_network=online, target_network=target, env_steps=0)


def _same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


def test_hard_sync_copies_every_n_env_steps():
    module = _module()
    callback = TargetNetworkSync(every_n_env_steps=100)
    callback.on_train_start(None, module)
    synced_at = []
    for _ in range(8):  # training steps of 30 env steps: 30 60 90 120 150 180 210 240
        module.env_steps += 30
        before = copy.deepcopy(module.target_network)
        callback.on_train_batch_end(None, module, None, None, 0)
        if not _same(before, module.target_network):
            synced_at.append(module.env_steps)
            assert _same(module.target_network, module.q_network)  # parameters and buffers
        with torch.no_grad():  # the online net keeps learning
            module.q_network[0].weight.add_(0.1)
    assert synced_at == [120, 210]  # first step past each multiple of 100
    assert callback.num_updates == 2
    assert callback.state_dict() == {"num_updates": 2, "last_period": 2}


def test_soft_update_is_polyak_averaging_after_every_step():
    module = _module()
    online = [p.clone() for p in module.q_network.parameters()]
    target = [p.clone() for p in module.target_network.parameters()]
    callback = TargetNetworkSync(every_n_env_steps=None, tau=0.1)
    callback.on_train_start(None, module)
    for _ in range(2):
        module.env_steps += 1
        callback.on_train_batch_end(None, module, None, None, 0)
        target = [0.1 * o + 0.9 * t for o, t in zip(online, target, strict=True)]
    for expected, actual in zip(target, module.target_network.parameters(), strict=True):
        torch.testing.assert_close(actual, expected)
    assert module.target_network[1].running_mean.eq(7.0).all()  # buffers are copied


def test_update_target_network_hard_copy():
    module = _module()
    update_target_network(module.target_network, module.q_network, tau=1.0)
    assert _same(module.target_network, module.q_network)


def test_every_pair_the_module_names_is_updated():
    module, other = _module(), _module()
    module.target_network_pairs = lambda: [
        (module.target_network, module.q_network),
        (other.target_network, other.q_network),
    ]
    callback = TargetNetworkSync(every_n_env_steps=None)
    callback.on_train_start(None, module)
    callback.on_train_batch_end(None, module, None, None, 0)
    assert _same(module.target_network, module.q_network) and _same(other.target_network, other.q_network)


def test_a_module_without_target_networks_is_refused():
    from rl_lightning import VPGModule

    with pytest.raises(TypeError, match=r"TargetNetworkSync.*VPGModule lacks target_network_pairs"):
        TargetNetworkSync().on_train_start(None, VPGModule(env_id="Probe1-v0"))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"every_n_env_steps": 0}, ValueError, "every_n_env_steps"),
        ({"every_n_env_steps": 1.5}, TypeError, "every_n_env_steps"),
        ({"tau": 0.0}, ValueError, "tau"),
        ({"tau": 1.5}, ValueError, "tau"),
    ],
)
def test_validation(kwargs, error, match):
    with pytest.raises(error, match=match):
        TargetNetworkSync(**kwargs)
