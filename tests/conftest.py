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


@pytest.fixture(autouse=True)
def _seed_everything():
    torch.manual_seed(0)
    yield
