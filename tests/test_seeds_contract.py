"""The seeds' API is a contract: every class and function the design documents in ``shared/seeds/`` define and
test, called as the seeds call it and checked with the seeds' numbers.

The seeds' code lives on under today's names: ``Rollout``/``RolloutTensors`` in ``rl_lightning.data.rollout``;
``ReplayBuffer``/``ReplayBufferSamples`` in ``rl_lightning.data.replay``; ``QNetwork``/``PolicyNetwork`` in
``rl_lightning.nets``; the VPG losses (and ``compute_gae``, the GAE of the seeds' numpy ``rollout.py``) in
``rl_lightning.losses``; ``CartPole`` and the probes behind ``make_envs``; ``VPGArgs`` is ``VPGModule``'s
hyper-parameters, ``VPGAgent.get_actions`` is ``PolicyNetwork.sample``, ``VPGAgent.gen_rollout`` is
``RolloutSource``, ``VPGTrainer.compute_loss`` is ``vpg_loss``. Where today's API extends the seeds' (e.g.
``terminated``/``truncated`` beside ``dones``), the seeds' calls below keep working unchanged.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from rl_lightning import CartPole, PolicyNetwork, QNetwork, VPGModule, make_envs
from rl_lightning.algos.vpg import vpg_loss
from rl_lightning.callbacks.epsilon import EpsilonDecay
from rl_lightning.callbacks.schedule import linear_schedule
from rl_lightning.data.replay import ReplayBuffer, ReplayBufferSamples, epsilon_greedy
from rl_lightning.data.rollout import Rollout, RolloutTensors, first_episode_stats
from rl_lightning.losses import (
    compute_gae,
    compute_importance_weights,
    compute_logprobs,
    compute_reinforce_loss,
    compute_returns,
    normalize_returns,
)

# -- Rollout and RolloutTensors (the VPG page, "2. Rollouts") -------------------------------------------------


def _seed_rollout(num_envs: int = 6, max_steps: int = 3) -> Rollout:
    """A full rollout added with the seeds' positional call; obs[env, t] = env + 10 t, done at t = 1."""
    rollout = Rollout(max_steps=max_steps)
    for t in range(max_steps):
        rollout.add_step(
            torch.arange(num_envs, dtype=torch.float32).unsqueeze(1).expand(num_envs, 4) + 10 * t,
            torch.full((num_envs,), t % 2, dtype=torch.long),
            torch.full((num_envs,), -0.5 * t),
            torch.ones(num_envs, dtype=torch.int64),  # the seeds' get() returns float rewards whatever was added
            torch.full((num_envs,), t == 1),
        )
    return rollout


def test_rollout_as_the_seeds_call_it():
    rollout = Rollout(max_steps=3)
    assert rollout.MAX_SIZE == 3 and rollout.timestep == 0
    rollout = _seed_rollout(num_envs=6, max_steps=3)
    assert rollout.timestep == 3
    with pytest.raises(ValueError, match="full"):
        rollout.add_step(torch.zeros(6, 4), torch.zeros(6), torch.zeros(6), torch.zeros(6), torch.zeros(6).bool())
    tau = rollout.get()
    assert isinstance(tau, RolloutTensors)
    assert tau.obs.shape == (6, 3, 4)
    assert tau.actions.shape == tau.logprobs.shape == tau.rewards.shape == tau.dones.shape == (6, 3)
    assert tau.rewards.dtype == torch.float32 and tau.dones.dtype == torch.bool
    assert tau.obs[2, :, 0].tolist() == [2.0, 12.0, 22.0]
    assert tau.actions[0].tolist() == [0, 1, 0] and tau.logprobs[0].tolist() == [0.0, -0.5, -1.0]
    assert tau.rewards.sum().item() == 18.0
    assert tau.dones[0].tolist() == [False, True, False] and tau.dones.sum().item() == 6
    rollout.reset()
    assert rollout.timestep == 0


