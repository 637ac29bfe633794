"""Rainbow's pieces on DQNModule (``dueling``, ``distributional="c51" | "qr"``, ``noisy``): each formula against its
paper on hand-computed cases, each option and all of them (with prioritized replay and n-step returns) through a
short fit, num_seeds, exact resume, export (noise off), compile, and the refused combinations."""

import inspect
import math
import runpy
import sys
from pathlib import Path

import lightning as L
import onnxruntime
import pytest
import torch
import yaml
from lightning.pytorch.callbacks import ModelCheckpoint
from sb3_contrib.common.utils import quantile_huber_loss as sb3_quantile_huber_loss

from rl_lightning import DQNModule
from rl_lightning.algos.dqn import distributional_dqn_loss
from rl_lightning.callbacks.epsilon import EpsilonDecay
from rl_lightning.cli import make_cli
from rl_lightning.data.replay import ReplayBufferSamples
from rl_lightning.distributional import (
    categorical_cross_entropy,
    categorical_kl,
    categorical_support,
    project_categorical,
    quantile_huber_loss,
    quantile_midpoints,
    quantile_td_targets,
)
from rl_lightning.nets import NoisyLinear, QHead, RainbowQNetwork, factorised_noise
from tests.quiet_trainer import quiet_fit, quiet_trainer

TINY = dict(
    num_envs=4,
    buffer_size=1_000,
    batch_size=32,
    learning_starts=64,
    steps_per_epoch=10,
    updates_per_step=5,
    hidden_sizes=(16,),
    target_update_env_steps=40,
)
ALL = dict(dueling=True, distributional="c51", v_min=0.0, v_max=20.0, noisy=True, prioritized=True, n_step=3)
ALL_QR = dict(dueling=True, distributional="qr", num_quantiles=8, noisy=True, prioritized=True, n_step=3)
#: Seed i of an N-seed run against its one-seed run: the vmapped matmuls round differently (tests/algos/test_num_seeds).
SEED_TOLERANCE = 1e-5


def _module(**kwargs) -> DQNModule:
    return DQNModule(seed=3, **{**TINY, **kwargs})


# -- C51 (Bellemare et al. 2017) -------------------------------------------------------------------------------------


def _projection_by_eq_7(next_probs, rewards, terminated, discount, support):
    """Eq. (7) term by term: (Phi T z)_i = sum_j [1 - |clip(T z_j) - z_i| / dz]_0^1 p_j."""
    delta = (support[-1] - support[0]) / (len(support) - 1)
    projected = torch.zeros_like(next_probs)
    for b in range(next_probs.shape[0]):
        d = discount[b] if isinstance(discount, torch.Tensor) else discount
        for j in range(len(support)):
            target = (rewards[b] + d * (0.0 if terminated[b] else 1.0) * support[j]).clamp(support[0], support[-1])
            for i in range(len(support)):
                projected[b, i] += (1 - (target - support[i]).abs() / delta).clamp(0, 1) * next_probs[b, j]
    return projected


def test_the_c51_projection_on_hand_computed_cases():
    support = categorical_support(0.0, 4.0, 5)  # atoms 0, 1, 2, 3, 4 (dz = 1)
    assert support.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    next_probs = torch.tensor(
        [
            [0.0, 1.0, 0.0, 0.0, 0.0],  # T z = 0.5 + z: atom 1 -> 1.5, split half and half between atoms 1 and 2
            [0.2, 0.2, 0.2, 0.2, 0.2],  # T z = 3 + z = 3..7: all but the first beyond v_max, clipped onto atom 4
            [0.1, 0.2, 0.3, 0.4, 0.0],  # terminal: every atom's mass at r = 2.25: 0.75 to atom 2, 0.25 to atom 3
            [0.1, 0.2, 0.3, 0.4, 0.0],  # T z = 1 + z falls exactly on atoms (l == u): each mass moves up one atom
            [0.0, 0.0, 0.0, 1.0, 0.0],  # discount 0.5, r = -2: T z = -2 + 1.5 = -0.5, below v_min: clipped to atom 0
        ]
    )
    rewards = torch.tensor([0.5, 3.0, 2.25, 1.0, -2.0])
    terminated = torch.tensor([False, False, True, False, False])
    discounts = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.5])
    expected = torch.tensor(
        [
            [0.0, 0.5, 0.5, 0.0, 0.0],
            [0.0, 0.0, 0.0, 0.2, 0.8],
            [0.0, 0.0, 0.75, 0.25, 0.0],
            [0.0, 0.1, 0.2, 0.3, 0.4],
            [1.0, 0.0, 0.0, 0.0, 0.0],
        ]
    )
    projected = project_categorical(next_probs, rewards, terminated, discounts, support)
    torch.testing.assert_close(projected, expected, atol=1e-6, rtol=0)
    # a float discount is every sample's
    torch.testing.assert_close(
        project_categorical(next_probs[:4], rewards[:4], terminated[:4], 1.0, support), expected[:4]
    )


