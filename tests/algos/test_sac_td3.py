"""SAC and TD3 on the off-policy layer: one clock, the updates' parts, errors, acting and export."""

import math

import gymnasium as gym
import lightning as L
import numpy as np
import pytest
import torch

from rl_lightning import SACModule, TD3Module

TINY = dict(buffer_size=400, batch_size=32, learning_starts=64, steps_per_epoch=10, hidden_sizes=(16, 16))


def _trainer(max_steps, **kwargs) -> L.Trainer:
    defaults = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    return L.Trainer(max_steps=max_steps, **{**defaults, **kwargs})


def test_a_discrete_action_space_is_refused_by_td3_naming_the_space_and_the_algorithms_for_it():
    # SACModule learns Discrete actions (tests/algos/test_sac_discrete.py).
    with pytest.raises(ValueError, match=r"Discrete\(2\) is 'discrete'.*box action spaces: use VPGModule or DQNModule"):
        TD3Module(env_id="CartPole-v1")


@pytest.mark.parametrize("cls", [SACModule, TD3Module])
def test_actions_are_in_the_bounds_greedy_is_the_mode_and_numpy_gives_numpy(cls):
    module = cls(**TINY)
    obs = torch.randn(64, 3) * 10
    for greedy in (True, False):
        actions = module.act(obs, greedy=greedy)
        assert actions.shape == (64, 1) and actions.dtype == torch.float32 and (actions.abs() <= 2).all()
    assert torch.equal(module.act(obs, greedy=True), module.actor.mode(obs))
    env = gym.make("Pendulum-v1")
    observation, _ = env.reset(seed=0)
    action = module.act(observation, greedy=True)
    assert isinstance(action, np.ndarray) and action.shape == (1,)
    env.step(action)


class _RecordUpdates(L.Callback):
    """Per update: the learning rate, the actor's and target critic's weights after the update."""

    def __init__(self):
        self.lrs, self.actor, self.target = [], [], []

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.lrs.append([group["lr"] for group in optimizer.param_groups])

    def on_update_end(self, trainer, pl_module, loss):
        self.actor.append(torch.cat([p.detach().flatten() for p in pl_module.actor.parameters()]).clone())
        self.target.append(torch.cat([p.detach().flatten() for p in pl_module.target_critic.parameters()]).clone())


def test_one_clock_for_sac_max_steps_env_steps_progress_bar_log_cadence_and_the_learning_rate():
    """SAC updates actor, critics and temperature with one optimizer step (three parameter groups), so
    max_steps counts updates: 40 updates of 2 envs x 3 steps per 2 gradient steps take 64 (warm-up) + 20 x 6
    env steps, as planned; the progress bar plans the same; metrics are written every log_every_n_steps
    updates; every group has the LR."""
    from rl_lightning.progress import RLProgressBar

    module = SACModule(num_envs=2, train_freq=3, gradient_steps=2, lr=1e-3, **TINY)
    record, bar = _RecordUpdates(), RLProgressBar()
    logged = []

    class Logged(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if "losses/qf_loss" in trainer.callback_metrics and trainer.global_step % 10 == 0:
                logged.append(trainer.global_step)

    trainer = _trainer(40, log_every_n_steps=10, callbacks=[record, bar, Logged()], enable_progress_bar=True)
    trainer.fit(module)
    assert trainer.global_step == 40 and len(record.lrs) == 40
    assert module.env_steps == module.planned_env_steps(40) == 64 + 20 * 6 == bar._total
    assert module.optimizer_steps_for(64 + 20 * 6) == 40
    assert all(lrs == [1e-3] * 3 for lrs in record.lrs)
    assert trainer.callback_metrics["charts/learning_rate"] == 1e-3
    assert {"losses/qf_loss", "losses/actor_loss", "losses/alpha", "losses/alpha_loss"} <= set(trainer.callback_metrics)
    assert logged == [10, 20, 30, 40]
    # Polyak targets after every update: the target critic moves every step
    assert all(not torch.equal(a, b) for a, b in zip(record.target, record.target[1:], strict=False))


def test_td3_updates_the_actor_and_the_targets_every_policy_delay_steps():
    module = TD3Module(policy_delay=3, **TINY)
    record = _RecordUpdates()
    _trainer(9, callbacks=[record]).fit(module)
    changed = [not torch.equal(a, b) for a, b in zip(record.actor, record.actor[1:], strict=False)]
    # after steps 1..9 the actor moves at steps 3, 6, 9: between records 2->3 and 5->6 (0-based 2, 5)
    assert changed == [False, True, False, False, True, False, False, True]
    # the targets move at the same steps, after this recorder has looked (callbacks run in order)
    target_changed = [not torch.equal(a, b) for a, b in zip(record.target, record.target[1:], strict=False)]
    assert target_changed == [False, False, True, False, False, True, False, False]


def test_ddpg_is_a_td3_setting():
    module = TD3Module(policy_delay=1, target_noise=0.0, num_critics=1, **TINY)
    assert module.critic.num_critics == 1
    record = _RecordUpdates()
    _trainer(4, callbacks=[record]).fit(module)
    assert all(not torch.equal(a, b) for a, b in zip(record.actor, record.actor[1:], strict=False))


def test_a_fixed_alpha_is_not_trained_and_the_target_entropy_defaults_to_minus_the_action_dims():
    fixed = SACModule(alpha=0.1, **TINY)
    assert not isinstance(fixed.log_alpha, torch.nn.Parameter) and fixed.alpha.item() == pytest.approx(0.1)
    assert len(fixed.configure_optimizers().param_groups) == 2
    _trainer(3).fit(fixed)
    assert fixed.alpha.item() == pytest.approx(0.1)
    learned = SACModule(env_id="ContinuousProbe2-v0", **TINY)
    assert learned.target_entropy == -2.0 and learned.alpha.item() == 1.0


@pytest.mark.parametrize(("name", "value"), [("alpha_init", 0.5), ("target_entropy", -3.0)])
def test_the_learned_temperatures_settings_are_refused_with_a_fixed_alpha(name, value):
    with pytest.raises(
        ValueError,
        match=rf"{name} is set \({value}\) but alpha=0.1 fixes the temperature: it would have no effect; "
        rf"use alpha=None to learn it, or leave {name} at its default",
    ):
        SACModule(alpha=0.1, **{name: value})
    assert SACModule(alpha=None, **{name: value}).hparams[name] == value
    SACModule(alpha=0.1, alpha_init=1.0, target_entropy=None)  # the defaults written out (configs/*.yaml)


def test_max_grad_norm_clips_every_update_of_all_three_groups():
    norms = []

    class Clipped(SACModule):
        def configure_optimizers(self):
            optimizer = super().configure_optimizers()
            step = optimizer.step

            def recording_step(closure=None):
                result = step(closure)
                grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
                norms.append(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])).item())
                return result

            optimizer.step = recording_step
            return optimizer

    _trainer(5).fit(Clipped(max_grad_norm=0.01, lr=1e-3, **TINY))
    assert len(norms) == 5 and max(norms) <= 0.01 + 1e-6


