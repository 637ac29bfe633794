"""Dict / Tuple observations, MultiDiscrete / MultiBinary actions and action masks: the env
contract, the adapter, the heads' numbers, the buffers."""

from __future__ import annotations

import math
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_lightning.data.replay import ReplayBuffer, epsilon_greedy
from rl_lightning.data.rollout import Rollout
from rl_lightning.envs import DictProbe, MaskedProbe, MultiBinaryProbe, MultiDiscreteProbe, make_envs
from rl_lightning.envs.base import sample_legal
from rl_lightning.envs.spaces import TensorTree, as_tree, flat_parts, plain
from rl_lightning.nets import (
    BernoulliHead,
    CategoricalHead,
    MultiCategoricalHead,
    PolicyNetwork,
    masked_logits,
    sample_masked_categorical,
)


def test_tensor_tree_indexes_stacks_and_splits_like_a_tensor():
    a = TensorTree({"x": torch.arange(6.0).view(3, 2), "m": torch.tensor([True, False, True])})
    b = a.clone()
    stacked = torch.stack([a, b], dim=1)
    assert stacked["x"].shape == (3, 2, 2) and stacked["m"].shape == (3, 2)
    assert torch.equal(stacked[:, 0]["x"], a["x"])
    assert stacked.flatten(0, 1)["x"].shape == (6, 2)
    assert torch.equal(torch.cat([a, b])["m"], torch.tensor([True, False, True] * 2))
    first, second = torch.split(a, 2)
    assert first["x"].shape == (2, 2) and second["x"].shape == (1, 2)
    a[1:] = TensorTree({"x": torch.zeros(2, 2), "m": torch.zeros(2, dtype=torch.bool)})
    assert a["x"].sum() == 1.0 and a["m"].tolist() == [True, False, False]
    assert type(plain(a)) is dict and isinstance(as_tree(plain(a)), TensorTree)
    with pytest.raises(TypeError, match="not defined for a TensorTree"):
        torch.where(torch.tensor([True]), a, a)


@pytest.mark.parametrize("env_id", ["DictProbe-v0", "MaskedProbe-v0"])
def test_a_tensor_tree_answers_a_tensors_device_questions(env_id):
    """Code written for tensors asks an observation is_cuda / is_cpu / get_device() / device: a dict observation
    (a TensorTree) answers as its leaves do (tests/test_cuda.py asks it on CUDA)."""
    from rl_lightning.envs import make_envs

    envs = make_envs(env_id, 4, seed=0)
    obs, _ = envs.reset()
    _, _, _, _, info = envs.step(envs.random_actions(torch.Generator().manual_seed(0)))
    leaf = torch.zeros(1)
    for tree in (obs, info["final_observation"]):
        assert isinstance(tree, TensorTree)
        assert (tree.is_cuda, tree.is_cpu, tree.get_device(), tree.device) == (
            leaf.is_cuda,
            leaf.is_cpu,
            leaf.get_device(),
            leaf.device,
        )


def test_flat_parts_names_tuple_and_nested_parts():
    space = gym.spaces.Dict(
        {"a": gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.Box(0, 1, (2,)))), "b": gym.spaces.MultiBinary(2)}
    )
    assert list(flat_parts(space)) == ["a/0", "a/1", "b"]


def test_blackjack_tuple_observation_is_one_hot_keys():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        envs = make_envs("Blackjack-v1", 4, seed=0)
    assert envs.structured and envs.obs_shape == {"0": (32,), "1": (11,), "2": (2,)}
    obs, _ = envs.reset()
    assert isinstance(obs, TensorTree) and all(leaf.sum(dim=1).eq(1).all() for leaf in obs.values())
    single = gym.make("Blackjack-v1")
    first, _ = single.reset(seed=0)  # gymnasium's env i is seeded seed + i: env 0 starts like this one
    assert [int(obs[key][0].argmax()) for key in ("0", "1", "2")] == [int(part) for part in first]
    _, _, terminated, truncated, info = envs.step(torch.zeros(4, dtype=torch.int64))  # stick: every episode ends
    assert terminated.all() and not truncated.any()
    final = info["final_observation"]
    assert all(torch.equal(final[key], obs[key]) for key in obs)  # sticking does not change the observation


def test_taxi_masks_come_from_info_including_the_final_observation():
    envs = make_envs("Taxi-v4", 3, seed=0)
    assert envs.mask_source == "info" and envs.has_action_mask
    obs, _ = envs.reset()
    gym_envs = [gym.make("Taxi-v4") for _ in range(3)]
    for index, env in enumerate(gym_envs):
        state, info = env.reset(seed=index)
        assert int(obs["observation"][index].argmax()) == state
        assert obs["action_mask"][index].tolist() == info["action_mask"].astype(bool).tolist()
    for _ in range(250):
        actions = envs.random_actions(action_mask=obs["action_mask"])
        assert obs["action_mask"].gather(1, actions.unsqueeze(1)).all()
        obs, _, terminated, truncated, info = envs.step(actions)
        ended = terminated | truncated
        if ended.any():
            index = int(ended.nonzero()[0, 0])
            final = info["final_observation"]
            assert not torch.equal(final["observation"][index], obs["observation"][index])
            break
    else:
        pytest.fail("no Taxi episode ended in 250 steps")