def test_the_c51_projection_is_eq_7_of_the_paper_on_random_targets():
    generator = torch.Generator().manual_seed(0)
    support = categorical_support(-10.0, 10.0, 11)
    next_probs = torch.softmax(torch.randn(6, 11, generator=generator), dim=-1)
    rewards = torch.randn(6, generator=generator) * 6  # some targets beyond [-10, 10]
    terminated = torch.tensor([False, True, False, False, True, False])
    discounts = torch.tensor([0.99, 0.9, 0.5, 0.99**3, 1.0, 0.0])
    projected = project_categorical(next_probs, rewards, terminated, discounts, support)
    torch.testing.assert_close(projected, _projection_by_eq_7(next_probs, rewards, terminated, discounts, support))
    torch.testing.assert_close(projected.sum(dim=-1), torch.ones(6))


def test_c51_cross_entropy_and_kl_by_hand():
    target = torch.tensor([[0.5, 0.5, 0.0]])
    log_probs = torch.log(torch.tensor([[0.25, 0.5, 0.25]]))
    cross_entropy = -(0.5 * math.log(0.25) + 0.5 * math.log(0.5))
    torch.testing.assert_close(categorical_cross_entropy(target, log_probs), torch.tensor([cross_entropy]))
    # KL(m || p) = cross-entropy - H(m), H(m) = log 2; 0 log 0 = 0
    torch.testing.assert_close(categorical_kl(target, log_probs), torch.tensor([cross_entropy - math.log(2)]))
    assert categorical_kl(target, torch.log(torch.tensor([[0.5, 0.5, 1e-30]]))).abs().item() < 1e-6


# -- QR-DQN (Dabney et al. 2018) -------------------------------------------------------------------------------------


def test_the_quantile_huber_loss_by_hand():
    """N = 2: tau = 1/4, 3/4; theta = (0, 1); targets T theta = (0.5, 3).
    i = 0: u = (0.5, 3): L = (0.125, 2.5), weights |1/4 - 0| -> mean (0.03125 + 0.625) / 2 = 0.328125
    i = 1: u = (-0.5, 2): L = (0.125, 1.5), weights (|3/4 - 1|, 3/4) -> mean (0.03125 + 1.125) / 2 = 0.578125"""
    assert quantile_midpoints(2).tolist() == [0.25, 0.75]
    assert quantile_midpoints(4).tolist() == [0.125, 0.375, 0.625, 0.875]
    loss = quantile_huber_loss(torch.tensor([[0.0, 1.0]]), torch.tensor([[0.5, 3.0]]))
    torch.testing.assert_close(loss, torch.tensor([0.328125 + 0.578125]))
    # kappa = 2: L_2(3) = 2 (3 - 1) = 4 over kappa, L_2(2) = 2 / 2 = 1; the small errors 0.125 / 2
    loss = quantile_huber_loss(torch.tensor([[0.0, 1.0]]), torch.tensor([[0.5, 3.0]]), kappa=2.0)
    by_hand = (0.25 * 0.0625 + 0.25 * 2.0) / 2 + (0.25 * 0.0625 + 0.75 * 1.0) / 2
    torch.testing.assert_close(loss, torch.tensor([by_hand]))


