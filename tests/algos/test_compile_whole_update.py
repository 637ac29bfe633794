"""``compile={"whole_update": True}``: zeroing, loss, backward, clipping, the optimizer step and the per-update Polyak
target update as one compiled function (``rl_lightning.compiling.WholeUpdate``).

Each run is compared with the eager run of the same seed: the same updates to float tolerance (the compiled Adam
rounds differently from the fused kernel, so not bit for bit). One run compiles with inductor (DQN); the others use
``aot_eager``, which traces the same graphs without inductor's code generation (seconds on CI's two cores).
"""

import copy

import lightning as L
import pytest
import torch

from rl_lightning import DQNModule, PPOModule, SACModule, TD3Module, VPGModule
from rl_lightning.callbacks.target_sync import TargetNetworkSync
from rl_lightning.compiling import WholeUpdate, check_compile
from tests.quiet_trainer import quiet_trainer

WHOLE = {"whole_update": True}
WHOLE_AOT = {"whole_update": True, "backend": "aot_eager"}


class _Record(L.Callback):
    """Every update's loss and learning rate."""

    def __init__(self):
        self.losses: list[float] = []
        self.lrs: list[float] = []

    def on_update_end(self, trainer, module, loss):
        self.losses.append(float(loss))
        self.lrs.append(float(trainer.optimizers[0].param_groups[0]["lr"]))


def _fit(module, max_steps, **trainer_kwargs):
    record = _Record()
    trainer = quiet_trainer(
        max_steps=max_steps, callbacks=[record, *trainer_kwargs.pop("callbacks", [])], **trainer_kwargs
    )
    trainer.fit(module)
    return module, record


def _assert_same_updates(eager, whole, rtol, atol):
    (eager_module, eager_record), (module, record) = eager, whole
    assert len(record.losses) == len(eager_record.losses) > 0
    torch.testing.assert_close(torch.tensor(record.losses), torch.tensor(eager_record.losses), rtol=rtol, atol=atol)
    torch.testing.assert_close(torch.tensor(record.lrs), torch.tensor(eager_record.lrs), rtol=1e-6, atol=0.0)
    eager_weights, weights = eager_module.state_dict(), module.state_dict()
    assert eager_weights.keys() == weights.keys()
    for name, weight in eager_weights.items():
        torch.testing.assert_close(weights[name], weight, rtol=rtol, atol=atol, msg=name)
    assert module.global_step == eager_module.global_step
    assert module.env_steps == eager_module.env_steps


def test_check_compile_takes_whole_update_as_a_bool():
    assert check_compile({"whole_update": True}) == {"whole_update": True}
    assert check_compile({"whole_update": False, "backend": "aot_eager"}) == {
        "whole_update": False,
        "backend": "aot_eager",
    }
    with pytest.raises(TypeError, match="whole_update must be a bool, got 'yes'"):
        check_compile({"whole_update": "yes"})
    with pytest.raises(
        ValueError, match=r"unknown torch.compile arguments \['whole'\]; allowed: .*rl_lightning's whole_update"
    ):
        check_compile({"whole": True})


def test_dqn_whole_update_matches_eager_with_inductor():
    def make(compile):
        return DQNModule(seed=3, learning_starts=200, steps_per_epoch=20, compile=compile)

    eager, whole = _fit(make(False), 30), _fit(make(WHOLE), 30)
    _assert_same_updates(eager, whole, rtol=1e-4, atol=1e-5)
    module = whole[0]
    # One compiled function per update, named after the loss it wraps; DQN's hard target copy (every 160 env steps)
    # stays the callback's, and clipping (max_grad_norm=10) happened inside.
    assert set(module.compile_seconds) == {"dqn_loss"}
    assert module.compiled.whole_update is None  # given back at the end of the run


def test_sac_whole_update_moves_the_targets_inside_and_gives_them_back():
    def make(compile):
        return SACModule(seed=1, learning_starts=300, steps_per_epoch=20, hidden_sizes=(32, 32), compile=compile)

    eager = _fit(make(False), 30)
    seen = {}

    class Inspect(L.Callback):
        def on_update_end(self, trainer, module, loss):
            whole = module.compiled.whole_update
            sync = next(c for c in trainer.callbacks if isinstance(c, TargetNetworkSync))
            moved = whole is not None and whole.polyak is not None and whole.moves_targets_of is sync
            seen.setdefault("polyak", moved and not sync._handed_over)

    module, record = _fit(make(WHOLE_AOT), 30, callbacks=[Inspect()])
    _assert_same_updates(eager, (module, record), rtol=1e-5, atol=1e-6)
    assert seen["polyak"] is True  # the Polyak update ran inside the compiled function
    # The targets moved as the eager callback moves them.
    for name, weight in eager[0].target_critic.state_dict().items():
        torch.testing.assert_close(module.target_critic.state_dict()[name], weight, rtol=1e-5, atol=1e-6)
    # After the run the sync moves the targets itself again.
    sync = next(c for c in module.trainer.callbacks if isinstance(c, TargetNetworkSync))
    assert sync.num_updates == 30  # the callback counted every update
    assert module.compiled.whole_update is None and not sync._handed_over


