"""Renamed arguments keep working (issue 31): each former name is taken by the constructor, the command lines
and their configs with a DeprecationWarning naming the new one, and an old checkpoint loads its values under
the new names; a registry of every parameter name the history has seen fails a future rename without one."""

import copy
import inspect
import runpy
import sys
from pathlib import Path
from typing import ClassVar

import gymnasium as gym
import lightning as L
import pytest
import torch
import yaml
from fake_module import FakeModule
from quiet_trainer import quiet_trainer
from torch import nn

from rl_lightning import BCModule, DQNModule, IQLModule, PPOModule, SACModule, TD3BCModule, TD3Module, VPGModule
from rl_lightning.algos import ALGORITHMS
from rl_lightning.callbacks.evaluation import evaluate_policy
from rl_lightning.callbacks.target_sync import TargetNetworkSync
from rl_lightning.cli import ScriptCLI, main, make_cli
from rl_lightning.deprecations import renamed, renames_of
from rl_lightning.export import GreedyPolicy
from rl_lightning.losses import compute_reinforce_loss, compute_returns
from rl_lightning.nets import PolicyNetwork, QNetwork

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
TINY = {
    DQNModule: dict(num_envs=4, buffer_size=64, batch_size=8, learning_starts=8),
    VPGModule: dict(num_envs=4, num_steps_per_rollout=8),
}
#: (module, former name, new name, a value other than the default): every rename of a module's argument.
RENAMES = [
    (DQNModule, "steps_per_train", "train_freq", 4),
    (VPGModule, "use_iw", "importance_weighting", True),
    (VPGModule, "clip_coef", "iw_clip", 0.1),
    (VPGModule, "use_lr_decay", "anneal_lr", True),
]
RENAME_IDS = [f"{module.__name__}.{old}" for module, old, _, _ in RENAMES]

#: Every public parameter name each of these has had since the first commit (91b8070) up to 16154a4, read from
#: the signatures in each commit of `git log` (ast over `git show COMMIT:FILE`): each must still be a parameter
#: or a declared rename (renamed_hyperparameters / renamed_keywords). Add a name here when you add a parameter.
HISTORY = {
    VPGModule: "env_id num_envs num_steps_per_rollout lr gamma normalize_returns use_iw clip_coef rollout_use_count "
    "num_batches_per_rollout rollouts_per_epoch full_reset use_lr_decay lr_end lr_frac hidden_sizes adam_eps seed "
    "network env_backend env_kwargs importance_weighting iw_clip anneal_lr compile num_seeds",
    DQNModule: "env_id num_envs buffer_size batch_size learning_starts steps_per_train steps_per_epoch gamma lr "
    "target_update_env_steps tau epsilon_start epsilon_end exploration_fraction double_dqn loss seed hidden_sizes "
    "checkpoint_buffer max_grad_norm network env_backend env_kwargs train_freq gradient_steps n_step compile "
    "frame_replay updates_per_step prioritized prioritized_alpha prioritized_beta num_seeds dueling distributional "
    "num_atoms v_min v_max num_quantiles noisy noisy_sigma her",
    PPOModule: "env_id num_envs num_steps_per_rollout lr anneal_lr gamma gae_lambda update_epochs num_minibatches "
    "clip_coef clip_vloss ent_coef vf_coef max_grad_norm target_kl norm_adv normalize_obs normalize_rewards "
    "shared_encoder hidden_sizes activation adam_eps seed network env_backend env_kwargs recurrent core_size lr_end "
    "lr_frac compile num_seeds actor_keys critic_keys agent_networks",
    SACModule: "env_id num_envs buffer_size batch_size learning_starts train_freq gradient_steps steps_per_epoch "
    "gamma n_step lr tau alpha alpha_init target_entropy num_critics hidden_sizes max_grad_norm seed "
    "checkpoint_buffer env_backend env_kwargs compile updates_per_step prioritized prioritized_alpha prioritized_beta "
    "num_seeds target_entropy_scale target_update_env_steps adam_eps her actor_keys critic_keys initial_dataset",
    TD3Module: "env_id num_envs buffer_size batch_size learning_starts train_freq gradient_steps steps_per_epoch "
    "gamma n_step lr tau policy_delay target_noise target_noise_clip exploration_noise num_critics hidden_sizes "
    "max_grad_norm seed checkpoint_buffer env_backend env_kwargs compile updates_per_step prioritized "
    "prioritized_alpha prioritized_beta num_seeds actor_keys critic_keys her initial_dataset",
    BCModule: "env_id lr hidden_sizes normalize_obs seed dataset batch_size steps_per_epoch max_grad_norm env_backend "
    "env_kwargs compile",
    TD3BCModule: "env_id lr gamma tau policy_delay target_noise target_noise_clip alpha num_critics hidden_sizes "
    "normalize_obs seed dataset batch_size steps_per_epoch max_grad_norm env_backend env_kwargs compile",
    IQLModule: "env_id lr gamma tau expectile beta max_weight num_critics hidden_sizes scale_rewards normalize_obs "
    "seed dataset batch_size steps_per_epoch max_grad_norm env_backend env_kwargs compile",
    TargetNetworkSync: "every_n_env_steps tau online_attr target_attr every_n_train_steps",
    QNetwork: "obs_shape num_actions hidden_sizes observation_space action_space network",
    evaluate_policy: "act env_id num_episodes seed device max_episode_steps env policy every_64_steps seed_index",
    PolicyNetwork: "obs_shape num_actions hidden_sizes observation_space action_space network activation",
    GreedyPolicy: "network normalizer q_values",
    compute_returns: "rewards dones gamma",  # the seeds: compute_returns(rewards, done, gamma)
    compute_reinforce_loss: "returns logprobs importance_weights iw",  # the seeds: (returns, logprobs_taken, iw)
}
#: Former names from the seeds (../shared/seeds/), which the history never held.
SEED_NAMES = {compute_returns: "done", compute_reinforce_loss: "logprobs_taken"}


