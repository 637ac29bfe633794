import pytest
import torch
from torch import nn

from rl_lightning.losses import (
    compute_approx_kl,
    compute_clip_fraction,
    compute_explained_variance,
    compute_gae,
    compute_importance_weights,
    compute_logprobs,
    compute_ppo_loss,
    compute_ppo_policy_loss,
    compute_ppo_value_loss,
    compute_reinforce_loss,
    compute_returns,
    compute_td_loss,
    compute_td_target,
    normalize_advantages,
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


# -- PPO ----------------------------------------------------------------------------------------


def _seed_advantages(rews, values, dones, gamma, lam):
    """The seeds' rollout.py ``Rollout.advantages``, verbatim on its [num_steps x batch] layout."""
    import numpy as np

    num_steps, batch_size = rews.shape
    result = np.zeros([num_steps, batch_size], dtype=np.float32)
    current = np.zeros([batch_size], dtype=np.float32)
    for t in range(num_steps - 1, -1, -1):
        delta = rews[t] - values[t]
        delta += (1 - dones[t + 1]) * gamma * values[t + 1]
        current *= gamma * lam
        current += delta
        result[t] = current
        current *= 1 - dones[t]
    return result


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_compute_gae_equals_the_seeds_advantages_on_its_convention(seed):
    """The seed's layout: values and dones one step longer, dones[t] = obs t starts an episode, every
    end terminal. Ours on it: next_values = values shifted by one step, terminated = dones[:, 1:]."""
    generator = torch.Generator().manual_seed(seed)
    rewards = torch.randn(5, 12, generator=generator)
    values = torch.randn(5, 13, generator=generator)
    dones = torch.rand(5, 13, generator=generator) < 0.25
    ends = dones[:, 1:]
    ours = compute_gae(rewards, values[:, :-1], values[:, 1:], ends, torch.zeros_like(ends), gamma=0.97, lam=0.9)
    seeds = _seed_advantages(rewards.T.numpy(), values.T.numpy(), dones.T.float().numpy(), 0.97, 0.9)
    torch.testing.assert_close(ours, torch.from_numpy(seeds).T, rtol=1e-5, atol=1e-5)


def test_compute_gae_by_hand_with_a_truncation_and_a_termination():
    """One env, 4 steps, gamma 0.5, lam 1: step 1 ends an episode by truncation (bootstrap from the
    final observation's value 8, not 0 and not V(s2) = 100), step 3 by termination (bootstrap 0)."""
    rewards = torch.tensor([[1.0, 1.0, 1.0, 1.0]])
    values = torch.tensor([[2.0, 2.0, 100.0, 4.0]])
    next_values = torch.tensor([[2.0, 8.0, 4.0, 50.0]])  # V(s1), V(final obs of step 1), V(s3), unused
    terminated = torch.tensor([[False, False, False, True]])
    truncated = torch.tensor([[False, True, False, False]])
    advantages = compute_gae(rewards, values, next_values, terminated, truncated, 0.5, 1.0)
    # delta: [1 + 0.5*2 - 2, 1 + 0.5*8 - 2, 1 + 0.5*4 - 100, 1 + 0 - 4] = [0, 3, -97, -3]
    # A_3 = -3; A_2 = -97 + 0.5 * -3; A_1 = 3 (trace cut); A_0 = 0 + 0.5 * 3
    assert advantages.tolist() == [[1.5, 3.0, -98.5, -3.0]]
    # the same end as a termination (the seed's convention): delta_1 = 1 - 2 = -1
    as_terminal = compute_gae(
        rewards, values, next_values, terminated | truncated, torch.zeros_like(truncated), 0.5, 1.0
    )
    assert as_terminal.tolist() == [[-0.5, -1.0, -98.5, -3.0]]
    with pytest.raises(ValueError, match="must all be \\(num_envs, num_steps\\)"):
        compute_gae(rewards, torch.zeros(1, 5), next_values, terminated, truncated, 0.5, 1.0)


def test_compute_gae_matches_a_python_loop_with_both_flags():
    generator = torch.Generator().manual_seed(4)
    rewards, values, next_values = (torch.randn(3, 30, generator=generator) for _ in range(3))
    terminated = torch.rand(3, 30, generator=generator) < 0.1
    truncated = (torch.rand(3, 30, generator=generator) < 0.1) & ~terminated
    expected = torch.zeros(3, 30)
    for env in range(3):
        running = 0.0
        for t in reversed(range(30)):
            bootstrap = 0.0 if terminated[env, t] else next_values[env, t].item()
            delta = rewards[env, t].item() + 0.9 * bootstrap - values[env, t].item()
            done = bool(terminated[env, t] or truncated[env, t])
            running = delta + (0.0 if done else 0.9 * 0.8 * running)
            expected[env, t] = running
    ours = compute_gae(rewards, values, next_values, terminated, truncated, 0.9, 0.8)
    torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-5)