def test_add_step_takes_the_seeds_dones_keyword():
    rollout = Rollout(max_steps=2)
    for t in range(2):
        rollout.add_step(
            obs=torch.zeros(3, 4),
            actions=torch.zeros(3, dtype=torch.long),
            logprobs=torch.zeros(3),
            rewards=torch.ones(3),
            dones=torch.tensor([t == 0, False, t == 1]),
        )
    assert rollout.get().dones.tolist() == [[True, False], [False, False], [False, True]]
    with pytest.raises(TypeError, match="not both"):
        rollout.add_step(
            torch.zeros(3, 4),
            torch.zeros(3),
            torch.zeros(3),
            torch.zeros(3),
            torch.zeros(3).bool(),
            dones=torch.zeros(3),
        )


def test_get_batches_splits_whole_trajectories_along_envs():
    """The seeds' get_batches: ``t.split`` of every field along the envs, batch_size trajectories each."""
    batches = _seed_rollout(num_envs=6, max_steps=3).get_batches(2)
    assert len(batches) == 3
    for i, batch in enumerate(batches):
        assert isinstance(batch, RolloutTensors)
        assert batch.obs.shape == (2, 3, 4) and batch.dones.shape == (2, 3)
        torch.testing.assert_close(batch.obs[:, 0, 0], torch.tensor([2.0 * i, 2.0 * i + 1]))
        torch.testing.assert_close(batch.obs[0, :, 0], torch.tensor([2.0 * i, 2 * i + 10, 2 * i + 20]))
        assert batch.dones.tolist() == [[False, True, False]] * 2
    # as t.split cuts: the last batch holds the remainder; batch_size >= num_envs is the whole rollout
    assert [batch.obs.shape[0] for batch in _seed_rollout(num_envs=6).get_batches(4)] == [4, 2]
    (whole,) = _seed_rollout(num_envs=6).get_batches(32)
    assert torch.equal(whole.obs, _seed_rollout(num_envs=6).get().obs)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="batch_size"):
            _seed_rollout().get_batches(bad)


def test_rollout_tensors_built_with_the_seeds_five_fields():
    obs, actions, logprobs, rewards = torch.zeros(2, 3, 4), torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 3)
    dones = torch.tensor([[False, True, False], [False, False, True]])
    for tau in (
        RolloutTensors(obs, actions, logprobs, rewards, dones),
        RolloutTensors(obs=obs, actions=actions, logprobs=logprobs, rewards=rewards, dones=dones),
    ):
        assert torch.equal(tau.dones, dones) and not tau.truncated.any()
        assert tau.obs is obs and tau.actions is actions and tau.logprobs is logprobs and tau.rewards is rewards
    with pytest.raises(TypeError, match="not both"):
        RolloutTensors(obs, actions, logprobs, rewards, dones, dones=dones)


def test_the_seeds_first_episode_return():
    """The seeds' training loop: each env's undiscounted return up to and including its first done."""
    rewards = torch.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]])
    dones = torch.tensor([[False, True, False, True], [False, False, False, False]])
    first_episode = (dones.int().cumsum(dim=1) - dones.int()) == 0
    assert (rewards * first_episode).sum(dim=1).tolist() == [3.0, 26.0]
    assert first_episode_stats(rewards, dones).returns.tolist() == [3.0, 26.0]


# -- VPGAgent: get_actions and gen_rollout ----------------------------------------------------------------------


