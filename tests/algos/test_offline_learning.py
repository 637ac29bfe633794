"""Offline learning on Pendulum-v1: from a mixed dataset (uniformly random episodes and episodes of a swing-up
controller with heavy noise, behaviour mean about -800), TD3+BC (configs/td3_bc_pendulum.yaml) reaches a greedy
return better than the behaviour policy's by a named margin. Seeds 0-2 were looked at while tuning, seed 11 while
choosing the criterion (an absolute bar of -650 failed there: -679); seeds 12 and 13 were fresh; the test runs 12.
IQL (configs/iql_pendulum.yaml: the paper's settings with normalised observations) reaches the same margin: its
settings were chosen on seeds 0-2; seeds 3, 11-16 were fresh; the test runs 12."""

from pathlib import Path

import pytest
import torch
import yaml
from quiet_trainer import quiet_trainer
from torch import Tensor

from rl_lightning import IQLModule, TD3BCModule, Transitions, TransitionsDataModule, evaluate_policy
from rl_lightning.data.offline import episode_returns, transitions_from_arrays
from rl_lightning.data.offline_formats import episodes_to_rows, record_episodes
from rl_lightning.envs import make_envs

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
#: How much TD3+BC's greedy mean return (32 fresh episodes, after 8,000 updates) must exceed the behaviour policy's
#: mean episode return in the dataset. Seen: seeds 0-2 +452, +295, +187; 11 +161; 12 +216; 13 +153. BC on the same
#: data (3,000 updates) is not reliably above the behaviour policy (seeds 0-2: +295 to -337; 12: -23; 13: +28):
#: Pendulum's swing-up makes a mediocre policy's return bimodal.
MARGIN_OVER_BEHAVIOUR = 100.0
#: The same margin for IQL (8,000 updates, normalised observations). Seen: seeds 0-2 +169, +214, +557 (chosen on them);
#: fresh: 3 +517, 11 +316, 12 +425, 13 +219, 14 +685, 15 +237, 16 +317. The greedy return still swings between
#: evaluations (seed 15, 16 episodes each at 3k, 5k, 7k, 8k updates: +460, +17, -43, +95), and 16 other episodes at 8k
#: gave seeds 0 and 15 only +95: the margin is that of this run's end and these 32 episodes, not a wide one.
#: Without observation normalisation (the paper's MuJoCo setting) seed 0 was -255, swinging from -393 to -1111.
IQL_MARGIN_OVER_BEHAVIOUR = 100.0


def swing_up_controller(obs: Tensor, episode_start: Tensor | None = None) -> Tensor:
    """A good Pendulum policy: pump energy toward the upright's (``dH/dt = 3 u thetadot``), then a PD balance."""
    cos, sin, velocity = obs[:, 0], obs[:, 1], obs[:, 2]
    energy_missing = 15.0 - (0.5 * velocity**2 + 15.0 * cos)
    swing = torch.clamp(2.0 * energy_missing * velocity, -2.0, 2.0)
    balance = torch.clamp(-(10.0 * torch.atan2(sin, cos) + 2.0 * velocity), -2.0, 2.0)
    return torch.where(cos > 0.8, balance, swing).unsqueeze(-1)


def mixed_dataset(seed: int) -> Transitions:
    """20 uniformly random episodes and 20 of the controller with Gaussian noise of std 1.0 (half the action range):
    8,000 transitions."""
    envs = make_envs("Pendulum-v1", 1, seed=seed)
    random, _ = record_episodes(envs, None, [0.0], num_episodes=20, seed=seed)
    noisy, _ = record_episodes(envs, swing_up_controller, [1.0], num_episodes=20, seed=seed + 1)
    return transitions_from_arrays(episodes_to_rows(random + noisy), "mixed Pendulum-v1")


def config_arguments(name: str, seed: int) -> dict:
    arguments = yaml.safe_load((CONFIGS / name).read_text())["model"]["init_args"]
    return {**arguments, "seed": seed}


def greedy_return(module, seed: int) -> float:
    return evaluate_policy(module, "Pendulum-v1", num_episodes=32, seed=10_000 + seed).mean


@pytest.mark.learning
def test_td3_bc_beats_the_behaviour_policy(seed=12):
    torch.manual_seed(seed)
    dataset = mixed_dataset(seed)
    assert dataset.num_transitions == 8000
    behaviour = float(episode_returns(dataset).mean())
    assert -950 < behaviour < -700  # the mixed data's own return (seeds 0-13: -733 to -874)
    module = TD3BCModule(**config_arguments("td3_bc_pendulum.yaml", seed))
    datamodule = TransitionsDataModule(dataset, batch_size=256, steps_per_epoch=1000, seed=seed)
    quiet_trainer(max_steps=8000).fit(module, datamodule=datamodule)
    td3_bc = greedy_return(module, seed)
    assert td3_bc >= behaviour + MARGIN_OVER_BEHAVIOUR, (td3_bc, behaviour)


@pytest.mark.learning
def test_iql_beats_the_behaviour_policy(seed=12):
    torch.manual_seed(seed)
    dataset = mixed_dataset(seed)
    behaviour = float(episode_returns(dataset).mean())
    module = IQLModule(**config_arguments("iql_pendulum.yaml", seed))
    assert module.hparams.normalize_obs and module.hparams.beta == 3.0 and module.hparams.expectile == 0.7
    datamodule = TransitionsDataModule(dataset, batch_size=256, steps_per_epoch=1000, seed=seed)
    quiet_trainer(max_steps=8000).fit(module, datamodule=datamodule)
    iql = greedy_return(module, seed)
    assert iql >= behaviour + IQL_MARGIN_OVER_BEHAVIOUR, (iql, behaviour)