def test_ppo_policy_loss_clips_the_ratio_by_hand():
    # ratios e^0 = 1, e^0.5 = 1.65 (clipped to 1.2 for a positive advantage), e^-0.5 = 0.61 (to 0.8)
    logprobs = torch.tensor([0.0, 0.5, -0.5, -0.5])
    old = torch.zeros(4)
    advantages = torch.tensor([1.0, 1.0, 1.0, -1.0])
    ratio = torch.exp(logprobs)
    # per entry max(-A r, -A clip(r)): [-1, -1.2, -0.6065, 0.8]
    expected = torch.stack([-ratio[0], -torch.tensor(1.2), -ratio[2], torch.tensor(0.8)]).mean()
    torch.testing.assert_close(compute_ppo_policy_loss(logprobs, old, advantages, 0.2), expected)


def test_ppo_value_loss_with_and_without_clipping_by_hand():
    values, old, returns = torch.tensor([3.0, 0.0]), torch.tensor([1.0, 0.0]), torch.tensor([2.0, 1.0])
    assert compute_ppo_value_loss(values, old, returns).item() == pytest.approx(0.5 * (1 + 1) / 2)
    # clipped to old +- 0.5: [1.5, 0.0]; errors max((1, 1), (0.25, 1)) = (1, 1)
    assert compute_ppo_value_loss(values, old, returns, clip_coef=0.5).item() == pytest.approx(0.5)
    values = torch.tensor([1.2, 0.0])  # inside the clip: the same as unclipped
    assert compute_ppo_value_loss(values, old, returns, 0.5).item() == pytest.approx(0.5 * (0.64 + 1) / 2)


def test_ppo_loss_kl_clipfrac_explained_variance_and_advantage_normalisation_by_hand():
    loss = compute_ppo_loss(torch.tensor(1.0), torch.tensor(2.0), torch.tensor([0.5, 1.5]), vf_coef=0.5, ent_coef=0.1)
    assert loss.item() == pytest.approx(1.0 + 0.5 * 2.0 - 0.1 * 1.0)
    log_ratio = torch.tensor([0.1, -0.2])
    expected_kl = ((torch.exp(log_ratio) - 1) - log_ratio).mean()
    torch.testing.assert_close(compute_approx_kl(log_ratio, torch.zeros(2)), expected_kl)
    assert compute_clip_fraction(torch.tensor([0.0, 0.3, -0.3, 0.1]), torch.zeros(4), 0.2).item() == 0.5
    returns = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert compute_explained_variance(returns, returns).item() == 1.0
    assert compute_explained_variance(torch.full((4,), 2.5), returns).item() == 0.0
    normalized = normalize_advantages(torch.tensor([1.0, 2.0, 3.0]))
    torch.testing.assert_close(normalized, torch.tensor([-1.0, 0.0, 1.0]), atol=1e-6, rtol=0)


# -- n-step returns, SAC and TD3 ------------------------------------------------------------------


def test_n_step_returns_cut_at_an_episode_end_and_say_where_to_bootstrap():
    """Three chains of n = 3, gamma 0.5: no end (bootstrap after 3 steps with 0.125), an end on the
    second step (summed, the last; the caller takes that step's terminated and final obs: zero for a
    termination, V(final obs) with 0.25 for a truncation), an end on the first step."""
    from rl_lightning.losses import compute_n_step_returns

    rewards = torch.tensor([[1.0, 2.0, 4.0], [1.0, 2.0, 4.0], [8.0, 2.0, 4.0]])
    dones = torch.tensor([[False, False, False], [False, True, False], [True, False, True]])
    returns, last, discounts = compute_n_step_returns(rewards, dones, 0.5)
    torch.testing.assert_close(returns, torch.tensor([1 + 0.5 * 2 + 0.25 * 4, 1 + 0.5 * 2, 8.0]))
    assert last.tolist() == [2, 1, 0]
    torch.testing.assert_close(discounts, torch.tensor([0.125, 0.25, 0.5]))
    with pytest.raises(ValueError, match="rewards and dones"):
        compute_n_step_returns(rewards, dones[:, :2], 0.5)


