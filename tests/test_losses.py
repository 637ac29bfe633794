import pytest
import torch
from torch import nn

from rl_lightning.losses import (
    compute_importance_weights,
    compute_logprobs,
    compute_reinforce_loss,
    compute_returns,
    compute_td_loss,
    compute_td_target,
    normalize_returns,
)


def test_compute_returns_seed_example():
    rewards = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 1.0]])
    dones = torch.tensor([[False, False, True], [True, False, False]])
    expected = torch.tensor([[1 + 0.9 + 0.81, 1 + 0.9, 1.0], [1.0, 0.9, 1.0]])
    torch.testing.assert_close(compute_returns(rewards, dones, 0.9), expected)


def test_compute_returns_never_cross_a_done():
    g = 0.5
    rewards = torch.tensor([[0.0, 0.0, 1.0, 0.0, 1.0]])
    dones = torch.tensor([[False, False, True, False, True]])
    expected = torch.tensor([[g**2, g, 1.0, g, 1.0]])
    torch.testing.assert_close(compute_returns(rewards, dones, g), expected)


def test_compute_returns_matches_a_python_loop():
    generator = torch.Generator().manual_seed(3)
    rewards = torch.rand(5, 40, generator=generator)
    dones = torch.rand(5, 40, generator=generator) < 0.1
    expected = torch.zeros_like(rewards)
    for env in range(5):
        running = 0.0
        for t in reversed(range(40)):
            running = rewards[env, t].item() + (0.0 if dones[env, t] else 0.97 * running)
            expected[env, t] = running
    torch.testing.assert_close(compute_returns(rewards, dones, 0.97), expected)


def test_compute_returns_is_float32_for_bf16_rewards():
    rewards = torch.ones(2, 300, dtype=torch.bfloat16)
    returns = compute_returns(rewards, torch.zeros(2, 300, dtype=torch.bool), 1.0)
    assert returns.dtype == torch.float32
    assert returns[0, 0].item() == 300.0  # bf16 cannot represent 299 + 1 exactly


def test_compute_returns_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="rewards and dones"):
        compute_returns(torch.ones(2, 3), torch.zeros(2, 4, dtype=torch.bool), 0.9)


def test_normalize_returns_zero_mean_unit_std():
    returns = torch.tensor([[1.0, 2.0], [3.0, 10.0]])
    normalized = normalize_returns(returns)
    assert abs(normalized.mean().item()) < 1e-6
    assert abs(normalized.std().item() - 1.0) < 1e-6
    torch.testing.assert_close(normalized, (returns - 4.0) / returns.std())


def test_compute_logprobs_picks_the_taken_actions():
    policy = nn.Linear(1, 3, bias=False)
    with torch.no_grad():
        policy.weight.copy_(torch.tensor([[0.0], [1.0], [2.0]]))
    obs = torch.tensor([[[1.0], [0.0]]])  # (1 env, 2 steps, 1)
    actions = torch.tensor([[2, 0]])
    logprobs = compute_logprobs(obs, actions, policy)
    log_z = torch.logsumexp(torch.tensor([0.0, 1.0, 2.0]), 0)
    expected = torch.tensor([[2.0 - log_z, -torch.log(torch.tensor(3.0))]])
    torch.testing.assert_close(logprobs, expected)
    assert logprobs.requires_grad


def test_importance_weights_are_detached_and_clamped():
    new = torch.tensor([0.0, -1.0, 1.0], requires_grad=True)
    old = torch.zeros(3)
    weights = compute_importance_weights(new, old, clip_coef=None)
    torch.testing.assert_close(weights, torch.exp(torch.tensor([0.0, -1.0, 1.0])))
    assert not weights.requires_grad
    clipped = compute_importance_weights(new, old, clip_coef=0.2)
    torch.testing.assert_close(clipped, torch.tensor([1.0, 0.8, 1.2]))


def test_reinforce_loss_uses_per_timestep_baseline_across_envs():
    returns = torch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    logprobs = torch.tensor([[0.1, 0.2], [0.3, 0.4]], requires_grad=True)
    # baseline per t = [2, 3] -> advantages [[-1, -1], [1, 1]]
    objective = compute_reinforce_loss(returns, logprobs, torch.ones(2, 2))
    torch.testing.assert_close(objective, torch.tensor((-0.1 - 0.2 + 0.3 + 0.4) / 4))
    objective.backward()
    assert returns.grad is None  # the advantage carries no gradient
    torch.testing.assert_close(logprobs.grad, torch.tensor([[-0.25, -0.25], [0.25, 0.25]]))


def test_reinforce_loss_multiplies_importance_weights():
    returns = torch.tensor([[0.0], [2.0]])
    logprobs = torch.tensor([[1.0], [1.0]])
    weights = torch.tensor([[2.0], [3.0]])
    # advantages [-1, 1] -> mean(2 * 1 * -1, 3 * 1 * 1) = 0.5
    assert compute_reinforce_loss(returns, logprobs, weights).item() == pytest.approx(0.5)


def test_td_target_bootstraps_unless_terminated():
    rewards = torch.tensor([1.0, 1.0, 0.0])
    terminated = torch.tensor([False, True, False])
    next_q = torch.tensor([2.0, 3.0, 4.0])
    torch.testing.assert_close(compute_td_target(rewards, terminated, next_q, 0.9), torch.tensor([2.8, 1.0, 3.6]))


def test_td_loss_mse_and_huber():
    q = torch.tensor([0.0, 0.0])
    target = torch.tensor([1.0, 3.0])
    assert compute_td_loss(q, target, "mse").item() == pytest.approx((1 + 9) / 2)
    assert compute_td_loss(q, target, "huber").item() == pytest.approx((0.5 + 2.5) / 2)
    with pytest.raises(ValueError, match="loss must be"):
        compute_td_loss(q, target, "l1")
