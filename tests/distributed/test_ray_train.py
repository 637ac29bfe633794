"""Ray Train on a local Ray cluster (2 CPUs, 2 workers): a run is a DDP run (identical weights, counters of both
workers, one log directory, the start line and report once), it resumes exactly from Ray's checkpoint, and bad
input fails within seconds."""

import contextlib
import logging
import os
import runpy
import socket
import socketserver
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'rl_lightning[ray]'")
pytest.importorskip("ray.train.lightning", reason="Ray Train is not installed: pip install 'rl_lightning[ray]'")

from rl_lightning import VPGModule  # noqa: E402
from rl_lightning.envs.ray_vector import init_ray  # noqa: E402
from rl_lightning.ray_train import check_address, ray_trainer  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
import ray_train_record  # noqa: E402

# The callback goes to the workers by value: they cannot import the tests.
ray.cloudpickle.register_pickle_by_value(ray_train_record)

# The three runs of the `runs` fixture take about 70 s on 2 idle cores (each starts Ray Train's controller and
# workers); the first test to use it waits for them.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# 8 envs x 50 steps per rollout on each of 2 workers: 800 env steps per update (VPG: one update per rollout).
MODULE_KWARGS = {"num_envs": 8, "num_steps_per_rollout": 50, "seed": 4}
RUN_CALLBACKS = {"eval_every_n_env_steps": 1600, "num_eval_episodes": 4, "video_every_n_env_steps": None}
SCRIPT_ARGS = ["--num_envs", "8", "--num_steps_per_rollout", "50", "--seed", "4", "--eval_every_n_env_steps", "1600"]
SCRIPT_ARGS += ["--num_eval_episodes", "4", "--no_video"]
RUN_DIR = Path("lightning_logs") / "VPG-CartPole-v1"


@pytest.fixture(scope="module")
def ray_cluster(request):
    """A local Ray of 2 CPUs for this file's tests; its address."""
    # Ray Train's controller polls its workers every 2 s by default: a tiny run would mostly wait.
    previous = os.environ.get("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S")
    os.environ["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"] = "0.2"

    def stop() -> None:
        ray.shutdown()
        if previous is None:
            os.environ.pop("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", None)
        else:
            os.environ["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"] = previous

    request.addfinalizer(stop)
    init_ray(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING)
    return ray.get_runtime_context().gcs_address


@pytest.fixture(scope="module")
def runs(ray_cluster, tmp_path_factory):
    """Three runs on the cluster: 4 updates (``first``), the same Ray run started again for 6 (``resumed``, from
    Ray's checkpoint of the first), and scripts/train_ray.py for 6 straight (``script``)."""
    tmp = tmp_path_factory.mktemp("ray_train")

    def fit(max_steps: int, record: str):
        trainer = ray_trainer(
            VPGModule,
            MODULE_KWARGS,
            trainer_kwargs={"max_steps": max_steps},
            run_callbacks=RUN_CALLBACKS,
            callbacks=[ray_train_record.Record(tmp / record)],
            root_dir=tmp / "run",
            storage_path=str(tmp / "ray"),
            name="vpg",
        )
        return trainer.fit()

    ray_args = ["--address", ray_cluster, "--storage_path", str(tmp / "ray"), "--name", "straight"]
    first = fit(4, "first")
    resumed = fit(6, "resumed")
    script = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "train_ray.py"), "vpg", *SCRIPT_ARGS, "--max_steps", "6", *ray_args],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert script.returncode == 0, script.stderr[-3000:]
    return {"tmp": tmp, "first": first, "resumed": resumed, "script": script}


def _records(directory: Path) -> tuple[dict, dict]:
    return torch.load(directory / "rank0.pt"), torch.load(directory / "rank1.pt")


def _assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name, tensor in a.items():
        torch.testing.assert_close(tensor, b[name], rtol=0, atol=0, msg=name)


