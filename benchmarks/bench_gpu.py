"""GPU measurements, one run: env throughput at large batch sizes (next to gymnax's CartPole where
JAX is installed), time to solve CartPole with VPG, PPO and DQN on the GPU and on the same
machine's CPU, and bf16-mixed against 32-true. Writes a markdown table file.

    python benchmarks/bench_gpu.py [--out benchmarks/results/gpu.md] [--quick]
    python benchmarks/bench_gpu.py --device cpu --quick       # the code path, on a machine without a GPU

Env timing: ``steps`` vector steps with random actions drawn on the device, after a warm-up,
between two ``torch.cuda.synchronize()`` calls (no host sync inside the loop: the envs' own
values are never read back). gymnax: ``jit(vmap(step))`` inside a ``lax.scan`` of 100 steps, the
protocol of the issue that asked for this comparison. Solve times: ``Trainer.fit`` to the first
greedy evaluation (32 episodes) >= 475, evaluation time excluded.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

import lightning as L
import torch

from rl_lightning import DQNModule, PPOModule, VPGModule
from rl_lightning.callbacks.evaluation import evaluate_policy
from rl_lightning.envs import make_envs
from rl_lightning.envs.fused import FusedCartPole
from rl_lightning.losses import compute_td_loss, compute_td_target

ENV_IDS = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Pendulum-v1")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def env_step_time(env_id: str, num_envs: int, device: torch.device, steps: int, compile: bool = False) -> float:
    """Seconds per vector step of ``num_envs`` copies (random actions, drawn on the device); ``compile``: the
    training path's compiled step (``make_envs(..., compile=True)``)."""
    envs = make_envs(env_id, num_envs, seed=0, device=device, compile=compile)
    generator = torch.Generator(device=device).manual_seed(0)
    envs.reset()
    for _ in range(10):  # warm-up, and the first step's action check
        envs.step(envs.random_actions(generator))
    _sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        envs.step(envs.random_actions(generator))
    _sync(device)
    return (time.perf_counter() - start) / steps


def fused_step_time(num_envs: int, device: torch.device, repeats: int = 5) -> float:
    """Seconds per vector step of FusedCartPole: 100 compiled steps per CUDA-graph launch."""
    on_gpu = device.type == "cuda"
    envs = FusedCartPole(num_envs, seed=0, device=device, horizon=100, compile=on_gpu, graph=on_gpu)
    envs.run()
    _sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        envs.run()
        _sync(device)
        times.append((time.perf_counter() - start) / envs.horizon)
    return statistics.median(times)


def gymnax_step_time(num_envs: int, scan_steps: int = 100, repeats: int = 5) -> float | None:
    """Seconds per vector step of gymnax's CartPole-v1 (None when gymnax is not installed)."""
    try:
        import gymnax
        import jax
    except ImportError:
        return None
    env, params = gymnax.make("CartPole-v1")
    keys = jax.random.split(jax.random.PRNGKey(0), num_envs)
    _, state = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def body(carry, _):
        state, key = carry
        key, action_key, step_key = jax.random.split(key, 3)
        actions = jax.random.randint(action_key, (num_envs,), 0, 2)
        state = step(jax.random.split(step_key, num_envs), state, actions, params)[1]  # (obs, state, ...)
        return (state, key), None

    run = jax.jit(lambda state, key: jax.lax.scan(body, (state, key), None, length=scan_steps)[0])
    carry = run(state, jax.random.PRNGKey(1))
    jax.block_until_ready(carry)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        carry = run(*carry)
        jax.block_until_ready(carry)
        times.append((time.perf_counter() - start) / scan_steps)
    return statistics.median(times)


