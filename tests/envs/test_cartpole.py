"""The torch CartPole against gymnasium's CartPole-v1, the reference it must match."""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.envs.classic_control.cartpole import CartPoleEnv
from hypothesis import given, settings
from hypothesis import strategies as st

from rl_lightning.envs import CartPole

X_THRESHOLD = 2.4
THETA_THRESHOLD = 12 * 2 * math.pi / 360


def _gymnasium_step(genv: CartPoleEnv, state: np.ndarray, action: int):
    """gymnasium's next (float64 state, float32 obs, reward, terminated) from `state`."""
    genv.state = np.array(state, dtype=np.float64)
    genv.steps_beyond_terminated = None  # else a second terminating step would give reward 0
    obs, reward, terminated, truncated, _ = genv.step(action)
    assert not truncated
    return genv.state.copy(), obs, reward, terminated


def _test_states(num_random: int, seed: int) -> np.ndarray:
    """Random states over (and beyond) the non-terminal region, plus states whose next x or
    theta lands within 1e-7 of a termination threshold, on either side."""
    rng = np.random.default_rng(seed)
    high = np.array([2.6, 3.0, 0.25, 3.5])
    random_states = rng.uniform(-high, high, size=(num_random, 4))
    edge = rng.uniform(-high, high, size=(num_random, 4))
    offset = rng.uniform(-1e-7, 1e-7, size=num_random)
    sign = rng.choice([-1.0, 1.0], size=num_random)
    # next x = x + tau x_dot (and the same for theta): aim it at +-threshold + offset.
    half = num_random // 2
    edge[:half, 0] = sign[:half] * X_THRESHOLD + offset[:half] - 0.02 * edge[:half, 1]
    edge[half:, 2] = sign[half:] * THETA_THRESHOLD + offset[half:] - 0.02 * edge[half:, 3]
    return np.concatenate([random_states, edge, np.zeros((1, 4))])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("action", [0, 1])
def test_one_step_matches_gymnasium_from_many_states(dtype, action):
    states = _test_states(num_random=400, seed=action)
    if dtype == torch.float32:
        states = states.astype(np.float32).astype(np.float64)  # the states the env can hold
    env = CartPole(len(states), seed=0, dtype=dtype)
    env.state = torch.as_tensor(states)
    _, reward, terminated, truncated, info = env.step(torch.full((len(states),), action))

    genv = CartPoleEnv()
    genv.reset(seed=0)
    expected = [_gymnasium_step(genv, state, action) for state in states]
    next_states = np.stack([e[0] for e in expected])
    expected_obs = np.stack([e[1] for e in expected])
    expected_terminated = np.array([e[3] for e in expected])
    assert 0.2 < expected_terminated.mean() < 0.8  # both outcomes are well represented

    final_obs = info["final_observation"].numpy()
    assert reward.tolist() == [e[2] for e in expected] == [1.0] * len(states)
    assert not truncated.any()
    if dtype == torch.float64:
        assert np.allclose(final_obs, expected_obs, rtol=1e-6, atol=1e-7)
        assert terminated.tolist() == expected_terminated.tolist()  # even within 1e-7 of a threshold
    else:
        assert np.allclose(final_obs, expected_obs, rtol=1e-5, atol=1e-6)
        # float32 rounding may flip the comparison only within ~1e-6 of a threshold.
        margin = np.minimum(
            np.abs(np.abs(next_states[:, 0]) - X_THRESHOLD), np.abs(np.abs(next_states[:, 2]) - THETA_THRESHOLD)
        )
        clear = margin > 1e-6
        assert clear.sum() > len(states) * 0.45  # all but the deliberate edge states
        assert terminated.numpy()[clear].tolist() == expected_terminated[clear].tolist()
    # Envs that did not terminate carry on from exactly that state.
    alive = ~terminated
    assert torch.equal(env.state[alive].float(), info["final_observation"][alive])
    if dtype == torch.float64:
        assert np.allclose(env.state[alive].numpy(), next_states[alive.numpy()], rtol=1e-12, atol=1e-12)


