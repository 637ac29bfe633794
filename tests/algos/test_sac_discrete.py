"""SACModule on Discrete actions (rl_lightning/discrete_sac.py): the losses on hand-computed cases, action masks,
acting and export, the errors, num_seeds, compile, prioritized replay, exact resume, and the configs."""

import math
from pathlib import Path

import gymnasium as gym
import lightning as L
import numpy as np
import pytest
import torch
import yaml
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import nn

from rl_lightning import SACModule
from rl_lightning.callbacks.target_sync import TargetNetworkSync
from rl_lightning.cli import make_cli
from rl_lightning.data.frame_replay import FrameStackReplayBuffer
from rl_lightning.data.prioritized import PrioritizedReplayBuffer
from rl_lightning.data.replay import ReplayBufferSamples
from rl_lightning.discrete_sac import discrete_sac_losses
from rl_lightning.envs import DictProbe, MaskedProbe
from rl_lightning.envs.spaces import ACTION_MASK_KEY, OBSERVATION_KEY, TensorTree
from rl_lightning.nets import CategoricalActor, DiscreteCriticEnsemble
from tests.quiet_trainer import quiet_fit, quiet_trainer

ROOT = Path(__file__).resolve().parents[2]
TINY = dict(num_envs=2, buffer_size=400, batch_size=32, learning_starts=64, steps_per_epoch=10, hidden_sizes=(16, 16))
SEED = 5
#: Seed i of a num_seeds run against its one-seed run: the vmapped matmuls round differently (tests/algos/
#: test_num_seeds.py's tolerance).
WEIGHT_TOLERANCE = 1e-5

# The tiny case: 2 actions, pi = (0.25, 0.75) in every state (zero weights, logits (0, log 3)); the critics give
# (1, 2) and (3, 0) whatever the state, the target critics (2, 2) and (4, 1); alpha 0.5, gamma 0.9.
PI = (0.25, 0.75)
ALPHA, GAMMA = 0.5, 0.9


def _constant_networks(observation_space, action_space, logits, q_values, target_q_values):
    """A CategoricalActor and two DiscreteCriticEnsembles whose outputs are constants: every weight 0, the last
    layer's biases ``logits`` ``(num_actions,)`` and the critics' ``(num_critics, num_actions)``."""
    actor = CategoricalActor(observation_space, action_space, (4,))
    critic = DiscreteCriticEnsemble(observation_space, action_space, len(q_values), (4,))
    target = DiscreteCriticEnsemble(observation_space, action_space, len(q_values), (4,))
    with torch.no_grad():
        for parameter in [*actor.parameters(), *critic.parameters(), *target.parameters()]:
            parameter.zero_()
        actor.logits.bias.copy_(torch.tensor(logits))
        critic.layers[-1].bias.copy_(torch.tensor(q_values).unsqueeze(1))
        target.layers[-1].bias.copy_(torch.tensor(target_q_values).unsqueeze(1))
    return actor, critic, target


def _tiny_case():
    box = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    networks = _constant_networks(
        box, gym.spaces.Discrete(2), [0.0, math.log(3.0)], [[1.0, 2.0], [3.0, 0.0]], [[2.0, 2.0], [4.0, 1.0]]
    )
    batch = ReplayBufferSamples(
        obs=torch.randn(2, 2),
        actions=torch.tensor([1, 0]),
        rewards=torch.tensor([1.0, 0.5]),
        terminated=torch.tensor([False, True]),
        next_obs=torch.randn(2, 2),
    )
    return (*networks, nn.Parameter(torch.tensor(math.log(ALPHA)))), batch


def _entropy(probs):
    return -sum(p * math.log(p) for p in probs if p > 0)


