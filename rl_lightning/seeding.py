"""Named random streams from one ``seed``: every consumer of randomness gets its own generator,
so no two share draws and adding one never shifts another."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator

import torch

from rl_lightning._checks import check_int, check_seed, check_str


def derive_seed(seed: int, stream: str, rank: int = 0) -> int:
    """The seed of the named ``stream`` (``"actions"``, ``"replay"``, ...) of process ``rank`` for a
    run seeded with ``seed``: a 63-bit hash of ``(seed, stream, rank)``, independent of every other
    stream. (The envs are seeded directly: rank r's with ``seed + r * num_envs``, see ``RLModule``.)
    """
    check_seed("seed", seed)
    check_str("stream", stream)
    check_int("rank", rank, 0)
    digest = hashlib.blake2b(f"{seed}/{stream}/{rank}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def make_generator(seed: int, stream: str, rank: int = 0, device: torch.device | str = "cpu") -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded with :func:`derive_seed`."""
    return torch.Generator(device=device).manual_seed(derive_seed(seed, stream, rank))


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Run the block with torch's global CPU RNG seeded with ``seed``, restoring it afterwards
    (network init: the same weights on every rank, the caller's RNG untouched)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(check_seed("seed", seed))
        yield