def test_get_actions_samples_the_softmax_and_returns_the_taken_logprobs():
    """The seeds' get_actions (``t.multinomial`` on the softmax, the taken action's log-prob) is
    ``PolicyNetwork.sample``."""
    policy = PolicyNetwork((4,), 2)
    with torch.no_grad():
        policy.head.weight.zero_()
        policy.head.bias.copy_(torch.log(torch.tensor([0.2, 0.8])))
    obs = torch.randn(40_000, 4, generator=torch.Generator().manual_seed(0))
    actions, logprobs = policy.sample(obs, torch.Generator().manual_seed(1))
    assert actions.shape == logprobs.shape == (40_000,) and actions.dtype == torch.int64
    expected = F.log_softmax(policy(obs), dim=-1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(logprobs, expected)
    frequency = actions.float().mean().item()
    assert abs(frequency - 0.8) < 5 * math.sqrt(0.8 * 0.2 / 40_000)


def _gen_rollout(envs, policy_network: nn.Module, rollout: Rollout, num_steps: int, generator) -> Rollout:
    """The seeds' ``VPGAgent.gen_rollout``, with ``get_actions`` as ``PolicyNetwork.sample``."""
    obs, _ = envs.reset()
    rollout.reset()
    with torch.no_grad():
        for _ in range(num_steps):
            actions, logprobs = policy_network.sample(obs, generator)
            new_obs, rewards, terminates, truncates, _info = envs.step(actions)
            done = terminates | truncates
            rollout.add_step(obs, actions, logprobs, rewards, done)
            obs = new_obs
    return rollout


def test_gen_rollout_on_cartpole_records_what_the_policy_did():
    envs = make_envs("CartPole-v1", 4, 0, "cpu")
    policy = PolicyNetwork(envs.single_observation_space.shape, envs.single_action_space.n)
    rollout = _gen_rollout(envs, policy, Rollout(max_steps=40), 40, torch.Generator().manual_seed(0))
    tau = rollout.get()
    assert rollout.timestep == 40 and tau.obs.shape == (4, 40, 4) and tau.actions.shape == (4, 40)
    assert tau.obs[:, 0].abs().max().item() <= 0.05  # every env starts from a reset state
    assert torch.equal(tau.rewards, torch.ones(4, 40))  # CartPole: +1 on every step
    assert tau.dones.any()  # a random policy drops the pole within 40 steps
    # the recorded log-probs are the acting policy's: recomputed with the same weights, every weight is 1
    iw = compute_importance_weights(compute_logprobs(tau, policy), tau, clip_coef=None)
    torch.testing.assert_close(iw, torch.ones(4, 40))


# -- The losses (the VPG page, "3. Loss") ---------------------------------------------------------------------


def test_compute_returns_the_seeds_example_and_default_gamma():
    """Rewards [0, 0, 1, 0, 1], Done [0, 0, 1, 0, 1] -> Returns [g^2, g, 1, g, 1]; gamma defaults to 0.9."""
    rewards = torch.tensor([[0.0, 0.0, 1.0, 0.0, 1.0]])
    done = torch.tensor([[False, False, True, False, True]])
    torch.testing.assert_close(compute_returns(rewards, done), torch.tensor([[0.81, 0.9, 1.0, 0.9, 1.0]]))
    with pytest.warns(DeprecationWarning, match="dones"):  # the seeds' keyword, kept
        returns = compute_returns(rewards, done=done, gamma=0.5)
    torch.testing.assert_close(returns, torch.tensor([[0.25, 0.5, 1.0, 0.5, 1.0]]))


def test_compute_logprobs_takes_the_seeds_tau_and_pi():
    generator = torch.Generator().manual_seed(0)
    policy = PolicyNetwork((4,), 3)
    obs = torch.randn(2, 5, 4, generator=generator)
    actions = torch.randint(0, 3, (2, 5), generator=generator)
    tau = RolloutTensors(obs, actions, torch.zeros(2, 5), torch.zeros(2, 5), torch.zeros(2, 5, dtype=torch.bool))
    expected = F.log_softmax(policy(obs), dim=-1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    seeds = compute_logprobs(tau, policy)
    assert seeds.shape == (2, 5) and seeds.requires_grad
    torch.testing.assert_close(seeds, expected)
    torch.testing.assert_close(compute_logprobs(obs, actions, policy), expected)  # today's call
    logits_only = nn.Sequential(*policy.layers)  # a bare logits network, as the seeds' PolicyNetwork
    torch.testing.assert_close(compute_logprobs(tau, logits_only), expected)
    with pytest.warns(DeprecationWarning):
        torch.testing.assert_close(compute_logprobs(tau=tau, pi=policy), expected)


def test_compute_importance_weights_the_seeds_call():
    old = torch.log(torch.tensor([[0.5, 0.25, 0.2]]))
    tau = RolloutTensors(torch.zeros(1, 3, 1), torch.zeros(1, 3), old, torch.zeros(1, 3), torch.zeros(1, 3).bool())
    logprobs_taken = torch.log(torch.tensor([[0.5, 0.5, 0.1]])).requires_grad_()
    iw = compute_importance_weights(logprobs_taken, tau, None)
    torch.testing.assert_close(iw, torch.tensor([[1.0, 2.0, 0.5]]))
    assert not iw.requires_grad  # no gradient through the weights
    torch.testing.assert_close(compute_importance_weights(logprobs_taken, tau, 0.2), torch.tensor([[1.0, 1.2, 0.8]]))
    torch.testing.assert_close(compute_importance_weights(logprobs_taken, old, 0.2), torch.tensor([[1.0, 1.2, 0.8]]))


def test_normalize_returns_zero_mean_unit_variance():
    returns = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 9.0]])
    normalized = normalize_returns(returns)
    assert abs(normalized.mean().item()) < 1e-6 and abs(normalized.std().item() - 1.0) < 1e-6