def test_multi_discrete_and_multi_binary_actions_are_checked():
    envs = make_envs("MultiDiscreteProbe-v0", 4, seed=0)
    assert envs.action_kind == "multi_discrete" and envs.action_shape == (2,)
    envs.reset()
    with pytest.raises(ValueError, match=r"in \[0, \[2, 3\]\) per dimension"):
        envs.step(torch.tensor([[0, 3]] * 4))
    with pytest.raises(TypeError, match="integer dtype for a MultiDiscrete"):
        envs.step(torch.zeros(4, 2))
    actions = envs.random_actions(torch.Generator().manual_seed(0))
    assert actions.shape == (4, 2) and (actions[:, 1] <= 2).all()
    binary = make_envs("MultiBinaryProbe-v0", 4, seed=0)
    binary.reset()
    with pytest.raises(ValueError, match="per dimension"):
        binary.step(torch.full((4, 3), 2))


@pytest.mark.parametrize("probe", [DictProbe, MultiDiscreteProbe, MultiBinaryProbe, MaskedProbe])
def test_probes_pay_their_stated_optimum(probe):
    envs = probe(num_envs=64, seed=0)
    envs.reset()
    bits = envs._bits.clone()
    _, reward, terminated, _, _ = envs.step(probe.optimal_actions(bits))
    optimum = {MaskedProbe: None}.get(probe, 1.0)
    if optimum is None:  # 0.5 where action 1 is legal, else 0
        assert torch.equal(reward, torch.where(bits[:, 0] == 1, 0.5, 0.0))
        assert envs.illegal_actions == 0
    else:
        assert torch.equal(reward, torch.full((64,), optimum))
    assert terminated.all()


def test_masked_probe_counts_illegal_actions_and_pays_the_unmasked_optimum():
    envs = MaskedProbe(num_envs=8, seed=0)
    envs.reset()
    _, reward, _, _, _ = envs.step(torch.zeros(8, dtype=torch.int64))
    assert torch.equal(reward, torch.ones(8)) and envs.illegal_actions == 8


def test_masked_log_probabilities_and_entropy_equal_hand_computed_values():
    logits = torch.tensor([[1.0, 2.0, 3.0], [0.5, -1.0, 4.0]], requires_grad=True)
    mask = torch.tensor([[True, False, True], [False, False, True]])
    masked = masked_logits(logits, mask)
    head = CategoricalHead(1, 3, masked=True)
    p = torch.tensor([math.exp(1) / (math.exp(1) + math.exp(3)), math.exp(3) / (math.exp(1) + math.exp(3))])
    logp = head.log_prob(masked, torch.tensor([0, 2]))
    assert logp.tolist() == pytest.approx([math.log(p[0]), 0.0], abs=1e-6)
    entropy = head.entropy(masked)
    assert entropy.tolist() == pytest.approx([-(p * p.log()).sum().item(), 0.0], abs=1e-6)  # one legal action: 0
    (logp.sum() + entropy.sum()).backward()
    assert torch.isfinite(logits.grad).all() and logits.grad[:, 1].eq(0).all()


def test_masked_sampling_never_draws_an_illegal_action():
    generator = torch.Generator().manual_seed(0)
    logits = torch.tensor([[5.0, 0.0, 0.0, -5.0]]).expand(20_000, 4)
    mask = torch.rand(20_000, 4, generator=generator) < 0.5
    mask[:, 3] |= ~mask.any(dim=1)  # every row has a legal action
    actions, logprobs = sample_masked_categorical(masked_logits(logits, mask), generator)
    assert mask.gather(1, actions.unsqueeze(1)).all() and torch.isfinite(logprobs).all()
    one_legal = torch.zeros(5, 4, dtype=torch.bool)
    one_legal[:, 2] = True
    assert sample_masked_categorical(masked_logits(torch.randn(5, 4), one_legal))[0].tolist() == [2] * 5
    # a uniform draw of exactly 0 or above the rounded total still lands on a legal action
    legal = torch.tensor([[False, True, False, True]])
    actions = sample_legal(legal.expand(1000, 4), generator=generator)
    assert set(actions.tolist()) == {1, 3}


