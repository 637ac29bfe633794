"""FusedCartPole: the pure CartPole step is the exact env's, the counter-based random stream is
uniform and deterministic, episodes under random actions last as long as with the exact env, and the
compiled and graph-captured runs equal the eager one."""

import math

import pytest
import torch

import rl_lightning
from rl_lightning.envs import CartPole
from rl_lightning.envs.cartpole import CartPoleConstants
from rl_lightning.envs.fused import FusedCartPole, hash_words, seed_key, step_with_reset, uniform16


def test_pure_step_equals_cartpole_step_in_float64():
    generator = torch.Generator().manual_seed(0)
    n = 4096
    states = (torch.rand(n, 4, generator=generator, dtype=torch.float64) - 0.5) * torch.tensor(
        [4.8, 4.0, 0.42, 4.0], dtype=torch.float64
    )
    actions = torch.randint(0, 2, (n,), generator=generator)
    env = CartPole(n, seed=0, dtype=torch.float64)
    env.state = states
    _, _, terminated, truncated, info = env.step(actions)
    reset_states = torch.full((4, n), 7.0, dtype=torch.float64)
    constants = CartPoleConstants.make(torch.float64, "cpu")
    next_state, steps, final, fused_terminated, fused_truncated = step_with_reset(
        states.T, torch.zeros(n, dtype=torch.int64), actions, reset_states, 500, constants
    )
    # One copy of the equations: the same numbers, not merely close ones.
    assert torch.equal(final.T.float(), info["final_observation"])
    assert torch.equal(fused_terminated, terminated) and torch.equal(fused_truncated, truncated)
    assert 0 < int(terminated.sum()) < n  # both branches are exercised
    torch.testing.assert_close(next_state[:, terminated], reset_states[:, terminated])
    torch.testing.assert_close(next_state[:, ~terminated], final[:, ~terminated])
    assert torch.equal(steps, torch.where(terminated, 0, 1))


def test_pure_step_truncates_at_the_time_limit():
    state = torch.zeros(4, 3)
    constants = CartPoleConstants.make(torch.float32, "cpu")
    _, steps, _, terminated, truncated = step_with_reset(
        state, torch.tensor([0, 498, 499]), torch.tensor([0, 1, 0]), torch.zeros(4, 3), 500, constants
    )
    assert truncated.tolist() == [False, False, True] and not terminated.any()
    assert steps.tolist() == [1, 499, 0]


def test_float32_pure_step_is_the_exact_envs_step():
    generator = torch.Generator().manual_seed(1)
    states = (torch.rand(512, 4, generator=generator) - 0.5) * torch.tensor([4.8, 4.0, 0.42, 4.0])
    actions = torch.randint(0, 2, (512,), generator=generator, dtype=torch.int32)
    env = CartPole(512, seed=0)
    env.state = states
    _, _, terminated, _, info = env.step(actions)
    _, _, final, fused_terminated, _ = step_with_reset(
        states.T.contiguous(), torch.zeros(512, dtype=torch.int32), actions, states.T, 500, env._constants
    )
    assert torch.equal(final.T, info["final_observation"]) and torch.equal(fused_terminated, terminated)
    assert 0 < int(terminated.sum()) < 512


def test_fused_cartpole_is_not_a_top_level_export():
    assert not hasattr(rl_lightning, "FusedCartPole") and not hasattr(rl_lightning.envs, "FusedCartPole")