def test_the_quantile_huber_loss_is_sb3_contribs_per_sample():
    generator = torch.Generator().manual_seed(1)
    quantiles = torch.randn(16, 10, generator=generator) * 3
    targets = torch.randn(16, 10, generator=generator) * 3
    ours = quantile_huber_loss(quantiles, targets)
    torch.testing.assert_close(ours.mean(), sb3_quantile_huber_loss(quantiles, targets, sum_over_quantiles=True))
    # the same gradient on the quantiles
    ours_input, theirs_input = quantiles.clone().requires_grad_(), quantiles.clone().requires_grad_()
    quantile_huber_loss(ours_input, targets).mean().backward()
    sb3_quantile_huber_loss(theirs_input, targets, sum_over_quantiles=True).backward()
    torch.testing.assert_close(ours_input.grad, theirs_input.grad)
    # the targets: r + d (1 - terminal) theta'
    next_quantiles = torch.tensor([[1.0, 2.0], [1.0, 2.0]])
    targets = quantile_td_targets(next_quantiles, torch.tensor([1.0, 1.0]), torch.tensor([False, True]), 0.5)
    assert targets.tolist() == [[1.5, 2.0], [1.0, 1.0]]


# -- noisy layers (Fortunato et al. 2018) and the dueling head (Wang et al. 2016) ----------------------------------


def test_factorised_noise_is_the_outer_product_of_f_of_draws_from_the_generator():
    torch.manual_seed(0)
    layer = NoisyLinear(3, 2, sigma_0=0.5)
    bound = 1 / math.sqrt(3)
    assert layer.weight_mu.abs().max() <= bound and layer.bias_mu.abs().max() <= bound
    torch.testing.assert_close(layer.weight_sigma, torch.full((2, 3), 0.5 * bound))
    torch.testing.assert_close(layer.bias_sigma, torch.full((2,), 0.5 * bound))
    assert not layer.input_noise.any() and not layer.output_noise.any()  # no noise until the first draw

    layer.reset_noise(torch.Generator().manual_seed(7))
    draws = torch.Generator().manual_seed(7)
    draws_in, draws_out = torch.randn(3, generator=draws), torch.randn(2, generator=draws)
    f_in, f_out = draws_in.sign() * draws_in.abs().sqrt(), draws_out.sign() * draws_out.abs().sqrt()
    torch.testing.assert_close(layer.input_noise, f_in)
    torch.testing.assert_close(layer.output_noise, f_out)
    x = torch.tensor([[1.0, -2.0, 0.5]])
    weight = torch.empty(2, 3)
    for i in range(2):
        for j in range(3):
            weight[i, j] = layer.weight_mu[i, j] + layer.weight_sigma[i, j] * f_out[i] * f_in[j]
    bias = layer.bias_mu + layer.bias_sigma * f_out
    with torch.no_grad():
        torch.testing.assert_close(layer(x), x @ weight.T + bias)
        torch.testing.assert_close(layer(x, noise=False), x @ layer.weight_mu.T + layer.bias_mu)
    value = factorised_noise(1000, torch.Generator().manual_seed(0))
    normal = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(value, normal.sign() * normal.abs().sqrt())


@pytest.mark.parametrize("distributional", [None, "c51", "qr"])
def test_the_dueling_head_has_mean_advantage_zero(distributional):
    torch.manual_seed(0)
    head = QHead(5, 3, dueling=True, distributional=distributional, num_atoms=7, num_quantiles=4)
    features = torch.randn(8, 5)
    with torch.no_grad():
        outputs = head.outputs(features)  # V + A - mean_a A: its mean over the actions is V
        torch.testing.assert_close(outputs.mean(dim=1), head.value_stream(features))
        advantages = head.action_stream(features).unflatten(-1, (3, head.num_outputs))
        torch.testing.assert_close(outputs - outputs.mean(dim=1, keepdim=True), advantages - advantages.mean(1, True))
        q_values = head(features)
    assert q_values.shape == (8, 3)
    if distributional == "c51":  # the expected value over the atoms
        probs = torch.softmax(outputs, dim=-1)
        torch.testing.assert_close(q_values, (probs * torch.linspace(-10, 10, 7)).sum(-1))
    else:  # the quantiles' mean (the Q-value itself for N = 1)
        torch.testing.assert_close(q_values, outputs.mean(dim=-1))


