"""Ray actors as env workers: ``make_envs(..., backend="ray")`` and :class:`RayVectorEnv`.

The simulation runs in ``num_workers`` Ray actors, each holding a gymnasium vector env of its share of
the copies; the learner's process only converts their arrays into the contract's tensors. Everything
:class:`~rl_lightning.envs.gym_adapter.GymnasiumVectorEnv` does (spaces, Dict observations and masks,
final observations, the Atari preset, rendering) is done here too: :class:`RayVectorEnv` is that class
with gymnasium's in-process vector env replaced by :class:`RayWorkers`, a gymnasium ``VectorEnv`` whose
``step`` sends every worker its actions, then gathers their results. So for a given seed it yields
exactly the trajectories of the in-process backend: worker ``w``'s env ``j`` is env ``offset_w + j`` of
the whole batch and is seeded ``seed + offset_w + j``, as gymnasium seeds env ``i`` with ``seed + i``.

What crosses the wire is arrays: each worker sends its observations, rewards and flags as numpy arrays
(Ray puts them in its object store), and its final observations as one dense array of the batch's
shape rather than gymnasium's object array of per-env observations.

Ray is imported only here and only when such an env is built: the ``ray`` extra.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector.utils import batch_space, iterate

from rl_lightning._checks import check_int
from rl_lightning.envs import _ray_worker, mujoco_warnings
from rl_lightning.envs.gym_adapter import GymnasiumVectorEnv, gymnasium_spec
from rl_lightning.trust import RAY_OPTIONS

#: How long a ``host:port`` address may take to accept a connection, then to answer gRPC's handshake (Ray's GCS and
#: Ray Client speak gRPC), before it counts as no Ray cluster.
CONNECT_TIMEOUT_S = 5.0


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ImportError(
            "backend='ray' needs Ray: pip install 'rl_lightning[ray]' (or pip install 'ray[train]')"
        ) from None
    return ray


def _check_reachable(address: str) -> None:
    """Fail within seconds where ``address`` (``host:port`` of a Ray cluster's head) accepts no connection, or
    accepts one but does not answer gRPC's handshake (another service there), rather than leave ``ray.init``
    retrying for minutes."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(
            f"address must be 'auto', 'host:port' of a Ray head node (ray start --head prints it) or a "
            f"'ray://host:port' Ray Client address, got {address!r}"
        )
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as error:
        raise ValueError(
            f"address {address!r}: no Ray cluster answers there ({error}); start one with `ray start --head` on that "
            "machine, or leave address unset for a local Ray instance"
        ) from None
    check_grpc_handshake(address, host, int(port), CONNECT_TIMEOUT_S)


def check_grpc_handshake(address: str, host: str, port: int, timeout: float) -> None:
    """A ``ValueError`` where ``host:port``, which accepts connections, does not answer gRPC's handshake within
    ``timeout`` seconds, as Ray's GCS and Ray Client do: another service listens there, and ``ray.init`` would
    retry against it for minutes.

    Args:
        address: the address as the user gave it, for the message.
        host, port: where to connect.
        timeout: seconds.
    """
    import grpc  # Ray's own dependency

    channel = grpc.insecure_channel(f"{host}:{port}")
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout)
    except grpc.FutureTimeoutError:
        raise ValueError(
            f"address {address!r} answered, but not as a Ray cluster (no Ray client/GCS gRPC handshake within "
            f"{timeout:g} s): another service listens on that port; give the address `ray start --head` "
            "printed, or leave address unset for a local Ray instance"
        ) from None
    finally:
        channel.close()


