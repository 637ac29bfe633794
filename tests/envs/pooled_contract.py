"""The contract checks the C++ backends share (tests/envs/test_envpool.py, tests/envs/test_ale_vector.py): rollouts
of their tensors, the one-env-at-a-time references they must equal, seeding, checkpoints and the Atari preset's
score."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import pytest
import torch
from quiet_trainer import quiet_fit

from rl_lightning import DQNModule, PPOModule
from rl_lightning.envs.base import VectorEnv

KEYS = ("obs", "final", "reward", "terminated", "truncated", "game_reward", "game_over")


def rollout(env: VectorEnv, actions: torch.Tensor, reset_seed: int | None = None) -> dict[str, torch.Tensor]:
    """``env``'s outputs for ``actions`` ``(num_steps, num_envs)``, stacked on dim 0 (``obs`` has the reset's first)."""
    obs, _ = env.reset(seed=reset_seed)
    history: dict[str, list[torch.Tensor]] = {key: [] for key in KEYS}
    history["obs"].append(obs)
    for step_actions in actions:
        obs, reward, terminated, truncated, info = env.step(step_actions)
        values = obs, info["final_observation"], reward, terminated, truncated, info["game_reward"], info["game_over"]
        for key, value in zip(KEYS, values, strict=True):
            history[key].append(value)
    return {key: torch.stack(values) for key, values in history.items()}


def random_actions(num_steps: int, num_envs: int, num_actions: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, num_actions, (num_steps, num_envs), generator=torch.Generator().manual_seed(seed))


def assert_equals_reference(ours: dict[str, torch.Tensor], reference: list[dict[str, list]]) -> None:
    """Env ``i`` of ``ours`` (a :func:`rollout`) equals ``reference[i]``: lists of numpy values per step under the
    same keys (``obs`` with the reset's first, ``final``: the obs each step reached before any reset)."""
    for env_index, expected in enumerate(reference):
        for key in KEYS:
            want = np.stack(expected[key])
            got = ours[key][:, env_index].numpy()
            assert got.shape == want.shape, (key, env_index)
            mismatch = np.flatnonzero((got != want).reshape(len(got), -1).any(axis=1))
            assert len(mismatch) == 0, f"env {env_index}: {key} differs from the reference at step(s) {mismatch[:5]}"


def check_step_dtypes(env: VectorEnv, obs_shape: tuple[int, ...], obs_dtype: torch.dtype, atari: bool) -> None:
    """Shapes and dtypes of a reset and a step (and of the preset's info where ``atari``)."""
    num_envs = env.num_envs
    assert env.obs_shape == obs_shape and env.obs_dtype == obs_dtype
    assert env.observation_space.shape == (num_envs, *obs_shape)
    obs, info = env.reset()
    assert obs.shape == (num_envs, *obs_shape) and obs.dtype == obs_dtype and info == {}
    obs, reward, terminated, truncated, info = env.step(env.random_actions())
    assert obs.shape == (num_envs, *obs_shape) and obs.dtype == obs_dtype and obs.device == env.device
    assert info["final_observation"].shape == obs.shape and info["final_observation"].dtype == obs_dtype
    assert reward.shape == terminated.shape == truncated.shape == (num_envs,)
    assert reward.dtype == torch.float32 and terminated.dtype == truncated.dtype == torch.bool
    if atari:
        assert info["game_reward"].dtype == torch.float32 and info["game_reward"].shape == (num_envs,)
        assert info["game_over"].dtype == torch.bool and info["game_over"].shape == (num_envs,)
    else:
        assert "game_reward" not in info and "game_over" not in info


def check_seeding(make: Callable[[int], VectorEnv], num_steps: int = 40) -> None:
    """The same seed gives the same trajectories, another seed others; ``reset(seed=s)`` starts over as a fresh env of
    seed ``s`` does, a ``reset()`` without one goes on with each env's RNG."""
    first, same, other = make(1), make(1), make(2)
    actions = random_actions(num_steps, first.num_envs, first.num_actions)
    run, again = rollout(first, actions), rollout(same, actions)
    assert all(torch.equal(run[key], again[key]) for key in run)
    assert not torch.equal(run["obs"], rollout(other, actions)["obs"])
    assert torch.equal(rollout(other, actions, reset_seed=1)["obs"], run["obs"])  # reseeded: the envs of seed 1
    assert not torch.equal(rollout(first, actions)["obs"][1:], run["obs"][1:])  # no seed: new episodes
    for env in first, same, other:
        env.close()


def check_first_step_without_reset(make: Callable[[int], VectorEnv]) -> None:
    """A step before any reset starts where the seeded reset would."""
    stepped, reset = make(3), make(3)
    actions = torch.ones(stepped.num_envs, dtype=torch.int64)
    reset.reset()
    assert torch.equal(stepped.step(actions)[0], reset.step(actions)[0])
    stepped.close()
    reset.close()


def check_state_dict(env: VectorEnv, env_id: str) -> None:
    """``restorable=False`` stated; a load warns, restarts fresh (a reset obs) and refuses another env's state."""
    assert env.restorable is False
    env.reset()
    for _ in range(3):
        env.step(env.random_actions())
    state = env.state_dict()
    assert state["restorable"] is False and state["env_id"] == env_id and state["num_envs"] == env.num_envs
    with pytest.warns(UserWarning, match="cannot restore the saved state.*fresh reset"):
        env.load_state_dict(state)
    obs, *_ = env.step(env.random_actions())  # the envs go on from a fresh reset
    assert obs.shape == (env.num_envs, *env.obs_shape)
    with pytest.raises(ValueError, match="state is for env id 'Other-v0'"):
        env.load_state_dict({**state, "env_id": "Other-v0"})


def check_life_loss_episodes(run: dict[str, torch.Tensor], lives: int = 5) -> None:
    """With ``terminal_on_life_loss``: every game that ended within ``run`` (a :func:`rollout`, no time limit reached)
    after starting in it held ``lives`` training episodes, the last of them ending with the game over."""
    ends = run["terminated"] | run["truncated"]
    assert not (run["game_over"] & ~ends).any()  # a game over ends the training episode too
    assert not run["truncated"].any()
    checked = 0
    for env_index in range(ends.shape[1]):
        game_ends = torch.nonzero(run["game_over"][:, env_index]).flatten().tolist()
        for start, stop in itertools.pairwise(game_ends):
            assert int(ends[start + 1 : stop + 1, env_index].sum()) == lives
            checked += 1
    assert checked >= 1, "no whole game in the rollout: play longer"


def check_ppo_and_dqn_update(env_id: str, backend: str, env_class: type[VectorEnv], ppo_envs: int) -> None:
    """A few PPO updates (``ppo_envs`` envs x 8 steps, 4 minibatch updates) and DQN updates after 64 warm-up steps on
    ``backend`` with the preset: the module steps that backend's envs and its weights stay finite."""
    options = {"env_backend": backend, "env_kwargs": {"atari": True, "num_threads": 1}}
    ppo = PPOModule(env_id=env_id, num_envs=ppo_envs, num_steps_per_rollout=8, num_minibatches=2, **options)
    quiet_fit(ppo, 4)
    assert ppo.source.env_steps == 8 * ppo_envs and isinstance(ppo.source.envs, env_class)
    assert all(torch.isfinite(p).all() for p in ppo.parameters())
    dqn = DQNModule(env_id=env_id, num_envs=2, buffer_size=500, learning_starts=64, batch_size=8, **options)
    quiet_fit(dqn, 4)
    assert isinstance(dqn.source.envs, env_class) and dqn.source.env_steps >= 64
    assert all(torch.isfinite(p).all() for p in dqn.parameters())
