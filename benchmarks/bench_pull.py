"""What a pull through Lightning's ``training_step(self, dataloader_iter)`` costs per update: the layers' loops take
each batch with ``next(dataloader_iter)`` (Lightning's fetcher and ``CombinedLoader`` around the source's
``SourceLoader``) instead of calling the source's ``next_batch()``. A source that hands out one ready tensor, so
only the pull is timed.

    python benchmarks/bench_pull.py [--pulls 200000]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator

import torch
from lightning.pytorch.loops.fetchers import _DataLoaderIterDataFetcher
from lightning.pytorch.utilities.combined_loader import CombinedLoader
from torch.utils.data import IterableDataset

from rl_lightning.data.source import SourceLoader


class ReadySource(IterableDataset):
    """A stand-in source: ``next_batch()`` returns one tensor, ``__iter__`` yields it as ``EnvSource`` does."""

    def __init__(self) -> None:
        self.batch = torch.zeros(3)

    def __len__(self) -> int:
        return 10**9

    def next_batch(self) -> torch.Tensor:
        return self.batch

    def __iter__(self) -> Iterator[torch.Tensor]:
        for _ in range(len(self)):
            yield self.next_batch()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pulls", type=int, default=200_000)
    pulls = parser.parse_args().pulls
    source = ReadySource()
    start = time.perf_counter()
    for _ in range(pulls):
        source.next_batch()
    direct = (time.perf_counter() - start) / pulls
    fetcher = _DataLoaderIterDataFetcher()  # what Lightning 2.6 hands a dataloader_iter training step
    fetcher.setup(CombinedLoader(SourceLoader(source), "max_size_cycle"))
    dataloader_iter = next(iter(fetcher))
    start = time.perf_counter()
    for _ in range(pulls):
        next(dataloader_iter)
    pulled = (time.perf_counter() - start) / pulls
    print(f"next_batch() directly: {direct * 1e6:.2f} us; next(dataloader_iter): {pulled * 1e6:.2f} us per batch")


if __name__ == "__main__":
    main()
