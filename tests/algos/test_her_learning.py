"""Hindsight experience replay in the off-policy modules (``her=``): DQN + HER solves bit flipping where DQN alone does
not (a learning test), and the argument's plumbing: checked where it enters, plain values in hparams, checkpoints and
the Hub's config, exact resume of the episode bookkeeping, ``num_seeds``, ``compile=True`` and the command line."""

import json

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import nn

from rl_lightning import DQNModule, SACModule, TD3Module
from rl_lightning.cli import main
from rl_lightning.data.her import HERSettings, HindsightReplayBuffer
from rl_lightning.envs import make_envs
from rl_lightning.envs.bit_flipping import reached_goal
from rl_lightning.hub import save_pretrained
from rl_lightning.nets.continuous import FlatKeys
from rl_lightning.playing import play_greedy
from tests.quiet_trainer import quiet_fit, quiet_trainer

NUM_BITS = 10
ENV_ID = f"BitFlipping{NUM_BITS}-v0"
#: The greedy policy's share of 1,000 episodes that reach their goal: DQN + HER must reach this (settings tried on
#: seed 0; measured 1.000 on seeds 11, 12 and 13 after 2,000 updates, native kernels and ATEN_CPU_CAPABILITY=default
#: alike), DQN alone must stay under NO_HER_MOST (measured 0.002 to 0.008: about a random policy's).
SOLVED_SUCCESS = 0.9
NO_HER_MOST = 0.05
UPDATES = 2_000
#: Settings in the spirit of the HER paper's bit-flipping DQN (one hidden layer of 256, Polyak 0.05, gamma 0.98,
#: some exploration all along) sized for seconds on a CPU: 8 envs, one update per vectorised step.
LEARNING = dict(
    env_id=ENV_ID,
    num_envs=8,
    buffer_size=100_000,
    batch_size=128,
    learning_starts=1_000,
    gamma=0.98,
    lr=1e-3,
    target_update_env_steps=None,
    tau=0.05,
    epsilon_start=0.3,
    epsilon_end=0.1,
    exploration_fraction=0.5,
    steps_per_epoch=1_000,
)
HER = {"strategy": "future", "k": 4}
SMALL = dict(env_id=ENV_ID, num_envs=4, buffer_size=512, batch_size=32, learning_starts=64, steps_per_epoch=10)


def goal_network(num_bits: int, width: int = 256) -> nn.Module:
    """An encoder that reads state and goal together (the keys concatenated, then a hidden layer): DQN's default
    Dict encoder reads each key apart, and the value of flipping bit i hangs on state_i XOR goal_i."""
    space = make_envs(f"BitFlipping{num_bits}-v0", 1).single_observation_space
    return nn.Sequential(FlatKeys(space), nn.Linear(3 * num_bits, width), nn.ReLU())


def success_rate(module: DQNModule, seed: int, episodes: int = 1_000) -> float:
    """The greedy policy's share of ``episodes`` bit-flipping episodes that reach their goal."""
    envs = make_envs(module.hparams.env_id, episodes, seed=seed)
    play = play_greedy(module.greedy_actor(), envs, episodes_per_env=1)
    return reached_goal(torch.as_tensor(play.returns), envs.max_episode_steps).float().mean().item()


@pytest.mark.learning
@pytest.mark.parametrize("seed", [11, 12])
def test_dqn_with_her_solves_bit_flipping_and_dqn_alone_does_not(seed):
    torch.manual_seed(seed)
    # DQN's default network with her: the keys concatenated, then hidden_sizes (goal_network's architecture)
    with_her = DQNModule(seed=seed, hidden_sizes=(256,), her=HER, **LEARNING)
    assert isinstance(with_her.q_network.encoder[0], FlatKeys)
    quiet_fit(with_her, UPDATES)
    solved = success_rate(with_her, seed=1_000 + seed)
    alone = DQNModule(seed=seed, network=goal_network(NUM_BITS), **LEARNING)
    quiet_fit(alone, UPDATES)
    unsolved = success_rate(alone, seed=1_000 + seed)
    assert with_her.source.env_steps == alone.source.env_steps == 1_000 + 8 * (UPDATES - 1) + 8
    assert solved >= SOLVED_SUCCESS, f"DQN + HER reached {solved:.3f} of the goals"
    assert unsolved <= NO_HER_MOST, f"DQN alone reached {unsolved:.3f} of the goals"