def test_td3_whole_update_keeps_the_delayed_target_update_in_its_callback():
    def make(compile):
        return TD3Module(seed=1, learning_starts=300, steps_per_epoch=20, hidden_sizes=(32, 32), compile=compile)

    eager, whole = _fit(make(False), 24), _fit(make(WHOLE_AOT), 24)
    _assert_same_updates(eager, whole, rtol=1e-5, atol=1e-6)
    assert whole[0].compiled.compile_seconds.keys() == {"td3_losses"}


def test_ppo_whole_update_follows_the_annealed_learning_rate_without_recompiling():
    from torch._dynamo.backends.debugging import aot_eager

    graphs = []

    def counting_backend(graph, example_inputs, **kwargs):
        graphs.append(graph)
        return aot_eager(graph, example_inputs, **kwargs)

    def make(compile):
        return PPOModule(
            seed=1, num_envs=8, num_steps_per_rollout=16, update_epochs=2, num_minibatches=1, anneal_lr=True,
            compile=compile,
        )  # fmt: skip

    eager = _fit(make(False), 8)
    module, record = _fit(make({"whole_update": True, "backend": counting_backend}), 8)
    _assert_same_updates(eager, (module, record), rtol=1e-5, atol=1e-6)
    assert len(set(record.lrs)) == 4  # four rollouts, four learning rates: an input of the compiled function
    first_run = len(graphs)
    assert first_run > 0
    # A second module compiles its own copy (compiling.torch_compile: its own recompilation limit): the same graphs
    # once more, and none for its four learning rates either.
    _fit(make({"whole_update": True, "backend": counting_backend}), 8)
    assert len(graphs) == 2 * first_run


def test_vpg_whole_update_matches_eager_over_a_few_updates():
    # VPG samples its actions from the weights: a few updates, before rounding differences change a sampled action.
    def make(compile):
        return VPGModule(seed=1, num_envs=8, compile=compile)

    eager, whole = _fit(make(False), 3), _fit(make(WHOLE_AOT), 3)
    _assert_same_updates(eager, whole, rtol=1e-5, atol=1e-5)


def test_whole_update_falls_back_to_the_compiled_loss_where_lightning_steps_the_optimizer():
    class Hook(L.Callback):
        def on_before_optimizer_step(self, trainer, module, optimizer):
            pass

    module = DQNModule(seed=0, learning_starts=64, steps_per_epoch=10, compile=WHOLE_AOT)
    with pytest.warns(
        UserWarning,
        match=r"compiles the update's loss; these parts run eagerly: the optimizer step, gradient clipping and "
        r"target update, by Lightning's loop \(it needs one device in float32",
    ):
        _fit(module, 10, callbacks=[Hook()])
    assert module.global_step == 10
    assert module.compile_seconds.keys() == {"dqn_loss"}


def test_compile_true_is_the_whole_update_and_one_warning_names_what_runs_eagerly():
    """``compile=True`` compiles the whole update by default (``{"whole_update": False}``: the loss only); a
    gymnasium env's step cannot be compiled, and the run's one warning says so (the update is still compiled)."""
    module = DQNModule(seed=0, learning_starts=64, steps_per_epoch=10, compile={"backend": "aot_eager"})
    assert module.compiled.wants_whole_update
    assert not DQNModule(compile={"whole_update": False}).compiled.wants_whole_update
    assert not DQNModule().compiled.wants_whole_update
    gym_module = DQNModule(
        seed=0, learning_starts=64, steps_per_epoch=10, env_backend="gymnasium", compile={"backend": "aot_eager"}
    )
    with pytest.warns(
        UserWarning, match=r"these parts run eagerly: the env step \('CartPole-v1' is a gymnasium env"
    ) as said:
        _fit(gym_module, 4)
    eager_parts = [str(warning.message) for warning in said if "run eagerly" in str(warning.message)]
    assert len(eager_parts) == 1 and "optimizer step" not in eager_parts[0]
    assert gym_module.global_step == 4 and gym_module.compile_seconds.keys() == {"dqn_loss"}


