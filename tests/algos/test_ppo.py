"""PPO: its data (the seeds' rollout.py), its loss terms, and that it learns."""

import lightning as L
import numpy as np
import pytest
import torch
from probe_settings import GAMMA

from rl_lightning import PPOModule
from rl_lightning.callbacks import Evaluation
from rl_lightning.data.actor_critic import ActorCriticSource, PPOBatch, shuffled_minibatches
from rl_lightning.data.normalization import ObservationNormalizer
from rl_lightning.envs import CartPole, make_envs
from rl_lightning.nets import ActorCritic


def _trainer(**kwargs) -> L.Trainer:
    defaults = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    return L.Trainer(**{**defaults, **kwargs})


def test_shuffled_minibatches_cover_every_entry_once_per_pass_like_the_seeds_batches():
    generator = torch.Generator().manual_seed(0)
    batches = shuffled_minibatches(num_entries=12, batch_size=4, count=9, generator=generator)
    assert batches.shape == (9, 4)
    for epoch in range(3):  # 3 minibatches of 4 per pass over 12 entries
        assert sorted(batches[3 * epoch : 3 * epoch + 3].flatten().tolist()) == list(range(12))
    assert not torch.equal(batches[:3], batches[3:6])  # every pass is shuffled anew
    # batches straddle passes when the size does not divide the entries (the seed's endless stream)
    uneven = shuffled_minibatches(10, 4, 5, torch.Generator().manual_seed(1)).flatten()
    assert sorted(uneven[:10].tolist()) == list(range(10)) and sorted(uneven[10:].tolist()) == list(range(10))


def _source(env_id="Probe3-v0", num_envs=4, num_steps=6, **kwargs):
    envs = make_envs(env_id, num_envs, seed=0)
    model = ActorCritic(envs.single_observation_space, envs.single_action_space, hidden_sizes=(8,))
    return ActorCriticSource(envs, model, num_steps=num_steps, update_epochs=2, num_minibatches=3, seed=0, **kwargs)


def test_the_rollout_is_per_step_with_values_next_values_and_one_meaning_of_done():
    source = _source()
    collection = source.collect()
    rollout = collection.rollout
    assert rollout.obs.shape == (4, 6, 1) and collection.advantages.shape == (4, 6)
    for field in ("actions", "logprobs", "rewards", "terminated", "truncated", "values", "next_values"):
        assert getattr(rollout, field).shape == (4, 6), field
    # Probe3: obs 0, 1, 0, 1, ... two-step episodes that terminate; dones[:, t] = step t ended one
    assert rollout.obs[0, :, 0].tolist() == [0, 1, 0, 1, 0, 1]
    assert rollout.dones[0].tolist() == [False, True, False, True, False, True]
    assert torch.equal(rollout.terminated, rollout.dones) and not rollout.truncated.any()
    with torch.no_grad():
        torch.testing.assert_close(rollout.values, source.model.value(rollout.obs))
        # inside an episode next_values is V(obs t + 1); where it ended, V of the final observation (obs 1)
        torch.testing.assert_close(rollout.next_values[:, 0], rollout.values[:, 1])
        torch.testing.assert_close(rollout.next_values[:, 1], source.model.value(torch.ones(4, 1)))
    # the next rollout continues where this one stopped: a fresh episode, obs 0
    assert source.collect().rollout.obs[:, 0, 0].eq(0).all() and source.env_steps == 2 * 4 * 6


def test_the_source_yields_update_epochs_times_num_minibatches_batches_of_every_entry():
    source = _source()
    batches = []
    for _ in range(len(source)):
        batches.append(source.next_batch())
        assert source.collection.position == len(batches) - 1
    assert len(source) == len(batches) == 6 and source.num_rollouts == 1
    assert all(isinstance(batch, PPOBatch) and batch.obs.shape == (8, 1) for batch in batches)
    rollout = source.collection.rollout
    first_pass = torch.cat([batch.logprobs for batch in batches[:3]])
    assert sorted(first_pass.tolist()) == sorted(rollout.logprobs.flatten().tolist())
    for batch in batches:
        torch.testing.assert_close(batch.returns, batch.advantages + batch.values)


