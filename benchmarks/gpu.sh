#!/usr/bin/env bash
# The GPU checks in one run, within BUDGET_S seconds (default 480: eight minutes) on one GPU, most important first:
#   1. the suite's CUDA tests (CUDA-parametrised contract tests, host-sync checks, fit/act/evaluate/export on the
#      GPU in 32-true and bf16-mixed, the compiled whole update against eager, the graph-captured FusedCartPole);
#   2. issue 48's goals (benchmarks/gpu_goals.py: PPO CartPole end to end at 4,096 and 65,536 envs, every native
#      env's compiled training-path step, CartPole next to gymnax, DQN/SAC/TD3 ms per update, VPG/PPO GPU vs CPU);
#   3. the engine table on the GPU (benchmarks/bench_engine.py --device cuda: lightning, compile=True,
#      whole_update, plain loop, SB3 on the CPU);
#   4. issue 49's many seeds (benchmarks/bench_seeds.py: PPO CartPole with 1, 16 and 256 seeds in one process);
#   5. benchmarks/bench_gpu.py (env throughput next to gymnax, time to solve on GPU and CPU, bf16), with what is
#      left of the budget;
#   6. issue 51's multi-agent throughput (benchmarks/bench_marl.py --device cuda: raw VMAS balance, VmasVectorEnv,
#      IPPO/MAPPO training iterations at 600 scenes), if 30 s of the budget are left.
# It ends with the goals' table (target / measured / met / how). Each step's log (and gpu_goals.md, gpu.md,
# engine_cuda.md, marl_cuda.md) goes to $OUT (or benchmarks/results/). Meant for a GPU machine whose torch has CUDA;
# needs this project and its runtime dependencies importable (pip install -e ".[dev]", or PYTHONPATH), stable-baselines3 for
# the SB3 column, and, for the gymnax comparison, gymnax and JAX.
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
deadline=$((SECONDS + ${BUDGET_S:-480}))
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
timeout "$(cap 150)" "$python" -m pytest -q -p no:cacheprovider -rs "${tests[@]}" 2>&1 | tee "$out/gpu_tests.log" \
    | tail -n 25
echo "== issue 48's goals on $device"
timeout "$(cap 150)" "$python" benchmarks/gpu_goals.py --device "$device" "${quick[@]}" --out "$out/gpu_goals.md" 2>&1 \
    | quiet | tee "$out/gpu_goals.log" | tail -n 20
echo "== engine table on $device"
timeout "$(cap 90)" "$python" benchmarks/bench_engine.py --device "$device" --repeats 1 "${quick[@]}" \
    --out "$out/engine_$device.md" 2>&1 | quiet | tee "$out/engine_bench.log" | tail -n 40
echo "== issue 49: many seeds in one process on $device (PPO CartPole, 1 / 16 / 256 seeds)"
timeout "$(cap 100)" "$python" benchmarks/bench_seeds.py --device "$device" --rows ppo_cartpole --seeds 1 16 256 \
    "${quick[@]}" --out "$out/seeds_$device.md" 2>&1 | quiet | tee "$out/seeds_bench.log" | tail -n 12
echo "== bench_gpu.py on $device"
timeout "$(cap 100)" "$python" benchmarks/bench_gpu.py --device "$device" "${quick[@]}" --out "$out/gpu.md" 2>&1 \
    | quiet | tee "$out/gpu_bench.log" | tail -n 40
if [ $((deadline - SECONDS)) -ge 30 ]; then
    echo "== issue 51: multi-agent PPO on VMAS balance on $device (bench_marl.py: raw VMAS, VmasVectorEnv, IPPO/MAPPO)"
    marl=(--scenes 600 --repeats 1 --rollouts 2)
    [ -n "${QUICK:-}" ] && marl=(--quick)
    timeout "$(cap 120)" "$python" benchmarks/bench_marl.py --device "$device" "${marl[@]}" \
        --out "$out/marl_$device.md" 2>&1 | quiet | tee "$out/marl_bench.log" | tail -n 12
else
    echo "== issue 51 (bench_marl.py): skipped, under 30 s of the budget left"
fi
echo "== gpu.sh: $SECONDS s; issue 48's goals:"
cat "$out/gpu_goals.md" 2>/dev/null || echo "(no goals table: its step did not run)"
