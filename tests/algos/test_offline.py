"""The offline algorithms (BC, TD3+BC, IQL) and offline-to-online (``initial_dataset``): the losses against numbers
computed by hand, the modules' shapes and refusals, a datamodule fit, evaluation, act and exports, exact resume, and
SAC / TD3 seeded from a dataset."""

import math
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from quiet_trainer import quiet_trainer
from torch.utils.data import DataLoader

from rl_lightning import (
    BCModule,
    IQLModule,
    SACModule,
    TD3BCModule,
    TD3Module,
    Transitions,
    TransitionsDataModule,
    evaluate_policy,
)
from rl_lightning._checks import SettingsError
from rl_lightning.callbacks.evaluation import Evaluation
from rl_lightning.data.offline import episode_returns, transitions_from_arrays
from rl_lightning.data.offline_formats import episodes_to_rows, record_episodes, write_rows
from rl_lightning.data.replay import ReplayBufferSamples
from rl_lightning.envs import make_envs
from rl_lightning.offline_losses import (
    compute_awr_weights,
    compute_bc_loss,
    compute_discrete_bc_loss,
    compute_expectile_loss,
    compute_iql_q_target,
    compute_td3_bc_actor_loss,
    gaussian_log_prob,
    weighted_log_prob_loss,
)

SMALL = dict(hidden_sizes=(16, 16))


def random_transitions(env_id: str = "Pendulum-v1", episodes: int = 4, seed: int = 0) -> Transitions:
    """Uniformly random episodes of ``env_id`` (one env copy), as ``Transitions``."""
    envs = make_envs(env_id, 1, seed=seed)
    played, _ = record_episodes(envs, None, [0.0], num_episodes=episodes, seed=seed)
    return transitions_from_arrays(episodes_to_rows(played), env_id)


@pytest.fixture(scope="module")
def pendulum() -> Transitions:
    return random_transitions("Pendulum-v1", episodes=4)  # 800 transitions, each episode truncated at 200


def _datamodule(transitions: Transitions, seed: int = 0) -> TransitionsDataModule:
    return TransitionsDataModule(transitions, batch_size=32, steps_per_epoch=10, seed=seed)


# -- the losses, by hand ---------------------------------------------------------------------------------------------


def test_bc_losses():
    pred, actions = torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.tensor([[0.0, 2.0], [1.0, 1.0]])
    assert compute_bc_loss(pred, actions).item() == pytest.approx((1 + 0 + 4 + 9) / 4)
    logits = torch.tensor([[0.0, math.log(3.0)], [0.0, math.log(3.0)]])  # probabilities 1/4, 3/4
    loss = compute_discrete_bc_loss(logits, torch.tensor([1, 0]))
    assert loss.item() == pytest.approx((-math.log(0.75) + math.log(4.0)) / 2)


def test_td3_bc_actor_loss_and_its_lambda():
    q = torch.tensor([1.0, -3.0], requires_grad=True)
    policy_actions, actions = torch.tensor([[0.5], [0.0]]), torch.tensor([[0.0], [1.0]])
    loss, lam = compute_td3_bc_actor_loss(q, policy_actions, actions, alpha=2.5)
    assert lam.item() == pytest.approx(2.5 / 2.0)  # alpha / mean |Q|
    assert loss.item() == pytest.approx(-1.25 * -1.0 + (0.25 + 1.0) / 2)
    loss.backward()
    assert torch.allclose(q.grad, torch.tensor([-0.625, -0.625]))  # lambda carries no gradient: -lambda / batch
    zero, _ = compute_td3_bc_actor_loss(q.detach(), policy_actions, actions, alpha=0.0)
    assert zero.item() == pytest.approx(0.625)  # alpha 0: behaviour cloning


def test_expectile_loss_weighs_positive_differences_by_the_expectile():
    differences = torch.tensor([2.0, -1.0])
    assert compute_expectile_loss(differences, 0.7).item() == pytest.approx((0.7 * 4 + 0.3 * 1) / 2)
    assert compute_expectile_loss(differences, 0.5).item() == pytest.approx(0.5 * (4 + 1) / 2)  # half the MSE
    assert compute_expectile_loss(differences, 0.9).item() == pytest.approx((0.9 * 4 + 0.1 * 1) / 2)


