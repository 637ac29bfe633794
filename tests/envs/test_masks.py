"""Action masks read right: True / 1 legal (bool, 0 / 1 integers, exact 0.0 / 1.0 floats), a mask in the
logits convention refused, no action sent for a row without a legal one (the random warm-up
included), a missing mask named with the env, the step and where it was looked for."""

from __future__ import annotations

import re
import warnings

import gymnasium as gym
import lightning as L
import numpy as np
import pytest
import torch

from rl_lightning import DQNModule, PPOModule
from rl_lightning.envs import make_envs, register
from rl_lightning.envs.spaces import ACTION_MASK_KEY, OBSERVATION_KEY, TensorTree, as_bool_mask
from rl_lightning.envs.structured_probes import MaskedProbe

LEGAL = np.array([False, True, True, False])  # actions 1 and 2
CONVENTION = r"True / 1 = legal.*logits convention \(0 legal, -inf illegal\) converts with mask = logits_mask == 0"


def _as_style(legal: np.ndarray, style: str) -> np.ndarray:
    """``legal`` written the way an env might: bool, 0 / 1 int8 (Taxi's), 0.0 / 1.0 float32, or logits (0 / -inf)."""
    if style == "logits":
        return np.where(legal, 0.0, -np.inf).astype(np.float32)
    return legal.astype({"bool": np.bool_, "int": np.int8, "float01": np.float32}[style])


class _MaskEnv(gym.Env):
    """Discrete(4) actions, legal ones 1 and 2, given in ``info["action_mask"]`` or in a Dict key.

    Env ``i`` of a vector env built with seed 0 is first reset with seed ``i``: ``empty_env`` picks the
    one (None: all) whose mask has no legal action from step ``empty_from`` on; ``missing_env`` / ``missing_at`` the
    one (None: all) and the step whose info lacks the mask (``missing_at=0``: only reset's info has it).
    It counts the actions it is given and the illegal ones among them."""

    def __init__(self, style="bool", where="info", empty_env=None, empty_from=None, missing_env=None, missing_at=None):
        self.style, self.where = style, where
        self.empty_env, self.empty_from = empty_env, empty_from
        self.missing_env, self.missing_at = missing_env, missing_at
        self.action_space = gym.spaces.Discrete(4)
        box = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
        if where == "obs":
            dtype = _as_style(LEGAL, style).dtype
            mask_space = gym.spaces.Box(-np.inf if style == "logits" else 0, 1, (4,), dtype)
            self.observation_space = gym.spaces.Dict({OBSERVATION_KEY: box, ACTION_MASK_KEY: mask_space})
        else:
            self.observation_space = box
        self.index, self.steps, self.played, self.illegal = None, 0, 0, 0

    def _observe(self) -> tuple:
        chosen = self.empty_env is None or self.index == self.empty_env
        empty = chosen and self.empty_from is not None and self.steps >= self.empty_from
        mask = _as_style(np.zeros(4, bool) if empty else LEGAL, self.style)
        obs, info = np.zeros(1, np.float32), {}
        if self.where == "obs":
            obs = {OBSERVATION_KEY: obs, ACTION_MASK_KEY: mask}
        chosen = self.missing_env is None or self.index == self.missing_env
        at = self.missing_at is not None and (self.steps > 0 if self.missing_at == 0 else self.steps == self.missing_at)
        if self.where == "info" and not (chosen and at):
            info[ACTION_MASK_KEY] = mask
        return obs, info

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if self.index is None:
            self.index = seed
        self.steps = 0
        return self._observe()

    def step(self, action):
        self.steps += 1
        self.played += 1
        self.illegal += int(not LEGAL[int(action)])
        return (*self._observe()[:1], 1.0, False, False, self._observe()[1])


def _register(name: str, **kwargs) -> str:
    env_id = f"rl_lightning_test/Mask{name}-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=_MaskEnv, max_episode_steps=50, kwargs=kwargs)
    return env_id


def _random_legal_steps(envs, num_steps: int) -> None:
    obs, _ = envs.reset()
    for _ in range(num_steps):
        obs = envs.step(envs.random_actions(action_mask=obs[ACTION_MASK_KEY]))[0]


# -- the convention ---------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["info", "obs"])
def test_a_logits_convention_mask_from_the_env_is_refused_naming_the_convention(where):
    env_id = _register(f"Logits{where}", style="logits", where=where)
    with pytest.raises(
        ValueError, match=rf"'{env_id}' at reset: {where}\['action_mask'\] has the float32 value -inf"
    ) as error:
        make_envs(env_id, 2, seed=0).reset()
    assert re.search(CONVENTION, str(error.value))


