"""Prioritized experience replay: the sum tree, the prioritized buffers, DQN, SAC and TD3 with ``prioritized=True``."""

import math
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from rl_lightning import DQNModule, SACModule, TD3Module
from rl_lightning.algos.dqn import dqn_loss
from rl_lightning.data.frame_replay import FrameStackReplayBuffer
from rl_lightning.data.prioritized import (
    PRIORITY_EPS,
    PrioritizedFrameStackReplayBuffer,
    PrioritizedReplayBuffer,
    SumTree,
)
from rl_lightning.data.replay import ReplayBuffer
from rl_lightning.losses import compute_td_loss, compute_weighted_td_loss

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_frame_replay import _FakeFrameStacks, _play  # the frame-stack fake envs

# -- the sum tree ---------------------------------------------------------------------------------


def _integer_values(capacity, seed):
    """Integer values (exact float64 sums: the tree must then agree with a cumulative sum bit for bit), a
    quarter of them zero."""
    generator = torch.Generator().manual_seed(seed)
    values = torch.randint(1, 50, (capacity,), generator=generator).double()
    values[torch.rand(capacity, generator=generator) < 0.25] = 0.0
    return values


@pytest.mark.parametrize("capacity", [1, 2, 7, 37, 64, 1000])
def test_find_is_the_brute_force_prefix_search(capacity):
    """For any target in [0, total): the leaf the descent finds is the first whose running sum exceeds it
    (what a search of the cumulative sums finds), and never a zero leaf."""
    values = _integer_values(capacity, seed=capacity)
    values[0] = 3.0  # at least one non-zero value
    tree = SumTree(capacity)
    tree.update(torch.arange(capacity), values)
    total = values.sum()
    assert tree.total.item() == total.item() and tree.min.item() == values[values > 0].min().item()
    cumulative = values.cumsum(0)
    targets = torch.cat(
        [torch.rand(4096, generator=torch.Generator().manual_seed(1)).double() * total, cumulative[:-1]]
    )
    targets = targets[targets < total]
    expected = torch.searchsorted(cumulative, targets, right=True)
    found = tree.find(targets)
    assert torch.equal(found, expected)
    assert bool((values[found] > 0).all())


def test_sampling_frequencies_match_a_brute_force_sampler_within_5_standard_errors():
    """400,000 draws from 37 values (a quarter zero): each value's frequency is within 5 standard errors of
    value / total, as torch.multinomial's (the brute-force sampler) is, and zero values are never drawn."""
    values = _integer_values(37, seed=0)
    tree = SumTree(37)
    tree.update(torch.arange(37), values)
    draws = 400_000
    generator = torch.Generator().manual_seed(0)
    found = tree.find(torch.rand(draws, generator=generator, dtype=torch.float64) * tree.total)
    brute = torch.multinomial(values, draws, replacement=True, generator=generator)
    probabilities = values / values.sum()
    standard_errors = (probabilities * (1 - probabilities) / draws).sqrt()
    for sample in (found, brute):
        frequencies = torch.bincount(sample, minlength=37).double() / draws
        assert bool(((frequencies - probabilities).abs() <= 5 * standard_errors).all())
    assert torch.bincount(found, minlength=37)[values == 0].sum() == 0


def test_a_target_rounded_past_the_total_stays_on_a_non_zero_leaf():
    tree = SumTree(6)
    tree.update(torch.arange(6), torch.tensor([0.1, 0.2, 0.0, 0.3, 0.0, 0.0], dtype=torch.float64))
    total = tree.total
    beyond = torch.stack([total, torch.nextafter(total, torch.tensor(math.inf, dtype=torch.float64)), total * 2])
    assert tree.find(beyond).tolist() == [3, 3, 3]


def test_updates_level_by_level_equal_a_rebuild_bit_for_bit():
    """Batches of updates (repeated indices carrying one value) leave the trees exactly as rebuilding them from
    their leaves does: the trees are a function of the leaves, whatever the order of the updates."""
    capacity = 1000
    tree = SumTree(capacity)
    generator = torch.Generator().manual_seed(0)
    for _ in range(50):
        index = torch.randint(0, capacity, (64,), generator=generator)
        values = torch.rand(capacity, generator=generator, dtype=torch.float64)[index]  # one value per index
        values[:8] = 0.0
        values = torch.zeros(capacity, dtype=torch.float64).index_copy_(0, index, values)[index]
        tree.update(index, values)
    rebuilt = SumTree(capacity)
    rebuilt.rebuild(tree.values())
    assert torch.equal(tree.sums, rebuilt.sums) and torch.equal(tree.mins, rebuilt.mins)
    positive = tree.values()[tree.values() > 0]
    assert tree.min.item() == positive.min().item()


