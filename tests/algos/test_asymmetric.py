"""Asymmetric actor-critic (``actor_keys`` / ``critic_keys``): each network reads its own keys of a Dict
observation, and everything a trained policy is used through (``act``, ``evaluate_policy``, exports, the Hub folder)
takes the actor's keys only. ``PrivilegedBandit`` is the test bed: only its ``"state"`` key shows the hidden
offset every reward of an episode carries."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
import torch

from rl_lightning import PPOModule, SACModule, TD3Module
from rl_lightning.callbacks import evaluate_policy
from rl_lightning.envs import DictProbe, PrivilegedBandit
from rl_lightning.envs.privileged import STATE_KEY
from rl_lightning.envs.spaces import OBSERVATION_KEY, TensorTree, observation_view
from rl_lightning.nets import FlatKeys
from tests.quiet_trainer import quiet_fit

ENV_ID = "PrivilegedBandit-v0"
KEYS = dict(actor_keys=[OBSERVATION_KEY], critic_keys=[STATE_KEY])
TINY = dict(num_envs=8, num_steps_per_rollout=16, num_minibatches=2)


def _observations(count: int = 16, seed: int = 3) -> TensorTree:
    envs = PrivilegedBandit(count, seed=seed)
    obs, _ = envs.reset()
    for _ in range(2):  # mid-episode: t > 0 in some envs
        obs, *_ = envs.step(envs.random_actions())
    return obs


def _with(obs: TensorTree, key: str, value: torch.Tensor) -> TensorTree:
    changed = TensorTree(dict(obs))
    changed[key] = value
    return changed


# -- the env ----------------------------------------------------------------------------------------------------


def test_privileged_bandit_pays_the_hidden_offset_plus_one_for_the_cued_action():
    envs = PrivilegedBandit(6, seed=0, num_actions=3, horizon=2, offset_scale=2.0)
    obs, _ = envs.reset()
    offset = obs[STATE_KEY][:, -1] * 2.0
    cue = obs[OBSERVATION_KEY][:, :3].argmax(1)
    assert torch.equal(obs[STATE_KEY][:, :4], obs[OBSERVATION_KEY])  # the state holds what the actor sees
    assert torch.equal(obs[OBSERVATION_KEY][:, 3], torch.zeros(6))  # t / horizon at the start
    actions = torch.tensor([0, 1, 2, 0, 1, 2])
    obs, reward, terminated, truncated, _ = envs.step(actions)
    assert torch.allclose(reward, offset + (actions == cue).float())
    assert not terminated.any() and not truncated.any()
    assert torch.allclose(obs[STATE_KEY][:, -1] * 2.0, offset)  # one offset per episode
    assert torch.equal(obs[OBSERVATION_KEY][:, 3], torch.full((6,), 0.5))
    obs, reward, terminated, _, info = envs.step(actions)
    assert terminated.all()  # horizon 2
    assert torch.equal(info["final_observation"][OBSERVATION_KEY][:, 3], torch.ones(6))
    assert torch.equal(obs[OBSERVATION_KEY][:, 3], torch.zeros(6))  # reset
    assert (obs[STATE_KEY][:, -1].abs() <= 1.0).all()
    assert not torch.allclose(obs[STATE_KEY][:, -1] * 2.0, offset)  # new offsets


def test_privileged_bandit_is_seeded_and_checks_its_arguments():
    first, second = PrivilegedBandit(4, seed=7), PrivilegedBandit(4, seed=7)
    for envs in (first, second):
        envs.reset()
    for _ in range(5):
        actions = torch.randint(8, (4,))
        a, b = first.step(actions), second.step(actions)
        assert torch.equal(a[0][STATE_KEY], b[0][STATE_KEY]) and torch.equal(a[1], b[1])
    with pytest.raises(ValueError, match="num_actions"):
        PrivilegedBandit(2, num_actions=1)
    with pytest.raises(ValueError, match="offset_scale"):
        PrivilegedBandit(2, offset_scale=0.0)


# -- the keys' checks -------------------------------------------------------------------------------------------


def test_observation_view_takes_keys_in_the_space_order_and_the_mask_for_the_policy():
    space = gym.spaces.Dict(
        {
            "b": gym.spaces.Box(0, 1, (2,)),
            "action_mask": gym.spaces.Box(0, 1, (3,), dtype=bool),
            "a": gym.spaces.Box(0, 1, (1,)),
        }
    )
    order = list(space.spaces)  # gymnasium sorts a dict's keys
    assert list(observation_view(space, ["b", "a"], "critic_keys").spaces) == [k for k in order if k != "action_mask"]
    assert list(observation_view(space, ["a"], "actor_keys", policy=True).spaces) == [k for k in order if k != "b"]
    assert observation_view(space, None, "actor_keys") is space
    with pytest.raises(ValueError, match=r"actor_keys must be distinct keys of the observation, some of \['a', 'b'\]"):
        observation_view(space, ["c"], "actor_keys")
    with pytest.raises(ValueError, match="'action_mask' goes to the policy by itself"):
        observation_view(space, ["action_mask"], "critic_keys")
    with pytest.raises(ValueError, match="distinct"):
        observation_view(space, ["a", "a"], "critic_keys")
    with pytest.raises(ValueError, match="distinct"):
        observation_view(space, [], "critic_keys")
    with pytest.raises(TypeError, match="critic_keys must be a list of observation keys"):
        observation_view(space, "a", "critic_keys")


def test_ppo_refuses_keys_it_cannot_use():
    with pytest.raises(ValueError, match="actor_keys selects keys of a Dict observation"):
        PPOModule("CartPole-v1", actor_keys=["observation"])
    with pytest.raises(ValueError, match=r"critic_keys must be distinct keys of the observation, some of"):
        PPOModule(ENV_ID, critic_keys=["privileged"])
    with pytest.raises(ValueError, match="shared_encoder=True needs the actor and the critic to read the same"):
        PPOModule(ENV_ID, shared_encoder=True, **KEYS)
    PPOModule(ENV_ID, shared_encoder=True, actor_keys=[STATE_KEY], critic_keys=[STATE_KEY])  # the same keys: fine


# -- each network reads its keys --------------------------------------------------------------------------------


@pytest.mark.parametrize("recurrent", [None, "gru"])
def test_the_actor_reads_its_keys_and_the_critic_its_own(recurrent):
    module = PPOModule(ENV_ID, recurrent=recurrent, **TINY, **KEYS)
    model, obs = module.model, _observations()
    noise = torch.rand(obs[STATE_KEY].shape)
    if recurrent is None:
        assert set(model.actor.encoder.encoders) == {OBSERVATION_KEY}
        assert set(model.critic.encoder.encoders) == {STATE_KEY}
        params, values = model(obs)
        other_params, _ = model(_with(obs, STATE_KEY, noise))
        _, other_values = model(_with(obs, OBSERVATION_KEY, torch.rand(obs[OBSERVATION_KEY].shape)))
        assert torch.equal(params, other_params)  # the actor never reads the state
        assert torch.equal(values, other_values)  # the critic never reads the observation
        assert not torch.allclose(values, model(_with(obs, STATE_KEY, noise))[1])
    else:
        assert set(model.encoder.encoders) == {OBSERVATION_KEY}  # the core's encoder: the actor's keys
        assert model.critic_head is None and set(model.critic.encoder.encoders) == {STATE_KEY}
        state, start = model.initial_state(16), torch.ones(16, dtype=torch.bool)
        values = model.value(obs, state, start)
        moved = model.value(obs, torch.rand(state.shape), torch.zeros(16, dtype=torch.bool))
        assert torch.equal(values, moved)  # a feed-forward critic of its keys: no memory
        _, params, _ = model.act(obs, state, start, greedy=True)
        assert torch.equal(params, model.act(_with(obs, STATE_KEY, noise), state, start, greedy=True)[1])


def test_without_keys_both_networks_read_every_key_as_before():
    module = PPOModule("DictProbe-v0", **TINY)
    assert module.policy_observation_space is module.observation_space
    assert set(module.model.critic.encoder.encoders) == set(DictProbe(1).single_observation_space.spaces)


# -- what a trained policy is used through takes the actor's keys -----------------------------------------------


@pytest.mark.parametrize("recurrent", [None, "lstm"])
def test_act_takes_the_actor_keys_alone_and_ignores_the_critic_keys(recurrent):
    module = PPOModule(ENV_ID, recurrent=recurrent, normalize_obs=True, **TINY, **KEYS)
    quiet_fit(module, max_steps=4)
    obs = _observations()
    actor_only = {OBSERVATION_KEY: obs[OBSERVATION_KEY]}
    full, alone = module.act(obs, greedy=True), module.act(actor_only, greedy=True)
    if recurrent:
        full, alone = full[0], alone[0]
    assert torch.equal(full, alone)
    with pytest.raises(ValueError, match=r"obs must be a dict with keys \['observation'\] .*the policy's actor_keys"):
        module.act({STATE_KEY: obs[STATE_KEY]})


@pytest.mark.parametrize("suffix", [".pt2", ".pt"])
def test_exports_take_the_actor_keys_only(suffix, tmp_path):
    module = PPOModule(ENV_ID, normalize_obs=True, **TINY, **KEYS)
    quiet_fit(module, max_steps=4)
    path = module.export_policy(tmp_path / f"policy{suffix}")
    loaded = torch.export.load(str(path)).module() if suffix == ".pt2" else torch.jit.load(str(path))
    obs = _observations()
    assert torch.equal(loaded(obs[OBSERVATION_KEY]), module.act(obs, greedy=True))


def test_the_hub_folder_policy_takes_the_actor_keys_and_the_module_loads_back(tmp_path):
    module = PPOModule(ENV_ID, **TINY, **KEYS)
    quiet_fit(module, max_steps=4)
    folder = module.save_pretrained(tmp_path / "hub", eval_episodes=2, video_steps=0, export_formats=("pt2",))
    policy = torch.export.load(str(folder / "policy.pt2")).module()
    obs = _observations()
    assert torch.equal(policy(obs[OBSERVATION_KEY]), module.act(obs, greedy=True))
    config = json.loads((folder / "config.json").read_text())
    assert list(config["env"]["policy_observation_space"]["spaces"]) == [OBSERVATION_KEY]
    assert 'actions = policy(obs["observation"])' in (folder / "README.md").read_text()
    loaded = PPOModule.from_pretrained(folder)
    assert loaded.hparams.actor_keys == [OBSERVATION_KEY] and loaded.hparams.critic_keys == [STATE_KEY]
    assert torch.equal(loaded.act(obs, greedy=True), module.act(obs, greedy=True))


def test_evaluate_policy_of_the_module_is_that_of_its_policy_given_the_actor_keys_alone():
    module = PPOModule(ENV_ID, **TINY, **KEYS)
    quiet_fit(module, max_steps=4)

    def deployed(obs):  # what a deployed policy gets: no privileged state
        return module.act({OBSERVATION_KEY: obs[OBSERVATION_KEY]}, greedy=True)

    ours, theirs = evaluate_policy(module, ENV_ID, 8, seed=1), evaluate_policy(deployed, ENV_ID, 8, seed=1)
    assert torch.equal(ours.returns, theirs.returns) and ours.returns.shape == (8,)


def test_two_seeds_of_an_asymmetric_ppo_each_equal_their_one_seed_run():
    multi = PPOModule(ENV_ID, seed=4, num_seeds=2, **TINY, **KEYS)
    quiet_fit(multi, max_steps=8)
    single = PPOModule(ENV_ID, seed=5, **TINY, **KEYS)
    quiet_fit(single, max_steps=8)
    ours, theirs = multi.seed_module(1).model.state_dict(), single.model.state_dict()
    assert ours.keys() == theirs.keys()
    for name, value in theirs.items():
        assert torch.allclose(ours[name], value, atol=1e-5), name


# -- SAC and TD3: Dict observations as one vector per network -------------------------------------------------

CONTINUOUS_ID = "PrivilegedBanditContinuous-v0"
OFF_POLICY = dict(learning_starts=32, buffer_size=256, batch_size=16, hidden_sizes=(16, 16), steps_per_epoch=10)


@pytest.mark.parametrize("algorithm", [SACModule, TD3Module])
def test_off_policy_actor_and_critics_read_their_keys(algorithm):
    module = algorithm(CONTINUOUS_ID, **OFF_POLICY, **KEYS)
    obs = _observations()
    assert list(module.actor.trunk[0].shapes) == [OBSERVATION_KEY]
    assert list(module.critic.flat.shapes) == [STATE_KEY]
    actions = module.act(obs, greedy=True)
    assert torch.equal(actions, module.act({OBSERVATION_KEY: obs[OBSERVATION_KEY]}, greedy=True))
    q_values = module.critic(obs, actions)
    assert torch.equal(q_values, module.critic(_with(obs, OBSERVATION_KEY, torch.rand(16, 9)), actions))
    assert not torch.allclose(q_values, module.critic(_with(obs, STATE_KEY, torch.rand(16, 10)), actions))


@pytest.mark.parametrize("algorithm", [SACModule, TD3Module])
def test_off_policy_modules_take_dict_observations_and_export_the_actor_keys(algorithm, tmp_path):
    every_key = algorithm(CONTINUOUS_ID, **OFF_POLICY)  # no keys: each network reads them all, concatenated
    assert list(every_key.critic.flat.shapes) == [OBSERVATION_KEY, STATE_KEY]
    assert every_key.critic.layers[0].weight.shape[-2:] == (9 + 10 + 1, 16)
    module = algorithm(CONTINUOUS_ID, **OFF_POLICY, **KEYS)
    quiet_fit(module, max_steps=20)
    obs = _observations()
    policy = torch.export.load(str(module.export_policy(tmp_path / "policy.pt2"))).module()
    assert torch.allclose(policy(obs[OBSERVATION_KEY]), module.act(obs, greedy=True))
    with pytest.raises(ValueError, match=r"read vector keys.*image keys \['image'\] go to PPOModule"):
        FlatKeys(DictProbe(1).single_observation_space)


@pytest.mark.parametrize("algorithm", [SACModule, TD3Module])
def test_two_seeds_of_an_asymmetric_off_policy_module_each_equal_their_one_seed_run(algorithm):
    multi = algorithm(CONTINUOUS_ID, seed=4, num_seeds=2, **OFF_POLICY, **KEYS)
    quiet_fit(multi, max_steps=20)
    single = algorithm(CONTINUOUS_ID, seed=5, **OFF_POLICY, **KEYS)
    quiet_fit(single, max_steps=20)
    ours = {k: v for k, v in multi.seed_module(1).state_dict().items() if not k.startswith("seed_members.")}
    theirs = single.state_dict()
    assert ours.keys() == theirs.keys()
    for name, value in theirs.items():
        assert torch.allclose(ours[name], value, atol=1e-5), name


@pytest.mark.parametrize("algorithm", [PPOModule, SACModule, TD3Module])
def test_a_compiled_asymmetric_update_equals_the_eager_one(algorithm):
    env_id, settings = (ENV_ID, TINY) if algorithm is PPOModule else (CONTINUOUS_ID, OFF_POLICY)
    eager = algorithm(env_id, seed=2, **settings, **KEYS)
    quiet_fit(eager, max_steps=8 if algorithm is PPOModule else 20)
    compiled = algorithm(env_id, seed=2, compile={"backend": "aot_eager"}, **settings, **KEYS)
    quiet_fit(compiled, max_steps=8 if algorithm is PPOModule else 20)
    theirs = compiled.state_dict()
    for name, value in eager.state_dict().items():
        assert torch.allclose(theirs[name], value, atol=1e-5), name


def test_discrete_sac_actor_and_critics_read_their_keys():
    module = SACModule(ENV_ID, **OFF_POLICY, **KEYS)
    obs = _observations()
    assert set(module.actor.trunk.encoders) == {OBSERVATION_KEY}
    logits, q_values = module.actor(obs), module.critic(obs)
    assert q_values.shape == (2, 16, 8)
    assert torch.equal(logits, module.actor(_with(obs, STATE_KEY, torch.rand(16, 10))))
    assert torch.equal(q_values, module.critic(_with(obs, OBSERVATION_KEY, torch.rand(16, 9))))
    assert not torch.allclose(q_values, module.critic(_with(obs, STATE_KEY, torch.rand(16, 10))))
    quiet_fit(module, max_steps=20)
    assert torch.equal(module.act(obs, greedy=True), module.act({OBSERVATION_KEY: obs[OBSERVATION_KEY]}, greedy=True))
