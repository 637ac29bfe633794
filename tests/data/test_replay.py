import pytest
import torch

from rl_lightning.data.replay import ReplayBuffer, ReplaySource, epsilon_greedy
from rl_lightning.envs import CartPole, make_envs


def _batch(values, num_envs=3, obs_dim=2):
    """A batch of transitions whose every field encodes ``values`` (one per env)."""
    values = torch.as_tensor(values, dtype=torch.float32)
    obs = values.unsqueeze(1).expand(num_envs, obs_dim).clone()
    return obs, values.long(), values.clone(), values.long() % 2 == 1, obs + 0.5


def _add_counting(buffer, num_adds, num_envs):
    for i in range(num_adds):
        buffer.add(*_batch(range(i * num_envs, (i + 1) * num_envs), num_envs))


def test_ring_wraparound_keeps_the_newest_buffer_size_transitions():
    buffer = ReplayBuffer(buffer_size=10, obs_shape=(2,), num_envs=3, seed=0)
    _add_counting(buffer, 5, 3)  # transitions 0..14; 10 slots
    assert buffer.size == 10 and len(buffer) == 10
    assert buffer.pos == 15 % 10
    assert sorted(buffer.rewards.tolist()) == list(range(5, 15))
    # Every field of a slot belongs to the same transition.
    assert torch.equal(buffer.actions.float(), buffer.rewards)
    assert torch.equal(buffer.obs[:, 0], buffer.rewards)
    assert torch.equal(buffer.next_obs[:, 1], buffer.rewards + 0.5)
    assert torch.equal(buffer.terminated, buffer.actions % 2 == 1)
    # Slot layout of the ring: 10..14 overwrote slots 0..4 (the wrap split the 5th add 1 + 2).
    assert buffer.rewards.tolist() == [10, 11, 12, 13, 14, 5, 6, 7, 8, 9]


def test_sampling_covers_the_filled_part_only():
    buffer = ReplayBuffer(buffer_size=100, obs_shape=(2,), num_envs=4, seed=0)
    _add_counting(buffer, 2, 4)  # 8 of 100 slots filled
    sample = buffer.sample(2000)
    assert set(sample.rewards.tolist()) == set(range(8))  # all filled, none of the zeros beyond
    assert torch.equal(sample.obs[:, 0], sample.rewards)
    assert sample.obs.shape == (2000, 2) and sample.actions.dtype == torch.int64
    assert sample.terminated.dtype == torch.bool


def test_sampling_is_reproducible_by_seed():
    def samples(seed):
        buffer = ReplayBuffer(buffer_size=50, obs_shape=(2,), num_envs=4, seed=seed)
        _add_counting(buffer, 10, 4)
        return buffer.sample(64).rewards

    assert torch.equal(samples(3), samples(3))
    assert not torch.equal(samples(3), samples(4))


def test_sample_from_empty_buffer_raises():
    with pytest.raises(RuntimeError, match="empty"):
        ReplayBuffer(10, (2,), 2).sample(4)


@pytest.mark.parametrize(
    ("field", "bad", "error", "match"),
    [
        ("obs", torch.zeros(3, 3), ValueError, "obs must have shape"),
        ("obs", torch.zeros(3, 2, dtype=torch.float64), TypeError, "obs must have dtype"),
        ("actions", torch.zeros(3, dtype=torch.float32), TypeError, "actions must have dtype"),
        ("actions", torch.zeros(3, 1, dtype=torch.int64), ValueError, "actions must have shape"),
        ("rewards", torch.zeros(3, dtype=torch.int64), TypeError, "rewards must have dtype"),
        ("terminated", torch.zeros(3), TypeError, "terminated must have dtype"),
        ("terminated", torch.zeros(2, dtype=torch.bool), ValueError, "terminated must have shape"),
        ("next_obs", [[0.0, 0.0]] * 3, TypeError, "next_obs must be a torch.Tensor"),
    ],
)
def test_add_rejects_wrong_shapes_and_dtypes_naming_the_field(field, bad, error, match):
    buffer = ReplayBuffer(buffer_size=10, obs_shape=(2,), num_envs=3)
    fields = dict(zip(["obs", "actions", "rewards", "terminated", "next_obs"], _batch([0, 1, 2]), strict=True))
    fields[field] = bad
    with pytest.raises(error, match=match):
        buffer.add(**fields)
    assert buffer.size == 0


def test_constructor_validation():
    with pytest.raises(ValueError, match="num_envs"):
        ReplayBuffer(buffer_size=2, obs_shape=(2,), num_envs=3)
    with pytest.raises(TypeError, match="buffer_size"):
        ReplayBuffer(buffer_size=10.0, obs_shape=(2,), num_envs=3)


