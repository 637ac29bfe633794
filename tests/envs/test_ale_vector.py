"""AleVectorEnv (rl_lightning/envs/ale_vector.py): ale-py's vector env behind the VectorEnv contract. Its same-step
autoreset, life-loss episodes and FIRE after a lost life are checked against ale-py's own next-step vector env, one
env at a time; then spaces, seeds, checkpoints, the Atari preset's score, errors, and a few PPO and DQN updates."""

import sys

import numpy as np
import pytest
import torch
from pooled_contract import (
    assert_equals_reference,
    check_first_step_without_reset,
    check_life_loss_episodes,
    check_ppo_and_dqn_update,
    check_seeding,
    check_state_dict,
    check_step_dtypes,
    random_actions,
    rollout,
)

from rl_lightning.envs import make_envs
from rl_lightning.envs.ale_vector import AleVectorEnv, _ale_kwargs, _vector_env_class
from rl_lightning.envs.atari import atari_options

try:  # ale-py 0.12.1 or later (its same-step autoreset)
    AtariVectorEnv = _vector_env_class()
except ImportError as error:
    pytest.skip(str(error), allow_module_level=True)

BREAKOUT = "ALE/Breakout-v5"


def _breakout(num_envs: int = 2, seed: int = 0, **options) -> AleVectorEnv:
    return AleVectorEnv(BREAKOUT, num_envs, seed=seed, atari=options or True, num_threads=1)


def _reference(options: dict, seed: int, actions: np.ndarray) -> list[dict[str, list]]:
    """What each env of ``AleVectorEnv(BREAKOUT, seed=seed, atari=options)`` must give for ``actions``: one ale-py
    vector env of one env per env (env i of a batch is seeded ``seed + i``) in its next-step autoreset mode (the step
    after an episode's end is its reset, whatever the action), the lost lives told from its ``lives``, and FIRE as the
    first two actions of a game and after a lost life."""
    options = atari_options(options)
    reference = []
    for env_index in range(actions.shape[1]):
        env = AtariVectorEnv("breakout", 1, num_threads=1, autoreset_mode="NextStep", **_ale_kwargs(options))
        obs, info = env.reset(seed=seed + env_index)
        lives, fire_left = info["lives"][0], 2
        out = {key: [] for key in ("obs", "final", "reward", "terminated", "truncated", "game_reward", "game_over")}
        out["obs"].append(obs[0])
        for action in actions[:, env_index]:
            if fire_left and options["fire_reset"]:
                action, fire_left = 1, fire_left - 1
            obs, reward, terminated, truncated, info = env.step(np.array([action]))
            done = bool(terminated[0] or truncated[0])
            lost = 0 < info["lives"][0] < lives and not done
            lives = info["lives"][0]
            fire_left = 2 if done or lost else fire_left
            out["final"].append(obs[0])
            out["reward"].append(np.float32(np.sign(reward[0]) if options["clip_rewards"] else reward[0]))
            out["game_reward"].append(np.float32(reward[0]))
            out["terminated"].append(bool(terminated[0]) or (lost and options["terminal_on_life_loss"]))
            out["truncated"].append(bool(truncated[0]))
            out["game_over"].append(done)
            if done:
                obs, _, _, _, info = env.step(np.array([0]))  # ale-py's reset, one step late
                lives = info["lives"][0]
            out["obs"].append(obs[0])
        env.close()
        reference.append(out)
    return reference


@pytest.mark.parametrize(
    "options",
    [
        {"terminal_on_life_loss": True, "max_episode_steps": 60},
        # Random games of 150 to 250 steps, cut at 150.
        {"terminal_on_life_loss": False, "max_episode_steps": 150, "clip_rewards": False},
    ],
)
def test_same_step_autoreset_equals_ale_py_reset_one_step_late(options):
    num_envs, num_steps, seed = 3, 170, 1
    actions = random_actions(num_steps, num_envs, 4, seed=1)
    env = AleVectorEnv(BREAKOUT, num_envs, seed=seed, atari=options, num_threads=1)
    ours = rollout(env, actions)
    env.close()
    assert_equals_reference(ours, _reference(options, seed, actions.numpy()))
    reset = ours["truncated"] | ours["game_over"]
    assert ours["terminated"].any() and ours["truncated"].any()  # both kinds of end were checked
    # Where a game was reset, the final obs is its last one, not the next game's first.
    assert (ours["final"][reset] != ours["obs"][1:][reset]).flatten(1).any(1).all()
    assert torch.equal(ours["final"][~reset], ours["obs"][1:][~reset])


