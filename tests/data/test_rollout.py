import pytest
import torch

from rl_lightning.data.rollout import (
    Rollout,
    RolloutSource,
    first_episode_stats,
    sample_actions,
)
from rl_lightning.envs import make_envs
from rl_lightning.nets import PolicyNetwork


def _add_steps(rollout: Rollout, num_envs: int, steps: int) -> None:
    for t in range(steps):
        rollout.add_step(
            obs=torch.full((num_envs, 4), float(t)),
            actions=torch.full((num_envs,), t % 2),
            logprobs=torch.full((num_envs,), -float(t)),
            rewards=torch.ones(num_envs),
            dones=torch.full((num_envs,), t == 1),
        )


def test_rollout_stacks_env_major():
    rollout = Rollout(max_steps=5)
    _add_steps(rollout, num_envs=3, steps=4)
    assert rollout.timestep == 4
    tensors = rollout.get()
    assert tensors.obs.shape == (3, 4, 4)
    assert tensors.actions.shape == tensors.logprobs.shape == tensors.rewards.shape == (3, 4)
    assert tensors.dones.dtype == torch.bool
    assert tensors.rewards.dtype == torch.float32
    torch.testing.assert_close(tensors.obs[1, :, 0], torch.tensor([0.0, 1.0, 2.0, 3.0]))
    assert tensors.dones[:, 1].all() and not tensors.dones[:, 0].any()


def test_rollout_full_raises_and_reset_empties():
    rollout = Rollout(max_steps=2)
    _add_steps(rollout, num_envs=1, steps=2)
    with pytest.raises(ValueError, match="full"):
        _add_steps(rollout, num_envs=1, steps=1)
    rollout.reset()
    assert rollout.timestep == 0
    with pytest.raises(ValueError, match="empty"):
        rollout.get()


def test_rollout_rejects_inconsistent_shapes():
    rollout = Rollout(max_steps=2)
    with pytest.raises(ValueError, match="rewards"):
        rollout.add_step(torch.zeros(3, 4), torch.zeros(3), torch.zeros(3), torch.zeros(2), torch.zeros(3))


def test_get_batches_splits_whole_trajectories_along_envs():
    rollout = Rollout(max_steps=3)
    num_envs = 6
    for t in range(3):
        rollout.add_step(
            torch.arange(num_envs, dtype=torch.float32).unsqueeze(1).expand(num_envs, 4) + 10 * t,
            torch.zeros(num_envs, dtype=torch.long),
            torch.zeros(num_envs),
            torch.ones(num_envs),
            torch.zeros(num_envs, dtype=torch.bool),
        )
    batches = rollout.get_batches(2)
    assert len(batches) == 3
    for i, batch in enumerate(batches):
        assert batch.obs.shape == (2, 3, 4)
        torch.testing.assert_close(batch.obs[:, 0, 0], torch.tensor([2.0 * i, 2.0 * i + 1]))
        torch.testing.assert_close(batch.obs[0, :, 0], torch.tensor([2.0 * i, 2 * i + 10, 2 * i + 20]))


def test_first_episode_stats():
    rewards = torch.tensor([[1.0, 1.0, 1.0, 1.0], [2.0, 0.0, 5.0, 5.0], [1.0, 1.0, 1.0, 1.0]])
    dones = torch.tensor([[False, True, False, True], [True, False, False, False], [False] * 4])
    stats = first_episode_stats(rewards, dones)
    torch.testing.assert_close(stats.returns, torch.tensor([2.0, 2.0, 4.0]))
    torch.testing.assert_close(stats.lengths, torch.tensor([2.0, 1.0, 4.0]))


def test_sample_actions_follows_the_softmax():
    logits = torch.log(torch.tensor([[0.2, 0.5, 0.3]])).expand(40_000, 3)
    generator = torch.Generator().manual_seed(0)
    actions, logprobs = sample_actions(logits, generator)
    frequencies = torch.bincount(actions, minlength=3).float() / actions.numel()
    # 4 standard errors of a frequency near 0.5 with 40k draws is 0.01.
    torch.testing.assert_close(frequencies, torch.tensor([0.2, 0.5, 0.3]), atol=0.01, rtol=0)
    torch.testing.assert_close(logprobs, torch.log(torch.tensor([0.2, 0.5, 0.3]))[actions])


def test_sample_actions_is_reproducible_by_generator():
    logits = torch.randn(100, 2)
    first = sample_actions(logits, torch.Generator().manual_seed(7))[0]
    second = sample_actions(logits, torch.Generator().manual_seed(7))[0]
    assert torch.equal(first, second)


def _source(num_envs=8, num_steps=20, **kwargs) -> RolloutSource:
    envs = make_envs("CartPole-v1", num_envs, seed=0)
    policy = PolicyNetwork((4,), 2)
    return RolloutSource(envs, policy, num_steps=num_steps, **kwargs)


def test_source_length_and_batches():
    source = _source(num_batches=2, rollout_use_count=3, rollouts_per_epoch=2)
    assert len(source) == 2 * 2 * 3
    items = list(source)
    assert len(items) == 12
    assert all(item.obs.shape == (4, 20, 4) for item in items)
    assert source.num_rollouts == 2
    assert source.env_steps == 2 * 8 * 20
    # The same rollout is reused rollout_use_count times before the next is collected.
    assert torch.equal(items[0].obs, items[2].obs) and torch.equal(items[1].obs, items[5].obs)
    assert not torch.equal(items[0].obs, items[6].obs)


def test_source_rejects_uneven_batches():
    with pytest.raises(ValueError, match="num_batches"):
        _source(num_envs=6, num_batches=4)


def test_source_records_behaviour_logprobs_and_real_transitions():
    source = _source(num_envs=4, num_steps=60)
    rollout = source.collect()
    with torch.no_grad():
        logits = source.policy(rollout.obs)
    expected = torch.log_softmax(logits, -1).gather(-1, rollout.actions.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(rollout.logprobs, expected)
    assert rollout.dones.any()  # 60 steps of a random policy always end some episodes
    # After a done the next obs is a fresh reset state: all |components| <= 0.05.
    env, t = rollout.dones[:, :-1].nonzero()[0].tolist()
    assert rollout.obs[env, t + 1].abs().max() <= 0.05


def test_full_reset_starts_every_rollout_from_reset_states():
    source = _source(num_envs=4, num_steps=30, full_reset=True)
    source.collect()
    second = source.collect()
    assert second.obs[:, 0].abs().max() <= 0.05
    continuing = _source(num_envs=4, num_steps=30, full_reset=False)
    first = continuing.collect()
    second = continuing.collect()
    # Without a full reset the next rollout starts where the last one stopped.
    last_state = continuing.envs.state
    assert not torch.equal(second.obs[:, 0], first.obs[:, 0])
    assert last_state.shape == (4, 4)


def test_source_counts_env_steps_of_all_processes():
    envs = make_envs("Probe1-v0", 3, seed=0)
    source = RolloutSource(envs, PolicyNetwork((1,), 1), num_steps=5, rollouts_per_epoch=4, world_size=2)
    list(source)
    assert source.env_steps == 4 * 3 * 5 * 2 and source.num_rollouts == 4
