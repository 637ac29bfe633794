"""The Hub paths are safe (issue 46): repo ids by the Hub's rules before anything is written, writes only inside the
folder named and only over an earlier save's files (rl_lightning.hub_files), and crafted folders (a deeply nested or
huge config.json, a safetensors file declaring tensors the module does not have, of another dtype or shape, or a
huge header) refused with a ValueError naming the key, before anything big is parsed or read."""

import importlib.util
import json
import os
import struct
from pathlib import Path

import huggingface_hub
import pytest
import safetensors.torch
import torch
from quiet_trainer import quiet_trainer

from rl_lightning import PPOModule
from rl_lightning import hub as hub_module
from rl_lightning.hub_files import MAX_CONFIG_BYTES, MAX_HEADER_BYTES, MAX_JSON_DEPTH, SAVED_NAMES

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = {"env_id": "CartPole-v1", "num_envs": 2, "num_steps_per_rollout": 8, "hidden_sizes": (8, 8)}
NO_FILES = {"eval_episodes": 0, "video_steps": 0, "export_formats": ()}


def _script():
    spec = importlib.util.spec_from_file_location("push_to_hub_safety_script", ROOT / "scripts" / "push_to_hub.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


push_script = _script()


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A small PPO, its checkpoint and its pretrained folder (config.json, model.safetensors, README.md)."""
    root = tmp_path_factory.mktemp("hub_safety")
    module = PPOModule(**SETTINGS)
    trainer = quiet_trainer(max_steps=1)
    trainer.fit(module)
    trainer.save_checkpoint(root / "ppo.ckpt")
    module.save_pretrained(root / "ppo", **NO_FILES)
    return module.cpu().eval(), root / "ppo.ckpt", root / "ppo"


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir()) if path.is_file()}


def _main(argv: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        push_script.main(argv)
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def _users_folder(folder: Path) -> dict[str, bytes]:
    folder.mkdir()
    (folder / "README.md").write_text("# my project\n")
    (folder / "policy.onnx").write_bytes(b"my own onnx")
    (folder / "notes.txt").write_text("mine\n")
    return _snapshot(folder)


# -- item 2: repo ids, and writing only what is ours -----------------------------------------------------------


@pytest.mark.parametrize("repo_id", ["user/..", "user/bad name!", "user/a--b", "user/x.git"])
def test_the_script_refuses_a_repo_id_the_hub_refuses_before_writing_anything(
    repo_id, saved, tmp_path, capsys, monkeypatch
):
    before = _users_folder(tmp_path / "work")
    monkeypatch.chdir(tmp_path / "work")
    code, out, err = _main(["--ckpt_path", str(saved[1]), "--repo_id", repo_id, "--dry_run"], capsys)
    assert code == 2 and f"--repo_id must be a Hub repo id such as 'user/ppo-CartPole-v1', got {repo_id!r}" in err
    assert _snapshot(Path.cwd()) == before and not (Path.cwd() / "hub").exists() and out == ""


def test_the_library_refuses_a_bad_repo_id_before_writing_anything(saved, tmp_path):
    module = saved[0]
    with pytest.raises(ValueError, match=r"repo_id must be a Hub repo id .* got 'user/bad name!'"):
        module.save_pretrained(tmp_path / "out", repo_id="user/bad name!", **NO_FILES)
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match=r"repo_id must be a Hub repo id .* got 'user/\.\.'"):
        module.push_to_hub("user/..", local_dir=tmp_path / "out", **NO_FILES)
    with pytest.raises(ValueError, match=r"repo_id must be a Hub repo id .* got '\.\./x'"):
        hub_module.push_folder(saved[2], "../x")
    assert not (tmp_path / "out").exists()


def test_save_pretrained_refuses_to_overwrite_files_it_did_not_write(saved, tmp_path):
    folder = tmp_path / "work"
    before = _users_folder(folder)
    with pytest.raises(FileExistsError, match=r"would overwrite .*policy\.onnx, which it did not write \(no config"):
        saved[0].save_pretrained(folder, **NO_FILES)
    assert _snapshot(folder) == before and sorted(path.name for path in folder.iterdir()) == sorted(before)
    (folder / "policy.onnx").unlink()  # the card alone is refused too
    with pytest.raises(FileExistsError, match=r"would overwrite .*README\.md.*--overwrite"):
        saved[0].save_pretrained(folder, **NO_FILES)
    saved[0].save_pretrained(folder, overwrite=True, **NO_FILES)
    assert sorted(path.name for path in folder.iterdir()) == [
        "README.md",
        "config.json",
        "model.safetensors",
        "notes.txt",
    ]
    assert (folder / "notes.txt").read_text() == "mine\n"  # not one of save_pretrained's names: never touched
    assert (folder / "README.md").read_text().startswith("---\n")


def test_a_re_save_replaces_an_earlier_save_but_not_a_card_edited_since(saved, tmp_path):
    folder = tmp_path / "folder"
    saved[0].save_pretrained(folder, eval_episodes=0, video_steps=0, export_formats=("pt2",))
    config = json.loads((folder / "config.json").read_text())
    assert sorted(config["files"]) == ["README.md", "model.safetensors", "policy.pt2"]
    assert len(config["files"]["model.safetensors"]) == 64
    (folder / "keep.txt").write_text("mine")
    saved[0].save_pretrained(folder, **NO_FILES)  # no policy.pt2 this time: the earlier one is removed
    assert sorted(path.name for path in folder.iterdir()) == [
        "README.md",
        "config.json",
        "keep.txt",
        "model.safetensors",
    ]
    (folder / "README.md").write_text((folder / "README.md").read_text() + "\nMy notes.\n")
    with pytest.raises(FileExistsError, match=r"README\.md, which it did not write \(it changed since"):
        saved[0].save_pretrained(folder, **NO_FILES)
    assert (folder / "README.md").read_text().endswith("My notes.\n")
    legacy = json.loads((folder / "config.json").read_text())
    del legacy["files"]  # a folder saved before config.json listed its files
    (folder / "config.json").write_text(json.dumps(legacy))
    saved[0].save_pretrained(folder, **NO_FILES)
    assert "files" in json.loads((folder / "config.json").read_text())


def test_a_link_is_never_written_through(saved, tmp_path):
    outside = tmp_path / "outside.md"
    outside.write_text("not yours\n")
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "README.md").symlink_to(outside)
    with pytest.raises(FileExistsError, match=r"README\.md, a symbolic link, which it never writes through"):
        saved[0].save_pretrained(folder, **NO_FILES)
    saved[0].save_pretrained(folder, overwrite=True, **NO_FILES)
    assert not (folder / "README.md").is_symlink() and outside.read_text() == "not yours\n"
    (folder / "config.json").unlink()
    (folder / "config.json").mkdir()
    with pytest.raises(FileExistsError, match=r"config\.json, which is not a file"):
        saved[0].save_pretrained(folder, overwrite=True, **NO_FILES)


def test_a_save_that_fails_leaves_the_folder_as_it_was(saved, tmp_path, monkeypatch):
    folder = tmp_path / "folder"
    saved[0].save_pretrained(folder, **NO_FILES)
    before = _snapshot(folder)

    def fail(*args, **kwargs):
        raise RuntimeError("the env broke")

    monkeypatch.setattr(hub_module, "evaluate_greedy", fail)
    other = PPOModule(seed=1, **SETTINGS)  # other weights: a save that wrote as it went would change the folder
    with pytest.raises(RuntimeError, match="the env broke"):
        other.save_pretrained(folder, eval_episodes=3, video_steps=0, export_formats=())
    assert _snapshot(folder) == before and sorted(path.name for path in folder.iterdir()) == sorted(before)


def test_the_script_writes_only_inside_the_folder_and_asks_before_overwriting(saved, tmp_path, capsys, monkeypatch):
    checkpoint = saved[1]
    folder = tmp_path / "work"
    before = _users_folder(folder)
    args = ["--ckpt_path", str(checkpoint), "--repo_id", "user/ppo-CartPole-v1", "--eval_episodes", "1"]
    args += ["--video_steps", "0", "--export_formats", "--dry_run", "--local_dir", str(folder)]
    code, _, err = _main(args, capsys)
    assert code == 2 and "policy.onnx, which it did not write" in err and "--overwrite" in err
    assert _snapshot(folder) == before
    code, out, err = _main([*args, "--overwrite"], capsys)
    assert code == 0, err
    assert "dry run" in out and (folder / "notes.txt").read_text() == "mine\n"
    assert sorted(path.name for path in folder.iterdir()) == [
        "README.md",
        "config.json",
        "model.safetensors",
        "notes.txt",
    ]
    monkeypatch.chdir(tmp_path)  # the default hub/<name> may not be a link out of hub/
    (tmp_path / "hub").mkdir()
    (tmp_path / "hub" / "ppo-CartPole-v1").symlink_to(folder)
    code, _, err = _main(args[:-2], capsys)
    assert code == 2 and "hub/ppo-CartPole-v1 leads out of hub/" in err


def test_push_folder_sends_only_the_files_save_pretrained_writes(saved, tmp_path, monkeypatch):
    folder = tmp_path / "folder"
    saved[0].save_pretrained(folder, **NO_FILES)
    (folder / ".env").write_text("HF_TOKEN=secret")
    (folder / "notes.txt").write_text("mine")
    uploads = []
    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", lambda self, repo_id, **kwargs: repo_id)
    monkeypatch.setattr(huggingface_hub.HfApi, "upload_folder", lambda self, **kwargs: uploads.append(kwargs))
    hub_module.push_folder(folder, "user/ppo-CartPole-v1")
    assert uploads[0]["allow_patterns"] == ["config.json", "model.safetensors", "README.md"]
    assert set(uploads[0]["allow_patterns"]) <= set(SAVED_NAMES)


# -- item 3: crafted folders -----------------------------------------------------------------------------------


def _copy(saved_folder: Path, to: Path) -> Path:
    to.mkdir()
    for name in ("config.json", "model.safetensors"):
        (to / name).write_bytes((saved_folder / name).read_bytes())
    return to


def test_a_deeply_nested_config_is_a_value_error_naming_the_key(saved, tmp_path):
    folder = _copy(saved[2], tmp_path / "deep")
    text = (folder / "config.json").read_text()
    nested = "[" * 100_000 + "]" * 100_000  # 200 kB: a RecursionError in json.loads
    text = text.replace('"hyperparameters": {', f'"hyperparameters": {{"evil": {nested}, ', 1)
    (folder / "config.json").write_text(text)
    message = rf"nests lists and dicts deeper than {MAX_JSON_DEPTH} levels, at \['hyperparameters'\]\['evil'\]\[0\]"
    with pytest.raises(ValueError, match=message):
        PPOModule.from_pretrained(folder)
    text = text.replace(nested, "[" * 40 + "]" * 40)  # deep, but within Python's recursion limit
    (folder / "config.json").write_text(text)
    with pytest.raises(ValueError, match=r"at \['hyperparameters'\]\['evil'\]\[0\]\[0\]\[0\]\[0\]\.\.\. \(32 keys"):
        PPOModule.from_pretrained(folder)


def test_a_huge_config_is_refused_before_it_is_parsed(saved, tmp_path):
    folder = _copy(saved[2], tmp_path / "huge")
    text = (folder / "config.json").read_text()
    (folder / "config.json").write_text(text + " " * MAX_CONFIG_BYTES)
    with pytest.raises(ValueError, match=r"config\.json is over 4,194,304 bytes"):
        PPOModule.from_pretrained(folder)


def _header(path: Path) -> tuple[dict, bytes]:
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + length]), raw[8 + length :]


def _write(path: Path, header: dict, data: bytes) -> None:
    encoded = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + data)


def test_a_safetensors_file_declaring_a_12_gb_extra_tensor_is_refused_naming_it(saved, tmp_path, monkeypatch):
    folder = _copy(saved[2], tmp_path / "extra")
    header, data = _header(folder / "model.safetensors")
    end = len(data)
    header["evil"] = {"dtype": "F32", "shape": [3 * 2**30], "data_offsets": [end, end + 12 * 2**30]}
    _write(folder / "model.safetensors", header, data)

    def refuse(*args, **kwargs):
        raise AssertionError("tensor data was read")

    monkeypatch.setattr(safetensors, "safe_open", refuse)
    with pytest.raises(ValueError, match=r"only in model\.safetensors: \['evil'\], only in the module: none"):
        PPOModule.from_pretrained(folder)


@pytest.mark.parametrize("change", ["dtype", "shape"])
def test_a_tensor_of_another_dtype_or_shape_is_named(saved, tmp_path, change):
    folder = _copy(saved[2], tmp_path / change)
    weights = safetensors.torch.load_file(folder / "model.safetensors")
    name = "model.actor.layers.0.weight"
    weights[name] = weights[name].double() if change == "dtype" else weights[name][:4].contiguous()
    safetensors.torch.save_file(weights, folder / "model.safetensors")
    message = (
        rf"{name} has dtype 'F64' but the module's is 'F32' \(torch.float32\)"
        if change == "dtype"
        else rf"{name} has shape \(4, 4\) but the module built from its hyper-parameters has \(8, 4\)"
    )
    with pytest.raises(ValueError, match=message):
        PPOModule.from_pretrained(folder)


def test_a_huge_deep_or_inconsistent_safetensors_header_is_refused(saved, tmp_path):
    folder = _copy(saved[2], tmp_path / "header")
    path = folder / "model.safetensors"
    original = path.read_bytes()
    path.write_bytes(struct.pack("<Q", 2**40) + original[8:])
    with pytest.raises(
        ValueError, match=rf"not a safetensors file .*declares 1,099,511,627,776 bytes, over {MAX_HEADER_BYTES:,}"
    ):
        PPOModule.from_pretrained(folder)
    (folder / "original.safetensors").write_bytes(original)
    header, data = _header(folder / "original.safetensors")
    deep = {**header, "__metadata__": {"deep": json.loads("[" * 50 + "]" * 50)}}
    _write(path, deep, data)
    with pytest.raises(ValueError, match=r"not a safetensors file: .*deeper than 32 levels, at \['__metadata__'\]"):
        PPOModule.from_pretrained(folder)
    path.write_bytes(original + b"\0" * 16)
    with pytest.raises(ValueError, match=r"model\.safetensors is [\d,]+ bytes, but .*holding data beyond its tensors"):
        PPOModule.from_pretrained(folder)
    path.write_bytes(original)
    loaded = PPOModule.from_pretrained(folder)
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in saved[0].state_dict().items())
    assert os.path.getsize(path) == len(original)


def test_a_dtype_the_header_check_does_not_know_is_compared_once_read(saved, tmp_path, monkeypatch):
    from rl_lightning import hub_files

    folder = _copy(saved[2], tmp_path / "int32")
    weights = safetensors.torch.load_file(folder / "model.safetensors")
    name = "model.actor.layers.0.weight"
    weights[name] = weights[name].view(torch.int32)  # as many bytes, another dtype
    safetensors.torch.save_file(weights, folder / "model.safetensors")
    known = {dtype: code for dtype, code in hub_files._SAFETENSORS_DTYPES.items() if dtype is not torch.float32}
    monkeypatch.setattr(hub_files, "_SAFETENSORS_DTYPES", known)
    with pytest.raises(ValueError, match=rf"{name} is torch.int32, the module's torch.float32"):
        PPOModule.from_pretrained(folder)


def test_a_folder_may_not_choose_a_ray_address_it_loads_and_plays_here(saved, tmp_path, capsys, monkeypatch):
    from rl_lightning.envs import ray_vector

    folder = _copy(saved[2], tmp_path / "ray")
    config = json.loads((folder / "config.json").read_text())
    config["hyperparameters"]["env_backend"] = "ray"
    config["hyperparameters"]["env_kwargs"] = {"address": "ray://attacker.example:10001", "num_workers": 2}
    (folder / "config.json").write_text(json.dumps(config))

    def no_ray():
        raise AssertionError("Ray was imported")

    monkeypatch.setattr(ray_vector, "_import_ray", no_ray)
    loaded = PPOModule.from_pretrained(folder)
    assert loaded.hparams.env_backend == "gymnasium" and loaded.hparams.env_kwargs == {}
    err = capsys.readouterr().err
    assert (
        "env_backend 'ray' (now 'gymnasium')" in err and "env_kwargs['address'] 'ray://attacker.example:10001'" in err
    )
    evaluation = hub_module.evaluate_greedy(loaded, episodes=2, seed=0)
    assert len(evaluation.returns) == 2 and all(value >= 1 for value in evaluation.returns)
    obs = torch.zeros(3, 4)
    assert torch.equal(loaded.act(obs, greedy=True), saved[0].act(obs, greedy=True))