def test_truncated_episodes_bootstrap_from_the_value_of_the_final_observation():
    envs = CartPole(3, seed=0, max_episode_steps=4)  # every episode is truncated after 4 steps
    model = ActorCritic(envs.single_observation_space, envs.single_action_space, hidden_sizes=(8,))
    source = ActorCriticSource(envs, model, num_steps=6, num_minibatches=1, gamma=0.9, gae_lambda=1.0, seed=0)
    collection = source.collect()
    rollout, advantages = collection.rollout, collection.advantages
    assert rollout.truncated[:, 3].all() and not rollout.terminated.any()
    ends = rollout.truncated
    # the final observations, as the envs reported them, valued by the critic: the bootstrap of a truncation
    with torch.no_grad():
        final_values = model.value(source.rollout.final_observations())
    torch.testing.assert_close(rollout.next_values[ends], final_values[ends])
    assert not torch.allclose(rollout.next_values[:, 3], rollout.values[:, 4])  # not the next episode's start
    # the trace is cut there and the bootstrap kept: A_3 = r_3 + 0.9 V(final obs) - V(s_3)
    expected_at_end = rollout.rewards[ends] + 0.9 * final_values[ends] - rollout.values[ends]
    torch.testing.assert_close(advantages[ends], expected_at_end)
    # inside an episode (lambda 1): A_t = r_t + 0.9 A_{t+1} + 0.9 V(s_{t+1}) - V(s_t)
    inside = rollout.rewards[:, 2] + 0.9 * (advantages[:, 3] + rollout.values[:, 3]) - rollout.values[:, 2]
    torch.testing.assert_close(advantages[:, 2], inside)


def test_normalised_observations_train_and_act_while_the_rollout_keeps_the_raw_ones():
    source = _source(obs_normalizer=ObservationNormalizer((1,)))
    source.obs_normalizer.stats.mean.fill_(0.5)
    source.obs_normalizer.stats.var.fill_(0.25)
    collection = source.collect()
    raw = collection.rollout.obs
    assert raw[0, :, 0].tolist() == [0, 1, 0, 1, 0, 1]  # what the envs gave
    torch.testing.assert_close(collection.training_obs, (raw - 0.5) / (0.25 + 1e-8) ** 0.5)  # what the policy saw
    with torch.no_grad():
        torch.testing.assert_close(collection.rollout.values, source.model.value(collection.training_obs))
    assert source.obs_normalizer.stats.count.item() == pytest.approx(24 + 1e-4)  # updated after the rollout
    assert torch.equal(next(iter(source)).obs.abs(), torch.ones(8, 1))  # minibatches of normalised obs


def test_recorded_logprobs_belong_to_the_weights_after_the_previous_rollouts_last_update():
    """Strictly on-policy per rollout: at the first minibatch of rollout k the current weights
    give exactly the recorded log-probabilities (ratio 1), so rollout k was collected after the
    last update of rollout k-1 and nothing was prefetched."""

    class Recording(PPOModule):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.first_minibatch_gaps: list[float] = []

        def update_loss(self, batch):
            if self.source.collection.position == 0:
                with torch.no_grad():
                    logprobs, _, _ = self.model.evaluate(batch.obs, batch.actions)
                self.first_minibatch_gaps.append((logprobs - batch.logprobs).abs().max().item())
            return super().update_loss(batch)

    module = Recording(num_envs=4, num_steps_per_rollout=16, lr=3e-2, seed=0)
    _trainer(max_steps=5 * 16).fit(module)
    assert module.source.num_rollouts == 5 and len(module.first_minibatch_gaps) == 5
    assert max(module.first_minibatch_gaps) < 1e-5, module.first_minibatch_gaps


