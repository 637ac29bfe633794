#!/usr/bin/env bash
# The GPU checks in one run (issues: "On a GPU"; issue 24's "Show"), within BUDGET_S seconds (default 570: ten
# minutes of GPU time with the machine's start) on one GPU, most important first:
#   1. the suite's CUDA tests (CUDA-parametrised contract tests, host-sync checks, fit/act/evaluate/export on the
#      GPU in 32-true and bf16-mixed, the graph-captured FusedCartPole);
#   2. issue 24's engine table on the GPU (benchmarks/bench_engine.py --device cuda: lightning, compile=True,
#      whole_update, plain loop, SB3 on the CPU), and PPO on CartPole-v1 with 4,096 envs end to end (target: 1e7 env steps/s);
#   3. benchmarks/bench_gpu.py (env throughput next to gymnax, time to solve on GPU and CPU, bf16), with what is
#      left of the budget.
# Each step's log (and gpu.md, engine_gpu.md) goes to $OUT (or benchmarks/results/). Meant for a GPU machine whose
# torch has CUDA; needs this project and its runtime dependencies importable (pip install -e ".[dev]", or
# PYTHONPATH), stable-baselines3 for the SB3 column, and, for the gymnax comparison, gymnax and JAX.
#   bash benchmarks/gpu.sh
#   DEVICE=cpu QUICK=1 bash benchmarks/gpu.sh    # a dry run of every step on the CPU, tiny sizes (a few minutes)
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
# JAX (gymnax's row) must not take 75% of the GPU's memory before torch's rows.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
python=${PYTHON:-python3}
out=${OUT:-benchmarks/results}
device=${DEVICE:-cuda}
quick=()
[ -n "${QUICK:-}" ] && quick=(--quick)
mkdir -p "$out"
deadline=$((SECONDS + ${BUDGET_S:-570}))
# A step's timeout: its own cap, or what is left of the budget if that is less.
cap() { local left=$((deadline - SECONDS)); echo $(( left < $1 ? (left > 1 ? left : 1) : $1 )); }
quiet() { grep -v -e Tip -e LeafSpec -e "available:"; }

if [ "$device" = cuda ]; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
    tests=(tests/test_cuda.py tests/test_host_syncs.py tests/envs/test_contract.py tests/envs/test_fused.py
        tests/test_precision.py)
else
    tests=(tests/test_cuda.py)  # the dry run: the CUDA tests skip without a GPU; the command line is what is tried
fi
echo "== CUDA tests"
timeout "$(cap 180)" "$python" -m pytest -q -p no:cacheprovider -rs "${tests[@]}" 2>&1 | tee "$out/gpu_tests.log" \
    | tail -n 25
echo "== engine table on $device"
timeout "$(cap 200)" "$python" benchmarks/bench_engine.py --device "$device" --repeats 1 "${quick[@]}" \
    --out "$out/engine_$device.md" 2>&1 | quiet | tee "$out/engine_bench.log" | tail -n 40
echo "== PPO CartPole-v1, 4,096 envs, end to end on $device"
timeout "$(cap 60)" "$python" benchmarks/bench_engine.py --device "$device" --repeats 1 "${quick[@]}" \
    --rows ppo_cartpole_4096 --variants lightning compile compile_whole plain --no-write 2>&1 | quiet \
    | tee "$out/engine_4096.log" | tail -n 12
echo "== bench_gpu.py on $device"
timeout "$(cap 330)" "$python" benchmarks/bench_gpu.py --device "$device" "${quick[@]}" --out "$out/gpu.md" 2>&1 \
    | quiet | tee "$out/gpu_bench.log" | tail -n 40
echo "== gpu.sh: $SECONDS s"