def test_hash_words_are_deterministic_uniform_and_decorrelated():
    index = torch.arange(200_000, dtype=torch.int32)
    key, counter = torch.tensor(seed_key(3), dtype=torch.int32), torch.tensor(7, dtype=torch.int32)
    first, second = hash_words(key, counter, index, 2)
    assert first.dtype == torch.int32 and torch.equal(first, hash_words(key, counter, index, 1)[0])
    numbers = {
        "low": uniform16(first, 0),
        "high": uniform16(first, 1),
        "next word": uniform16(second, 0),
        "next step": uniform16(hash_words(key, counter + 1, index, 1)[0], 0),
        "other seed": uniform16(hash_words(torch.tensor(seed_key(4), dtype=torch.int32), counter, index, 1)[0], 0),
    }
    for name, u in numbers.items():
        assert u.dtype == torch.float32 and float(u.min()) >= 0 and float(u.max()) < 1, name
        assert abs(float(u.mean()) - 0.5) < 0.005 and abs(float(u.std()) - math.sqrt(1 / 12)) < 0.005, name
        histogram = torch.histc(u, bins=10, min=0, max=1)
        assert float((histogram / len(u) - 0.1).abs().max()) < 0.005, name
        if name != "low":
            correlation = torch.corrcoef(torch.stack([numbers["low"], u]))[0, 1]
            assert abs(float(correlation)) < 0.01, name
    bits = torch.stack([(first >> b) & 1 for b in range(32)]).float().mean(dim=1)
    assert float((bits - 0.5).abs().max()) < 0.01  # every bit is a fair coin (the action uses bit 0)
    assert seed_key(0) != seed_key(1) and seed_key(2**40) != seed_key(0)


def test_random_episodes_last_as_long_as_with_the_exact_env():
    """Mean episode length under uniformly random actions: within 3% of the exact env's (~22)."""
    fused = FusedCartPole(2048, seed=0, device="cpu", horizon=200, compile=False)
    fused.run()
    assert float(fused.state[:, :].abs().max()) < 5  # resets keep states in range
    fused_mean = 2048 * 200 / int(fused.episodes)

    env = CartPole(2048, seed=0)
    generator = torch.Generator().manual_seed(0)
    env.reset()
    episodes = 0
    for _ in range(200):
        _, _, terminated, truncated, _ = env.step(env.random_actions(generator))
        episodes += int((terminated | truncated).sum())
    exact_mean = 2048 * 200 / episodes
    assert 20 < exact_mean < 25
    assert abs(fused_mean / exact_mean - 1) < 0.03


def test_reset_states_are_uniform_within_the_reset_bound():
    fused = FusedCartPole(100_000, seed=1, device="cpu", horizon=1, compile=False)
    assert float(fused.state.abs().max()) <= 0.05 + 1e-7  # float32 rounding of the bound
    assert abs(float(fused.state.mean())) < 0.001
    assert abs(float(fused.state.std()) - 0.1 / math.sqrt(12)) < 0.001


def test_same_seed_same_run_and_seeds_differ():
    a, b, c = (FusedCartPole(256, seed=s, device="cpu", horizon=50, compile=False) for s in (0, 0, 1))
    for env in (a, b, c):
        env.run()
    assert torch.equal(a.state, b.state) and torch.equal(a.episode_steps, b.episode_steps)
    assert not torch.equal(a.state, c.state)


def test_compiled_run_equals_the_eager_run_on_cpu():
    eager = FusedCartPole(512, seed=2, device="cpu", horizon=20, compile=False)
    compiled = FusedCartPole(512, seed=2, device="cpu", horizon=20, compile=True)
    for _ in range(2):
        eager.run()
        compiled.run()
    torch.testing.assert_close(compiled.state, eager.state, rtol=1e-4, atol=1e-4)
    assert torch.equal(compiled.episode_steps, eager.episode_steps)
    assert int(compiled.episodes) == int(eager.episodes) > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (CUDA graphs)")
def test_graph_replay_equals_the_eager_run_on_cuda():
    eager = FusedCartPole(4096, seed=3, device="cuda", horizon=50, compile=False, graph=False)
    graphed = FusedCartPole(4096, seed=3, device="cuda", horizon=50, compile=True, graph=True)
    for _ in range(3):
        eager.run()
        graphed.run()
    torch.testing.assert_close(graphed.state, eager.state, rtol=1e-4, atol=1e-4)
    assert torch.equal(graphed.episode_steps, eager.episode_steps)
    assert int(graphed.episodes) == int(eager.episodes) > 0


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (dict(horizon=0), ValueError, "horizon must be >= 1"),
        (dict(num_envs=0), ValueError, "num_envs must be >= 1"),
        (dict(graph=True), ValueError, "graph=True needs a CUDA device"),
        (dict(seed=-1), ValueError, "seed must be >= 0"),
    ],
)
def test_bad_arguments_are_clear_errors(kwargs, error, message):
    arguments = dict(num_envs=8, device="cpu", compile=False) | kwargs
    with pytest.raises(error, match=message):
        FusedCartPole(**arguments)
