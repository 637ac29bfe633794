"""Greedy play on a vector env: the one loop behind evaluation, the greedy video clips and ``scripts/enjoy.py``."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor

from rl_lightning._checks import check_bool, check_int
from rl_lightning.data.episodes import game_steps
from rl_lightning.envs.base import VectorEnv

#: How often (in steps) :func:`play_greedy` calls its ``every_64_steps`` hook: a stop is heard within 64 steps.
CHECK_EVERY = 64


class PlayStopped(Exception):
    """``play_greedy``'s ``every_64_steps`` hook asked it to stop: what was played is dropped."""


class GreedyPlay(NamedTuple):
    """What :func:`play_greedy` played, ``num_steps`` steps of ``num_envs`` envs."""

    #: float32 ``(num_envs, episodes_per_env)``: the undiscounted return of each env's episodes, in order.
    returns: Tensor
    #: float32 ``(num_envs, episodes_per_env)``: their lengths in steps.
    lengths: Tensor
    #: bool ``(num_envs, episodes_per_env)``: the episodes cut at ``max_episode_steps`` (their returns are partial).
    cut: Tensor
    #: bool ``(num_envs, num_steps)``: an episode ended on step t (terminated | truncated, or a game over where the
    #: env says, the Atari preset; a cut is not an end).
    dones: Tensor
    #: ``(num_envs, num_steps, *obs_shape)``: the observation each step acted on (``keep_obs``), else None.
    obs: Tensor | None
    #: What ``frame(obs)`` gave before every ``frame_stride``-th step.
    frames: list[Any]