def _parameters(owner) -> set[str]:
    return set(inspect.signature(owner).parameters)


def _old_checkpoint(module: L.LightningModule, path: Path, renames: dict[str, tuple[str, object]]) -> Path:
    """A real checkpoint of ``module`` after 2 training steps, its hyper-parameters saved as a release before the
    renames would have: ``renames`` new name -> (former name, value)."""
    trainer = quiet_trainer(max_steps=2)
    trainer.fit(module)
    trainer.save_checkpoint(path)
    checkpoint = torch.load(path, weights_only=True)
    for new, (old, value) in renames.items():
        del checkpoint["hyper_parameters"][new]
        checkpoint["hyper_parameters"][old] = value
    torch.save(checkpoint, path)
    return path


# -- the registry ----------------------------------------------------------------------------------------------


def test_the_registry_lists_every_algorithm():
    assert set(ALGORITHMS) <= set(HISTORY)


@pytest.mark.parametrize("owner", list(HISTORY), ids=lambda owner: owner.__name__)
def test_every_name_a_parameter_ever_had_is_a_parameter_or_a_declared_rename(owner):
    current, renames = _parameters(owner), renames_of(owner)
    names = HISTORY[owner].split() + SEED_NAMES.get(owner, "").split()
    lost = [name for name in names if name not in current and name not in renames]
    assert lost == [], f"{owner.__name__} dropped {lost}: add them to its renamed_hyperparameters / renamed_keywords"
    assert current - {"self"} <= set(HISTORY[owner].split()), "a new parameter: add it to HISTORY"
    for old, new in renames.items():  # a declared rename points at a parameter, from a name that is none
        assert new in current and old not in current


def test_the_declared_renames():
    assert renames_of(DQNModule) == {"steps_per_train": "train_freq"}
    assert renames_of(VPGModule) == {
        "use_iw": "importance_weighting",
        "clip_coef": "iw_clip",
        "use_lr_decay": "anneal_lr",
    }
    assert renames_of(PPOModule) == {}  # its clip_coef and anneal_lr are its own
    assert renames_of(QNetwork) == {"observation_space": "obs_shape", "action_space": "num_actions"}
    assert renames_of(evaluate_policy) == {"act": "policy", "env_id": "env"}