def test_bytes_per_transition_is_exactly_the_tensors():
    buffer = ReplayBuffer(buffer_size=1000, obs_shape=(4,), num_envs=8)
    # obs 16 + next_obs 16 + action 8 + reward 4 + terminated 1
    assert buffer.bytes_per_transition == 45
    assert buffer.nbytes == 45 * 1000


def test_state_dict_round_trip_restores_contents_position_and_generator():
    buffer = ReplayBuffer(buffer_size=10, obs_shape=(2,), num_envs=3, seed=0)
    _add_counting(buffer, 5, 3)
    buffer.sample(7)
    state = buffer.state_dict()

    restored = ReplayBuffer(buffer_size=10, obs_shape=(2,), num_envs=3, seed=123)
    restored.load_state_dict(state)
    assert (restored.pos, restored.size) == (buffer.pos, buffer.size)
    for buf in (buffer, restored):
        buf.add(*_batch([100, 101, 102]))
    assert torch.equal(restored.rewards, buffer.rewards)
    assert torch.equal(restored.sample(32).rewards, buffer.sample(32).rewards)

    with pytest.raises(ValueError, match="size"):
        ReplayBuffer(buffer_size=20, obs_shape=(2,), num_envs=3).load_state_dict(state)


def test_epsilon_greedy_per_env_draws():
    q_values = torch.tensor([[0.0, 1.0]]).repeat(1000, 1)
    assert torch.equal(epsilon_greedy(q_values, 0.0), torch.ones(1000, dtype=torch.int64))
    generator = torch.Generator().manual_seed(0)
    actions = epsilon_greedy(q_values, 0.5, generator)
    # random with prob 0.5, of which half pick action 0: ~25% zeros
    assert 0.2 < (actions == 0).float().mean().item() < 0.3


def _source(envs, **overrides):
    kwargs = dict(buffer_size=100, batch_size=8, learning_starts=0, train_freq=1, num_batches=3, seed=0)
    kwargs.update(overrides)
    return ReplaySource(envs, lambda obs, generator: envs.random_actions(generator), **kwargs)


def test_source_stores_the_true_final_observation_and_terminated():
    # Probe3: obs [0] -> [1] (reward 0) -> terminal [1] (reward 1); the auto-reset obs is [0].
    source = _source(make_envs("Probe3-v0", num_envs=2, seed=0))
    source.collect(4)
    buffer = source.buffer
    assert buffer.size == 8 and source.env_steps == 8
    obs, next_obs = buffer.obs[:8, 0], buffer.next_obs[:8, 0]
    first, last = obs == 0, obs == 1
    assert first.sum() == 4 and torch.equal(buffer.terminated[:8], last)
    assert torch.all(next_obs == 1)  # never the reset obs [0]
    assert torch.all(buffer.rewards[:8][first] == 0) and torch.all(buffer.rewards[:8][last] == 1)
    stats = source.episodes.pop()
    assert stats.tolist() == [4.0, 8.0, 4.0]  # 4 episodes, return 1, length 2
    assert source.episodes.pop().tolist() == [0.0, 0.0, 0.0]


def test_source_stores_truncation_as_not_terminated_with_the_final_obs():
    envs = CartPole(num_envs=4, seed=0, max_episode_steps=3)
    source = _source(envs)
    source.collect(3)  # every env is truncated on its 3rd step (too short to fall)
    buffer = source.buffer
    assert not buffer.terminated.any()
    last_step = buffer.next_obs[8:12]
    # s_{t+1} of the truncated step continues s_t's dynamics (not a fresh reset near 0)
    assert torch.allclose(last_step[:, 0], buffer.obs[8:12, 0] + 0.02 * buffer.obs[8:12, 1])


def test_source_fills_learning_starts_then_yields_len_batches():
    source = _source(make_envs("Probe1-v0", num_envs=4, seed=0), learning_starts=10, train_freq=2)
    assert len(source) == 3
    batches = list(source)
    assert len(batches) == 3 and batches[0].obs.shape == (8, 1)
    # fill: ceil(10 / 4) = 3 vector steps, then 3 items x 2 steps
    assert source.env_steps == (3 + 3 * 2) * 4
    assert source.buffer.size == source.env_steps


def test_source_counts_env_steps_of_all_processes():
    source = _source(make_envs("Probe1-v0", num_envs=4, seed=0), world_size=3, learning_starts=30)
    source.fill()
    # each of 3 processes plays ceil(30 / 12) = 3 vector steps of 4 envs
    assert source.env_steps == 36 and source.buffer.size == 12


