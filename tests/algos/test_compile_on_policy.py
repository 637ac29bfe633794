"""compile=True for the on-policy algorithms: PPO's minibatch update, VPG's update and their collection (fused with a
native env's steps, 4 steps a call; or the acting step alone) through torch.compile give the same losses and the
same sampled actions as eager, for the same seeds.

Two runs compile with inductor (PPO and VPG on CartPole, ~15 s each on one core); the others use the
``aot_eager`` backend, which traces the same graphs (forward and backward) without inductor's code generation."""

import lightning as L
import pytest
import torch

from rl_lightning import PPOModule, VPGModule
from rl_lightning.data.actor_critic import ActorCriticSource
from rl_lightning.data.rollout import RolloutSource
from rl_lightning.envs import make_envs
from rl_lightning.nets import ActorCritic, CategoricalHead, GaussianHead

AOT_EAGER = {"backend": "aot_eager"}


@pytest.fixture
def compiled_acting_on_cpu(monkeypatch):
    """The acting step alone compiled on the CPU too (by default only on CUDA, where it pays): the same path."""
    monkeypatch.setattr(RolloutSource, "compiled_acting_devices", ("cpu", "cuda"))


class _Record(L.Callback):
    """Every update's loss, and the first rollout's actions."""

    def __init__(self):
        self.losses: list[torch.Tensor] = []
        self.first_actions: torch.Tensor | None = None

    def on_update_end(self, trainer, module, loss):
        self.losses.append(loss.clone())
        if self.first_actions is None:
            self.first_actions = module.source.collection.rollout.actions.clone()


def _run(module_class, max_steps, **kwargs):
    module = module_class(**kwargs)
    record = _Record()
    trainer = L.Trainer(
        max_steps=max_steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[record],
    )
    trainer.fit(module)
    return module, torch.stack(record.losses), record.first_actions


def _assert_compiled_equals_eager(module_class, max_steps, compile, compiled_functions, **kwargs):
    _, eager_losses, eager_actions = _run(module_class, max_steps, **kwargs)
    module, losses, actions = _run(module_class, max_steps, compile=compile, **kwargs)
    assert sorted(module.compiled.compile_seconds) == sorted(compiled_functions)
    assert losses.shape == (max_steps,)
    torch.testing.assert_close(losses, eager_losses, rtol=1e-4, atol=1e-6)
    if actions.is_floating_point():
        torch.testing.assert_close(actions, eager_actions, rtol=1e-5, atol=1e-5)
    else:
        assert torch.equal(actions, eager_actions)
    return losses


_PPO_CARTPOLE = dict(
    num_envs=8, num_steps_per_rollout=16, update_epochs=2, num_minibatches=2, activation="relu", seed=5
)


PPO_CARTPOLE_COLLECTION = "fused_collection_actor_critic_step_fused_step_CartPole"
VPG_CARTPOLE_COLLECTION = "fused_collection_policy_acting_fused_step_CartPole"


def test_compiled_ppo_gives_the_eager_losses_and_actions_on_cartpole():
    """On the CPU too, PPO's collection runs fused with CartPole's step (4 steps of acting, env and storing per
    compiled call): the eager run's actions and losses."""
    losses = _assert_compiled_equals_eager(
        PPOModule, 8, True, [PPO_CARTPOLE_COLLECTION, "ppo_minibatch_loss"], **_PPO_CARTPOLE
    )
    assert not torch.allclose(losses[0], losses[-1])  # the weights moved: later losses are of other weights


def test_compiled_vpg_gives_the_eager_losses_and_actions_on_cartpole():
    _assert_compiled_equals_eager(
        VPGModule, 4, True, [VPG_CARTPOLE_COLLECTION, "vpg_loss"], num_envs=8, num_steps_per_rollout=32, seed=3
    )


def test_compiled_ppo_with_normalisation_gives_the_eager_losses_and_actions_on_pendulum(compiled_acting_on_cpu):
    _assert_compiled_equals_eager(
        PPOModule,
        8,
        AOT_EAGER,
        ["actor_critic_step", "ppo_minibatch_loss"],
        env_id="Pendulum-v1",
        num_envs=8,
        num_steps_per_rollout=16,
        update_epochs=2,
        num_minibatches=2,
        normalize_obs=True,
        normalize_rewards=True,
        seed=7,
    )