def test_the_readme_table_lists_every_rename():
    rows = {line.split("|")[1].strip(" `"): line for line in README.splitlines() if line.startswith("| `")}
    for owner in HISTORY:
        for old, new in renames_of(owner).items():
            assert f"`{old}`" in rows[owner.__name__] and f"`{new}`" in rows[owner.__name__]
    assert "`online_attr`, `target_attr`" in rows["TargetNetworkSync"]


# -- constructors ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("module_class", "old", "new", "value"), RENAMES, ids=RENAME_IDS)
def test_the_former_name_gives_the_new_names_hyperparameters_and_warns(module_class, old, new, value):
    expected = dict(module_class(**TINY[module_class], **{new: value}).hparams)
    with pytest.warns(DeprecationWarning, match=rf"{module_class.__name__}\({old}=\.\.\.\) is deprecated: use {new}$"):
        module = module_class(**TINY[module_class], **{old: value})
    assert dict(module.hparams) == expected and module.hparams[new] == value and old not in module.hparams


@pytest.mark.parametrize(("module_class", "old", "new", "value"), RENAMES, ids=RENAME_IDS)
def test_the_former_and_the_new_name_with_different_values_are_a_type_error_naming_both(module_class, old, new, value):
    default = inspect.signature(module_class).parameters[new].default
    with pytest.raises(TypeError, match=rf"got {old}={value!r} and {new}={default!r}.*pass only {new}"):
        module_class(**TINY[module_class], **{old: value, new: default})
    with pytest.deprecated_call():  # the same value twice: one argument
        assert module_class(**TINY[module_class], **{old: value, new: value}).hparams[new] == value


def test_an_unknown_keyword_is_still_a_type_error_and_the_signature_the_real_one():
    with pytest.raises(TypeError, match="unexpected keyword argument 'step_per_train'"):
        DQNModule(step_per_train=4)
    parameters = inspect.signature(DQNModule).parameters
    assert "train_freq" in parameters and "steps_per_train" not in parameters
    assert not any(parameter.kind is parameter.VAR_KEYWORD for parameter in parameters.values())
    spec = inspect.getfullargspec(DQNModule.__init__)  # what Lightning's load_from_checkpoint filters by
    assert spec.varkw is None and "train_freq" in spec.args
    assert DQNModule.__init__.__doc__ == inspect.unwrap(DQNModule.__init__).__doc__
    # no renames: only num_seeds' wrapper (rl_lightning.algos._seeds), with the real signature and doc
    real = inspect.unwrap(PPOModule.__init__)
    assert inspect.signature(PPOModule.__init__) == inspect.signature(real)
    assert inspect.getfullargspec(PPOModule.__init__) == inspect.getfullargspec(real)
    assert PPOModule.__init__.__doc__ == real.__doc__


def test_a_subclass_keeps_its_own_arguments_in_hparams_and_takes_the_former_names():
    class Mine(DQNModule):
        def __init__(self, extra: int = 3, **kwargs):
            super().__init__(**kwargs)

    with pytest.deprecated_call(match="Mine"):
        module = Mine(extra=5, steps_per_train=2, **TINY[DQNModule])
    # save_hyperparameters() collects every __init__ frame on the way out, through the wrappers.
    assert module.hparams.extra == 5 and module.hparams.train_freq == 2 and "steps_per_train" not in module.hparams
    assert dict(module.hparams) == {**dict(Mine(extra=5, train_freq=2, **TINY[DQNModule]).hparams)}

    class Renamed(DQNModule):  # renames of its own, no __init__ of its own
        renamed_hyperparameters: ClassVar[dict[str, str]] = {**DQNModule.renamed_hyperparameters, "discount": "gamma"}

    with pytest.deprecated_call(match="use gamma"):
        assert Renamed(discount=0.5, **TINY[DQNModule]).hparams.gamma == 0.5


def test_renamed_moves_the_values_and_leaves_the_rest():
    with pytest.deprecated_call(match=r"f\(a=\.\.\.\) is deprecated: use b"):
        assert renamed({"a": 1, "c": 2}, {"a": "b"}, "f") == {"c": 2, "b": 1}
    assert renamed({"b": 1}, {"a": "b"}, "f") == {"b": 1}


