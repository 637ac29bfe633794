"""Nothing runs from a file (issue 31): a checkpoint's hyper-parameters are data. Each attack is a real
checkpoint of this project edited by hand (it still loads with ``weights_only=True``) whose payload would
create a marker file; every test asserts the marker is never created and nothing is imported."""

import gc
import importlib
import importlib.util
import io
import os
import sys
from pathlib import Path

import gymnasium as gym
import pytest
import torch
from quiet_trainer import quiet_trainer

from rl_lightning import PPOModule
from rl_lightning.cli import make_cli
from rl_lightning.envs.gym_adapter import resolve_wrappers
from rl_lightning.trust import UntrustedCheckpointError, allow_class_paths, check_file_hyperparameters, untrusted

ROOT = Path(__file__).resolve().parents[1]
EVIL_MODULE = """
import pathlib
pathlib.Path({marker!r}).touch()
import gymnasium
from rl_lightning import PPOModule
class EvilModule(PPOModule):
    pass
class Wrapper(gymnasium.Wrapper):
    pass
def evil(*args, **kwargs):
    pathlib.Path({marker!r}).touch()
"""


#: name -> how the checkpoint's hyper-parameters are edited (MARKER: the marker file's path).
ATTACKS = {
    "pipepager wrapper spec": lambda h, marker: h.update(
        env_kwargs={"wrappers": [{"class_path": "pydoc.pipepager", "init_args": {"cmd": f"touch {marker}"}}]}
    ),
    "os.system spec in env_kwargs": lambda h, marker: h.update(
        env_kwargs={"x": {"class_path": "os.system", "init_args": {"command": f"touch {marker}"}}}
    ),
    "wrapper of an importable module": lambda h, marker: h.update(env_kwargs={"wrappers": ["relmark_import.Nothing"]}),
    "gymnasium backend, wrapper of an importable module": lambda h, marker: h.update(
        env_backend="gymnasium", env_kwargs={"wrappers": ["relmark_import.Wrapper"]}
    ),
    # (not named PPOModule: a second LightningModule subclass of that name would make `--model PPOModule`
    # ambiguous for jsonargparse in the tests that follow in the same process)
    "module class path": lambda h, marker: h.update(_class_path="relmark_import.EvilModule"),
    "Lightning instantiator": lambda h, marker: h.update(_instantiator="relmark_import.evil"),
    "gymnasium module:id env id": lambda h, marker: h.update(env_backend="gymnasium", env_id="relmark_import:Evil-v0"),
    "spec in another hyper-parameter": lambda h, marker: h.update(
        hidden_sizes={"class_path": "os.system", "init_args": {"command": f"touch {marker}"}}
    ),
}


@pytest.fixture(autouse=True)
def _no_pytest_argv(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["rl-lightning"])  # LightningCLI warns when given both args and a command line


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("safe_loading")
    trainer = quiet_trainer(max_steps=1)
    trainer.fit(PPOModule(num_envs=4, num_steps_per_rollout=8))
    trainer.save_checkpoint(root / "ppo.ckpt")
    trainer = quiet_trainer(max_steps=1)
    trainer.fit(PPOModule(env_id="Acrobot-v1", num_envs=4, num_steps_per_rollout=8))
    trainer.save_checkpoint(root / "acrobot.ckpt")
    return root


@pytest.fixture
def attacker(tmp_path, monkeypatch):
    """A directory on sys.path with ``relmark_import`` (its import creates the marker) and the marker's path."""
    marker = tmp_path / "MARKER"
    (tmp_path / "relmark_import.py").write_text(EVIL_MODULE.format(marker=str(marker)))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    sys.modules.pop("relmark_import", None)
    yield marker
    sys.modules.pop("relmark_import", None)
    gc.collect()  # its classes gone from LightningModule.__subclasses__() too


def _evil_checkpoint(saved: Path, directory: Path, attack: str, marker: Path) -> Path:
    checkpoint = torch.load(saved / "ppo.ckpt", weights_only=True)
    ATTACKS[attack](checkpoint["hyper_parameters"], str(marker))
    path = directory / "evil.ckpt"
    torch.save(checkpoint, path)
    torch.load(path, weights_only=True)  # it is still a plain file
    return path


def _untouched(marker: Path) -> bool:
    return not marker.exists() and "relmark_import" not in sys.modules


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_load_from_checkpoint_refuses_what_a_file_may_not_name_before_importing_it(saved, tmp_path, attacker, attack):
    path = _evil_checkpoint(saved, tmp_path, attack, attacker)
    with pytest.raises(UntrustedCheckpointError, match="nothing was imported") as error:
        PPOModule.load_from_checkpoint(path)
    assert "trust_remote_code=True" in str(error.value)
    assert "hyper_parameters[" in str(error.value)  # names the key
    assert _untouched(attacker)
    with pytest.raises(UntrustedCheckpointError):  # an open file too
        PPOModule.load_from_checkpoint(io.BytesIO(path.read_bytes()))
    assert _untouched(attacker)


