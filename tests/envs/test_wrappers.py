"""env_kwargs={"wrappers": [...]}: gymnasium wrappers by class, by class path (what a command line, a
YAML config and a checkpoint can hold) or with arguments."""

import sys

import gymnasium as gym
import pytest
import torch

from rl_lightning import PPOModule, make_envs
from rl_lightning.checkpoints import load_checkpoint_file
from rl_lightning.cli import make_cli

FLATTEN = "gymnasium.wrappers.FlattenObservation"


def test_an_unconvertible_observation_says_how_to_flatten_it():
    env_id = "rl_lightning_test/GraphObs-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=_GraphEnv, max_episode_steps=5)
    with pytest.raises(
        ValueError, match=r"Graph.*env_kwargs=\{'wrappers': \['gymnasium\.wrappers\.FlattenObservation'\]\}"
    ):
        make_envs(env_id, 2)


class _GraphEnv(gym.Env):
    observation_space = gym.spaces.Graph(gym.spaces.Box(0, 1, (2,)), None)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}


@pytest.mark.parametrize("wrapper", [FLATTEN, gym.wrappers.FlattenObservation, {"class_path": FLATTEN}])
def test_wrappers_by_class_path_class_or_dict(wrapper):
    envs = make_envs("Blackjack-v1", 3, seed=0, wrappers=[wrapper])
    obs, _ = envs.reset()
    assert obs.shape == (3, 32 + 11 + 2)  # the one-hot of Tuple(Discrete(32), Discrete(11), Discrete(2))
    assert obs.sum(dim=1).tolist() == [3.0, 3.0, 3.0]


def test_a_wrapper_with_arguments():
    envs = make_envs(
        "CliffWalking-v1",
        2,
        seed=0,
        wrappers=[{"class_path": "gymnasium.wrappers.TimeLimit", "init_args": {"max_episode_steps": 3}}],
    )
    envs.reset()
    truncated = [envs.step(torch.zeros(2, dtype=torch.int64))[3] for _ in range(3)]
    assert [t.tolist() for t in truncated] == [[False, False], [False, False], [True, True]]


@pytest.mark.parametrize(
    ("wrappers", "error", "message"),
    [
        ("gymnasium.wrappers.FlattenObservation", TypeError, r"env_kwargs\['wrappers'\] must be a list"),
        (["gymnasium.wrappers.NoSuchWrapper"], ValueError, r"env_kwargs\['wrappers'\]\[0\]: cannot import"),
        ([3], TypeError, r"env_kwargs\['wrappers'\]\[0\] must be a wrapper class"),
        ([{"init_args": {}}], ValueError, r"env_kwargs\['wrappers'\]\[0\] must be \{'class_path'"),
    ],
)
def test_bad_wrappers_name_the_entry(wrappers, error, message):
    with pytest.raises(error, match=message):
        make_envs("Blackjack-v1", 2, wrappers=wrappers)


def test_the_cli_trains_blackjack_through_a_wrapper_given_by_class_path_and_the_checkpoint_loads(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["rl-lightning"])
    cli = make_cli(
        [
            "fit",
            "--model",
            "PPOModule",
            "--model.init_args.env_id",
            "Blackjack-v1",
            "--model.init_args.env_kwargs",
            f'{{"wrappers": ["{FLATTEN}"]}}',
            "--model.init_args.num_envs",
            "4",
            "--model.init_args.num_steps_per_rollout",
            "8",
            "--trainer.max_steps",
            "4",
            "--trainer.enable_progress_bar=false",
            f"--trainer.default_root_dir={tmp_path}",
        ]
    )
    assert cli.model.obs_shape == (45,)
    [last] = tmp_path.glob("lightning_logs/PPO-Blackjack-v1/version_0/checkpoints/*.ckpt")
    saved = load_checkpoint_file(last)  # weights_only=True: the class path is a plain string
    assert saved["hyper_parameters"]["env_kwargs"] == {"wrappers": [FLATTEN]}
    assert PPOModule.load_from_checkpoint(last).obs_shape == (45,)