def test_sampling_a_batch_of_512_takes_depth_steps_not_batch_steps():
    """A 1M-leaf tree: one descent of 512 targets and one update of 512 leaves are each ~20 vectorised steps
    (under 20 ms on this CPU; a Python loop over the batch would take ~100x longer)."""
    import time

    tree = SumTree(1_000_000)
    tree.update(torch.arange(1_000_000), torch.rand(1_000_000, dtype=torch.float64))
    targets = torch.rand(512, dtype=torch.float64) * tree.total
    start = time.perf_counter()
    tree.find(targets)
    tree.update(torch.randint(0, 1_000_000, (512,)), torch.rand(512, dtype=torch.float64))
    assert tree.depth == 20 and time.perf_counter() - start < 0.5


# -- the buffers ---------------------------------------------------------------------------------


def _add(buffer, obs, rewards=None, dones=None):
    num_envs = buffer.num_envs
    rewards = torch.ones(num_envs) if rewards is None else rewards
    dones = torch.zeros(num_envs, dtype=torch.bool) if dones is None else dones
    buffer.add(obs, torch.zeros(num_envs, dtype=torch.int64), rewards, dones.clone(), obs + 0.5, dones)


def test_importance_weights_by_hand():
    """Four transitions with priorities set from TD errors 1, -3, 0.5, 8, alpha 0.5, beta 0.4:
    P(i) = p_i^alpha / sum_k p_k^alpha, w_i = (N P(i))^-beta / max_k (N P(k))^-beta, N = 4."""
    buffer = PrioritizedReplayBuffer(4, (1,), 1, alpha=0.5)
    for step in range(4):
        _add(buffer, torch.tensor([[float(step)]]))
    td_errors = [1.0, 3.0, 0.5, 8.0]
    buffer.update_priorities(torch.arange(4), torch.tensor([1.0, -3.0, 0.5, 8.0]))
    powered = [(abs(e) + PRIORITY_EPS) ** 0.5 for e in td_errors]
    probabilities = [p / sum(powered) for p in powered]
    raw = [(4 * p) ** -0.4 for p in probabilities]
    expected = [w / max(raw) for w in raw]
    sample = buffer.sample(2000, beta=0.4)
    assert torch.equal(sample.obs.squeeze(1), sample.indices.float())  # the samples are their slots' transitions
    for slot in range(4):
        chosen = sample.weights[sample.indices == slot]
        assert len(chosen) > 0 and torch.allclose(chosen, torch.tensor(expected[slot], dtype=torch.float32))
    assert torch.allclose(buffer.tree.values(), torch.tensor(powered, dtype=torch.float64))
    # beta 0: no correction; beta 1: w_i = p_min / p_i.
    assert bool((buffer.sample(64, beta=0.0).weights == 1).all())
    full = buffer.sample(64, beta=1.0)
    assert torch.allclose(full.weights.double(), min(powered) / buffer.tree.values(full.indices))


def test_new_transitions_get_the_largest_priority_so_far_and_repeated_indices_keep_the_larger():
    buffer = PrioritizedReplayBuffer(10, (1,), 2, alpha=1.0)
    for step in range(3):
        _add(buffer, torch.full((2, 1), float(step)))
    assert torch.equal(buffer.tree.values()[:6], torch.ones(6, dtype=torch.float64))  # 1 before any update
    # Slot 2 twice: the larger new priority, in either order.
    for errors in ([4.0, 9.0, 0.5], [9.0, 4.0, 0.5]):
        buffer.update_priorities(torch.tensor([2, 2, 3]), torch.tensor(errors))
        assert buffer.tree.values()[2].item() == pytest.approx(9.0 + PRIORITY_EPS)
        assert buffer.tree.values()[3].item() == pytest.approx(0.5 + PRIORITY_EPS)
    assert buffer.max_priority.item() == pytest.approx(9.0 + PRIORITY_EPS)
    _add(buffer, torch.full((2, 1), 3.0))
    assert buffer.tree.values()[6:8].tolist() == [pytest.approx(9.0 + PRIORITY_EPS)] * 2
    assert buffer.tree.values()[8:].tolist() == [0.0, 0.0]  # empty slots cannot be drawn
    assert buffer.tree.total.item() == pytest.approx(buffer.tree.values().sum().item())


