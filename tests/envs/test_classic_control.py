"""The torch classic-control envs against gymnasium's, the references they must match:
Acrobot-v1, MountainCar-v0, MountainCarContinuous-v0 and Pendulum-v1.

What agrees, and how closely (measured with gymnasium 1.4, numpy 2, torch's CPU kernels; float32
envs are compared one step at a time, float64 envs also over whole trajectories):

=====================  =================================  =======================================
env                    one step: float64 / float32        float64 trajectories
=====================  =================================  =======================================
MountainCar            state to 1e-15, obs identical /    obs identical for 200 steps
                       obs 1e-6
MountainCarContinuous  same (gymnasium's own float32       obs identical for 999 steps (also
                       roundings reproduced) / 1e-6       reaching the flag)
Pendulum               state 1e-12, obs 1e-6 / obs 1e-5   state within 1e-9 for the 200 steps
                                                          (drifts past 1e-6 after ~890 steps)
Acrobot                state 1e-9, obs 1e-6 / obs 1e-5    state within 1e-6 for 400 steps of
                       (1e-2 for velocities near their    random torques, 120 of swinging (chaos:
                       bounds, RK4's float32 rounding)    1e-6 after 409 / 161 steps at earliest)
=====================  =================================  =======================================
"""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.envs.classic_control.acrobot import AcrobotEnv
from gymnasium.envs.classic_control.continuous_mountain_car import Continuous_MountainCarEnv
from gymnasium.envs.classic_control.mountain_car import MountainCarEnv
from gymnasium.envs.classic_control.pendulum import PendulumEnv

from rl_lightning.envs import Acrobot, MountainCar, MountainCarContinuous, Pendulum

ENV_CLASSES = {
    "Acrobot-v1": Acrobot,
    "MountainCar-v0": MountainCar,
    "MountainCarContinuous-v0": MountainCarContinuous,
    "Pendulum-v1": Pendulum,
}
ACROBOT_VELOCITY_BOUNDS = np.array([4 * math.pi, 9 * math.pi])
CONTINUOUS_ACTIONS = [-1.7, -1.0, -0.999, -0.3, 0.0, 0.2, 0.9999, 1.0, 1.3]  # beyond the bounds too
PENDULUM_ACTIONS = [-3.0, -2.0, -1.5, -0.3, 0.0, 0.7, 2.0, 2.5]


def _gymnasium_step(genv: gym.Env, state: np.ndarray, action):
    """gymnasium's next (float64 state, float32 obs, reward, terminated) from `state` (whose
    dtype gymnasium computes with)."""
    genv.state = state.copy()
    obs, reward, terminated, truncated, _ = genv.step(action)
    assert not truncated
    return np.asarray(genv.state, dtype=np.float64), obs, reward, terminated


def _both_steps(env_class, genv, states: np.ndarray, actions: list, dtype, gymnasium_dtype=np.float64, warm_up=False):
    """One step of our env from each of `states` (env i takes actions[i]) and gymnasium's.

    Returns ours (next state, a fresh start where the episode ended; final obs; reward;
    terminated) and gymnasium's (next state, obs, reward, terminated), all numpy.
    """
    env = env_class(len(states), seed=0, dtype=dtype)
    if warm_up:  # an episode's later step (MountainCarContinuous computes its first differently)
        env.step(torch.as_tensor(np.asarray(actions)))
    actions = np.asarray(actions)
    env.state = torch.as_tensor(states)
    _, reward, terminated, truncated, info = env.step(torch.as_tensor(actions))
    ours = (env.state.double().numpy(), info["final_observation"].numpy(), reward.numpy(), terminated.numpy())
    theirs = [
        _gymnasium_step(genv, state.astype(gymnasium_dtype), action)
        for state, action in zip(states, actions, strict=True)
    ]
    theirs = tuple(np.array([t[i] for t in theirs]) for i in range(4))
    assert not truncated.any()
    return ours, theirs


# -- Acrobot ------------------------------------------------------------------------------


def _acrobot_height(state: np.ndarray) -> np.ndarray:
    """Height of the free end over the pivot; Acrobot terminates when it exceeds 1."""
    return -np.cos(state[..., 0]) - np.cos(state[..., 0] + state[..., 1])


