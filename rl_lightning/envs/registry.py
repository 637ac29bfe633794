"""Env ids -> vector-env constructors: ``make_envs`` and ``register``.

``make_envs`` builds a native torch env where one is registered here, and otherwise any
gymnasium id through :class:`~rl_lightning.envs.gym_adapter.GymnasiumVectorEnv`; on request the
C++ vector envs of EnvPool (:class:`~rl_lightning.envs.envpool_adapter.EnvPoolVectorEnv`) and
ale-py (:class:`~rl_lightning.envs.ale_vector.AleVectorEnv`); multi-agent scenes of VMAS
(:class:`~rl_lightning.envs.vmas_adapter.VmasVectorEnv`) and PettingZoo
(:class:`~rl_lightning.envs.pettingzoo_adapter.PettingZooVectorEnv`), agents as rows.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from rl_lightning._checks import check_bool, check_choice, check_device, check_float, check_str
from rl_lightning.envs.ale_vector import AleVectorEnv
from rl_lightning.envs.base import VectorEnv
from rl_lightning.envs.envpool_adapter import EnvPoolVectorEnv
from rl_lightning.envs.gym_adapter import GymnasiumVectorEnv
from rl_lightning.envs.gym_ids import gymnasium_spec
from rl_lightning.envs.pettingzoo_adapter import PettingZooVectorEnv
from rl_lightning.envs.vmas_adapter import VmasVectorEnv

EnvFactory = Callable[..., VectorEnv]
_REGISTRY: dict[str, EnvFactory] = {}
_SOLVED_RETURNS: dict[str, float] = {}
BACKENDS = ("auto", "torch", "gymnasium", "envpool", "ale_vector", "ray", "vmas", "pettingzoo")
#: The backends over C++ vector envs, by name.
_POOLED_BACKENDS = {"envpool": EnvPoolVectorEnv, "ale_vector": AleVectorEnv}
#: The multi-agent backends (agents as rows; ``num_envs`` counts scenes), by name.
_MULTI_AGENT_BACKENDS = {"vmas": VmasVectorEnv, "pettingzoo": PettingZooVectorEnv}


def register(env_id: str, factory: EnvFactory, *, overwrite: bool = False, solved_return: float | None = None) -> None:
    """Register ``factory(num_envs, seed, device) -> VectorEnv`` under ``env_id``.

    Args:
        solved_return: the mean return at which the env counts as solved (gymnasium's
            ``reward_threshold``), or None if it has none.

    Raises:
        ValueError: if ``env_id`` is taken and ``overwrite`` is False.
    """
    if not isinstance(env_id, str) or not env_id:
        raise TypeError(f"env_id must be a non-empty str, got {env_id!r}")
    if not callable(factory):
        raise TypeError(f"factory must be callable, got {type(factory).__name__}")
    if env_id in _REGISTRY and not overwrite:
        raise ValueError(f"env_id {env_id!r} is already registered (pass overwrite=True to replace it)")
    if solved_return is not None:
        check_float("solved_return", solved_return)
    _REGISTRY[env_id] = factory
    _SOLVED_RETURNS.pop(env_id, None)
    if solved_return is not None:
        _SOLVED_RETURNS[env_id] = float(solved_return)


def solved_return(env_id: str) -> float | None:
    """The mean return at which ``env_id`` counts as solved: the native env's (CartPole-v1 475,
    Acrobot-v1 -100, Pendulum-v1 -200, MountainCar-v0 -110, MountainCarContinuous-v0 90), else
    gymnasium's ``spec.reward_threshold``; None where neither says (no early stop by default)."""
    check_str("env_id", env_id)
    if env_id in _REGISTRY:
        return _SOLVED_RETURNS.get(env_id)
    try:
        threshold = gymnasium_spec(env_id).reward_threshold
    except ValueError:
        return None
    return None if threshold is None else float(threshold)


def registered_env_ids() -> list[str]:
    """All registered (native torch) env ids, sorted."""
    return sorted(_REGISTRY)


def _takes_compile(factory: EnvFactory) -> bool:
    """Whether ``factory`` accepts a ``compile`` keyword (the classic-control envs do)."""
    try:
        return "compile" in inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a callable without a signature
        return False


def compilable_env_ids() -> list[str]:
    """The registered env ids whose factories take ``compile`` (``make_envs(..., compile=True)``), sorted."""
    return [env_id for env_id in registered_env_ids() if _takes_compile(_REGISTRY[env_id])]


def is_native_env_id(env_id: str) -> bool:
    """Whether ``env_id`` has a native torch env (``make_envs``'s ``backend="torch"``)."""
    return env_id in _REGISTRY