def init_ray(**kwargs: Any) -> Any:
    """``ray.init(**kwargs)``, keeping this process's SIGTERM handler. Ray installs its own (``sys.exit``) in the
    main thread, which would end a training run at a SIGTERM (a cluster's pre-emption) without the checkpoint its
    stop writes, and outlives ``ray.shutdown()``."""
    ray = _import_ray()
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main else None
    try:
        return ray.init(**kwargs)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def connect_ray(address: str | None = None) -> Any:
    """The ``ray`` module, connected: to the running Ray of this process if there is one, else to ``address``
    (or ``RAY_ADDRESS``), else to a new local Ray instance started here (Ray's own ``ray.init()``).

    Raises:
        ValueError: for an ``address`` that is malformed or where no Ray cluster answers (within
            :data:`CONNECT_TIMEOUT_S` seconds).
    """
    ray = _import_ray()
    if ray.is_initialized():
        return ray
    if address is not None and not isinstance(address, str):
        raise TypeError(f"address must be a str or None, got {type(address).__name__}")
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address is not None and address != "auto":
        _check_reachable(address.removeprefix("ray://"))
    init_ray(address=address, include_dashboard=False, configure_logging=False, log_to_driver=True)
    return ray


def _concatenate(space: gym.Space, parts: list[Any]) -> Any:
    """The workers' batches of observations of ``space`` as one batch (Dict and Tuple spaces key by key)."""
    if isinstance(space, gym.spaces.Dict):
        return {key: _concatenate(sub, [part[key] for part in parts]) for key, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_concatenate(sub, [part[i] for part in parts]) for i, sub in enumerate(space.spaces))
    return np.concatenate(parts)


def _fill(like: np.ndarray, size: int) -> np.ndarray:
    """What gymnasium holds for envs without an info key: zeros of the key's dtype, None for objects."""
    if like.dtype == object:
        return np.full((size, *like.shape[1:]), None, dtype=object)
    return np.zeros((size, *like.shape[1:]), dtype=like.dtype)


def merge_infos(infos: list[dict[str, Any]], sizes: list[int]) -> dict[str, Any]:
    """Gymnasium vector infos of consecutive batches of ``sizes`` envs as the info of one batch: every key's
    array and its ``_key`` mask concatenated, with what gymnasium holds for envs without the key (zeros or
    None, mask False); nested dicts (``final_info``) key by key."""
    keys = list(dict.fromkeys(key for info in infos for key in info))
    merged: dict[str, Any] = {}
    for key in keys:
        if key.startswith("_") and key[1:] in keys:
            continue  # a mask: with its key
        values = [info.get(key) for info in infos]
        if any(isinstance(value, dict) for value in values):
            merged[key] = merge_infos([value if isinstance(value, dict) else {} for value in values], sizes)
        else:
            like = next(np.asarray(value) for value in values if value is not None)
            parts = [
                _fill(like, size) if value is None else np.asarray(value)
                for value, size in zip(values, sizes, strict=True)
            ]
            merged[key] = np.concatenate(parts)
        masks = [info.get(f"_{key}") for info in infos]
        if any(mask is not None for mask in masks):
            merged[f"_{key}"] = np.concatenate(
                [np.zeros(size, dtype=bool) if mask is None else mask for mask, size in zip(masks, sizes, strict=True)]
            )
    return merged