def test_alpha_zero_samples_uniformly_with_unit_weights():
    buffer = PrioritizedReplayBuffer(8, (1,), 1, alpha=0.0)
    for step in range(8):
        _add(buffer, torch.tensor([[float(step)]]))
    buffer.update_priorities(torch.arange(8), torch.arange(8).float() * 100)
    sample = buffer.sample(16_000)
    assert bool((sample.weights == 1).all())
    frequencies = torch.bincount(sample.indices, minlength=8).double() / 16_000
    assert bool(((frequencies - 1 / 8).abs() < 5 * math.sqrt(1 / 8 * 7 / 8 / 16_000)).all())


@pytest.mark.parametrize(("num_envs", "n_step", "buffer_size"), [(2, 3, 21), (3, 2, 12), (1, 4, 9)])
def test_n_step_chains_are_the_uniform_buffers_and_the_newest_never_start_one(num_envs, n_step, buffer_size):
    """Across many ring wraps: the newest ``(n - 1) * num_envs`` slots (their chains incomplete) are zero in the
    tree, every other held slot holds its priority, and a prioritized sample is the uniform buffer's sample of
    the same slots (n-step sums cut at episode ends included)."""
    prioritized = PrioritizedReplayBuffer(buffer_size, (1,), num_envs, n_step=n_step, gamma=0.9, alpha=1.0)
    uniform = ReplayBuffer(buffer_size, (1,), num_envs, n_step=n_step, gamma=0.9)
    generator = torch.Generator().manual_seed(0)
    span = (n_step - 1) * num_envs
    for step in range(60):
        obs = torch.full((num_envs, 1), float(step))
        rewards = torch.rand(num_envs, generator=generator)
        dones = torch.rand(num_envs, generator=generator) < 0.2
        for buffer in (prioritized, uniform):
            _add(buffer, obs, rewards, dones)
        if prioritized.size <= span:
            continue
        newest = (prioritized.pos - 1 - torch.arange(span)) % buffer_size
        values = prioritized.tree.values()
        assert bool((values[newest] == 0).all())
        held = torch.zeros(buffer_size, dtype=torch.bool)
        held[: prioritized.size] = True
        held[newest] = False
        assert bool((values[held] > 0).all()) and bool((values[~held] == 0).all())
        sample = prioritized.sample(32)
        assert bool(held[sample.indices].all())
        same = uniform._samples_at(sample.indices)
        for name in ("obs", "actions", "rewards", "terminated", "next_obs", "discounts"):
            assert torch.equal(getattr(sample, name), getattr(same, name)), name
        prioritized.update_priorities(sample.indices, torch.rand(32, generator=generator) * 5)


@pytest.mark.parametrize("n_step", [1, 3])
def test_the_frame_once_buffer_samples_as_the_plain_prioritized_buffer(n_step):
    """Frame stacks with random episodes, the ring wrapped many times, the same priority updates: the frame-once
    buffer draws the same slots with the same weights and rebuilds the same stacks as the plain one."""
    envs = _FakeFrameStacks(3, 4, (6, 7), 0, "reset", seed=1)
    frames = PrioritizedFrameStackReplayBuffer(40, (4, 6, 7), 3, seed=3, n_step=n_step, gamma=0.9)
    plain = PrioritizedReplayBuffer(40, (4, 6, 7), 3, seed=3, obs_dtype=torch.uint8, n_step=n_step, gamma=0.9)
    generator = torch.Generator().manual_seed(0)

    def check():
        ours, theirs = frames.sample(16, beta=0.5), plain.sample(16, beta=0.5)
        for name in ours._fields:
            a, b = getattr(ours, name), getattr(theirs, name)
            assert (a is None and b is None) or torch.equal(a, b), name
        errors = torch.rand(16, generator=generator) * 3
        frames.update_priorities(ours.indices, errors)
        plain.update_priorities(theirs.indices, errors)

    _play(envs, (frames, plain), envs.reset(), 300, check, check_every=7)
    assert torch.equal(frames.tree.sums, plain.tree.sums)


