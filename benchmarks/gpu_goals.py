"""Issue 48's goals on one GPU, one table: target / measured / how (``benchmarks/gpu.sh``'s last step).

    python benchmarks/gpu_goals.py [--out benchmarks/results/gpu_goals.md]
    python benchmarks/gpu_goals.py --device cpu --quick     # the code path, on a machine without a GPU

Each goal is measured here in the way its row says, in ``Trainer.fit`` (the steady-state window of
``bench_engine.py``: after the first rollout or a tenth of the run, so compiling is not counted) or on the envs alone
(``bench_gpu.py``'s protocol: random actions drawn on the device, no host sync inside the loop). The training path's
envs are ``make_envs(..., compile=True)``: each step one compiled function, the reset states drawn from the env's
own generator. gymnax's rows need JAX and gymnax; without them that goal says "not measured".
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_engine import PPO_CARTPOLE, Row, config_settings, run_lightning
from bench_gpu import env_step_time, gymnax_step_time

from rl_lightning import DQNModule, PPOModule, SACModule, TD3Module, VPGModule

ENV_IDS = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Pendulum-v1")
#: The engine's settings for a goal: the whole update compiled (on CUDA also the acting step and the envs).
ENGINE = {"whole_update": True}


def compiled_env_step_time(env_id: str, num_envs: int, device: torch.device, steps: int) -> float:
    """Seconds per vector step of the training path's env (``compile=True``), random actions drawn on the device."""
    return env_step_time(env_id, num_envs, device, steps, compile=True)


def fit_measure(module_class: type, settings: dict[str, Any], updates: int, device: torch.device, compile: Any):
    """``bench_engine``'s measure of ``updates`` updates in ``Trainer.fit``."""
    row = Row("goal", module_class.__name__, module_class, settings, updates=updates, quick_updates=updates, sb3=False)
    return run_lightning(row, updates, device, compile=compile)


class Goals:
    """The table's rows, written after each one (a run cut short keeps what it measured)."""

    def __init__(self, out: Path, header: list[str]):
        self.out, self.lines = out, [*header, "| goal | target | measured | met | how |", "|---|---|---|---|---|"]

    def add(self, goal: str, target: str, measure: Callable[[], tuple[float | None, str]], met: Callable, how: str):
        try:
            value, shown = measure()
            verdict = "not measured" if value is None else ("yes" if met(value) else "no")
        except Exception as error:  # one failing goal must not lose the others
            shown, verdict = f"error: {type(error).__name__}: {str(error)[:100]}", "not measured"
        self.lines.append(f"| {goal} | {target} | {shown} | {verdict} | {how} |")
        print(self.lines[-1], flush=True)
        self.out.write_text("\n".join(self.lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (to try the code path)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/gpu_goals.md"))
    parser.add_argument("--quick", action="store_true", help="tiny sizes: the code path only")
    args = parser.parse_args()
    torch.set_num_threads(1)
    device = torch.device(args.device)
    quick = args.quick
    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    header = [f"Device: {name}; torch {torch.__version__}", "", "Command: `python benchmarks/gpu_goals.py`", ""]
    if quick:
        header += ["**--quick: tiny sizes, the code path only; not the goals' measurements.**", ""]
    goals = Goals(args.out, header)
    ppo_updates = 32 if quick else 64  # 16 updates per rollout; the first is the warm-up

    for num_envs, target in ((4096, 1e7), (65536, 5e7)):
        envs = 64 if quick else num_envs
        settings = {**PPO_CARTPOLE, "num_envs": envs, "num_minibatches": 4}

        def ppo(settings: dict[str, Any] = settings) -> tuple[float, str]:
            rate = fit_measure(PPOModule, settings, ppo_updates, device, ENGINE).env_steps_per_second
            return rate, f"{rate:.3g} env steps/s"

        goals.add(
            f"PPO CartPole-v1, {envs:,} envs, end to end",
            f">= {target:.0e} env steps/s",
            ppo,
            lambda rate, target=target: rate >= target,
            "Trainer.fit, compile={'whole_update': True}, 32 steps x 4 epochs x 4 minibatches, steady state",
        )

    size = 256 if quick else 4096
    for env_id in ENV_IDS:

        def env_rate(env_id: str = env_id) -> tuple[float, str]:
            rate = size / compiled_env_step_time(env_id, size, device, steps=20 if quick else 200)
            return rate, f"{rate:.3g} env steps/s"

        goals.add(
            f"{env_id}, {size:,} envs, training path",
            ">= 1e8 env steps/s",
            env_rate,
            lambda rate: rate >= 1e8,
            "make_envs(compile=True).step with random actions, no host sync",
        )

    sizes = (256, 1024) if quick else (4096, 65536, 2**20)
    for num_envs in sizes:

        def versus_gymnax(num_envs: int = num_envs) -> tuple[float | None, str]:
            gymnax = gymnax_step_time(num_envs) if device.type == "cuda" else None
            ours = compiled_env_step_time("CartPole-v1", num_envs, device, steps=20 if quick else 100)
            if gymnax is None:
                return None, f"{num_envs / ours:.3g} env steps/s (gymnax not run)"
            return gymnax / ours, f"{gymnax / ours:.2f}x gymnax ({num_envs / ours:.3g} vs {num_envs / gymnax:.3g})"

        goals.add(
            f"CartPole-v1, {num_envs:,} envs, vs gymnax",
            ">= 1x gymnax",
            versus_gymnax,
            lambda ratio: ratio >= 1.0,
            "compiled env step vs gymnax jit(vmap(step)) in lax.scan(100), the same GPU",
        )

    updates = 60 if quick else 600
    for label, module_class, settings in (
        ("DQN CartPole-v1 (defaults)", DQNModule, {"seed": 0}),
        ("SAC Pendulum-v1 (configs/sac_pendulum.yaml)", SACModule, config_settings("sac_pendulum.yaml")),
        ("TD3 Pendulum-v1 (configs/td3_pendulum.yaml)", TD3Module, config_settings("td3_pendulum.yaml")),
    ):

        def per_update(module_class: type = module_class, settings: dict[str, Any] = settings) -> tuple[float, str]:
            ms = fit_measure(module_class, settings, updates, device, ENGINE).ms_per_update
            return ms, f"{ms:.2f} ms per update"

        goals.add(
            f"{label}, per update",
            "<= 1 ms, collection included",
            per_update,
            lambda ms: ms <= 1.0,
            "Trainer.fit, compile={'whole_update': True}, steady state",
        )

    for module_class, updates in ((VPGModule, 4 if quick else 12), (PPOModule, 32 if quick else 256)):

        def gpu_vs_cpu(module_class: type = module_class, updates: int = updates) -> tuple[float | None, str]:
            if device.type != "cuda":
                return None, "needs a GPU"
            gpu = fit_measure(module_class, {"seed": 1}, updates, device, False).ms_per_update
            cpu = fit_measure(module_class, {"seed": 1}, updates, torch.device("cpu"), False).ms_per_update
            return cpu / gpu, f"GPU {gpu:.2f} vs CPU {cpu:.2f} ms per update ({cpu / gpu:.2f}x)"

        goals.add(
            f"{module_class.__name__} defaults on the GPU",
            "no slower than on the CPU",
            gpu_vs_cpu,
            lambda ratio: ratio >= 1.0,
            "Trainer.fit at the defaults, eager, ms per update, GPU vs 1 CPU thread of the same machine",
        )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
