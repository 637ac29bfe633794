"""``num_seeds``: N independent agents in lock-step in one module (``rl_lightning.algos._seeds``), each equal to the
one-seed run with its seed: weights, env steps and random streams, for every algorithm."""

import math

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from rl_lightning import DQNModule, PPOModule, SACModule, TD3Module, VPGModule
from rl_lightning.callbacks import Evaluation, evaluate_policy
from rl_lightning.statistics import interquartile_mean
from tests.quiet_trainer import quiet_fit, quiet_trainer

SEED = 5
NUM_SEEDS = 3
#: How far seed i of a run may be from its one-seed run after these short fits: the batched (vmapped) matmuls of
#: the updates round differently from one seed's (measured: <= 2e-7 after 2 rollouts, 6e-7 after 60 DQN updates).
WEIGHT_TOLERANCE = 1e-5

OFF_POLICY = dict(learning_starts=64, buffer_size=2_000, batch_size=64, steps_per_epoch=20, updates_per_step=5)
SETTINGS = {
    "vpg": (VPGModule, dict(num_envs=8, num_steps_per_rollout=64), 3),
    "ppo": (PPOModule, dict(num_envs=8, num_steps_per_rollout=32, normalize_obs=True), 32),
    "ppo_box": (PPOModule, dict(env_id="Pendulum-v1", num_envs=4, num_steps_per_rollout=32), 32),
    # vmap cannot batch nn.LSTM: each seed's loss in turn, bit for bit its one-seed run's
    "ppo_lstm": (PPOModule, dict(recurrent="lstm", num_envs=8, num_steps_per_rollout=16, num_minibatches=2), 16),
    "dqn": (DQNModule, dict(num_envs=4, target_update_env_steps=40, **OFF_POLICY), 40),
    "sac": (SACModule, dict(num_envs=2, hidden_sizes=(32, 32), **OFF_POLICY), 30),
    "td3": (TD3Module, dict(num_envs=2, hidden_sizes=(32, 32), **OFF_POLICY), 30),
}


def _assert_seed_equals_its_run(multi, index: int, single) -> None:
    member = multi.seed_module(index)
    assert member.hparams.seed == single.hparams.seed == SEED + index
    ours = {name: value for name, value in member.state_dict().items() if not name.startswith("seed_members.")}
    theirs = single.state_dict()
    assert ours.keys() == theirs.keys()
    for name in ours:
        torch.testing.assert_close(ours[name], theirs[name], atol=WEIGHT_TOLERANCE, rtol=0, msg=name)
    source = multi.source.sources[index]
    assert source.env_steps == single.source.env_steps
    # the same random streams: the actions' (and shuffling's) and the envs' reset draws
    assert torch.equal(source.generator.get_state(), single.source.generator.get_state())
    envs_generator = getattr(source.envs, "generator", None)
    if envs_generator is not None:
        assert torch.equal(envs_generator.get_state(), single.source.envs.generator.get_state())


@pytest.mark.parametrize("name", list(SETTINGS))
def test_each_seed_equals_its_one_seed_run(name):
    module_class, settings, max_steps = SETTINGS[name]
    multi = module_class(seed=SEED, num_seeds=NUM_SEEDS, **settings)
    trainer = quiet_fit(multi, max_steps)
    assert trainer.global_step == max_steps
    assert len(multi.seed_modules()) == NUM_SEEDS and multi.seed_module(0) is multi
    for index in range(NUM_SEEDS):
        single = module_class(seed=SEED + index, **settings)
        quiet_fit(single, max_steps)
        _assert_seed_equals_its_run(multi, index, single)


def test_a_gymnasium_env_trains_each_seed_on_its_own_envs():
    """Through the adapter each seed steps its own gymnasium vector env, one after another (no lock-step call)."""
    settings = dict(env_backend="gymnasium", num_envs=4, num_steps_per_rollout=16, num_minibatches=2)
    multi = PPOModule(seed=SEED, num_seeds=2, **settings)
    quiet_fit(multi, 16)
    for index in range(2):
        single = PPOModule(seed=SEED + index, **settings)
        quiet_fit(single, 16)
        _assert_seed_equals_its_run(multi, index, single)


