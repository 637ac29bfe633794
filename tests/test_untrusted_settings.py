"""Issue 46: no file chooses where the process connects or what it runs. A checkpoint's ``env_backend="ray"`` with
a cluster's ``address``, or ``compile={"options": {"cpp.cxx": ...}}`` (the C++ compiler inductor runs), is left out
for the local, safe value with one note, unless the user gives it (flags, keyword arguments) or trusts the file
(``--trust_checkpoint``, ``trust_remote_code=True``): ``rl_lightning.trust.local_file_settings``."""

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from quiet_trainer import quiet_trainer

from rl_lightning import PPOModule
from rl_lightning.cli import make_cli
from rl_lightning.trust import local_file_settings

ROOT = Path(__file__).resolve().parents[1]
NOTE = "may not choose where this process connects or what it runs; left out: "
HOW_TO_KEEP = (
    ". To keep one, give it yourself (a flag on the command line, a keyword argument in code), or trust the file "
    "(--trust_checkpoint; in code: trust_remote_code=True)"
)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    path = tmp_path_factory.mktemp("untrusted") / "ppo.ckpt"
    trainer = quiet_trainer(max_steps=1)
    trainer.fit(PPOModule(num_envs=4, num_steps_per_rollout=8))
    trainer.save_checkpoint(path)
    return path


def _edited(saved: Path, path: Path, **hparams) -> Path:
    checkpoint = torch.load(saved, weights_only=True)
    checkpoint["hyper_parameters"].update(hparams)
    torch.save(checkpoint, path)
    return path


