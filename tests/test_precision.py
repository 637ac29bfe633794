"""precision="bf16-mixed" on CPU: both modules still learn the probes and CartPole, and the
returns / TD targets stay float32 while the networks run in bfloat16 under autocast.

The probe tolerance is max(the float32 tests' tolerance, bf16's epsilon): a network evaluated
under autocast cannot be closer to a target of 1.0 than bf16 can represent. Each probe network
is checked twice, in float32 and under ``torch.autocast("cpu", dtype=torch.bfloat16)``.
"""

import lightning as L
import pytest
import torch
from probe_settings import (
    DQN_PROBE_LEARNING_STARTS,
    DQN_PROBE_UPDATES,
    DQN_PROBES,
    GAMMA,
    VPG_PROBES,
    dqn_probe_module,
    vpg_probe_module,
)

import rl_lightning.algos.dqn as dqn_algo
import rl_lightning.algos.vpg as vpg_algo
from rl_lightning import DQNModule, VPGModule
from rl_lightning.data.rollout import first_episode_stats


def _first_episode_return(module: VPGModule) -> float:
    rollout = module.latest_rollout()
    return first_episode_stats(rollout.rewards, rollout.dones).returns.mean().item()


BF16_EPS = torch.finfo(torch.bfloat16).eps  # 2**-7 = 0.0078125


class _Recorder(L.Callback):
    """Keeps every training step's loss and the VPG rollout's mean first-episode return."""

    def __init__(self):
        self.losses: list[torch.Tensor] = []
        self.returns: list[float] = []

    def on_update_end(self, trainer, pl_module, loss):  # every update
        self.losses.append(loss)
        if isinstance(pl_module, VPGModule):
            self.returns.append(_first_episode_return(pl_module))


def _fit_bf16(module: L.LightningModule, max_steps: int) -> _Recorder:
    recorder = _Recorder()
    trainer = L.Trainer(
        accelerator="cpu",
        precision="bf16-mixed",
        max_steps=max_steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[recorder],
    )
    trainer.fit(module)
    return recorder


def _assert_close_in_fp32_and_bf16(network: torch.nn.Module, obs, expected, tolerance: float, softmax: bool) -> None:
    obs, expected = torch.tensor(obs), torch.tensor(expected)
    with torch.no_grad():
        outputs_fp32 = network(obs)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            outputs_bf16 = network(obs)
    assert outputs_fp32.dtype == torch.float32 and outputs_bf16.dtype == torch.bfloat16
    for name, outputs in (("float32", outputs_fp32), ("bf16 autocast", outputs_bf16)):
        values = outputs.float().softmax(-1) if softmax else outputs.float()
        torch.testing.assert_close(values, expected, atol=tolerance, rtol=0, msg=lambda m, n=name: f"{n}: {m}")


# -- probes -------------------------------------------------------------------------------


