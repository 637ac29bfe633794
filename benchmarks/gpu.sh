#!/usr/bin/env bash
# The GPU checks in one run (issue: "On a GPU"), under 8 minutes on one GPU: the suite's CUDA tests
# and host-sync tests, then benchmarks/bench_gpu.py, which writes benchmarks/results/gpu.md.
# Meant for the device machine (its torch has CUDA); needs this project importable:
#   pip install -e . (or PYTHONPATH=.) and the dev extra's pytest.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
out=${OUT:-benchmarks/results}
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
timeout 240 python -m pytest -q -p no:cacheprovider tests/test_cuda.py tests/test_host_syncs.py \
    tests/envs/test_contract.py 2>&1 | tee "$out/gpu_tests.log" | tail -n 20
timeout 300 python benchmarks/bench_gpu.py --out "$out/gpu.md" 2>&1 | tee "$out/gpu_bench.log" | tail -n 40
