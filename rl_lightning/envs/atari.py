"""The standard Atari pipeline of DQN and PPO as one switch: ``env_kwargs={"atari": True}``.

``atari_options`` reads the switch (``True`` or a dict of the options below), ``atari_wrappers`` builds
gymnasium's side of it, the same for every backend (``GymnasiumVectorEnv``; EnvPool and ale-py's
vector env map the options to their own arguments):

- the base env with ``frameskip=1`` (the preset skips frames itself, with max-pooling),
  ``repeat_action_probability`` (sticky actions; ALE v5's 0.25 by default) and a time limit of
  ``max_episode_steps`` agent steps (ALE's 108,000 frames: 27,000 steps of 4 frames);
- up to ``noop_max`` no-op frames at the start of each game, ``frame_skip`` frames per step with the
  maximum of the last two, ``screen_size`` x ``screen_size`` pixels, grey (``grayscale``): gymnasium's
  ``AtariPreprocessing``;
- FIRE pressed at the start of each game and after each lost life for games that need it to go on
  (``fire_reset``: Breakout's ball is launched with FIRE);
- a lost life ends the training episode (``terminal_on_life_loss``), the game going on;
- rewards clipped to their sign for training (``clip_rewards``);
- the last ``frame_stack`` frames stacked: uint8 ``(frame_stack, screen_size, screen_size)``.

What is logged and evaluated is the **real game score over full games** (unclipped, across lives),
as CleanRL and SB3 report it: every preset env puts ``info["game_reward"]`` (the step's unclipped
reward) and ``info["game_over"]`` (the whole game ended: no lives left, or the time limit) beside
the training reward and flags, and the episode statistics and evaluations count games with them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from rl_lightning._checks import check_bool, check_float, check_int

#: The info keys of a preset env: the unclipped reward of the step, and whether the whole game ended.
GAME_REWARD_KEY, GAME_OVER_KEY = "game_reward", "game_over"
#: FIRE steps at a game's start and after a lost life (``GameScore._fire``: sticky actions swallow one now and then).
FIRE_STEPS = 2

#: The preset's options and their defaults (CleanRL's and SB3's pipeline, ALE v5's sticky actions).
ATARI_DEFAULTS: dict[str, Any] = {
    "noop_max": 30,
    "frame_skip": 4,
    "screen_size": 84,
    "grayscale": True,
    "frame_stack": 4,
    "terminal_on_life_loss": False,
    "clip_rewards": True,
    "fire_reset": True,
    "repeat_action_probability": 0.25,
    "max_episode_steps": 27_000,
}


def atari_options(value: Any) -> dict[str, Any] | None:
    """The preset's full options for ``env_kwargs["atari"]``: None for ``False``/``None`` (no preset),
    the defaults (:data:`ATARI_DEFAULTS`) for ``True``, the defaults updated by a dict's keys.

    Raises:
        TypeError: for a value that is neither a bool nor a dict, or an option of the wrong type.
        ValueError: for an unknown option (the message lists them) or one out of range.
    """
    if value is None or value is False:
        return None
    if value is True:
        return dict(ATARI_DEFAULTS)
    if not isinstance(value, Mapping):
        raise TypeError(
            f"env_kwargs['atari'] must be True, False or a dict of the preset's options, got {type(value).__name__}"
        )
    unknown = sorted(set(value) - set(ATARI_DEFAULTS))
    if unknown:
        raise ValueError(
            f"env_kwargs['atari'] has unknown option(s) {unknown}; the preset's options (and defaults): "
            + ", ".join(f"{key}={default!r}" for key, default in ATARI_DEFAULTS.items())
        )
    options = {**ATARI_DEFAULTS, **value}
    where = "env_kwargs['atari']"
    check_int(f"{where}['noop_max']", options["noop_max"], 0)
    check_int(f"{where}['frame_skip']", options["frame_skip"], 1)
    check_int(f"{where}['screen_size']", options["screen_size"], 8)
    check_int(f"{where}['frame_stack']", options["frame_stack"], 1)
    check_int(f"{where}['max_episode_steps']", options["max_episode_steps"], 1)
    for key in ("grayscale", "terminal_on_life_loss", "clip_rewards", "fire_reset"):
        check_bool(f"{where}[{key!r}]", options[key])
    options["repeat_action_probability"] = check_float(
        f"{where}['repeat_action_probability']", options["repeat_action_probability"], 0.0, 1.0
    )
    if options["frame_stack"] > 16:
        raise ValueError(
            f"{where}['frame_stack'] must be at most 16 (a stack of channels), got {options['frame_stack']}"
        )
    return options


def atari_make_kwargs(options: dict[str, Any]) -> dict[str, Any]:
    """The base env's keyword arguments (``gymnasium.make``) the preset sets: no frame skip of its own,
    the sticky actions, and ALE's time limit in frames."""
    return {
        "frameskip": 1,
        "repeat_action_probability": options["repeat_action_probability"],
        "max_num_frames_per_episode": options["max_episode_steps"] * options["frame_skip"],
    }