def test_the_losses_match_a_hand_computed_case():
    (actor, critic, target, log_alpha), batch = _tiny_case()
    target_entropy = 0.89 * math.log(2)
    loss, metrics = discrete_sac_losses(actor, critic, target, log_alpha, batch, GAMMA, target_entropy, True)
    # next soft value: sum_a pi(a) (min_i Q_targ_i(a) - alpha log pi(a)), min over the critics (2, 1)
    next_value = PI[0] * (2 - ALPHA * math.log(PI[0])) + PI[1] * (1 - ALPHA * math.log(PI[1]))
    targets = [1.0 + GAMMA * next_value, 0.5]  # the second sample terminated
    taken = [[2.0, 1.0], [0.0, 3.0]]  # Q_i(s, a) of actions (1, 0) by each critic
    critic_loss = sum(sum((q - y) ** 2 for q, y in zip(row, targets, strict=True)) / 2 for row in taken)
    # the online critics' min (1, 0): the actor loss is minus the soft value
    actor_loss = -(PI[0] * (1 - ALPHA * math.log(PI[0])) + PI[1] * (0 - ALPHA * math.log(PI[1])))
    alpha_loss = -math.log(ALPHA) * (target_entropy - _entropy(PI))
    assert metrics["losses/qf_loss"].item() == pytest.approx(critic_loss, rel=1e-6)
    assert metrics["losses/qf_loss"].item() == pytest.approx(6.149025, abs=1e-5)  # the numbers, once by hand
    assert metrics["losses/actor_loss"].item() == pytest.approx(actor_loss, rel=1e-6)
    assert metrics["losses/actor_loss"].item() == pytest.approx(-0.531168, abs=1e-5)
    assert metrics["losses/alpha_loss"].item() == pytest.approx(alpha_loss, rel=1e-5)
    assert metrics["losses/entropy"].item() == pytest.approx(0.562335, abs=1e-5)
    assert metrics["losses/qf_values"].item() == pytest.approx(1.5)
    assert loss.item() == pytest.approx(critic_loss + actor_loss + alpha_loss, rel=1e-6)
    loss.backward()
    # d alpha_loss / d log_alpha = -(target - H): each term reaches its own parameters only
    assert log_alpha.grad.item() == pytest.approx(-(target_entropy - _entropy(PI)), rel=1e-5)
    # the critics' last bias: d/dQ_i(a) of sum_i mean_b (Q_i(s_b, a_b) - y_b)^2, nothing from the actor's loss
    expected = torch.tensor([[[2 - targets[0], 1 - targets[1]]], [[(0 - targets[0]), (3 - targets[1])]]])
    expected = torch.stack([expected[:, :, 1], expected[:, :, 0]], dim=-1)  # sample 0 took action 1, sample 1 action 0
    torch.testing.assert_close(critic.layers[-1].bias.grad, expected, rtol=1e-5, atol=1e-6)
    # the actor's logits: d/dl of mean_s sum_a pi (alpha log pi - minQ) = pi_a (c_a - sum_b pi_b c_b), c = alpha
    # log pi + alpha - minQ
    c = [ALPHA * math.log(p) + ALPHA - q for p, q in zip(PI, (1.0, 0.0), strict=True)]
    mean_c = sum(p * x for p, x in zip(PI, c, strict=True))
    expected_actor = torch.tensor([p * (x - mean_c) for p, x in zip(PI, c, strict=True)])
    torch.testing.assert_close(actor.logits.bias.grad, expected_actor, rtol=1e-5, atol=1e-6)
    assert all(p.grad is None or not p.grad.any() for p in target.parameters())


def test_prioritized_weights_the_critics_loss_and_reports_the_largest_critic_error():
    (actor, critic, target, log_alpha), batch = _tiny_case()
    weights = torch.tensor([1.0, 0.5])
    _, metrics, td_errors = discrete_sac_losses(actor, critic, target, log_alpha, batch, GAMMA, 0.5, True, weights)
    next_value = PI[0] * (2 - ALPHA * math.log(PI[0])) + PI[1] * (1 - ALPHA * math.log(PI[1]))
    targets = [1.0 + GAMMA * next_value, 0.5]
    taken = [[2.0, 1.0], [0.0, 3.0]]
    weighted = sum(sum(w * (q - y) ** 2 for q, y, w in zip(row, targets, (1.0, 0.5), strict=True)) / 2 for row in taken)
    assert metrics["losses/qf_loss"].item() == pytest.approx(weighted, rel=1e-6)
    # per sample, the larger of |Q_1 - y| and |Q_2 - y|: critic 2's here (0 vs 2.378, 3 vs 0.5)
    torch.testing.assert_close(td_errors, torch.tensor([targets[0], 2.5]), rtol=1e-6, atol=1e-6)