def _scalars(run: Path, tag: str) -> list[float]:
    [event_file] = run.glob("events.out.tfevents.*")  # one logger: worker 0's
    events = EventAccumulator(str(event_file.parent))
    events.Reload()
    return [event.value for event in events.Scalars(tag)]


def test_two_workers_end_with_identical_weights_and_the_counts_of_a_ddp_run(runs):
    for name, updates in (("first", 4), ("resumed", 6)):
        rank0, rank1 = _records(runs["tmp"] / name)
        assert rank0["world_size"] == rank1["world_size"] == 2
        assert rank0["global_step"] == rank1["global_step"] == updates
        # Env steps are counted over both workers: updates x 8 envs x 50 steps x 2 workers.
        assert rank0["env_steps"] == rank1["env_steps"] == updates * 8 * 50 * 2
        _assert_same_weights(rank0["state_dict"], rank1["state_dict"])


def test_a_run_logs_once_and_writes_its_checkpoints_and_rays(runs):
    run = runs["tmp"] / "run" / RUN_DIR
    assert sorted(path.name for path in run.iterdir()) == ["version_0", "version_1"]  # the resumed run: a new one
    assert _scalars(run / "version_0", "charts/env_steps") == [800.0, 1600.0, 2400.0, 3200.0]
    assert _scalars(run / "version_1", "charts/env_steps") == [4000.0, 4800.0]
    checkpoints = sorted(path.name for path in (run / "version_0" / "checkpoints").glob("*.ckpt"))
    assert len(checkpoints) == 2 and checkpoints[0].startswith("best-") and checkpoints[1] == "last.ckpt"
    last = torch.load(run / "version_0" / "checkpoints" / "last.ckpt", weights_only=False)
    assert last["global_step"] == 4 and last["rl_lightning"]["env_steps"] == 3200
    assert len(last["rl_lightning"]["sources"]) == 2  # each worker's envs
    # Ray's copies of the last epochs' checkpoints under storage_path/name, the newest 2 of the first run and the
    # resumed one (num_to_keep=2).
    assert runs["first"].metrics["step"] == 4 and runs["resumed"].metrics["step"] == 6
    kept = sorted(path for path in (runs["tmp"] / "ray" / "vpg").glob("checkpoint_*") if path.is_dir())
    assert len(kept) == 2 and Path(runs["resumed"].checkpoint.path) == kept[-1]
    saved = [torch.load(path / "checkpoint.ckpt", weights_only=False) for path in kept]
    assert [(s["global_step"], s["rl_lightning"]["env_steps"]) for s in saved] == [(5, 4000), (6, 4800)]


def test_a_run_started_again_resumes_from_rays_checkpoint_exactly(runs):
    """The same Ray run (storage_path and name) fitted again for 6 updates went on from Ray's checkpoint at 4
    (ray.train.get_checkpoint()) and ends bit for bit where the script's 6 straight updates end."""
    resumed, _ = _records(runs["tmp"] / "resumed")
    [straight_path] = (runs["tmp"] / RUN_DIR).glob("version_0/checkpoints/last.ckpt")
    straight = torch.load(straight_path, weights_only=False)
    assert straight["global_step"] == 6 and straight["rl_lightning"]["env_steps"] == 4800
    _assert_same_weights(resumed["state_dict"], straight["state_dict"])