def test_n_step_samples_follow_each_envs_chain_and_cut_at_termination_and_truncation():
    """2 envs, n = 3, gamma 0.5. Env 0: rewards 1, 2, 4, 8 with a termination after the 2nd step;
    env 1: rewards 10, 20, 40, 80 with a truncation after the 2nd. Every sample starting at step 0
    sums 2 steps and ends on that step: env 0 terminal (no bootstrap), env 1 bootstrapping from its
    true final obs with 0.25; samples from step 1 sum 1 step; the newest 2 steps start none (their
    chains of 3 are not complete yet)."""
    buffer = ReplayBuffer(buffer_size=16, obs_shape=(1,), num_envs=2, seed=0, n_step=3, gamma=0.5)
    rewards = [[1.0, 10.0], [2.0, 20.0], [4.0, 40.0], [8.0, 80.0]]
    ended = [[False, False], [True, True], [False, False], [False, False]]
    for t in range(4):
        obs = torch.tensor([[float(t)], [100.0 + t]])
        buffer.add(
            obs,
            torch.tensor([0, 1]),
            torch.tensor(rewards[t]),
            torch.tensor([ended[t][0], False]),  # env 0 terminates at t = 1, env 1 is truncated there
            obs + 0.5,  # the true final (next) obs
            torch.tensor(ended[t]),
        )
    samples = buffer.sample(400)
    start = samples.obs[:, 0]
    assert set(start.tolist()) == {0.0, 1.0, 100.0, 101.0}  # the newest (n - 1) steps start none
    expected = {  # start obs: (summed rewards, terminated, next obs, discount)
        0.0: (1 + 0.5 * 2, True, 1.5, 0.25),
        1.0: (2.0, True, 1.5, 0.5),
        100.0: (10 + 0.5 * 20, False, 101.5, 0.25),
        101.0: (20.0, False, 101.5, 0.5),
    }
    for obs, (total, terminated, next_obs, discount) in expected.items():
        rows = start == obs
        assert torch.all(samples.rewards[rows] == total) and torch.all(samples.terminated[rows] == terminated)
        assert torch.all(samples.next_obs[rows, 0] == next_obs) and torch.all(samples.discounts[rows] == discount)


def test_n_step_chains_continue_across_the_ring_and_need_dones():
    buffer = ReplayBuffer(buffer_size=6, obs_shape=(1,), num_envs=2, seed=0, n_step=2, gamma=0.5)
    for t in range(5):  # 10 transitions into 6 slots: the ring wrapped, steps 2, 3, 4 are kept
        obs = torch.tensor([[float(t)], [float(t)]])
        buffer.add(
            obs,
            torch.tensor([0, 0]),
            torch.full((2,), float(t)),
            torch.zeros(2, dtype=torch.bool),
            obs + 1,
            torch.zeros(2, dtype=torch.bool),
        )
    samples = buffer.sample(200)
    assert set(samples.obs[:, 0].tolist()) == {2.0, 3.0}  # step 4 has no successor yet
    rows = samples.obs[:, 0] == 3.0
    assert torch.all(samples.rewards[rows] == 3 + 0.5 * 4) and torch.all(samples.next_obs[rows, 0] == 5.0)
    with pytest.raises(ValueError, match="needs dones"):
        buffer.add(
            *(torch.zeros(2, 1), torch.zeros(2, dtype=torch.int64), torch.zeros(2)),
            torch.zeros(2, dtype=torch.bool),
            torch.zeros(2, 1),
        )
    with pytest.raises(ValueError, match=r"n_step - 1\) \* num_envs"):
        ReplayBuffer(buffer_size=4, obs_shape=(1,), num_envs=2, n_step=3)


def test_a_buffer_for_an_env_takes_its_spaces():
    box = ReplayBuffer.for_env(make_envs("Pendulum-v1", 2, seed=0), 10)
    assert box.actions.dtype == torch.float32 and box.actions.shape == (10, 1) and box.obs.shape == (10, 3)
    discrete = ReplayBuffer.for_env(make_envs("CartPole-v1", 2, seed=0), 10)
    assert discrete.actions.dtype == torch.int64 and discrete.actions.shape == (10,)
    image = ReplayBuffer.for_env(make_envs("ImageProbe5-v0", 2, seed=0), 10)
    assert image.obs.dtype == torch.uint8


def test_source_collects_train_freq_steps_per_gradient_steps_batches():
    source = _source(make_envs("Probe1-v0", num_envs=4, seed=0), learning_starts=8, train_freq=3, gradient_steps=2)
    source.num_batches = 6
    befores = []
    for _ in source:
        befores.append(source.env_steps_before_batch)
    # warm-up of 2 vector steps, then 3 collections of 3 vector steps, each shared by 2 batches
    assert source.env_steps == 8 + 3 * 3 * 4
    assert befores == [0, 0, 20, 20, 32, 32]