@pytest.mark.parametrize("subcommand", ["validate", "test", "fit"])
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_the_cli_refuses_an_untrusted_checkpoint_with_exit_2(saved, tmp_path, attacker, attack, subcommand, capsys):
    path = _evil_checkpoint(saved, tmp_path, attack, attacker)
    args = [subcommand, "--ckpt_path", str(path), f"--trainer.default_root_dir={tmp_path}", "--trainer.max_steps=2"]
    with pytest.raises(SystemExit) as exit_info:
        make_cli(args if subcommand == "fit" else args[:-1])
    assert exit_info.value.code == 2
    assert "nothing was imported" in capsys.readouterr().err
    assert _untouched(attacker)
    assert not (tmp_path / "lightning_logs").exists()


@pytest.mark.parametrize("attack", ["pipepager wrapper spec", "module class path", "Lightning instantiator"])
def test_enjoy_refuses_an_untrusted_checkpoint(saved, tmp_path, attacker, attack, capsys):
    path = _evil_checkpoint(saved, tmp_path, attack, attacker)
    spec = importlib.util.spec_from_file_location("enjoy_script", ROOT / "scripts" / "enjoy.py")
    enjoy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(enjoy)
    with pytest.raises(SystemExit) as exit_info:
        enjoy.main(["--ckpt_path", str(path), "--episodes", "1"])
    assert exit_info.value.code == 2
    assert "--trust_checkpoint" in capsys.readouterr().err
    assert _untouched(attacker)


def test_a_pickle_in_a_resumed_checkpoint_is_never_unpickled(saved, tmp_path, attacker):
    class Payload:
        def __reduce__(self):
            return os.system, (f"touch {attacker}",)

    checkpoint = torch.load(saved / "ppo.ckpt", weights_only=True)
    checkpoint["payload"] = Payload()
    torch.save(checkpoint, tmp_path / "pickle.ckpt")
    trainer = quiet_trainer(max_steps=2)
    with pytest.raises(ValueError, match="weights_only=True"):
        trainer.fit(PPOModule(num_envs=4, num_steps_per_rollout=8), ckpt_path=tmp_path / "pickle.ckpt")
    with pytest.raises(ValueError, match="weights_only=True"):
        PPOModule.load_from_checkpoint(tmp_path / "pickle.ckpt")
    assert not attacker.exists()


def test_trusted_files_and_allowed_class_paths_load(saved, tmp_path, attacker, monkeypatch):
    path = _evil_checkpoint(saved, tmp_path, "module class path", attacker)
    module = PPOModule.load_from_checkpoint(path, trust_remote_code=True)  # the class path is not even used
    assert isinstance(module, PPOModule) and module.hparams.num_envs == 4
    path = _evil_checkpoint(saved, tmp_path, "gymnasium backend, wrapper of an importable module", attacker)
    monkeypatch.setattr("rl_lightning.trust._ALLOWED_BY_USER", set())
    allow_class_paths("relmark_import.Wrapper")
    module = PPOModule.load_from_checkpoint(path)  # allowed: imported, and a gymnasium.Wrapper
    assert attacker.exists()  # the user's own module was imported, as allowed
    assert module.hparams.env_kwargs == {"wrappers": ["relmark_import.Wrapper"]}
    with pytest.raises(TypeError, match="class paths"):
        allow_class_paths("nodots")


def test_the_caller_s_own_values_replace_the_file_s_without_the_check(saved, tmp_path, attacker):
    path = _evil_checkpoint(saved, tmp_path, "os.system spec in env_kwargs", attacker)
    module = PPOModule.load_from_checkpoint(path, env_kwargs=None)  # the caller's env_kwargs: the file's is unused
    assert module.hparams.env_kwargs is None and _untouched(attacker)


def test_checkpoints_the_cli_wrote_still_load(saved, tmp_path):
    checkpoint = torch.load(saved / "ppo.ckpt", weights_only=True)
    checkpoint["hyper_parameters"]["_instantiator"] = "lightning.pytorch.cli.instantiate_module"
    torch.save(checkpoint, tmp_path / "cli.ckpt")
    module = PPOModule.load_from_checkpoint(tmp_path / "cli.ckpt", map_location="cpu")
    reference = PPOModule.load_from_checkpoint(saved / "ppo.ckpt")
    for name, tensor in reference.state_dict().items():
        assert torch.equal(module.state_dict()[name], tensor), name
    assert "_instantiator" not in module.hparams and "_class_path" not in module.hparams