@pytest.mark.learning
@pytest.mark.parametrize(("probe", "env_steps", "obs", "expected_probs"), VPG_PROBES)
def test_vpg_bf16_mixed_learns_probe_policy_within_bf16_eps(probe, env_steps, obs, expected_probs):
    """Settings of tests/algos/test_vpg_learning.py; action probabilities within max(2e-3, eps)
    both in float32 and under bf16 autocast (measured: 6e-6 for Probe4, 1.2e-4 for Probe5)."""
    module = vpg_probe_module(probe)
    _fit_bf16(module, max_steps=env_steps // (4 * 16))
    assert module.policy_network.encoder[0].weight.dtype == torch.float32  # autocast keeps fp32 master weights
    tolerance = max(2e-3, BF16_EPS)
    _assert_close_in_fp32_and_bf16(module.policy_network, obs, expected_probs, tolerance, softmax=True)


@pytest.mark.learning
@pytest.mark.parametrize("probe", sorted(DQN_PROBES))
def test_dqn_bf16_mixed_learns_probe_q_values_within_bf16_eps(probe):
    """Settings of tests/algos/test_dqn_probes.py; Q-values within max(seed tolerance, eps) both
    in float32 and under bf16 autocast (measured float32 errors 9e-4..3.1e-3, autocast 0..1.7e-3:
    bf16 rounds 0.99 to 0.98828125)."""
    obs, expected, seed_tolerance = DQN_PROBES[probe]
    module = dqn_probe_module(probe)
    _fit_bf16(module, max_steps=DQN_PROBE_UPDATES)
    assert module.env_steps == DQN_PROBE_LEARNING_STARTS + DQN_PROBE_UPDATES * 4
    tolerance = max(seed_tolerance, BF16_EPS)
    _assert_close_in_fp32_and_bf16(module.q_network, obs, expected, tolerance, softmax=False)


# -- float32 returns and TD targets under autocast --------------------------------------------


def _spy(monkeypatch, module, name: str, calls: list, inspect=None):
    """Replace ``module.name`` by a wrapper that records (args, result, autocast dtype or None,
    ``inspect(*args)``), all taken at call time, i.e. inside ``training_step``."""
    original = getattr(module, name)

    def wrapper(*args):
        result = original(*args)
        autocast_dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None
        calls.append((args, result, autocast_dtype, inspect(*args) if inspect is not None else None))
        return result

    monkeypatch.setattr(module, name, wrapper)


def _reference_returns(rewards: torch.Tensor, dones: torch.Tensor, gamma: float) -> torch.Tensor:
    returns, running = (
        torch.zeros_like(rewards, dtype=torch.float64),
        torch.zeros(rewards.shape[0], dtype=torch.float64),
    )
    for t in reversed(range(rewards.shape[1])):
        running = rewards[:, t].double() + gamma * (~dones[:, t]).double() * running
        returns[:, t] = running
    return returns


def test_vpg_returns_and_loss_are_float32_under_bf16_autocast(monkeypatch):
    """Lightning runs training_step under CPU bf16 autocast; the policy's logits are bf16 there,
    yet returns, log-probs and the loss are float32 and the returns equal a float64 reference."""
    returns_calls, logprob_calls, loss_calls = [], [], []
    _spy(monkeypatch, vpg_algo, "compute_returns", returns_calls)

    def logits_dtype(obs, actions, policy):
        with torch.no_grad():
            return policy(obs).dtype

    _spy(monkeypatch, vpg_algo, "compute_logprobs", logprob_calls, inspect=logits_dtype)
    _spy(monkeypatch, vpg_algo, "compute_reinforce_loss", loss_calls)
    module = VPGModule(env_id="CartPole-v1", num_envs=8, num_steps_per_rollout=200, seed=1)
    recorder = _fit_bf16(module, max_steps=2)

    assert len(returns_calls) == len(logprob_calls) == len(loss_calls) == 2
    for (rewards, dones, gamma), returns, autocast_dtype, _ in returns_calls:
        assert autocast_dtype == torch.bfloat16
        assert returns.dtype == torch.float32
        # Random-policy returns reach ~40, where bf16's spacing is 0.25: only float32 gets this close.
        assert returns.max() > 32
        torch.testing.assert_close(returns.double(), _reference_returns(rewards, dones, gamma), atol=1e-4, rtol=0)
    for _args, logprobs, _, logits_dtype in logprob_calls:
        assert logits_dtype == torch.bfloat16  # the network itself does run in bf16 ...
        assert logprobs.dtype == torch.float32  # ... its log-probabilities do not
    for (returns, logprobs, weights), objective, _, _ in loss_calls:
        assert returns.dtype == logprobs.dtype == weights.dtype == objective.dtype == torch.float32
    for loss in recorder.losses:
        assert loss.dtype == torch.float32 and torch.isfinite(loss)


def test_dqn_td_targets_and_loss_are_float32_under_bf16_autocast(monkeypatch):
    """Under bf16 autocast the Q-values and next-state values are bf16, the TD targets and the
    loss float32, and the targets equal r + gamma (1 - terminated) next_q in float64."""
    target_calls, loss_calls = [], []
    _spy(monkeypatch, dqn_algo, "compute_td_target", target_calls)
    _spy(monkeypatch, dqn_algo, "compute_td_loss", loss_calls)
    module = DQNModule(env_id="CartPole-v1", num_envs=4, learning_starts=64, batch_size=32, gamma=GAMMA, seed=0)
    recorder = _fit_bf16(module, max_steps=3)

    assert len(target_calls) == len(loss_calls) == 3
    for (rewards, terminated, next_q, gamma), targets, autocast_dtype, _ in target_calls:
        assert autocast_dtype == torch.bfloat16
        assert next_q.dtype == torch.bfloat16  # the target network ran in bf16 ...
        assert targets.dtype == torch.float32  # ... the bootstrapped target does not
        expected = rewards.double() + gamma * (~terminated).double() * next_q.double()
        torch.testing.assert_close(targets.double(), expected, atol=1e-6, rtol=0)
    for (q_values, targets, _loss_name), loss, _, _ in loss_calls:
        assert q_values.dtype == torch.bfloat16 and targets.dtype == torch.float32
        assert loss.dtype == torch.float32 and torch.isfinite(loss)
    assert [loss.dtype for loss in recorder.losses] == [torch.float32] * 3


# -- CartPole -------------------------------------------------------------------------------


@pytest.mark.learning
def test_vpg_bf16_mixed_improves_on_cartpole():
    """Default VPG (32 envs x 500 steps, seed 1) under bf16-mixed: from a random policy's ~22 the
    mean first-episode return reaches >= 300 within 15 updates, and the last five average >= 150
    (seeds 1-8 measured on an AVX-512 CPU: max 498-500, last five 414-498)."""
    recorder = _fit_bf16(VPGModule(seed=1), max_steps=15)
    returns = recorder.returns
    assert len(returns) == 15
    assert returns[0] < 30, returns  # it started from a random policy
    assert max(returns) >= 300, returns
    assert sum(returns[-5:]) / 5 >= 150, returns
