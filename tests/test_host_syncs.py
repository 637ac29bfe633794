"""No host reads in the hot loops: on a GPU every read of a tensor's value (``.item()``, ``bool()``,
``nonzero()``...) stalls the device, so the env step, the rollout and replay loops and the episode
statistics must do without. Checked on the CPU by making every such read raise (the CUDA tests do
the same with torch.cuda.set_sync_debug_mode where a GPU is present)."""

import contextlib

import pytest
import torch

from rl_lightning import DQNModule, PPOModule, VPGModule
from rl_lightning.envs import make_envs, registered_env_ids

READS = ("__bool__", "__int__", "__float__", "__index__", "item", "tolist", "nonzero", "numpy")


@contextlib.contextmanager
def no_host_reads(monkeypatch):
    def read_back(*args, **kwargs):
        raise AssertionError("a tensor value was read back on the host")

    for name in READS:
        monkeypatch.setattr(torch.Tensor, name, read_back)
    try:
        yield
    finally:
        monkeypatch.undo()


def _gpu_like(envs):
    """What an env on a GPU does: no per-step value checks, a sync-free auto-reset."""
    envs.check_action_values = False
    envs._checked_once = True
    if hasattr(envs, "sync_free"):
        envs.sync_free = True
    return envs


@pytest.mark.parametrize("env_id", [env_id for env_id in registered_env_ids() if env_id != "CartPole-gpu"])
def test_env_steps_read_nothing_back(env_id, monkeypatch):
    envs = _gpu_like(make_envs(env_id, 16, seed=0))
    actions = [envs.random_actions(torch.Generator().manual_seed(t)) for t in range(40)]
    envs.reset()
    with no_host_reads(monkeypatch):
        for step_actions in actions:
            envs.step(step_actions)


def test_the_sync_free_cartpole_reset_keeps_the_contract():
    """The same dynamics and flags; only which random numbers a reset draws differs."""
    envs = _gpu_like(make_envs("CartPole-v1", 64, seed=0))
    obs, _ = envs.reset()
    for _ in range(300):
        state_before = envs.state.clone()
        obs, _, terminated, truncated, info = envs.step(torch.randint(0, 2, (64,)))
        done = terminated | truncated
        assert torch.equal(info["final_observation"][~done], obs[~done])
        assert (obs[done].abs() <= 0.05).all() and (envs.episode_steps[done] == 0).all()
        assert not torch.equal(envs.state, state_before)


@pytest.mark.parametrize(
    ("cls", "kwargs"),
    [
        (VPGModule, dict(num_envs=8, num_steps_per_rollout=20)),
        (PPOModule, dict(num_envs=8, num_steps_per_rollout=20, normalize_obs=True, normalize_rewards=True)),
        (DQNModule, dict(num_envs=8, learning_starts=16, batch_size=16)),
    ],
)
def test_collecting_data_reads_nothing_back(cls, kwargs, monkeypatch):
    module = cls(**kwargs)
    source = module.make_source(_gpu_like(make_envs("CartPole-v1", 8, seed=0)))
    if cls is DQNModule:
        source.fill()  # the random warm-up, then epsilon-greedy play
    with no_host_reads(monkeypatch):
        for _ in range(3):
            batch = source.next_batch()
    assert batch is not None and source.env_steps > 0
