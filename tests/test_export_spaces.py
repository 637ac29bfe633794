"""Dict observations and action masks through export (one input per key), act and checkpoints."""

from __future__ import annotations

import io
import warnings

import gymnasium as gym
import lightning as L
import numpy as np
import pytest
import torch

from rl_lightning import DQNModule, PPOModule, VPGModule
from rl_lightning.envs import DictProbe, MaskedProbe
from rl_lightning.envs.spaces import TensorTree


def _module(cls, env_id: str, **kwargs):
    if cls is DQNModule:
        return cls(env_id=env_id, num_envs=4, learning_starts=16, batch_size=8, **kwargs)
    if cls is VPGModule:
        return cls(env_id=env_id, num_envs=4, num_steps_per_rollout=4, **kwargs)
    return cls(env_id=env_id, num_envs=4, num_steps_per_rollout=4, num_minibatches=2, **kwargs)


@pytest.mark.parametrize(
    ("cls", "probe", "recurrent"),
    [(PPOModule, DictProbe, None), (DQNModule, MaskedProbe, None), (PPOModule, MaskedProbe, "gru")],
)
def test_onnx_export_of_a_dict_policy_has_one_input_per_key_and_acts_like_act(cls, probe, recurrent, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    env_id = f"{probe.__name__}-v0"
    module = _module(cls, env_id, **({"recurrent": recurrent} if recurrent else {}))
    path = module.export_policy(tmp_path / "policy.onnx")
    session = ort.InferenceSession(str(path))
    keys = list(module.observation_space.spaces)
    names = [node.name for node in session.get_inputs()]
    assert names == keys + (["state", "episode_start"] if recurrent else [])
    obs, _ = probe(num_envs=16, seed=1).reset()
    feed = {key: obs[key].numpy() for key in keys}
    if recurrent:
        feed["state"] = np.zeros((1, 16, module.model.core_size), np.float32)
        feed["episode_start"] = np.ones(16, np.bool_)
        expected, _ = module.act(obs, greedy=True)
    else:
        expected = module.act(obs, greedy=True)
    actions = session.run(None, feed)[0]
    assert np.array_equal(actions, expected.numpy())
    if probe is MaskedProbe:  # the greedy action is legal in every row, also in the export
        assert obs["action_mask"].gather(1, torch.from_numpy(actions).unsqueeze(1)).all()


@pytest.mark.parametrize("suffix", [".pt2", ".pt"])
def test_torch_exports_of_a_dict_policy_take_the_keys_in_order(suffix, tmp_path):
    module = _module(PPOModule, "DictProbe-v0")
    path = module.export_policy(tmp_path / f"policy{suffix}")
    loaded = torch.export.load(str(path)).module() if suffix == ".pt2" else torch.jit.load(str(path))
    obs, _ = DictProbe(num_envs=8, seed=2).reset()
    actions = loaded(*(obs[key] for key in module.observation_space.spaces))
    assert torch.equal(actions, module.act(obs, greedy=True))


def test_act_takes_gymnasium_observations_and_masks():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        blackjack = PPOModule(env_id="Blackjack-v1", num_envs=4, num_minibatches=2)
    env = gym.make("Blackjack-v1")
    obs, _ = env.reset(seed=0)
    action = blackjack.act(obs, greedy=True)
    assert isinstance(action, np.integer) and env.action_space.contains(int(action))
    batch = blackjack.act((np.array([12, 20]), np.array([2, 10]), np.array([0, 1])), greedy=True)
    assert batch.shape == (2,)
    with pytest.raises(ValueError, match="must be a dict with keys"):
        blackjack.act(np.zeros(3))

    taxi = DQNModule(env_id="Taxi-v4", num_envs=2, learning_starts=8, batch_size=4)
    env = gym.make("Taxi-v4")
    state, info = env.reset(seed=0)
    mask = info["action_mask"].astype(bool)
    for _ in range(20):
        action = taxi.act(state, action_mask=mask)  # epsilon = 1: random over the legal actions
        assert mask[int(action)]
    with pytest.raises(ValueError, match=r"masks its actions: pass act\(obs, action_mask=...\)"):
        taxi.act(state)
    with pytest.raises(ValueError, match="no legal action"):
        taxi.act(state, action_mask=np.zeros(6, bool), greedy=True)
    with pytest.raises(ValueError, match="has no action masks"):
        blackjack.act(obs, action_mask=np.ones(2, bool))


def test_a_mid_rollout_checkpoint_of_dict_observations_loads_weights_only_and_continues_exactly():
    module = _module(PPOModule, "DictProbe-v0")
    trainer = L.Trainer(max_steps=3, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(module)
    source = module.source
    state = source.state_dict()
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)  # plain dicts only: what checkpoints load with
    expected = [source.next_batch() for _ in range(6)]
    restored = module.make_source(module.make_envs(4, 99))
    restored.configure_run(5, 1, 0)
    restored.load_state_dict(loaded)
    actual = [restored.next_batch() for _ in range(6)]
    for a, b in zip(actual, expected, strict=True):
        assert isinstance(a.obs, TensorTree)
        assert all(torch.equal(a.obs[key], b.obs[key]) for key in b.obs)
        assert torch.equal(a.actions, b.actions) and torch.equal(a.advantages, b.advantages)


def test_dqn_checkpoint_with_a_masked_buffer_resumes(tmp_path):
    module = _module(DQNModule, "MaskedProbe-v0")
    trainer = L.Trainer(max_steps=20, logger=False, enable_progress_bar=False, default_root_dir=tmp_path)
    trainer.fit(module)
    path = tmp_path / "last.ckpt"
    trainer.save_checkpoint(path)
    resumed = DQNModule.load_from_checkpoint(path)
    L.Trainer(max_steps=30, logger=False, enable_progress_bar=False, default_root_dir=tmp_path).fit(
        resumed, ckpt_path=path
    )
    assert resumed.source.buffer.obs["action_mask"].dtype == torch.bool
    assert resumed.source.envs.illegal_actions == 0


def test_evaluate_policy_plays_a_single_gymnasium_env_with_dict_observations_and_info_masks():
    from rl_lightning.callbacks.evaluation import evaluate_policy

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        blackjack = PPOModule(env_id="Blackjack-v1", num_envs=4, num_minibatches=2)
    result = evaluate_policy(blackjack, gym.make("Blackjack-v1"), num_episodes=20, seed=0)
    assert result.returns.shape == (20,) and set(result.returns.tolist()) <= {-1.0, 0.0, 1.0}

    class CountIllegal(gym.Wrapper):
        illegal = 0

        def reset(self, **kwargs):
            obs, info = self.env.reset(**kwargs)
            self.mask = info["action_mask"]
            return obs, info

        def step(self, action):
            CountIllegal.illegal += int(not self.mask[action])
            obs, reward, terminated, truncated, info = self.env.step(action)
            self.mask = info["action_mask"]
            return obs, reward, terminated, truncated, info

    taxi = PPOModule(env_id="Taxi-v4", num_envs=4, num_minibatches=2)
    result = evaluate_policy(taxi, CountIllegal(gym.make("Taxi-v4", max_episode_steps=30)), num_episodes=3, seed=0)
    assert (result.lengths <= 30).all() and result.lengths.sum() >= 3 and CountIllegal.illegal == 0