@settings(max_examples=200, deadline=None)
@given(
    state=st.tuples(
        st.floats(-2.4, 2.4),
        st.floats(-5.0, 5.0),
        st.floats(-THETA_THRESHOLD, THETA_THRESHOLD),
        st.floats(-5.0, 5.0),
    ),
    action=st.integers(0, 1),
)
def test_float64_step_matches_gymnasium_property(state, action):
    env = CartPole(1, seed=0, dtype=torch.float64)
    env.state = torch.tensor([state], dtype=torch.float64)
    obs, reward, terminated, _, info = env.step(torch.tensor([action]))
    genv = CartPoleEnv()
    genv.reset(seed=0)
    next_state, expected_obs, expected_reward, expected_terminated = _gymnasium_step(genv, state, action)
    assert bool(terminated) == expected_terminated
    assert float(reward) == expected_reward == 1.0
    assert np.allclose(info["final_observation"][0].numpy(), expected_obs, rtol=1e-6, atol=1e-7)
    if not expected_terminated:
        assert np.allclose(env.state[0].numpy(), next_state, rtol=1e-12, atol=1e-12)
        assert torch.equal(obs, info["final_observation"])


def test_float64_trajectories_follow_gymnasium_until_termination():
    num_envs, num_steps = 16, 200
    genvs = [gym.make("CartPole-v1") for _ in range(num_envs)]
    starts = [genv.reset(seed=100 + i)[0] for i, genv in enumerate(genvs)]
    env = CartPole(num_envs, seed=0, dtype=torch.float64)
    env.state = torch.as_tensor(np.stack([genv.unwrapped.state for genv in genvs]))
    assert np.array_equal(env.state.float().numpy(), np.stack(starts))
    actions = torch.randint(0, 2, (num_steps, num_envs), generator=torch.Generator().manual_seed(0))
    running = np.ones(num_envs, dtype=bool)
    lengths = np.zeros(num_envs, dtype=int)
    max_error = 0.0
    for t in range(num_steps):
        _, reward, terminated, truncated, info = env.step(actions[t])
        for i in np.flatnonzero(running):
            obs, g_reward, g_terminated, g_truncated, _ = genvs[i].step(int(actions[t, i]))
            max_error = max(max_error, float(np.abs(info["final_observation"][i].numpy() - obs).max()))
            assert (float(reward[i]), bool(terminated[i]), bool(truncated[i])) == (
                g_reward,
                g_terminated,
                g_truncated,
            ), f"env {i} step {t}"
            if g_terminated:
                running[i] = False
                lengths[i] = t + 1
        if not running.any():
            break
    assert not running.any()
    assert max_error < 1e-6
    assert lengths.min() >= 8 and lengths.mean() > 12


def _hold_still(env: CartPole) -> None:
    """Put every env back at the origin, so that no episode can terminate."""
    env.state = torch.zeros(env.num_envs, 4, dtype=env.dtype)


def test_truncation_at_exactly_500_steps_then_auto_reset():
    env = CartPole(4, seed=0)
    env.reset()
    actions = torch.tensor([0, 1, 0, 1])
    for t in range(1, 500):
        _hold_still(env)
        _, _, terminated, truncated, _ = env.step(actions)
        assert not terminated.any() and not truncated.any(), t
        assert env.episode_steps.tolist() == [t] * 4
    _hold_still(env)
    obs, reward, terminated, truncated, info = env.step(actions)
    assert truncated.all() and not terminated.any()
    assert reward.tolist() == [1.0] * 4
    assert env.episode_steps.tolist() == [0] * 4
    # The final obs is one step from the origin; the returned obs is a fresh reset state.
    assert torch.allclose(info["final_observation"][:, 1].abs(), torch.tensor(0.195122), atol=1e-6)
    assert (obs.abs() <= 0.05).all() and not torch.equal(obs, info["final_observation"])


def test_episode_clocks_are_per_env_and_both_flags_can_be_true_together():
    env = CartPole(3, seed=0)
    env.reset()
    actions = torch.tensor([1, 1, 1])
    falling = torch.tensor([2.39, 1.0, 0.0, 0.0])  # x crosses 2.4 on the next step
    for t in range(1, 601):
        _hold_still(env)
        if t == 100:
            env.state[0] = falling  # env 0 terminates at t = 100 and restarts its clock
        if t == 500:
            env.state[1] = falling  # env 1 terminates on its 500th step: both flags
        _, _, terminated, truncated, _ = env.step(actions)
        expected_terminated = [t == 100, t == 500, False]
        expected_truncated = [t == 600, t == 500, t == 500]
        assert terminated.tolist() == expected_terminated, t
        assert truncated.tolist() == expected_truncated, t