def test_iql_q_target_bootstraps_from_v_unless_terminated():
    target = compute_iql_q_target(
        torch.tensor([1.0, 2.0]), torch.tensor([False, True]), torch.tensor([10.0, 10.0]), 0.9
    )
    assert torch.allclose(target, torch.tensor([10.0, 2.0]))


def test_awr_weights_are_clipped_and_carry_no_gradient():
    advantages = torch.tensor([0.0, 1.0, 10.0, 1000.0], requires_grad=True)
    weights = compute_awr_weights(advantages, beta=3.0, max_weight=100.0)
    assert torch.allclose(weights, torch.tensor([1.0, math.exp(3.0), 100.0, 100.0]))
    assert not weights.requires_grad and torch.isfinite(weights).all()


def test_gaussian_log_prob_and_the_weighted_loss():
    mean, log_std = torch.tensor([[0.0, 1.0]]), torch.tensor([0.0, math.log(2.0)])
    actions = torch.tensor([[1.0, 0.0]])
    expected = torch.distributions.Normal(mean, log_std.exp()).log_prob(actions).sum(-1)
    by_hand = (-0.5 - 0.5 * math.log(2 * math.pi)) + (-0.5 * 0.25 - math.log(2.0) - 0.5 * math.log(2 * math.pi))
    assert gaussian_log_prob(mean, log_std, actions).item() == pytest.approx(by_hand)
    assert torch.allclose(gaussian_log_prob(mean, log_std, actions), expected)
    loss = weighted_log_prob_loss(torch.tensor([-1.0, -2.0]), torch.tensor([1.0, 3.0]))
    assert loss.item() == pytest.approx(3.5)


def test_the_iql_update_is_the_papers_and_each_loss_reaches_only_its_own_parameters():
    from rl_lightning.algos.iql import iql_losses

    torch.manual_seed(0)
    module = IQLModule(**SMALL)
    with torch.no_grad():  # target critics unlike the online ones: the value and the advantages must read the targets
        for parameter in module.target_critic.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    obs, next_obs, actions = torch.randn(8, 3), torch.randn(8, 3), 2 * torch.rand(8, 1) - 1
    rewards, terminated = torch.randn(8), torch.tensor([False, True] * 4)
    batch = ReplayBufferSamples(obs, actions, rewards, terminated, next_obs)
    networks = (module.actor, module.actor_log_std, module.critic, module.target_critic, module.value)
    total, _ = iql_losses(*networks, batch, 0.9, 0.7, 3.0, 100.0)
    parts = {"actor": [*module.actor.parameters(), module.actor_log_std], "critic": list(module.critic.parameters())}
    parts["value"] = list(module.value.parameters())
    everything = [p for group in parts.values() for p in group]
    got = dict(zip(parts, _split(torch.autograd.grad(total, everything), parts), strict=True))
    # By hand, each loss alone from the paper's definitions.
    with torch.no_grad():
        target_q = module.target_critic(obs, actions).min(dim=0).values
        q_target = rewards + 0.9 * (~terminated).float() * module.value(next_obs)
        weights = torch.exp(3.0 * (target_q - module.value(obs))).clamp(max=100.0)
    value_loss = compute_expectile_loss(target_q - module.value(obs), 0.7)
    critic_loss = ((module.critic(obs, actions) - q_target) ** 2).mean(dim=1).sum()
    log_probs = torch.distributions.Normal(module.actor(obs), module.actor_log_std.exp()).log_prob(actions).sum(-1)
    actor_loss = -(weights * log_probs).mean()
    for name, loss in (("actor", actor_loss), ("critic", critic_loss), ("value", value_loss)):
        expected = torch.autograd.grad(loss, parts[name])
        for have, want in zip(got[name], expected, strict=True):
            assert torch.allclose(have, want, atol=1e-6), name
    assert torch.allclose(total, value_loss + critic_loss + actor_loss)
    assert all(p.grad is None for p in module.target_critic.parameters())


def _split(grads, parts):
    start = 0
    for group in parts.values():
        yield grads[start : start + len(group)]
        start += len(group)