def test_target_kl_stops_each_seed_on_its_own():
    """A small target_kl stops each seed's rollout at its own update epoch: a stopped seed is not updated until the
    next rollout (its Adam step count stays), the others go on, and every seed equals its one-seed run."""
    settings = dict(num_envs=8, num_steps_per_rollout=32, target_kl=0.002, lr=1e-2)
    multi = PPOModule(seed=SEED, num_seeds=NUM_SEEDS, **settings)
    trainer = quiet_fit(multi, 48)
    steps = []
    for index in range(NUM_SEEDS):
        single = PPOModule(seed=SEED + index, **settings)
        single_trainer = quiet_fit(single, 48)
        _assert_seed_equals_its_run(multi, index, single)
        first = next(iter(single.parameters()))
        step = int(single_trainer.optimizers[0].state[first]["step"])
        assert int(trainer.optimizers[0].state[next(iter(multi.seed_module(index).parameters()))]["step"]) == step
        steps.append(step)
    assert len(set(steps)) > 1, steps  # the seeds stopped at different updates
    assert max(steps) < 48  # and target_kl stopped some rollouts early


def test_a_diverged_seed_is_masked_and_the_others_go_on():
    """A seed whose loss stops being finite is reported, keeps its weights and is left out of every later update and
    of the aggregate charts; the other seeds equal their one-seed runs."""
    settings = dict(num_envs=8, num_steps_per_rollout=32)

    class Diverge(L.Callback):
        def on_train_start(self, trainer, pl_module):
            critic_bias = list(pl_module.seed_module(1).model.critic.parameters())[-1]
            with torch.no_grad():
                critic_bias.fill_(1e30)  # finite weights, values whose squared error overflows: an infinite loss
            self.weights = [p.detach().clone() for p in pl_module.seed_module(1).parameters()]

    diverge = Diverge()
    multi = PPOModule(seed=SEED, num_seeds=NUM_SEEDS, **settings)
    with pytest.warns(RuntimeWarning, match=r"seed index 1 \(seed 6\) diverged"):
        trainer = quiet_trainer(max_steps=32, callbacks=[diverge])
        trainer.fit(multi)
    assert trainer.global_step == 32
    assert multi._diverged_seeds == {1}
    for before, after in zip(diverge.weights, multi.seed_module(1).parameters(), strict=True):
        assert torch.equal(before, after)
    for index in (0, 2):
        single = PPOModule(seed=SEED + index, **settings)
        quiet_fit(single, 32)
        _assert_seed_equals_its_run(multi, index, single)
    assert math.isnan(float(trainer.callback_metrics["charts_per_seed/episodic_return/seed_1"])) or (
        trainer.callback_metrics["charts/episodic_return_iqm"] != trainer.callback_metrics["charts/episodic_return"]
    )


def test_the_charts_show_each_seed_and_their_interquartile_mean():
    multi = PPOModule(seed=SEED, num_seeds=4, num_envs=8, num_steps_per_rollout=64)
    trainer = quiet_fit(multi, 64)
    metrics = trainer.callback_metrics
    returns = [float(metrics[f"charts_per_seed/episodic_return/seed_{index}"]) for index in range(4)]
    losses = [float(metrics[f"losses_per_seed/value_loss/seed_{index}"]) for index in range(4)]
    assert float(metrics["charts/episodic_return"]) == pytest.approx(sum(returns) / 4, rel=1e-6)
    assert float(metrics["losses/value_loss"]) == pytest.approx(sum(losses) / 4, rel=1e-6)
    iqm = float(metrics["charts/episodic_return_iqm"])
    assert iqm == pytest.approx(float(interquartile_mean(torch.tensor(returns).numpy())), rel=1e-6)
    low, high = (float(metrics[f"charts/episodic_return_iqm_ci_{end}"]) for end in ("low", "high"))
    assert low <= iqm <= high
    assert float(metrics["charts/episodic_return_min"]) == pytest.approx(min(returns), rel=1e-6)
    assert trainer.progress_bar_metrics["return"] == pytest.approx(iqm, rel=1e-6)  # the bar shows the IQM
    assert float(metrics["charts/env_steps"]) == multi.env_steps == 64 // 16 * 8 * 64  # one seed's env steps


