import os

import pytest
import torch

# The networks and envs under test are tiny: one thread is fastest and keeps timings stable.
torch.set_num_threads(1)
os.environ.setdefault("PYTHONHASHSEED", "0")
# Tests run on the CPU unless they say otherwise: the seeded learning thresholds are CPU results, and a
# Trainer's default accelerator="auto" would pick a GPU where one is present. Lightning reads Trainer
# defaults from PL_TRAINER_* variables (subprocesses inherit it); the CUDA tests pass accelerator="gpu".
os.environ.setdefault("PL_TRAINER_ACCELERATOR", "cpu")


# What `slow` marks (pytest -m "not slow" runs the rest in about a quarter of the time): the test files
# that start processes (scripts, DDP, resume after a kill) and the learning tests of whole envs.
_SLOW_FILES = {
    "distributed/test_ddp.py",
    "distributed/test_ddp_dqn.py",
    "distributed/test_ray_train.py",
    "resume/test_resume.py",
    "test_robustness_commands.py",
    "test_scripts.py",
    "test_enjoy.py",
    "test_sweep_example.py",
    "algos/test_classic_control_learning.py",
    "algos/test_sac_td3_learning.py",
    "algos/test_spaces_learning.py",
}


def pytest_collection_modifyitems(config, items):
    tests = os.path.dirname(__file__)
    for item in items:
        if os.path.relpath(str(item.path), tests).replace(os.sep, "/") in _SLOW_FILES:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _seed_everything():
    torch.manual_seed(0)
    yield