# -- the modules -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("module_class", [BCModule, TD3BCModule, IQLModule])
def test_shapes_of_actions_and_exports(module_class, pendulum):
    module = module_class(**SMALL)
    quiet_trainer(max_steps=3).fit(module, datamodule=_datamodule(pendulum))
    obs = torch.randn(5, 3)
    greedy = module.act(obs, greedy=True)
    assert greedy.shape == (5, 1) and greedy.dtype == torch.float32 and greedy.abs().max() <= 2.0
    sampled = module.act(obs)
    assert sampled.shape == (5, 1) and sampled.abs().max() <= 2.0
    policy = module.greedy_policy()
    assert torch.equal(policy(obs), greedy)
    # The normaliser (where there is one) is in the export: the actor alone on raw observations differs.
    if module.obs_normalizer is not None:
        assert torch.equal(policy(obs), module.actor(module.obs_normalizer(obs)))
        assert not torch.equal(module.actor(obs), greedy)


def test_bc_on_discrete_actions_learns_the_dataset_action():
    obs = torch.randn(256, 4)
    actions = (obs[:, 2] > 0).long()  # a rule BC can copy
    transitions = Transitions(
        obs, actions, torch.ones(256), torch.zeros(256, dtype=torch.bool), torch.zeros(256, dtype=torch.bool), obs
    )
    module = BCModule(env_id="CartPole-v1", lr=1e-2, **SMALL)
    quiet_trainer(max_steps=150).fit(module, datamodule=TransitionsDataModule(transitions, batch_size=64))
    chosen = module.act(obs, greedy=True)
    assert chosen.dtype == torch.int64 and chosen.shape == (256,)
    assert (chosen == actions).float().mean() > 0.95


def test_refusals():
    with pytest.raises(ValueError, match=r"TD3BCModule cannot learn 'CartPole-v1'.*box"):
        TD3BCModule(env_id="CartPole-v1")
    with pytest.raises(ValueError, match="IQLModule cannot learn"):
        IQLModule(env_id="CartPole-v1")
    with pytest.raises(ValueError, match=r"expectile must be a finite number in \(0.0, 1.0\), got 1.0"):
        IQLModule(expectile=1.0)
    with pytest.raises(ValueError, match="alpha must be"):
        TD3BCModule(alpha=-1.0)
    with pytest.raises(ValueError, match="max_weight must be"):
        IQLModule(max_weight=0.0)
    with pytest.raises(TypeError, match="dataset must be a non-empty str, got int 5"):
        BCModule(dataset=5)
    with pytest.raises(TypeError, match="normalize_obs must be a bool"):
        BCModule(normalize_obs="false")
    with pytest.raises(TypeError, match="scale_rewards must be a bool"):
        IQLModule(scale_rewards=1)


def test_a_fit_needs_a_dataset(pendulum):
    with pytest.raises(SettingsError, match="trains on a dataset and steps no env: pass one"):
        quiet_trainer(max_steps=2).fit(TD3BCModule(**SMALL))
    module = BCModule(dataset="somewhere.npz", **SMALL)
    with pytest.raises(SettingsError, match="was given a datamodule too"):
        quiet_trainer(max_steps=2).fit(module, datamodule=_datamodule(pendulum))


def test_statistics_need_the_whole_dataset(pendulum):
    batches = [ReplayBufferSamples(*(pendulum[i][:32] for i in (0, 1, 2, 3, 5)))] * 4

    class Plain(L.LightningDataModule):  # a datamodule with batches but no .transitions
        def train_dataloader(self):
            return DataLoader(batches, batch_size=None)

    with pytest.raises(SettingsError, match=r"has no \.transitions: use .*TransitionsDataModule.*normalize_obs=False"):
        quiet_trainer(max_steps=2).fit(TD3BCModule(**SMALL), datamodule=Plain())
    module = TD3BCModule(normalize_obs=False, **SMALL)  # needs none
    trainer = quiet_trainer(max_steps=3)
    trainer.fit(module, datamodule=Plain())
    assert trainer.global_step == 3


