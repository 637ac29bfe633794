"""EnvPoolVectorEnv (rl_lightning/envs/envpool_adapter.py): EnvPool's Atari and MuJoCo envs behind the VectorEnv
contract. Its same-step autoreset and Atari preset are checked, step by step, against gymnasium's own preset wrappers
over EnvPool's raw envs, one env at a time, reset one step late as EnvPool does; then spaces, seeds, checkpoints, the
preset's score and life-loss episodes, errors, and a few PPO and DQN updates."""

import sys

import gymnasium as gym
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
from rl_lightning.envs.atari import atari_options, atari_wrappers
from rl_lightning.envs.envpool_adapter import EnvPoolVectorEnv, _atari_kwargs, envpool_env_ids

envpool = pytest.importorskip("envpool")

BREAKOUT = "ALE/Breakout-v5"


def _breakout(num_envs: int = 2, seed: int = 0, **options) -> EnvPoolVectorEnv:
    return EnvPoolVectorEnv(BREAKOUT, num_envs, seed=seed, atari=options or True, num_threads=1)


class _OneEnvPool(gym.Env):
    """One raw EnvPool Breakout env with the preset's frame preprocessing (``_atari_kwargs``: its frames, one at a
    time) as a gymnasium env, its episodes restarted by EnvPool's own autoreset: what gymnasium's preset wrappers
    run on in the reference."""

    action_space = gym.spaces.Discrete(4)

    def __init__(self, options: dict, seed: int):
        self.pool = envpool.make("Breakout-v5", env_type="gymnasium", num_envs=1, seed=seed, **_atari_kwargs(options))
        self.grayscale, size = options["grayscale"], options["screen_size"]
        self.observation_space = gym.spaces.Box(0, 255, (size, size) if self.grayscale else (size, size, 3), np.uint8)
        self.started = False

    def get_action_meanings(self):
        return ["NOOP", "FIRE", "RIGHT", "LEFT"]

    def _frame(self, obs):
        return obs[0, 0] if self.grayscale else obs[0].transpose(1, 2, 0)

    def reset(self, *, seed=None, options=None):
        if self.started:  # an ended episode: EnvPool resets it on the next step, whatever the action
            obs, _, _, _, info = self.pool.step(np.zeros(1, np.int32))
        else:
            obs, info = self.pool.reset()
        self.started = True
        return self._frame(obs), {"lives": int(info["lives"][0])}

    def step(self, action):
        obs, reward, terminated, truncated, info = self.pool.step(np.array([action], np.int32))
        return (
            self._frame(obs),
            float(reward[0]),
            bool(terminated[0]),
            bool(truncated[0]),
            {"lives": int(info["lives"][0])},
        )


def _reference(options: dict, seed: int, actions: np.ndarray) -> list[dict[str, list]]:
    """What each env of ``EnvPoolVectorEnv(BREAKOUT, seed=seed, atari=options)`` must give for ``actions``: gymnasium's
    own preset wrappers after its frame preprocessing (``atari_wrappers``: GameScore's lives and FIRE, the clipping,
    the frame stack) over one raw EnvPool env per env (env i of a batch is seeded ``seed + i``), reset after each
    training episode as gymnasium's same-step autoreset does."""
    options = atari_options(options)
    preprocessing, *wrappers = atari_wrappers(options)
    assert preprocessing.func is gym.wrappers.AtariPreprocessing  # EnvPool's part
    reference = []
    for env_index in range(actions.shape[1]):
        env = _OneEnvPool(options, seed + env_index)
        for wrapper in wrappers:
            env = wrapper(env)
        obs, _ = env.reset()
        out = {key: [] for key in ("obs", "final", "reward", "terminated", "truncated", "game_reward", "game_over")}
        out["obs"].append(obs)
        for action in actions[:, env_index]:
            obs, reward, terminated, truncated, info = env.step(int(action))
            for key, value in ("final", obs), ("reward", np.float32(reward)), ("terminated", terminated):
                out[key].append(value)
            out["truncated"].append(truncated)
            out["game_reward"].append(np.float32(info["game_reward"]))
            out["game_over"].append(info["game_over"])
            if terminated or truncated:
                obs, _ = env.reset()
            out["obs"].append(obs)
        env.close()
        reference.append(out)
    return reference