# -- the argument --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(her={"strategy": "later"}), ValueError, r"her\.strategy must be one of 'future', 'final', 'episode'"),
        (dict(her={"k": 0}), ValueError, r"her\.k must be >= 1"),
        (dict(her="future"), TypeError, "her must be None, a HERSettings or a dict"),
        (dict(her=HER, n_step=3), ValueError, "n_step=3 would need every reward"),
        (dict(her=HER, prioritized=True), ValueError, "prioritized=True is not supported"),
        (dict(her=HER, frame_replay=True), ValueError, "frame_replay=True"),
        (dict(her=HER, env_id="CartPole-v1"), ValueError, "'CartPole-v1' gives Box observations"),
        (dict(her=HER, env_id="DictProbe-v0"), ValueError, r"Dict with keys \['image', 'vector'\]"),
    ],
)
def test_her_refuses_what_cannot_work_naming_it(kwargs, error, match):
    with pytest.raises(error, match=match):
        DQNModule(**{**SMALL, **kwargs})


def test_her_is_plain_data_in_hparams_checkpoints_and_the_hub_config(tmp_path):
    module = DQNModule(her=HERSettings("final", 2), **SMALL)
    assert module.hparams.her == {"strategy": "final", "k": 2} and type(module.hparams.her) is dict
    assert module.replay.her == {"strategy": "final", "k": 2}
    trainer = quiet_trainer(max_steps=3, default_root_dir=tmp_path, enable_checkpointing=True)
    trainer.fit(module)
    assert isinstance(module.source.buffer, HindsightReplayBuffer) and module.source.buffer.her.strategy == "final"
    checkpoint = torch.load(trainer.checkpoint_callback.best_model_path, weights_only=True)  # plain types only
    assert checkpoint["hyper_parameters"]["her"] == {"strategy": "final", "k": 2}
    loaded = DQNModule.load_from_checkpoint(trainer.checkpoint_callback.best_model_path)
    assert loaded.replay.her == {"strategy": "final", "k": 2}
    folder = save_pretrained(module, tmp_path / "hub", eval_episodes=0, video_steps=0, export_formats=())
    assert json.loads((folder / "config.json").read_text())["hyperparameters"]["her"] == {"strategy": "final", "k": 2}
    assert DQNModule(**SMALL).hparams.her is None and DQNModule(her=None, **SMALL).replay.her is None


def test_resume_is_exact_with_the_episode_bookkeeping(tmp_path):
    def fit(root, ckpt_path=None, max_steps=30):
        module = DQNModule(her=HER, seed=3, **SMALL)
        checkpoint = ModelCheckpoint(dirpath=root, filename="last")
        trainer = quiet_trainer(max_steps=max_steps, callbacks=[checkpoint], enable_checkpointing=True)
        trainer.fit(module, ckpt_path=ckpt_path)
        return module

    straight = fit(tmp_path / "straight")
    fit(tmp_path / "split", max_steps=20)
    resumed = fit(tmp_path / "split", ckpt_path=str(tmp_path / "split" / "last.ckpt"))
    for name, value in straight.state_dict().items():
        assert torch.equal(resumed.state_dict()[name], value), name
    ours, theirs = resumed.source.buffer, straight.source.buffer
    assert ours.adds == theirs.adds > 0
    assert torch.equal(ours.episode_starts, theirs.episode_starts)
    assert torch.equal(ours.generator.get_state(), theirs.generator.get_state())


def test_each_seed_relabels_with_its_own_buffer_and_equals_its_one_seed_run():
    multi = DQNModule(her=HER, seed=5, num_seeds=2, **SMALL)
    quiet_fit(multi, 20)
    for index in range(2):
        single = DQNModule(her=HER, seed=5 + index, **SMALL)
        quiet_fit(single, 20)
        member = multi.seed_module(index)
        ours = {name: value for name, value in member.state_dict().items() if not name.startswith("seed_members.")}
        for name, value in single.state_dict().items():
            torch.testing.assert_close(ours[name], value, atol=1e-5, rtol=0, msg=name)
        buffer = multi.source.sources[index].buffer
        assert isinstance(buffer, HindsightReplayBuffer)
        assert torch.equal(buffer.generator.get_state(), single.source.buffer.generator.get_state())
        assert torch.equal(buffer.episode_starts, single.source.buffer.episode_starts)