def atari_wrappers(options: dict[str, Any]) -> list[Callable[[gym.Env], gym.Env]]:
    """The preset's gymnasium wrappers, innermost first, for ``gymnasium.make_vec(..., wrappers=...)``."""
    wrappers: list[Callable[[gym.Env], gym.Env]] = [
        functools.partial(
            gym.wrappers.AtariPreprocessing,
            noop_max=options["noop_max"],
            frame_skip=options["frame_skip"],
            screen_size=options["screen_size"],
            terminal_on_life_loss=False,  # a life loss is GameScore's to tell (the game goes on)
            grayscale_obs=options["grayscale"],
            scale_obs=False,  # uint8: scaled inside the network
        ),
        functools.partial(
            GameScore, terminal_on_life_loss=options["terminal_on_life_loss"], fire_reset=options["fire_reset"]
        ),
    ]
    if options["clip_rewards"]:
        wrappers.append(ClipReward)
    wrappers.append(functools.partial(gym.wrappers.FrameStackObservation, stack_size=options["frame_stack"]))
    return wrappers


def needs_fire(env: gym.Env) -> bool:
    """Whether the game needs FIRE to start (and go on after a lost life): its action 1 is FIRE."""
    meanings = env.unwrapped.get_action_meanings() if hasattr(env.unwrapped, "get_action_meanings") else []
    return len(meanings) > 2 and meanings[1] == "FIRE"


class GameScore(gym.Wrapper):
    """The game's own score beside the training signal, the life-loss episodes and the FIRE presses.

    Every step's info gets ``"game_reward"`` (the unclipped reward, before :class:`ClipReward`) and
    ``"game_over"`` (the whole game ended: ALE's game over, or its time limit). With
    ``terminal_on_life_loss`` a lost life ends the training episode (``terminated``) and the next
    ``reset`` goes on with the same game (one no-op step), as SB3's ``EpisodicLifeEnv`` does; only at
    a game over does ``reset`` start a new game. With ``fire_reset``, for a game whose action 1 is
    FIRE, FIRE is pressed (for two steps, see :meth:`_fire`) when a game starts and after each lost life
    (a policy that never learnt to press it would otherwise stand still until the time limit).

    Args:
        env: an ALE env (with ``AtariPreprocessing`` or not): ``info["lives"]`` is read.
        terminal_on_life_loss: end the training episode at each lost life.
        fire_reset: press FIRE to start (and restart after a lost life) where the game needs it.
    """

    def __init__(self, env: gym.Env, terminal_on_life_loss: bool = False, fire_reset: bool = True):
        super().__init__(env)
        self.terminal_on_life_loss = terminal_on_life_loss
        self.fire = fire_reset and needs_fire(env)
        self.lives = 0
        self.game_over = True

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        if self.game_over:
            obs, info = self.env.reset(**kwargs)
        else:  # the training episode ended at a lost life: the game goes on
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:  # the no-op ended the game: start a new one
                obs, info = self.env.reset(**kwargs)
        self.lives = int(info.get("lives", 0))
        self.game_over = False
        if self.fire:
            obs, info = self._fire(obs, info, kwargs)
        return obs, info

    def _fire(self, obs: Any, info: dict[str, Any], reset_kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """Press FIRE for two steps (a new game, or a new life); a game that ends on it starts again. Two: with
        sticky actions (ALE v5's 0.25) all 4 frames of one FIRE step repeat the previous NOOP with probability
        0.25**4 (one life loss in 256), and the game then waits for a FIRE that a greedy policy may never press."""
        for _ in range(FIRE_STEPS):
            obs, _, terminated, truncated, info = self.env.step(1)
            if terminated or truncated:
                obs, info = self.env.reset(**reset_kwargs)
        self.lives = int(info.get("lives", self.lives))
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        game_reward = float(reward)
        self.game_over = bool(terminated or truncated)
        lives = int(info.get("lives", self.lives))
        lost = 0 < lives < self.lives
        self.lives = lives
        if lost and not self.game_over:
            if self.terminal_on_life_loss:
                terminated = True
            elif self.fire:  # the game goes on within the training episode: launch the next ball (two FIREs)
                for _ in range(FIRE_STEPS):
                    obs, fire_reward, terminated, truncated, info = self.env.step(1)
                    reward, game_reward = float(reward) + float(fire_reward), game_reward + float(fire_reward)
                    self.game_over = bool(terminated or truncated)
                    if self.game_over:
                        break
                self.lives = int(info.get("lives", self.lives))
        info = {**info, GAME_REWARD_KEY: game_reward, GAME_OVER_KEY: self.game_over}
        return obs, reward, terminated, truncated, info


class ClipReward(gym.RewardWrapper):
    """The training reward clipped to its sign (-1, 0, +1), as DQN's and PPO's Atari runs train; the
    game's own reward stays in ``info["game_reward"]`` (:class:`GameScore`)."""

    def reward(self, reward: SupportsFloat) -> float:
        return float(np.sign(float(reward)))