@pytest.mark.parametrize("cls", ["plain", "frames"])
def test_state_dict_round_trip_restores_the_tree_and_continues_identically(cls):
    envs = _FakeFrameStacks(2, 4, (6, 7), 0, "reset", seed=2)

    def make():
        if cls == "frames":
            return PrioritizedFrameStackReplayBuffer(30, (4, 6, 7), 2, seed=1, n_step=2)
        return PrioritizedReplayBuffer(30, (4, 6, 7), 2, seed=1, obs_dtype=torch.uint8, n_step=2)

    original = make()
    obs = envs.reset()
    for _ in range(4):
        obs = _play(envs, [original], obs, 11)
        sample = original.sample(8)
        original.update_priorities(sample.indices, sample.rewards.abs() + sample.indices)
    restored = make()
    restored.load_state_dict(original.state_dict())
    assert torch.equal(restored.tree.sums, original.tree.sums) and torch.equal(restored.tree.mins, original.tree.mins)
    assert torch.equal(restored.max_priority, original.max_priority)
    for _ in range(3):
        obs = _play(envs, [original, restored], obs, 5)
        a, b = original.sample(8), restored.sample(8)
        for name in a._fields:
            x, y = getattr(a, name), getattr(b, name)
            assert (x is None and y is None) or torch.equal(x, y), name
        for buffer in (original, restored):
            buffer.update_priorities(a.indices, a.rewards.abs() + 1)
    assert torch.equal(restored.tree.sums, original.tree.sums)


def test_a_uniform_buffers_state_loads_with_priority_one():
    uniform = ReplayBuffer(10, (1,), 2)
    for step in range(3):
        _add(uniform, torch.full((2, 1), float(step)))
    prioritized = PrioritizedReplayBuffer(10, (1,), 2)
    prioritized.load_state_dict(uniform.state_dict())
    assert prioritized.tree.values().tolist() == [1.0] * 6 + [0.0] * 4


def test_bad_buffer_arguments_are_value_errors_naming_them():
    with pytest.raises(ValueError, match="alpha"):
        PrioritizedReplayBuffer(10, (1,), 1, alpha=-0.1)
    for beta in (-0.1, 1.5):
        with pytest.raises(ValueError, match="beta"):
            PrioritizedReplayBuffer(10, (1,), 1, beta=beta)
    with pytest.raises(ValueError, match="priority_eps"):
        PrioritizedReplayBuffer(10, (1,), 1, priority_eps=0.0)
    buffer = PrioritizedReplayBuffer(10, (1,), 1)
    with pytest.raises(RuntimeError, match="empty PrioritizedReplayBuffer"):
        buffer.sample(4)
    _add(buffer, torch.zeros(1, 1))
    with pytest.raises(ValueError, match="indices and td_errors"):
        buffer.update_priorities(torch.tensor([0]), torch.tensor([1.0, 2.0]))
    other = PrioritizedReplayBuffer(10, (1,), 1, alpha=0.5)
    with pytest.raises(ValueError, match="alpha"):
        other.load_state_dict(buffer.state_dict())


def test_the_buffers_state_their_bytes():
    buffer = PrioritizedReplayBuffer(1000, (4,), 2)
    assert buffer.nbytes == PrioritizedReplayBuffer.bytes_needed(1000, (4,), 2)
    assert buffer.nbytes == ReplayBuffer(1000, (4,), 2).nbytes + 8 * 1000 + 2 * 2 * 1024 * 8
    frames = PrioritizedFrameStackReplayBuffer(1000, (4, 6, 7), 2)
    assert frames.nbytes == PrioritizedFrameStackReplayBuffer.bytes_needed(1000, (4, 6, 7), 2)
    assert frames.nbytes - FrameStackReplayBuffer(1000, (4, 6, 7), 2).nbytes == 8 * 1000 + 2 * 2 * 1024 * 8


# -- the losses ------------------------------------------------------------------------------------