@pytest.mark.parametrize("as_tensor", [False, True])
def test_a_logits_convention_mask_given_to_act_is_refused_naming_the_convention(as_tensor):
    module = PPOModule(env_id=_register("Bool"), num_envs=2)
    logits_mask = _as_style(LEGAL, "logits")
    obs = np.zeros(1, np.float32)
    if as_tensor:
        obs, logits_mask = torch.from_numpy(obs), torch.from_numpy(logits_mask)
    with pytest.raises(ValueError, match=r"act\(action_mask=...\) has the (torch\.)?float32 value -inf") as error:
        module.act(obs, action_mask=logits_mask)
    assert re.search(CONVENTION, str(error.value))
    with pytest.raises(ValueError, match=r"value 0\.5, neither 0 nor 1"):  # not exactly 0 / 1: refused too
        module.act(np.zeros(1, np.float32), action_mask=np.array([0.0, 0.5, 1.0, 0.0]))


def test_a_logits_convention_mask_in_a_dict_observation_given_to_act_is_refused():
    module = PPOModule(env_id=_register("Bool"), num_envs=2)
    obs = {OBSERVATION_KEY: np.zeros(1, np.float32), ACTION_MASK_KEY: _as_style(LEGAL, "logits")}
    with pytest.raises(ValueError, match=r"obs\['action_mask'\] has the float32 value -inf") as error:
        module.act(obs)
    assert re.search(CONVENTION, str(error.value))


@pytest.mark.parametrize("where", ["info", "obs"])
@pytest.mark.parametrize("style", ["int", "float01"])
def test_integer_and_exact_float_masks_read_as_the_bool_one(style, where):
    expected = make_envs(_register(f"Bool{where}", where=where), 3, seed=0).reset()[0][ACTION_MASK_KEY]
    assert expected.dtype == torch.bool and expected.tolist() == [LEGAL.tolist()] * 3
    envs = make_envs(_register(f"{style}{where}", style=style, where=where), 3, seed=0)
    obs, _ = envs.reset()
    assert obs[ACTION_MASK_KEY].dtype == torch.bool and torch.equal(obs[ACTION_MASK_KEY], expected)


@pytest.mark.parametrize("style", ["int", "float01"])
def test_act_gives_the_same_actions_for_a_0_1_mask_as_for_the_bool_one(style):
    module = PPOModule(env_id=_register("Bool"), num_envs=2)
    obs = np.zeros((256, 1), np.float32)
    masks = np.tile(LEGAL, (256, 1))
    torch.manual_seed(0)
    expected = module.act(obs, action_mask=masks)
    torch.manual_seed(0)
    actions = module.act(obs, action_mask=_as_style(masks, style))
    torch.manual_seed(0)
    from_tensors = module.act(torch.from_numpy(obs), action_mask=torch.from_numpy(_as_style(masks, style)))
    assert np.array_equal(actions, expected) and np.array_equal(from_tensors.numpy(), expected)
    assert set(actions.tolist()) == {1, 2}  # sampled: both legal actions, never another


def test_ppo_plays_only_legal_actions_from_an_integer_info_mask():
    module = PPOModule(env_id=_register("int", style="int"), num_envs=4, num_steps_per_rollout=16, seed=0)
    L.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False).fit(module)
    envs = [env.unwrapped for env in module.source.envs.gymnasium_envs.envs]
    played = sum(env.played for env in envs)
    assert played == module.env_steps >= 4 * 16 and sum(env.illegal for env in envs) == 0


def test_as_bool_mask_takes_bool_and_exact_0_1_values_and_refuses_others():
    assert as_bool_mask(np.array([0, 1, 1], np.uint8)).tolist() == [False, True, True]
    assert as_bool_mask(torch.tensor([1.0, 0.0])).tolist() == [True, False]
    for bad in (np.array([0.0, 2.0]), np.array([np.nan, 1.0]), torch.tensor([-1, 1])):
        with pytest.raises(ValueError, match="neither 0 nor 1"):
            as_bool_mask(bad)


# -- no action for a row without a legal one --------------------------------------------------


def test_the_adapter_names_the_env_the_step_and_the_row_without_a_legal_action():
    env_id = _register("EmptyRow", empty_env=1, empty_from=3)
    envs = make_envs(env_id, 3, seed=0)
    _random_legal_steps(envs, 2)
    with pytest.raises(
        ValueError, match=rf"'{env_id}' at step 3: info\['action_mask'\] has no legal action in row\(s\) \[1\]"
    ):
        envs.step(torch.tensor([1, 2, 1]))
    assert [env.unwrapped.played for env in envs.gymnasium_envs.envs] == [3, 3, 3]


def test_a_multi_discrete_mask_without_a_legal_action_in_one_dimension_is_refused():
    class _MultiMask(gym.Env):
        observation_space = gym.spaces.Dict(
            {OBSERVATION_KEY: gym.spaces.Box(0, 1, (1,)), ACTION_MASK_KEY: gym.spaces.MultiBinary(5)}
        )
        action_space = gym.spaces.MultiDiscrete([2, 3])

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            mask = np.array([0, 0, 1, 1, 1] if seed == 1 else [1, 0, 1, 1, 1], np.int8)  # env 1: dimension 0 empty
            return {OBSERVATION_KEY: np.zeros(1, np.float32), ACTION_MASK_KEY: mask}, {}

    if "rl_lightning_test/MaskMulti-v0" not in gym.registry:
        gym.register("rl_lightning_test/MaskMulti-v0", entry_point=_MultiMask, max_episode_steps=5)
    with pytest.raises(
        ValueError, match=r"at reset: obs\['action_mask'\] has no legal action in row\(s\) \[1\] \(in one"
    ):
        make_envs("rl_lightning_test/MaskMulti-v0", 2, seed=0).reset()