class RayWorkers(gym.vector.VectorEnv):
    """A gymnasium ``VectorEnv`` whose copies live in Ray actors: ``sizes[w]`` copies in worker ``w``.

    ``reset(seed=s)`` seeds the batch's env ``i`` with ``s + i`` (gymnasium's rule) and ``step`` sends each
    worker its slice of the actions, then gathers (all workers step at once). The info is gymnasium's:
    ``final_obs`` an object array of the ended envs' final observations, every key with its ``_key`` mask.

    A worker that dies ends the run with a ``RuntimeError`` naming it (its envs cannot be put back as they
    were, so no restart: a silent restart would change the trajectories).
    """

    def __init__(self, env_id: str, sizes: list[int], env_kwargs: dict[str, Any], num_cpus_per_worker: float | None):
        ray = _import_ray()
        # By value: a worker then imports gymnasium and numpy only, not this package (torch, Lightning): seconds
        # less to start each worker.
        ray.cloudpickle.register_pickle_by_value(_ray_worker)
        ray.cloudpickle.register_pickle_by_value(mujoco_warnings)
        self.env_id = env_id
        self.sizes = sizes
        self.num_envs = sum(sizes)
        self.offsets = np.cumsum([0, *sizes[:-1]]).tolist()
        options = {} if num_cpus_per_worker is None else {"num_cpus": num_cpus_per_worker}
        worker_class = ray.remote(_ray_worker.EnvWorker)
        spec = gymnasium_spec(env_id)
        setup = mujoco_warnings.route_mujoco_warnings if "mujoco" in str(spec.entry_point) else None
        self.workers = [worker_class.options(**options).remote(spec, size, env_kwargs, setup) for size in sizes]
        self.closed = False
        try:
            spaces = self._gather([worker.spaces.remote() for worker in self.workers], "start")
        except BaseException:
            self.close()
            raise
        self.single_observation_space, self.single_action_space, self.metadata = spaces[0]
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.render_mode = env_kwargs.get("render_mode")

    def _gather(self, refs: list[Any], what: str) -> list[Any]:
        """The results of one call on every worker, in worker order; a dead worker is a ``RuntimeError``."""
        ray = _import_ray()
        results = []
        for index, ref in enumerate(refs):
            try:
                results.append(ray.get(ref))
            except (ray.exceptions.RayActorError, ray.exceptions.ActorDiedError) as error:
                first = self.offsets[index]
                raise RuntimeError(
                    f"Ray env worker {index} of {len(self.workers)} ({self.env_id}, envs {first}..."
                    f"{first + self.sizes[index] - 1} of the batch) died during {what}: {type(error).__name__}. Its "
                    "envs cannot be restored; the run stops here (resume from its last checkpoint)"
                ) from error
        return results

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if seed is None or isinstance(seed, int):
            seeds = [None if seed is None else seed + offset for offset in self.offsets]
            refs = [worker.reset.remote(seed, options) for worker, seed in zip(self.workers, seeds, strict=True)]
        else:
            refs = [
                worker.reset.remote(list(seed[offset : offset + size]), options)
                for worker, offset, size in zip(self.workers, self.offsets, self.sizes, strict=True)
            ]
        results = self._gather(refs, "reset")
        obs = _concatenate(self.single_observation_space, [result[0] for result in results])
        return obs, merge_infos([result[1] for result in results], self.sizes)

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        actions = np.asarray(actions)
        refs = [
            worker.step.remote(actions[offset : offset + size])
            for worker, offset, size in zip(self.workers, self.offsets, self.sizes, strict=True)
        ]
        results = self._gather(refs, "step")
        obs = _concatenate(self.single_observation_space, [result[0] for result in results])
        reward, terminated, truncated = (np.concatenate([result[k] for result in results]) for k in (1, 2, 3))
        info = merge_infos([result[4] for result in results], self.sizes)
        if "final_obs" in info:  # back to gymnasium's object array of the ended envs' final observations
            dense, ended = info["final_obs"], info["_final_obs"]
            final = np.full(self.num_envs, None, dtype=object)
            for i, item in enumerate(iterate(self.observation_space, dense)):
                if ended[i]:
                    final[i] = item
            info["final_obs"] = final
        return obs, reward, terminated, truncated, info

    def render(self) -> tuple[np.ndarray, ...]:
        frames = self._gather([worker.render.remote() for worker in self.workers], "render")
        return tuple(frame for batch in frames for frame in batch)

    def close(self, **kwargs: Any) -> None:
        if self.closed:
            return
        self.closed = True
        ray = _import_ray()
        if not ray.is_initialized():
            return
        for worker in getattr(self, "workers", []):
            with contextlib.suppress(Exception):  # a dead worker: nothing to close
                worker.close.remote()
                ray.kill(worker, no_restart=True)