def _masked_case():
    """MaskedProbe's spaces (Discrete(4), a mask); logits (5, 0, log 3, 0): the illegal action 0 has the largest."""
    env = MaskedProbe(num_envs=1, seed=0)
    logits, q_values, target_q_values = [5.0, 0.0, math.log(3.0), 0.0], [[9.0, 1.0, 2.0, 0.0]], [[9.0, 2.0, 4.0, 6.0]]
    return _constant_networks(env.single_observation_space, env.single_action_space, logits, q_values, target_q_values)


def _masked_obs(masks):
    masks = torch.tensor(masks)
    return TensorTree({OBSERVATION_KEY: torch.zeros(len(masks), 1), ACTION_MASK_KEY: masks})


def test_illegal_actions_have_probability_zero_and_leave_every_expectation():
    actor, critic, target = _masked_case()
    legal_12 = [False, True, True, False]  # pi = (0, 0.25, 0.75, 0) over actions 0-3
    legal_123 = [False, True, True, True]  # pi = (0, 1/5, 3/5, 1/5)
    no_legal = [False] * 4
    probs, log_probs = actor.policy(_masked_obs([legal_12, legal_123, no_legal]))
    torch.testing.assert_close(probs[0], torch.tensor([0.0, 0.25, 0.75, 0.0]))
    torch.testing.assert_close(probs[1], torch.tensor([0.0, 0.2, 0.6, 0.2]))
    assert torch.isfinite(probs).all() and torch.isfinite(log_probs).all()
    assert log_probs[0, 0] == 0 and log_probs[0, 3] == 0  # 0 * log 0 counts 0
    batch = ReplayBufferSamples(
        obs=_masked_obs([legal_12, legal_12, legal_12]),
        actions=torch.tensor([1, 2, 2]),
        rewards=torch.tensor([1.0, 1.0, 1.0]),
        terminated=torch.tensor([False, False, False]),
        next_obs=_masked_obs([legal_12, legal_123, no_legal]),
    )
    log_alpha = nn.Parameter(torch.tensor(math.log(ALPHA)))
    loss, metrics = discrete_sac_losses(actor, critic, target, log_alpha, batch, GAMMA, 0.3, True)

    def soft_value(pi, q):
        return sum(p * (v - ALPHA * math.log(p)) for p, v in zip(pi, q, strict=True) if p > 0)

    # the target's sum covers the legal actions: the illegal action 0's Q of 9 (and action 3's 6 where illegal) is
    # never reached; a next state with no legal action bootstraps from 0 even though it is not terminal
    targets = [
        1 + GAMMA * soft_value([0, 0.25, 0.75, 0], [9, 2, 4, 6]),
        1 + GAMMA * soft_value([0, 0.2, 0.6, 0.2], [9, 2, 4, 6]),
        1.0,
    ]
    critic_loss = ((1 - targets[0]) ** 2 + (2 - targets[1]) ** 2 + (2 - targets[2]) ** 2) / 3
    assert metrics["losses/qf_loss"].item() == pytest.approx(critic_loss, rel=1e-6)
    assert metrics["losses/actor_loss"].item() == pytest.approx(-soft_value([0, 0.25, 0.75, 0], [9, 1, 2, 0]), rel=1e-6)
    assert metrics["losses/entropy"].item() == pytest.approx(_entropy([0.25, 0.75]), rel=1e-6)
    loss.backward()
    grads = [p.grad for p in [*actor.parameters(), *critic.parameters()] if p.grad is not None]
    assert all(torch.isfinite(grad).all() for grad in grads)
    assert actor.logits.bias.grad[0] == 0 and actor.logits.bias.grad[3] == 0  # no gradient to illegal logits


def test_the_target_entropy_follows_each_states_legal_actions_with_masks():
    module = SACModule(env_id="MaskedProbe-v0", **TINY)
    assert module.masked and module.target_entropy == pytest.approx(0.89 * math.log(4))
    obs = _masked_obs([[False, True, True, True], [False, False, True, True], [False, False, False, True]])
    torch.testing.assert_close(module._target_entropies(obs), 0.89 * torch.tensor([math.log(3), math.log(2), 0.0]))
    given = SACModule(env_id="MaskedProbe-v0", target_entropy=0.4, **TINY)
    assert given._target_entropies(obs) == 0.4  # nats given: the same for every state


