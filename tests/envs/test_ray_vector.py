"""Ray actors as env workers (``make_envs(..., backend="ray")``, ``RayVectorEnv``) on a local Ray cluster of 2 CPUs:
the same trajectories as the in-process gymnasium backend for the same seed (Box, one-hot Discrete with masks in
the info, Dict observations), a dead worker named in the error, bad arguments refused within seconds, and the
modules training on it exactly as on the in-process backend."""

import contextlib
import os
import socket
import socketserver
import subprocess
import sys
import threading
import time
from pathlib import Path

import gymnasium as gym
import lightning as L
import numpy as np
import pytest
import torch

from rl_lightning.algos import DQNModule, PPOModule, SACModule, TD3Module, VPGModule
from rl_lightning.envs import make_envs, ray_vector
from rl_lightning.envs.ray_vector import RayVectorEnv, connect_ray, init_ray, merge_infos

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'rl_lightning[ray]')")


@pytest.fixture(scope="module", autouse=True)
def ray_cluster():
    init_ray(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    # The test's own env classes travel to the workers by value (a user's would be importable there).
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    ray.shutdown()


class _DictEnv(gym.Env):
    """A Dict observation with an action mask; episodes of random length (from the env's seeded RNG); an info
    key only some envs give at some steps."""

    observation_space = gym.spaces.Dict(
        {"position": gym.spaces.Box(-10, 10, (2,), np.float32), "action_mask": gym.spaces.MultiBinary(3)}
    )
    action_space = gym.spaces.Discrete(3)

    def _obs(self):
        mask = np.ones(3, np.int8)
        mask[self.np_random.integers(3)] = 0
        return {"position": self.position.copy(), "action_mask": mask}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = self.np_random.normal(size=2).astype(np.float32)
        self.left = int(self.np_random.integers(3, 9))
        return self._obs(), {}

    def step(self, action):
        self.position += np.float32(action - 1)
        self.left -= 1
        info = {"bonus": float(self.position[0])} if self.left % 2 else {}
        return self._obs(), float(self.position.sum()), self.left == 0, False, info


DICT_ID = "rl_lightning_test/RayDict-v0"
if DICT_ID not in gym.registry:
    gym.register(DICT_ID, entry_point=_DictEnv, max_episode_steps=50)


def _same(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[key], b[key]) for key in a)
    return torch.equal(a, b)


def _compare(env_id: str, num_envs: int, num_workers: int, steps: int, seed: int = 7) -> int:
    """Step a Ray env and the in-process gymnasium env with the same (legal) random actions; return the
    number of episodes that ended, after checking every output is identical."""
    remote = make_envs(env_id, num_envs, seed=seed, backend="ray", num_workers=num_workers)
    local = make_envs(env_id, num_envs, seed=seed, backend="gymnasium")
    try:
        assert remote.num_workers == num_workers and sum(remote.envs_per_worker) == num_envs
        obs, _ = remote.reset()
        assert _same(obs, local.reset()[0])
        generator = torch.Generator().manual_seed(seed)
        ended = 0
        for step in range(steps):
            mask = obs.get("action_mask") if isinstance(obs, dict) else None
            actions = remote.random_actions(generator=generator, action_mask=mask)
            results = remote.step(actions), local.step(actions)
            for mine, theirs in zip(results[0][:4], results[1][:4], strict=True):
                assert _same(mine, theirs), f"step {step}"
            assert _same(results[0][4]["final_observation"], results[1][4]["final_observation"])
            obs = results[0][0]
            ended += int((results[0][2] | results[0][3]).sum())
        return ended
    finally:
        remote.close()
        local.close()


def test_cartpole_in_ray_workers_steps_exactly_as_in_process_uneven_workers():
    # 5 envs on 2 workers (3 + 2): worker 1's envs are seeded seed + 3 and seed + 4, as gymnasium's envs 3 and 4.
    assert _compare("CartPole-v1", num_envs=5, num_workers=2, steps=300) >= 20


def test_taxi_masks_from_the_info_and_one_hot_observations_match_in_process():
    # Taxi-v4: Discrete observations (one-hot here), action masks in the info, 200-step truncation.
    assert _compare("Taxi-v4", num_envs=3, num_workers=3, steps=230) >= 3


