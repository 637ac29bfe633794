"""Policies on the Hugging Face Hub (rl_lightning.hub): save_pretrained / from_pretrained round trips, the model
card, refusals of folders that do not fit, no pickle, push_to_hub and snapshot_download against fakes (no network),
and the scripts (enjoy.py --from_pretrained, push_to_hub.py)."""

import importlib.util
import json
import os
import pickle
import shlex
import shutil
from pathlib import Path

import gymnasium as gym
import huggingface_hub
import imageio.v3 as iio
import numpy as np
import pytest
import torch
import yaml
from quiet_trainer import quiet_trainer

from rl_lightning import DQNModule, PPOModule, RLModule, SACModule, TD3Module, VPGModule
from rl_lightning.hub import FILES_TO_LOAD, evaluate_greedy, space_to_json
from rl_lightning.trust import UntrustedCheckpointError

ROOT = Path(__file__).resolve().parents[1]
NO_FILES = {"eval_episodes": 2, "video_steps": 0, "export_formats": ()}
SMALL = {
    VPGModule: {"env_id": "CartPole-v1", "num_steps_per_rollout": 16, "hidden_sizes": (16, 16)},
    PPOModule: {"env_id": "CartPole-v1", "num_steps_per_rollout": 8, "hidden_sizes": (16, 16), "normalize_obs": True},
    DQNModule: {"env_id": "CartPole-v1", "hidden_sizes": (16, 16)},
    SACModule: {"env_id": "Pendulum-v1", "hidden_sizes": (16, 16)},
    TD3Module: {"env_id": "Pendulum-v1", "hidden_sizes": (16, 16)},
}