def test_defaults_a_categorical_actor_and_critics_with_one_value_per_action():
    module = SACModule(env_id="CartPole-v1", **TINY)
    assert module.discrete and not module.masked
    assert isinstance(module.actor, CategoricalActor) and isinstance(module.critic, DiscreteCriticEnsemble)
    assert module.critic(torch.zeros(5, 4)).shape == (2, 5, 2)
    assert module.target_entropy == pytest.approx(0.89 * math.log(2))  # CleanRL's target_entropy_scale
    assert isinstance(module.log_alpha, nn.Parameter) and module.alpha.item() == 1.0
    assert torch.equal(module.target_critic.layers[0].weight, module.critic.layers[0].weight)
    assert module.configure_optimizers().defaults["eps"] == 1e-8
    [sync] = [c for c in module.configure_callbacks() if isinstance(c, TargetNetworkSync)]
    assert sync.every_n_env_steps is None and sync.tau == 0.005


def test_greedy_is_the_argmax_over_legal_actions_and_samples_are_legal():
    module = SACModule(env_id="MaskedProbe-v0", **TINY)
    module.actor = _masked_case()[0]  # action 0, illegal everywhere, has the largest logit
    obs = _masked_obs([[False, True, True, True], [False, True, False, True], [False, False, False, True]])
    assert module.act(obs, greedy=True).tolist() == [2, 1, 3]
    generator = torch.Generator().manual_seed(0)
    many = TensorTree({key: value.repeat(2_000, 1) for key, value in obs.items()})
    for actions in (module.act(many), module.explore(many, generator)):
        assert obs[ACTION_MASK_KEY].repeat(2_000, 1).gather(1, actions.unsqueeze(1)).all()
    # exploration draws from the categorical: where 1 and 3 are legal (logits 0 and 0), each half the time
    share = (module.explore(many, generator).view(2_000, 3)[:, 1] == 1).float().mean().item()
    assert share == pytest.approx(0.5, abs=0.04)


def test_the_export_gives_the_greedy_legal_action(tmp_path):
    module = SACModule(env_id="MaskedProbe-v0", **TINY)
    module.actor = _masked_case()[0]
    path = module.export_policy(tmp_path / "policy.pt2")
    loaded = torch.export.load(str(path)).module()
    obs, _ = MaskedProbe(num_envs=16, seed=1).reset()
    actions = loaded(*(obs[key] for key in module.observation_space.spaces))
    assert torch.equal(actions, module.act(obs, greedy=True))
    assert obs[ACTION_MASK_KEY].gather(1, actions.unsqueeze(1)).all() and (actions != 0).all()
    cartpole = SACModule(env_id="CartPole-v1", **TINY)
    loaded = torch.export.load(str(cartpole.export_policy(tmp_path / "cartpole.pt2"))).module()
    obs = torch.randn(8, 4)
    assert torch.equal(loaded(obs), cartpole.actor(obs).argmax(dim=-1))
    env = gym.make("CartPole-v1")
    observation, _ = env.reset(seed=0)
    action = cartpole.act(observation, greedy=True)
    assert env.action_space.contains(int(action))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(env_id="Pendulum-v1", target_entropy_scale=0.5), ValueError, r"target_entropy_scale is set.*is a Box"),
        (dict(target_entropy_scale=0.0), ValueError, "target_entropy_scale must be"),
        (dict(target_entropy_scale=1.5), ValueError, "target_entropy_scale must be"),
        (dict(target_entropy_scale="0.5"), TypeError, "target_entropy_scale must be a float"),
        (dict(alpha=0.1, target_entropy_scale=0.5), ValueError, r"target_entropy_scale is set.*alpha=0.1 fixes"),
        (dict(target_entropy=-1.0), ValueError, "target_entropy must be"),
        (dict(target_entropy=0.8), ValueError, "target_entropy must be"),  # above log 2
        (dict(target_update_env_steps=0), ValueError, "target_update_env_steps must be"),
        (dict(adam_eps=0.0), ValueError, "adam_eps must be"),
        (dict(env_id="MultiDiscreteProbe-v0"), ValueError, r"SACModule supports box, discrete action spaces"),
    ],
)
def test_combinations_that_cannot_work_are_clear_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        SACModule(**{"env_id": "CartPole-v1", **TINY, **kwargs})