def test_a_diverging_run_stops_with_a_floating_point_error():
    with pytest.raises(FloatingPointError, match="became NaN or infinite"):
        _trainer(20).fit(SACModule(lr=1e30, **TINY))


@pytest.mark.parametrize("cls", [SACModule, TD3Module])
def test_export_gives_the_greedy_action_in_the_bounds(cls, tmp_path):
    module = cls(env_id="ContinuousProbe2-v0", **TINY)
    policy = torch.jit.load(str(module.export_policy(tmp_path / "policy.pt")))
    obs = torch.randn(7, 1)
    torch.testing.assert_close(policy(obs), module.act(obs, greedy=True))
    assert (policy(obs * 1e3).abs() <= 1).all()


@pytest.mark.parametrize("cls", [SACModule, TD3Module])
def test_bf16_mixed_precision_fits(cls):
    module = cls(**TINY)
    _trainer(5, precision="bf16-mixed").fit(module)
    assert all(torch.isfinite(p).all() for p in module.parameters())


def test_hyper_parameters_are_checked():
    with pytest.raises(ValueError, match="tau"):
        SACModule(tau=0.0)
    with pytest.raises(ValueError, match="policy_delay"):
        TD3Module(policy_delay=0)
    with pytest.raises(ValueError, match="n_step"):
        SACModule(n_step=0)
    with pytest.raises(TypeError, match="gradient_steps"):
        TD3Module(gradient_steps=1.5)
    with pytest.raises(ValueError, match="learning_starts"):
        SACModule(buffer_size=100, learning_starts=1000)
    assert math.isclose(SACModule(alpha=0.0).alpha.item(), 0.0)


def test_onnx_export_of_sac_matches_the_greedy_action(tmp_path):
    onnxruntime = pytest.importorskip("onnxruntime")
    module = SACModule(env_id="ContinuousProbe2-v0", **TINY)
    path = module.export_policy(tmp_path / "policy.onnx")
    obs = np.random.default_rng(0).normal(size=(5, 1)).astype(np.float32)
    (actions,) = onnxruntime.InferenceSession(str(path)).run(None, {"obs": obs})
    np.testing.assert_allclose(actions, module.act(obs, greedy=True), atol=1e-5)


def test_dqn_trains_with_n_step_returns():
    from rl_lightning import DQNModule

    module = DQNModule(env_id="Probe3-v0", num_envs=4, learning_starts=16, batch_size=16, n_step=2)
    _trainer(10).fit(module)
    batch = module.source.buffer.sample(64)
    # Probe3: obs 0 -> reward 0 -> obs 1 -> reward 1, terminal: a 2-step sample from obs 0 sums 0 + gamma * 1
    from_start = batch.obs[:, 0] == 0
    assert torch.allclose(batch.rewards[from_start], torch.tensor(0.99)) and batch.terminated[from_start].all()
