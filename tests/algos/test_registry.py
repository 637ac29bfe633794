"""``rl_lightning.algos.registry`` names every algorithm where it is defined, in ``ALGORITHMS``' order."""

from rl_lightning.algos import (
    ALGORITHMS,
    BCModule,
    DQNModule,
    IQLModule,
    PPOModule,
    SACModule,
    TD3BCModule,
    TD3Module,
    VPGModule,
)
from rl_lightning.algos.registry import ALGORITHM_CLASS_PATHS, ALGORITHM_MODULES, algorithm_classes
from rl_lightning.trust import algorithm_class_paths


def test_the_registry_lists_each_algorithm_by_its_own_class_path():
    expected = (VPGModule, DQNModule, PPOModule, SACModule, TD3Module, BCModule, TD3BCModule, IQLModule)
    assert expected == ALGORITHMS
    assert list(algorithm_classes().values()) == list(ALGORITHMS)
    assert list(ALGORITHM_MODULES) == [cls.__name__ for cls in ALGORITHMS]
    assert tuple(f"{cls.__module__}.{cls.__qualname__}" for cls in ALGORITHMS) == ALGORITHM_CLASS_PATHS
    assert algorithm_class_paths()["rl_lightning.algos.ppo.PPOModule"] is PPOModule