def test_the_target_critics_are_copied_every_target_update_env_steps():
    settings = {**TINY, "learning_starts": 60, "updates_per_step": 1}
    module = SACModule(env_id="CartPole-v1", tau=1.0, target_update_env_steps=20, **settings)
    copies = []

    class Record(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):  # after the step's sync
            same = torch.equal(pl_module.target_critic.layers[0].weight, pl_module.critic.layers[0].weight)
            copies.append((pl_module.env_steps, same))

    quiet_trainer(max_steps=25, callbacks=[Record()]).fit(module)
    # 2 envs: env steps 62, 64, ..., 110 after the updates; a copy at the first update (the clock starts at 0 before
    # the warm-up), then where the env steps cross a multiple of 20; the critics move in between
    assert [steps for steps, same in copies if same] == [62, 80, 100]
    assert module.configure_optimizers().defaults["eps"] == 1e-8


def test_fits_learning_nothing_from_an_unused_update_generator():
    """The discrete losses draw nothing: a run leaves the update generator where it started."""
    module = SACModule(env_id="CartPole-v1", **TINY)
    start = module.update_generator.get_state()
    quiet_fit(module, 20)
    assert torch.equal(module.update_generator.get_state(), start)
    assert module.env_steps == 64 + 20 * 2


@pytest.mark.parametrize("env_id", ["CartPole-v1", "MaskedProbe-v0"])
def test_each_seed_of_num_seeds_equals_its_one_seed_run(env_id):
    settings = dict(env_id=env_id, **{**TINY, "updates_per_step": 5})
    multi = SACModule(seed=SEED, num_seeds=2, **settings)
    quiet_fit(multi, 30)
    for index in range(2):
        single = SACModule(seed=SEED + index, **settings)
        quiet_fit(single, 30)
        member = multi.seed_module(index)
        ours = {name: value for name, value in member.state_dict().items() if not name.startswith("seed_members.")}
        assert ours.keys() == single.state_dict().keys()
        for name, value in single.state_dict().items():
            torch.testing.assert_close(ours[name], value, atol=WEIGHT_TOLERANCE, rtol=0, msg=name)
        assert multi.source.sources[index].env_steps == single.source.env_steps
        assert torch.equal(multi.source.sources[index].generator.get_state(), single.source.generator.get_state())


def test_compile_gives_the_eager_run():
    """compile={"backend": "aot_eager"}: the same traced graphs run by eager kernels; the whole update (Adam and
    Polyak) compiled too."""

    def fit(compile):
        module = SACModule(env_id="CartPole-v1", seed=3, compile=compile, **TINY)
        quiet_fit(module, 30)
        return module

    eager, compiled = fit(False), fit({"backend": "aot_eager"})
    assert "discrete_sac_losses" in " ".join(compiled.compile_seconds)
    for name, weight in eager.state_dict().items():
        torch.testing.assert_close(compiled.state_dict()[name], weight, rtol=1e-4, atol=1e-5, msg=name)
    torch.testing.assert_close(compiled.source.buffer.actions, eager.source.buffer.actions)


def test_prioritized_replay_sets_each_sampled_transitions_priority_from_its_largest_critic_error():
    module = SACModule(env_id="CartPole-v1", prioritized=True, seed=2, **TINY)
    quiet_fit(module, 10)
    buffer = module.source.buffer
    assert isinstance(buffer, PrioritizedReplayBuffer)
    batch = module.source.next_batch()
    arguments = (module.actor, module.critic, module.target_critic, module.log_alpha, batch, module.discounts(batch))
    _, _, td_errors = discrete_sac_losses(*arguments, module.target_entropy, True, batch.weights)
    module.update_loss(batch)
    expected = (td_errors.double() + buffer.priority_eps) ** module.replay.prioritized_alpha
    torch.testing.assert_close(buffer.priorities[batch.indices], expected, rtol=1e-5, atol=1e-7)