@pytest.mark.parametrize(
    "options",
    [
        # A lost life ends the training episode (its reset: NOOP, FIRE twice), time limit at 40 steps.
        {"terminal_on_life_loss": True, "max_episode_steps": 40},
        # FIRE after a lost life within the step (its steps count in the time limit); random games of 110 to 250
        # steps, cut at 150.
        {"terminal_on_life_loss": False, "max_episode_steps": 150, "clip_rewards": False},
    ],
)
def test_same_step_autoreset_and_the_preset_equal_gymnasiums_wrappers_over_envpool(options):
    num_envs, num_steps, seed = 3, 180, 5
    actions = random_actions(num_steps, num_envs, 4, seed=5)
    env = EnvPoolVectorEnv(BREAKOUT, num_envs, seed=seed, atari=options)
    ours = rollout(env, actions)
    env.close()
    assert_equals_reference(ours, _reference(options, seed, actions.numpy()))
    ends = ours["terminated"] | ours["truncated"]
    assert ours["terminated"].any() and ours["truncated"].any()  # both kinds of end were checked
    # Where an episode ended, the final obs is the last one, not the next episode's first.
    assert (ours["final"][ends] != ours["obs"][1:][ends]).flatten(1).any(1).all()
    assert torch.equal(ours["final"][~ends], ours["obs"][1:][~ends])


def test_atari_spaces_shapes_and_dtypes():
    env = _breakout()
    assert env.task == "Breakout-v5" and env.num_actions == 4 and env.max_episode_steps == 27_000
    assert env.restorable is False and env.can_draw and not env.can_render
    check_step_dtypes(env, (4, 84, 84), torch.uint8, atari=True)
    assert repr(env) == "EnvPoolVectorEnv('ALE/Breakout-v5', num_envs=2, device=cpu)"
    env.close()
    # EnvPool's own id, colour frames (EnvPool's (3 K, H, W) as gymnasium's (K, H, W, 3)), another size and stack.
    env = EnvPoolVectorEnv("Breakout-v5", 1, seed=0, atari={"grayscale": False, "screen_size": 64, "frame_stack": 2})
    check_step_dtypes(env, (2, 64, 64, 3), torch.uint8, atari=True)
    obs = env.reset(seed=0)[0]
    assert torch.equal(obs[:, 0], obs[:, 1])  # a new game's stack: its first frame, repeated
    assert torch.equal(env.draw(obs), obs[:, -1])
    env.close()


def test_draw_gives_the_newest_frame_and_render_the_screen():
    env = EnvPoolVectorEnv(BREAKOUT, 2, seed=0, render=True)
    obs, _ = env.reset()
    images = env.draw(obs)
    assert images.shape == (2, 84, 84, 3) and images.dtype == torch.uint8
    assert torch.equal(images[..., 0], obs[:, -1]) and torch.equal(images[..., 2], obs[:, -1])
    assert env.can_render and env.render().shape == (2, 210, 160, 3)
    with pytest.raises(ValueError, match="obs must have shape"):
        env.draw(obs[:, :2])
    env.close()


def test_returned_obs_are_not_mutated_by_later_steps():
    env = _breakout(2)
    obs, _ = env.reset()
    kept = obs.clone()
    generator = torch.Generator().manual_seed(0)
    for _ in range(150):  # past a lost life's FIRE and the end of a game's first episodes
        env.step(env.random_actions(generator))
    assert torch.equal(obs, kept)
    env.close()


def test_seeding():
    check_seeding(lambda seed: _breakout(2, seed))


def test_closed_envs_are_built_again_by_a_reset():
    env, fresh = _breakout(2, seed=4), _breakout(2, seed=4)
    env.close()
    assert env.pool is None
    assert torch.equal(env.reset()[0], fresh.reset()[0])  # the last seed's envs
    env.close()
    fresh.close()


