"""Fixtures for the env tests."""

import os

import pytest

try:  # private to torch: without it (another torch version) the cache stays shared
    from torch._inductor.runtime.cache_dir_utils import cache_dir, temporary_cache_dir
except ImportError:
    temporary_cache_dir = None


@pytest.fixture(autouse=True, scope="session")
def _inductor_cache_per_cpu_capability():
    """inductor's on-disk cache does not tell code built for one ATEN_CPU_CAPABILITY from another's: a
    run under ``ATEN_CPU_CAPABILITY=default`` after a native one fails to build the cached vectorised
    kernels ("'at::vec' has not been declared"). So each capability gets a cache of its own."""
    capability = os.environ.get("ATEN_CPU_CAPABILITY")
    if not capability or temporary_cache_dir is None:
        yield
        return
    with temporary_cache_dir(os.path.join(cache_dir(), f"aten_cpu_capability_{capability}")):
        yield
