"""The shared base (rl_lightning/algos/base.py): what every algorithm gets from it."""

import inspect
import warnings

import lightning as L
import pytest
import torch
from torch import Tensor

from rl_lightning import DQNModule, PPOModule, RLModule, VPGModule
from rl_lightning.callbacks import Evaluation
from rl_lightning.data import RolloutSource, RolloutTensors
from rl_lightning.nets import PolicyNetwork
from rl_lightning.seeding import seeded


def _trainer(**kwargs) -> L.Trainer:
    defaults = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    return L.Trainer(**{**defaults, **kwargs})


class MinimalPolicyGradient(RLModule):
    """A new algorithm is its loss, its source settings and its network: one-step policy gradient
    (reward minus the batch mean as the advantage), nothing else."""

    log_per_epoch = True

    def __init__(self, env_id: str = "Probe5-v0", num_envs: int = 16, lr: float = 1e-2, seed: int = 0):
        super().__init__(env_id, num_envs, seed)
        self.save_hyperparameters()
        with seeded(seed):
            self.policy = PolicyNetwork(self.observation_space, self.action_space, hidden_sizes=(16,))

    def make_source(self, envs):
        return RolloutSource(envs, self.policy, num_steps=1)

    def policy_actions(self, obs: Tensor, greedy: bool) -> Tensor:
        return self.policy.act(obs, greedy)

    @property
    def env_steps_per_training_step(self) -> float:
        return self.hparams.num_envs * self.world_size

    def update_loss(self, batch: RolloutTensors) -> Tensor:
        advantages = batch.rewards - batch.rewards.mean()
        loss = -(self.policy.log_prob(batch.obs, batch.actions) * advantages).mean()
        self.log_charts()
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.policy.parameters(), lr=self.hparams.lr)


@pytest.mark.learning
def test_a_minimal_algorithm_on_the_base_learns_probe5_and_gets_everything_else():
    """Probe5 (+1 when the action equals the obs): the learned policy's greedy return is 1.0 on
    32 evaluation episodes, and the base gives it env steps, episode charts and evaluation."""
    module = MinimalPolicyGradient()
    evaluation = Evaluation(every_n_env_steps=10**9, num_eval_episodes=32)
    trainer = _trainer(max_steps=150, callbacks=[evaluation])
    trainer.fit(module)
    assert module.env_steps == 150 * 16
    assert evaluation.last_metrics["eval/episodic_return"] == 1.0
    assert trainer.callback_metrics["charts/episodic_length"] == 1.0
    assert module.act(torch.tensor([[0.0], [1.0]]), greedy=True).tolist() == [0, 1]


def test_act_has_one_signature_and_the_same_behaviour_for_both_modules():
    assert inspect.signature(VPGModule.act) == inspect.signature(DQNModule.act) == inspect.signature(RLModule.act)
    for module in (VPGModule(seed=0), DQNModule(seed=0)):
        assert module.act(torch.zeros(3, 4)).shape == (3,)  # greedy defaults to False
        assert module.act(torch.zeros(2, 5, 4), greedy=True).shape == (2, 5)
        with pytest.raises(ValueError, match=r"obs must have shape \(\*batch, 4\).*got \(3,\)"):
            module.act(torch.zeros(3))
        with pytest.raises(TypeError, match="greedy"):
            module.act(torch.zeros(1, 4), greedy="yes")


def test_both_modules_log_the_same_charts_and_progress_bar_fields():
    keys = {}
    bars = {}
    for module in (
        VPGModule(env_id="Probe3-v0", num_envs=4, num_steps_per_rollout=8),
        DQNModule(env_id="Probe3-v0", num_envs=4, learning_starts=8, batch_size=8),
    ):
        trainer = _trainer(max_steps=4, log_every_n_steps=2)
        trainer.fit(module)
        keys[type(module)] = {key for key in trainer.callback_metrics if key.startswith("charts/")}
        bars[type(module)] = set(trainer.progress_bar_metrics)
        # Probe3's episodes: two steps, return 1, identical whatever the algorithm
        assert trainer.callback_metrics["charts/episodic_return"] == 1.0
        assert trainer.callback_metrics["charts/episodic_length"] == 2.0
    assert keys[VPGModule] | {"charts/epsilon"} == keys[DQNModule]
    assert bars[VPGModule] == bars[DQNModule] == {"env_steps", "SPS", "return"}