@pytest.mark.parametrize("loss", ["mse", "huber"])
def test_weighted_td_loss_weights_each_sample(loss):
    q_values, targets = torch.tensor([1.0, 2.0, -4.0]), torch.tensor([0.0, 2.5, 1.0])
    weights = torch.tensor([0.5, 1.0, 0.25])
    per_sample = [1.0, 0.25, 25.0] if loss == "mse" else [0.5, 0.125, 4.5]
    expected = sum(w * e for w, e in zip(weights.tolist(), per_sample, strict=True)) / 3
    assert compute_weighted_td_loss(q_values, targets, weights, loss).item() == pytest.approx(expected)
    ones = compute_weighted_td_loss(q_values, targets, torch.ones(3), loss)
    assert ones.item() == pytest.approx(compute_td_loss(q_values, targets, loss).item())


def test_dqn_loss_with_weights_returns_the_td_errors():
    module = DQNModule(env_id="CartPole-v1", num_envs=2, hidden_sizes=(8,))
    batch = _cartpole_batch(module)
    plain, q_mean = dqn_loss(module.q_network, module.target_network, batch, 0.99, None, True, "mse")
    weighted, q_mean_too, td_errors = dqn_loss(
        module.q_network, module.target_network, batch, 0.99, None, True, "mse", torch.ones(8)
    )
    assert weighted.item() == pytest.approx(plain.item()) and torch.equal(q_mean, q_mean_too)
    assert td_errors.shape == (8,) and not td_errors.requires_grad
    assert (td_errors.square().mean()).item() == pytest.approx(plain.item())


def _cartpole_batch(module):
    buffer = ReplayBuffer(16, (4,), 2)
    generator = torch.Generator().manual_seed(0)
    for _ in range(8):
        obs = torch.rand(2, 4, generator=generator)
        buffer.add(obs, torch.randint(0, 2, (2,), generator=generator), torch.ones(2), torch.zeros(2, dtype=bool), obs)
    return buffer.sample(8)


# -- the modules -----------------------------------------------------------------------------------


def _fit(module, max_steps, root=None, ckpt_path=None, stop_at=None):
    callbacks = []
    if root is not None:
        callbacks.append(ModelCheckpoint(dirpath=root / "checkpoints", filename="last"))
    if stop_at is not None:
        callbacks.append(_StopAt(stop_at))
    trainer = L.Trainer(
        max_steps=max_steps,
        default_root_dir=root,
        logger=False,
        enable_checkpointing=root is not None,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
    )
    trainer.fit(module, ckpt_path=ckpt_path)
    return trainer


class _StopAt(L.Callback):
    def __init__(self, step):
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step >= self.step:
            trainer.should_stop = True


def _small(algo, **overrides):
    if algo == "dqn":
        settings = dict(num_envs=4, buffer_size=500, batch_size=32, learning_starts=64, steps_per_epoch=5, n_step=2)
        return DQNModule(**settings, seed=5, prioritized=True, hidden_sizes=(16,), **overrides)
    cls = SACModule if algo == "sac" else TD3Module
    settings = dict(num_envs=2, buffer_size=500, batch_size=32, learning_starts=64, gradient_steps=2, steps_per_epoch=5)
    return cls(**settings, n_step=2, hidden_sizes=(16, 16), seed=5, prioritized=True, **overrides)