@pytest.mark.parametrize(
    ("module_class", "fused", "kwargs"),
    [
        (PPOModule, "actor_critic_step", dict(update_epochs=2, num_minibatches=2, normalize_obs=True, seed=4)),
        (VPGModule, "policy_acting", dict(seed=2)),
    ],
    ids=["ppo", "vpg"],
)
@pytest.mark.parametrize("num_steps", [16, 6])
def test_the_acting_steps_and_a_fusing_envs_steps_compile_as_one_function(module_class, fused, kwargs, num_steps):
    """Where the env's step is one pure function (Acrobot), the collection runs fused on any device: 4 steps (the
    largest divisor of num_steps up to ``fused_steps_per_call``: 4 of 16, 3 of 6) of policy forward, sampling, the
    env's step and storing per call of ONE compiled function; the eager run's actions and losses, from the same
    random streams (the source's noise, the env's reset draws), and the same generator states after."""
    settings = dict(env_id="Acrobot-v1", num_envs=8, num_steps_per_rollout=num_steps, **kwargs)
    name = f"fused_collection_{fused}_fused_step_Acrobot"
    _assert_compiled_equals_eager(module_class, 4, AOT_EAGER, [name, _loss_name(module_class)], **settings)
    module = module_class(compile=AOT_EAGER, **settings)
    source = module.make_source(module.make_envs(8, 0, compile=True))
    assert source._fused_collection and source.envs.fuses_step
    calls = []
    original = source.envs.fused_steps_arguments
    source.envs.fused_steps_arguments = lambda count: calls.append(count) or original(count)
    eager = module_class(**settings)
    eager_source = eager.make_source(eager.make_envs(8, 0))
    with torch.inference_mode():
        source.collect(), eager_source.collect()
    assert calls == [4] * 4 if num_steps == 16 else calls == [3, 3]
    assert torch.equal(source.collection.rollout.actions, eager_source.collection.rollout.actions)
    assert torch.equal(source.generator.get_state(), eager_source.generator.get_state())
    assert torch.equal(source.envs.get_rng_state(), eager_source.envs.get_rng_state())
    assert source.envs._clock == eager_source.envs._clock == num_steps
    assert not module.make_source(module.make_envs(8, 0))._fused_collection  # an eager env: no fused collection


def _loss_name(module_class):
    return {PPOModule: "ppo_minibatch_loss", VPGModule: "vpg_loss"}[module_class]


@pytest.mark.parametrize("core", ["lstm", "gru"])
def test_compiled_recurrent_ppo_gives_the_eager_losses(core):
    # Dynamo does not trace the LSTM / GRU core (a graph break around it) and acting stays eager: the results
    # are the eager ones all the same.
    kwargs = dict(num_envs=4, num_steps_per_rollout=8, update_epochs=2, num_minibatches=2, core_size=8, seed=9)
    _assert_compiled_equals_eager(PPOModule, 6, AOT_EAGER, ["ppo_minibatch_loss"], recurrent=core, **kwargs)


def test_ppo_with_target_kl_and_importance_weighted_vpg_compile_as_the_others():
    _assert_compiled_equals_eager(
        PPOModule,
        6,
        AOT_EAGER,
        [PPO_CARTPOLE_COLLECTION, "ppo_minibatch_loss"],
        target_kl=1e-3,
        lr=1e-2,
        **_PPO_CARTPOLE,
    )
    vpg = dict(num_envs=8, num_steps_per_rollout=16, importance_weighting=True, rollout_use_count=2, seed=3)
    _assert_compiled_equals_eager(VPGModule, 4, AOT_EAGER, [VPG_CARTPOLE_COLLECTION, "vpg_loss"], **vpg)