def test_dict_observations_and_sometimes_present_info_keys_match_in_process():
    assert _compare(DICT_ID, num_envs=4, num_workers=2, steps=60) >= 20


def test_merge_infos_fills_what_gymnasium_holds_for_envs_without_a_key():
    merged = merge_infos(
        [
            {"a": np.array([1.5, 0.0]), "_a": np.array([True, False])},
            {"b": {"c": np.array([3])}, "_b": np.array([True])},
        ],
        [2, 1],
    )
    assert merged["a"].tolist() == [1.5, 0.0, 0.0] and merged["_a"].tolist() == [True, False, False]
    assert merged["b"]["c"].tolist() == [0, 0, 3] and merged["_b"].tolist() == [False, False, True]


def test_renders_the_same_frames_as_in_process():
    remote = make_envs("CartPole-v1", 2, seed=1, backend="ray", num_workers=2, render=True)
    local = make_envs("CartPole-v1", 2, seed=1, backend="gymnasium", render=True)
    remote.reset(), local.reset()
    frames = remote.render()
    assert frames.shape == (2, 400, 600, 3) and frames.dtype == torch.uint8
    assert torch.equal(frames, local.render())
    remote.close(), local.close()


def test_checkpoint_restarts_the_envs_fresh_as_the_gymnasium_backend_does():
    envs = make_envs("CartPole-v1", 2, seed=1, backend="ray", num_workers=2)
    envs.reset()
    state = envs.state_dict()
    assert state["restorable"] is False and state["env"] == "RayVectorEnv" and state["env_id"] == "CartPole-v1"
    with pytest.warns(UserWarning, match=r"RayVectorEnv\('CartPole-v1'\) cannot restore .* fresh reset"):
        envs.load_state_dict(state)
    assert envs.step(torch.zeros(2, dtype=torch.int64))[0].shape == (2, 4)
    envs.close()


def test_a_dead_worker_ends_the_run_with_an_error_naming_it():
    envs = make_envs("CartPole-v1", 4, seed=0, backend="ray", num_workers=2)
    envs.reset()
    ray.kill(envs.gymnasium_envs.workers[1], no_restart=True)
    with pytest.raises(RuntimeError, match=r"Ray env worker 1 of 2 \(CartPole-v1, envs 2\.\.\.3 of the batch\) died"):
        for _ in range(20):  # the kill takes effect within a step or two
            envs.step(torch.zeros(4, dtype=torch.int64))
    envs.close()


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"num_workers": 0}, ValueError, r"num_workers must be"),
        ({"num_workers": 5}, ValueError, r"num_workers \(5\) must be at most num_envs \(4\)"),
        (
            {"num_workers": 2, "envs_per_worker": 3},
            ValueError,
            r"num_envs \(4\) must be num_workers \* envs_per_worker",
        ),
        ({"num_cpus_per_worker": -1}, ValueError, r"num_cpus_per_worker must be a number >= 0"),
        (
            {"num_workers": 2, "num_cpus_per_worker": 2},
            ValueError,
            r"\(2 \* 2\) CPUs asked of a Ray cluster with 2 free",
        ),
        ({"address": 6379}, TypeError, r"address must be a str"),
        ({"vectorization_mode": "async"}, TypeError, r"vectorization_mode is not an argument"),
    ],
)
def test_bad_arguments_are_refused_naming_them(kwargs, error, match):
    with pytest.raises(error, match=match):
        make_envs("CartPole-v1", 4, seed=0, backend="ray", **kwargs)


def test_compile_and_unknown_ids_are_refused():
    with pytest.raises(ValueError, match=r"compile=True applies to native torch envs only"):
        make_envs("CartPole-v1", 2, backend="ray", compile=True)
    with pytest.raises(ValueError, match=r"unknown env_id 'NoSuchEnv-v0'"):
        make_envs("NoSuchEnv-v0", 2, backend="ray")


def test_an_unreachable_address_is_an_error_within_seconds(monkeypatch):
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as in a process not connected yet
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    start = time.monotonic()
    with pytest.raises(ValueError, match=rf"address '127.0.0.1:{port}': no Ray cluster answers there"):
        RayVectorEnv("CartPole-v1", 2, address=f"127.0.0.1:{port}")
    assert time.monotonic() - start < 10
    with pytest.raises(ValueError, match=r"address must be 'auto', 'host:port'"):
        RayVectorEnv("CartPole-v1", 2, address="nowhere")