@pytest.mark.parametrize(("saved_cls", "loaded_cls"), [(DQNModule, VPGModule), (VPGModule, DQNModule)])
def test_a_checkpoint_of_the_other_algorithm_is_a_clear_error(tmp_path, saved_cls, loaded_cls):
    trainer = _trainer(max_steps=2)
    trainer.fit(
        saved_cls(
            env_id="Probe4-v0",
            num_envs=4,
            **({"num_steps_per_rollout": 4} if saved_cls is VPGModule else {"learning_starts": 4, "batch_size": 4}),
        )
    )
    path = tmp_path / "other.ckpt"
    trainer.save_checkpoint(path)
    message = f"saved by {saved_cls.__name__} but is loaded into {loaded_cls.__name__}"
    with pytest.raises(ValueError, match=message):
        loaded_cls.load_from_checkpoint(path)
    with pytest.raises(ValueError, match=message):
        _trainer(max_steps=3).fit(loaded_cls(env_id="Probe4-v0", num_envs=4), ckpt_path=path)


def test_dqn_on_a_box_action_space_names_the_space_and_the_algorithms_that_can():
    with pytest.raises(ValueError, match=r"DQNModule cannot learn 'ContinuousProbe1-v0'.*Box.*use VPGModule"):
        DQNModule(env_id="ContinuousProbe1-v0")


@pytest.mark.parametrize("cls", [VPGModule, DQNModule])
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(lr=float("inf")), ValueError, "lr"),
        (dict(lr=float("nan")), ValueError, "lr"),
        (dict(gamma="0.9"), TypeError, "gamma"),
        (dict(hidden_sizes=(2.5, 3)), TypeError, "hidden_sizes"),
        (dict(hidden_sizes="64"), TypeError, "hidden_sizes"),
        (dict(num_envs=True), TypeError, "num_envs"),
        (dict(seed=-1), ValueError, "seed"),
        (dict(seed=2**63), ValueError, "seed"),
        (dict(env_id=3), TypeError, "env_id"),
    ],
)
def test_one_validation_style_for_both_modules(cls, kwargs, error, match):
    with pytest.raises(error, match=match):
        cls(**kwargs)


@pytest.mark.parametrize(
    ("cls", "kwargs"),
    [
        (VPGModule, dict(importance_weighting="false")),
        (VPGModule, dict(normalize_returns=1)),
        (VPGModule, dict(full_reset="true")),
        (DQNModule, dict(double_dqn="false")),
        (DQNModule, dict(checkpoint_buffer=0)),
    ],
)
def test_strings_and_ints_are_not_coerced_to_bools(cls, kwargs):
    with pytest.raises(TypeError, match=f"{next(iter(kwargs))} must be a bool"):
        cls(**kwargs)


def test_importing_installs_no_warning_filter_and_fit_removes_its_own():
    import importlib

    import rl_lightning

    before = list(warnings.filters)
    importlib.reload(rl_lightning)
    assert warnings.filters == before
    _trainer(max_steps=1).fit(VPGModule(env_id="Probe1-v0", num_envs=2, num_steps_per_rollout=2))
    assert warnings.filters == before


@pytest.mark.parametrize(
    ("cls", "env_id"), [(VPGModule, "CartPole-v1"), (DQNModule, "CartPole-v1"), (PPOModule, "Pendulum-v1")]
)
def test_act_follows_gymnasium_habits_numpy_in_numpy_out_tensors_in_tensors_out(cls, env_id):
    """``env.step(module.act(obs))`` on gymnasium's own env and vector env, as with SB3's ``predict``."""
    import gymnasium as gym
    import numpy as np

    module = cls(env_id=env_id, seed=0)
    env = gym.make(env_id)
    obs, _ = env.reset(seed=0)
    for _ in range(5):
        action = module.act(obs)
        assert isinstance(action, (np.ndarray, np.generic)) and env.action_space.contains(np.clip(action, -2, 2))
        obs, *_ = env.step(action)
    vector_env = gym.make_vec(env_id, num_envs=3)
    obs, _ = vector_env.reset(seed=0)
    actions = module.act(obs, greedy=True)
    assert isinstance(actions, np.ndarray) and actions.shape == (3, *module.action_shape)
    vector_env.step(actions)
    assert module.act(obs.tolist(), greedy=True).tolist() == actions.tolist()  # a list is numpy's too
    tensor_actions = module.act(torch.as_tensor(obs), greedy=True)
    assert isinstance(tensor_actions, torch.Tensor) and tensor_actions.tolist() == actions.tolist()
    env.close()
    vector_env.close()