# -- the loss ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("distributional", ["c51", "qr"])
@pytest.mark.parametrize("double_dqn", [True, False])
def test_the_distributional_loss_picks_the_next_action_and_gives_the_priorities(distributional, double_dqn):
    torch.manual_seed(0)
    settings = dict(distributional=distributional, num_atoms=11, v_min=-5.0, v_max=5.0, num_quantiles=6)
    online, target = RainbowQNetwork((4,), 3, (8,), **settings), RainbowQNetwork((4,), 3, (8,), **settings)
    batch = ReplayBufferSamples(
        obs=torch.randn(10, 4),
        actions=torch.randint(0, 3, (10,)),
        next_obs=torch.randn(10, 4),
        terminated=torch.rand(10) < 0.3,
        rewards=torch.randn(10),
    )
    weights = torch.rand(10)
    loss, q_mean, priorities = distributional_dqn_loss(online, target, batch, 0.9, None, double_dqn, weights)
    with torch.no_grad():
        chooser = online if double_dqn else target
        next_actions = chooser(batch.next_obs).argmax(dim=1)
        next_distribution = target.distribution(batch.next_obs)[torch.arange(10), next_actions]
        taken = online.distribution(batch.obs)[torch.arange(10), batch.actions]
        if distributional == "c51":
            support = torch.linspace(-5, 5, 11)
            projected = project_categorical(next_distribution.exp(), batch.rewards, batch.terminated, 0.9, support)
            per_sample = categorical_cross_entropy(projected, taken)
            expected_priorities = categorical_kl(projected, taken)
            expected_q = (taken.exp() * support).sum(-1).mean()
        else:
            targets = quantile_td_targets(next_distribution, batch.rewards, batch.terminated, 0.9)
            per_sample = expected_priorities = quantile_huber_loss(taken, targets)
            expected_q = taken.mean()
    torch.testing.assert_close(loss, (weights * per_sample).mean())
    torch.testing.assert_close(priorities, expected_priorities)
    torch.testing.assert_close(q_mean, expected_q)
    unweighted, _ = distributional_dqn_loss(online, target, batch, 0.9, None, double_dqn)
    torch.testing.assert_close(unweighted, per_sample.mean())


# -- through the module -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [dict(dueling=True), dict(distributional="c51"), dict(distributional="qr", num_quantiles=8), dict(noisy=True), ALL],
    ids=["dueling", "c51", "qr", "noisy", "all"],
)
def test_each_option_trains(options):
    module = _module(**options)
    before = {name: value.clone() for name, value in module.q_network.state_dict().items()}
    trainer = quiet_fit(module, 20)
    assert trainer.global_step == 20 and module.env_steps == 64 + 20 * 4
    changed = [name for name, value in module.q_network.state_dict().items() if not torch.equal(value, before[name])]
    assert changed, "no weight moved"
    q_values = module(torch.randn(5, 4))
    assert q_values.shape == (5, 2) and torch.isfinite(q_values).all()
    if options.get("noisy"):  # the noise explores: no epsilon, no decay callback, the noise drawn
        assert module.epsilon == 0.0
        assert not any(isinstance(c, EpsilonDecay) for c in trainer.callbacks)
        assert module.q_network.head.action_stream.input_noise.any()


@pytest.mark.parametrize("options", [ALL, ALL_QR], ids=["c51", "qr"])
def test_prioritized_replay_takes_the_per_sample_kl_or_quantile_loss_as_priorities(options):
    module = _module(**options)
    seen = []
    update_priorities = module.update_priorities

    def spy(batch, priorities):  # before the optimizer step: the networks and noise the loss used
        with torch.no_grad():
            discounts = module.discounts(batch)
            *_, expected = distributional_dqn_loss(
                module.q_network, module.target_network, batch, discounts, None, True, batch.weights
            )
        seen.append((batch, priorities, expected))
        update_priorities(batch, priorities)

    module.update_priorities = spy
    quiet_fit(module, 10)
    assert len(seen) == 10
    batch, priorities, expected = seen[-1]
    torch.testing.assert_close(priorities, expected)
    assert batch.discounts is not None  # n_step=3: per-sample gamma^k
    buffer = module.source.buffer
    once = [i for i, index in enumerate(batch.indices.tolist()) if batch.indices.tolist().count(index) == 1]
    stored = buffer.priorities[batch.indices[once]]
    torch.testing.assert_close(stored, (expected[once].double() + 1e-6) ** options.get("prioritized_alpha", 0.6))