def test_qnetwork_takes_observation_space_and_action_space():
    torch.manual_seed(0)
    expected = QNetwork(obs_shape=(4,), num_actions=2).state_dict()
    torch.manual_seed(0)
    with (
        pytest.warns(DeprecationWarning, match="use obs_shape"),
        pytest.warns(DeprecationWarning, match="use num_actions"),
    ):
        network = QNetwork(observation_space=gym.spaces.Box(-1, 1, (4,)), action_space=gym.spaces.Discrete(2))
    assert all(torch.equal(network.state_dict()[key], value) for key, value in expected.items())
    with pytest.raises(TypeError, match=r"observation_space=\(3,\) and obs_shape=\(4,\)"):
        QNetwork(obs_shape=(4,), num_actions=2, observation_space=(3,))
    with pytest.raises(TypeError, match="multiple values for argument 'obs_shape'"), pytest.deprecated_call():
        QNetwork((4,), 2, observation_space=(3,))  # given positionally too: Python's own error


def test_the_networks_and_losses_take_their_former_keywords():
    torch.manual_seed(0)
    expected = PolicyNetwork((4,), 2).state_dict()
    torch.manual_seed(0)
    with (
        pytest.warns(DeprecationWarning, match="use observation_space"),
        pytest.warns(DeprecationWarning, match="use action_space"),
    ):
        network = PolicyNetwork(obs_shape=(4,), num_actions=2)  # the seeds' spelling
    assert all(torch.equal(network.state_dict()[key], value) for key, value in expected.items())
    with pytest.warns(DeprecationWarning, match="use network"):
        policy = GreedyPolicy(q_values=QNetwork((4,), 2))
    assert policy(torch.zeros(3, 4)).shape == (3,)
    rewards, dones = torch.ones(2, 3), torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    with pytest.warns(DeprecationWarning, match="use dones"):
        returns = compute_returns(rewards, done=dones, gamma=0.5)
    assert torch.equal(returns, compute_returns(rewards, dones, 0.5))
    assert returns[0].tolist() == [1.5, 1.0, 1.0]  # cut at the episode's end
    logprobs, iw = torch.randn(2, 3), torch.rand(2, 3)
    with pytest.warns(DeprecationWarning, match="use logprobs"), pytest.warns(DeprecationWarning, match="use iw"):
        loss = compute_reinforce_loss(returns, logprobs_taken=logprobs, importance_weights=iw)
    assert torch.equal(loss, compute_reinforce_loss(returns, logprobs, iw))
    with pytest.raises(TypeError, match="logprobs"), pytest.deprecated_call():
        compute_reinforce_loss(returns, logprobs, iw, logprobs_taken=logprobs + 1)  # given positionally too


def test_evaluate_policy_takes_act_and_env_id():
    def push_left(obs):
        return torch.zeros(obs.shape[0], dtype=torch.int64)

    expected = evaluate_policy(push_left, "CartPole-v1", num_episodes=4, seed=2)
    with pytest.warns(DeprecationWarning, match="use env"), pytest.warns(DeprecationWarning, match="use policy"):
        result = evaluate_policy(act=push_left, env_id="CartPole-v1", num_episodes=4, seed=2)
    assert result.returns.tolist() == expected.returns.tolist()


def _networks():
    torch.manual_seed(0)
    online = nn.Linear(3, 2)
    target = copy.deepcopy(online).requires_grad_(False)
    with torch.no_grad():
        online.weight.add_(1.0)
    return online, target


