#!/usr/bin/env bash
# The GPU checks in one run (issue: "On a GPU"), under 8 minutes on one GPU: the suite's CUDA tests
# (CUDA-parametrised contract tests, host-sync checks, fit/act/evaluate/export on the GPU in 32-true and
# bf16-mixed, the graph-captured FusedCartPole), then benchmarks/bench_gpu.py, which writes gpu.md
# into $OUT (or benchmarks/results/). Meant for a GPU machine whose torch has CUDA; needs this
# project and its runtime dependencies importable (pip install -e ".[dev]", or PYTHONPATH) and, for
# the gymnax comparison, gymnax and JAX.
#   bash benchmarks/gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
# JAX (gymnax's row) must not take 75% of the GPU's memory before torch's rows.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
python=${PYTHON:-python3}
out=${OUT:-benchmarks/results}
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
timeout 200 "$python" -m pytest -q -p no:cacheprovider -rs tests/test_cuda.py tests/test_host_syncs.py \
    tests/envs/test_contract.py tests/envs/test_fused.py tests/test_precision.py 2>&1 | tee "$out/gpu_tests.log" | tail -n 25
timeout 330 "$python" benchmarks/bench_gpu.py --out "$out/gpu.md" 2>&1 | grep -v -e Tip -e LeafSpec -e "available:" \
    | tee "$out/gpu_bench.log" | tail -n 40