def test_compute_reinforce_loss_by_hand():
    """mean(iw * logprob * (G - mean over envs of G)), the advantage detached."""
    returns = torch.tensor([[1.0, 4.0], [3.0, 0.0]])  # per-timestep baseline [2, 2]: advantages [[-1, 2], [1, -2]]
    logprobs_taken = torch.tensor([[-1.0, -0.5], [-2.0, -0.25]], requires_grad=True)
    iw = torch.tensor([[1.0, 2.0], [1.0, 1.0]])
    joy = compute_reinforce_loss(returns, logprobs_taken, iw)
    torch.testing.assert_close(joy, torch.tensor((1.0 - 2.0 - 2.0 + 0.5) / 4))
    joy.backward()
    torch.testing.assert_close(logprobs_taken.grad, torch.tensor([[-1.0, 4.0], [1.0, -2.0]]) / 4)


def test_the_seeds_compute_loss_is_vpg_loss():
    """``VPGTrainer.compute_loss`` (returns, normalise, logprobs, iw, the objective J, ascended) is ``-vpg_loss``."""
    generator = torch.Generator().manual_seed(0)
    policy = PolicyNetwork((4,), 2)
    obs = torch.randn(4, 6, 4, generator=generator)
    actions = torch.randint(0, 2, (4, 6), generator=generator)
    tau = RolloutTensors(
        obs, actions, torch.full((4, 6), -0.6), torch.rand(4, 6, generator=generator), torch.rand(4, 6) < 0.3
    )
    for normalize, use_iw, clip_coef in [(True, False, None), (False, True, 0.2)]:
        returns = compute_returns(tau.rewards, tau.dones, 0.99)
        if normalize:
            returns = normalize_returns(returns)
        logprobs_taken = compute_logprobs(tau, policy)
        iw = compute_importance_weights(logprobs_taken, tau, clip_coef) if use_iw else torch.ones_like(logprobs_taken)
        joy = compute_reinforce_loss(returns, logprobs_taken, iw)
        loss, _ = vpg_loss(policy, tau, compute_returns(tau.rewards, tau.dones, 0.99), normalize, use_iw, clip_coef)
        torch.testing.assert_close(loss, -joy)


def test_compute_gae_is_the_seeds_rollout_advantages():
    """The seeds' numpy ``rollout.py`` ``Rollout.advantages`` (values and dones one step longer, every end
    terminal), verbatim on its ``[num_steps x batch]`` layout, against ``compute_gae``."""
    generator = torch.Generator().manual_seed(0)
    rews, values = torch.randn(12, 5, generator=generator), torch.randn(13, 5, generator=generator)
    dones = (torch.rand(13, 5, generator=generator) < 0.25).float()
    gamma, lam = 0.97, 0.9
    result, current = torch.zeros(12, 5), torch.zeros(5)
    for t in range(11, -1, -1):
        delta = rews[t] - values[t]
        delta += (1 - dones[t + 1]) * gamma * values[t + 1]
        current *= gamma * lam
        current += delta
        result[t] = current
        current *= 1 - dones[t]
    ends = dones.T[:, 1:].bool()
    ours = compute_gae(rews.T, values.T[:, :-1], values.T[:, 1:], ends, torch.zeros_like(ends), gamma, lam)
    torch.testing.assert_close(ours, result.T, rtol=1e-5, atol=1e-5)