class _NoLegalActionInRowOne(MaskedProbe):
    """MaskedProbe whose env 1 has no legal action."""

    def _observe(self, bits):
        obs = super()._observe(bits)
        obs[ACTION_MASK_KEY][1:2] = False
        return obs


def test_dqns_random_warm_up_refuses_a_native_env_row_without_a_legal_action():
    register("_TestNoLegalActionInRowOne-v0", _NoLegalActionInRowOne, overwrite=True)
    module = DQNModule(env_id="_TestNoLegalActionInRowOne-v0", num_envs=2, learning_starts=16, batch_size=4)
    trainer = L.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    with pytest.raises(
        ValueError,
        match=r"'_NoLegalActionInRowOne' at reset, in the random warm-up before learning_starts \(16\): "
        r"obs\['action_mask'\] has no legal action in row\(s\) \[1\]",
    ):
        trainer.fit(module)
    assert module.source.envs.illegal_actions == 0  # no random action was sent


def test_dqns_random_warm_up_on_a_gymnasium_env_stops_at_the_step_whose_row_has_no_legal_action():
    env_id = _register("EmptyAll", empty_from=2)  # every env: the training envs' seeds are derived
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = DQNModule(env_id=env_id, num_envs=2, learning_starts=64, batch_size=4)
    trainer = L.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    with pytest.raises(
        ValueError, match=rf"'{env_id}' at step 2: info\['action_mask'\] has no legal action in row\(s\) \[0, 1\]"
    ):
        trainer.fit(module)
    envs = [env.unwrapped for env in module.source.envs.gymnasium_envs.envs]
    assert [env.played for env in envs] == [2, 2] and sum(env.illegal for env in envs) == 0


# -- a missing mask -----------------------------------------------------------------------------


def test_a_mask_missing_from_info_at_step_3_is_named_with_the_step_and_where_it_was_looked_for():
    env_id = _register("Missing3", missing_at=3)
    envs = make_envs(env_id, 2, seed=0)
    _random_legal_steps(envs, 2)
    with pytest.raises(
        ValueError,
        match=rf"'{env_id}' gave no action mask at step 3 for env\(s\) \[0, 1\] of 2: "
        r"rl_lightning looked in info\['action_mask'\]",
    ):
        envs.step(torch.tensor([1, 2]))


def test_a_mask_missing_for_one_env_is_not_read_as_an_all_illegal_row():
    env_id = _register("MissingOne", missing_env=1, missing_at=2)
    envs = make_envs(env_id, 2, seed=0)
    _random_legal_steps(envs, 1)
    with pytest.raises(ValueError, match=r"gave no action mask at step 2 for env\(s\) \[1\] of 2"):
        envs.step(torch.tensor([1, 2]))


def test_a_mask_given_only_in_resets_info_is_named_at_step_1():
    env_id = _register("OnlyReset", missing_at=0)
    envs = make_envs(env_id, 2, seed=0)
    assert envs.mask_source == "info"
    envs.reset()
    with pytest.raises(ValueError, match=rf"'{env_id}' gave no action mask at step 1 .*info\['action_mask'\]"):
        envs.step(torch.tensor([1, 2]))


def test_an_ended_episode_whose_final_info_lacks_the_mask_is_named():
    env_id = "rl_lightning_test/MaskFinalMissing-v0"
    if env_id not in gym.registry:  # the last step of each 2-step episode lacks the mask
        gym.register(env_id, entry_point=_MaskEnv, max_episode_steps=2, kwargs={"missing_at": 2})
    envs = make_envs(env_id, 2, seed=0)
    _random_legal_steps(envs, 1)
    with pytest.raises(
        ValueError, match=r"at step 2 for env\(s\) \[0, 1\] of 2: rl_lightning looked in info\['final_info'\]"
    ):
        envs.step(torch.tensor([1, 2]))


def test_taxi_masks_still_come_through_every_step_and_episode_end():
    envs = make_envs("Taxi-v4", 4, seed=0)
    obs, _ = envs.reset()
    for _ in range(250):  # Taxi's time limit is 200 steps: episodes end on the way
        obs, _, _, _, info = envs.step(envs.random_actions(action_mask=obs[ACTION_MASK_KEY]))
        assert isinstance(info["final_observation"], TensorTree)
        assert obs[ACTION_MASK_KEY].dtype == torch.bool and obs[ACTION_MASK_KEY].any(dim=1).all()