def test_a_row_without_a_legal_action_is_a_clear_error():
    with pytest.raises(ValueError, match=r"no legal action in row\(s\) \[1\]"):
        masked_logits(torch.zeros(2, 3), torch.tensor([[True, False, False], [False, False, False]]), check=True)
    with pytest.raises(ValueError, match="in one of its dimensions"):
        masked_logits(torch.zeros(1, 5), torch.tensor([[True, True, False, False, False]]), check=True, nvec=[2, 3])
    space = gym.spaces.Dict(
        {"observation": gym.spaces.Box(0, 1, (1,), np.float32), "action_mask": gym.spaces.Box(0, 1, (2,), np.bool_)}
    )
    policy = PolicyNetwork(space, 2)
    with pytest.raises(ValueError, match="no legal action"):
        policy.sample(
            TensorTree({"observation": torch.zeros(1, 1), "action_mask": torch.zeros(1, 2, dtype=torch.bool)})
        )


def test_multi_discrete_head_sums_dimensions():
    head = MultiCategoricalHead(1, [2, 3])
    logits = torch.tensor([[0.0, 1.0, 2.0, 0.0, -1.0]])
    actions = torch.tensor([[1, 0]])
    first = torch.log_softmax(torch.tensor([0.0, 1.0]), 0)[1]
    second = torch.log_softmax(torch.tensor([2.0, 0.0, -1.0]), 0)[0]
    assert head.log_prob(logits, actions).item() == pytest.approx((first + second).item())
    p1, p2 = torch.softmax(torch.tensor([0.0, 1.0]), 0), torch.softmax(torch.tensor([2.0, 0.0, -1.0]), 0)
    entropy = -(p1 * p1.log()).sum() - (p2 * p2.log()).sum()
    assert head.entropy(logits).item() == pytest.approx(entropy.item())
    assert head.mode(logits).tolist() == [[1, 0]]
    sampled, logprob = head.sample(logits.expand(4, 5), torch.Generator().manual_seed(0))
    assert sampled.shape == (4, 2) and torch.allclose(logprob, head.log_prob(logits.expand(4, 5), sampled))
    mask = torch.tensor([[True, False, False, True, True]])
    masked = MultiCategoricalHead(1, [2, 3], masked=True)
    assert masked.mode(masked_logits(logits, mask)).tolist() == [[0, 1]]


def test_bernoulli_head_log_probability_entropy_and_mode():
    head = BernoulliHead(1, 2)
    logits = torch.tensor([[0.0, 2.0]])
    p = torch.sigmoid(torch.tensor(2.0)).item()
    assert head.log_prob(logits, torch.tensor([[1, 0]])).item() == pytest.approx(math.log(0.5) + math.log(1 - p))
    assert head.entropy(logits).item() == pytest.approx(math.log(2) - p * math.log(p) - (1 - p) * math.log(1 - p))
    assert head.mode(logits).tolist() == [[0, 1]]


def test_epsilon_greedy_over_legal_actions_only():
    q_values = torch.tensor([[9.0, 1.0, 2.0]]).expand(5000, 3)
    mask = torch.tensor([[False, True, True]]).expand(5000, 3)
    greedy = epsilon_greedy(q_values, 0.0, action_mask=mask)
    assert greedy.eq(2).all()
    explored = epsilon_greedy(q_values, 1.0, torch.Generator().manual_seed(0), action_mask=mask)
    assert set(explored.tolist()) == {1, 2}


def test_replay_buffer_stores_each_key_with_its_dtype():
    envs = DictProbe(num_envs=4, seed=0)
    buffer = ReplayBuffer.for_env(envs, 16)
    # per transition: vector 2 float32 + image 300 uint8, twice (obs, next obs), action 8, reward 4, flag 1
    assert buffer.bytes_per_transition == 2 * (2 * 4 + 10 * 10 * 3) + 8 + 4 + 1
    obs, _ = envs.reset()
    next_obs, reward, terminated, _, info = envs.step(torch.zeros(4, dtype=torch.int64))
    buffer.add(obs, torch.zeros(4, dtype=torch.int64), reward, terminated, info["final_observation"])
    sample = buffer.sample(8)
    assert sample.obs["image"].dtype == torch.uint8 and sample.obs["vector"].shape == (8, 2)
    with pytest.raises(TypeError, match=r"obs\['image'\] must have dtype torch.uint8"):
        buffer.add(
            {"vector": obs["vector"], "image": obs["image"].float()},
            torch.zeros(4, dtype=torch.int64),
            reward,
            terminated,
            next_obs,
        )
    state = buffer.state_dict()
    assert type(state["obs"]) is dict
    restored = ReplayBuffer.for_env(envs, 16)
    restored.load_state_dict(state)
    assert torch.equal(restored.obs["image"], buffer.obs["image"])


def test_rollout_stacks_dict_observations():
    rollout = Rollout(3)
    for _ in range(3):
        obs = TensorTree({"a": torch.zeros(2, 4), "b": torch.zeros(2, 5, 5, dtype=torch.uint8)})
        rollout.add_step(
            obs, torch.zeros(2, dtype=torch.int64), torch.zeros(2), torch.zeros(2), torch.zeros(2, dtype=torch.bool)
        )
    stacked = rollout.get()
    assert stacked.obs["a"].shape == (2, 3, 4) and stacked.obs["b"].dtype == torch.uint8
