"""VPG, PPO and DQN learn the probes of the richer spaces (rl_lightning.envs.structured_probes) and
Blackjack-v1 through the adapter; DQN never takes or bootstraps from a masked action."""

from __future__ import annotations

import warnings

import gymnasium as gym
import lightning as L
import pytest
import torch

from rl_lightning import DQNModule, PPOModule, VPGModule
from rl_lightning.callbacks.evaluation import evaluate_policy
from rl_lightning.data.replay import ReplayBufferSamples
from rl_lightning.envs import DictProbe, MaskedProbe, MultiBinaryProbe, MultiDiscreteProbe
from rl_lightning.envs.spaces import TensorTree

PROBES = {
    "DictProbe-v0": DictProbe,
    "MultiDiscreteProbe-v0": MultiDiscreteProbe,
    "MultiBinaryProbe-v0": MultiBinaryProbe,
    "MaskedProbe-v0": MaskedProbe,
}


def _fit(module: L.LightningModule, max_steps: int) -> None:
    trainer = L.Trainer(
        max_steps=max_steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module)


def _greedy_accuracy(module, env_id: str) -> float:
    """The share of 512 fresh states where the greedy action is the probe's optimum."""
    envs = PROBES[env_id](num_envs=512, seed=123)
    obs, _ = envs.reset()
    actions = module.act(obs, greedy=True)
    optimal = envs.optimal_actions(envs._bits)
    right = actions == optimal
    return float((right.all(dim=1) if right.dim() == 2 else right).float().mean())


def _vpg(env_id: str) -> VPGModule:
    # The image key's CNN needs smaller steps: at lr=1e-2 the policy settles on the vector key alone
    # (right half the time) before the image features form, on some seeds.
    lr = 1e-3 if env_id == "DictProbe-v0" else 1e-2
    return VPGModule(env_id=env_id, num_envs=32, num_steps_per_rollout=8, lr=lr, seed=0)


def _ppo(env_id: str) -> PPOModule:
    return PPOModule(
        env_id=env_id, num_envs=16, num_steps_per_rollout=8, lr=3e-4, activation="relu", anneal_lr=False, seed=0
    )


@pytest.mark.learning
@pytest.mark.parametrize("env_id", list(PROBES))
def test_vpg_learns_the_probe_to_an_optimal_greedy_action_in_99_percent_of_states(env_id):
    module = _vpg(env_id)
    _fit(module, 300 if env_id == "DictProbe-v0" else 150)
    assert _greedy_accuracy(module, env_id) >= 0.99


@pytest.mark.learning
@pytest.mark.parametrize("env_id", list(PROBES))
def test_ppo_learns_the_probe_to_an_optimal_greedy_action_in_99_percent_of_states(env_id):
    module = _ppo(env_id)
    _fit(module, 640)
    assert _greedy_accuracy(module, env_id) >= 0.99
    if env_id == "MaskedProbe-v0":
        assert module.source.envs.illegal_actions == 0


def _dqn(env_id: str) -> DQNModule:
    return DQNModule(
        env_id=env_id,
        num_envs=8,
        learning_starts=256,
        batch_size=64,
        buffer_size=4096,
        target_update_env_steps=64,
        exploration_fraction=0.3,
        seed=0,
    )


@pytest.mark.learning
@pytest.mark.parametrize("env_id", ["DictProbe-v0", "MaskedProbe-v0"])
def test_dqn_learns_the_probe_to_an_optimal_greedy_action_in_99_percent_of_states(env_id):
    module = _dqn(env_id)
    _fit(module, 600)
    assert _greedy_accuracy(module, env_id) >= 0.99
    if env_id == "MaskedProbe-v0":
        # epsilon started at 1 (uniformly random actions over the legal ones), warm-up included:
        # 256 + 600 * 8 env steps, not one illegal action among them
        assert module.env_steps >= 5000 and module.source.envs.illegal_actions == 0