def test_resume_is_exact(tmp_path):
    def fit(root, ckpt_path=None, stop_at=None):
        class StopAt(L.Callback):
            def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
                if stop_at is not None and trainer.global_step >= stop_at:
                    trainer.should_stop = True

        module = SACModule(env_id="MaskedProbe-v0", seed=SEED, prioritized=True, **TINY)
        callbacks = [ModelCheckpoint(dirpath=root, filename="last"), StopAt()]
        trainer = quiet_trainer(max_steps=30, default_root_dir=root, callbacks=callbacks, enable_checkpointing=True)
        trainer.fit(module, ckpt_path=ckpt_path)
        return module

    straight = fit(tmp_path / "straight")
    fit(tmp_path / "split", stop_at=20)
    resumed = fit(tmp_path / "split", ckpt_path="last")
    for name, value in straight.state_dict().items():
        assert torch.equal(resumed.state_dict()[name], value), name
    assert torch.equal(resumed.source.generator.get_state(), straight.source.generator.get_state())
    assert torch.equal(resumed.source.buffer.priorities, straight.source.buffer.priorities)
    assert resumed.env_steps == straight.env_steps


def test_dict_and_image_observations_give_each_critic_its_own_encoder():
    module = SACModule(env_id="DictProbe-v0", **TINY)
    assert len(module.critic.encoders) == 2 and module.critic.encoders[0] is not module.critic.encoders[1]
    obs, _ = DictProbe(num_envs=3, seed=0).reset()
    assert module.critic(obs).shape == (2, 3, 4) and module.act(obs, greedy=True).shape == (3,)
    quiet_fit(module, 5)


def _printed_defaults(capsys) -> dict:
    with pytest.raises(SystemExit):
        make_cli(["fit", "--model", "SACModule", "--print_config"])
    return yaml.safe_load(capsys.readouterr().out)["model"]["init_args"]


@pytest.mark.parametrize("name", ["sac_discrete_cartpole", "sac_discrete_acrobot"])
def test_the_discrete_configs_write_out_every_argument_and_fit_a_few_updates(name, tmp_path, capsys):
    config = yaml.safe_load((ROOT / "configs" / f"{name}.yaml").read_text())
    assert config["model"]["init_args"].keys() == _printed_defaults(capsys).keys()
    cli = make_cli(
        [
            "fit",
            "--config",
            str(ROOT / "configs" / f"{name}.yaml"),
            "--model.init_args.learning_starts=100",
            "--trainer.max_steps=5",
            "--trainer.enable_progress_bar=false",
            f"--trainer.default_root_dir={tmp_path}",
        ]
    )
    assert cli.model.discrete and cli.trainer.global_step == 5


def test_the_atari_config_is_cleanrls_settings_on_the_frame_once_buffer(tmp_path, capsys):
    pytest.importorskip("ale_py")
    config = yaml.safe_load((ROOT / "configs" / "sac_atari.yaml").read_text())
    settings = config["model"]["init_args"]
    assert settings.keys() == _printed_defaults(capsys).keys()
    cleanrl = dict(buffer_size=1_000_000, batch_size=64, learning_starts=20_000, train_freq=4, gamma=0.99, lr=3e-4)
    cleanrl.update(tau=1.0, target_update_env_steps=8_000, target_entropy_scale=0.89, adam_eps=1e-4, alpha_init=1.0)
    assert {key: settings[key] for key in cleanrl} == cleanrl
    preset = '{"atari": {"terminal_on_life_loss": true, "repeat_action_probability": 0.0, "max_episode_steps": 100}}'
    cli = make_cli(
        [
            "fit",
            "--config",
            str(ROOT / "configs" / "sac_atari.yaml"),
            "--model.env_id",
            "ALE/Pong-v5",
            "--model.init_args.env_kwargs",
            preset,
            "--model.init_args.buffer_size=2000",
            "--model.init_args.learning_starts=400",
            "--model.init_args.steps_per_epoch=25",
            "--total_env_steps=600",
            "--trainer.enable_progress_bar=false",
            "--trainer.default_root_dir",
            str(tmp_path),
        ]
    )
    module = cli.model
    assert module.obs_shape == (4, 84, 84) and module.source.envs.obs_dtype == torch.uint8
    assert isinstance(module.source.buffer, FrameStackReplayBuffer)  # each frame stored once
    assert module.critic.encoders is not None and cli.trainer.global_step > 0
    assert module.configure_optimizers().defaults["eps"] == 1e-4