def test_allowed_gymnasium_wrappers_from_a_file_load_and_act(saved, tmp_path):
    checkpoint = torch.load(saved / "ppo.ckpt", weights_only=True)
    wrappers = [{"class_path": "gymnasium.wrappers.ClipReward", "init_args": {"min_reward": -1.0, "max_reward": 1.0}}]
    checkpoint["hyper_parameters"].update(env_backend="gymnasium", env_kwargs={"wrappers": wrappers})
    torch.save(checkpoint, tmp_path / "wrapped.ckpt")
    module = PPOModule.load_from_checkpoint(tmp_path / "wrapped.ckpt")
    assert module.hparams.env_kwargs["wrappers"][0]["class_path"] == "gymnasium.wrappers.ClipReward"
    envs = module.make_envs(2, seed=0)
    assert isinstance(envs.gymnasium_envs.envs[0], gym.wrappers.ClipReward)
    envs.close()
    for refused in ("gymnasium.wrappers.RecordVideo", "gymnasium.wrappers.TransformObservation"):
        with pytest.raises(UntrustedCheckpointError, match=refused.rpartition(".")[2]):
            check_file_hyperparameters({"env_kwargs": {"wrappers": [refused]}}, "x.ckpt")


@pytest.mark.parametrize("path", ["os.system", "builtins.exec", "subprocess.Popen", "json.dumps", "gymnasium.make"])
def test_a_wrapper_class_path_must_name_a_gymnasium_wrapper_before_it_is_called(path, monkeypatch):
    called = []
    module_name, _, name = path.rpartition(".")
    monkeypatch.setattr(importlib.import_module(module_name), name, lambda *a, **k: called.append(a), raising=True)
    with pytest.raises(TypeError, match=r"not a gymnasium\.Wrapper subclass"):
        PPOModule(env_backend="gymnasium", num_envs=2, env_kwargs={"wrappers": [path]})
    assert called == []


def test_wrapper_objects_from_python_must_be_wrappers_or_callables():
    import subprocess

    with pytest.raises(TypeError, match=r"not a gymnasium\.Wrapper subclass"):
        resolve_wrappers([subprocess.Popen])
    with pytest.raises(TypeError, match="must be a wrapper class"):
        resolve_wrappers([42])
    function = lambda env: gym.wrappers.ClipReward(env, -1.0, 1.0)  # noqa: E731 - the user's own callable
    assert resolve_wrappers([function, gym.wrappers.FlattenObservation]) == [function, gym.wrappers.FlattenObservation]


def test_while_a_file_loads_a_wrapper_class_path_resolves_against_the_allow_list_only(attacker):
    with untrusted("x.ckpt"), pytest.raises(UntrustedCheckpointError, match=r"relmark_import\.Nothing"):
        resolve_wrappers(["relmark_import.Nothing"])
    assert _untouched(attacker)
    with untrusted("x.ckpt"):
        assert resolve_wrappers(["gymnasium.wrappers.FlattenObservation"]) == [gym.wrappers.FlattenObservation]
    with pytest.raises(ValueError, match="cannot import"):  # outside a load, the user's own path is imported
        resolve_wrappers(["relmark_import.Nothing"])
    assert attacker.exists()


def test_class_specs_on_the_command_line_are_not_built_by_jsonargparse(tmp_path, attacker, capsys):
    spec = f'{{"x": {{"class_path": "os.system", "init_args": {{"command": "touch {attacker}"}}}}}}'
    args = ["fit", "--model=PPOModule", "--model.env_backend=gymnasium", f"--model.env_kwargs={spec}"]
    with pytest.raises(SystemExit) as exit_info:
        make_cli([*args, "--trainer.max_steps=1", f"--trainer.default_root_dir={tmp_path}"])
    assert exit_info.value.code == 2 and not attacker.exists()


def test_a_wrapper_spec_with_arguments_works_from_the_command_line(tmp_path):
    wrappers = (
        '{"wrappers": [{"class_path": "gymnasium.wrappers.TimeAwareObservation", "init_args": {"flatten": true}}]}'
    )
    cli = make_cli(
        [
            "fit",
            "--model=PPOModule",
            "--model.env_backend=gymnasium",
            "--model.num_envs=2",
            "--model.num_steps_per_rollout=8",
            f"--model.env_kwargs={wrappers}",
            "--trainer.max_steps=1",
            "--trainer.enable_progress_bar=false",
            f"--trainer.default_root_dir={tmp_path}",
        ]
    )
    assert cli.model.observation_space.shape == (5,)  # CartPole's 4 and the time
    assert cli.trainer.global_step == 1


def test_the_cli_refuses_a_checkpoint_of_another_env_than_the_config_s(saved, tmp_path, capsys):
    args = ["fit", "--config", str(ROOT / "configs" / "ppo_cartpole.yaml"), "--model.init_args.num_envs=4"]
    with pytest.raises(SystemExit) as exit_info:
        make_cli([*args, "--ckpt_path", str(saved / "acrobot.ckpt"), f"--trainer.default_root_dir={tmp_path}"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert "Acrobot-v1" in error and "CartPole-v1" in error
    assert not (tmp_path / "lightning_logs").exists()
    with pytest.raises(SystemExit) as exit_info:  # the default env_id counts too
        make_cli(["validate", "--model=PPOModule", "--model.num_envs=4", "--ckpt_path", str(saved / "acrobot.ckpt")])
    assert exit_info.value.code == 2
    cli = make_cli(["validate", "--ckpt_path", str(saved / "acrobot.ckpt")])  # the checkpoint's own settings
    assert cli.model.hparams.env_id == "Acrobot-v1"