def test_greedy_play_and_export_use_the_mean_weights(tmp_path):
    module = _module(**ALL)
    quiet_fit(module, 10)
    network = module.q_network
    obs = torch.randn(64, 4)
    with torch.no_grad():
        mean_greedy = network.q_values(obs, noise=False).argmax(dim=1)
        noisy_q = network(obs)
    assert not torch.allclose(noisy_q, network.q_values(obs, noise=False).detach())  # the noise is there
    torch.testing.assert_close(module(obs), network.q_values(obs, noise=False))
    for _ in range(3):  # whatever the noise buffers hold
        network.reset_noise()
        assert torch.equal(module.act(obs, greedy=True), mean_greedy)
    for suffix in (".pt2", ".onnx"):
        path = module.export_policy(tmp_path / f"policy{suffix}")
        if suffix == ".pt2":
            actions = torch.export.load(path).module()(obs)
        else:
            session = onnxruntime.InferenceSession(str(path))
            actions = torch.from_numpy(session.run(None, {"obs": obs.numpy()})[0])
        assert torch.equal(actions, mean_greedy), suffix


def test_noisy_exploration_draws_its_noise_from_the_given_generator():
    module = _module(noisy=True)
    obs = torch.randn(256, 4)
    first = module.explore(obs, torch.Generator().manual_seed(5))
    noise = module.q_network.head.action_stream.input_noise.clone()
    other = module.explore(obs, torch.Generator().manual_seed(6))
    assert not torch.equal(module.q_network.head.action_stream.input_noise, noise)
    again = module.explore(obs, torch.Generator().manual_seed(5))
    assert torch.equal(module.q_network.head.action_stream.input_noise, noise) and torch.equal(first, again)
    assert other.shape == first.shape


@pytest.mark.parametrize("options", [ALL, ALL_QR], ids=["c51", "qr"])
def test_each_seed_of_two_equals_its_one_seed_run(options):
    multi = DQNModule(seed=3, num_seeds=2, **{**TINY, **options})
    quiet_fit(multi, 20)
    for index in range(2):
        single = DQNModule(seed=3 + index, **{**TINY, **options})
        quiet_fit(single, 20)
        member = multi.seed_module(index)
        ours = {k: v for k, v in member.state_dict().items() if not k.startswith("seed_members.")}
        theirs = single.state_dict()
        assert ours.keys() == theirs.keys()
        for name in ours:
            torch.testing.assert_close(ours[name], theirs[name], atol=SEED_TOLERANCE, rtol=0, msg=name)
        assert torch.equal(member.update_generator.get_state(), single.update_generator.get_state())
        assert torch.equal(multi.source.sources[index].generator.get_state(), single.source.generator.get_state())


@pytest.mark.parametrize("options", [ALL, ALL_QR], ids=["c51", "qr"])
def test_resume_is_exact(tmp_path, options):
    class StopAt(L.Callback):
        def __init__(self, step):
            self.step = step

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if self.step is not None and trainer.global_step >= self.step:
                trainer.should_stop = True

    def fit(root, ckpt_path=None, stop_at=None):
        module = _module(**options)
        callbacks = [ModelCheckpoint(dirpath=root, filename="last"), StopAt(stop_at)]
        trainer = quiet_trainer(max_steps=30, default_root_dir=root, callbacks=callbacks, enable_checkpointing=True)
        trainer.fit(module, ckpt_path=ckpt_path)
        return module

    straight = fit(tmp_path / "straight")
    fit(tmp_path / "split", stop_at=20)
    resumed = fit(tmp_path / "split", ckpt_path="last")
    assert resumed.env_steps == straight.env_steps
    for name, value in straight.state_dict().items():  # the noise buffers too
        assert torch.equal(resumed.state_dict()[name], value), name
    assert torch.equal(resumed.update_generator.get_state(), straight.update_generator.get_state())
    assert torch.equal(resumed.source.generator.get_state(), straight.source.generator.get_state())


