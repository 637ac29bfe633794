"""The cost of a Dict observation and of action masking, next to the plain case, as ratios.

Three measurements, each a median of ``--repeats`` timings taken in turns (one interleaved run, one
CPU thread):

1. PPO's collection per env step (policy forward and sample, env step, rollout storage) on one
   torch bandit env seen three ways: a ``Box(8)`` observation (plain); the same 8 numbers as a Dict
   of two ``Box(4)`` keys (one MLP per key, concatenated); the ``Box(8)`` with an ``"action_mask"``
   key beside it (masked logits, the masked sampler).
2. PPO's update per minibatch (forward, masked log-probabilities and entropy, backward, Adam) for
   the same three.
3. gymnasium's Blackjack-v1 through the adapter: its native Tuple observation (a dict of one-hot
   tensors) vs ``FlattenObservation`` (one Box), env steps per second with random actions.

    .venv/bin/python benchmarks/bench_spaces.py                # ~1 minute, writes results/spaces.md
    .venv/bin/python benchmarks/bench_spaces.py --repeats 3 --no-write
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gymnasium as gym
import numpy as np
import torch

from rl_lightning.data.actor_critic import ActorCriticSource
from rl_lightning.envs import VectorEnv, make_envs
from rl_lightning.envs.spaces import ACTION_MASK_KEY, OBSERVATION_KEY, TensorTree
from rl_lightning.nets import ActorCritic

RESULTS_PATH = Path(__file__).parent / "results" / "spaces.md"
VARIANTS = ("plain", "dict", "masked")


class Bandit(VectorEnv):
    """8 random numbers, 4 actions, one-step episodes; the observation as one of ``VARIANTS``."""

    def __init__(self, num_envs: int, variant: str, seed: int = 0):
        box = gym.spaces.Box(-1.0, 1.0, (8,), np.float32)
        self.variant = variant
        if variant == "dict":
            half = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
            self.single_observation_space = gym.spaces.Dict({"a": half, "b": half})
        elif variant == "masked":
            mask = gym.spaces.Box(0, 1, (4,), np.bool_)
            self.single_observation_space = gym.spaces.Dict({OBSERVATION_KEY: box, ACTION_MASK_KEY: mask})
        else:
            self.single_observation_space = box
        self.single_action_space = gym.spaces.Discrete(4)
        super().__init__(num_envs, seed)

    def _observe(self) -> torch.Tensor | TensorTree:
        values = torch.rand(self.num_envs, 8, generator=self.generator) * 2 - 1
        if self.variant == "dict":
            return TensorTree({"a": values[:, :4], "b": values[:, 4:]})
        if self.variant == "masked":
            mask = torch.rand(self.num_envs, 4, generator=self.generator) < 0.75
            mask[:, 0] = True
            return TensorTree({OBSERVATION_KEY: values, ACTION_MASK_KEY: mask})
        return values

    def _reset_all(self):
        return self._observe()

    def _step(self, actions):
        reward = (actions == 1).float()
        obs = self._observe()
        done = torch.ones(self.num_envs, dtype=torch.bool)
        return obs, reward, done, torch.zeros_like(done), {"final_observation": obs}


def _sources(num_envs: int, num_steps: int) -> dict[str, ActorCriticSource]:
    sources = {}
    for variant in VARIANTS:
        envs = Bandit(num_envs, variant)
        torch.manual_seed(0)
        model = ActorCritic(envs.single_observation_space, envs.single_action_space)
        sources[variant] = ActorCriticSource(envs, model, num_steps, update_epochs=1, num_minibatches=4)
    return sources


def _time_collect(source: ActorCriticSource) -> float:
    start = time.perf_counter()
    source.collect()
    return (time.perf_counter() - start) / (source.num_steps * source.envs.num_envs)


def _time_update(source: ActorCriticSource, optimizer: torch.optim.Optimizer, updates: int) -> float:
    collection = source.collect()
    all_obs, all_actions, _, _, all_advantages, all_returns = collection.entries  # (env, t) entries
    start = time.perf_counter()
    for index in range(updates):
        indices = collection.order[index % len(collection.order)]
        obs = all_obs.index_select(0, indices)
        logprobs, entropy, values = source.model.evaluate(obs, all_actions.index_select(0, indices))
        loss = -(logprobs * all_advantages.index_select(0, indices)).mean() - 0.01 * entropy.mean()
        loss = loss + (values - all_returns.index_select(0, indices)).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return (time.perf_counter() - start) / updates


def _time_blackjack(envs: VectorEnv, steps: int, generator: torch.Generator) -> float:
    envs.reset()
    start = time.perf_counter()
    for _ in range(steps):
        envs.step(envs.random_actions(generator))
    return (time.perf_counter() - start) / (steps * envs.num_envs)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--num_envs", type=int, default=64)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)

    sources = _sources(args.num_envs, 128)
    optimizers = {name: torch.optim.Adam(source.model.parameters(), lr=1e-4) for name, source in sources.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        blackjack = {
            "Tuple (dict of one-hots)": make_envs("Blackjack-v1", args.num_envs, seed=0),
            "FlattenObservation (Box)": make_envs(
                "Blackjack-v1", args.num_envs, seed=0, wrappers=["gymnasium.wrappers.FlattenObservation"]
            ),
        }
    generator = torch.Generator().manual_seed(0)
    collect = {name: [] for name in VARIANTS}
    update = {name: [] for name in VARIANTS}
    adapter = {name: [] for name in blackjack}
    for name in VARIANTS:  # warm-up
        _time_collect(sources[name])
        _time_update(sources[name], optimizers[name], 4)
    for _ in range(args.repeats):
        for name in VARIANTS:
            collect[name].append(_time_collect(sources[name]))
            update[name].append(_time_update(sources[name], optimizers[name], 32))
        for name, envs in blackjack.items():
            adapter[name].append(_time_blackjack(envs, 200, generator))

    def table(title: str, unit: str, scale: float, results: dict[str, list[float]], base: str) -> list[str]:
        medians = {name: statistics.median(values) for name, values in results.items()}
        lines = [f"### {title}", "", f"| variant | {unit} | ratio to {base} |", "|---|---|---|"]
        for name, median in medians.items():
            lines.append(f"| {name} | {median * scale:.2f} | {median / medians[base]:.2f} |")
        return [*lines, ""]

    lines = [
        "# The cost of Dict observations and action masks",
        "",
        f"`python benchmarks/bench_spaces.py` ({platform.processor() or platform.machine()}, torch "
        f"{torch.__version__}, one thread, {args.num_envs} envs, median of {args.repeats} interleaved repeats).",
        "",
        *table("PPO collection per env step (policy + env + storage)", "µs per env step", 1e6, collect, "plain"),
        *table("PPO update per minibatch of 2,048 entries", "ms per update", 1e3, update, "plain"),
        *table(
            "Blackjack-v1 through the gymnasium adapter, random actions",
            "µs per env step",
            1e6,
            adapter,
            "FlattenObservation (Box)",
        ),
    ]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        RESULTS_PATH.write_text(text + "\n")


if __name__ == "__main__":
    main()
