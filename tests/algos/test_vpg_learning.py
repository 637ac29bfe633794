"""VPG learns: the probes' optimal policies and a solved CartPole, seeded and on CPU."""

import lightning as L
import pytest
import torch
from probe_settings import VPG_PROBES, vpg_probe_module

from rl_lightning import VPGModule
from rl_lightning.data.rollout import first_episode_stats

# Every test here asserts a learning threshold (run them alone: pytest -m learning).
pytestmark = pytest.mark.learning


def _first_episode_return(module: VPGModule) -> float:
    rollout = module.latest_rollout()
    return first_episode_stats(rollout.rewards, rollout.dones).returns.mean().item()


def _fit(module: VPGModule, max_steps: int, callbacks=()) -> L.Trainer:
    trainer = L.Trainer(
        max_steps=max_steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=list(callbacks),
    )
    trainer.fit(module)
    return trainer


@pytest.mark.parametrize(("probe", "env_steps", "obs", "expected_probs"), VPG_PROBES)
def test_vpg_probe_learns_optimal_policy_within_2e_3(probe, env_steps, obs, expected_probs):
    """Probe4: always action 1; Probe5: action = obs. Action probabilities within 2e-3."""
    module = vpg_probe_module(probe)
    _fit(module, max_steps=env_steps // (4 * 16))
    with torch.no_grad():
        probs = module.policy_network(torch.tensor(obs)).softmax(-1)
    torch.testing.assert_close(probs, torch.tensor(expected_probs), atol=2e-3, rtol=0)


class _StopWhenSolved(L.Callback):
    def __init__(self, threshold: float):
        self.threshold = threshold
        self.returns: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.returns.append(_first_episode_return(pl_module))
        if self.returns[-1] >= self.threshold:
            trainer.should_stop = True


def test_vpg_solves_cartpole_mean_first_episode_return_475_within_default_budget():
    """Default hyper-parameters (32 envs x 500 steps, lr 2e-2) reach a mean first-episode
    return >= 475 within train_vpg.py's default budget of 50 updates (seed 1 needs ~14)."""
    stopper = _StopWhenSolved(475.0)
    _fit(VPGModule(seed=1), max_steps=50, callbacks=[stopper])
    assert max(stopper.returns) >= 475.0, stopper.returns
    assert stopper.returns[0] < 100  # it started from a random policy


@pytest.mark.parametrize(
    ("env_id", "obs", "targets"),
    [
        ("ContinuousProbe1-v0", [[0.0]], [[0.5]]),
        ("ContinuousProbe2-v0", [[-1.0], [1.0]], [[-0.5, 0.5], [0.5, -0.5]]),
    ],
)
def test_vpg_learns_the_continuous_probes_mean_action_within_0_05(env_id, obs, targets):
    """A Gaussian policy (state-independent log-std) on one-step episodes with reward
    -|a - target(obs)|^2: after 300 updates of 64 x 8 env steps the mean action is within 0.05 of
    the target in every dimension and the std has shrunk below 0.1 (from 1)."""
    module = VPGModule(env_id=env_id, num_envs=64, num_steps_per_rollout=8, lr=1e-2, seed=0)
    _fit(module, max_steps=300)
    with torch.no_grad():
        mean = module.policy_network(torch.tensor(obs))
    torch.testing.assert_close(mean, torch.tensor(targets), atol=0.05, rtol=0)
    assert module.policy_network.head.log_std.exp().max() < 0.1
    greedy = module.act(torch.tensor(obs), greedy=True)
    assert torch.equal(greedy, mean)


def test_vpg_learns_image_probe5_through_the_cnn_within_1e_3():
    """ImageProbe5 (Probe5 as a 36x36 RGB image): action = the lit half, probabilities within 1e-3."""
    from rl_lightning.envs.probes import ImageProbe5
    from rl_lightning.nets import ImageEncoder

    module = vpg_probe_module(5, env_id="ImageProbe5-v0")
    assert isinstance(module.policy_network.encoder, ImageEncoder)
    _fit(module, max_steps=100)
    with torch.no_grad():
        probs = module.policy_network(ImageProbe5._image(torch.tensor([[0.0], [1.0]]))).softmax(-1)
    torch.testing.assert_close(probs, torch.tensor([[1.0, 0.0], [0.0, 1.0]]), atol=1e-3, rtol=0)