def test_first_step_without_reset_starts_from_the_seeded_reset():
    check_first_step_without_reset(lambda seed: _breakout(2, seed))


def test_state_dict_says_not_restorable_and_load_restarts_fresh():
    check_state_dict(_breakout(2), BREAKOUT)


def test_life_loss_ends_training_episodes_and_game_over_the_last_life():
    env = _breakout(2, seed=1, terminal_on_life_loss=True)
    run = rollout(env, random_actions(330, 2, 4))
    env.close()
    check_life_loss_episodes(run)


def test_without_life_loss_episodes_are_whole_games():
    env = _breakout(2, seed=1)
    run = rollout(env, random_actions(200, 2, 4, seed=1))
    env.close()
    assert torch.equal(run["game_over"], run["terminated"] | run["truncated"]) and run["game_over"].any()


def test_rewards_are_clipped_and_game_reward_is_the_games_own():
    env = _breakout(2, seed=2)
    clipped = rollout(env, random_actions(150, 2, 4))
    env.close()
    env = _breakout(2, seed=2, clip_rewards=False)
    unclipped = rollout(env, random_actions(150, 2, 4))
    env.close()
    assert (clipped["game_reward"] > 0).any()
    assert torch.equal(clipped["reward"], torch.sign(clipped["game_reward"]))
    assert torch.equal(unclipped["reward"], unclipped["game_reward"])
    assert torch.equal(clipped["game_reward"], unclipped["game_reward"])  # the same games


def test_truncation_at_a_small_time_limit():
    # Without FIRE steps (the preset's FIRE steps count in EnvPool's time limit, as its frames do in ALE's).
    env = _breakout(2, seed=0, max_episode_steps=20, fire_reset=False)
    assert env.max_episode_steps == 20
    run = rollout(env, random_actions(21, 2, 4))
    env.close()
    assert run["truncated"][19].all() and not run["truncated"][:19].any() and not run["truncated"][20].any()
    assert not run["terminated"][19].any() and run["game_over"][19].all()  # the time limit ends the game
    assert (run["final"][19] != run["obs"][20]).flatten(1).any(1).all()  # and a new game starts


def test_mujoco_float32_observations_and_clipped_box_actions():
    assert "HalfCheetah-v5" in envpool_env_ids() and "Hopper-v5" in envpool_env_ids()
    env = EnvPoolVectorEnv("HalfCheetah-v5", 2, seed=0, max_episode_steps=5)
    assert env.action_kind == "box" and env.single_action_space.dtype == np.float32 and env.max_episode_steps == 5
    assert env.single_action_space.shape == (6,) and not env.can_draw
    check_step_dtypes(env, (17,), torch.float32, atari=False)
    big = EnvPoolVectorEnv("HalfCheetah-v5", 2, seed=0, max_episode_steps=5)
    env.reset(seed=0), big.reset(seed=0)
    step = env.step(torch.ones(2, 6))
    big_step = big.step(torch.full((2, 6), 5.0))  # clipped to the bounds, 1
    assert torch.equal(step[0], big_step[0]) and torch.equal(step[1], big_step[1])
    truncated = [env.step(env.random_actions())[3] for _ in range(4)]
    assert truncated[-1].all() and not torch.stack(truncated[:-1]).any()
    with pytest.raises(NotImplementedError, match="render=True"):
        env.draw(step[0])
    env.close()
    big.close()