# -- VPGArgs, the probes and the seeds' probe test --------------------------------------------------------------


def test_the_seeds_vpg_args_are_vpg_module_hyperparameters():
    """``args_fast``, the seeds' CartPole setting, under the seeds' names (three renamed, with a warning)."""
    with pytest.warns(DeprecationWarning):
        module = VPGModule(
            env_id="CartPole-v1",
            seed=1337,
            num_envs=32,
            num_batches_per_rollout=1,
            num_steps_per_rollout=500,
            rollout_use_count=1,
            normalize_returns=True,
            lr=2e-2,
            use_lr_decay=False,
            use_iw=False,
            clip_coef=0.2,
            gamma=0.99,
            full_reset=True,
        )
    hp = module.hparams
    assert (hp.num_envs, hp.num_steps_per_rollout, hp.lr, hp.gamma, hp.seed) == (32, 500, 2e-2, 0.99, 1337)
    assert (hp.anneal_lr, hp.importance_weighting, hp.iw_clip, hp.normalize_returns) == (False, False, 0.2, True)
    # the seeds' VPGArgs leave lr_end / lr_frac None: today's defaults (0 and 1)
    with pytest.warns(DeprecationWarning):
        seeded = VPGModule(use_lr_decay=False, lr_end=None, lr_frac=None)
    assert (seeded.hparams.lr_end, seeded.hparams.lr_frac) == (0.0, 1.0)
    # the seeds' args_fast is today's default
    defaults = VPGModule().hparams
    assert (defaults.num_envs, defaults.num_steps_per_rollout, defaults.lr, defaults.gamma) == (32, 500, 2e-2, 0.99)


@pytest.mark.parametrize(
    ("probe", "num_actions", "obs", "reward_of"),
    [
        (1, 1, [[0.0]], lambda obs, actions: torch.ones(len(actions))),
        (2, 1, [[-1.0], [1.0]], lambda obs, actions: obs[:, 0]),
        (3, 1, [[0.0], [1.0]], None),  # 0 then +1 over a two-step episode (tests/envs/test_probes.py)
        (4, 2, [[0.0]], lambda obs, actions: actions.float() * 2 - 1),
        (5, 2, [[0.0], [1.0]], lambda obs, actions: torch.where(actions == obs[:, 0].long(), 1.0, -1.0)),
    ],
)
def test_the_probes_by_the_seeds_env_ids(probe, num_actions, obs, reward_of):
    envs = make_envs(f"Probe{probe}-v0", 64, 0, "cpu")
    first, _ = envs.reset()
    assert first.shape == (64, 1) and envs.single_action_space.n == num_actions
    assert {value for value in first[:, 0].tolist()} <= {row[0] for row in obs}  # the seeds' probe observations
    actions = torch.arange(64) % num_actions
    _, rewards, terminated, truncated, _ = envs.step(actions)
    if reward_of is not None:
        torch.testing.assert_close(rewards, reward_of(first, actions).float())
        assert terminated.all() and not truncated.any()  # one-step episodes, ended by termination


