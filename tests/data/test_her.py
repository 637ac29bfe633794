"""Hindsight relabelling (rl_lightning/data/her.py) and the bit-flipping env (rl_lightning/envs/bit_flipping.py):
the goals a relabelled transition gets, checked against a brute-force model of the buffer's history (episodes of
several envs interleaved, running ones, the ring overwriting old ones), the fraction relabelled, the recomputed
rewards and terminations, exact resume and the errors."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_lightning.data.her import (
    GoalFunctions,
    HERSettings,
    HindsightReplayBuffer,
    check_goal_space,
    goal_functions,
)
from rl_lightning.data.replay import ReplaySource, make_replay_buffer
from rl_lightning.envs import make_envs
from rl_lightning.envs.bit_flipping import BitFlipping, reached_goal

GOAL_KEYS = ("observation", "achieved_goal", "desired_goal")


def _reward(achieved, desired):
    return (achieved == desired).all(dim=-1).float() - 1.0


def _terminated(achieved, desired):
    return (achieved == desired).all(dim=-1)


GOALS = GoalFunctions(_reward, _terminated)


def _buffer(buffer_size, num_envs, strategy="future", k=4, seed=0, goals=GOALS):
    shapes = dict.fromkeys(GOAL_KEYS, (1,))
    dtypes = dict.fromkeys(GOAL_KEYS, torch.float32)
    return HindsightReplayBuffer(
        buffer_size, shapes, num_envs, seed=seed, obs_dtype=dtypes, her=HERSettings(strategy, k), goals=goals
    )


def _code(t, env):
    """The next achieved goal of transition (t, env): a number naming it."""
    return float(1000 * env + t + 1)


def _fill(buffer, dones, start=0):
    """Add ``dones.shape[0]`` steps (numbered from ``start``) of ``dones.shape[1]`` envs; each transition's next
    achieved goal is its :func:`_code`, its desired goal -1 (never reached), its reward -1, terminated False."""
    num_steps, num_envs = dones.shape
    for t in range(start, start + num_steps):
        codes = torch.tensor([[_code(t, env)] for env in range(num_envs)])
        obs = {key: torch.zeros(num_envs, 1) for key in GOAL_KEYS}
        next_obs = {"observation": codes.clone(), "achieved_goal": codes, "desired_goal": -torch.ones(num_envs, 1)}
        buffer.add(
            obs,
            torch.zeros(num_envs, dtype=torch.int64),
            -torch.ones(num_envs),
            torch.zeros(num_envs, dtype=torch.bool),
            next_obs,
            torch.as_tensor(dones[t - start]),
        )


def _history(dones, buffer_size):
    """The brute-force model: each held slot's transition ``(t, env)``, and each transition's episode number."""
    num_steps, num_envs = dones.shape
    episode = {}
    for env in range(num_envs):
        count = 0
        for t in range(num_steps):
            episode[t, env] = count
            count += int(dones[t, env])
    written = num_steps * num_envs
    held = {}
    for number in range(max(0, written - buffer_size), written):
        held[number % buffer_size] = divmod(number, num_envs)
    return held, episode


def _allowed(strategy, t, env, held, episode):
    """The transitions whose next achieved goal may relabel (t, env)."""
    same = sorted(u for (u, e) in held.values() if e == env and episode[u, e] == episode[t, env])
    if strategy == "future":
        return [u for u in same if u >= t]
    if strategy == "final":
        return [same[-1]]
    return same


CASES = [
    # buffer_size, num_envs, steps, probability of an episode's end per step
    (64, 2, 20, 0.2),  # nothing overwritten yet, episodes still running at the end
    (30, 3, 40, 0.15),  # the ring overwrote the oldest: some held episodes lost their start
    (7, 2, 25, 0.3),  # buffer_size not a multiple of num_envs: an env's slots move around the ring
    (50, 1, 70, 0.1),
]


@pytest.mark.parametrize("strategy", ["future", "final", "episode"])
@pytest.mark.parametrize("buffer_size, num_envs, steps, p_done", CASES)
def test_goals_come_from_the_transitions_episode_as_the_strategy_says(strategy, buffer_size, num_envs, steps, p_done):
    rng = np.random.default_rng(buffer_size + steps)
    dones = rng.random((steps, num_envs)) < p_done
    buffer = _buffer(buffer_size, num_envs, strategy)
    _fill(buffer, dones)
    held, episode = _history(dones, buffer_size)
    assert buffer.size == len(held)
    slots = torch.arange(buffer.size).repeat(200)
    goals = buffer.next_obs["achieved_goal"].index_select(0, buffer.goal_slots(slots)).squeeze(1)
    seen: dict[int, set[float]] = {}
    for slot, goal in zip(slots.tolist(), goals.tolist(), strict=True):
        seen.setdefault(slot, set()).add(goal)
    for slot, (t, env) in held.items():
        allowed = {_code(u, env) for u in _allowed(strategy, t, env, held, episode)}
        # Every goal drawn is allowed, and in 200 draws every allowed one turns up (at most ~12 of them).
        assert seen[slot] == allowed, (slot, t, env)


def test_future_goals_are_uniform_over_the_rest_of_the_episode():
    # One env, one episode of 4 steps, then one running: transition 1 may take the goals of steps 1, 2, 3.
    dones = np.array([[False], [False], [False], [True], [False], [False]])
    buffer = _buffer(16, 1, "future")
    _fill(buffer, dones)
    goals = buffer.next_obs["achieved_goal"].index_select(0, buffer.goal_slots(torch.full((30_000,), 1)))
    counts = torch.stack([(goals == _code(u, 0)).sum() for u in range(6)]).tolist()
    assert counts[0] == 0 and counts[4] == counts[5] == 0
    assert all(abs(count / 30_000 - 1 / 3) < 0.02 for count in counts[1:4]), counts


def test_final_goal_of_a_running_episode_is_its_newest_transition_until_it_ends():
    buffer = _buffer(16, 2, "final")
    _fill(buffer, np.array([[True, False], [False, False]]))
    # env 0: episodes {0}, {1, ...}; env 1 still in its first episode (steps 0, 1): its final goal is step 1's.
    slots = torch.tensor([0, 1, 2, 3])  # (t, env) = (0, 0), (0, 1), (1, 0), (1, 1)
    goals = buffer.next_obs["achieved_goal"][buffer.goal_slots(slots)].squeeze(1)
    assert goals.tolist() == [_code(0, 0), _code(1, 1), _code(1, 0), _code(1, 1)]
    _fill(buffer, np.array([[False, True], [False, False]]), start=2)  # step 2 ends env 1's episode
    goals = buffer.next_obs["achieved_goal"][buffer.goal_slots(slots)].squeeze(1)
    assert goals.tolist() == [_code(0, 0), _code(2, 1), _code(3, 0), _code(2, 1)]


def test_a_batch_relabels_k_of_every_k_plus_1_with_rewards_and_terminations_recomputed():
    buffer = _buffer(64, 2, "final", k=4)
    _fill(buffer, np.array([[False, False], [False, True], [True, False], [False, False]]))
    batch = buffer.sample(10)
    assert buffer.num_relabelled(10) == 8 and buffer.num_relabelled(256) == 204  # SB3's int(0.8 * 256)
    relabelled, real = slice(0, 8), slice(8, 10)
    # A relabelled transition's desired goal (obs and next_obs alike) is an achieved one of its episode: a code.
    assert (batch.obs["desired_goal"][relabelled] > 0).all()
    assert torch.equal(batch.obs["desired_goal"][relabelled], batch.next_obs["desired_goal"][relabelled])
    # The real ones keep the stored goal (-1 in next_obs, 0 in obs), reward -1 and terminated False.
    assert (batch.next_obs["desired_goal"][real] == -1).all() and (batch.obs["desired_goal"][real] == 0).all()
    assert batch.rewards[real].tolist() == [-1.0, -1.0] and not batch.terminated[real].any()
    # Relabelled: reward 0 and terminated exactly where the new goal is the transition's own next achieved goal.
    hit = (batch.next_obs["achieved_goal"][relabelled] == batch.obs["desired_goal"][relabelled]).squeeze(1)
    assert torch.equal(batch.rewards[relabelled], hit.float() - 1.0)
    assert torch.equal(batch.terminated[relabelled], hit)
    assert hit.any() and not hit.all()


def test_without_compute_terminated_the_stored_termination_stays():
    buffer = _buffer(64, 1, "future", k=1, goals=GoalFunctions(_reward, None))
    _fill(buffer, np.array([[False], [True]]))
    for _ in range(20):
        batch = buffer.sample(4)
        assert not batch.terminated.any()
        assert (batch.rewards[:2] == 0).any() or (batch.rewards[:2] == -1).all()


def test_relabelled_desired_goal_of_final_strategy_gives_reward_zero_on_the_last_step():
    # Hand case: one env, an episode of 3 steps; "final" relabels the last step with its own achieved goal.
    buffer = _buffer(8, 1, "final", k=1)
    _fill(buffer, np.array([[False], [False], [True]]))
    batch = buffer._samples_at(torch.tensor([2, 0]))  # the first relabelled, the second real
    assert batch.obs["desired_goal"][0].item() == _code(2, 0)
    assert batch.rewards.tolist() == [0.0, -1.0] and batch.terminated.tolist() == [True, False]
    batch = buffer._samples_at(torch.tensor([0, 0]))
    assert batch.obs["desired_goal"][0].item() == _code(2, 0)  # step 0 gets step 2's goal: not reached at step 0
    assert batch.rewards.tolist() == [-1.0, -1.0] and batch.terminated.tolist() == [False, False]


def test_state_dict_resumes_the_same_samples_and_bookkeeping():
    dones = np.random.default_rng(0).random((30, 3)) < 0.2
    buffer = _buffer(40, 3, "future", seed=5)
    _fill(buffer, dones[:20])
    state = buffer.state_dict()
    copy = _buffer(40, 3, "future", seed=99)
    copy.load_state_dict(state)
    _fill(buffer, dones[20:], start=20)
    _fill(copy, dones[20:], start=20)
    for _ in range(3):
        first, second = buffer.sample(32), copy.sample(32)
        for name in ("rewards", "terminated"):
            assert torch.equal(getattr(first, name), getattr(second, name))
        for key in GOAL_KEYS:
            assert torch.equal(first.obs[key], second.obs[key])
            assert torch.equal(first.next_obs[key], second.next_obs[key])
    plain = _buffer(40, 3)
    with pytest.raises(ValueError, match="lacks the episode bookkeeping"):
        plain.load_state_dict({key: value for key, value in state.items() if key != "her"})


def test_settings_and_buffer_errors_name_what_is_allowed():
    assert HERSettings.of({"strategy": "final", "k": 2}) == HERSettings("final", 2)
    assert HERSettings.of(None) is None and HERSettings().as_dict() == {"strategy": "future", "k": 4}
    with pytest.raises(ValueError, match=r"her\.strategy must be one of 'future', 'final', 'episode'"):
        HERSettings("later")
    with pytest.raises(ValueError, match=r"her\.k must be >= 1"):
        HERSettings.of({"k": 0})
    with pytest.raises(TypeError, match=r"her\.k must be an int"):
        HERSettings(k=2.0)
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['n_sampled_goal'\]"):
        HERSettings.of({"n_sampled_goal": 4})
    with pytest.raises(TypeError, match="her must be None, a HERSettings or a dict"):
        HERSettings.of("future")
    shapes, dtypes = dict.fromkeys(GOAL_KEYS, (1,)), dict.fromkeys(GOAL_KEYS, torch.float32)
    with pytest.raises(ValueError, match="n_step=3 would need every reward"):
        HindsightReplayBuffer(32, shapes, 1, obs_dtype=dtypes, n_step=3, her=HERSettings(), goals=GOALS)
    with pytest.raises(ValueError, match="'achieved_goal' and 'desired_goal' keys"):
        HindsightReplayBuffer(32, (3,), 1, her=HERSettings(), goals=GOALS)
    buffer = _buffer(8, 1)
    obs = {key: torch.zeros(1, 1) for key in GOAL_KEYS}
    with pytest.raises(ValueError, match="needs dones"):
        buffer.add(obs, torch.zeros(1, dtype=torch.int64), torch.zeros(1), torch.zeros(1, dtype=torch.bool), obs)
    with pytest.raises(ValueError, match="Dict observations with the keys 'observation', 'achieved_goal'"):
        check_goal_space(gym.spaces.Box(0, 1, (3,)), "CartPole-v1")


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(n_step=2), "n_step=2 would need"),
        (dict(prioritized=True), "prioritized=True is not supported"),
        (dict(frame_replay=True), "frame_replay=True"),
    ],
)
def test_make_replay_buffer_refuses_what_her_cannot_work_with(options, message):
    envs = make_envs("BitFlipping10-v0", 2, seed=0)
    settings = dict(n_step=1, gamma=0.9) | options
    with pytest.raises(ValueError, match=message):
        make_replay_buffer(envs, 64, 0, her=HERSettings(), **settings)


def test_goal_functions_need_goal_keys_and_compute_reward():
    with pytest.raises(ValueError, match="'CartPole' gives Box observations"):
        goal_functions(make_envs("CartPole-v1", 1, seed=0))
    with pytest.raises(ValueError, match=r"Dict with keys \['observation', 'state'\]"):
        goal_functions(make_envs("PrivilegedBandit-v0", 1, seed=0))
    envs = make_envs("BitFlipping10-v0", 1, seed=0)
    functions = goal_functions(envs)
    achieved, desired = torch.tensor([[1.0, 0.0], [1.0, 1.0]]), torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    assert functions.compute_reward(achieved, desired).tolist() == [0.0, -1.0]
    assert functions.compute_terminated(achieved, desired).tolist() == [True, False]


class _NoRewardFunction(BitFlipping):
    compute_reward = None  # goal keys, but nothing to recompute a reward with


def test_a_native_goal_env_without_compute_reward_is_refused():
    with pytest.raises(ValueError, match="has none"):
        goal_functions(_NoRewardFunction(1, seed=0))


class _PointGoalEnv(gym.Env):
    """A gymnasium goal env (gymnasium-robotics' form): a point on a line moved by +-1 toward a goal; the reward is
    -(distance > 0.5), numpy, batched."""

    def __init__(self):
        box = gym.spaces.Box(-10.0, 10.0, (1,), np.float32)
        self.observation_space = gym.spaces.Dict({"observation": box, "achieved_goal": box, "desired_goal": box})
        self.action_space = gym.spaces.Discrete(2)
        self.calls = 0

    def compute_reward(self, achieved_goal, desired_goal, info):
        self.calls += 1
        return -(np.abs(achieved_goal - desired_goal)[..., 0] > 0.5).astype(np.float64)

    def compute_terminated(self, achieved_goal, desired_goal, info):
        return False

    def _obs(self):
        return {"observation": self.x.copy(), "achieved_goal": self.x.copy(), "desired_goal": self.goal.copy()}

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.x = np.zeros(1, np.float32)
        self.goal = np.array([3.0], np.float32)
        return self._obs(), {}

    def step(self, action):
        self.x = self.x + (1.0 if action == 1 else -1.0)
        reward = float(self.compute_reward(self.x, self.goal, None))
        return self._obs(), reward, False, False, {}


gym.register("rl_lightning_tests/PointGoal-v0", _PointGoalEnv, max_episode_steps=5)


def test_a_gymnasium_goal_env_through_the_adapter_relabels_with_its_own_compute_reward():
    envs = make_envs("rl_lightning_tests/PointGoal-v0", 2, seed=0, backend="gymnasium")
    source = ReplaySource(
        envs, lambda obs, generator: envs.random_actions(generator), 64, 16, 0, her=HERSettings("final", 3)
    )
    source.collect(12)  # 2 episodes of 5 steps per env and 2 steps of a third
    batch = source.buffer.sample(16)
    relabelled = batch.obs["desired_goal"][:12]
    expected = -((batch.next_obs["achieved_goal"][:12] - relabelled).abs().squeeze(1) > 0.5).float()
    assert batch.rewards.dtype == torch.float32 and torch.equal(batch.rewards[:12], expected)
    assert not batch.terminated.any()  # compute_terminated: False, broadcast
    assert envs.gymnasium_envs.envs[0].unwrapped.calls > 0
    # "final": the goal is where the episode ended (its newest step for the running ones), never the env's 3.
    assert (relabelled != 3.0).any()
    envs.close()


def test_an_async_gymnasium_env_is_refused_with_what_to_use():
    envs = make_envs("rl_lightning_tests/PointGoal-v0", 2, seed=0, backend="gymnasium", vectorization_mode="async")
    try:
        with pytest.raises(ValueError, match="vectorization_mode': 'sync'"):
            goal_functions(envs)
    finally:
        envs.close()


# -- the bit-flipping env -----------------------------------------------------------------------------------------


def test_bit_flipping_steps_rewards_terminates_on_the_goal_and_truncates_after_n_steps():
    env = BitFlipping(2, seed=0, num_bits=3)
    obs, _ = env.reset()
    assert set(obs) == set(GOAL_KEYS)
    assert not (obs["achieved_goal"] == obs["desired_goal"]).all(dim=1).any()  # the goal differs from the state
    assert torch.equal(obs["observation"], obs["achieved_goal"])
    # Set a known task: env 0 is one flip (bit 1) from its goal, env 1 three flips.
    env._state = torch.tensor([[True, False, True], [False, False, False]])
    env._goal = torch.tensor([[True, True, True], [True, True, True]])
    obs, reward, terminated, truncated, info = env.step(torch.tensor([1, 0]))
    assert reward.tolist() == [0.0, -1.0] and terminated.tolist() == [True, False] and not truncated.any()
    assert info["final_observation"]["achieved_goal"][0].tolist() == [1.0, 1.0, 1.0]
    assert info["final_observation"]["achieved_goal"][1].tolist() == [1.0, 0.0, 0.0]
    assert env._t.tolist() == [0, 1]  # env 0 started a new episode
    env.step(torch.tensor([0, 0]))  # env 1 flips bit 0 back: (0, 0, 0)
    _, reward, terminated, truncated, _ = env.step(torch.tensor([0, 1]))  # env 1's third step: (0, 1, 0)
    assert reward[1] == -1.0 and not terminated[1] and truncated[1]


def test_bit_flipping_goal_is_uniform_among_the_patterns_that_differ_from_the_state():
    env = BitFlipping(20_000, seed=1, num_bits=2)
    obs, _ = env.reset()
    differ = obs["achieved_goal"] != obs["desired_goal"]  # which bits the goal flips: (0,1), (1,0) or (1,1)
    pattern = differ[:, 0].long() + 2 * differ[:, 1].long()
    counts = torch.bincount(pattern, minlength=4).tolist()
    assert counts[0] == 0 and all(abs(count / 20_000 - 1 / 3) < 0.015 for count in counts[1:])


def test_bit_flipping_compute_reward_and_reached_goal():
    achieved = torch.tensor([[1.0, 0.0, 1.0], [1.0, 0.0, 1.0]])
    desired = torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 1.0]])
    assert BitFlipping.compute_reward(achieved, desired, None).tolist() == [0.0, -1.0]
    assert BitFlipping.compute_terminated(achieved, desired).tolist() == [True, False]
    assert reached_goal(torch.tensor([0.0, -9.0, -10.0]), 10).tolist() == [True, True, False]
    assert make_envs("BitFlipping20-v0", 1).num_bits == 20
    with pytest.raises(ValueError, match="num_bits must be <= 62"):
        BitFlipping(1, num_bits=63)