class _Garbage(socketserver.BaseRequestHandler):
    """Another service on the port: it answers every connection with bytes that are no gRPC handshake."""

    def handle(self):
        with contextlib.suppress(OSError):
            self.request.sendall(b"HTTP/1.0 400 not ray\r\n\r\n" * 4)
            time.sleep(3)


class _Silent(socketserver.BaseRequestHandler):
    """Another service on the port: it accepts connections and says nothing."""

    def handle(self):
        time.sleep(3)


@pytest.mark.parametrize("handler", [_Garbage, _Silent])
def test_an_address_where_another_service_answers_is_an_error_within_seconds(monkeypatch, handler):
    # ray.init used to retry against such a port for minutes (over 120 s): the gRPC handshake is bounded.
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as in a process not connected yet
    monkeypatch.setattr(ray_vector, "CONNECT_TIMEOUT_S", 1.0)
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    start = time.monotonic()
    try:
        with pytest.raises(
            ValueError,
            match=rf"address '127.0.0.1:{port}' answered, but not as a Ray cluster \(no Ray client/GCS gRPC "
            r"handshake within 1 s\): another service listens on that port",
        ):
            RayVectorEnv("CartPole-v1", 2, address=f"127.0.0.1:{port}")
        with pytest.raises(ValueError, match=rf"address '127.0.0.1:{port}' answered, but not as a Ray"):
            connect_ray(f"ray://127.0.0.1:{port}")
    finally:
        server.shutdown()
        server.server_close()
    assert time.monotonic() - start < 8


def test_the_address_of_a_ray_cluster_passes_the_handshake():
    start = time.monotonic()
    ray_vector._check_reachable(ray.get_runtime_context().gcs_address)  # this module's local cluster
    assert time.monotonic() - start < 3


def _fit(module: L.LightningModule, max_steps: int) -> dict[str, torch.Tensor]:
    trainer = L.Trainer(
        max_steps=max_steps, logger=False, enable_checkpointing=False, enable_progress_bar=False, accelerator="cpu"
    )
    trainer.fit(module)
    return {name: tensor.detach().clone() for name, tensor in module.state_dict().items()}


ALGORITHMS = {
    "vpg": (VPGModule, "CartPole-v1", {"num_envs": 4, "num_steps_per_rollout": 16}),
    "ppo": (PPOModule, "CartPole-v1", {"num_envs": 4, "num_steps_per_rollout": 16}),
    "dqn": (DQNModule, "CartPole-v1", {"num_envs": 2, "learning_starts": 40, "batch_size": 16}),
    "sac": (SACModule, "Pendulum-v1", {"num_envs": 2, "learning_starts": 40, "batch_size": 16}),
    "td3": (TD3Module, "Pendulum-v1", {"num_envs": 2, "learning_starts": 40, "batch_size": 16}),
}


@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
def test_every_algorithm_trains_on_ray_workers_exactly_as_in_process(algorithm):
    module_class, env_id, options = ALGORITHMS[algorithm]
    remote = module_class(env_id, seed=3, env_backend="ray", env_kwargs={"envs_per_worker": 1}, **options)
    local = module_class(env_id, seed=3, env_backend="gymnasium", **options)
    weights = _fit(remote, 30), _fit(local, 30)
    assert remote.env_steps == local.env_steps >= 60
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][name], weights[1][name]) for name in weights[0])


