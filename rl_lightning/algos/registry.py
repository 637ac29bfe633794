"""The algorithms by name, and the module that defines each: what the modules below them (``rl_lightning.trust``,
``rl_lightning.hub``, the base's errors) know of them. It imports no algorithm: they import those modules."""

from __future__ import annotations

import importlib

#: Every algorithm's class name and module, in the order of the CLI's ``--model`` choices and of the hints of
#: unsupported-space errors.
ALGORITHM_MODULES = {
    "VPGModule": "rl_lightning.algos.vpg",
    "DQNModule": "rl_lightning.algos.dqn",
    "PPOModule": "rl_lightning.algos.ppo",
    "SACModule": "rl_lightning.algos.sac",
    "TD3Module": "rl_lightning.algos.td3",
    "BCModule": "rl_lightning.algos.bc",
    "TD3BCModule": "rl_lightning.algos.td3_bc",
    "IQLModule": "rl_lightning.algos.iql",
}
#: Their class paths, as a checkpoint names its module's class (``"rl_lightning.algos.ppo.PPOModule"``).
ALGORITHM_CLASS_PATHS = tuple(f"{module}.{name}" for name, module in ALGORITHM_MODULES.items())


def algorithm_classes() -> dict[str, type]:
    """The algorithm classes by name, in :data:`ALGORITHM_MODULES`' order (imported when first asked for: their
    modules import those that read this one)."""
    return {name: getattr(importlib.import_module(module), name) for name, module in ALGORITHM_MODULES.items()}