def _script(name: str):
    spec = importlib.util.spec_from_file_location(f"{name}_script", ROOT / "scripts" / f"{name}.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


enjoy, push_script = _script("enjoy"), _script("push_to_hub")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A PPO with observation normalisation after 4 updates, its checkpoint, and its folder with every file."""
    root = tmp_path_factory.mktemp("hub")
    module = PPOModule(num_envs=4, **SMALL[PPOModule])
    trainer = quiet_trainer(max_steps=4)
    trainer.fit(module)
    trainer.save_checkpoint(root / "ppo.ckpt")
    module.save_pretrained(root / "ppo", eval_episodes=4, eval_seed=7, video_steps=40)
    return module.cpu().eval(), root / "ppo.ckpt", root / "ppo"


def _observations(space: gym.Space, count: int = 100) -> torch.Tensor:
    space = gym.spaces.Box(np.maximum(space.low, -5), np.minimum(space.high, 5), space.shape, space.dtype)
    space.seed(0)
    return torch.as_tensor(np.stack([space.sample() for _ in range(count)]))


def _config(folder: Path) -> dict:
    return json.loads((folder / "config.json").read_text())


def _copy(folder: Path, to: Path) -> Path:
    to.mkdir()
    for name in FILES_TO_LOAD:
        shutil.copy(folder / name, to / name)
    return to


@pytest.mark.parametrize("module_class", list(SMALL), ids=lambda cls: cls.__name__)
def test_a_round_trip_gives_the_same_weights_actions_and_greedy_returns(module_class, tmp_path):
    module = module_class(num_envs=2, seed=3, **SMALL[module_class])
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # weights a fresh module of the same seed does not have
        for parameter in module.parameters():
            parameter.add_(0.1 * torch.randn(parameter.shape, generator=generator))
    module.save_pretrained(tmp_path, **NO_FILES)
    loaded = module_class.from_pretrained(tmp_path)
    assert type(loaded) is module_class and type(RLModule.from_pretrained(tmp_path)) is module_class
    state, loaded_state = module.state_dict(), loaded.state_dict()
    assert sorted(loaded_state) == sorted(state) and len(state) >= 6
    assert all(torch.equal(loaded_state[name], tensor) for name, tensor in state.items())
    obs = _observations(module.observation_space)
    actions = module.act(obs, greedy=True)
    assert actions.shape[0] == 100 and torch.equal(loaded.act(obs, greedy=True), actions)
    torch.manual_seed(5)
    sampled = module.act(obs)
    torch.manual_seed(5)
    assert torch.equal(loaded.act(obs), sampled)
    saved = _config(tmp_path)["evaluation"]
    again = evaluate_greedy(loaded, episodes=2, seed=0)
    assert again.returns == saved["returns"] and len(saved["returns"]) == 2
    assert (
        again.max_episode_steps == saved["max_episode_steps"] == (501 if "CartPole" in module.hparams.env_id else 201)
    )
    assert json.loads(json.dumps(dict(loaded.hparams))) == _config(tmp_path)["hyperparameters"]


def test_a_trained_module_keeps_its_normalizer_and_its_evaluation(trained):
    module, _, folder = trained
    loaded = PPOModule.from_pretrained(folder)
    count = loaded.obs_normalizer.stats.count.item()
    assert count == module.obs_normalizer.stats.count.item() and count > 32  # 4 envs x 8 steps seen
    assert torch.equal(loaded.obs_normalizer.stats.mean, module.obs_normalizer.stats.mean)
    obs = _observations(module.observation_space)
    assert torch.equal(loaded.act(obs, greedy=True), module.act(obs, greedy=True))
    saved = _config(folder)["evaluation"]
    assert saved["episodes"] == 4 and saved["seed"] == 7
    assert evaluate_greedy(loaded, 4, seed=7).returns == saved["returns"]
    assert saved["mean"] == pytest.approx(np.mean(saved["returns"])) and saved["std"] == pytest.approx(
        np.std(saved["returns"])
    )


def test_the_card_has_the_hub_s_fields_the_evaluation_the_command_and_the_video(trained):
    folder = trained[2]
    text = (folder / "README.md").read_text()
    _, front, body = text.split("---\n", 2)
    meta = yaml.safe_load(front)
    assert meta["library_name"] == "rl_lightning"
    assert {"reinforcement-learning", "CartPole-v1", "PPO", "rl_lightning"} <= set(meta["tags"])
    returns = _config(folder)["evaluation"]["returns"]
    (result,) = meta["model-index"][0]["results"]
    assert meta["model-index"][0]["name"] == "PPO"
    assert result["task"]["type"] == "reinforcement-learning"
    assert result["dataset"] == {"name": "CartPole-v1", "type": "CartPole-v1"}
    assert result["metrics"][0]["type"] == "mean_reward"
    assert result["metrics"][0]["value"] == f"{np.mean(returns):.2f} +/- {np.std(returns):.2f}"
    card = huggingface_hub.ModelCard.load(folder / "README.md")  # the Hub's own parser reads it
    assert card.data.eval_results[0].metric_value == result["metrics"][0]["value"]
    assert f"python scripts/enjoy.py --from_pretrained {folder} --episodes 4 --seed 7 --max_episode_steps 501" in body
    assert '<video src="replay.mp4"' in body
    frames = iio.imread(folder / "replay.mp4")
    assert frames.shape == (40, 80, 120, 3)  # 40 steps of the native CartPole drawing
    assert {path.name for path in folder.iterdir()} == {
        "README.md",
        "config.json",
        "model.safetensors",
        "policy.pt2",
        "policy.onnx",
        "replay.mp4",
    }
    env = _config(folder)["env"]
    assert env["observation_space"]["shape"] == [4] and env["observation_space"]["high"][1] == "inf"
    assert env["action_space"] == {"type": "Discrete", "n": 2, "start": 0}


def test_the_exported_policies_act_as_the_module(trained):
    import onnxruntime

    module, _, folder = trained
    obs = _observations(module.observation_space)
    expected = module.act(obs, greedy=True)
    assert torch.equal(torch.export.load(folder / "policy.pt2").module()(obs), expected)
    session = onnxruntime.InferenceSession(str(folder / "policy.onnx"))
    assert np.array_equal(session.run(None, {"obs": obs.numpy()})[0], expected.numpy())


def _edit(config: dict, path: str, value) -> None:
    *parents, last = path.split(".")
    for key in parents:
        config = config[key]
    config[last] = value


REFUSALS = {
    "other env": ({"env.env_id": "Acrobot-v1", "hyperparameters.env_id": "Acrobot-v1"}, r"observation_space is not"),
    "env spec and hyper-parameters disagree": ({"env.env_id": "Acrobot-v1"}, r"'Acrobot-v1'.*'CartPole-v1'.*edited"),
    "tampered observation space": ({"env.observation_space.high": [9.6, "inf", 0.42, "inf"]}, "observation_space"),
    "tampered action space": ({"env.action_space.n": 3}, r"action_space is not the env's.*\"n\": 3"),
    "other network": ({"hyperparameters.hidden_sizes": [8, 8]}, r"model.actor.layers.0.weight has shape \(16, 4\)"),
    "later format": ({"format_version": 2}, "format_version 2"),
    "not rl_lightning's": ({"library": "stable-baselines3"}, "not an rl_lightning config"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_folder_that_does_not_fit_is_refused_naming_what_differs(trained, tmp_path, case):
    edits, message = REFUSALS[case]
    folder = _copy(trained[2], tmp_path / "edited")
    config = _config(folder)
    for path, value in edits.items():
        _edit(config, path, value)
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=message):
        PPOModule.from_pretrained(folder)
    assert len(edits) >= 1


def test_another_algorithm_another_env_or_an_untrusted_class_path_is_refused(trained, tmp_path):
    folder = trained[2]
    with pytest.raises(ValueError, match="holds a PPOModule but is loaded into DQNModule"):
        DQNModule.from_pretrained(folder)
    with pytest.raises(ValueError, match=r"observation_space.*Acrobot-v1 \(loaded for it\) has"):
        PPOModule.from_pretrained(folder, env_id="Acrobot-v1")
    same_spaces = PPOModule.from_pretrained(folder, env_backend="gymnasium")  # gymnasium's CartPole: the same spaces
    assert same_spaces.hparams.env_backend == "gymnasium" and same_spaces.observation_space.shape == (4,)
    edited = _copy(folder, tmp_path / "evil")
    config = _config(edited)
    marker = tmp_path / "MARKER"
    config["hyperparameters"]["env_kwargs"] = {
        "x": {"class_path": "os.system", "init_args": {"command": f"touch {marker}"}}
    }
    (edited / "config.json").write_text(json.dumps(config))
    with pytest.raises(UntrustedCheckpointError, match="nothing was imported"):
        PPOModule.from_pretrained(edited)
    assert not marker.exists()


class _Payload:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_no_pickle_is_ever_loaded(trained, tmp_path, monkeypatch):
    marker = tmp_path / "MARKER"
    folder = _copy(trained[2], tmp_path / "folder")
    for name in ("pytorch_model.bin", "model.pt", "model.pkl", "model.ckpt"):
        (folder / name).write_bytes(pickle.dumps({"state_dict": _Payload(marker)}))

    def refuse(*args, **kwargs):
        raise AssertionError("a pickle loader was called")

    for owner, name in [(torch, "load"), (pickle, "load"), (pickle, "loads"), (pickle, "Unpickler")]:
        monkeypatch.setattr(owner, name, refuse)
    loaded = PPOModule.from_pretrained(folder)  # the pickles beside the safetensors are never opened
    obs = _observations(loaded.observation_space)
    assert torch.equal(loaded.act(obs, greedy=True), trained[0].act(obs, greedy=True))
    (folder / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="safetensors only"):
        PPOModule.from_pretrained(folder)
    (folder / "model.safetensors").write_bytes(pickle.dumps(_Payload(marker)))  # a pickle under the right name
    with pytest.raises(ValueError, match="not a safetensors file"):
        PPOModule.from_pretrained(folder)
    assert not marker.exists()


def _record_hub_calls(monkeypatch) -> list:
    calls = []

    def create_repo(self, repo_id, **kwargs):
        calls.append(("create_repo", repo_id, kwargs))
        return f"https://huggingface.co/{repo_id}"

    def upload_folder(self, **kwargs):
        folder = Path(kwargs["folder_path"])
        sent = {path.name: path.read_bytes() for path in folder.iterdir()}
        calls.append(("upload_folder", kwargs, sent))
        return "commit-info"

    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", create_repo)
    monkeypatch.setattr(huggingface_hub.HfApi, "upload_folder", upload_folder)
    return calls


def test_push_to_hub_sends_the_folder_in_one_commit(monkeypatch):
    calls = _record_hub_calls(monkeypatch)
    module = DQNModule(num_envs=2, **SMALL[DQNModule])
    options = {"eval_episodes": 3, "video_steps": 12, "export_formats": ("pt2",)}
    commit = module.push_to_hub("user/dqn-CartPole-v1", private=True, commit_message="first", **options)
    assert commit == "commit-info" and [call[0] for call in calls] == ["create_repo", "upload_folder"]
    assert calls[0][1] == "user/dqn-CartPole-v1" and calls[0][2] == {
        "private": True,
        "exist_ok": True,
        "repo_type": "model",
    }
    _, upload, sent = calls[1]
    assert upload["repo_id"] == "user/dqn-CartPole-v1" and upload["commit_message"] == "first"
    assert sorted(sent) == ["README.md", "config.json", "model.safetensors", "policy.pt2", "replay.mp4"]
    assert not Path(upload["folder_path"]).exists()  # a temporary folder, removed
    assert json.loads(sent["config.json"])["evaluation"]["episodes"] == 3
    assert "--from_pretrained user/dqn-CartPole-v1 --episodes 3 --seed 0" in sent["README.md"].decode()
    assert 'DQNModule.from_pretrained("user/dqn-CartPole-v1")' in sent["README.md"].decode()


def test_from_pretrained_downloads_a_repo_id_with_snapshot_download(trained, tmp_path, monkeypatch):
    module, _, folder = trained
    requests = []

    def snapshot_download(repo_id, **kwargs):
        requests.append((repo_id, kwargs))
        return str(folder)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    loaded = PPOModule.from_pretrained("user/ppo-CartPole-v1", revision="v1")
    (repo_id, kwargs) = requests[0]
    assert repo_id == "user/ppo-CartPole-v1" and kwargs["revision"] == "v1"
    assert kwargs["allow_patterns"] == ["config.json", "model.safetensors"]  # only what loading reads
    obs = _observations(module.observation_space)
    assert torch.equal(loaded.act(obs, greedy=True), module.act(obs, greedy=True))
    PPOModule.from_pretrained(folder)  # a local folder: no download
    PPOModule.from_pretrained(str(folder))
    assert len(requests) == 1

    def offline(repo_id, **kwargs):
        raise huggingface_hub.errors.LocalEntryNotFoundError("offline")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(OSError, match="could not download user/nope"):
        PPOModule.from_pretrained("user/nope")
    with pytest.raises(FileNotFoundError, match="is not a directory"):
        PPOModule.from_pretrained(tmp_path / "missing")
    assert space_to_json(module.action_space) == {"type": "Discrete", "n": 2, "start": 0}


def _main(script, argv: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        script.main(argv)
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def test_enjoy_from_pretrained_plays_the_card_s_command_with_the_card_s_returns(trained, tmp_path, capsys):
    _, _, folder = trained
    body = (folder / "README.md").read_text()
    command = next(line for line in body.splitlines() if line.startswith("python scripts/enjoy.py"))
    argv = shlex.split(command)[2:]
    video = tmp_path / "play.mp4"
    code, out, err = _main(enjoy, [*argv, "--video", str(video)], capsys)
    assert code == 0, err
    printed = [float(value) for value in out.split("returns [")[1].split("]")[0].split(",")]
    returns = _config(folder)["evaluation"]["returns"]
    assert printed == [round(value, 1) for value in returns] and len(printed) == 4
    assert len(iio.imread(video)) == sum(returns)  # one frame per step, +1 reward per step
    edited = _copy(folder, tmp_path / "edited")
    config = _config(edited)
    config["algorithm"] = "TD3Module"
    (edited / "config.json").write_text(json.dumps(config))
    code, _, err = _main(enjoy, ["--from_pretrained", str(edited)], capsys)
    assert code == 2 and "TD3Module" in err
    code, _, err = _main(enjoy, ["--from_pretrained", str(tmp_path / "nothing-here")], capsys)
    assert code == 2 and "is not a directory" in err
    code, _, err = _main(enjoy, ["--from_pretrained", str(folder), "--ckpt_path", "x.ckpt"], capsys)
    assert code == 2 and "not allowed with argument" in err


@pytest.mark.parametrize("script", [enjoy, push_script], ids=["enjoy", "push_to_hub"])
def test_help_lists_every_option(script, capsys):
    code, out, _ = _main(script, ["--help"], capsys)
    assert code == 0
    options = ["--env_id", "--from_pretrained", "--ckpt_path", "--video"] if script is enjoy else []
    options += ["--repo_id", "--local_dir", "--eval_episodes", "--video_steps", "--dry_run", "--overwrite"] * (
        script is push_script
    )
    assert options and all(option in out for option in options)


def test_push_to_hub_script_evaluates_a_checkpoint_writes_the_folder_and_pushes(trained, tmp_path, capsys, monkeypatch):
    _, checkpoint, _ = trained
    calls = _record_hub_calls(monkeypatch)
    folder = tmp_path / "out"
    args = ["--ckpt_path", str(checkpoint), "--repo_id", "user/ppo-CartPole-v1", "--local_dir", str(folder)]
    args += ["--eval_episodes", "3", "--seed", "7", "--video_steps", "10", "--export_formats", "pt2"]
    code, out, err = _main(push_script, [*args, "--dry_run"], capsys)
    assert code == 0, err
    assert calls == [] and "dry run: nothing pushed to user/ppo-CartPole-v1" in out
    evaluation = _config(folder)["evaluation"]
    assert evaluation["episodes"] == 3 and evaluation["returns"] == _config(trained[2])["evaluation"]["returns"][:3]
    assert f"mean_reward {np.mean(evaluation['returns']):.2f} +/- {np.std(evaluation['returns']):.2f}" in out
    assert sorted(path.name for path in folder.iterdir()) == [
        "README.md",
        "config.json",
        "model.safetensors",
        "policy.pt2",
        "replay.mp4",
    ]
    code, out, err = _main(push_script, [*args, "--private"], capsys)
    assert code == 0, err
    assert [call[0] for call in calls] == ["create_repo", "upload_folder"] and calls[0][2]["private"] is True
    assert calls[1][1]["folder_path"] == str(folder) and "pushed: commit-info" in out
    code, _, err = _main(push_script, ["--ckpt_path", str(checkpoint), "--repo_id", "no-user"], capsys)
    assert code == 2 and "--repo_id must be user/name" in err


def test_saving_over_a_folder_leaves_none_of_the_previous_files_it_did_not_write(trained, tmp_path):
    folder = tmp_path / "again"
    shutil.copytree(trained[2], folder)
    VPGModule(num_envs=2, **SMALL[VPGModule]).save_pretrained(folder, **NO_FILES)
    assert sorted(path.name for path in folder.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    assert _config(folder)["algorithm"] == "VPGModule" and "replay.mp4" not in (folder / "README.md").read_text()