def test_both_flags_together_like_gymnasium_time_limit():
    genv = gym.make("CartPole-v1")
    genv.reset(seed=0)
    flags = []
    for t in range(1, 501):
        genv.unwrapped.state = np.array([2.39, 1.0, 0.0, 0.0]) if t == 500 else np.zeros(4)
        _, _, terminated, truncated, _ = genv.step(1)
        flags.append((terminated, truncated))
    assert flags[-1] == (True, True) and flags[-2] == (False, False)


def test_max_episode_steps_is_configurable_and_validated():
    env = CartPole(2, seed=0, max_episode_steps=3)
    for _ in range(2):
        _hold_still(env)
        assert not env.step(torch.tensor([0, 1]))[3].any()
    _hold_still(env)
    assert env.step(torch.tensor([0, 1]))[3].all()
    assert CartPole(2).max_episode_steps == gym.spec("CartPole-v1").max_episode_steps == 500
    with pytest.raises(ValueError, match="max_episode_steps"):
        CartPole(2, max_episode_steps=0)
    with pytest.raises(TypeError, match="max_episode_steps"):
        CartPole(2, max_episode_steps=2.5)
    with pytest.raises(TypeError, match="dtype"):
        CartPole(2, dtype=torch.float16)


def test_final_observation_is_the_terminal_state_and_obs_the_next_start():
    env = CartPole(2, seed=0)
    env.state = torch.tensor([[2.39, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    obs, _, terminated, _, info = env.step(torch.tensor([1, 1]))
    assert terminated.tolist() == [True, False]
    assert info["final_observation"][0, 0] == pytest.approx(2.39 + 0.02 * 1.0)
    assert (obs[0].abs() <= 0.05).all() and obs[0, 0] != info["final_observation"][0, 0]
    assert torch.equal(env.state[0], obs[0]) and env.episode_steps.tolist() == [0, 1]


def test_state_is_a_view_and_the_setter_validates_and_copies():
    env = CartPole(3, seed=0)
    env.state[1] = torch.tensor([0.1, 0.2, 0.03, 0.4])
    assert env.state[1].tolist() == pytest.approx([0.1, 0.2, 0.03, 0.4])
    value = torch.zeros(1, 4)
    single = CartPole(1, seed=0)
    single.state = value
    value[0, 0] = 1.0  # must not reach the env
    assert single.state[0, 0] == 0.0
    with pytest.raises(ValueError, match="shape"):
        env.state = torch.zeros(4, 3)


def _episode_lengths_ours(num_envs: int, start_before: int, max_episode_steps: int, seed: int):
    """Lengths and truncation flags of every episode that starts before step `start_before`
    (all of them finish: the run goes on for max_episode_steps more steps)."""
    env = CartPole(num_envs, seed=seed, max_episode_steps=max_episode_steps)
    env.reset()
    generator = torch.Generator().manual_seed(seed)
    start = torch.zeros(num_envs, dtype=torch.int64)
    lengths, truncations = [], []
    for t in range(start_before + max_episode_steps):
        _, _, terminated, truncated, _ = env.step(torch.randint(0, 2, (num_envs,), generator=generator))
        done = terminated | truncated
        counted = done & (start < start_before)
        lengths.append((t + 1 - start)[counted])
        truncations.append(truncated[counted])
        start = torch.where(done, t + 1, start)
    return torch.cat(lengths).double().numpy(), torch.cat(truncations).numpy()


def _episode_lengths_gymnasium(num_envs: int, start_before: int, max_episode_steps: int, seed: int):
    """The same for gymnasium's vectorised CartPole, whose NEXT_STEP auto-reset spends one
    extra `step` call (reward 0, no flags) on the reset of a finished env."""
    env = gym.make_vec(
        "CartPole-v1",
        num_envs=num_envs,
        vectorization_mode="vector_entry_point",
        max_episode_steps=max_episode_steps,
    )
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    episode_steps = np.zeros(num_envs, dtype=int)
    resetting = np.zeros(num_envs, dtype=bool)
    lengths, truncations = [], []
    steps_taken = np.zeros(num_envs, dtype=int)  # real env steps (without reset calls)
    started_at = np.zeros(num_envs, dtype=int)
    while (steps_taken < start_before + max_episode_steps).any():
        _, _, terminated, truncated, _ = env.step(rng.integers(0, 2, size=num_envs))
        stepping = ~resetting
        episode_steps[stepping] += 1
        steps_taken[stepping] += 1
        done = stepping & (terminated | truncated)
        counted = done & (started_at < start_before)
        lengths.append(episode_steps[counted])
        truncations.append(truncated[counted])
        episode_steps[done] = 0
        started_at[done] = steps_taken[done]
        resetting = done
    return np.concatenate(lengths).astype(float), np.concatenate(truncations)


def _assert_same_mean(ours: np.ndarray, theirs: np.ndarray, num_standard_errors: float = 4.0) -> None:
    standard_error = math.sqrt(ours.var(ddof=1) / len(ours) + theirs.var(ddof=1) / len(theirs))
    assert abs(ours.mean() - theirs.mean()) < num_standard_errors * standard_error, (
        ours.mean(),
        theirs.mean(),
        standard_error,
    )


def test_random_policy_episode_lengths_agree_with_gymnasium():
    # ~12k episodes each: the standard error of a mean length is ~0.1 steps.
    ours, ours_truncated = _episode_lengths_ours(512, start_before=500, max_episode_steps=500, seed=0)
    theirs, theirs_truncated = _episode_lengths_gymnasium(512, start_before=500, max_episode_steps=500, seed=0)
    assert len(ours) > 10_000 and len(theirs) > 10_000
    assert 21.0 < ours.mean() < 24.0 and 21.0 < theirs.mean() < 24.0  # ~22.4 for a random policy
    _assert_same_mean(ours, theirs)
    _assert_same_mean(ours**2, theirs**2)  # the spread agrees too
    assert not ours_truncated.any() and not theirs_truncated.any()  # 500 steps are out of reach
    assert ours.min() >= 8 and theirs.min() >= 8  # the fastest fall from near upright takes 8 steps


def test_random_policy_truncation_rate_agrees_with_gymnasium():
    # With a 30-step limit ~20% of random-policy episodes are truncated: a rate worth comparing.
    ours, ours_truncated = _episode_lengths_ours(512, start_before=200, max_episode_steps=30, seed=1)
    theirs, theirs_truncated = _episode_lengths_gymnasium(512, start_before=200, max_episode_steps=30, seed=1)
    assert 0.1 < ours_truncated.mean() < 0.4 and 0.1 < theirs_truncated.mean() < 0.4
    _assert_same_mean(ours_truncated.astype(float), theirs_truncated.astype(float))
    _assert_same_mean(ours, theirs)
    assert ours.max() == theirs.max() == 30
    assert (ours[ours_truncated] == 30).all() and (theirs[theirs_truncated] == 30).all()


def test_reset_states_are_uniform_in_the_reset_box():
    num_envs = 100_000
    env = CartPole(num_envs, seed=0)
    obs, _ = env.reset()
    assert (obs.abs() <= 0.05).all()
    # Uniform(-0.05, 0.05): mean 0 (standard error 0.1 / sqrt(12 num_envs)), variance 0.1^2 / 12.
    std = 0.1 / math.sqrt(12)
    assert (obs.mean(0).abs() < 5 * std / math.sqrt(num_envs)).all()
    assert torch.allclose(obs.var(0), torch.tensor(std**2), rtol=0.02)
    # Ten equal bins of each component hold ~10% each (binomial sd ~0.1% of num_envs).
    for component in obs.T:
        counts = torch.histc(component, bins=10, min=-0.05, max=0.05)
        assert ((counts / num_envs - 0.1).abs() < 0.005).all()
    assert env.state.dtype == torch.float32 and torch.equal(env.state, obs)


def test_auto_reset_states_are_in_the_reset_box():
    env = CartPole(256, seed=0)
    env.reset()
    generator = torch.Generator().manual_seed(0)
    fresh = []
    for _ in range(100):
        obs, _, terminated, truncated, _ = env.step(torch.randint(0, 2, (256,), generator=generator))
        fresh.append(obs[terminated | truncated])
    fresh = torch.cat(fresh)
    assert len(fresh) > 500 and (fresh.abs() <= 0.05).all()
    assert fresh.std(0).min() > 0.02  # spread over the box, not a constant


def test_constructor_seed_equals_reset_seed():
    built = CartPole(5, seed=11)
    initial_state = built.state.clone()
    first_obs, _ = built.reset()
    assert torch.equal(first_obs, initial_state)
    assert torch.equal(CartPole(5, seed=0).reset(seed=11)[0], first_obs)