@pytest.mark.parametrize("options", [ALL, ALL_QR], ids=["c51", "qr"])
def test_compile_equals_eager(options):
    """aot_eager traces the same graphs as eager (tests/algos/test_compile_off_policy.py)."""
    compiled = _module(compile={"backend": "aot_eager"}, **options)
    quiet_fit(compiled, 10)
    assert set(compiled.compile_seconds) == {"distributional_dqn_loss"}
    eager = _module(**options)
    quiet_fit(eager, 10)
    for name, value in eager.state_dict().items():
        torch.testing.assert_close(compiled.state_dict()[name], value, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(distributional="c51", loss="huber"), ValueError, r"loss is set \('huber'\) but distributional='c51'"),
        (dict(distributional="qr", loss="huber"), ValueError, r"loss is set \('huber'\) but distributional='qr'"),
        (dict(distributional="dist"), ValueError, "distributional must be one of None, 'c51', 'qr'; got 'dist'"),
        (dict(distributional="qr", num_atoms=21), ValueError, r"num_atoms is set \(21\) but distributional is 'qr'"),
        (dict(v_max=5.0), ValueError, r"v_max is set \(5.0\) but distributional is None.*set distributional='c51'"),
        (dict(distributional="c51", num_quantiles=8), ValueError, r"num_quantiles is set \(8\).*distributional='qr'"),
        (dict(distributional="c51", v_min=1.0, v_max=1.0), ValueError, r"v_min \(1.0\) must be below v_max \(1.0\)"),
        (dict(distributional="c51", num_atoms=1), ValueError, "num_atoms must be >= 2, got 1"),
        (dict(distributional="qr", num_quantiles=0), ValueError, "num_quantiles must be >= 1, got 0"),
        (dict(noisy=True, epsilon_start=0.5), ValueError, r"epsilon_start is set \(0.5\) but noisy=True explores"),
        (dict(noisy=True, exploration_fraction=0.2), ValueError, r"exploration_fraction is set \(0.2\) but noisy"),
        (dict(noisy_sigma=0.1), ValueError, r"noisy_sigma is set \(0.1\) but noisy is False.*set noisy=True"),
        (dict(noisy=True, noisy_sigma=0.0), ValueError, r"noisy_sigma must be a finite number in \(0.0, inf\]"),
        (dict(dueling="yes"), TypeError, "dueling must be a bool"),
        (dict(noisy=1), TypeError, "noisy must be a bool"),
    ],
)
def test_bad_values_and_combinations_are_refused(kwargs, error, match):
    with pytest.raises(error, match=match):
        _module(**kwargs)


def test_the_defaults_written_out_are_accepted():
    """configs/*.yaml write every argument: the unused ones at their defaults are not "set"."""
    DQNModule(distributional="qr", num_atoms=51, v_min=-10.0, v_max=10.0, loss="mse", noisy_sigma=0.5)
    DQNModule(noisy=True, epsilon_start=1.0, epsilon_end=0.05, exploration_fraction=0.1)


# -- the configs and the script ---------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ["rainbow_cartpole", "rainbow_atari", "dqn_cartpole", "dqn_atari"]


@pytest.mark.parametrize("name", CONFIGS)
def test_the_configs_write_out_every_argument_and_build(name):
    init_args = yaml.safe_load((ROOT / "configs" / f"{name}.yaml").read_text())["model"]["init_args"]
    arguments = set(inspect.signature(DQNModule.__init__).parameters) - {"self"}
    assert set(init_args) == arguments
    assert {"dueling", "distributional", "noisy", "noisy_sigma"} <= set(init_args)
    if name.startswith("rainbow"):
        assert init_args["dueling"] and init_args["noisy"] and init_args["prioritized"]
        assert init_args["distributional"] == "c51" and init_args["n_step"] == 3
    if name == "rainbow_atari":  # Hessel et al. 2018, table 1
        assert (init_args["lr"], init_args["v_min"], init_args["v_max"], init_args["num_atoms"]) == (
            6.25e-5,
            -10,
            10,
            51,
        )
        assert (init_args["prioritized_alpha"], init_args["prioritized_beta"], init_args["batch_size"]) == (
            0.5,
            0.4,
            32,
        )
        assert (init_args["target_update_env_steps"], init_args["learning_starts"]) == (
            8_000,
            20_000,
        )  # 32k, 80k frames