def test_the_script_prints_its_start_line_and_report_once(runs):
    script = runs["script"]
    lines = script.stdout.splitlines()
    run_dir = runs["tmp"] / RUN_DIR / "version_0"
    assert lines[0] == (
        "VPGModule on CartPole-v1, 10,934 parameters, 8 envs x 2 processes: up to 4,800 env steps (6 updates), until "
        f"the greedy eval return reaches 475; logs in {run_dir}"
    )
    assert sum(line.startswith("VPGModule on ") for line in lines) == 1
    [done] = [line for line in lines if line.startswith("done: ")]
    assert "4,800 env steps, 6 updates" in done
    assert f"  last checkpoint:  {run_dir}/checkpoints/last.ckpt  (resume: --ckpt_path last)" in lines
    assert lines[-1].startswith(f"  Ray checkpoint:   {runs['tmp'] / 'ray' / 'straight'}/checkpoint_")
    # The script's own errors, not those Ray's actors print (prefixed "(ActorName pid=...)"): a second Ray cluster
    # on the machine makes Ray Train's PlacementGroupCleaner fail to find its own, harmlessly.
    assert not any(line.startswith("Traceback") for line in script.stderr.splitlines()), script.stderr[-3000:]
    # Nor Ray Train's warnings that look like failures on a run that succeeds (24 lines of them before): its
    # placement group cleaner cannot query the state API of a Ray without a dashboard, once a second.
    assert "Failed to query Ray Train Controller actor state" not in script.stderr, script.stderr[-3000:]
    assert "Failed to send resource request" not in script.stderr, script.stderr[-3000:]


def test_ckpt_path_last_is_found_on_the_driver_and_no_log_directory_claimed_before_fit(runs):
    root = runs["tmp"] / "run"
    trainer = ray_trainer(VPGModule, MODULE_KWARGS, trainer_kwargs={"max_steps": 8}, ckpt_path="last", root_dir=root)
    newest = max(root.glob("lightning_logs/*/version_*/checkpoints/last.ckpt"), key=lambda path: path.stat().st_mtime)
    assert trainer.train_loop_config["run"].ckpt_path == str(newest.resolve())
    assert sorted(path.name for path in (root / RUN_DIR).iterdir()) == ["version_0", "version_1"]


def test_env_workers_in_ray_actors_train_inside_ray_train_workers(ray_cluster, tmp_path):
    # Item 3 through item 2: each Ray Train worker (a DDP rank) steps its envs in Ray actors of the same cluster.
    from rl_lightning import PPOModule

    module_kwargs = {"num_envs": 4, "num_steps_per_rollout": 16, "seed": 1, "env_backend": "ray"}
    trainer = ray_trainer(
        PPOModule,
        {**module_kwargs, "env_kwargs": {"num_workers": 2}},
        trainer_kwargs={"max_steps": 4},
        run_callbacks={**RUN_CALLBACKS, "eval_every_n_env_steps": 10**9},
        callbacks=[ray_train_record.Record(tmp_path / "record")],
        root_dir=tmp_path / "run",
        storage_path=str(tmp_path / "ray"),
        name="ppo-ray-envs",
    )
    assert trainer.fit().error is None
    first, second = _records(tmp_path / "record")
    assert first["envs"] == second["envs"] == "RayVectorEnv('CartPole-v1', num_envs=4, num_workers=2, device=cpu)"
    assert first["env_steps"] == second["env_steps"] >= 2 * 4 * 16
    _assert_same_weights(first["state_dict"], second["state_dict"])


def _timed_error(error_type, function, *args, **kwargs):
    started = time.perf_counter()
    with pytest.raises(error_type) as error:
        function(*args, **kwargs)
    return str(error.value), time.perf_counter() - started