class _Listener:
    """A TCP port on 127.0.0.1 that counts the connections made to it (a Ray cluster's head, as a file names it)."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.address = f"127.0.0.1:{self.server.getsockname()[1]}"
        self.connections, self._stop = 0, threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self._stop.is_set():
            try:
                connection, _ = self.server.accept()
            except OSError:
                continue
            self.connections += 1
            connection.close()

    def close(self):
        self._stop.set()
        self.thread.join()
        self.server.close()


@pytest.fixture
def listener():
    listening = _Listener()
    yield listening
    listening.close()


def test_local_file_settings_leaves_out_each_process_level_setting_and_says_so_once(capsys):
    hparams = {
        "lr": 0.1,
        "env_backend": "ray",
        "env_kwargs": {"num_workers": 2, "address": "10.0.0.1:6379", "max_episode_steps": 50, "log_dir": "/x"},
        "compile": {"options": {"cpp.cxx": [None, "/tmp/cc"]}, "backend": "tvm", "mode": "default", "fullgraph": True},
    }
    local = local_file_settings(hparams, "run.ckpt")
    assert local == {
        "lr": 0.1,
        "env_backend": "gymnasium",  # the env Ray's workers stepped, stepped here
        "env_kwargs": {"max_episode_steps": 50},
        "compile": {"mode": "default", "fullgraph": True},
    }
    assert hparams["env_kwargs"]["address"] == "10.0.0.1:6379"  # a copy: the file's dict is as read
    err = capsys.readouterr().err
    assert err == (
        f"note: run.ckpt {NOTE}env_backend 'ray' (now 'gymnasium'), env_kwargs['num_workers'] 2, env_kwargs['address'] "
        "'10.0.0.1:6379', env_kwargs['log_dir'] '/x', compile['options'] {'cpp.cxx': [None, '/tmp/cc']}, "
        f"compile['backend'] 'tvm'{HOW_TO_KEEP}\n"
    )
    plain = {"env_backend": "envpool", "env_kwargs": {"num_threads": 4}, "compile": {"backend": "inductor"}}
    assert local_file_settings(plain, "run.ckpt") == plain and capsys.readouterr().err == ""


def test_load_from_checkpoint_builds_a_file_s_ray_and_compile_settings_locally_unless_given_or_trusted(
    saved, tmp_path, capsys
):
    ray = {"env_backend": "ray", "env_kwargs": {"num_workers": 1, "address": "127.0.0.1:1"}}
    path = _edited(saved, tmp_path / "edited.ckpt", **ray, compile={"options": {"cpp.cxx": (None, "/tmp/cc")}})
    module = PPOModule.load_from_checkpoint(path)
    assert (module.hparams.env_backend, module.hparams.env_kwargs, module.hparams.compile) == ("gymnasium", {}, {})
    assert f"note: {path} {NOTE}env_backend 'ray' (now 'gymnasium')" in capsys.readouterr().err
    mine = PPOModule.load_from_checkpoint(path, env_backend="ray", env_kwargs={"num_workers": 2})  # the caller's
    assert (mine.hparams.env_backend, mine.hparams.env_kwargs, mine.hparams.compile) == ("ray", {"num_workers": 2}, {})
    assert capsys.readouterr().err.endswith(f"{NOTE}compile['options'] {{'cpp.cxx': (None, '/tmp/cc')}}{HOW_TO_KEEP}\n")
    trusted = PPOModule.load_from_checkpoint(path, trust_remote_code=True)
    assert trusted.hparams.env_kwargs["address"] == "127.0.0.1:1"
    assert trusted.hparams.compile == {"options": {"cpp.cxx": (None, "/tmp/cc")}}
    assert "note:" not in capsys.readouterr().err


def test_ckpt_path_last_takes_no_process_level_setting_from_its_checkpoint(
    saved, tmp_path, listener, capsys, monkeypatch
):
    monkeypatch.setattr(sys, "argv", ["rl-lightning"])  # LightningCLI warns when given both args and a command line
    last = tmp_path / "lightning_logs" / "PPO-CartPole-v1" / "version_0" / "checkpoints" / "last.ckpt"
    last.parent.mkdir(parents=True)
    _edited(saved, last, env_backend="ray", env_kwargs={"num_workers": 1, "address": listener.address})
    cli = make_cli(["validate", "--model=PPOModule", "--ckpt_path=last", f"--trainer.default_root_dir={tmp_path}"])
    assert (cli.model.hparams.env_backend, cli.model.hparams.env_kwargs, cli.model.hparams.num_envs) == (
        "gymnasium",
        {},
        4,  # the settings not given come back from the checkpoint; its process-level ones do not
    )
    assert f"note: --ckpt_path last ({last}) {NOTE}env_backend 'ray' (now 'gymnasium')" in capsys.readouterr().err
    assert listener.connections == 0


@pytest.mark.slow
def test_validate_and_enjoy_of_a_checkpoint_naming_a_ray_cluster_run_here_and_connect_nowhere(
    saved, tmp_path, listener
):
    ray = {"env_backend": "ray", "env_kwargs": {"num_workers": 1, "address": listener.address}}
    path = _edited(saved, tmp_path / "ray.ckpt", **ray)
    commands = {
        "validate": [sys.executable, "-m", "rl_lightning", "validate", "--ckpt_path", str(path)],
        "enjoy": [sys.executable, str(ROOT / "scripts" / "enjoy.py"), "--ckpt_path", str(path), "--episodes", "1"],
    }
    for name, command in commands.items():
        result = subprocess.run(command, capture_output=True, text=True, timeout=90, cwd=tmp_path)
        assert result.returncode == 0, (name, result.stderr[-2000:])
        assert f"{NOTE}env_backend 'ray' (now 'gymnasium'), env_kwargs['num_workers'] 1, " in result.stderr
        assert "CartPole-v1" in result.stdout
    assert listener.connections == 0


@pytest.mark.slow
def test_fit_from_a_checkpoint_naming_a_compiler_does_not_run_it(saved, tmp_path):
    """compile={"options": {"cpp.cxx": [None, SCRIPT]}}: inductor runs SCRIPT as its C++ compiler. From an untrusted
    checkpoint the run compiles with the default compiler; SCRIPT (it would write MARKER) never runs."""
    marker, script = tmp_path / "MARKER", tmp_path / "cxx.sh"
    script.write_text(f'#!/bin/sh\ntouch "{marker}"\nexec g++ "$@"\n')
    script.chmod(0o755)
    path = _edited(saved, tmp_path / "cxx.ckpt", compile={"options": {"cpp.cxx": (None, str(script))}})
    command = [sys.executable, "-m", "rl_lightning", "fit", "--ckpt_path", str(path), "--trainer.max_steps=2"]
    command += [f"--trainer.default_root_dir={tmp_path}"]
    environment = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}  # compiled afresh
    result = subprocess.run(command, capture_output=True, text=True, timeout=400, env=environment)
    assert result.returncode == 0, result.stderr[-3000:]
    assert not marker.exists()
    assert "(of which compiling: " in result.stdout  # it compiled, with the default compiler
    assert f"compile['options'] {{'cpp.cxx': (None, '{script}')}}{HOW_TO_KEEP}" in result.stderr


@pytest.mark.slow
def test_a_model_trained_in_ray_workers_plays_and_validates_here(tmp_path):
    """PPO trained with env_backend="ray" and 2 workers: enjoy.py (its backend, and --backend gymnasium) and
    validate play it in gymnasium's env in this process. Before, enjoy asked Ray for 2 workers for its one env (exit
    2), --backend gymnasium handed gymnasium.make num_workers (a traceback)."""
    ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'rl_lightning[ray]')")
    from rl_lightning.envs.ray_vector import init_ray

    init_ray(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    try:
        module = PPOModule(num_envs=2, num_steps_per_rollout=8, env_backend="ray", env_kwargs={"num_workers": 2})
        trainer = quiet_trainer(max_steps=1)
        trainer.fit(module)
        trainer.save_checkpoint(tmp_path / "ray.ckpt")
    finally:
        ray.shutdown()
    path = str(tmp_path / "ray.ckpt")
    enjoy = [sys.executable, str(ROOT / "scripts" / "enjoy.py"), "--ckpt_path", path, "--episodes", "1"]
    validate = [sys.executable, "-m", "rl_lightning", "validate", "--ckpt_path", path]
    played = "CartPole-v1: 1 greedy episodes, returns ["
    for command, out in [(enjoy, played), ([*enjoy, "--backend", "gymnasium"], played), (validate, "greedy eval")]:
        result = subprocess.run(command, capture_output=True, text=True, timeout=90, cwd=tmp_path)
        assert result.returncode == 0, (command, result.stderr[-2000:])
        assert f"{NOTE}env_backend 'ray' (now 'gymnasium'), env_kwargs['num_workers'] 2{HOW_TO_KEEP}" in result.stderr
        assert out in result.stdout and "Traceback" not in result.stderr
    # Trusted, it plays in Ray's workers as trained (a local Ray: the checkpoint named no cluster), one for its env.
    result = subprocess.run([*enjoy, "--trust_checkpoint"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 0 and played in result.stdout, result.stderr[-2000:]
    assert "note:" not in result.stderr
