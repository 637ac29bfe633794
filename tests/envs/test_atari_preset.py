"""The Atari preset (``env_kwargs={"atari": ...}``, rl_lightning/envs/atari.py): the standard pipeline's shapes and
dtypes, training rewards clipped while the game's own score is counted over full games across lives, FIRE and
life-loss episodes, and a clear error for what it cannot take."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from quiet_trainer import quiet_fit, quiet_trainer

from rl_lightning import DQNModule, PPOModule
from rl_lightning.callbacks.evaluation import evaluate_policy
from rl_lightning.envs import make_envs
from rl_lightning.envs.atari import ATARI_DEFAULTS, ClipReward, GameScore, atari_options

pytest.importorskip("ale_py")
pytest.importorskip("cv2")

BREAKOUT = "ALE/Breakout-v5"


class FakeAtari(gym.Env):
    """An ALE-like env: action 1 is FIRE, ``info["lives"]`` drops by one every ``life_steps`` steps, the game ends
    when no life is left; every step's reward is 7 (Breakout's top row). It records the actions it was given."""

    observation_space = gym.spaces.Box(0, 255, (2,), np.uint8)
    action_space = gym.spaces.Discrete(4)

    def __init__(self, lives: int = 3, life_steps: int = 4):
        self.start_lives, self.life_steps = lives, life_steps
        self.actions: list[int] = []
        self.resets = 0

    def get_action_meanings(self):
        return ["NOOP", "FIRE", "RIGHT", "LEFT"]

    def reset(self, *, seed=None, options=None):
        self.resets += 1
        self.lives, self.steps = self.start_lives, 0
        return np.zeros(2, np.uint8), {"lives": self.lives}

    def step(self, action):
        self.actions.append(int(action))
        self.steps += 1
        if self.steps % self.life_steps == 0:
            self.lives -= 1
        return np.full(2, self.steps, np.uint8), 7.0, self.lives == 0, False, {"lives": self.lives}


def play(env: gym.Env, steps: int) -> list[tuple[float, bool, float, bool]]:
    """(training reward, training episode end, game reward, game over) of ``steps`` NOOP steps, resetting at ends."""
    env.reset(seed=0)
    out = []
    for _ in range(steps):
        _, reward, terminated, truncated, info = env.step(0)
        out.append((reward, terminated or truncated, info["game_reward"], info["game_over"]))
        if terminated or truncated:
            env.reset()
    return out


def test_life_loss_ends_the_training_episode_but_not_the_game_nor_its_score():
    base = FakeAtari(lives=3, life_steps=6)
    env = ClipReward(GameScore(base, terminal_on_life_loss=True, fire_reset=True))
    # The fake's steps 1-2 are the first reset's two FIREs; lives are lost at its steps 6 and 12 (each
    # training episode's reset then no-ops and FIREs twice: three of its steps) and 18, the game over.
    steps = play(env, 13)
    rewards, ends, game_rewards, game_overs = (list(column) for column in zip(*steps, strict=True))
    assert rewards == [1.0] * 13  # clipped for training
    assert game_rewards == [7.0] * 13  # the game's own reward
    # Training episodes end at each lost life; the game (one reset of the base env) only at the last one.
    assert [i for i, end in enumerate(ends) if end] == [3, 6, 9]
    assert [i for i, over in enumerate(game_overs) if over] == [9]
    assert base.resets == 2  # the first game and the one after the game over, not one per life
    # Two FIREs after the game's reset, a no-op and two FIREs after each lost life.
    assert base.actions[:3] == [1, 1, 0]
    assert base.actions[6:10] == [0, 1, 1, 0]


def test_without_life_loss_fire_launches_the_next_life_inside_the_episode():
    base = FakeAtari(lives=2, life_steps=4)
    env = GameScore(base, terminal_on_life_loss=False, fire_reset=True)
    steps = play(env, 4)
    # Step 2 (the fake's 4th, after the reset's two FIREs) loses a life: FIRE is pressed twice at once
    # within the same step, and their rewards count too (7 + 7 + 7).
    assert [s[2] for s in steps] == [7.0, 21.0, 7.0, 7.0]
    assert [s[1] for s in steps] == [False, False, False, True]  # the episode is the whole game
    assert [s[3] for s in steps] == [False, False, False, True]
    assert base.actions == [1, 1, 0, 0, 1, 1, 0, 0, 1, 1]  # and the next game's FIREs


def test_no_fire_for_a_game_without_it_and_when_switched_off():
    class NoFire(FakeAtari):
        def get_action_meanings(self):
            return ["NOOP", "RIGHT", "LEFT"]

    base = NoFire()
    play(GameScore(base, fire_reset=True), 2)
    assert 1 not in base.actions
    base = FakeAtari()
    play(GameScore(base, fire_reset=False), 2)
    assert 1 not in base.actions


def test_the_preset_pipeline_shapes_dtypes_and_base_env():
    envs = make_envs(BREAKOUT, 2, seed=0, atari=True)
    try:
        assert envs.obs_shape == (4, 84, 84) and envs.obs_dtype == torch.uint8
        assert envs.num_actions == 4 and envs.max_episode_steps == 27_000
        inner = envs.gymnasium_envs.envs[0]
        assert [type(w).__name__ for w in _chain(inner)][:4] == [
            "FrameStackObservation",
            "ClipReward",
            "GameScore",
            "AtariPreprocessing",
        ]
        ale = inner.unwrapped
        assert ale._frameskip == 1  # the preset skips (4, max-pooled) itself
        assert ale.ale.getFloat("repeat_action_probability") == pytest.approx(0.25)
        assert ale.ale.getInt("max_num_frames_per_episode") == 108_000
        obs, _ = envs.reset()
        assert obs.dtype == torch.uint8 and obs.shape == (2, 4, 84, 84)
        # gymnasium's reset padding: the first stack is one frame four times.
        assert torch.equal(obs[:, 0], obs[:, 3])
    finally:
        envs.close()


def _chain(env):
    while isinstance(env, gym.Wrapper):
        yield env
        env = env.env


def test_random_breakout_counts_full_games_across_lives_with_clipped_training_rewards():
    envs = make_envs(BREAKOUT, 2, seed=3, atari={"terminal_on_life_loss": True})
    generator = torch.Generator().manual_seed(0)
    life_ends = game_overs = 0
    try:
        envs.reset()
        for _ in range(600):
            _, rewards, terminated, truncated, info = envs.step(envs.random_actions(generator))
            assert info["game_reward"].dtype == torch.float32 and info["game_over"].dtype == torch.bool
            assert torch.equal(rewards, torch.sign(info["game_reward"]))
            ends = terminated | truncated
            assert not (info["game_over"] & ~ends).any()  # a game over ends the training episode too
            life_ends += int(ends.sum())
            game_overs += int(info["game_over"].sum())
    finally:
        envs.close()
    assert game_overs >= 2
    assert life_ends >= 4 * game_overs  # Breakout's 5 lives: ~5 training episodes per game


def test_evaluation_plays_full_games_and_scores_them_unclipped():
    def random_policy(obs):
        return torch.randint(0, 4, (obs.shape[0],))

    torch.manual_seed(0)
    per_life = evaluate_policy(random_policy, make_envs(BREAKOUT, 2, seed=1, atari={"terminal_on_life_loss": True}))
    torch.manual_seed(0)
    whole = evaluate_policy(random_policy, make_envs(BREAKOUT, 2, seed=1, atari={"terminal_on_life_loss": False}))
    # A random game of Breakout lasts well over 100 steps over its 5 lives; one life's episode far less.
    assert per_life.lengths.min() > 100 and whole.lengths.min() > 100


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        ("yes", TypeError, r"env_kwargs\['atari'\] must be True, False or a dict"),
        ({"frame_skp": 4}, ValueError, r"unknown option\(s\) \['frame_skp'\].*frame_skip=4"),
        ({"frame_stack": 0}, ValueError, r"frame_stack"),
        ({"frame_stack": 32}, ValueError, r"frame_stack'\] must be at most 16"),
        ({"clip_rewards": 1}, TypeError, r"clip_rewards"),
        ({"repeat_action_probability": 2.0}, ValueError, r"repeat_action_probability"),
    ],
)
def test_bad_options_are_clear_errors(value, error, match):
    with pytest.raises(error, match=match):
        atari_options(value)


def test_options_defaults_and_off():
    assert atari_options(True) == ATARI_DEFAULTS
    assert atari_options(False) is None and atari_options(None) is None
    assert atari_options({"frame_stack": 2})["frame_stack"] == 2


def test_the_preset_refuses_a_non_atari_env_and_settings_it_makes_itself():
    with pytest.raises(ValueError, match=r"for ALE ids .*'CartPole-v1' is not an ALE env"):
        make_envs("CartPole-v1", 1, backend="gymnasium", atari=True)
    with pytest.raises(ValueError, match=r"\['frameskip'\] beside env_kwargs\['atari'\].*frame_skip"):
        make_envs(BREAKOUT, 1, atari=True, frameskip=4)


def test_ppo_and_dqn_update_on_the_preset():
    """A few updates of each on Breakout with the preset: uint8 stacks reach the CNN, losses finite."""
    ppo = PPOModule(
        env_id=BREAKOUT, num_envs=2, num_steps_per_rollout=8, shared_encoder=True, env_kwargs={"atari": True}
    )
    quiet_fit(ppo, 4)
    assert ppo.source.env_steps == 16
    assert all(torch.isfinite(p).all() for p in ppo.parameters())
    dqn = DQNModule(
        env_id=BREAKOUT, num_envs=1, buffer_size=500, learning_starts=64, batch_size=8, env_kwargs={"atari": True}
    )
    quiet_fit(dqn, 4)
    assert dqn.source.buffer.obs_dtype == torch.uint8 and dqn.source.buffer.sample(2).obs.dtype == torch.uint8
    assert all(torch.isfinite(p).all() for p in dqn.parameters())


def test_the_charts_count_games_not_lives():
    """With a lost life ending each training episode (~35 random steps), charts/episodic_length is still a
    whole game's (over 100 steps): the sources count the game's own episodes (info["game_over"])."""
    options = {"atari": {"terminal_on_life_loss": True}}
    ppo = PPOModule(env_id=BREAKOUT, num_envs=2, num_steps_per_rollout=400, num_minibatches=1, env_kwargs=options)
    trainer = quiet_fit(ppo, 4)  # one rollout: 4 epochs of one minibatch
    assert trainer.callback_metrics["charts/episodic_length"] > 100
    assert trainer.callback_metrics["charts/episodic_return"] >= 0
    dqn = DQNModule(
        env_id=BREAKOUT, num_envs=2, buffer_size=1000, learning_starts=800, batch_size=8, env_kwargs=options
    )
    trainer = quiet_trainer(max_steps=1, log_every_n_steps=1)
    trainer.fit(dqn)
    assert trainer.callback_metrics["charts/episodic_length"] > 100