def dqn_update_parts(device: torch.device, iterations: int = 300) -> tuple[float, float]:
    """Milliseconds per DQN update, split in two, outside Lightning (DQNModule's defaults): the
    source's ``next_batch`` (act, one step of the envs, store, sample) and the bare optimizer
    update (online and target forward, double-DQN target, MSE, backward, Adam)."""
    module = DQNModule(seed=0).to(device)
    source = module.make_source(make_envs("CartPole-v1", module.hparams.num_envs, 0, device=device))
    while (batch := source.next_batch()) is None:  # the warm-up
        pass
    optimizer = torch.optim.Adam(module.q_network.parameters(), lr=1e-4, fused=device.type == "cuda")

    def update(batch) -> None:
        q_values = module.q_network(batch.obs).gather(1, batch.actions.unsqueeze(1)).squeeze(1)
        with torch.no_grad():
            next_actions = module.q_network(batch.next_obs).argmax(dim=1, keepdim=True)
            next_q = module.target_network(batch.next_obs).gather(1, next_actions).squeeze(1)
            targets = compute_td_target(batch.rewards, batch.terminated, next_q, 0.99)
        optimizer.zero_grad(set_to_none=True)
        compute_td_loss(q_values, targets).backward()
        optimizer.step()

    timings = []
    for part in (source.next_batch, lambda: update(batch)):
        for _ in range(20):
            part()
        _sync(device)
        start = time.perf_counter()
        for _ in range(iterations):
            part()
        _sync(device)
        timings.append(1e3 * (time.perf_counter() - start) / iterations)
    return timings[0], timings[1]


# configs/ppo_cartpole.yaml's earlier settings, the GPU table's (its other arguments are PPOModule's defaults).
_PPO_TUNED = dict(num_envs=32, num_steps_per_rollout=32, num_minibatches=1, activation="relu", seed=1)


class _SolveClock(L.Callback):
    """Evaluate at each epoch end once ``every`` more env steps passed; stop at >= 475."""

    def __init__(self, every: int):
        self.every, self.next, self.solved = every, every, None

    def on_train_start(self, trainer, pl_module):
        self.start, self.paused = time.perf_counter(), 0.0

    def on_train_epoch_end(self, trainer, pl_module):
        if pl_module.env_steps < self.next:
            return
        self.next = pl_module.env_steps + self.every
        paused = time.perf_counter()
        result = evaluate_policy(pl_module, pl_module.make_envs(32, 4242), seed=4242)
        self.paused += time.perf_counter() - paused
        if result.returns.mean().item() >= 475:
            self.solved = (time.perf_counter() - self.start - self.paused, pl_module.env_steps)
            trainer.should_stop = True