def test_a_ray_runs_training_envs_step_in_its_workers_and_its_evaluation_and_videos_here():
    """The Ray workers' options (num_workers) reach the training envs only: evaluation and video envs are the same
    gymnasium env in this process (they reached MuJoCo's constructor, or asked for more workers than copies)."""
    from rl_lightning.callbacks import Evaluation
    from rl_lightning.envs.gym_adapter import GymnasiumVectorEnv

    module = SACModule(
        "Pendulum-v1",
        num_envs=2,
        learning_starts=40,
        batch_size=16,
        env_backend="ray",
        env_kwargs={"num_workers": 2, "max_episode_steps": 20},
    )
    local = module.make_envs(1, 0, render=True)  # one copy: a worker each would be 2 for 1 env
    assert isinstance(local, GymnasiumVectorEnv) and local.max_episode_steps == 20 and local.can_render
    local.close()
    built, make_envs = [], module.make_envs

    def spy(num_envs, seed, **options):
        envs = make_envs(num_envs, seed, **options)
        built.append((num_envs, options.get("workers", False), type(envs)))
        return envs

    module.make_envs = spy
    trainer = L.Trainer(
        max_steps=40,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        accelerator="cpu",
        callbacks=[Evaluation(every_n_env_steps=40, num_eval_episodes=1)],
    )
    trainer.fit(module)
    assert module.env_steps >= 80 and torch.isfinite(trainer.callback_metrics["eval/episodic_return"])
    assert (2, True, RayVectorEnv) in built  # the training envs
    assert (1, False, GymnasiumVectorEnv) in built  # the evaluation's
    assert all(envs is GymnasiumVectorEnv for _, workers, envs in built if not workers)


def test_ddp_ranks_each_step_their_own_ray_workers_and_stay_in_sync(tmp_path):
    script = Path(__file__).with_name("ray_ddp_fit.py")
    process = subprocess.run(
        [sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=300, check=False
    )
    assert process.returncode == 0, (process.stdout + process.stderr)[-3000:]
    ranks = [torch.load(tmp_path / f"rank{rank}.pt", weights_only=False) for rank in (0, 1)]
    assert all(rank["envs"].startswith("RayVectorEnv('CartPole-v1', num_envs=4, num_workers=2") for rank in ranks)
    assert ranks[0]["env_steps"] == ranks[1]["env_steps"] >= 2 * 4 * 16  # the run's env steps, both ranks'
    assert all(
        torch.equal(ranks[0]["state_dict"][name], ranks[1]["state_dict"][name]) for name in ranks[0]["state_dict"]
    )
    assert not torch.equal(ranks[0]["first_obs"], ranks[1]["first_obs"])  # seeds seed + rank * num_envs: distinct


class _CrashingEnv(gym.Env):
    """Its process dies (as a crashed simulator's would) at its 40th step."""

    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = getattr(self, "steps", 0)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.steps += 1
        if self.steps >= 40:
            os._exit(1)
        return np.zeros(2, np.float32), 1.0, self.steps % 10 == 0, False, {}


CRASH_ID = "rl_lightning_test/RayCrash-v0"
if CRASH_ID not in gym.registry:
    gym.register(CRASH_ID, entry_point=_CrashingEnv, max_episode_steps=50)


def test_a_worker_dying_during_training_ends_the_run_naming_it_and_the_last_checkpoint_is_intact(tmp_path):
    from lightning.pytorch.callbacks import ModelCheckpoint

    module = PPOModule(CRASH_ID, num_envs=2, num_steps_per_rollout=16, env_backend="ray", env_kwargs={"num_workers": 2})
    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_last=True, every_n_train_steps=1)
    trainer = L.Trainer(
        max_steps=1000, logger=False, enable_progress_bar=False, callbacks=[checkpoint], accelerator="cpu"
    )
    with pytest.raises(
        RuntimeError, match=r"Ray env worker [01] of 2 \(rl_lightning_test/RayCrash-v0, envs [01]\.\.\.[01]"
    ):
        trainer.fit(module)
    saved = torch.load(tmp_path / "last.ckpt", weights_only=True)
    assert 0 < saved["global_step"] < 1000  # written before the crash, whole
    resumed = PPOModule.load_from_checkpoint(tmp_path / "last.ckpt", env_backend="gymnasium", env_kwargs={})
    assert resumed.hparams.num_envs == 2


def test_connecting_to_ray_keeps_the_processs_sigterm_handler(monkeypatch):
    """Ray's ray.init installs a SIGTERM handler (sys.exit) that would end a run without its stop checkpoint."""
    import signal

    def handler(signum, frame):
        pass

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        monkeypatch.setattr(ray, "is_initialized", lambda: False)
        monkeypatch.setattr(ray, "init", lambda **kwargs: signal.signal(signal.SIGTERM, lambda *args: sys.exit(15)))
        connect_ray()
        assert signal.getsignal(signal.SIGTERM) is handler
    finally:
        signal.signal(signal.SIGTERM, previous)