class _CountUpdates(L.Callback):
    """Counts the updates after which the parameters changed (per-update hooks)."""

    def __init__(self):
        self.updates = 0

    def on_update_start(self, trainer, pl_module):
        self.before = torch.cat([p.detach().flatten().clone() for p in pl_module.parameters()])

    def on_update_end(self, trainer, pl_module, loss):
        after = torch.cat([p.detach().flatten() for p in pl_module.parameters()])
        self.updates += int(not torch.equal(self.before, after))


def test_target_kl_skips_the_rest_of_a_rollouts_updates():
    """16 minibatches per rollout: the first update epoch's 4 always run, then the KL (above 1e-9)
    skips the other 12, in every rollout. Skipped minibatches still count as Trainer steps, so
    max_steps keeps meaning rollouts x epochs x minibatches (CleanRL's fixed iteration count)."""
    module = PPOModule(num_envs=4, num_steps_per_rollout=16, lr=1e-2, target_kl=1e-9, anneal_lr=False, seed=0)
    counter = _CountUpdates()
    trainer = _trainer(max_epochs=3, callbacks=[counter])
    trainer.fit(module)
    assert module.source.num_rollouts == 3 and trainer.global_step == 3 * 16
    assert counter.updates == 3 * 4
    counter = _CountUpdates()
    _trainer(max_epochs=3, callbacks=[counter]).fit(PPOModule(num_envs=4, num_steps_per_rollout=16, seed=0))
    assert counter.updates == 3 * 16  # without target_kl every minibatch is an update


def test_logs_cleanrl_loss_names_and_the_shared_charts():
    module = PPOModule(env_id="Probe3-v0", num_envs=4, num_steps_per_rollout=8)
    trainer = _trainer(max_steps=32)
    trainer.fit(module)
    metrics = trainer.callback_metrics
    for name in ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", "explained_variance"):
        assert f"losses/{name}" in metrics, name
    assert metrics["charts/episodic_return"] == 1.0 and metrics["charts/episodic_length"] == 2.0
    assert set(trainer.progress_bar_metrics) == {"env_steps", "SPS", "return"}
    assert module.env_steps == 2 * 4 * 8  # 2 rollouts of 16 minibatch updates


VALUE_PROBES = [
    (1, [[0.0]], [1.0]),
    (2, [[-1.0], [1.0]], [-1.0, 1.0]),
    (3, [[0.0], [1.0]], [GAMMA, 1.0]),
]


@pytest.mark.learning
@pytest.mark.parametrize(("probe", "obs", "expected"), VALUE_PROBES)
def test_ppo_critic_learns_the_value_probes_within_1e_3(probe, obs, expected):
    module = PPOModule(env_id=f"Probe{probe}-v0", num_envs=8, num_steps_per_rollout=16, lr=5e-3, gamma=GAMMA, seed=0)
    _trainer(max_steps=400).fit(module)
    with torch.no_grad():
        values = module.model.value(torch.tensor(obs))
    torch.testing.assert_close(values, torch.tensor(expected), atol=1e-3, rtol=0)


@pytest.mark.learning
@pytest.mark.parametrize(
    ("probe", "obs", "expected"),
    [(4, [[0.0]], [[0.0, 1.0]]), (5, [[0.0], [1.0]], [[1.0, 0.0], [0.0, 1.0]])],
)
def test_ppo_policy_learns_the_policy_probes_within_2e_3(probe, obs, expected):
    module = PPOModule(env_id=f"Probe{probe}-v0", num_envs=8, num_steps_per_rollout=16, lr=5e-3, seed=0)
    _trainer(max_steps=400).fit(module)
    with torch.no_grad():
        probs = module.model.actor(torch.tensor(obs)).softmax(-1)
    torch.testing.assert_close(probs, torch.tensor(expected), atol=2e-3, rtol=0)
    assert module.act(torch.tensor(obs), greedy=True).tolist() == np.argmax(expected, axis=1).tolist()


