import pytest
import torch

from rl_lightning.data.rollout import Rollout, RolloutCollection, RolloutSource, RolloutTensors, first_episode_stats
from rl_lightning.envs import CartPole, make_envs
from rl_lightning.nets import PolicyNetwork


def _add_steps(rollout: Rollout, num_envs: int, steps: int) -> None:
    for t in range(steps):
        rollout.add_step(
            obs=torch.full((num_envs, 4), float(t)),
            actions=torch.full((num_envs,), t % 2),
            logprobs=torch.full((num_envs,), -float(t)),
            rewards=torch.ones(num_envs),
            terminated=torch.full((num_envs,), t == 1),
            truncated=torch.full((num_envs,), t == 3),
        )


def test_rollout_stacks_env_major():
    rollout = Rollout(max_steps=5)
    _add_steps(rollout, num_envs=3, steps=4)
    assert rollout.timestep == 4
    tensors = rollout.get()
    assert tensors.obs.shape == (3, 4, 4)
    assert tensors.actions.shape == tensors.logprobs.shape == tensors.rewards.shape == (3, 4)
    assert tensors.terminated.dtype == tensors.truncated.dtype == tensors.dones.dtype == torch.bool
    assert tensors.rewards.dtype == torch.float32
    assert tensors.values is None and tensors.next_values is None  # no critic
    torch.testing.assert_close(tensors.obs[1, :, 0], torch.tensor([0.0, 1.0, 2.0, 3.0]))
    # one meaning of done: step t ended its episode, by termination or by truncation
    assert tensors.terminated[0].tolist() == [False, True, False, False]
    assert tensors.truncated[0].tolist() == [False, False, False, True]
    assert tensors.dones[0].tolist() == [False, True, False, True]


def test_rollout_without_truncated_has_none_and_keeps_values_and_final_observations():
    rollout = Rollout(max_steps=2)
    for t in range(2):
        rollout.add_step(
            torch.zeros(2, 1),
            torch.zeros(2),
            torch.zeros(2),
            torch.ones(2),
            torch.tensor([False, t == 1]),
            values=torch.full((2,), float(t)),
            final_obs=torch.full((2, 1), 10.0 + t),
        )
    tensors = rollout.get()
    assert not tensors.truncated.any() and tensors.dones.tolist() == [[False, False], [False, True]]
    assert tensors.values.tolist() == [[0.0, 1.0], [0.0, 1.0]]
    assert rollout.final_observations()[:, :, 0].tolist() == [[10.0, 11.0], [10.0, 11.0]]


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
    rollout = Rollout(max_steps=3)
    with pytest.raises(ValueError, match="rewards"):
        rollout.add_step(torch.zeros(3, 4), torch.zeros(3), torch.zeros(3), torch.zeros(2), torch.zeros(3).bool())
    # a later step is checked against the first when the steps are stacked
    rollout.add_step(torch.zeros(3, 4), torch.zeros(3), torch.zeros(3), torch.zeros(3), torch.zeros(3).bool())
    rollout.add_step(torch.zeros(2, 4), torch.zeros(3), torch.zeros(3), torch.zeros(3), torch.zeros(3).bool())
    with pytest.raises(ValueError, match="obs differ in shape"):
        rollout.get()


def test_select_envs_takes_whole_trajectories_of_every_field():
    rollout = Rollout(max_steps=3)
    _add_steps(rollout, num_envs=6, steps=3)
    tensors = rollout.get()._replace(values=torch.arange(18.0).view(6, 3))
    part = tensors.select_envs(slice(2, 4))
    assert part.obs.shape == (2, 3, 4) and part.next_values is None
    assert part.values.tolist() == [[6.0, 7.0, 8.0], [9.0, 10.0, 11.0]]
    assert torch.equal(part.dones, tensors.dones[2:4])


def test_first_episode_stats():
    rewards = torch.tensor([[1.0, 1.0, 1.0, 1.0], [2.0, 0.0, 5.0, 5.0], [1.0, 1.0, 1.0, 1.0]])
    dones = torch.tensor([[False, True, False, True], [True, False, False, False], [False] * 4])
    stats = first_episode_stats(rewards, dones)
    torch.testing.assert_close(stats.returns, torch.tensor([2.0, 2.0, 4.0]))
    torch.testing.assert_close(stats.lengths, torch.tensor([2.0, 1.0, 4.0]))


def _source(num_envs=8, num_steps=20, **kwargs) -> RolloutSource:
    envs = make_envs("CartPole-v1", num_envs, seed=0)
    policy = PolicyNetwork((4,), 2)
    return RolloutSource(envs, policy, num_steps=num_steps, **kwargs)


