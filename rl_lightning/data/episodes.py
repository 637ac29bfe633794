"""Episode statistics as gymnasium's ``RecordEpisodeStatistics`` keeps them, on the device."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from rl_lightning.envs.atari import GAME_OVER_KEY, GAME_REWARD_KEY


def game_steps(rewards: Tensor, dones: Tensor, info: dict[str, Any]) -> tuple[Tensor, Tensor]:
    """What the episode statistics count of a step: the rewards and episode ends (terminated |
    truncated), or where the env gives them (the Atari preset, ``rl_lightning.envs.atari``) the game's
    own unclipped rewards and game ends, ``info["game_reward"]`` / ``info["game_over"]``: the real game
    score over full games, as CleanRL and SB3 report it."""
    return info.get(GAME_REWARD_KEY, rewards), info.get(GAME_OVER_KEY, dones)


class EpisodeTracker:
    """Running return and length of every env's current episode, and the totals of the episodes
    that finished since the last :meth:`pop`, all as tensors on the envs' device (no host sync).

    ``charts/episodic_return`` and ``charts/episodic_length`` are the means of what :meth:`pop`
    returns: every algorithm logs the same thing (for the Atari preset, game scores over full games:
    :func:`game_steps`).

    A multi-agent env's rows are its agents (``num_agents`` per scene, scene-major, every row of a scene ending its
    episode at the same step): each row's episode is one agent's, and :meth:`pop` adds the sum of each agent's
    returns, so the charts show every agent's mean return and the team's (their sum).

    Args:
        num_envs: envs tracked (rows).
        device: where the counters live.
        num_agents: rows per scene of a multi-agent env (1: a single-agent env).
    """

    def __init__(self, num_envs: int, device: torch.device | str = "cpu", num_agents: int = 1):
        self.num_envs = num_envs
        self.num_agents = num_agents
        self.returns = torch.zeros(num_envs, device=device)
        self.lengths = torch.zeros(num_envs, device=device)
        # [sum of returns, sum of lengths, number] of the episodes finished since the last pop
        self.finished = torch.zeros(3, device=device)
        # each agent's sum of returns over those episodes (a multi-agent env's)
        self.agent_returns = torch.zeros(num_agents if num_agents > 1 else 0, device=device)

    def reset(self) -> None:
        """Every env starts a new episode (``envs.reset()``): unfinished episodes are dropped."""
        self.returns.zero_()
        self.lengths.zero_()

    def update(self, rewards: Tensor, dones: Tensor) -> None:
        """Add one step ``(num_envs,)`` or a block of steps ``(num_envs, num_steps)`` of rewards and
        episode ends (terminated | truncated)."""
        if rewards.dim() == 1:
            self._update_step(rewards.float(), dones)
        else:
            self._update_block(rewards.float(), dones.bool())

    def _update_step(self, rewards: Tensor, dones: Tensor) -> None:
        self.returns += rewards
        self.lengths += 1
        done = dones.float()
        self.finished += torch.stack([self.returns @ done, self.lengths @ done, done.sum()])
        if self.num_agents > 1:
            self.agent_returns += (self.returns * done).view(-1, self.num_agents).sum(dim=0)
        keep = 1.0 - done
        self.returns *= keep
        self.lengths *= keep

    def _update_block(self, rewards: Tensor, dones: Tensor) -> None:
        # Cumulative return and length of each env's episode-so-far at every step, counted from
        # the block's start plus the carry of the episode running into it...
        num_steps = rewards.shape[1]
        cum_returns = rewards.cumsum(dim=1) + self.returns.unsqueeze(1)
        steps = torch.arange(1, num_steps + 1, device=rewards.device, dtype=torch.float32)
        cum_lengths = steps + self.lengths.unsqueeze(1)
        # ... minus their value at the last episode end strictly before the step.
        index = torch.where(dones, torch.arange(num_steps, device=rewards.device), -1)
        last_done = index.cummax(dim=1).values  # the latest end at or before each step (-1: none)
        before = torch.nn.functional.pad(last_done[:, :-1], (1, 0), value=-1)

        def since(cumulative: Tensor, position: Tensor) -> Tensor:
            base = cumulative.gather(1, position.clamp(min=0))
            return cumulative - torch.where(position >= 0, base, 0.0)

        done = dones.float()
        episode_returns, episode_lengths = since(cum_returns, before), since(cum_lengths, before)
        self.finished += torch.stack([(episode_returns * done).sum(), (episode_lengths * done).sum(), done.sum()])
        if self.num_agents > 1:
            self.agent_returns += (episode_returns * done).view(-1, self.num_agents, num_steps).sum(dim=(0, 2))
        self.returns = since(cum_returns, last_done)[:, -1].clone()
        self.lengths = since(cum_lengths, last_done)[:, -1].clone()

    def pop(self) -> Tensor:
        """``[sum of returns, sum of lengths, count]`` of the episodes finished since the last pop; for a multi-agent
        env followed by each agent's sum of returns (``3 + num_agents`` values)."""
        finished = self.finished.clone()
        self.finished.zero_()
        if self.num_agents == 1:
            return finished
        finished = torch.cat([finished, self.agent_returns])
        self.agent_returns.zero_()
        return finished

    def state_dict(self) -> dict[str, Any]:
        state = {"returns": self.returns.clone(), "lengths": self.lengths.clone(), "finished": self.finished.clone()}
        if self.num_agents > 1:
            state["agent_returns"] = self.agent_returns.clone()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        device = self.returns.device
        self.returns = state["returns"].to(device).clone()
        self.lengths = state["lengths"].to(device).clone()
        self.finished = state["finished"].to(device).clone()
        if self.num_agents > 1:
            self.agent_returns = state["agent_returns"].to(device).clone()