def check_ray_options(
    num_envs: int | None,
    num_workers: int | None = None,
    envs_per_worker: int | None = None,
    address: str | None = None,
    num_cpus_per_worker: float | None = None,
) -> int:
    """Check :class:`RayVectorEnv`'s arguments before any Ray worker exists; return ``num_envs``.

    Raises:
        ValueError: for a count below 1, ``num_envs != num_workers * envs_per_worker``, more workers than
            envs, or a negative ``num_cpus_per_worker``.
        TypeError: for an ``address`` that is not a str.
    """
    if num_workers is not None:
        check_int("num_workers", num_workers, 1)
    if envs_per_worker is not None:
        check_int("envs_per_worker", envs_per_worker, 1)
    if num_envs is None:
        if num_workers is None or envs_per_worker is None:
            raise ValueError("pass num_envs, or both num_workers and envs_per_worker")
        num_envs = num_workers * envs_per_worker
    check_int("num_envs", num_envs, 1)
    if num_cpus_per_worker is not None and (
        isinstance(num_cpus_per_worker, bool)
        or not isinstance(num_cpus_per_worker, (int, float))
        or num_cpus_per_worker < 0
    ):
        raise ValueError(f"num_cpus_per_worker must be a number >= 0 or None, got {num_cpus_per_worker!r}")
    if num_workers is not None and envs_per_worker is not None and num_workers * envs_per_worker != num_envs:
        raise ValueError(
            f"num_envs ({num_envs}) must be num_workers * envs_per_worker ({num_workers} * {envs_per_worker}); "
            "pass two of the three"
        )
    if num_workers is not None and num_workers > num_envs:
        raise ValueError(f"num_workers ({num_workers}) must be at most num_envs ({num_envs}): one env per worker")
    if address is not None and not isinstance(address, str):
        raise TypeError(f"address must be a str (host:port, 'auto' or ray://host:port) or None, got {address!r}")
    return num_envs