def test_target_network_sync_takes_the_attribute_names_of_the_first_release():
    online, target = _networks()
    module = FakeModule(env_steps=0)  # its target_network_pairs() has no networks: the named ones are moved
    module.online, module.target = online, target
    with pytest.deprecated_call(match="target_network_pairs"):
        callback = TargetNetworkSync(every_n_env_steps=None, online_attr="online", target_attr="target")
    callback.on_train_start(None, module)
    callback.on_train_batch_end(None, module, None, None, 0)
    assert torch.equal(module.target.weight, module.online.weight) and callback.num_updates == 1

    online, target = _networks()  # the first release's defaults: q_network, target_network
    module = FakeModule(env_steps=0, q_network=online, target_network=target)
    with pytest.deprecated_call():
        callback = TargetNetworkSync(every_n_env_steps=None, online_attr="q_network")
    assert (callback.online_attr, callback.target_attr) == ("q_network", "target_network")
    with pytest.deprecated_call():
        callback = TargetNetworkSync(online_attr="missing")
    with pytest.raises(TypeError, match="has no network 'missing'"):
        callback.on_train_start(None, module)
    assert TargetNetworkSync().online_attr is None  # the pairs of target_network_pairs()


# -- checkpoints -----------------------------------------------------------------------------------------------


def test_an_old_dqn_checkpoint_loads_steps_per_train_as_train_freq(tmp_path):
    path = _old_checkpoint(DQNModule(**TINY[DQNModule]), tmp_path / "old.ckpt", {"train_freq": ("steps_per_train", 4)})
    with pytest.deprecated_call(match="steps_per_train is DQNModule's train_freq now"):
        loaded = DQNModule.load_from_checkpoint(path)
    assert loaded.hparams.train_freq == 4 and loaded.replay.train_freq == 4 and "steps_per_train" not in loaded.hparams


def test_an_old_vpg_checkpoint_loads_its_former_names(tmp_path):
    renames = {
        "importance_weighting": ("use_iw", True),
        "iw_clip": ("clip_coef", 0.1),
        "anneal_lr": ("use_lr_decay", True),
    }
    path = _old_checkpoint(VPGModule(**TINY[VPGModule]), tmp_path / "old.ckpt", renames)
    with pytest.deprecated_call():
        loaded = VPGModule.load_from_checkpoint(path)
    assert (loaded.hparams.importance_weighting, loaded.hparams.iw_clip, loaded.hparams.anneal_lr) == (True, 0.1, True)
    assert not {"use_iw", "clip_coef", "use_lr_decay"} & set(loaded.hparams)


def test_upgraded_hyperparameters_is_the_whole_dict_under_the_new_names():
    saved = {"env_id": "CartPole-v1", "steps_per_train": 4, "_class_path": "rl_lightning.algos.dqn.DQNModule"}
    with pytest.deprecated_call():
        upgraded = DQNModule.upgraded_hyperparameters(saved)
    assert upgraded == {"env_id": "CartPole-v1", "_class_path": "rl_lightning.algos.dqn.DQNModule", "train_freq": 4}
    assert "steps_per_train" in saved  # not changed in place
    assert DQNModule.upgraded_hyperparameters({"train_freq": 2}) == {"train_freq": 2}


# -- the scripts' command line ---------------------------------------------------------------------------------


@pytest.fixture
def _in_tmp_path(tmp_path, monkeypatch):
    # ScriptCLI applies --num_threads and claims lightning_logs/ in the working directory.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["rl-lightning"])  # LightningCLI warns when given args and a command line
    num_threads = torch.get_num_threads()
    yield
    torch.set_num_threads(num_threads)


def _script(module_class, *argv: str) -> ScriptCLI:
    tiny = [f"--{name}={value}" for name, value in TINY[module_class].items()]
    return ScriptCLI(
        module_class, None, max_steps=2, eval_every_n_env_steps=100, video_every_n_env_steps=1000, args=[*tiny, *argv]
    )


@pytest.mark.usefixtures("_in_tmp_path")
@pytest.mark.parametrize(("module_class", "old", "new", "value"), RENAMES, ids=RENAME_IDS)
def test_a_script_takes_the_former_flag_with_a_warning_line(module_class, old, new, value, capsys):
    with pytest.warns(DeprecationWarning, match=f"--{old} is deprecated, use --{new}"):
        cli = _script(module_class, f"--{old}", str(value).lower())
    assert cli.model.hparams[new] == value and old not in cli.model.hparams
    assert f"warning: --{old} is deprecated, use --{new}\n" in capsys.readouterr().err


