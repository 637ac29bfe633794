"""Named random streams (rl_lightning/seeding.py)."""

import pytest
import torch

from rl_lightning.seeding import derive_seed, make_generator, seeded


def test_other_streams_are_distinct_stable_and_valid_seeds():
    seeds = {derive_seed(seed, stream, rank) for seed in (0, 1) for stream in ("actions", "replay") for rank in (0, 1)}
    assert len(seeds) == 8
    assert all(0 <= seed < 2**63 for seed in seeds)
    assert derive_seed(0, "actions") == derive_seed(0, "actions", 0)  # the same every time
    first, second = make_generator(0, "actions"), make_generator(0, "replay")
    assert not torch.equal(torch.rand(4, generator=first), torch.rand(4, generator=second))


def test_seeded_restores_the_global_rng():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    with seeded(5):
        inside = torch.rand(3)
    assert torch.equal(torch.rand(3), expected)
    with seeded(5):
        assert torch.equal(torch.rand(3), inside)


@pytest.mark.parametrize(("seed", "error"), [(-1, ValueError), (2**63, ValueError), (1.0, TypeError), ("0", TypeError)])
def test_bad_seeds_raise(seed, error):
    with pytest.raises(error, match="seed"):
        derive_seed(seed, "actions")