def test_the_dataset_statistics_are_the_datasets(pendulum):
    td3_bc = TD3BCModule(**SMALL)
    iql = IQLModule(normalize_obs=True, **SMALL)
    for module in (td3_bc, iql):
        trainer = quiet_trainer(max_steps=4)
        trainer.fit(module, datamodule=_datamodule(pendulum))
        stats = module.obs_normalizer.stats
        assert torch.allclose(stats.mean, pendulum.obs.double().mean(0))
        assert torch.allclose(stats.var, pendulum.obs.double().var(0, unbiased=False))
        assert stats.count.item() == pendulum.num_transitions == 800
        assert module.env_steps == trainer.global_step == 4  # the offline clock counts updates
    returns = episode_returns(pendulum)
    assert len(returns) == 4
    assert iql.reward_scale.item() == pytest.approx(1000.0 / float(returns.max() - returns.min()))
    assert IQLModule(scale_rewards=False).reward_scale.item() == 1.0


def test_a_fit_from_a_dataset_path(pendulum, tmp_path):
    path = write_rows(tmp_path / "pendulum.npz", {k: v.numpy() for k, v in pendulum._asdict().items()})
    module = IQLModule(dataset=str(path), batch_size=16, steps_per_epoch=5, **SMALL)
    trainer = quiet_trainer(max_epochs=2)
    trainer.fit(module)
    assert trainer.global_step == 10 and module.reward_scale.item() > 0


def test_evaluation_plays_the_env_during_an_offline_fit(pendulum):
    module = BCModule(**SMALL)
    evaluation = Evaluation(every_n_env_steps=10, num_eval_episodes=2)
    trainer = quiet_trainer(max_steps=30, callbacks=[evaluation])
    trainer.fit(module, datamodule=_datamodule(pendulum))
    assert [at for at, _ in evaluation.history] == [10, 20, 30]  # every 10 updates, and at the end
    returns = evaluate_policy(module, "Pendulum-v1", num_episodes=2, seed=3).returns
    assert len(returns) == 2 and all(-2000 < r < 0 for r in returns)


@pytest.mark.parametrize("module_class", [TD3BCModule, IQLModule])
def test_a_resumed_fit_continues_bit_for_bit(module_class, pendulum, tmp_path):
    def fit(max_steps, ckpt_path=None, callbacks=()):
        module = module_class(**SMALL, seed=4)
        trainer = quiet_trainer(max_steps=max_steps, callbacks=list(callbacks), enable_checkpointing=bool(callbacks))
        trainer.fit(module, datamodule=_datamodule(pendulum, seed=2), ckpt_path=ckpt_path)
        return module, trainer

    whole, _ = fit(27)
    saver = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=13, save_top_k=-1)
    fit(13, callbacks=[saver])
    resumed, trainer = fit(27, ckpt_path=str(Path(tmp_path) / "epoch=1-step=13.ckpt"))
    assert trainer.global_step == 27
    for name, tensor in whole.state_dict().items():
        assert torch.equal(resumed.state_dict()[name], tensor), name


def test_td3_bc_weights_load_into_td3_for_online_fine_tuning(pendulum):
    offline = TD3BCModule(normalize_obs=False, **SMALL)
    quiet_trainer(max_steps=5).fit(offline, datamodule=_datamodule(pendulum))
    online = TD3Module(**SMALL)
    online.load_state_dict(offline.state_dict())  # strict: the same names and shapes
    obs = torch.randn(4, 3)
    assert torch.equal(online.act(obs, greedy=True), offline.act(obs, greedy=True))


# -- offline-to-online: initial_dataset ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pendulum_file(pendulum, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("datasets")
    return write_rows(folder / "pendulum.npz", {k: v.numpy() for k, v in pendulum._asdict().items()})


ONLINE = dict(num_envs=2, buffer_size=2_000, batch_size=16, learning_starts=20, steps_per_epoch=10, **SMALL)