def test_rl_lightning_fit_takes_the_rainbow_config(tmp_path):
    cli = make_cli(
        [
            "fit",
            "--config",
            str(ROOT / "configs" / "rainbow_cartpole.yaml"),
            "--model.init_args.learning_starts=64",
            "--model.init_args.buffer_size=1000",
            "--model.init_args.batch_size=16",
            "--trainer.max_steps=5",
            "--trainer.enable_progress_bar=false",
            f"--trainer.default_root_dir={tmp_path}",
        ]
    )
    assert cli.trainer.global_step == 5 and isinstance(cli.model.q_network, RainbowQNetwork)
    [checkpoint] = (tmp_path / "lightning_logs").glob("DQN-CartPole-v1/version_0/checkpoints/last.ckpt")
    loaded = DQNModule.load_from_checkpoint(checkpoint)
    assert loaded.hparams.distributional == "c51" and loaded.hparams.noisy and loaded.hparams.v_max == 100.0


def test_train_dqn_takes_the_rainbow_flags(tmp_path, monkeypatch):
    """scripts/train_dqn.py reads every DQNModule argument as a flag (its --config takes the script's flat options,
    as --print_config writes them, not the model/trainer layout of configs/)."""
    monkeypatch.chdir(tmp_path)
    argv = ["train_dqn.py", "--dueling", "true", "--distributional", "qr", "--num_quantiles", "8", "--noisy", "true"]
    argv += ["--prioritized", "true", "--n_step", "3", "--max_steps", "5", "--learning_starts", "64"]
    argv += ["--buffer_size", "1000", "--batch_size", "16", "--no_video"]
    monkeypatch.setattr(sys, "argv", argv)
    runpy.run_path(str(ROOT / "scripts" / "train_dqn.py"), run_name="__main__")  # returns after a finished run
    [checkpoint] = (tmp_path / "lightning_logs").glob("DQN-CartPole-v1/version_0/checkpoints/last.ckpt")
    loaded = DQNModule.load_from_checkpoint(checkpoint)
    assert loaded.hparams.distributional == "qr" and loaded.hparams.num_quantiles == 8 and loaded.hparams.noisy


def test_the_rainbow_atari_config_fits_a_few_updates(tmp_path):
    pytest.importorskip("ale_py")
    preset = '{"atari": {"terminal_on_life_loss": true, "repeat_action_probability": 0.0, "max_episode_steps": 100}}'
    cli = make_cli(
        [
            "fit",
            "--config",
            str(ROOT / "configs" / "rainbow_atari.yaml"),
            "--model.env_id=ALE/Pong-v5",
            f"--model.init_args.env_kwargs={preset}",
            "--model.init_args.buffer_size=2000",
            "--model.init_args.learning_starts=400",
            "--model.init_args.steps_per_epoch=25",
            "--total_env_steps=600",
            "--trainer.enable_progress_bar=false",
            f"--trainer.default_root_dir={tmp_path}",
        ]
    )
    assert cli.model.env_steps >= 600 and cli.trainer.global_step == 50
    assert cli.model.q_network.head.value_stream is not None and cli.model.epsilon == 0.0


@pytest.mark.parametrize("distributional", ["c51", "qr"])
def test_a_masked_env_acts_only_on_legal_actions(distributional):
    module = DQNModule(
        env_id="MaskedProbe-v0",
        seed=0,
        distributional=distributional,
        dueling=True,
        noisy=True,
        **{**TINY, "num_quantiles": 8} if distributional == "qr" else TINY,
    )
    quiet_fit(module, 10)
    envs = module.make_envs(64, 5)
    obs, _ = envs.reset(seed=5)
    mask = obs["action_mask"]
    assert not mask.all()  # some actions are illegal
    for greedy in (True, False):
        actions = module.act(obs, greedy=greedy)
        assert mask.gather(1, actions.unsqueeze(1)).all()
    assert mask.gather(1, module.explore(obs, torch.Generator().manual_seed(0)).unsqueeze(1)).all()