def test_whole_update_falls_back_for_an_overridden_update_loss():
    class Extra(DQNModule):
        def update_loss(self, batch):
            return super().update_loss(batch) + 0.0 * self.q_network(batch.obs).sum()

    module = Extra(seed=0, learning_starts=64, steps_per_epoch=10, compile=WHOLE_AOT)
    with pytest.warns(UserWarning, match="its update_loss is overridden"):
        _fit(module, 10)
    assert module.global_step == 10


def test_an_eager_run_resumes_from_a_whole_update_checkpoint(tmp_path):
    class SaveAfterFirstRollout(L.Callback):
        def on_train_epoch_end(self, trainer, module):
            if trainer.current_epoch == 0:
                trainer.save_checkpoint(tmp_path / "mid.ckpt")

    settings = dict(seed=1, num_envs=8, num_steps_per_rollout=16, update_epochs=2, num_minibatches=1, anneal_lr=True)
    module = PPOModule(**settings, compile=WHOLE_AOT)
    quiet_trainer(max_steps=4, callbacks=[SaveAfterFirstRollout()]).fit(module)
    saved = torch.load(tmp_path / "mid.ckpt", weights_only=True)["optimizer_states"][0]
    assert isinstance(saved["param_groups"][0]["lr"], float)
    assert [float(state["step"]) for state in saved["state"].values()] == [2.0] * len(saved["state"])  # Adam's format
    resumed = PPOModule(**settings)
    quiet_trainer(max_steps=4).fit(resumed, ckpt_path=tmp_path / "mid.ckpt")
    uninterrupted = PPOModule(**settings)
    quiet_trainer(max_steps=4).fit(uninterrupted)
    for name, weight in uninterrupted.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[name], weight, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize(
    ("optimizer_class", "settings"),
    [
        (torch.optim.Adam, dict(lr=1e-2)),
        (torch.optim.Adam, dict(lr=1e-2, weight_decay=0.1, eps=1e-5, betas=(0.8, 0.99))),
        (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1)),
    ],
)
def test_the_compiled_adam_step_is_torchs(optimizer_class, settings):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    reference = copy.deepcopy(net)
    optimizer, reference_optimizer = (
        optimizer_class(net.parameters(), **settings),
        optimizer_class(reference.parameters(), **settings),
    )
    whole = WholeUpdate(optimizer, clipping=(0.5, "norm"), polyak=None, compile_arguments={"backend": "aot_eager"})
    update = whole(_square_loss)
    x = torch.randn(64, 3)
    for _ in range(10):
        update(net, x)
        reference_optimizer.zero_grad()
        _square_loss(reference, x)[0].backward()
        torch.nn.utils.clip_grad_norm_(list(reference.parameters()), 0.5)
        reference_optimizer.step()
    for param, expected in zip(net.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(param, expected, rtol=1e-5, atol=1e-6)
    for param, expected in zip(net.parameters(), reference.parameters(), strict=True):
        state, expected_state = optimizer.state[param], reference_optimizer.state[expected]
        assert state.keys() == expected_state.keys()
        torch.testing.assert_close(state["exp_avg_sq"], expected_state["exp_avg_sq"], rtol=1e-5, atol=1e-9)
        assert float(state["step"]) == float(expected_state["step"]) == 10.0


def _square_loss(net, x):
    loss = net(x).pow(2).mean()
    return loss, loss.detach()


@pytest.mark.parametrize(
    ("optimizer", "reason"),
    [
        (lambda params: torch.optim.SGD(params, lr=0.1), "the optimizer is SGD"),
        (lambda params: torch.optim.Adam(params, amsgrad=True), "no amsgrad"),
    ],
)
def test_whole_update_says_which_optimizers_it_cannot_step(optimizer, reason):
    assert reason in WholeUpdate.unsupported(optimizer(torch.nn.Linear(2, 2).parameters()))
    assert WholeUpdate.unsupported(torch.optim.Adam(torch.nn.Linear(2, 2).parameters(), fused=True)) is None


def test_whole_update_falls_back_for_a_former_style_training_step_override():
    with pytest.warns(DeprecationWarning):

        class Former(DQNModule):
            def training_step(self, batch, batch_idx):
                return super().training_step(batch, batch_idx)

    module = Former(seed=0, learning_starts=64, steps_per_epoch=10, compile=WHOLE_AOT)
    with pytest.warns(UserWarning, match="its update_loss is overridden"):
        _fit(module, 10)
    assert module.global_step == 10