def test_spaces_shapes_dtypes_and_ids():
    env = _breakout()
    assert env.game == "breakout" and env.num_actions == 4 and env.max_episode_steps == 27_000
    assert env.restorable is False and env.can_draw and not env.can_render
    check_step_dtypes(env, (4, 84, 84), torch.uint8, atari=True)
    assert repr(env) == "AleVectorEnv('ALE/Breakout-v5', num_envs=2, device=cpu)"
    images = env.draw(env.reset()[0])
    assert images.shape == (2, 84, 84, 3) and images.dtype == torch.uint8
    with pytest.raises(NotImplementedError, match="renders no frames"):
        env.render()
    env.close()
    for env_id in "Breakout-v5", "breakout":
        env = AleVectorEnv(env_id, 1, seed=0, atari={"grayscale": False, "screen_size": 64, "frame_stack": 2})
        assert env.game == "breakout"
        check_step_dtypes(env, (2, 64, 64, 3), torch.uint8, atari=True)
        assert env.draw(env.reset()[0]).shape == (1, 64, 64, 3)
        env.close()


def test_seeding():
    check_seeding(lambda seed: _breakout(2, seed))


def test_first_step_without_reset_starts_from_the_seeded_reset():
    check_first_step_without_reset(lambda seed: _breakout(2, seed))


def test_state_dict_says_not_restorable_and_load_restarts_fresh():
    check_state_dict(_breakout(2), BREAKOUT)


def test_returned_obs_are_not_mutated_by_later_steps():
    env = _breakout(2)
    obs, _ = env.reset()
    kept = obs.clone()
    generator = torch.Generator().manual_seed(0)
    for _ in range(150):
        env.step(env.random_actions(generator))
    assert torch.equal(obs, kept)
    env.close()


def test_life_loss_ends_training_episodes_and_game_over_the_last_life():
    env = _breakout(2, seed=1, terminal_on_life_loss=True)
    run = rollout(env, random_actions(330, 2, 4))
    env.close()
    check_life_loss_episodes(run)


def test_rewards_are_clipped_and_game_reward_is_the_games_own():
    env = _breakout(2, seed=1)
    run = rollout(env, random_actions(250, 2, 4, seed=1))
    env.close()
    assert (run["game_reward"] > 0).any() and torch.equal(run["reward"], torch.sign(run["game_reward"]))
    assert torch.equal(run["game_over"], run["terminated"] | run["truncated"])  # the episodes are whole games


@pytest.mark.parametrize(
    ("env_id", "kwargs", "error", "match"),
    [
        ("ALE/Breakot-v5", {}, ValueError, r"unknown env_id 'ALE/Breakot-v5' for backend='ale_vector'"),
        ("CartPole-v1", {}, ValueError, r"unknown env_id 'CartPole-v1'.*get_all_rom_ids"),
        ("Breakout", {}, ValueError, r"unknown env_id 'Breakout'"),
        (BREAKOUT, {"atari": False}, ValueError, r"ale-py's vector env always preprocesses"),
        (BREAKOUT, {"atari": {"frame_skp": 4}}, ValueError, r"unknown option\(s\) \['frame_skp'\]"),
        (BREAKOUT, {"frameskip": 4}, ValueError, r"\['frameskip'\] are not passed to ale-py's vector env"),
        (BREAKOUT, {"batch_size": 1}, ValueError, r"it takes num_threads, thread_affinity_offset, full_action_space"),
    ],
)
def test_bad_arguments_are_clear_errors(env_id, kwargs, error, match):
    with pytest.raises(error, match=match):
        make_envs(env_id, 1, backend="ale_vector", **kwargs)


def test_make_envs_backend_and_a_missing_ale_py(monkeypatch):
    env = make_envs(BREAKOUT, 1, seed=0, backend="ale_vector", atari={"frame_stack": 2}, num_threads=1)
    assert isinstance(env, AleVectorEnv) and env.obs_shape == (2, 84, 84)
    env.close()
    with pytest.raises(ValueError, match="compile=True applies to native torch envs only"):
        make_envs(BREAKOUT, 1, backend="ale_vector", compile=True)
    monkeypatch.setitem(sys.modules, "ale_py.vector_env", None)
    with pytest.raises(ImportError, match=r"pip install 'ale-py>=0.12.1'"):
        make_envs(BREAKOUT, 1, backend="ale_vector")


def test_ppo_and_dqn_update_on_ale_vector_breakout():
    check_ppo_and_dqn_update(BREAKOUT, "ale_vector", AleVectorEnv, ppo_envs=2)