def test_source_length_and_batches():
    source = _source(num_batches=2, rollout_use_count=3, rollouts_per_epoch=2)
    assert len(source) == 2 * 2 * 3
    items = []
    for _ in range(len(source)):
        items.append(source.next_batch())
        assert source.collection.position == (len(items) - 1) % 6  # where the newest batch is in its rollout
    assert all(isinstance(item, RolloutTensors) and item.obs.shape == (4, 20, 4) for item in items)
    assert source.num_rollouts == 2
    assert source.env_steps == 2 * 8 * 20
    # The same rollout is reused rollout_use_count times before the next is collected.
    assert torch.equal(items[0].obs, items[2].obs) and torch.equal(items[1].obs, items[5].obs)
    assert not torch.equal(items[0].obs, items[6].obs)
    # batch 1 of a rollout holds envs 4..7 of the collection's rollout
    assert torch.equal(items[7].obs, source.collection.rollout.obs[4:])


def test_a_source_built_directly_splits_uneven_batches_like_tensor_split():
    """The module checks that num_batches divides num_envs; a source built directly uses every env."""
    source = _source(num_envs=7, num_steps=3, num_batches=3)
    sizes = [source.next_batch().obs.shape[0] for _ in range(3)]
    assert sizes == [3, 2, 2]


def test_source_records_behaviour_logprobs_and_real_transitions():
    source = _source(num_envs=4, num_steps=60)
    collection = source.collect()
    assert isinstance(collection, RolloutCollection) and collection.advantages is None and collection.position == -1
    rollout = collection.rollout
    with torch.no_grad():
        logits = source.policy(rollout.obs)
    expected = torch.log_softmax(logits, -1).gather(-1, rollout.actions.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(rollout.logprobs, expected)
    assert rollout.dones.any()  # 60 steps of a random policy always end some episodes
    # After a done the next obs is a fresh reset state: all |components| <= 0.05.
    env, t = rollout.dones[:, :-1].nonzero()[0].tolist()
    assert rollout.obs[env, t + 1].abs().max() <= 0.05


def test_time_limits_are_truncations_not_terminations():
    envs = CartPole(3, seed=0, max_episode_steps=4)
    source = RolloutSource(envs, PolicyNetwork((4,), 2), num_steps=10)
    rollout = source.collect().rollout
    assert rollout.truncated[:, 3].all() and rollout.truncated[:, 7].all()
    assert not (rollout.terminated & rollout.truncated).any()
    assert torch.equal(rollout.dones, rollout.terminated | rollout.truncated)


def test_full_reset_starts_every_rollout_from_reset_states():
    source = _source(num_envs=4, num_steps=30, full_reset=True)
    source.collect()
    second = source.collect().rollout
    assert second.obs[:, 0].abs().max() <= 0.05
    continuing = _source(num_envs=4, num_steps=30, full_reset=False)
    first = continuing.collect().rollout
    second = continuing.collect().rollout
    # Without a full reset the next rollout starts where the last one stopped.
    last_state = continuing.envs.state
    assert not torch.equal(second.obs[:, 0], first.obs[:, 0])
    assert last_state.shape == (4, 4)


def test_source_counts_env_steps_of_all_processes():
    envs = make_envs("Probe1-v0", 3, seed=0)
    source = RolloutSource(envs, PolicyNetwork((1,), 1), num_steps=5, rollouts_per_epoch=4, world_size=2)
    list(source)
    assert source.env_steps == 4 * 3 * 5 * 2 and source.num_rollouts == 4


def test_a_mid_rollout_state_round_trips_and_an_earlier_layout_loads_or_fails_clearly():
    source = _source(num_envs=4, num_steps=5, num_batches=2)
    first = source.next_batch()
    state = source.state_dict()
    assert state["collection"]["position"] == 0
    restored = _source(num_envs=4, num_steps=5, num_batches=2)
    restored.load_state_dict(state)
    assert torch.equal(restored.next_batch().obs, source.next_batch().obs)  # batch 1 of the same rollout
    assert restored.collection.position == 1 and restored.num_rollouts == 1
    # the layout saved before the rollout record: counters load, pending batches are a clear error
    earlier = {key: value for key, value in state.items() if key not in ("collection", "episode_start")}
    again = _source(num_envs=4, num_steps=5, num_batches=2)
    again.load_state_dict({**earlier, "batch_in_rollout": 1, "rollout": None})
    assert again.collection is None and again.num_rollouts == 1 and again.env_steps == 20
    with pytest.raises(ValueError, match="middle of a rollout by an earlier rl_lightning"):
        again.load_state_dict({**earlier, "batch_in_rollout": 0, "rollout": {"obs": first.obs}})