@pytest.mark.learning
@pytest.mark.parametrize(
    ("env_id", "obs", "targets"),
    [
        ("ContinuousProbe1-v0", [[0.0]], [[0.5]]),
        ("ContinuousProbe2-v0", [[-1.0], [1.0]], [[-0.5, 0.5], [0.5, -0.5]]),
    ],
)
def test_ppo_learns_the_continuous_probes_mean_action_within_0_01(env_id, obs, targets):
    """A Gaussian policy on one-step episodes, reward -|a - target(obs)|^2: 1,200 updates at lr 1e-2
    (annealed) bring the mean within 0.01 of the target (seeds 0-5: at most 5.4e-3; 600 updates at lr
    2e-2 left up to 8.5e-3, too close to the tolerance, and 1,200 at 2e-2 diverged on two seeds)."""
    module = PPOModule(env_id=env_id, num_envs=16, num_steps_per_rollout=16, lr=1e-2, seed=0)
    _trainer(max_steps=1_200).fit(module)
    with torch.no_grad():
        mean = module.model.actor(torch.tensor(obs))
    torch.testing.assert_close(mean, torch.tensor(targets), atol=1e-2, rtol=0)
    assert module.model.actor.head.log_std.exp().max() < 0.1
    assert torch.equal(module.act(torch.tensor(obs), greedy=True), mean)  # greedy = the mean


@pytest.mark.learning
def test_ppo_solves_cartpole_greedy_mean_return_at_least_475_over_32_episodes():
    """The defaults, seed 1: a greedy mean return >= 475 over 32 evaluation episodes within
    train_ppo.py's budget of 3,200 updates (102,400 env steps, evaluated every 2,048). Seeds 1-12 got
    there at 4,600-35,300 env steps; with a budget of 40,000 (the LR annealed to 0 over it) 2 of 8 did not."""
    from lightning.pytorch.callbacks import EarlyStopping

    evaluation = Evaluation(every_n_env_steps=2048, num_eval_episodes=32)
    stop = EarlyStopping(
        monitor="eval/episodic_return",
        stopping_threshold=475,
        mode="max",
        patience=10**9,
        check_on_train_epoch_end=True,
    )
    module = PPOModule(seed=1)
    _trainer(max_steps=3_200, callbacks=[evaluation, stop]).fit(module)
    assert evaluation.last_metrics["eval/episodic_return"] >= 475, evaluation.history


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(num_minibatches=3), ValueError, "num_minibatches"),
        (dict(clip_coef=0.0), ValueError, "clip_coef"),
        (dict(target_kl=-1.0), ValueError, "target_kl"),
        (dict(activation="gelu"), ValueError, "activation"),
        (dict(norm_adv="yes"), TypeError, "norm_adv"),
        (dict(gae_lambda=1.5), ValueError, "gae_lambda"),
    ],
)
def test_bad_hyperparameters_raise(kwargs, error, match):
    with pytest.raises(error, match=match):
        PPOModule(**kwargs)


def test_anneal_lr_is_cleanrls_per_rollout_schedule_keyed_on_env_steps():
    """lr * (1 - (k - 1) / N) for every minibatch of rollout k of N."""
    seen = []

    class Spy(L.Callback):
        def on_before_optimizer_step(self, trainer, pl_module, optimizer):
            seen.append(optimizer.param_groups[0]["lr"])

    module = PPOModule(num_envs=4, num_steps_per_rollout=8, update_epochs=2, num_minibatches=2, lr=1e-3, seed=0)
    _trainer(max_epochs=4, callbacks=[Spy()]).fit(module)
    expected = [1e-3 * (1 - k / 4) for k in range(4) for _ in range(4)]
    assert seen == pytest.approx(expected)