@pytest.mark.parametrize("module_class", [SACModule, TD3Module])
def test_initial_dataset_fills_the_buffer_before_the_warm_up(module_class, pendulum, pendulum_file):
    module = module_class(initial_dataset=str(pendulum_file), **ONLINE)
    trainer = quiet_trainer(max_steps=3)
    trainer.fit(module)
    buffer = module.source.buffer
    # 800 dataset rows, then 20 random warm-up steps and 3 collected ones (2 envs each).
    assert buffer.size == 800 + 20 + 3 * 2
    stored = buffer.obs[:800]  # 2 streams of 400 rows, one per env's column: every dataset row once
    assert torch.equal(stored[0::2], pendulum.obs[:400]) and torch.equal(stored[1::2], pendulum.obs[400:])
    assert module.hparams.initial_dataset == str(pendulum_file)


def test_initial_dataset_refusals(pendulum_file):
    with pytest.raises(TypeError, match="initial_dataset must be a non-empty str"):
        SACModule(initial_dataset=3, **ONLINE)
    with pytest.raises(ValueError, match="not with her"):
        SACModule(env_id="BitFlipping10-v0", initial_dataset=str(pendulum_file), her={"k": 4}, **ONLINE)
    module = SACModule(env_id="MountainCarContinuous-v0", initial_dataset=str(pendulum_file), **ONLINE)
    with pytest.raises(ValueError, match=r"the dataset's observations are .* shape \(3,\), the env's .* \(2,\)"):
        quiet_trainer(max_steps=1).fit(module)


@pytest.mark.parametrize("module_class", [SACModule, TD3Module])
def test_a_resumed_offline_to_online_run_adds_the_dataset_once_and_continues_bit_for_bit(
    module_class, pendulum_file, tmp_path
):
    def fit(max_steps, ckpt_path=None, callbacks=()):
        module = module_class(initial_dataset=str(pendulum_file), seed=5, **ONLINE)
        trainer = quiet_trainer(max_steps=max_steps, callbacks=list(callbacks), enable_checkpointing=bool(callbacks))
        trainer.fit(module, ckpt_path=ckpt_path)
        return module

    whole = fit(30)
    fit(20, callbacks=[ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=10, save_top_k=-1)])
    resumed = fit(30, ckpt_path=str(tmp_path / "epoch=0-step=10.ckpt"))
    assert resumed.source.buffer.size == whole.source.buffer.size == 800 + 20 + 30 * 2
    assert resumed.env_steps == whole.env_steps
    for name, tensor in whole.state_dict().items():
        assert torch.equal(resumed.state_dict()[name], tensor), name
    assert torch.equal(resumed.source.buffer.obs, whole.source.buffer.obs)


def test_without_initial_dataset_nothing_changes():
    module = TD3Module(**ONLINE)
    quiet_trainer(max_steps=2).fit(module)
    assert module.source.buffer.size == 20 + 2 * 2 and module.replay.initial_dataset is None
    assert np.isclose(module.hparams.tau, 0.005)


@pytest.mark.parametrize("module_class", [TD3BCModule, IQLModule])
def test_the_hub_folder_and_a_checkpoint_keep_the_dataset_statistics(module_class, pendulum, tmp_path):
    module = module_class(normalize_obs=True, **SMALL)
    trainer = quiet_trainer(max_steps=3)
    trainer.fit(module, datamodule=_datamodule(pendulum))
    obs = torch.randn(6, 3)
    module.save_pretrained(tmp_path / "hub", eval_episodes=2, video_steps=0, export_formats=())
    loaded = module_class.from_pretrained(tmp_path / "hub")
    assert torch.equal(loaded.obs_normalizer.stats.mean, module.obs_normalizer.stats.mean)
    assert torch.equal(loaded.act(obs, greedy=True), module.act(obs, greedy=True))
    trainer.save_checkpoint(tmp_path / "offline.ckpt")
    restored = module_class.load_from_checkpoint(tmp_path / "offline.ckpt")
    assert torch.equal(restored.act(obs, greedy=True), module.act(obs, greedy=True))
    if module_class is IQLModule:
        assert restored.reward_scale.item() == module.reward_scale.item() > 0


def test_a_run_of_epochs_plans_the_datamodules_updates(pendulum):
    from rl_lightning.callbacks.schedule import planned_updates

    module = BCModule(**SMALL)
    trainer = quiet_trainer(max_epochs=2)
    trainer.fit(module, datamodule=_datamodule(pendulum))  # 10 batches per epoch
    assert trainer.global_step == 20 == planned_updates(trainer, module) == module.env_steps