@torch.no_grad()
def play_greedy(
    actor: Callable[..., Any],
    envs: VectorEnv,
    seed: int | None = None,
    *,
    episodes_per_env: int | None = 1,
    max_episode_steps: int | None = None,
    num_steps: int | None = None,
    keep_obs: bool = False,
    frame: Callable[[Any], Any] | None = None,
    frame_stride: int = 1,
    every_64_steps: Callable[[int], bool] | None = None,
) -> GreedyPlay:
    """Reset ``envs``, then play greedy actions until every env has played ``episodes_per_env`` episodes
    (one after another: ``envs`` starts the next one itself when one ends), or for ``num_steps`` steps.

    Args:
        actor: ``actor(obs, episode_start) -> actions``, e.g. ``module.greedy_actor()`` (a recurrent
            policy's carries its state from call to call, zeroed where ``episode_start``, bool
            ``(num_envs,)``: True on each env's first step and after each end).
        envs: the env; ``seed`` re-seeds it at the reset (None: it goes on with its own generator).
        episodes_per_env: the episodes each env plays; None: play ``num_steps`` steps whatever ends
            (then ``returns``, ``lengths`` and ``cut`` have no columns).
        max_episode_steps: cut an episode that has not ended after this many steps (None: never); if
            episodes are left to play, ``envs`` is reset, which needs a single env.
        num_steps: the most steps to play (None: until the episodes are played); an episode still
            running then is neither ended nor cut (its ``lengths`` say how far it got).
        keep_obs: keep each step's observation (``obs``).
        frame: called with the observations before every ``frame_stride``-th step (e.g. a render of
            the current state); what it returns goes to ``frames``.
        frame_stride: the steps between two ``frame`` calls.
        every_64_steps: called every :data:`CHECK_EVERY` steps with the number of episodes played so far (all
            envs); True stops the play with :class:`PlayStopped` (a run asked to stop: Ctrl-C, SIGTERM).

    Raises:
        PlayStopped: when ``every_64_steps`` returned True.
    """
    if episodes_per_env is None and num_steps is None:
        raise ValueError("play_greedy needs episodes_per_env or num_steps (it would never stop), got neither")
    for name, value in ("episodes_per_env", episodes_per_env), ("max_episode_steps", max_episode_steps):
        if value is not None:
            check_int(name, value, 1)
    if num_steps is not None:
        check_int("num_steps", num_steps, 1)
    check_bool("keep_obs", keep_obs)
    check_int("frame_stride", frame_stride, 1)
    resets_after_cuts = max_episode_steps is not None and episodes_per_env is not None and episodes_per_env > 1
    if resets_after_cuts and envs.num_envs > 1:
        raise ValueError(
            f"max_episode_steps with episodes_per_env={episodes_per_env} resets the env after a cut episode, "
            f"which resets every copy: pass a single env, got num_envs={envs.num_envs}"
        )
    device, num_envs, num_episodes = envs.device, envs.num_envs, episodes_per_env or 0
    returns = torch.zeros(num_envs, num_episodes, device=device)
    lengths = torch.zeros(num_envs, num_episodes, device=device)
    cut = torch.zeros(num_envs, num_episodes, dtype=torch.bool, device=device)
    # Each env's episode being played, its return and length so far (written to the tables when it ends).
    episode = torch.zeros(num_envs, dtype=torch.long, device=device)
    episode_return = torch.zeros(num_envs, device=device)
    episode_length = torch.zeros(num_envs, device=device)
    running = torch.ones(num_envs, dtype=torch.bool, device=device)  # envs with episodes left to play
    # Steps since the running envs' episodes started: they start together (one env, or one episode each).
    steps_in_episode = 0

    def record(which: Tensor, cut_now: Tensor | None = None) -> None:
        """Write the episodes being played by the envs ``which`` (a bool mask) to the tables."""
        index = which.nonzero().squeeze(1)
        slot = (index, episode[index])
        returns[slot], lengths[slot] = episode_return[index], episode_length[index]
        if cut_now is not None:
            cut[slot] = cut_now[index]

    obs, _ = envs.reset(seed=seed)
    starts = torch.ones(num_envs, dtype=torch.bool, device=device)
    all_obs, all_dones, frames = [], [], []
    played = 0  # episodes ended so far (read only by every_64_steps: counted where the loop syncs anyway)
    for step in itertools.count() if num_steps is None else range(num_steps):
        if keep_obs:
            all_obs.append(obs)
        if frame is not None and step % frame_stride == 0:
            frames.append(frame(obs))
        if every_64_steps is not None and step % CHECK_EVERY == CHECK_EVERY - 1 and every_64_steps(played):
            raise PlayStopped(f"stopped after {step + 1} steps, {played} episodes")
        obs, rewards, terminated, truncated, info = envs.step(torch.as_tensor(actor(obs, starts), device=device))
        starts = terminated | truncated
        rewards, game_over = game_steps(rewards, starts, info)  # a game's score over all its lives (Atari)
        all_dones.append(game_over)
        if episodes_per_env is None:
            continue
        episode_return += rewards * running
        episode_length += running
        ended, cut_now, steps_in_episode = running & game_over, None, steps_in_episode + 1
        if max_episode_steps is not None and steps_in_episode >= max_episode_steps:
            cut_now = running & ~game_over
            ended |= cut_now
        if not ended.any():  # the loop's one host sync per step
            continue
        record(ended, cut_now)
        if every_64_steps is not None:
            played += int(ended.sum())
        episode_return.masked_fill_(ended, 0.0)
        episode_length.masked_fill_(ended, 0.0)
        episode += ended
        running = episode < num_episodes
        steps_in_episode = 0 if num_envs == 1 else steps_in_episode
        if not running.any():
            break
        if cut_now is not None and cut_now.any():  # the cut episode's env goes on where it was: start a new one
            obs, _ = envs.reset()
            starts = torch.ones(num_envs, dtype=torch.bool, device=device)
    if episodes_per_env is not None:
        record(running)  # episodes still running when num_steps ran out: as far as they got
    obs_played = torch.stack(all_obs, dim=1) if keep_obs else None
    return GreedyPlay(returns, lengths, cut, torch.stack(all_dones, dim=1), obs_played, frames)


def first_env_frame(envs: VectorEnv, obs: Any) -> np.ndarray:
    """The first env's frame for ``obs`` (the observations ``play_greedy``'s ``frame`` hook gets): drawn from its
    observation where the env can draw (native envs), else rendered by the env itself (gymnasium's, EnvPool's):
    uint8 ``(height, width, 3)``, for a video of one env (``scripts/enjoy.py``, the Hub's ``replay.mp4``)."""
    frame = envs.draw(obs[0]) if envs.can_draw else envs.render()[0]
    return np.ascontiguousarray(frame.numpy())
