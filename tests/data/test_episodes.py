"""EpisodeTracker: the episodes that finished since the last pop, as RecordEpisodeStatistics counts them."""

import pytest
import torch

from rl_lightning.data.episodes import EpisodeTracker


def _stepwise(rewards, dones):
    tracker = EpisodeTracker(rewards.shape[0])
    for t in range(rewards.shape[1]):
        tracker.update(rewards[:, t], dones[:, t])
    return tracker


def test_hand_computed_episodes_across_two_blocks():
    tracker = EpisodeTracker(2)
    # env 0: episodes [1, 2] (done at t=1), then [3 ... running; env 1: one episode [1, 1, 1] done at t=2
    tracker.update(torch.tensor([[1.0, 2.0, 3.0], [1.0, 1.0, 1.0]]), torch.tensor([[0, 1, 0], [0, 0, 1]]).bool())
    assert tracker.pop().tolist() == [3.0 + 3.0, 2.0 + 3.0, 2.0]
    assert tracker.returns.tolist() == [3.0, 0.0] and tracker.lengths.tolist() == [1.0, 0.0]
    # env 0's episode [3, 4] ends at the next block's first step; env 1 runs on
    tracker.update(torch.tensor([[4.0, 5.0], [2.0, 2.0]]), torch.tensor([[1, 0], [0, 0]]).bool())
    assert tracker.pop().tolist() == [7.0, 2.0, 1.0]
    assert tracker.returns.tolist() == [5.0, 4.0] and tracker.lengths.tolist() == [1.0, 2.0]
    assert tracker.pop().tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_block_equals_its_steps_one_by_one(seed):
    generator = torch.Generator().manual_seed(seed)
    rewards = torch.randn(5, 40, generator=generator)
    dones = torch.rand(5, 40, generator=generator) < 0.2
    stepwise = _stepwise(rewards, dones)
    blockwise = EpisodeTracker(5)
    blockwise.update(rewards[:, :17], dones[:, :17])
    blockwise.update(rewards[:, 17:], dones[:, 17:])
    torch.testing.assert_close(blockwise.pop(), stepwise.pop())
    torch.testing.assert_close(blockwise.returns, stepwise.returns)
    torch.testing.assert_close(blockwise.lengths, stepwise.lengths)


def test_reset_drops_unfinished_episodes_and_state_round_trips():
    tracker = EpisodeTracker(3)
    tracker.update(torch.ones(3), torch.tensor([True, False, False]))
    state = tracker.state_dict()
    tracker.reset()
    assert tracker.returns.tolist() == [0.0, 0.0, 0.0] and tracker.pop().tolist() == [1.0, 1.0, 1.0]
    restored = EpisodeTracker(3)
    restored.load_state_dict(state)
    assert restored.returns.tolist() == [0.0, 1.0, 1.0] and restored.finished.tolist() == [1.0, 1.0, 1.0]
