"""A module's envs: the one-copy env that gives its spaces, its env instances and its training data source.

``RLModule`` keeps the public face (``make_envs``, the spaces it reads here); these functions hold how the envs
are built from the module's settings (``env_backend``, ``env_kwargs``, ``compile``), Ray's split between the
training envs in workers and the others in this process, and the seeding of rank r's envs.
"""

from __future__ import annotations

from typing import Any

from rl_lightning.algos.registry import algorithm_classes
from rl_lightning.checkpoints import restore_source
from rl_lightning.data.source import EnvSource
from rl_lightning.envs import make_envs
from rl_lightning.envs.base import VectorEnv
from rl_lightning.envs.registry import compilable_env_ids
from rl_lightning.seeding import derive_seed


def spec_env(module: Any, env_id: str, num_envs: int, seed: int) -> VectorEnv:
    """A one-copy instance of ``module``'s env, closed, that gives its spaces (and checks ``env_id``); no env is
    kept, so the module pickles (ddp_spawn) whatever the env holds. A ``ValueError`` if ``module`` cannot learn its
    action space, naming the algorithms that can."""
    spec = make_envs(env_id, num_envs=1, seed=seed, **_spec_env_options(module._env_options, num_envs))
    spec.close()
    if spec.action_kind not in module.action_kinds:
        name = type(module).__name__
        raise ValueError(
            f"{name} cannot learn {env_id!r}: its action space "
            f"{spec.single_action_space} is {spec.action_kind!r}, and "
            f"{name} supports {', '.join(module.action_kinds)} action spaces"
            f"{_other_algorithms(spec.action_kind)}"
        )
    return spec


def module_envs(module: Any, num_envs: int, seed: int, render: bool, compile: bool, workers: bool) -> VectorEnv:
    """``RLModule.make_envs``: a fresh instance of ``module``'s env with ``num_envs`` copies on its device."""
    options = {**module._env_options, "render": True} if render and module._renders_frames else module._env_options
    if compile:
        options = {**options, "compile": True}
    if options["backend"] == "ray":
        from rl_lightning.envs.ray_vector import options_for, split_ray_options

        options = (
            options_for(options, num_envs) if workers else {**split_ray_options(options)[1], "backend": "gymnasium"}
        )
    return make_envs(module.hparams.env_id, num_envs, seed=seed, device=module.device, **options)


def build_source(module: Any) -> EnvSource:
    """``module``'s training data source over this rank's envs: seeded, on the run's clock, restored from the
    checkpoint's source states where it holds them."""
    seed, rank, world_size = module.hparams.seed, module.global_rank, module.world_size
    num_envs = module.hparams.num_envs
    # Rank r's envs get the seeds gymnasium would give envs r * n .. r * n + n - 1 of one vector
    # env of all ranks (its sub-env i is seeded seed + i): no two envs of a run share a seed.
    # (compile and workers passed only when on: an override of make_envs written before them keeps working)
    options = {"compile": True} if _compiles_env_step(module) else {}
    if module._env_options["backend"] == "ray":
        options["workers"] = True
    envs = module.make_envs(num_envs, seed + rank * num_envs, **options)
    source = module.make_source(envs)
    source.configure_run(derive_seed(seed, "actions", rank), world_size, module._start_env_steps)
    source.should_stop = module._received_sigterm
    states, module._restored_sources = module._restored_sources, None
    if states is not None:
        restore_source(source, states, rank, world_size, module.hparams.env_id)
    return source


def env_step_stays_eager(module: Any) -> str | None:
    """Why ``compile`` cannot reach the training envs' step (None: it can, or a CPU run of few copies leaves it
    eager because that is faster there: ``cpu_compile_min_envs``)."""
    if module._gymnasium_env:
        return f"{module.hparams.env_id!r} is a gymnasium env, stepped by gymnasium's own code"
    if module.hparams.env_id not in compilable_env_ids():
        return f"{module.hparams.env_id!r} has no compiled step (the classic-control envs and the probes have)"
    return None


def _compiles_env_step(module: Any) -> bool:
    """Whether ``compile`` reaches the training envs: a native env with compiled dynamics (the
    classic-control envs), on a GPU, or on the CPU where that wins there: where an on-policy module's collection
    steps fuse the env's (``fuses_env_into_collection``), or from ``cpu_compile_min_envs`` copies (Acrobot always,
    CartPole from 4,096, the others from 65,536); elsewhere the envs step eagerly and only the updates are compiled."""
    if not module.compiled.enabled or module._gymnasium_env or module.hparams.env_id not in compilable_env_ids():
        return False
    if module.device.type != "cpu":
        return True
    fuses_at = getattr(module._env_class, "fuses_step_at", None)  # a native env whose step can be one function
    fused = getattr(module, "fuses_env_into_collection", False) and fuses_at is not None
    if fused and fuses_at(module.hparams.num_envs, module.device):
        return True
    min_envs = module._env_class.cpu_compile_min_envs
    return min_envs is not None and module.hparams.num_envs >= min_envs


def _spec_env_options(options: dict[str, Any], num_envs: int) -> dict[str, Any]:
    """``make_envs``'s options for the one-copy env that gives a module its spaces: Ray's envs in this process
    (the same env and spaces, without starting Ray workers where a module is only built)."""
    if options["backend"] != "ray":
        return options
    from rl_lightning.envs.ray_vector import check_ray_options, split_ray_options

    ray_options, env_options = split_ray_options(options)
    check_ray_options(num_envs, **ray_options)  # a bad worker count is an error here, not when the run starts
    return {**env_options, "backend": "gymnasium"}


def _other_algorithms(action_kind: str) -> str:
    """``": use X or Y"`` for the rl_lightning algorithms that support ``action_kind``."""
    names = [name for name, klass in algorithm_classes().items() if action_kind in klass.action_kinds]
    return f": use {' or '.join(names)}" if names else ""