def test_td_target_takes_per_sample_discounts():
    rewards, terminated = torch.tensor([1.0, 1.0]), torch.tensor([False, True])
    target = compute_td_target(rewards, terminated, torch.tensor([10.0, 10.0]), torch.tensor([0.25, 0.5]))
    torch.testing.assert_close(target, torch.tensor([1.0 + 0.25 * 10, 1.0]))


def test_sac_target_is_the_smallest_critic_minus_the_entropy_term():
    from rl_lightning.losses import compute_sac_target

    next_q = torch.tensor([[5.0, 3.0, 2.0], [4.0, 6.0, 9.0]])  # two critics, three samples
    next_logprobs = torch.tensor([-1.0, 0.5, 2.0])
    target = compute_sac_target(
        torch.tensor([1.0, 0.0, -1.0]), torch.tensor([False, False, True]), next_q, next_logprobs, 0.2, 0.9
    )
    # min Q = [4, 3, 2]; soft value = min Q - 0.2 log pi = [4.2, 2.9, 1.6]; the third is terminal
    torch.testing.assert_close(target, torch.tensor([1 + 0.9 * 4.2, 0 + 0.9 * 2.9, -1.0]))


def test_sac_actor_and_temperature_losses():
    from rl_lightning.losses import compute_sac_actor_loss, compute_sac_alpha_loss

    q = torch.tensor([[1.0, 4.0], [2.0, 3.0]])
    logprobs = torch.tensor([-1.0, 1.0], requires_grad=True)
    actor_loss = compute_sac_actor_loss(q, logprobs, 0.5)
    torch.testing.assert_close(actor_loss, torch.tensor(((0.5 * -1 - 1) + (0.5 * 1 - 3)) / 2))
    log_alpha = torch.tensor(0.3, requires_grad=True)
    alpha_loss = compute_sac_alpha_loss(log_alpha, logprobs, target_entropy=-1.0)
    torch.testing.assert_close(alpha_loss, -(0.3 * ((-1 - 1) + (1 - 1))) / 2 * torch.tensor(1.0))
    alpha_loss.backward()
    # d/dlog_alpha = -mean(logp + target_entropy) = -(-2 + 0) / 2 = 1: the entropy (1) is above -1, alpha falls
    assert log_alpha.grad.item() == pytest.approx(1.0) and logprobs.grad is None


def test_td3_target_and_target_policy_smoothing():
    from rl_lightning.losses import compute_td3_target, smooth_target_actions

    next_q = torch.tensor([[5.0, 3.0], [4.0, 6.0]])
    target = compute_td3_target(torch.tensor([1.0, 2.0]), torch.tensor([False, True]), next_q, 0.5)
    torch.testing.assert_close(target, torch.tensor([1 + 0.5 * 4, 2.0]))
    # Box [-2, 2] (half-range 2): noise clipped to +-0.5 half-ranges, the action to the bounds
    actions = smooth_target_actions(
        torch.tensor([[0.0], [1.5], [-1.9]]),
        torch.tensor([[0.3], [0.9], [-0.2]]),
        0.5,
        torch.tensor([2.0]),
        torch.tensor([-2.0]),
        torch.tensor([2.0]),
    )
    torch.testing.assert_close(actions, torch.tensor([[0.6], [2.0], [-2.0]]))


def test_ensemble_td_loss_sums_each_critics_mean_squared_error():
    from rl_lightning.losses import compute_ensemble_td_loss

    q = torch.tensor([[1.0, 2.0], [0.0, 4.0]])
    loss = compute_ensemble_td_loss(q, torch.tensor([1.0, 3.0]))
    torch.testing.assert_close(loss, torch.tensor((0 + 1) / 2 + (1 + 1) / 2))