def make_envs(
    env_id: str,
    num_envs: int,
    seed: int | None = None,
    device: torch.device | str = "cpu",
    backend: str = "auto",
    compile: bool = False,
    **gym_kwargs: Any,
) -> VectorEnv:
    """Build ``num_envs`` copies of the env ``env_id`` on ``device``.

    Args:
        env_id: a registered native id (``registered_env_ids()``) or any gymnasium id.
        backend: ``"auto"``: the native torch env where one is registered, else gymnasium's
            through :class:`GymnasiumVectorEnv`; ``"torch"``: native only; ``"gymnasium"``:
            the adapter even for an id that has a native env (e.g. to compare the two);
            ``"envpool"``: EnvPool's C++ envs (:class:`EnvPoolVectorEnv`: Atari ids, always with the
            Atari preset, and MuJoCo ids); ``"ale_vector"``: ale-py's C++ vector env
            (:class:`AleVectorEnv`: Atari ids, always with the preset); ``"ray"``: any gymnasium id stepped
            in Ray actors (:class:`~rl_lightning.envs.ray_vector.RayVectorEnv`, the ``ray`` extra: the same
            trajectories as ``"gymnasium"``, the simulation in ``num_workers`` remote workers); ``"vmas"``: a VMAS
            scenario name (:class:`VmasVectorEnv`, e.g. ``"balance"``); ``"pettingzoo"``: a PettingZoo parallel
            env's module path inside pettingzoo or mpe2 (:class:`PettingZooVectorEnv`, e.g.
            ``"mpe2.simple_spread_v3"``). For these two multi-agent backends (the ``multiagent`` extra)
            **``num_envs`` is the number of SCENES**: the env built has ``num_envs * num_agents`` rows, one per
            agent (:mod:`rl_lightning.envs.multi_agent`).
        compile: run a native env's dynamics through ``torch.compile`` (the classic-control envs,
            whose factories take ``compile``; see
            :class:`~rl_lightning.envs._classic_control.ClassicControlEnv`).
        **gym_kwargs: for the gymnasium adapter: ``vectorization_mode``, ``render``, ``atari`` (the
            Atari preset) and the env's own keyword arguments (see :class:`GymnasiumVectorEnv`); for
            ``"envpool"``: ``atari``, ``render`` and EnvPool's own arguments (``num_threads``, ...); for
            ``"ale_vector"``: ``atari`` and ale-py's ``num_threads``, ``thread_affinity_offset``,
            ``full_action_space``; for ``"ray"``: the gymnasium adapter's and ``num_workers``,
            ``envs_per_worker``, ``address``, ``num_cpus_per_worker``; for ``"vmas"``: ``continuous_actions``,
            ``max_steps``, ``render`` and the scenario's own (``n_agents``, ...); for ``"pettingzoo"``: ``render``
            and the env's own (``max_cycles``, ...).

    Raises:
        ValueError: for an id that is neither native nor gymnasium's, a bad ``backend``, a
            ``device`` that is misspelt or not on this machine (``"cuda"`` without CUDA), or
            ``compile=True`` for an env without compiled dynamics (gymnasium's, the probes).
        TypeError: for ``gym_kwargs`` with a native env.
    """
    check_str("env_id", env_id)
    check_choice("backend", backend, BACKENDS)
    device = check_device("device", device)
    check_bool("compile", compile)
    if backend in _POOLED_BACKENDS:
        if compile:
            raise ValueError(
                f"compile=True applies to native torch envs only (a torch.compile of their dynamics), not to "
                f"backend={backend!r}'s C++ envs; pass compile=False"
            )
        return _POOLED_BACKENDS[backend](env_id, num_envs, seed=seed, device=device, **gym_kwargs)
    if backend in _MULTI_AGENT_BACKENDS:
        if compile:
            raise ValueError(
                f"compile=True applies to native torch envs only (a torch.compile of their dynamics), not to "
                f"backend={backend!r}'s multi-agent scenes; pass compile=False"
            )
        return _MULTI_AGENT_BACKENDS[backend](env_id, num_envs, seed=seed, device=device, **gym_kwargs)
    if backend == "ray":
        if compile:
            raise ValueError(
                f"compile=True applies to native torch envs only (a torch.compile of their dynamics), not to the "
                f"gymnasium env {env_id!r} in Ray workers; pass compile=False"
            )
        _check_gymnasium_id(env_id)
        from rl_lightning.envs.ray_vector import RayVectorEnv

        return RayVectorEnv(env_id, num_envs, seed=seed, device=device, **gym_kwargs)
    if backend != "gymnasium" and env_id in _REGISTRY:
        if gym_kwargs:
            raise TypeError(
                f"make_envs got keyword arguments {sorted(gym_kwargs)} for the native torch env {env_id!r}; "
                "they are for gymnasium envs only (pass backend='gymnasium' to build gymnasium's version)"
            )
        factory = _REGISTRY[env_id]
        if not compile:
            envs = factory(num_envs=num_envs, seed=seed, device=device)
        elif _takes_compile(factory):
            envs = factory(num_envs=num_envs, seed=seed, device=device, compile=True)
        else:
            raise ValueError(
                f"compile=True applies to native torch envs with compiled dynamics (the classic-control envs: "
                f"{', '.join(compilable_env_ids())}); {env_id!r} has none: pass compile=False"
            )
        if not isinstance(envs, VectorEnv):
            raise TypeError(
                f"the factory registered for {env_id!r} returned a {type(envs).__name__}, not a rl_lightning "
                "VectorEnv; a gymnasium env needs no registering here: pass its gymnasium id (gymnasium.register it "
                "if it is your own), and make_envs wraps it"
            )
        return envs
    if compile:
        raise ValueError(
            f"compile=True applies to native torch envs only (a torch.compile of their dynamics), not to the "
            f"gymnasium env {env_id!r}; native ids with compiled dynamics: {', '.join(compilable_env_ids())}"
        )
    if backend == "torch":
        raise ValueError(f"unknown env_id {env_id!r} for backend='torch'; native env ids: {_native_ids()}")
    _check_gymnasium_id(env_id)
    return GymnasiumVectorEnv(env_id, num_envs, seed=seed, device=device, **gym_kwargs)


def _native_ids() -> str:
    return ", ".join(registered_env_ids())


def _check_gymnasium_id(env_id: str) -> None:
    """A ``ValueError`` saying what is allowed for an id that gymnasium does not know."""
    try:
        gymnasium_spec(env_id)
    except ValueError as error:
        raise ValueError(
            f"unknown env_id {env_id!r}; native env ids: {_native_ids()}; or any gymnasium id (gymnasium.registry), "
            f"e.g. FrozenLake-v1. gymnasium: {error}"
        ) from None