def test_dqn_bootstraps_from_the_best_legal_next_action_only():
    module = DQNModule(env_id="MaskedProbe-v0", gamma=0.5, double_dqn=False)
    module.q_network = _constant_q([0.0, 0.0, 0.0, 0.0])
    module.target_network = _constant_q([10.0, 3.0, 1.0, 2.0])  # the illegal action 0 has the highest Q
    next_mask = torch.tensor([[False, True, True, True], [False, False, True, True], [False] * 4])
    batch = ReplayBufferSamples(
        obs=TensorTree({"observation": torch.zeros(3, 1), "action_mask": torch.ones(3, 4, dtype=torch.bool)}),
        actions=torch.tensor([1, 2, 3]),
        rewards=torch.tensor([1.0, 1.0, 1.0]),
        terminated=torch.tensor([False, False, True]),
        next_obs=TensorTree({"observation": torch.zeros(3, 1), "action_mask": next_mask}),
    )
    loss = module.training_step(batch, 0)
    # targets: 1 + 0.5 * 3 (action 1), 1 + 0.5 * 2 (action 3: action 1 masked), 1 (terminal, no legal action)
    expected = ((2.5**2) + (2.0**2) + 1.0) / 3
    assert loss.item() == pytest.approx(expected)
    module.double_dqn = True
    module.hparams.double_dqn = True
    module.q_network = _constant_q([5.0, 0.0, 1.0, 0.0])  # the online argmax is illegal too
    loss = module.training_step(batch, 0)
    # online argmax over legal actions: action 2 in both rows; the target values it at 1
    q_taken = torch.tensor([0.0, 1.0, 0.0])
    targets = torch.tensor([1.5, 1.5, 1.0])
    assert loss.item() == pytest.approx(((targets - q_taken) ** 2).mean().item())


class _ConstantQ(torch.nn.Module):
    def __init__(self, values: list[float]):
        super().__init__()
        self.values = torch.nn.Parameter(torch.tensor(values))

    def forward(self, obs: TensorTree) -> torch.Tensor:
        return self.values.expand(obs["observation"].shape[0], -1)


def _constant_q(values: list[float]) -> _ConstantQ:
    return _ConstantQ(values)


def test_dqn_and_sac_refuse_the_spaces_they_cannot_learn():
    with pytest.raises(ValueError, match=r"MultiDiscrete.*'multi_discrete'.*use VPGModule or PPOModule"):
        DQNModule(env_id="MultiDiscreteProbe-v0")
    from rl_lightning import SACModule

    with pytest.raises(ValueError, match="SACModule supports box"):
        SACModule(env_id="MultiBinaryProbe-v0")
    with pytest.raises(ValueError, match=r"SAC's and TD3's networks read vector keys.*image keys \['image'\]"):
        from rl_lightning.nets import SquashedGaussianActor

        SquashedGaussianActor(DictProbe(1).single_observation_space, gym.spaces.Box(-1, 1, (1,)))


def _blackjack_return(module) -> float:
    """The greedy mean return over 4,000 Blackjack episodes (standard error ~0.015)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        envs = module.make_envs(4000, 777)
    return evaluate_policy(module, envs, seed=777).mean


@pytest.mark.learning
def test_ppo_learns_blackjack_from_its_tuple_observation_to_a_mean_return_above_minus_0_12():
    """Blackjack-v1's optimum is about -0.05 (a random policy: about -0.40; always sticking: -0.17)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = PPOModule(
            env_id="Blackjack-v1", num_envs=32, num_steps_per_rollout=16, lr=1e-3, activation="relu", seed=0
        )
    assert module.observation_space.spaces.keys() == {"0", "1", "2"}
    _fit(module, 800)
    assert _blackjack_return(module) > -0.12
    env = gym.make("Blackjack-v1")
    obs, _ = env.reset(seed=0)
    assert module.act(obs, greedy=True) in (0, 1)  # gymnasium's own tuple of ints


@pytest.mark.learning
def test_ppo_learns_blackjack_flattened_from_the_command_line_to_a_mean_return_above_minus_0_12(tmp_path):
    """The same run through ``rl-lightning fit`` with gymnasium's FlattenObservation as a wrapper."""
    from rl_lightning.cli import make_cli

    flatten = "gymnasium.wrappers.FlattenObservation"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cli = make_cli(
            [
                "fit",
                "--model",
                "PPOModule",
                "--model.init_args.env_id",
                "Blackjack-v1",
                "--model.init_args.env_kwargs",
                f'{{"wrappers": ["{flatten}"]}}',
                "--model.init_args.num_envs",
                "32",
                "--model.init_args.num_steps_per_rollout",
                "16",
                "--model.init_args.lr",
                "1e-3",
                "--model.init_args.activation",
                "relu",
                "--model.init_args.seed",
                "0",
                "--trainer.max_steps",
                "800",
                "--trainer.enable_progress_bar=false",
                f"--trainer.default_root_dir={tmp_path}",
            ]
        )
    assert cli.model.obs_shape == (32 + 11 + 2,)
    assert _blackjack_return(cli.model) > -0.12