def test_greedy_evaluation_of_every_seed():
    multi = PPOModule(seed=SEED, num_seeds=3, num_envs=8, num_steps_per_rollout=32)
    evaluation = Evaluation(every_n_env_steps=256, num_eval_episodes=4)
    quiet_trainer(max_steps=16, callbacks=[evaluation]).fit(multi)
    metrics = evaluation.last_metrics
    returns = [metrics[f"eval_per_seed/episodic_return/seed_{index}"] for index in range(3)]
    for index, value in enumerate(returns):  # each seed's policy, on the evaluation's start states
        envs = multi.make_envs(4, evaluation.seed)
        assert evaluate_policy(multi.seed_module(index), envs, seed=evaluation.seed).returns.mean().item() == value
    assert metrics["eval/episodic_return"] == pytest.approx(sum(returns) / 3)
    assert metrics["eval/episodic_return_min"] == min(returns)
    iqm = float(interquartile_mean(torch.tensor(returns).numpy()))
    assert metrics["eval/episodic_return_iqm"] == pytest.approx(iqm)


def test_resume_of_every_seed_is_exact(tmp_path):
    def fit(root, ckpt_path=None, stop_at=None):
        class StopAt(L.Callback):
            def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
                if stop_at is not None and trainer.global_step >= stop_at:
                    trainer.should_stop = True

        module = SACModule(seed=SEED, num_seeds=2, **SETTINGS["sac"][1])
        callbacks = [ModelCheckpoint(dirpath=root, filename="last"), StopAt()]
        trainer = quiet_trainer(max_steps=30, default_root_dir=root, callbacks=callbacks, enable_checkpointing=True)
        trainer.fit(module, ckpt_path=ckpt_path)
        return module

    straight = fit(tmp_path / "straight")
    fit(tmp_path / "split", stop_at=20)
    resumed = fit(tmp_path / "split", ckpt_path="last")
    for name, value in straight.state_dict().items():
        assert torch.equal(resumed.state_dict()[name], value), name
    for ours, theirs in zip(resumed.source.sources, straight.source.sources, strict=True):
        assert torch.equal(ours.generator.get_state(), theirs.generator.get_state())
    for ours, theirs in zip(resumed.seed_modules(), straight.seed_modules(), strict=True):
        assert torch.equal(ours.update_generator.get_state(), theirs.update_generator.get_state())


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(num_seeds=0), ValueError, "num_seeds must be >= 1"),
        (dict(num_seeds=True), TypeError, "num_seeds must be an int"),
        (dict(num_seeds=2.0), TypeError, "num_seeds must be an int"),
    ],
)
def test_bad_num_seeds_raise(kwargs, error, match):
    with pytest.raises(error, match=match):
        PPOModule(**kwargs)


def test_seed_module_checks_its_index():
    module = DQNModule(num_seeds=2)
    assert module.seed_module(1).hparams.seed == module.hparams.seed + 1
    assert module.seed_module(1).num_seeds == 1
    with pytest.raises(ValueError, match="seed_index must be <= 1"):
        module.seed_module(2)
    with pytest.raises(TypeError, match="seed_index must be an int"):
        module.seed_module(1.0)
    with pytest.raises(ValueError, match=r"seed_index must be an int in \[0, 1\] or 'best'"):
        module.seed_module("1")