@pytest.mark.usefixtures("_in_tmp_path")
def test_a_script_takes_former_names_in_flag_forms_and_config_files(tmp_path, capsys):
    with pytest.deprecated_call():
        assert _script(DQNModule, "--steps_per_train=3").model.hparams.train_freq == 3
    config = tmp_path / "old.yaml"
    config.write_text("steps_per_train: 4\nlr: 0.01\n")
    with pytest.deprecated_call():
        cli = _script(DQNModule, "--config", str(config))
    assert (cli.model.hparams.train_freq, cli.model.hparams.lr) == (4, 0.01)
    assert f"warning: steps_per_train in --config {config} is deprecated, use train_freq\n" in capsys.readouterr().err
    with pytest.deprecated_call():  # a flag after the config wins, as for any option
        assert _script(DQNModule, "--config", str(config), "--train_freq", "2").model.hparams.train_freq == 2


@pytest.mark.usefixtures("_in_tmp_path")
def test_a_script_refuses_the_former_and_the_new_flag_with_different_values(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info, pytest.deprecated_call():
        _script(DQNModule, "--steps_per_train", "4", "--train_freq", "2")
    assert exit_info.value.code == 2
    assert "--steps_per_train 4 and --train_freq 2 set one argument" in capsys.readouterr().err
    config = tmp_path / "both.yaml"
    config.write_text("steps_per_train: 4\ntrain_freq: 2\n")
    with pytest.raises(SystemExit) as exit_info:
        _script(DQNModule, "--config", str(config))
    assert exit_info.value.code == 2
    assert "steps_per_train: 4 and train_freq: 2 in --config" in capsys.readouterr().err
    with pytest.deprecated_call():  # the same value twice: one argument
        assert _script(DQNModule, "--steps_per_train", "4", "--train_freq=4").model.hparams.train_freq == 4


@pytest.mark.usefixtures("_in_tmp_path")
def test_train_dqn_py_runs_with_the_former_flag(monkeypatch, capsys):
    argv = ["--steps_per_train", "2", "--max_steps", "2", "--no_video", "--eval_every_n_env_steps", "10000"]
    argv += [f"--{name}={value}" for name, value in TINY[DQNModule].items()]
    monkeypatch.setattr(sys, "argv", ["train_dqn.py", *argv])
    with pytest.deprecated_call(match="--steps_per_train is deprecated, use --train_freq"):
        runpy.run_path(str(ROOT / "scripts" / "train_dqn.py"), run_name="__main__")
    out, err = capsys.readouterr()
    assert "warning: --steps_per_train is deprecated, use --train_freq" in err
    assert "24 env steps, 2 updates" in out  # 8 random warm-up steps, then 2 collections of 2 steps x 4 envs


# -- rl-lightning fit / validate / test ------------------------------------------------------------------------

VPG_LR_DECAY = ["--model.init_args.use_lr_decay=true"]
DQN_FLAGS = ["--model", "DQNModule", *(f"--model.init_args.{name}={value}" for name, value in TINY[DQNModule].items())]


def _printed_model(argv: list[str], capsys) -> dict:
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", *argv, "--print_config"])
    assert exit_info.value.code in (0, None)
    return yaml.safe_load(capsys.readouterr().out)["model"]["init_args"]


@pytest.mark.usefixtures("_in_tmp_path")
@pytest.mark.parametrize("flag", ["--model.init_args.steps_per_train", "--model.steps_per_train"])
def test_rl_lightning_takes_the_former_flag(flag, capsys):
    for argv in ([flag, "4"], [f"{flag}=4"]):
        with pytest.deprecated_call(match=f"{flag} is deprecated"):
            printed = _printed_model([*DQN_FLAGS, *argv], capsys)
        assert printed["train_freq"] == 4 and "steps_per_train" not in printed


@pytest.mark.usefixtures("_in_tmp_path")
def test_rl_lightning_takes_vpgs_former_flags(capsys):
    with pytest.deprecated_call():
        printed = _printed_model(
            ["--model", "VPGModule", "--model.init_args.use_iw", "true", "--model.clip_coef", "0.1", *VPG_LR_DECAY],
            capsys,
        )
    assert (printed["importance_weighting"], printed["iw_clip"], printed["anneal_lr"]) == (True, 0.1, True)


@pytest.mark.usefixtures("_in_tmp_path")
def test_rl_lightning_warns_once_per_flag_and_fits_with_the_value(tmp_path, capsys):
    root = ["--trainer.enable_progress_bar=false", "--trainer.default_root_dir", str(tmp_path)]
    with pytest.deprecated_call():
        cli = make_cli(["fit", *DQN_FLAGS, "--model.init_args.steps_per_train", "2", "--trainer.max_steps", "2", *root])
    assert cli.model.hparams.train_freq == 2 and cli.model.env_steps == 8 + 2 * 2 * 4
    err = capsys.readouterr().err
    assert (
        err.count("warning: --model.init_args.steps_per_train is deprecated, use --model.init_args.train_freq\n") == 1
    )
    saved = yaml.safe_load((Path(cli.trainer.log_dir) / "config.yaml").read_text())
    assert saved["model"]["init_args"]["train_freq"] == 2 and "steps_per_train" not in saved["model"]["init_args"]


@pytest.mark.usefixtures("_in_tmp_path")
def test_rl_lightning_takes_the_former_names_in_a_config(tmp_path, capsys):
    config = tmp_path / "old.yaml"
    model = {"class_path": "rl_lightning.algos.dqn.DQNModule", "init_args": {**TINY[DQNModule], "steps_per_train": 4}}
    config.write_text(yaml.safe_dump({"model": model}))
    with pytest.raises(SystemExit), pytest.deprecated_call():
        main(["fit", "--config", str(config), "--print_config"])
    out, err = capsys.readouterr()
    printed = yaml.safe_load(out)["model"]["init_args"]
    assert printed["train_freq"] == 4 and "steps_per_train" not in printed
    assert (
        f"warning: model.init_args.steps_per_train in --config {config} is deprecated, use model.init_args.train_freq"
        in err
    )
    with pytest.deprecated_call():  # the YAML of --model too
        printed = _printed_model(
            ["--model", '{"class_path": "DQNModule", "init_args": {"steps_per_train": 5}}'], capsys
        )
    assert printed["train_freq"] == 5


@pytest.mark.usefixtures("_in_tmp_path")
def test_rl_lightning_refuses_the_former_and_the_new_name_with_different_values(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info, pytest.deprecated_call():
        main(["fit", *DQN_FLAGS, "--model.init_args.steps_per_train", "4", "--model.train_freq", "2"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--model.init_args.steps_per_train 4 and --model.train_freq 2 set one argument" in err
    config = tmp_path / "both.yaml"
    config.write_text(
        yaml.safe_dump({"model": {"class_path": "DQNModule", "init_args": {"steps_per_train": 4, "train_freq": 2}}})
    )
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(config)])
    assert exit_info.value.code == 2
    assert "model.init_args.steps_per_train: 4 and model.init_args.train_freq: 2 in --config" in capsys.readouterr().err


@pytest.mark.usefixtures("_in_tmp_path")
def test_rl_lightning_leaves_a_modules_own_argument_of_a_former_name_alone(capsys, recwarn):
    printed = _printed_model(["--model", "PPOModule", "--model.init_args.clip_coef", "0.3"], capsys)
    assert printed["clip_coef"] == 0.3  # PPO's clip_coef is its own, VPG's former iw_clip
    assert not [warning for warning in recwarn if issubclass(warning.category, DeprecationWarning)]
    assert "warning:" not in capsys.readouterr().err


@pytest.mark.usefixtures("_in_tmp_path")
def test_rl_lightning_validates_an_old_checkpoint(tmp_path, capsys):
    path = _old_checkpoint(DQNModule(**TINY[DQNModule]), tmp_path / "old.ckpt", {"train_freq": ("steps_per_train", 4)})
    with pytest.deprecated_call():
        cli = make_cli(["validate", "--ckpt_path", str(path), "--trainer.default_root_dir", str(tmp_path)])
    assert cli.model.hparams.train_freq == 4