@pytest.mark.parametrize("algo", ["dqn", "sac", "td3"])
def test_prioritized_runs_update_the_priorities_and_anneal_beta(algo):
    module = _small(algo)
    _fit(module, 30)
    buffer = module.source.buffer
    assert isinstance(buffer, PrioritizedReplayBuffer)
    held = buffer.priorities[: buffer.size]
    assert len(held.unique()) > 10  # updated from TD errors, not all at the initial priority
    assert buffer.max_priority.item() == pytest.approx(held.max().item())
    run_env_steps = module.planned_env_steps(30)
    assert module.prioritized_beta_at(0) == 0.4 and module.prioritized_beta_at(run_env_steps) == 1.0
    assert module.prioritized_beta_at(run_env_steps // 2) == pytest.approx(
        0.4 + 0.6 * (run_env_steps // 2) / run_env_steps
    )


@pytest.mark.parametrize(("algo", "first", "total"), [("dqn", 10, 25), ("td3", 5, 15)])
def test_resume_gives_the_same_weights_and_tree_as_training_straight(tmp_path, algo, first, total):
    """prioritized=True, interrupted at an epoch's end and resumed from its checkpoint: the same weights, tree and
    priorities as one run straight through (the beta schedule follows the env steps: nothing else to save)."""
    straight = _small(algo)
    _fit(straight, total, tmp_path / "straight")
    _fit(_small(algo), total, tmp_path / "split", stop_at=first)
    resumed = _small(algo)
    _fit(resumed, total, tmp_path / "split", ckpt_path=tmp_path / "split" / "checkpoints" / "last.ckpt")
    for name, weight in straight.state_dict().items():
        assert torch.equal(resumed.state_dict()[name], weight), name
    a, b = straight.source.buffer, resumed.source.buffer
    assert torch.equal(a.tree.sums, b.tree.sums) and torch.equal(a.tree.mins, b.tree.mins)
    assert torch.equal(a.priorities, b.priorities) and torch.equal(a.max_priority, b.max_priority)
    assert straight.env_steps == resumed.env_steps


def test_uniform_runs_sample_no_weights():
    module = DQNModule(num_envs=2, buffer_size=100, batch_size=8, learning_starts=8, steps_per_epoch=5)
    _fit(module, 3)
    assert type(module.source.buffer) is ReplayBuffer
    batch = module.source.next_batch()
    assert batch.weights is None and batch.indices is None


def test_bad_module_arguments_are_value_errors_naming_them():
    with pytest.raises(ValueError, match="prioritized_alpha"):
        DQNModule(prioritized=True, prioritized_alpha=-0.5)
    for beta in (-0.1, 1.01):
        with pytest.raises(ValueError, match="prioritized_beta"):
            SACModule(prioritized=True, prioritized_beta=beta)
    with pytest.raises(TypeError, match="prioritized"):
        TD3Module(prioritized="true")

    class NoWeights(DQNModule):
        supports_prioritized = False

    with pytest.raises(ValueError, match="prioritized=True"):
        NoWeights(prioritized=True)
    NoWeights(prioritized=False)


@pytest.mark.parametrize("cls", [DQNModule, SACModule, TD3Module])
def test_prioritized_alpha_is_in_the_papers_range(cls):
    # alpha=100 used to pass: after 100 updates a batch of 64 held 2 distinct transitions, with weights ~1e-37.
    for alpha in (100, 1.01):
        with pytest.raises(
            ValueError, match=rf"prioritized_alpha must be a finite number in \[0.0, 1.0\], got {alpha}"
        ):
            cls(prioritized=True, prioritized_alpha=alpha)
    assert cls(prioritized=True, prioritized_alpha=1.0).replay.prioritized_alpha == 1.0
    assert cls(prioritized=True, prioritized_alpha=0).replay.prioritized_alpha == 0


def test_a_buffers_alpha_is_in_the_papers_range():
    with pytest.raises(ValueError, match=r"alpha must be a finite number in \[0.0, 1.0\], got 1.5"):
        PrioritizedReplayBuffer(10, (1,), 1, alpha=1.5)
    with pytest.raises(ValueError, match=r"alpha must be a finite number in \[0.0, 1.0\], got 2.0"):
        PrioritizedFrameStackReplayBuffer(10, (4, 2, 2), 1, alpha=2.0)


@pytest.mark.parametrize("cls", [DQNModule, SACModule, TD3Module])
@pytest.mark.parametrize(
    ("name", "value", "default"), [("prioritized_alpha", 0.8, 0.6), ("prioritized_beta", 1.0, 0.4)]
)
def test_prioritized_settings_without_prioritized_are_refused(cls, name, value, default):
    with pytest.raises(
        ValueError,
        match=rf"{name} is set \({value}\) but prioritized is False: it would have no effect; set prioritized=True, "
        rf"or leave {name} at its default \({default}\)",
    ):
        cls(**{name: value})
    assert getattr(cls(prioritized=True, **{name: value}).replay, name) == value
    # The defaults written out (as configs/*.yaml write them) are not "set".
    cls(prioritized=False, prioritized_alpha=0.6, prioritized_beta=0.4)


def test_an_algorithms_own_default_is_not_set():
    class Sharper(DQNModule):
        def __init__(self, prioritized: bool = False, prioritized_alpha: float = 0.7, **kwargs):
            super().__init__(prioritized=prioritized, prioritized_alpha=prioritized_alpha, **kwargs)

    assert Sharper().replay.prioritized_alpha == 0.7
    with pytest.raises(ValueError, match=r"prioritized_alpha is set \(0.6\) .* its default \(0.7\)"):
        Sharper(prioritized_alpha=0.6)


@pytest.mark.parametrize("whole_update", [False, True])
def test_compiled_prioritized_update_matches_eager(whole_update):
    """compile=True (and the whole update compiled) with prioritized replay: the compiled update (aot_eager: the
    traced graphs run by eager kernels) gives the eager run's weights and priorities to float tolerance."""
    compile = {"backend": "aot_eager", "whole_update": whole_update}
    eager, compiled = _small("dqn"), _small("dqn", compile=compile)
    for module in (eager, compiled):
        _fit(module, 20)
    assert set(compiled.compile_seconds) == {"dqn_loss"}
    for name, weight in eager.state_dict().items():
        torch.testing.assert_close(compiled.state_dict()[name], weight, msg=name)
    # float64 priorities of float32 TD errors: float32's tolerance.
    torch.testing.assert_close(
        compiled.source.buffer.priorities, eager.source.buffer.priorities, rtol=1.3e-6 * 10, atol=1e-5
    )


# -- learning ----------------------------------------------------------------------------------------


class _StopWhenSolved(L.Callback):
    def __init__(self, every_n_env_steps, threshold):
        self.every_n_env_steps, self.threshold = every_n_env_steps, threshold
        self.next_eval, self.returns = every_n_env_steps, []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if pl_module.env_steps >= self.next_eval:
            self.next_eval += self.every_n_env_steps
            self.returns.append(_greedy_mean_return(pl_module.q_network))
            trainer.should_stop = self.returns[-1] >= self.threshold


def _greedy_mean_return(q_network, num_episodes=32, seed=4242):
    from rl_lightning.callbacks import evaluate_policy

    result = evaluate_policy(lambda obs: q_network(obs).argmax(dim=-1), "CartPole-v1", num_episodes, seed)
    return result.returns.mean().item()


@pytest.mark.learning
def test_prioritized_dqn_solves_cartpole_greedy_mean_return_at_least_475_over_32_episodes():
    """DQNModule's defaults with prioritized=True (alpha 0.6, beta 0.4 -> 1), seed 0: the greedy mean return over
    32 evaluation episodes reaches >= 475 within uniform replay's 10,000-update budget (161k env steps,
    tests/algos/test_dqn.py). Seed 0 got there at 84k env steps natively (AVX-512) and under
    ATEN_CPU_CAPABILITY=avx2, at 44k under =default; seeds 1-5 at 56k-69k (uniform replay: 49k-69k)."""
    torch.set_num_threads(1)
    module = DQNModule(env_id="CartPole-v1", seed=0, prioritized=True)
    stopper = _StopWhenSolved(every_n_env_steps=4_000, threshold=475.0)
    trainer = L.Trainer(
        max_steps=10_000,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[stopper],
    )
    trainer.fit(module)
    assert stopper.returns[-1] >= 475.0 and module.env_steps <= 161_008, stopper.returns
    assert _greedy_mean_return(module.q_network) >= 475.0


def test_the_prioritized_buffers_keep_their_full_signatures():
    """Their arguments are the plain buffers' then alpha, beta, priority_eps: by position too (the public API)."""
    import inspect

    from rl_lightning.data.prioritized import PrioritizedFrameStackReplayBuffer, PrioritizedReplayBuffer

    for cls, last_plain in ((PrioritizedReplayBuffer, "gamma"), (PrioritizedFrameStackReplayBuffer, "padding")):
        names = list(inspect.signature(cls).parameters)
        assert names[:3] == ["buffer_size", "obs_shape", "num_envs"]
        assert names[names.index(last_plain) + 1 :] == ["alpha", "beta", "priority_eps"]
    buffer = PrioritizedReplayBuffer(64, (4,), 2, 0, "cpu", (), torch.float32, 1, 0.99, 0.5, 0.7, 1e-3)
    assert (buffer.alpha, buffer.beta, buffer.priority_eps) == (0.5, 0.7, 1e-3)
    with pytest.raises(ValueError, match="alpha"):
        PrioritizedReplayBuffer(64, (4,), 2, alpha=1.5)