@pytest.mark.parametrize(("probe", "total_timesteps"), [(4, 2500), (5, 5000)])
def test_the_seeds_probe_test_with_the_seeds_pieces(probe, total_timesteps):
    """The seeds' ``test_probe``: their VPG loop (gen_rollout, get_batches, compute_loss, Adam maximising) with
    their settings, built from today's pieces; the action probabilities within the seeds' 2e-3."""
    torch.manual_seed(0)
    num_envs, num_steps, gamma = 4, 16, 1.0
    envs = make_envs(f"Probe{probe}-v0", num_envs, 0, "cpu")
    policy = PolicyNetwork(envs.single_observation_space.shape, envs.single_action_space.n)
    optimizer = torch.optim.Adam(policy.parameters(), lr=5e-3, eps=1e-5, maximize=True)
    rollout, generator = Rollout(max_steps=num_steps), torch.Generator().manual_seed(0)
    for _ in range(total_timesteps // (num_steps * num_envs)):
        rollout = _gen_rollout(envs, policy, rollout, num_steps, generator)
        for tau in rollout.get_batches(num_envs):  # batch_size = num_envs // num_batches_per_rollout
            returns = compute_returns(tau.rewards, tau.dones, gamma)  # normalize_returns=False
            logprobs_taken = compute_logprobs(tau, policy)
            joy = compute_reinforce_loss(returns, logprobs_taken, torch.ones_like(logprobs_taken))
            joy.backward()
            optimizer.step()
            optimizer.zero_grad()
    obs = torch.tensor([[[0.0]], [[0.0], [1.0]]][probe - 4])
    expected_probs = torch.tensor([[[0.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]]][probe - 4])
    with torch.inference_mode():
        probs = policy(obs).softmax(-1)
    torch.testing.assert_close(probs, expected_probs, atol=2e-3, rtol=0)


# -- The DQN page: QNetwork, CartPole, the replay buffer, epsilon-greedy --------------------------------------


def test_the_seeds_q_network():
    """Verbatim: ``layers`` is an nn.Sequential, Linear-ReLU-Linear-ReLU-Linear, 10,934 parameters."""
    net = QNetwork(obs_shape=(4,), num_actions=2)
    n_params = sum(p.nelement() for p in net.parameters())
    assert isinstance(getattr(net, "layers", None), nn.Sequential)
    assert not isinstance(net.layers[-1], nn.ReLU)
    assert n_params == 10934
    assert [type(layer) for layer in net.layers] == [nn.Linear, nn.ReLU, nn.Linear, nn.ReLU, nn.Linear]
    assert net(torch.zeros(7, 4)).shape == (7, 2)
    small = QNetwork((3,), 5, hidden_sizes=[16])  # the seeds' list argument
    assert sum(p.nelement() for p in small.parameters()) == (3 * 16 + 16) + (16 * 5 + 5)
    assert isinstance(PolicyNetwork((4,), 2).layers, nn.Sequential)  # the same contract for the policy


def test_the_seeds_cartpole():
    envs = CartPole(num_envs=4, device="cpu")
    assert envs.single_action_space.n == 2 and envs.single_observation_space.shape == (4,)
    high = envs.single_observation_space.high
    torch.testing.assert_close(torch.tensor(high[[0, 2]]), torch.tensor([4.8, 0.41887903]))
    assert (high[[1, 3]] >= 3.4028235e38).all()  # unbounded velocities
    obs, _infos = envs.reset()
    assert obs.shape == (4, 4) and obs.device.type == "cpu"


def _seed_replay_loop(num_steps: int = 256) -> ReplayBuffer:
    """The seeds' replay-buffer cell: random actions on CartPole(num_envs=1), true next obs from final_observation."""
    buffer = ReplayBuffer(num_envs=1, obs_shape=(4,), action_shape=(), buffer_size=256, seed=0, device="cpu")
    envs = CartPole(num_envs=1, seed=0, device="cpu")
    obs, infos = envs.reset()
    generator = torch.Generator().manual_seed(0)
    for _ in range(num_steps):
        actions = torch.randint(0, envs.single_action_space.n, (envs.num_envs,), generator=generator)
        next_obs, rewards, terminated, truncated, infos = envs.step(actions)
        done = terminated | truncated
        true_next_obs = next_obs.clone()
        true_next_obs[done] = infos["final_observation"][done]
        buffer.add(obs, actions, rewards, terminated, true_next_obs)
        obs = next_obs
    return buffer


def test_the_seeds_replay_buffer_loop():
    buffer = _seed_replay_loop(256)
    obs, next_obs, terminated = buffer.obs, buffer.next_obs, buffer.terminated
    assert len(buffer) == 256 and obs.shape == next_obs.shape == (256, 4) and terminated.shape == (256,)
    assert 5 <= terminated.sum().item() <= 40  # random CartPole episodes last ~10-40 steps
    # s_{t+1} = s'_t inside an episode; where d_{t+1}, s'_t is terminal and s_{t+1} a fresh reset state
    inside = ~terminated[:-1]
    torch.testing.assert_close(obs[1:][inside], next_obs[:-1][inside])
    ends = terminated.nonzero().squeeze(1)
    ends = ends[ends < 255]
    final = next_obs[ends]
    assert ((final[:, 0].abs() > 2.4) | (final[:, 2].abs() > 12 * 2 * math.pi / 360)).all()
    assert obs[ends + 1].abs().max().item() <= 0.05
    sample = buffer.sample(256)
    assert isinstance(sample, ReplayBufferSamples)
    assert sample.obs.shape == sample.next_obs.shape == (256, 4)
    assert sample.actions.shape == sample.rewards.shape == sample.terminated.shape == (256,)
    dtypes = [sample.obs.dtype, sample.actions.dtype, sample.rewards.dtype, sample.terminated.dtype]
    assert dtypes == [torch.float32, torch.int64, torch.float32, torch.bool]
    # every sample is one stored transition, its fields kept together
    rows = (sample.obs.unsqueeze(1) == obs.unsqueeze(0)).all(-1).float().argmax(1)
    assert torch.equal(sample.obs, obs[rows]) and torch.equal(sample.next_obs, next_obs[rows])
    assert torch.equal(sample.terminated, terminated[rows]) and torch.equal(sample.actions, buffer.actions[rows])


def test_the_seeds_replay_buffer_keeps_the_newest_and_checks_what_is_added():
    buffer = ReplayBuffer(num_envs=2, obs_shape=(1,), action_shape=(), buffer_size=4, seed=0, device="cpu")
    for step in range(3):  # six transitions into four slots: the two oldest are dropped
        values = torch.tensor([[2.0 * step], [2.0 * step + 1]])
        buffer.add(values, torch.zeros(2, dtype=torch.int64), torch.ones(2), torch.zeros(2, dtype=torch.bool), values)
    assert len(buffer) == 4 and sorted(buffer.obs[:, 0].tolist()) == [2.0, 3.0, 4.0, 5.0]
    assert set(buffer.sample(64).obs[:, 0].tolist()) <= {2.0, 3.0, 4.0, 5.0}
    assert buffer.rng is buffer.generator  # the seeds' name of the sampling generator
    good = (
        torch.zeros(2, 1),
        torch.zeros(2, dtype=torch.int64),
        torch.zeros(2),
        torch.zeros(2).bool(),
        torch.zeros(2, 1),
    )
    for index, bad in [(1, torch.zeros(2)), (2, torch.zeros(2, dtype=torch.int64)), (3, torch.zeros(3).bool())]:
        with pytest.raises((TypeError, ValueError)):  # t.cat would silently promote dtypes: refused
            buffer.add(*good[:index], bad, *good[index + 1 :])
    samples = ReplayBufferSamples(
        obs=torch.zeros(1, 4),
        actions=torch.zeros(1),
        rewards=torch.ones(1),
        terminated=torch.ones(1).bool(),
        next_obs=1,
    )
    assert samples.rewards.item() == 1.0 and samples.terminated.item() and samples.next_obs == 1


def test_epsilon_greedy_and_its_linear_schedule():
    """The DQN page's exploration (its code is not in the seeds' pages): argmax Q with probability 1 - epsilon,
    else a uniform action; epsilon linear from start to end over the first fraction of the run."""
    q_values = torch.tensor([[0.0, 1.0, 0.5]]).expand(30_000, 3)
    assert epsilon_greedy(q_values, 0.0).eq(1).all()
    actions = epsilon_greedy(q_values, 0.3, torch.Generator().manual_seed(0))
    frequencies = torch.bincount(actions, minlength=3).float() / 30_000
    expected = torch.tensor([0.1, 0.8, 0.1])
    assert ((frequencies - expected).abs() < 5 * (expected * (1 - expected) / 30_000).sqrt()).all()
    assert [linear_schedule(1.0, 0.05, 0.5, p) for p in (0.0, 0.25, 0.5, 1.0)] == pytest.approx(
        [1.0, 0.525, 0.05, 0.05]
    )
    decay = EpsilonDecay(start=1.0, end=0.1, fraction=0.5, total_env_steps=1000)
    assert [decay.value(steps) for steps in (0, 250, 500, 900)] == pytest.approx([1.0, 0.55, 0.1, 0.1])
