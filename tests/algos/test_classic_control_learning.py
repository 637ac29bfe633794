"""Learning on gymnasium's classic-control suite, natively in torch and through the gymnasium adapter."""

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import EarlyStopping

from rl_lightning import DQNModule, VPGModule
from rl_lightning.callbacks import Evaluation, evaluate_policy

# Every test here asserts a learning threshold (run them alone: pytest -m learning).
pytestmark = pytest.mark.learning


def _solve(module, threshold: float, max_steps: int, every: int) -> Evaluation:
    evaluation = Evaluation(every_n_env_steps=every, num_eval_episodes=32)
    stop = EarlyStopping(
        monitor="eval/episodic_return",
        stopping_threshold=threshold,
        mode="max",
        patience=10**9,
        check_on_train_epoch_end=True,
    )
    trainer = L.Trainer(
        max_steps=max_steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[evaluation, stop],
    )
    trainer.fit(module)
    return evaluation


def test_dqn_defaults_solve_native_acrobot_greedy_mean_return_at_least_minus_100():
    """DQNModule's CartPole defaults on the torch Acrobot-v1, seed 1: a greedy mean return >= -100
    over 32 episodes within 5,000 updates (it gets there at ~25k env steps, ~5 s of one CPU)."""
    evaluation = _solve(DQNModule(env_id="Acrobot-v1", seed=1), -100, 5_000, 4_000)
    assert evaluation.last_metrics["eval/episodic_return"] >= -100, evaluation.history


def test_the_same_dqn_settings_solve_acrobot_through_the_gymnasium_adapter():
    """The same settings on gymnasium's own Acrobot-v1 (env_backend="gymnasium"), seed 0: >= -100."""
    module = DQNModule(env_id="Acrobot-v1", env_backend="gymnasium", seed=0)
    assert type(module.make_envs(1, 0)).__name__ == "GymnasiumVectorEnv"
    evaluation = _solve(module, -100, 5_000, 4_000)
    assert evaluation.last_metrics["eval/episodic_return"] >= -100, evaluation.history


def test_vpg_improves_pendulum_by_at_least_800_over_its_initial_random_policy():
    """Pendulum-v1 (a Box action, a Gaussian policy): the mean return of the sampled policy over 64
    episodes rises from ~-1155 (the untrained policy, about a random one's) by >= 800 after 300
    updates of 64 envs x 200 steps (full episodes), lr 3e-3, gamma 0.95."""
    module = VPGModule(env_id="Pendulum-v1", num_envs=64, num_steps_per_rollout=200, lr=3e-3, gamma=0.95, seed=0)
    envs = module.make_envs(64, 7)
    torch.manual_seed(0)
    before = evaluate_policy(lambda obs: module.act(obs), envs, seed=7).returns.mean().item()
    L.Trainer(
        max_steps=300, logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False
    ).fit(module)
    torch.manual_seed(0)
    after = evaluate_policy(lambda obs: module.act(obs), envs, seed=7).returns.mean().item()
    assert before < -1000 and after - before >= 800, (before, after)
