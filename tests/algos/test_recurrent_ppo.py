"""Recurrent PPO: the rollout keeps the recurrent state (the seeds' ``states``), training replays
whole sequences from it, and memory is what solves a partially observed task."""

import lightning as L
import pytest
import torch

from rl_lightning import PPOModule
from rl_lightning.callbacks import evaluate_policy
from rl_lightning.data.actor_critic import RecurrentActorCriticSource, RecurrentPPOBatch
from rl_lightning.envs import make_envs
from rl_lightning.nets import RecurrentActorCritic

MEMORY = dict(env_id="MemoryProbe-v0", num_envs=16, num_steps_per_rollout=20, num_minibatches=4, lr=3e-3)


def _trainer(**kwargs) -> L.Trainer:
    defaults = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    return L.Trainer(**{**defaults, **kwargs})


def test_the_rollout_carries_the_state_and_minibatches_are_whole_env_sequences_from_their_initial_state():
    envs = make_envs("MemoryProbe-v0", 8, seed=0)
    model = RecurrentActorCritic(envs.single_observation_space, envs.single_action_space, core_size=16)
    source = RecurrentActorCriticSource(envs, model, num_steps=10, num_minibatches=4, seed=0)
    batch = source.next_batch()
    assert isinstance(batch, RecurrentPPOBatch)
    assert batch.obs.shape == (2, 10, 2) and batch.actions.shape == (2, 10) and batch.states.shape == (2, 2, 16)
    collection = source.collection
    assert torch.equal(collection.initial_state, torch.zeros(2, 8, 16))  # fresh envs start from zeros
    # MemoryProbe episodes are 5 steps: the state is zeroed where the next one starts
    assert batch.episode_starts[:, [0, 5]].all() and not batch.episode_starts[:, [1, 2, 3, 4]].any()
    assert torch.equal(collection.episode_starts[:, 1:], collection.rollout.dones[:, :-1])
    # the live state is the one after the rollout's last step, carried into the next rollout: replaying the
    # sequences from the initial state with the episode starts reaches it
    with torch.no_grad():
        _, final_state = model.unroll(collection.rollout.obs, collection.initial_state, collection.episode_starts)
    torch.testing.assert_close(source.state, final_state)
    live = source.state.clone()
    source.collect()
    assert torch.equal(source.collection.initial_state, live)


def test_replayed_sequences_give_the_recorded_logprobs_at_the_first_update():
    """Training replays each env's sequence from its stored state with the collection's masking:
    before any update, the recomputed log-probabilities and values equal the recorded ones."""

    class Recording(PPOModule):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.gaps: list[float] = []

        def update_loss(self, batch):
            if self.source.collection.position == 0:
                with torch.no_grad():
                    logprobs, _, values = self.model.evaluate(
                        batch.obs, batch.actions, batch.states, batch.episode_starts
                    )
                self.gaps.append((logprobs - batch.logprobs).abs().max().item())
                self.gaps.append((values - batch.values).abs().max().item())
            return super().update_loss(batch)

    module = Recording(**{**MEMORY, "recurrent": "lstm", "seed": 3})
    _trainer(max_steps=3 * 16).fit(module)
    assert module.source.num_rollouts == 3
    assert max(module.gaps) < 1e-5, module.gaps


@pytest.mark.learning
def test_lstm_ppo_solves_the_memory_probe_and_a_feedforward_policy_stays_at_chance():
    """MemoryProbe (a cue at step 0, the answer at step 4): the LSTM policy's greedy return over
    256 episodes is 1.0 (the optimum); the feed-forward one, trained the same way, is within 0.15
    of chance (0), as it must be: it cannot see the cue when it answers."""
    results = {}
    for recurrent in ("lstm", None):
        module = PPOModule(**MEMORY, recurrent=recurrent, hidden_sizes=(32,), seed=0)
        _trainer(max_steps=400).fit(module)
        results[recurrent] = evaluate_policy(module, module.make_envs(256, 1), seed=1).returns.mean().item()
    assert results["lstm"] == 1.0, results
    assert abs(results[None]) < 0.15, results


def test_gru_trains_on_a_box_action_space():
    module = PPOModule(env_id="Pendulum-v1", num_envs=4, num_steps_per_rollout=8, recurrent="gru", num_minibatches=2)
    _trainer(max_steps=8).fit(module)
    assert module.model.num_state == 1 and module.source.state.shape == (1, 4, 64)


def test_act_takes_and_returns_the_state_and_zeroes_it_where_an_episode_starts():
    module = PPOModule(env_id="MemoryProbe-v0", recurrent="lstm", core_size=8)
    obs = torch.tensor([[1.0, 0.0], [-1.0, 0.0]])
    actions, state = module.act(obs, greedy=True)
    assert actions.shape == (2,) and state.shape == (2, 2, 8) and state.abs().sum() > 0
    _, after = module.act(torch.zeros(2, 2), state=state, episode_start=torch.tensor([True, False]))
    _, fresh = module.act(torch.zeros(2, 2))
    torch.testing.assert_close(after[:, 0], fresh[:, 0])  # env 0 started anew: as from zeros
    assert not torch.allclose(after[:, 1], fresh[:, 1])  # env 1 remembers
    with pytest.raises(ValueError, match="state must have shape"):
        module.act(obs, state=torch.zeros(2, 3, 8))


def test_a_recurrent_run_resumes_exactly_from_a_checkpoint_in_the_middle_of_a_rollout(tmp_path):
    """A checkpoint written between two updates of a rollout (a per-update hook of the training step that runs
    the rollout's 4 updates) resumes there: the resumed run finishes that rollout's updates, then goes on."""

    def fit(root, max_steps, ckpt_path=None, save_at=None):
        class SaveAt(L.Callback):
            def on_update_end(self, trainer, pl_module, loss):
                if save_at is not None and trainer.global_step == save_at:
                    trainer.save_checkpoint(root / "last.ckpt")
                    trainer.should_stop = True  # after this training step (the rollout's last 2 updates)

        module = PPOModule(**{**MEMORY, "recurrent": "lstm", "num_envs": 4, "num_minibatches": 2, "update_epochs": 2})
        trainer = L.Trainer(
            max_steps=max_steps,
            logger=False,
            enable_checkpointing=False,
            callbacks=[SaveAt()],
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        trainer.fit(module, ckpt_path=ckpt_path)
        return module

    straight = fit(tmp_path / "straight", 12)
    fit(tmp_path / "split", 12, save_at=6)  # a checkpoint at update 6: mid-rollout (4 per rollout)
    resumed = fit(tmp_path / "split", 12, ckpt_path=tmp_path / "split" / "last.ckpt")
    assert resumed.env_steps == straight.env_steps
    for a, b in zip(resumed.parameters(), straight.parameters(), strict=True):
        assert torch.equal(a, b)
    assert torch.equal(resumed.source.state, straight.source.state)


def test_a_recurrent_policy_needs_num_minibatches_to_divide_num_envs():
    with pytest.raises(ValueError, match="must divide num_envs"):
        PPOModule(num_envs=6, num_minibatches=4, num_steps_per_rollout=32, recurrent="lstm")
    with pytest.raises(ValueError, match="recurrent"):
        PPOModule(recurrent="transformer")
