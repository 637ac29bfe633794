"""How many torch CPU threads a fit uses: one, for the small networks of most RL tasks, unless the user chose.

torch starts with a thread per core. For networks of a few thousand to a few hundred thousand parameters every
matrix product is too small to split, and the threads' hand-overs cost more than they save; on a busy machine the
threads of several processes contend and a bare ``Trainer().fit(module)`` ran 20-30x slower than the scripts,
which take one thread (``--num_threads 1``). So a fit on the CPU takes one thread for its duration where the
networks are small and the user has not chosen a number (``torch.set_num_threads`` after importing rl_lightning,
or ``OMP_NUM_THREADS``), and says so once.
"""

from __future__ import annotations

import os
from typing import Any

import torch

#: torch's thread count when rl_lightning was imported: a different count at fit time is the user's choice.
THREADS_AT_IMPORT = torch.get_num_threads()
#: Networks up to this many parameters train on one thread (Atari's Nature CNN, 1.7 M, keeps torch's threads).
SMALL_NETWORK_PARAMETERS = 1_000_000


#: The count the user chose through :func:`use_threads` (the CLI's ``--num_threads``), even torch's default.
_chosen: int | None = None


def use_threads(count: int) -> None:
    """``torch.set_num_threads(count)`` as the user's choice: a fit keeps it even where it equals torch's default
    (``--num_threads 2`` on a 2-core machine), which :func:`one_thread_for_small_networks` cannot tell apart."""
    global _chosen
    torch.set_num_threads(count)
    _chosen = count


def one_thread_for_small_networks(module: Any) -> int | None:
    """Set torch to one CPU thread for a fit of ``module`` (on the CPU, networks of at most
    :data:`SMALL_NETWORK_PARAMETERS` parameters) where the thread count is still torch's default and no
    ``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS`` is set; returns the count to restore after the fit (None: unchanged)."""
    threads = torch.get_num_threads()
    if threads == 1 or threads != THREADS_AT_IMPORT or threads == _chosen or module.device.type != "cpu":
        return None
    if os.environ.get("OMP_NUM_THREADS") or os.environ.get("MKL_NUM_THREADS"):
        return None
    parameters = sum(parameter.numel() for parameter in module.parameters())
    if parameters > SMALL_NETWORK_PARAMETERS:
        return None
    from lightning.pytorch.utilities import rank_zero_info

    torch.set_num_threads(1)
    rank_zero_info(
        f"rl_lightning: this fit uses 1 torch CPU thread, not {threads} ({parameters:,} parameters: small networks "
        "run fastest on one); torch.set_num_threads(N) before the fit chooses another number"
    )
    return threads
