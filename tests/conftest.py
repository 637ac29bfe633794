import os

import pytest
import torch

# The networks and envs under test are tiny: one thread is fastest and keeps timings stable.
torch.set_num_threads(1)
os.environ.setdefault("PYTHONHASHSEED", "0")


@pytest.fixture(autouse=True)
def _seed_everything():
    torch.manual_seed(0)
    yield