def test_a_cpu_run_of_many_cartpoles_or_a_pendulum_acts_eagerly():
    """Where the env's step is not one function on the CPU (Pendulum; CartPole above ``fused_reset_max_envs``:
    its index-based reset is cheaper eagerly), only the update is compiled there."""
    _assert_compiled_equals_eager(
        PPOModule, 2, AOT_EAGER, ["ppo_minibatch_loss"], env_id="Pendulum-v1", num_envs=4, num_steps_per_rollout=8
    )
    module = PPOModule(num_envs=1_040, num_steps_per_rollout=4, num_minibatches=4, compile=AOT_EAGER)
    assert module.fuses_env_into_collection
    envs = module.make_envs(1_040, 0, compile=True)
    assert not envs.fuses_step and not module.make_source(envs)._fused_collection


def test_sampling_from_drawn_noise_is_the_heads_own_sampling():
    for head, params, draw in (
        (CategoricalHead(4, 3), torch.randn(64, 3), lambda g: torch.rand(64, 1, generator=g)),
        (GaussianHead(4, (2,), log_std_init=-0.5), torch.randn(64, 2), lambda g: torch.randn(64, 2, generator=g)),
    ):
        expected = head.sample(params, torch.Generator().manual_seed(3))
        got = head.sample(params, noise=draw(torch.Generator().manual_seed(3)))
        for a, b in zip(got, expected, strict=True):
            assert torch.equal(a, b)


def test_compile_off_acts_eagerly_and_a_masked_head_never_compiles(compiled_acting_on_cpu):
    assert not PPOModule(num_envs=4, num_steps_per_rollout=4).compiled.enabled
    envs = make_envs("CartPole-v1", 4, seed=0)
    model = ActorCritic(envs.single_observation_space, envs.single_action_space, hidden_sizes=(8,))
    compiled = PPOModule(num_envs=4, num_steps_per_rollout=4, compile=AOT_EAGER).compiled
    assert not ActorCriticSource(envs, model, num_steps=4, num_minibatches=1)._compiled_acting
    assert ActorCriticSource(envs, model, num_steps=4, num_minibatches=1, compiled=compiled)._compiled_acting
    model.actor.head.masked = True  # a masked policy's sampling is not replayed from drawn numbers
    assert not ActorCriticSource(envs, model, num_steps=4, num_minibatches=1, compiled=compiled)._compiled_acting


@pytest.mark.parametrize("module_class", [PPOModule, VPGModule])
def test_a_bad_compile_value_raises_naming_it(module_class):
    with pytest.raises(TypeError, match="compile must be a bool"):
        module_class(num_envs=4, num_steps_per_rollout=4, compile="yes")
    with pytest.raises(ValueError, match=r"unknown torch\.compile arguments"):
        module_class(num_envs=4, num_steps_per_rollout=4, compile={"bakend": "eager"})
    assert module_class(num_envs=4, num_steps_per_rollout=4, compile=True).hparams.compile is True


def test_a_stop_in_the_middle_of_a_fused_rollout_returns_to_its_start():
    """A stop request heard between two fused calls (checked every 64 steps) ends the rollout where the envs and
    generators were when it began (the CPU CartPole's too: its generator set where the eager reset leaves it): the
    rollout collected after it is the one an uninterrupted source collects."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    def source():
        module = PPOModule(num_envs=4, num_steps_per_rollout=128, compile=AOT_EAGER, seed=6)
        built = module.make_source(module.make_envs(4, 0, compile=True))
        assert built._fused_collection
        return built

    stopped, straight = source(), source()
    heard = []
    stopped.should_stop = lambda: heard.append(True) or len(heard) == 1  # stop at step 63, not after
    with torch.inference_mode():
        with pytest.raises(SIGTERMException):
            stopped.collect()
        assert stopped.envs._clock == 0 and stopped.collection is None  # back at the rollout's start
        stopped.collect(), straight.collect()
    assert torch.equal(stopped.collection.rollout.actions, straight.collection.rollout.actions)
    assert torch.equal(stopped.envs.get_rng_state(), straight.envs.get_rng_state())
    assert torch.equal(stopped.generator.get_state(), straight.generator.get_state())
