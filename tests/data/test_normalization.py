"""RunningMeanStd, ObservationNormalizer and RewardScaler alone, against numpy and hand computations."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_lightning.data.normalization import ObservationNormalizer, RewardScaler, RunningMeanStd
from rl_lightning.envs.spaces import TensorTree


def test_running_mean_std_of_several_batches_is_numpys_mean_and_population_variance():
    generator = torch.Generator().manual_seed(0)
    batches = [torch.randn(n, 3, generator=generator) * 4 + 2 for n in (5, 17, 1)]
    stats = RunningMeanStd((3,), epsilon=0.0)
    for batch in batches:
        stats.update(batch)
    everything = torch.cat(batches).double().numpy()
    np.testing.assert_allclose(stats.mean.numpy(), everything.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(stats.var.numpy(), everything.var(axis=0), rtol=1e-12)
    assert stats.count.item() == 23 and stats.mean.dtype == torch.float64


def test_running_mean_std_starts_from_a_count_of_epsilon_as_gymnasium_does():
    stats = RunningMeanStd(epsilon=1e-4)  # mean 0, var 1 over 1e-4 samples
    stats.update(torch.tensor([1.0, 3.0]))  # mean 2, var 1
    total = 2 + 1e-4
    assert stats.mean.item() == pytest.approx(2 * 2 / total, rel=1e-12)
    assert stats.var.item() == pytest.approx((1e-4 * 1 + 2 * 1 + 2**2 * 1e-4 * 2 / total) / total, rel=1e-12)
    assert stats.count.item() == pytest.approx(total, rel=1e-12)


def test_running_mean_std_adds_what_reduce_sums_over_processes():
    """Two processes with the same data: the statistics of the data seen twice (same mean and var)."""
    samples = torch.tensor([[1.0], [2.0], [6.0]])
    stats = RunningMeanStd((1,), epsilon=0.0)
    stats.update(samples, reduce=lambda moments: 2 * moments)
    assert stats.count.item() == 6
    assert stats.mean.item() == pytest.approx(3.0) and stats.var.item() == pytest.approx(np.var([1, 2, 6]))


def test_observation_normalizer_standardises_and_clips_without_updating():
    normalizer = ObservationNormalizer((2,), clip=1.5)
    normalizer.stats.mean.copy_(torch.tensor([1.0, -2.0], dtype=torch.float64))
    normalizer.stats.var.copy_(torch.tensor([4.0, 0.25], dtype=torch.float64))
    obs = torch.tensor([[3.0, -2.0], [1.0, 0.0], [-9.0, -2.5]])
    normalized = normalizer(obs)
    # (obs - mean) / sqrt(var + 1e-8): [[1, 0], [0, 4 -> 1.5], [-5 -> -1.5, -1]]
    torch.testing.assert_close(normalized, torch.tensor([[1.0, 0.0], [0.0, 1.5], [-1.5, -1.0]]))
    assert normalized.dtype == torch.float32 and normalizer.stats.count.item() == pytest.approx(1e-4)
    normalizer.update(obs)
    np.testing.assert_allclose(normalizer.stats.count.item(), 3 + 1e-4)


def test_observation_normalizer_of_a_dict_normalises_its_vector_keys_only():
    space = gym.spaces.Dict(
        {
            "position": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
            "image": gym.spaces.Box(0, 255, (3, 4, 4), np.uint8),
            "count": gym.spaces.Box(0, 9, (1,), np.uint8),
        }
    )
    normalizer = ObservationNormalizer(space)
    assert set(normalizer.stats.keys()) == {"position"}
    obs = TensorTree(
        {
            "position": torch.tensor([[1.0, 3.0], [3.0, 5.0]]),
            "image": torch.full((2, 3, 4, 4), 7, dtype=torch.uint8),
            "count": torch.tensor([[4], [5]], dtype=torch.uint8),
        }
    )
    normalizer.update(obs)
    normalized = normalizer(obs)
    # mean [2, 4] and var [1, 1] (up to the 1e-4 prior sample): +-1 after normalising
    torch.testing.assert_close(normalized["position"], torch.tensor([[-1.0, -1.0], [1.0, 1.0]]), atol=1e-3, rtol=0)
    assert torch.equal(normalized["image"], obs["image"]) and torch.equal(normalized["count"], obs["count"])


def test_reward_scaler_divides_by_the_std_of_the_discounted_returns_it_tracks():
    """gamma 0.5; env 0 carries a discounted return of 2 into the rollout and ends an episode at
    step 1; env 1 starts from 0 and runs on."""
    scaler = RewardScaler(gamma=0.5, clip=100.0)
    rewards = torch.tensor([[1.0, 2.0, 4.0], [0.0, 2.0, 2.0]])
    dones = torch.tensor([[False, True, False], [False, False, False]])
    scaled, carried = scaler.scale(rewards, dones, torch.tensor([2.0, 0.0]))
    # returns: env 0: 2 * 0.5 + 1 = 2, 2 * 0.5 + 2 = 3 (the episode ends), 0 * 0.5 + 4 = 4
    #          env 1: 0, 2, 1 + 2 = 3
    returns = np.array([2.0, 3.0, 4.0, 0.0, 2.0, 3.0])
    total = 6 + 1e-4
    mean = returns.sum() / total
    var = (1e-4 * 1 + 6 * returns.var() + returns.mean() ** 2 * 1e-4 * 6 / total) / total
    assert scaler.stats.mean.item() == pytest.approx(mean, rel=1e-12)
    assert scaler.stats.var.item() == pytest.approx(var, rel=1e-12)
    torch.testing.assert_close(scaled, rewards / float(np.sqrt(var + 1e-8)))
    assert carried.tolist() == [4.0, 3.0]  # the running return each env carries into the next rollout
    clipped, _ = RewardScaler(gamma=0.5, clip=0.5).scale(rewards, dones, torch.zeros(2))
    assert clipped.max().item() == 0.5