def test_one_seed_acts_exports_evaluates_and_saves_as_its_one_seed_module(tmp_path):
    """``seed_index`` picks the seed that acts, exports, evaluates and saves (``"best"``: the best evaluated one);
    seed 0 is the module itself, saved as a one-seed module."""
    multi = PPOModule(seed=SEED, num_seeds=3, num_envs=8, num_steps_per_rollout=32)
    evaluation = Evaluation(every_n_env_steps=256, num_eval_episodes=4)
    quiet_trainer(max_steps=16, callbacks=[evaluation]).fit(multi)
    obs = torch.randn(5, 4)
    for index in range(3):
        member = multi.seed_module(index)
        expected = member.model.actor.head.mode(member.model.actor(obs))
        assert torch.equal(multi.act(obs, greedy=True, seed_index=index), expected)
        path = multi.export_policy(tmp_path / f"policy_{index}.pt2", seed_index=index)
        assert torch.equal(torch.export.load(path).module()(obs), expected)
    returns = [evaluation.last_metrics[f"eval_per_seed/episodic_return/seed_{index}"] for index in range(3)]
    best = max(range(3), key=lambda index: (returns[index], -index))
    assert multi.best_seed_index() == best and multi.seed_module("best") is multi.seed_module(best)
    result = evaluate_policy(multi, "CartPole-v1", num_episodes=4, seed=evaluation.seed, seed_index="best")
    assert result.mean == returns[best]
    single = multi.one_seed_module(0)
    assert single.num_seeds == 1 and single.hparams.seed == SEED and not hasattr(single, "seed_members")
    for ours, theirs in zip(single.parameters(), multi.model.parameters(), strict=True):
        assert torch.equal(ours, theirs)
    with pytest.raises(ValueError, match=r"seed_index must be an int in \[0, 2\] or 'best'"):
        multi.act(obs, seed_index="worst")


def test_best_seed_needs_a_return():
    with pytest.raises(ValueError, match="no seed has a return yet"):
        PPOModule(num_seeds=2).seed_module("best")


def test_a_subclass_builds_its_seeds_with_its_own_arguments():
    class Mine(DQNModule):
        def __init__(self, extra: int = 3, **kwargs):
            super().__init__(**kwargs)
            self.extra = extra

    module = Mine(extra=5, num_seeds=3, seed=SEED, **SETTINGS["dqn"][1])
    assert [type(m) for m in module.seed_modules()] == [Mine] * 3
    assert [m.extra for m in module.seed_modules()] == [5, 5, 5]
    assert [m.hparams.seed for m in module.seed_modules()] == [SEED, SEED + 1, SEED + 2]
    assert module.hparams.extra == 5 and module.hparams.num_seeds == 3


def test_a_checkpoint_of_several_seeds_loads_every_seed_and_refuses_another_count(tmp_path):
    module = PPOModule(seed=SEED, num_seeds=2, num_envs=8, num_steps_per_rollout=32)
    trainer = quiet_fit(module, 16)
    trainer.save_checkpoint(tmp_path / "seeds.ckpt")
    loaded = PPOModule.load_from_checkpoint(tmp_path / "seeds.ckpt")
    assert loaded.num_seeds == 2 and loaded.seed_module(1).hparams.seed == SEED + 1
    for name, value in module.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], value), name
    with pytest.raises(ValueError, match="the checkpoint holds num_seeds=2 agents, this PPOModule has num_seeds=3"):
        PPOModule.load_from_checkpoint(tmp_path / "seeds.ckpt", num_seeds=3)


@pytest.mark.parametrize("name", ["ppo", "dqn"])
def test_compile_runs_the_seeds_batched_computation_compiled_equal_to_eager(name):
    """compile=True compiles the vmapped loss (and PPO's lock-step collection): the same weights as eager (aot_eager
    traces the same graphs without inductor's code generation)."""
    module_class, settings, max_steps = SETTINGS[name]
    compiled = module_class(seed=SEED, num_seeds=2, compile={"backend": "aot_eager"}, **settings)
    with pytest.warns(UserWarning, match="num_seeds > 1 steps each seed's parameters apart"):
        quiet_fit(compiled, max_steps // 2)
    assert any(name.endswith("_per_seed") for name in compiled.compile_seconds)
    eager = module_class(seed=SEED, num_seeds=2, **settings)
    quiet_fit(eager, max_steps // 2)
    for ours, theirs in zip(compiled.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(ours, theirs, atol=WEIGHT_TOLERANCE, rtol=0)


def test_bf16_mixed_trains_every_seed():
    module = PPOModule(seed=SEED, num_seeds=2, num_envs=8, num_steps_per_rollout=32)
    before = [p.detach().clone() for p in module.parameters()]
    trainer = quiet_trainer(max_steps=16, precision="bf16-mixed")
    trainer.fit(module)
    assert trainer.global_step == 16
    for index in range(2):  # every seed moved, and stayed finite
        weights = list(module.seed_module(index).model.parameters())
        assert all(torch.isfinite(w).all() for w in weights)
    assert all(not torch.equal(b, a) for b, a in zip(before, module.parameters(), strict=True))