class RayVectorEnv(GymnasiumVectorEnv):
    """``num_envs`` copies of a gymnasium env id stepped in ``num_workers`` Ray actors, as tensors.

    The contract, the spaces and their conversions are :class:`GymnasiumVectorEnv`'s (module docstring):
    the same trajectories as ``GymnasiumVectorEnv(env_id, num_envs, seed)`` for the same seed. Worker ``w``
    holds ``envs_per_worker[w]`` copies (``num_envs`` split as evenly as possible) in a gymnasium sync vector
    env; all workers step at once.

    Ray: the running Ray of this process if there is one, else ``address`` (or ``RAY_ADDRESS``), else a new
    local Ray instance (``ray.init()``). Under DDP each rank has its own workers; give every rank the same
    ``address`` (``ray start --head``) to share one cluster rather than start a local instance per rank.

    Checkpoints: as for gymnasium's in-process envs, the envs' internal state cannot be saved
    (``restorable = False``): a resumed run restarts every env with a fresh reset.

    Args:
        env_id: a gymnasium id.
        num_envs: number of copies in all (``None``: ``num_workers * envs_per_worker``).
        seed: seed of the first reset (env ``i`` of the batch gets ``seed + i``).
        device: where observations, rewards and flags are returned.
        num_workers: number of Ray actors (default: one per copy, up to the cluster's CPUs).
        envs_per_worker: copies per actor; with ``num_envs``, it must be ``num_envs / num_workers``.
        address: the Ray cluster to connect to when this process has not connected yet (``"host:port"``,
            ``"auto"``, ``"ray://host:port"``); an unreachable one is a ``ValueError`` within seconds.
        num_cpus_per_worker: CPUs each actor reserves (``None``: Ray's default for actors, which reserves none
            while running, so the workers of the training and the evaluation envs can share a small cluster);
            more than the cluster has free is a ``ValueError``, not a wait.
        render: build the envs with ``render_mode="rgb_array"`` (:meth:`render`).
        **env_kwargs: as for :class:`GymnasiumVectorEnv` (``wrappers``, ``atari``, the env's own arguments).
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int | None = None,
        seed: int | None = None,
        device: torch.device | str = "cpu",
        num_workers: int | None = None,
        envs_per_worker: int | None = None,
        address: str | None = None,
        num_cpus_per_worker: float | None = None,
        render: bool = False,
        **env_kwargs: Any,
    ):
        if "vectorization_mode" in env_kwargs:
            raise TypeError("RayVectorEnv steps its workers' envs itself: vectorization_mode is not an argument")
        num_envs = check_ray_options(num_envs, num_workers, envs_per_worker, address, num_cpus_per_worker)
        self._ray_options = {
            "num_workers": num_workers,
            "envs_per_worker": envs_per_worker,
            "address": address,
            "num_cpus_per_worker": num_cpus_per_worker,
        }
        super().__init__(env_id, num_envs, seed=seed, device=device, render=render, **env_kwargs)
        self.vectorization_mode = "ray"

    def _make_gymnasium_envs(self, env_id: str, num_envs: int, env_kwargs: dict[str, Any]) -> gym.vector.VectorEnv:
        options = self._ray_options
        ray = connect_ray(options["address"])
        cpus = float(ray.cluster_resources().get("CPU", 0))
        num_workers, envs_per_worker = options["num_workers"], options["envs_per_worker"]
        if num_workers is None:
            num_workers = -(-num_envs // envs_per_worker) if envs_per_worker else min(num_envs, max(1, int(cpus)))
        elif num_workers > cpus:
            warnings.warn(
                f"{num_workers} Ray env workers on a cluster of {cpus:g} CPUs: they take turns",
                UserWarning,
                stacklevel=4,
            )
        per_worker = options["num_cpus_per_worker"]
        if per_worker:
            free = float(ray.available_resources().get("CPU", 0))
            if num_workers * per_worker > free:
                raise ValueError(
                    f"num_workers * num_cpus_per_worker ({num_workers} * {per_worker}) CPUs asked of a Ray cluster "
                    f"with {free:g} free (of {cpus:g}): ask for fewer, or leave num_cpus_per_worker=None (the "
                    "workers then share the CPUs)"
                )
        elif cpus < 1:
            raise ValueError("the Ray cluster has no CPU to run env workers on (ray.cluster_resources()['CPU'] is 0)")
        sizes = [len(part) for part in np.array_split(np.arange(num_envs), num_workers)]
        #: Copies per worker.
        self.envs_per_worker = sizes
        self.num_workers = num_workers
        return RayWorkers(env_id, sizes, env_kwargs, per_worker)

    def __repr__(self) -> str:
        return (
            f"RayVectorEnv({self.env_id!r}, num_envs={self.num_envs}, num_workers={self.num_workers}, "
            f"device={self.device})"
        )


def split_ray_options(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``options`` as (Ray's: :data:`RAY_OPTIONS`, the env's)."""
    ray_options = {key: value for key, value in options.items() if key in RAY_OPTIONS}
    return ray_options, {key: value for key, value in options.items() if key not in RAY_OPTIONS}


def options_for(options: dict[str, Any], num_envs: int) -> dict[str, Any]:
    """A module's env options for ``num_envs`` copies (its training, evaluation or video envs): the workers it
    asked for (``num_workers``, or as many as ``envs_per_worker`` needs), at most one per copy."""
    ray_options, env_options = split_ray_options(options)
    num_workers = ray_options.pop("num_workers", None)
    envs_per_worker = ray_options.pop("envs_per_worker", None)
    if num_workers is None and envs_per_worker is not None:
        num_workers = -(-num_envs // envs_per_worker)
    if num_workers is not None:
        ray_options["num_workers"] = min(num_workers, num_envs)
    return {**env_options, **ray_options}