def test_compiled_update_with_her_matches_eager():
    eager = DQNModule(her=HER, seed=2, **SMALL)
    compiled = DQNModule(her=HER, seed=2, compile={"backend": "aot_eager"}, **SMALL)
    quiet_fit(eager, 20)
    quiet_fit(compiled, 20)
    for name, value in eager.state_dict().items():
        torch.testing.assert_close(compiled.state_dict()[name], value, rtol=1e-4, atol=1e-5, msg=name)


def test_td3_takes_her_and_refuses_a_non_goal_env():
    assert TD3Module(her=None, learning_starts=100).replay.her is None
    with pytest.raises(ValueError, match="'Pendulum-v1' gives Box observations"):
        TD3Module(her=HER, learning_starts=100)


def test_the_command_line_takes_her_as_a_dict(capsys):
    arguments = ["fit", "--model", "DQNModule", "--model.env_id", ENV_ID, "--model.her", '{"strategy": "episode"}']
    with pytest.raises(SystemExit) as exit_info:
        main([*arguments, "--print_config"])
    assert exit_info.value.code in (0, None)
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["model"]["init_args"]["her"] == {"strategy": "episode", "k": 4}  # HERSettings' default k


class _ReachGoalEnv(gym.Env):
    """A gymnasium goal env with Box actions (gymnasium-robotics' form, FetchReach in one dimension): a point moves
    by its action in [-1, 1] toward a goal drawn in [-3, 3]; the reward is -(distance > 0.5), numpy, batched."""

    def __init__(self):
        box = gym.spaces.Box(-10.0, 10.0, (1,), np.float32)
        self.observation_space = gym.spaces.Dict({"observation": box, "achieved_goal": box, "desired_goal": box})
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def compute_reward(self, achieved_goal, desired_goal, info):
        return -(np.abs(achieved_goal - desired_goal)[..., 0] > 0.5).astype(np.float32)

    def _obs(self):
        return {"observation": self.x.copy(), "achieved_goal": self.x.copy(), "desired_goal": self.goal.copy()}

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.x = np.zeros(1, np.float32)
        self.goal = self.np_random.uniform(-3.0, 3.0, 1).astype(np.float32)
        return self._obs(), {}

    def step(self, action):
        self.x = np.clip(self.x + np.clip(action, -1.0, 1.0), -10.0, 10.0).astype(np.float32)
        return self._obs(), float(self.compute_reward(self.x, self.goal, None)), False, False, {}


gym.register("rl_lightning_tests/ReachGoal-v0", _ReachGoalEnv, max_episode_steps=8)


@pytest.mark.parametrize("algorithm", [SACModule, TD3Module])
def test_sac_and_td3_relabel_a_gymnasium_goal_env_through_the_adapter(algorithm):
    module = algorithm(
        env_id="rl_lightning_tests/ReachGoal-v0",
        num_envs=2,
        buffer_size=256,
        batch_size=20,
        learning_starts=32,
        steps_per_epoch=10,
        hidden_sizes=(16, 16),
        her={"strategy": "future", "k": 4},
    )
    quiet_fit(module, 10)
    buffer = module.source.buffer
    assert isinstance(buffer, HindsightReplayBuffer) and buffer.adds == 16 + 10
    batch = buffer.sample(20)
    achieved, goals = batch.next_obs["achieved_goal"][:16], batch.obs["desired_goal"][:16]
    assert torch.equal(batch.rewards[:16], -((achieved - goals).abs().squeeze(1) > 0.5).float())
    assert (batch.rewards[:16] == 0).any()  # some relabelled goals are reached: the reward the env never paid
    assert module.critic(batch.obs, batch.actions).shape[-1] == 20  # the critics read the Dict's keys concatenated


def test_with_her_dqns_default_network_reads_the_goal_envs_keys_concatenated():
    with_her = DQNModule(her=HER, hidden_sizes=(32,), **SMALL)
    assert isinstance(with_her.q_network.encoder[0], FlatKeys)
    assert list(with_her.q_network.encoder[0].shapes) == ["achieved_goal", "desired_goal", "observation"]
    assert with_her.q_network.encoder[1].num_features == 32  # one hidden layer over all 3 * NUM_BITS inputs
    without = DQNModule(hidden_sizes=(32,), **SMALL)  # the Dict encoder: an MLP per key
    assert set(without.q_network.encoder.encoders) == {"achieved_goal", "desired_goal", "observation"}