def test_no_workers_or_more_than_the_cluster_has_is_a_clear_error_at_once(ray_cluster):
    message, seconds = _timed_error(ValueError, ray_trainer, VPGModule, MODULE_KWARGS, num_workers=0)
    assert message == "num_workers must be >= 1, got 0" and seconds < 5
    message, seconds = _timed_error(ValueError, ray_trainer, VPGModule, MODULE_KWARGS, num_workers=3)
    assert "num_workers=3 Ray workers need 3 CPUs (1 each), but the Ray cluster has 2" in message and seconds < 5
    message, _ = _timed_error(ValueError, ray_trainer, VPGModule, MODULE_KWARGS, trainer_kwargs={"devices": 2})
    assert "trainer_kwargs['devices'] is not used under Ray Train" in message
    message, _ = _timed_error(ValueError, ray_trainer, VPGModule, {"num_envs": 0})
    assert message == "num_envs must be >= 1, got 0"  # the module's own check, on the driver


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_an_unreachable_address_is_a_clear_error_within_seconds():
    address = f"127.0.0.1:{_closed_port()}"
    message, seconds = _timed_error(ConnectionError, check_address, address)
    assert f"no Ray cluster answers at address {address}" in message and seconds < 2
    # A host that never answers (a reserved, unrouted address): the connection attempt times out.
    message, seconds = _timed_error(ConnectionError, check_address, "192.0.2.254:6379", timeout=1.0)
    assert "no Ray cluster answers at address 192.0.2.254:6379 within 1 s" in message and seconds < 3
    message, _ = _timed_error(ValueError, check_address, "head-node")
    assert "address 'head-node' is not HOST:PORT" in message


def test_an_address_where_another_service_answers_is_a_clear_error_within_seconds():
    """Another service on the port (it accepts, then answers no gRPC handshake): an error naming it within the
    timeout, not Ray Train's connect retrying for minutes."""

    class Garbage(socketserver.BaseRequestHandler):
        def handle(self):
            with contextlib.suppress(OSError):
                self.request.sendall(b"HTTP/1.0 400 not ray\r\n\r\n")
                time.sleep(3)

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Garbage)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    address = f"127.0.0.1:{server.server_address[1]}"
    try:
        message, seconds = _timed_error(ValueError, check_address, address, timeout=1.0)
    finally:
        server.shutdown()
        server.server_close()
    assert f"address '{address}' answered, but not as a Ray cluster" in message and seconds < 4


def test_the_script_refuses_bad_input_naming_it(ray_cluster, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)

    def run(*argv: str) -> tuple[int, str]:
        monkeypatch.setattr(sys, "argv", ["train_ray.py", *argv])
        with pytest.raises(SystemExit) as exit_info:
            runpy.run_path(str(ROOT / "scripts" / "train_ray.py"), run_name="__main__")
        return exit_info.value.code, capsys.readouterr().err

    code, err = run("vpg", "--num_workers", "0")
    assert code == 2 and "error: num_workers must be >= 1, got 0" in err and "usage: train_ray.py vpg" in err
    code, err = run("vpg", "--num_workers", "3")  # the cluster this process is connected to has 2 CPUs
    assert code == 2 and "num_workers=3 Ray workers need 3 CPUs (1 each), but the Ray cluster has 2" in err
    code, err = run("vpg", "--devices", "2")
    assert code == 2 and "--devices 2 is not for a Ray Train run" in err
    code, err = run("reinforce")
    assert code == 2 and "ALGORITHM must be one of vpg, ppo, dqn, sac, td3, got 'reinforce'" in err
    assert not (tmp_path / "lightning_logs").exists()  # nothing claimed


def test_the_script_refuses_an_unreachable_address_within_seconds(tmp_path):
    address = f"127.0.0.1:{_closed_port()}"
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "train_ray.py"), "ppo", "--address", address],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"no Ray cluster answers at address {address}" in result.stderr
    assert time.perf_counter() - started < 30  # the interpreter's start and imports; the check itself: < 3 s


def test_help_lists_the_module_trainer_and_ray_options(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr(sys, "argv", ["train_ray.py", "ppo", "--help"])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(ROOT / "scripts" / "train_ray.py"), run_name="__main__")
    assert exit_info.value.code == 0
    options = {line.split()[0] for line in capsys.readouterr().out.splitlines() if line.lstrip().startswith("--")}
    assert {"--lr", "--clip_coef", "--max_steps", "--ckpt_path", "--eval_every_n_env_steps"} <= options
    assert {"--address", "--num_workers", "--use_gpu", "--num_cpus", "--storage_path", "--name"} <= options