def _acrobot_edge_states(genv: AcrobotEnv, action: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """States whose next free-end height (gymnasium's) is within 1e-7 of 1, on either side:
    bisection between a hanging state (stays low) and a raised one (ends high)."""
    states = []
    while len(states) < count:
        low = rng.uniform([-0.3, -0.3, -1, -1], [0.3, 0.3, 1, 1])
        high = np.array([math.pi + rng.uniform(-0.3, 0.3), rng.uniform(-0.3, 0.3), *rng.uniform(-1, 1, 2)])
        if _acrobot_height(_gymnasium_step(genv, high, action)[0]) <= 1:
            continue
        for _ in range(80):
            middle = (low + high) / 2
            margin = _acrobot_height(_gymnasium_step(genv, middle, action)[0]) - 1
            if abs(margin) < 1e-7:
                states.append(middle)
                break
            low, high = (middle, high) if margin <= 0 else (low, middle)
    return np.array(states)


def _acrobot_test_states(action: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random states, states at and near the velocity bounds, and states whose next step ends
    within 1e-7 of the termination height; and which of them have velocities near the bounds."""
    rng = np.random.default_rng(seed)
    high = np.array([math.pi, math.pi, *ACROBOT_VELOCITY_BOUNDS])
    random_states = rng.uniform(-high, high, size=(300, 4))
    fast = rng.uniform(-high, high, size=(100, 4))
    fast[:, 2:] = np.sign(fast[:, 2:]) * ACROBOT_VELOCITY_BOUNDS * (1 - rng.uniform(0, 1e-3, size=(100, 2)))
    fast[:10, 2:] = np.sign(fast[:10, 2:]) * ACROBOT_VELOCITY_BOUNDS  # exactly on the bounds
    genv = AcrobotEnv()
    genv.reset(seed=0)
    edge = _acrobot_edge_states(genv, action, 40, rng)
    states = np.concatenate([random_states, fast, edge])
    near_bounds = (np.abs(states[:, 2:]) > ACROBOT_VELOCITY_BOUNDS / 2).any(1)
    return states, near_bounds


def _wrapped_difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a - b with the angle columns (0, 1) taken modulo 2 pi into [-pi, pi)."""
    difference = a - b
    difference[:, :2] = (difference[:, :2] + math.pi) % (2 * math.pi) - math.pi
    return difference


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("action", [0, 1, 2])
def test_acrobot_one_step_matches_gymnasium_from_many_states(dtype, action):
    states, near_bounds = _acrobot_test_states(action, seed=action)
    if dtype == torch.float32:
        states = states.astype(np.float32).astype(np.float64)  # the states the env can hold
    genv = AcrobotEnv()
    genv.reset(seed=0)
    ours, theirs = _both_steps(Acrobot, genv, states, [action] * len(states), dtype)
    next_state, final_obs, reward, terminated = ours
    expected_state, expected_obs, expected_reward, expected_terminated = theirs
    assert 0.1 < expected_terminated.mean() < 0.5  # both outcomes are well represented

    assert reward.tolist() == [0.0 if t else -1.0 for t in terminated]
    margin = np.abs(_acrobot_height(expected_state) - 1)
    if dtype == torch.float64:
        assert terminated.tolist() == expected_terminated.tolist()  # even within 1e-7 of the line
        assert reward.tolist() == expected_reward.tolist()
        assert np.abs(final_obs - expected_obs).max() < 1e-6
        alive = ~terminated
        # Velocities reach ~1e4 inside the Runge-Kutta step: 1e-9 is rounding of those.
        assert np.abs(_wrapped_difference(next_state[alive], expected_state[alive])).max() < 1e-9
        assert (np.abs(next_state[alive, :2]) <= math.pi).all()
        assert (np.abs(next_state[terminated]) <= 0.1).all()  # restarted
    else:
        clear = margin > 1e-4  # float32 rounding may flip the comparison only near the line
        assert clear.sum() > 0.85 * len(states)
        assert terminated[clear].tolist() == expected_terminated[clear].tolist()
        assert reward[clear].tolist() == expected_reward[clear].tolist()
        error = np.abs(final_obs - expected_obs)
        assert error[~near_bounds].max() < 1e-5
        # Near the velocity bounds RK4's intermediate accelerations reach ~1e4, whose float32
        # rounding (1e-7 relative) reaches the velocities as ~1e-3.
        assert error[near_bounds, :4].max() < 1e-4 and error[near_bounds, 4:].max() < 1e-2


@pytest.mark.parametrize(("policy", "num_steps"), [("random", 400), ("swing", 120)])
def test_acrobot_float64_trajectories_follow_gymnasium(policy, num_steps):
    """32 envs under the same torques: states within 1e-6 of gymnasium's, identical flags and
    rewards. "random": uniform torques; "swing": torque along the second joint's velocity
    (random 25% of the time), which reaches the line in ~70-160 steps.

    Acrobot is chaotic: one float64 rounding difference (torch's and numpy's cos/sin differ in
    the last bit ~0.2% of the time) grows to 1e-6 after 409 steps at the earliest under random
    torques (256 episodes measured, 41 of them by step 700) and after 161 steps at the earliest
    when swinging (64 episodes): hence 400 and 120 steps, not whole 500-step episodes."""
    num_envs = 32
    genvs = [gym.make("Acrobot-v1") for _ in range(num_envs)]
    for i, genv in enumerate(genvs):
        genv.reset(seed=100 + i)
    env = Acrobot(num_envs, seed=0, dtype=torch.float64)
    env.state = torch.as_tensor(np.stack([genv.unwrapped.state for genv in genvs]).astype(np.float64))
    generator = torch.Generator().manual_seed(0)
    random_actions = torch.randint(0, 3, (num_steps, num_envs), generator=generator)
    use_random = torch.rand(num_steps, num_envs, generator=generator) < (1.0 if policy == "random" else 0.25)
    running = np.ones(num_envs, dtype=bool)
    max_error = 0.0
    obs = torch.zeros(num_envs, 6)
    for t in range(num_steps):
        # The swing policy reads our obs; gymnasium's agree to 1e-6, so both get the same actions.
        actions = torch.where(use_random[t], random_actions[t], torch.where(obs[:, 5] > 0, 2, 0))
        obs, reward, terminated, truncated, info = env.step(actions)
        for i in np.flatnonzero(running):
            g_obs, g_reward, g_terminated, g_truncated, _ = genvs[i].step(int(actions[i]))
            assert (float(reward[i]), bool(terminated[i]), bool(truncated[i])) == (g_reward, g_terminated, g_truncated)
            max_error = max(max_error, float(np.abs(info["final_observation"][i].numpy() - g_obs).max()))
            if g_terminated:
                running[i] = False
            else:
                difference = _wrapped_difference(env.state[i : i + 1].numpy(), genvs[i].unwrapped.state[None])
                max_error = max(max_error, float(np.abs(difference).max()))
    assert max_error < 1e-6
    if policy == "swing":
        assert (~running).sum() >= 8  # terminations are compared too
    else:
        assert running.sum() >= 28


# -- MountainCar and MountainCarContinuous -----------------------------------------------


def _mountain_car_test_states(forces: np.ndarray, goal: float, seed: int, float32: bool) -> np.ndarray:
    """Random states; states whose next position lands just either side of the left wall and of
    the goal (the velocity is solved for from gymnasium's update); states reaching the goal with
    a velocity just either side of 0; states near the speed limit. `forces[i]` is env i's
    velocity change from the engine."""
    rng = np.random.default_rng(seed)
    count = len(forces) // 6
    # float32 rounds the next position by up to 6e-8: the offsets then are larger.
    offsets = rng.uniform(1e-6, 1e-5, count) if float32 else rng.uniform(1e-9, 1e-7, count)
    offsets *= rng.choice([-1.0, 1.0], size=count)

    def aiming_at(position: np.ndarray, next_position: np.ndarray, force: np.ndarray) -> np.ndarray:
        next_velocity = next_position - position
        return np.stack([position, next_velocity - force + 0.0025 * np.cos(3 * position)], axis=1)

    random_states = np.stack([rng.uniform(-1.2, 0.6, count), rng.uniform(-0.07, 0.07, count)], axis=1)
    wall_position = rng.uniform(-1.2, -1.14, count)
    wall = aiming_at(wall_position, -1.2 + offsets, forces[count : 2 * count])
    wall[: count // 4] = [-1.2, -0.01]  # already at the wall, pushing into it
    goal_position = rng.uniform(goal - 0.06, goal - 0.001, count)
    goal_states = aiming_at(goal_position, goal + offsets, forces[2 * count : 3 * count])
    slow_position = rng.uniform(goal + 0.001, 0.55, count)
    slow = aiming_at(slow_position, slow_position + offsets, forces[3 * count : 4 * count])
    speeding = np.stack(
        [rng.uniform(-1.0, 0.3, count), rng.choice([-1, 1], count) * rng.uniform(0.065, 0.07, count)], 1
    )
    rest = len(forces) - 5 * count
    more_random = np.stack([rng.uniform(-1.2, 0.6, rest), rng.uniform(-0.07, 0.07, rest)], axis=1)
    states = np.concatenate([random_states, wall, goal_states, slow, speeding, more_random])
    return states.astype(np.float32).astype(np.float64) if float32 else states


def _assert_mountain_car_step(ours, theirs, goal: float, exact: bool):
    next_state, final_obs, reward, terminated = ours
    expected_state, expected_obs, expected_reward, expected_terminated = theirs
    assert 0.05 < expected_terminated.mean() < 0.5
    at_wall = expected_state[:, 0] <= -1.2 + 1e-12  # clipped to -1.2 (in float32: -1.2000000477)
    assert (at_wall & (expected_state[:, 1] == 0)).sum() > 10  # the wall stopped the car
    assert np.allclose(reward, expected_reward, rtol=1e-6, atol=1e-7)
    if exact:
        assert terminated.tolist() == expected_terminated.tolist()  # even within 1e-9 of the goal
        assert np.abs(final_obs - expected_obs).max() < 1e-7
        alive = ~terminated
        # Equal but for the last bit now and then (a fused multiply-add, a cosine's rounding).
        assert np.abs(next_state[alive] - expected_state[alive]).max() <= 1e-15
    else:
        # float32 rounding may flip the comparisons only within ~1e-7 of the goal or of 0 speed.
        position, velocity = expected_state.T
        near_goal = np.abs(position - goal) <= 1e-6
        stopping_at_goal = (position >= goal - 1e-6) & (np.abs(velocity) <= 1e-6)
        clear = ~(near_goal | stopping_at_goal)
        assert clear.mean() > 0.75
        assert terminated[clear].tolist() == expected_terminated[clear].tolist()
        assert np.abs(final_obs - expected_obs).max() < 1e-6
    restarted = next_state[terminated]
    assert ((restarted[:, 0] >= -0.6) & (restarted[:, 0] <= -0.4) & (restarted[:, 1] == 0)).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("action", [0, 1, 2])
def test_mountain_car_one_step_matches_gymnasium_from_many_states(dtype, action):
    forces = np.full(600, (action - 1) * 0.001)
    states = _mountain_car_test_states(forces, 0.5, seed=action, float32=dtype == torch.float32)
    genv = MountainCarEnv()
    genv.reset(seed=0)
    ours, theirs = _both_steps(MountainCar, genv, states, [action] * len(states), dtype)
    assert ours[2].tolist() == [-1.0] * len(states)
    _assert_mountain_car_step(ours, theirs, goal=0.5, exact=dtype == torch.float64)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("later_step", [False, True])
def test_mountain_car_continuous_one_step_matches_gymnasium_from_many_states(dtype, later_step):
    """From an episode's first step (gymnasium's state is then float64) and from a later one
    (float32), with actions within and beyond the bounds."""
    rng = np.random.default_rng(int(later_step))
    actions = rng.choice(CONTINUOUS_ACTIONS, size=(900, 1)).astype(np.float32)
    forces = np.clip(actions[:, 0], -1, 1) * 0.0015
    float32_states = dtype == torch.float32 or later_step
    states = _mountain_car_test_states(forces, 0.45, seed=3, float32=float32_states)
    genv = Continuous_MountainCarEnv()
    genv.reset(seed=0)
    gymnasium_dtype = np.float32 if later_step else np.float64
    ours, theirs = _both_steps(
        MountainCarContinuous, genv, states, list(actions), dtype, gymnasium_dtype, warm_up=later_step
    )
    # The reward penalises the action as given, not clipped: -0.1 a^2, +100 at the goal.
    expected_reward = -0.1 * actions[:, 0].astype(np.float64) ** 2 + 100 * theirs[3]
    assert np.allclose(theirs[2], expected_reward) and np.allclose(ours[2], expected_reward, rtol=1e-6)
    _assert_mountain_car_step(ours, theirs, goal=0.45, exact=dtype == torch.float64)


def _follow_gymnasium(env, genvs, actions: torch.Tensor) -> float:
    """Step our env and gymnasium's single envs in lock-step with the same actions until every
    gymnasium episode has ended; flags and rewards (as float32) must be identical. Returns the
    largest difference of observations."""
    running = np.ones(env.num_envs, dtype=bool)
    max_error = 0.0
    for t in range(len(actions)):
        _, reward, terminated, truncated, info = env.step(actions[t])
        for i in np.flatnonzero(running):
            action = actions[t, i].numpy() if env.action_kind == "box" else int(actions[t, i])
            obs, g_reward, g_terminated, g_truncated, _ = genvs[i].step(action)
            assert (bool(terminated[i]), bool(truncated[i])) == (g_terminated, g_truncated), (i, t)
            assert float(reward[i]) == np.float32(g_reward), (i, t)
            max_error = max(max_error, float(np.abs(info["final_observation"][i].numpy() - obs).max()))
            running[i] = not (g_terminated or g_truncated)
        if not running.any():
            return max_error
    raise AssertionError("not every gymnasium episode ended")


@pytest.mark.parametrize("env_id", ["MountainCar-v0", "MountainCarContinuous-v0"])
def test_mountain_car_float64_trajectories_equal_gymnasium(env_id):
    """32 whole episodes: 200 steps of random pushes for MountainCar-v0 (the car never reaches
    the flag), 999 of random forces in [-1.3, 1.3] for the continuous car (all truncated)."""
    num_envs = 32
    genvs = [gym.make(env_id) for _ in range(num_envs)]
    for i, genv in enumerate(genvs):
        genv.reset(seed=100 + i)
    env = ENV_CLASSES[env_id](num_envs, seed=0, dtype=torch.float64)
    env.state = torch.as_tensor(np.stack([genv.unwrapped.state for genv in genvs]))
    generator = torch.Generator().manual_seed(0)
    num_steps = env.max_episode_steps
    if env.action_kind == "discrete":
        actions = torch.randint(0, 3, (num_steps, num_envs), generator=generator)
    else:
        actions = torch.rand(num_steps, num_envs, 1, generator=generator) * 2.6 - 1.3
    assert _follow_gymnasium(env, genvs, actions) == 0.0


def test_mountain_car_continuous_float64_trajectories_reaching_the_goal_equal_gymnasium():
    """Pushing with the velocity (noisy, beyond the bounds at times) reaches the flag: the
    terminations, +100 rewards and restarts agree too."""
    num_envs, num_steps = 32, 400
    genvs = [gym.make("MountainCarContinuous-v0") for _ in range(num_envs)]
    for i, genv in enumerate(genvs):
        genv.reset(seed=200 + i)
    env = MountainCarContinuous(num_envs, seed=0, dtype=torch.float64)
    env.state = torch.as_tensor(np.stack([genv.unwrapped.state for genv in genvs]))
    # Open loop, so both sides see the same actions: push right, then left, then right.
    phase = torch.arange(num_steps).view(-1, 1, 1)
    push = torch.where((phase // 40) % 2 == 0, 1.0, -1.0).expand(num_steps, num_envs, 1)
    noise = torch.randn(num_steps, num_envs, 1, generator=torch.Generator().manual_seed(0)) * 0.4
    assert _follow_gymnasium(env, genvs, push + noise) == 0.0


# -- Pendulum --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_pendulum_one_step_matches_gymnasium_from_many_states(dtype):
    rng = np.random.default_rng(0)
    count = 800
    random_states = np.stack([rng.uniform(-3 * math.pi, 3 * math.pi, count), rng.uniform(-8, 8, count)], axis=1)
    # Angles at the normalisation's wrap (odd multiples of pi) and speeds at the limit of 8.
    wrap = np.stack(
        [rng.choice([-3, -1, 1, 3], 200) * math.pi + rng.uniform(-1e-9, 1e-9, 200), rng.uniform(-8, 8, 200)], axis=1
    )
    fast = np.stack([rng.uniform(-math.pi, math.pi, 200), rng.choice([-1, 1], 200) * rng.uniform(7.5, 8.0, 200)], 1)
    states = np.concatenate([random_states, wrap, fast])
    if dtype == torch.float32:
        states = states.astype(np.float32).astype(np.float64)
    actions = rng.choice(PENDULUM_ACTIONS, size=(len(states), 1)).astype(np.float32)
    genv = PendulumEnv()
    genv.reset(seed=0)
    (next_state, final_obs, reward, _), (expected_state, expected_obs, expected_reward, _) = _both_steps(
        Pendulum, genv, states, list(actions), dtype
    )
    assert (np.abs(expected_state[:, 1]) == 8).sum() > 50  # the speed limit was hit
    if dtype == torch.float64:
        assert np.abs(next_state - expected_state).max() < 1e-12
        assert np.abs(final_obs - expected_obs).max() < 1e-6
        assert np.allclose(reward, expected_reward, rtol=1e-6, atol=1e-6)
    else:
        assert np.abs(final_obs - expected_obs).max() < 1e-5
        # float32 angle normalisation of angles up to 3 pi: ~1e-6 relative.
        assert np.allclose(reward, expected_reward, rtol=1e-5, atol=1e-5)


def test_pendulum_float64_trajectories_follow_gymnasium_for_a_whole_episode():
    """32 whole 200-step episodes under random torques in [-2.5, 2.5]: states within 1e-9 of
    gymnasium's (observations within float32 rounding, rewards within 1e-5). Without the time
    limit, rounding grows past 1e-9 after ~460 steps and past 1e-6 after ~890 (32 seeds)."""
    num_envs, num_steps = 32, 200
    genvs = [gym.make("Pendulum-v1") for _ in range(num_envs)]
    for i, genv in enumerate(genvs):
        genv.reset(seed=300 + i)
    env = Pendulum(num_envs, seed=0, dtype=torch.float64)
    env.state = torch.as_tensor(np.stack([genv.unwrapped.state for genv in genvs]))
    actions = torch.rand(num_steps, num_envs, 1, generator=torch.Generator().manual_seed(0)) * 5 - 2.5
    max_state_error = max_obs_error = max_reward_error = 0.0
    for t in range(num_steps):
        _, reward, terminated, truncated, info = env.step(actions[t])
        assert not terminated.any() and truncated.all() == (t == num_steps - 1)
        for i, genv in enumerate(genvs):
            obs, g_reward, g_terminated, g_truncated, _ = genv.step(actions[t, i].numpy())
            assert not g_terminated and g_truncated == (t == num_steps - 1)
            max_obs_error = max(max_obs_error, float(np.abs(info["final_observation"][i].numpy() - obs).max()))
            max_reward_error = max(max_reward_error, abs(float(reward[i]) - g_reward))
            if t < num_steps - 1:
                max_state_error = max(max_state_error, float(np.abs(env.state[i].numpy() - genv.unwrapped.state).max()))
    assert max_state_error < 1e-9 and max_obs_error < 1e-6 and max_reward_error < 1e-5


# -- random-policy statistics against gymnasium's vector env -------------------------------


def _episode_statistics(step, reset, num_envs: int, num_steps: int, policy, seed: int):
    """Length, truncation flag and return of every episode that starts in the first half of
    `num_steps` and ends by the end, under `policy(obs, rng) -> actions` (numpy)."""
    rng = np.random.default_rng(seed)
    obs = reset(seed)
    started_at = np.zeros(num_envs, dtype=int)
    returns = np.zeros(num_envs)
    lengths, truncations, episode_returns = [], [], []
    for t in range(num_steps):
        obs, reward, terminated, truncated = step(policy(obs, rng))
        returns += reward
        done = terminated | truncated
        counted = done & (started_at < num_steps // 2)
        lengths.append((t + 1 - started_at)[counted])
        truncations.append(truncated[counted])
        episode_returns.append(returns[counted])
        started_at[done], returns[done] = t + 1, 0.0
    return np.concatenate(lengths).astype(float), np.concatenate(truncations), np.concatenate(episode_returns)


def _ours(env_id: str, num_envs: int, max_episode_steps: int):
    env = ENV_CLASSES[env_id](num_envs, seed=0, max_episode_steps=max_episode_steps)

    def step(actions):
        obs, reward, terminated, truncated, _ = env.step(torch.as_tensor(actions))
        return obs.numpy(), reward.double().numpy(), terminated.numpy(), truncated.numpy()

    return step, lambda seed: env.reset(seed=seed)[0].numpy()


def _gymnasium(env_id: str, num_envs: int, max_episode_steps: int):
    env = gym.make_vec(
        env_id,
        num_envs=num_envs,
        vectorization_mode="sync",
        max_episode_steps=max_episode_steps,
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
    )

    def step(actions):
        obs, reward, terminated, truncated, _ = env.step(actions)
        return obs, reward, terminated, truncated

    return step, lambda seed: env.reset(seed=seed)[0]


def _assert_same_mean(ours: np.ndarray, theirs: np.ndarray, num_standard_errors: float = 4.0) -> None:
    standard_error = math.sqrt(ours.var(ddof=1) / len(ours) + theirs.var(ddof=1) / len(theirs))
    assert abs(ours.mean() - theirs.mean()) <= num_standard_errors * standard_error + 1e-9, (
        ours.mean(),
        theirs.mean(),
        standard_error,
    )


def _uniform_discrete(obs, rng):
    return rng.integers(0, 3, size=len(obs))


def _uniform_box(low: float, high: float):
    return lambda obs, rng: rng.uniform(low, high, size=(len(obs), 1)).astype(np.float32)


def _acrobot_swing(obs, rng):
    """Torque along the second joint's velocity, a random action 25% of the time."""
    pushed = np.where(obs[:, 5] > 0, 2, 0)
    return np.where(rng.random(len(obs)) < 0.25, rng.integers(0, 3, size=len(obs)), pushed)


def _mountain_car_swing(obs, rng):
    """Push along the velocity, a random action 30% of the time."""
    pushed = np.where(obs[:, 1] >= 0, 2, 0)
    return np.where(rng.random(len(obs)) < 0.3, rng.integers(0, 3, size=len(obs)), pushed)


def _continuous_swing(obs, rng):
    """Push along the velocity with Gaussian noise (beyond the bounds at times)."""
    return (np.where(obs[:, 1:] >= 0, 0.6, -0.6) + rng.normal(0, 0.8, size=(len(obs), 1))).astype(np.float32)


# (env id, time limit, policy, num_envs, num_steps, (low, high) of the mean episode length,
# (low, high) of the truncation rate): ~25k gymnasium steps or less each, ~1 s.
STATISTICS_CASES = {
    "acrobot-swing": ("Acrobot-v1", 120, _acrobot_swing, 64, 400, (90, 115), (0.2, 0.6)),
    "mountain-car-swing": ("MountainCar-v0", 200, _mountain_car_swing, 64, 400, (150, 180), (0.05, 0.35)),
    "mountain-car-random": ("MountainCar-v0", 200, _uniform_discrete, 32, 400, (200, 200), (1, 1)),
    "continuous-swing": ("MountainCarContinuous-v0", 999, _continuous_swing, 64, 400, (150, 180), (0, 0)),
    "continuous-random": ("MountainCarContinuous-v0", 999, _uniform_box(-1.5, 1.5), 16, 1998, (900, 999), (0.8, 1)),
    "pendulum-random": ("Pendulum-v1", 200, _uniform_box(-2.5, 2.5), 64, 600, (200, 200), (1, 1)),
}


@pytest.mark.parametrize("case", list(STATISTICS_CASES))
def test_episode_statistics_agree_with_gymnasium_vector_env(case):
    """Random (and noisy swinging) policies on both sides, each with its own seeded RNG: mean
    episode length, truncation rate and mean return agree within 4 standard errors."""
    env_id, limit, policy, num_envs, num_steps, length_range, truncation_range = STATISTICS_CASES[case]
    ours = _episode_statistics(*_ours(env_id, num_envs, limit), num_envs, num_steps, policy, seed=1)
    theirs = _episode_statistics(*_gymnasium(env_id, num_envs, limit), num_envs, num_steps, policy, seed=2)
    for lengths, truncations, _ in (ours, theirs):
        assert len(lengths) >= num_envs
        assert length_range[0] <= lengths.mean() <= length_range[1]
        assert truncation_range[0] <= truncations.mean() <= truncation_range[1]
        assert (lengths[truncations] == limit).all() and (lengths <= limit).all()
    for our_values, their_values in zip(ours, theirs, strict=True):
        _assert_same_mean(our_values.astype(float), their_values.astype(float))
    _assert_same_mean(ours[2] ** 2, theirs[2] ** 2)  # the spread of returns agrees too


# -- time limits, resets, spaces, state, drawing -----------------------------------------------

# A state from which no episode ends within one step, per env.
QUIET_STATES = {
    "Acrobot-v1": [0.0, 0.0, 0.0, 0.0],
    "MountainCar-v0": [-0.5, 0.0],
    "MountainCarContinuous-v0": [-0.5, 0.0],
    "Pendulum-v1": [0.0, 0.0],
}
# A state that terminates on the next step whatever the action (Pendulum never terminates).
TERMINATING_STATES = {
    "Acrobot-v1": [math.pi, 0.0, 0.0, 0.0],
    "MountainCar-v0": [0.55, 0.05],
    "MountainCarContinuous-v0": [0.55, 0.05],
}


def _zero_actions(env) -> torch.Tensor:
    return torch.zeros((env.num_envs, *env.action_shape), dtype=env.action_dtype)


@pytest.mark.parametrize("env_id", list(ENV_CLASSES))
def test_truncation_at_gymnasium_time_limit_with_both_flags_when_it_also_terminates(env_id):
    env = ENV_CLASSES[env_id](2, seed=0)
    genv = gym.make(env_id)
    limit = genv.spec.max_episode_steps
    assert env.max_episode_steps == limit
    genv.reset(seed=0)
    env.reset()
    terminating = TERMINATING_STATES.get(env_id)
    for t in range(1, limit + 1):
        last = t == limit
        env.state = torch.tensor(
            [QUIET_STATES[env_id], (terminating if last and terminating else QUIET_STATES[env_id])]
        )
        genv.unwrapped.state = np.array(terminating if last and terminating else QUIET_STATES[env_id])
        _, _, terminated, truncated, _ = env.step(_zero_actions(env))
        _, _, g_terminated, g_truncated, _ = genv.step(genv.action_space.sample() * 0)
        assert truncated.tolist() == [last, last], t
        assert terminated.tolist() == [False, last and terminating is not None], t
        assert (g_terminated, g_truncated) == (bool(terminated[1]), bool(truncated[1])), t
    assert env.episode_steps.tolist() == [0, 0]


@pytest.mark.parametrize("env_id", ["Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0"])
def test_episode_clocks_are_per_env(env_id):
    env = ENV_CLASSES[env_id](3, seed=0, max_episode_steps=50)
    env.reset()
    for t in range(1, 101):
        states = [QUIET_STATES[env_id]] * 3
        if t == 20:
            states = [TERMINATING_STATES[env_id], *states[1:]]  # env 0 restarts its clock at 20
        env.state = torch.tensor(states)
        _, _, terminated, truncated, _ = env.step(_zero_actions(env))
        assert terminated.tolist() == [t == 20, False, False], t
        assert truncated.tolist() == [t == 70, t in (50, 100), t in (50, 100)], t


@pytest.mark.parametrize("env_id", list(ENV_CLASSES))
def test_final_observation_is_the_last_state_and_obs_the_next_start(env_id):
    env = ENV_CLASSES[env_id](2, seed=0, max_episode_steps=1)
    env.state = torch.tensor([QUIET_STATES[env_id]] * 2)
    before = env.state.clone()
    obs, _, _, truncated, info = env.step(_zero_actions(env))
    assert truncated.all() and env.episode_steps.tolist() == [0, 0]
    assert not torch.equal(env.state, before)  # a fresh start ...
    assert torch.equal(obs, env._obs(env._state))  # ... which obs shows
    assert not torch.equal(obs, info["final_observation"])


# gymnasium's reset bounds of each state component.
RESET_BOUNDS = {
    "Acrobot-v1": ([-0.1] * 4, [0.1] * 4),
    "MountainCar-v0": ([-0.6, 0.0], [-0.4, 0.0]),
    "MountainCarContinuous-v0": ([-0.6, 0.0], [-0.4, 0.0]),
    "Pendulum-v1": ([-math.pi, -1.0], [math.pi, 1.0]),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("env_id", list(ENV_CLASSES))
def test_reset_states_are_uniform_in_gymnasium_bounds(env_id, dtype):
    num_envs = 50_000
    env = ENV_CLASSES[env_id](num_envs, seed=0, dtype=dtype)
    obs, _ = env.reset()
    assert obs.dtype == torch.float32 and env.state.dtype == dtype
    assert torch.equal(obs, env._obs(env._state))
    low, high = (torch.tensor(bound, dtype=dtype) for bound in RESET_BOUNDS[env_id])
    states = env.state
    assert ((states >= low) & (states <= high)).all()
    width = high - low
    random = width > 0
    assert (states[:, ~random] == low[~random]).all()
    # Uniform: mean in the middle (5 standard errors), variance width^2 / 12 (2%).
    mean, variance = states[:, random].mean(0), states[:, random].var(0)
    middle, width = ((low + high) / 2)[random], width[random]
    assert ((mean - middle).abs() < 5 * width / math.sqrt(12 * num_envs)).all()
    assert torch.allclose(variance, width**2 / 12, rtol=0.02)
    # Auto-reset draws from the same distribution: a 1-step limit restarts every env.
    env.max_episode_steps = 1
    env.step(_zero_actions(env))
    assert ((env.state >= low) & (env.state <= high)).all() and env.state[:, random].std(0).min() > width.min() / 4
    if env_id == "Acrobot-v1":  # gymnasium rounds its reset state to float32
        assert torch.equal(env.state, env.state.float().to(dtype))


def test_reset_states_against_gymnasium_distribution():
    """gymnasium's own reset states of many seeds lie in the same bounds, with the same means."""
    for env_id, (low, high) in RESET_BOUNDS.items():
        genv = gym.make(env_id)
        theirs = []
        for seed in range(300):
            genv.reset(seed=seed)
            theirs.append(np.asarray(genv.unwrapped.state, dtype=np.float64))
        theirs = np.array(theirs)
        assert (theirs >= np.array(low) - 1e-7).all() and (theirs <= np.array(high) + 1e-7).all()
        ours = ENV_CLASSES[env_id](300, seed=0).state.double().numpy()
        for column in range(theirs.shape[1]):
            _assert_same_mean(ours[:, column], theirs[:, column])


@pytest.mark.parametrize("env_id", list(ENV_CLASSES))
def test_spaces_equal_gymnasium(env_id):
    env = ENV_CLASSES[env_id](3, seed=0)
    genv = gym.make(env_id)
    assert env.single_observation_space == genv.observation_space
    assert env.single_observation_space.dtype == genv.observation_space.dtype == np.float32
    assert env.single_action_space == genv.action_space
    assert env.single_action_space.dtype == genv.action_space.dtype
    assert env.render_fps == genv.metadata["render_fps"]
    obs, _ = env.reset()
    assert obs.shape == (3, *genv.observation_space.shape)
    for row in obs.numpy():
        assert genv.observation_space.contains(row)


@pytest.mark.parametrize("env_id", list(ENV_CLASSES))
def test_the_default_time_limit_is_gymnasiums(env_id):
    assert ENV_CLASSES[env_id](2).max_episode_steps == gym.spec(env_id).max_episode_steps
    assert ENV_CLASSES[env_id](2, max_episode_steps=None).max_episode_steps == gym.spec(env_id).max_episode_steps
    assert ENV_CLASSES[env_id](2, max_episode_steps=7).max_episode_steps == 7


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("env_id", list(ENV_CLASSES))
def test_state_dict_round_trip_continues_exactly(env_id, dtype):
    env = ENV_CLASSES[env_id](16, seed=3, dtype=dtype, max_episode_steps=30)
    env.reset()
    generator = torch.Generator().manual_seed(0)
    for _ in range(45):
        env.step(env.random_actions(generator))
    saved = env.state_dict()
    actions = [env.random_actions(generator) for _ in range(40)]
    expected = [env.step(a) for a in actions]
    restored = ENV_CLASSES[env_id](16, seed=99, dtype=dtype, max_episode_steps=30)
    restored.load_state_dict(saved)
    for a, (obs, reward, terminated, truncated, info) in zip(actions, expected, strict=True):
        r_obs, r_reward, r_terminated, r_truncated, r_info = restored.step(a)
        assert torch.equal(r_obs, obs) and torch.equal(r_reward, reward)
        assert torch.equal(r_terminated, terminated) and torch.equal(r_truncated, truncated)
        assert torch.equal(r_info["final_observation"], info["final_observation"])
    assert torch.equal(restored.episode_steps, env.episode_steps)


@pytest.mark.parametrize("env_id", list(ENV_CLASSES))
def test_state_is_a_view_and_the_setter_validates_and_copies(env_id):
    env = ENV_CLASSES[env_id](3, seed=0)
    quiet = torch.tensor(QUIET_STATES[env_id])
    size = len(quiet)
    assert env.state.shape == (3, size)
    env.state[1] = quiet + 0.01
    assert torch.allclose(env.state[1], quiet + 0.01)
    value = quiet.view(1, -1).clone()
    single = ENV_CLASSES[env_id](1, seed=0)
    single.state = value
    value[0, 0] = 0.3  # must not reach the env
    assert torch.equal(single.state[0], quiet)
    with pytest.raises(ValueError, match="shape"):
        env.state = torch.zeros(size, 3)
    obs, _, _, _, info = env.step(_zero_actions(env))
    kept = obs.clone(), info["final_observation"].clone()
    env.state[:] = 0.2  # writes into the env do not reach observations already returned
    assert torch.equal(obs, kept[0]) and torch.equal(info["final_observation"], kept[1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("env_id", list(ENV_CLASSES))
def test_step_reads_no_tensor_value_back(env_id, dtype, monkeypatch):
    """_step never reads a tensor's value on the host (on a GPU that is a device sync): not
    even to auto-reset, which happens here through terminations and a 3-step time limit."""
    env = ENV_CLASSES[env_id](8, seed=0, dtype=dtype, max_episode_steps=3)
    generator = torch.Generator().manual_seed(0)
    actions = [env.random_actions(generator) for _ in range(7)]

    def read_back(*args, **kwargs):
        raise AssertionError("a tensor value was read back on the host")

    for name in ("__bool__", "__int__", "__float__", "__index__", "item", "tolist", "nonzero", "numpy"):
        monkeypatch.setattr(torch.Tensor, name, read_back)
    terminating = TERMINATING_STATES.get(env_id, QUIET_STATES[env_id])
    flags = []
    for step_actions in actions:
        env._state[:, 0] = torch.tensor(terminating, dtype=dtype)  # env 0 ends every step if it can
        _, _, terminated, truncated, _ = env._step(step_actions)
        flags.append(torch.stack([terminated, truncated]))
    monkeypatch.undo()
    terminated, truncated = torch.stack(flags, dim=1)
    assert terminated[:, 0].all() == (env_id in TERMINATING_STATES)
    assert truncated[2, 1:].all() and truncated[5, 1:].all()  # the 3-step limit, twice


@pytest.mark.parametrize("env_id", list(ENV_CLASSES))
def test_constructor_validates_its_arguments(env_id):
    env_class = ENV_CLASSES[env_id]
    with pytest.raises(TypeError, match="dtype"):
        env_class(2, dtype=torch.float16)
    with pytest.raises(TypeError, match="max_episode_steps"):
        env_class(2, max_episode_steps=2.5)
    with pytest.raises(TypeError, match="max_episode_steps"):
        env_class(2, max_episode_steps=True)
    with pytest.raises(ValueError, match="max_episode_steps"):
        env_class(2, max_episode_steps=0)
    # Built with a seed, the env starts like reset(seed=...) and from that state.
    built = env_class(4, seed=11)
    initial_state = built.state.clone()
    first_obs, _ = built.reset()
    assert torch.equal(built.state, initial_state)
    assert torch.equal(env_class(4, seed=0).reset(seed=11)[0], first_obs)


def test_pendulum_gravity_is_configurable_like_gymnasium_g():
    env = Pendulum(1, seed=0, dtype=torch.float64, gravity=9.81)
    env.state = torch.tensor([[0.5, 0.1]], dtype=torch.float64)
    env.step(torch.tensor([[0.3]]))
    genv = PendulumEnv(g=9.81)
    genv.reset(seed=0)
    expected = _gymnasium_step(genv, np.array([0.5, 0.1]), np.array([0.3], dtype=np.float32))[0]
    assert np.allclose(env.state[0].numpy(), expected, rtol=0, atol=1e-12)
    with pytest.raises(TypeError, match="gravity"):
        Pendulum(1, gravity="10")


def test_mountain_car_continuous_penalises_the_unclipped_action_like_gymnasium():
    env = MountainCarContinuous(3, seed=0)
    env.state = torch.tensor([[-0.5, 0.0]] * 3)
    _, reward, *_ = env.step(torch.tensor([[3.0], [1.0], [-0.5]]))
    assert reward.tolist() == pytest.approx([-0.9, -0.1, -0.025])
    # ... while the car moves as if pushed with 1: the first two envs end in the same state.
    assert torch.equal(env.state[0], env.state[1])


# Two states per env that look different (the car's position, the links' or rod's angles).
DRAWN_STATES = {
    "Acrobot-v1": ([0.0, 0.0, 0.0, 0.0], [2.0, -1.0, 0.0, 0.0]),
    "MountainCar-v0": ([-1.0, 0.0], [0.3, 0.0]),
    "MountainCarContinuous-v0": ([-1.0, 0.0], [0.3, 0.0]),
    "Pendulum-v1": ([0.0, 0.0], [2.0, 0.0]),
}


@pytest.mark.parametrize("env_id", list(ENV_CLASSES))
def test_draw_shapes_dtypes_and_the_picture_follows_the_state(env_id):
    env = ENV_CLASSES[env_id](2, seed=0)
    env.state = torch.tensor(DRAWN_STATES[env_id])
    obs = env._obs(env._state)
    images = env.draw(obs)
    height, width = images.shape[1:3]
    assert images.shape == (2, height, width, 3) and images.dtype == torch.uint8 and images.device.type == "cpu"
    assert height >= 64 and width >= 64
    assert torch.equal(env.draw(obs[1]), images[1])
    assert env.draw(obs.expand(3, 2, -1)).shape == (3, 2, height, width, 3)
    for image in images:
        background = (image == 255).all(-1).float().mean()
        assert 0.5 < background < 0.995  # a scene, mostly white
    assert (images[0] != images[1]).any(-1).float().mean() > 0.005


def test_drawings_put_things_where_gymnasium_does():
    def coloured(image, colour):
        return (image == torch.tensor(colour, dtype=torch.uint8)).all(-1)

    def centre(mask):
        rows, columns = mask.nonzero(as_tuple=True)
        return rows.float().mean(), columns.float().mean()

    # The car goes right with its position; the flag stands further right at the goal.
    mountain = MountainCar(1).draw(torch.tensor([[-1.0, 0.0], [0.2, 0.0]]))
    left, right = (centre(coloured(image, (128, 128, 128)))[1] for image in mountain)  # wheels
    flag_column = centre(coloured(mountain[0], (204, 204, 0)))[1]
    assert left < right < flag_column
    # Pendulum: upright (angle 0) puts the rod above the axle, angle pi below it.
    pendulum = Pendulum(1).draw(torch.tensor([[1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]]))
    up, down = (centre(coloured(image, (204, 77, 77)))[0] for image in pendulum)
    assert up < pendulum.shape[1] / 2 < down
    # Acrobot: hanging (angles 0) the links are below the pivot, swung up above it.
    acrobot = Acrobot(1).draw(torch.tensor([[1.0, 0.0, 1.0, 0.0, 0, 0], [-1.0, 0.0, 1.0, 0.0, 0, 0]]))
    hanging, raised = (centre(coloured(image, (0, 204, 204)))[0] for image in acrobot)
    assert raised < acrobot.shape[1] / 2 < hanging