def solve_time(module: L.LightningModule, accelerator: str, precision: str, max_steps: int, every: int):
    clock = _SolveClock(every)
    trainer = L.Trainer(
        accelerator=accelerator,
        devices=1,
        precision=precision,
        max_steps=max_steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[clock],
    )
    trainer.fit(module)
    if clock.solved is None:
        return float("nan"), module.env_steps, trainer.global_step
    return (*clock.solved, trainer.global_step)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (to try the code path)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/gpu.md"))
    parser.add_argument("--quick", action="store_true", help="small sizes and few seeds")
    args = parser.parse_args()
    torch.set_num_threads(1)
    device = torch.device(args.device)
    sizes = (4096, 65536) if args.quick else (4096, 65536, 2**20, 2**24)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        f"Machine: {torch.cuda.get_device_name() if device.type == 'cuda' else platform.processor() or 'cpu'}; "
        f"torch {torch.__version__}, lightning {L.__version__}",
        "",
        f"Command: `python benchmarks/bench_gpu.py{' --quick' if args.quick else ''}`",
        "",
        "## Env throughput (random actions, no host sync in the loop)",
        "",
        "Eager: `make_envs(env_id, n, device=...)`, one `step` per Python call, exact (gymnasium's",
        "dynamics and reset stream). Compiled: `make_envs(..., compile=True)`, the training path: each step one",
        "compiled function, the same reset stream. Fused: `rl_lightning.envs.fused.FusedCartPole`, the same dynamics",
        "compiled by torch.compile and 100 steps per CUDA-graph launch (random numbers from a counter hash).",
        "",
        "| env | path | num_envs | us per vector step | env steps/s |",
        "|---|---|---:|---:|---:|",
    ]
    for compile in (False, True):
        for env_id in ENV_IDS if not args.quick else ENV_IDS[:2]:
            for num_envs in sizes:
                steps = 20 if num_envs >= 2**20 else 100
                seconds = env_step_time(env_id, num_envs, device, steps, compile)
                path = "compiled" if compile else "eager"
                lines.append(f"| {env_id} | {path} | {num_envs:,} | {seconds * 1e6:,.1f} | {num_envs / seconds:.3g} |")
                print(lines[-1], flush=True)
                args.out.write_text("\n".join(lines) + "\n")
    for num_envs in sizes:
        seconds = fused_step_time(num_envs, device)
        lines.append(f"| CartPole-v1 | fused | {num_envs:,} | {seconds * 1e6:,.1f} | {num_envs / seconds:.3g} |")
        print(lines[-1], flush=True)
    try:
        gymnax_rows = [(n, gymnax_step_time(n)) for n in sizes] if device.type == "cuda" else []
    except Exception as error:  # JAX present but failing: report it, measure the rest
        print(f"gymnax failed: {type(error).__name__}: {error}", flush=True)
        gymnax_rows = []
    if any(seconds is not None for _, seconds in gymnax_rows):
        lines += ["", "gymnax CartPole-v1 (jit(vmap(step)) in a lax.scan of 100 steps):", ""]
        lines += ["| num_envs | us per vector step | env steps/s |", "|---:|---:|---:|"]
        lines += [f"| {n:,} | {s * 1e6:,.1f} | {n / s:.3g} |" for n, s in gymnax_rows if s is not None]
        print("\n".join(lines[-len(gymnax_rows) :]), flush=True)
    cpu_threads = os.cpu_count() or 1
    # (algorithm, setting, module, max_steps, evaluate every n env steps, CPU threads, bf16 row)
    runs = [
        ("VPG", "defaults", lambda: VPGModule(seed=1), 50, 16_000, 1, True),
        (
            "VPG",
            "2048 envs",
            lambda: VPGModule(num_envs=2048, num_steps_per_rollout=200, seed=1),
            50,
            409_600,
            cpu_threads,
            True,
        ),
        ("PPO", "defaults", lambda: PPOModule(seed=1), 3200, 2048, 1, True),
        ("PPO", "configs/ppo_cartpole.yaml", lambda: PPOModule(**_PPO_TUNED), 200, 2048, 1, True),
        (
            "PPO",
            "1024 envs x 16, 1 minibatch, relu",
            lambda: PPOModule(num_envs=1024, num_steps_per_rollout=16, num_minibatches=1, activation="relu", seed=1),
            400,
            16_384,
            cpu_threads,
            True,
        ),
        ("DQN", "defaults", lambda: DQNModule(seed=0), 5000, 4000, 1, False),
    ]
    lines += ["", "## Time to solve CartPole-v1 (greedy >= 475, evaluation excluded)", ""]
    lines += [
        f"CPU rows: the same machine's CPU, 1 torch thread for the small settings, {cpu_threads} for the large ones.",
        "",
        "| algorithm | setting | device | precision | seconds | env steps | updates | ms per update |",
        "|---|---|---|---|---:|---:|---:|---:|",
    ]
    for name, setting, build, max_steps, every, threads, bf16 in runs if not args.quick else runs[:3]:
        devices = [("gpu", "32-true")] + ([("gpu", "bf16-mixed")] if bf16 else []) + [("cpu", "32-true")]
        for where, precision in devices if device.type == "cuda" else [("cpu", "32-true")]:
            torch.set_num_threads(threads if where == "cpu" else 1)
            try:
                seconds, env_steps, updates = solve_time(build(), where, precision, max_steps, every)
                row = f"{seconds:.2f} | {env_steps:,} | {updates:,} | {1e3 * seconds / max(updates, 1):.2f}"
            except Exception as error:  # one failing row must not lose the others
                row = f"error: {type(error).__name__}: {str(error)[:120]} | | |"
            lines.append(f"| {name} | {setting} | {where} | {precision} | {row} |")
            print(lines[-1], flush=True)
            args.out.write_text("\n".join(lines) + "\n")
    lines += [
        "",
        "## DQN update in parts (outside Lightning, DQNModule's defaults, ms per update)",
        "",
        "| device | next_batch (act, env step, store, sample) | optimizer update |",
        "|---|---:|---:|",
    ]
    for where in ("cuda", "cpu") if device.type == "cuda" else ("cpu",):
        torch.set_num_threads(1)
        collect, update = dqn_update_parts(torch.device(where))
        lines.append(f"| {where} | {collect:.3f} | {update:.3f} |")
        print(lines[-1], flush=True)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