@pytest.mark.parametrize(
    ("env_id", "kwargs", "error", "match"),
    [
        ("ALE/Breakot-v5", {}, ValueError, r"unknown env_id 'ALE/Breakot-v5' for backend='envpool'.*envpool_env_ids"),
        ("CartPole-v1", {}, ValueError, r"EnvPool's envpool.classic_control task, which this backend does not wrap"),
        ("ALE/HalfCheetah-v5", {}, ValueError, r"unknown env_id 'ALE/HalfCheetah-v5'"),
        (BREAKOUT, {"atari": False}, ValueError, r"EnvPool's Atari envs always preprocess"),
        (BREAKOUT, {"atari": {"frame_skp": 4}}, ValueError, r"unknown option\(s\) \['frame_skp'\]"),
        (BREAKOUT, {"frame_skip": 4}, ValueError, r"\['frame_skip'\] beside the Atari preset"),
        (BREAKOUT, {"batch_size": 1}, ValueError, r"\['batch_size'\] are set by EnvPoolVectorEnv itself"),
        (BREAKOUT, {"render_mode": "rgb_array"}, ValueError, r"pass render=True"),
        (BREAKOUT, {"num_thread": 1}, ValueError, r"has no argument\(s\) \['num_thread'\]; it takes: .*num_threads"),
        (BREAKOUT, {"render": 1}, TypeError, r"render must be a bool"),
        ("HalfCheetah-v5", {"atari": True}, ValueError, r"'HalfCheetah-v5' is EnvPool's MuJoCo task"),
        (BREAKOUT, {"mode": 99}, ValueError, r"EnvPool refused to build 'Breakout-v5'.*Invalid game mode"),
        # EnvPool aborts the process on num_threads=-1 (SIGABRT, no message), coerces 1 to True, gives NaN rewards
        # with frame_skip=0 and NaN costs: each is refused here, naming it.
        (BREAKOUT, {"num_threads": -1}, ValueError, r"env_kwargs\['num_threads'\] must be >= 0, got -1"),
        ("HalfCheetah-v5", {"num_threads": -1}, ValueError, r"env_kwargs\['num_threads'\] must be >= 0, got -1"),
        (BREAKOUT, {"num_threads": 1.5}, TypeError, r"env_kwargs\['num_threads'\] must be an int, got float 1.5"),
        (BREAKOUT, {"thread_affinity_offset": -2}, ValueError, r"\['thread_affinity_offset'\] must be >= -1"),
        (BREAKOUT, {"full_action_space": 1}, TypeError, r"env_kwargs\['full_action_space'\] must be a bool"),
        ("HalfCheetah-v5", {"frame_skip": 0}, ValueError, r"env_kwargs\['frame_skip'\] must be >= 1, got 0"),
        ("HalfCheetah-v5", {"max_episode_steps": 0}, ValueError, r"\['max_episode_steps'\] must be >= 1, got 0"),
        ("HalfCheetah-v5", {"ctrl_cost_weight": "x"}, TypeError, r"\['ctrl_cost_weight'\] must be a float, got str"),
        ("HalfCheetah-v5", {"ctrl_cost_weight": float("nan")}, ValueError, r"\['ctrl_cost_weight'\] must be a finite"),
        ("HalfCheetah-v5", {"xml_file": 3}, TypeError, r"env_kwargs\['xml_file'\] must be a non-empty str"),
    ],
)
def test_bad_arguments_are_clear_errors(env_id, kwargs, error, match):
    with pytest.raises(error, match=match):
        make_envs(env_id, 1, backend="envpool", **kwargs)


def test_envpool_arguments_of_the_right_types_pass():
    envs = make_envs("HalfCheetah-v5", 1, backend="envpool", num_threads=0, ctrl_cost_weight=1, frame_skip=2)
    config = envs.pool.spec.config
    assert (config.num_threads, config.ctrl_cost_weight, config.frame_skip) == (0, 1.0, 2)
    envs.close()


def test_make_envs_backend_and_a_missing_envpool(monkeypatch):
    env = make_envs(BREAKOUT, 1, seed=0, backend="envpool", atari=True, num_threads=1)
    assert isinstance(env, EnvPoolVectorEnv)
    env.close()
    with pytest.raises(ValueError, match="compile=True applies to native torch envs only"):
        make_envs(BREAKOUT, 1, backend="envpool", compile=True)
    monkeypatch.setitem(sys.modules, "envpool", None)
    with pytest.raises(ImportError, match=r"pip install 'rl_lightning\[envpool\]'"):
        make_envs(BREAKOUT, 1, backend="envpool")


def test_ppo_and_dqn_update_on_envpool_breakout():
    check_ppo_and_dqn_update(BREAKOUT, "envpool", EnvPoolVectorEnv, ppo_envs=4)
