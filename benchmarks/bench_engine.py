"""Engine speed at identical settings (issue 24's table): env steps per CPU second and CPU milliseconds per
update (optimizer step), one interleaved run, for

- ``lightning``: ``Trainer.fit(Module(...))`` as a user runs it (no logger, checkpoints or bar), eager;
- ``lightning_k1``: the off-policy rows with ``updates_per_step=1`` (one update per Lightning training step;
  ``lightning`` runs the default, 10);
- ``compile``: the same with the module's compiled loss only, ``compile={"whole_update": False}`` ("n/a" where the
  algorithm does not take it);
- ``compile_whole``: the same with ``compile=True`` (its default, ``{"whole_update": True}``): loss, backward,
  clipping, Adam's step and the per-update Polyak update as one compiled function
  (``rl_lightning.compiling.WholeUpdate``);
- ``plain``: the same module's own functions in a plain Python loop (the Lightning-free floor):
  ``source.next_batch``, ``training_step``, backward, gradient clipping, ``optimizer_step`` (PPO's target_kl),
  and what the module's callbacks do (PPO's LR annealing, DQN's target copy and epsilon, SAC's Polyak
  update). ``--check`` asserts that it does the same work: after a short seeded run its weights equal the
  ``Trainer.fit`` run's, exactly;
- ``sb3``: Stable-Baselines3 given the same settings, on gymnasium's envs, on the CPU.

Rows: PPO CartPole-v1 (``configs/ppo_cartpole.yaml``'s earlier settings: ``PPO_CARTPOLE``), PPO Pendulum-v1
(``configs/ppo_pendulum.yaml``), DQN CartPole-v1 (DQNModule's defaults), SAC Pendulum-v1
(``configs/sac_pendulum.yaml``), and the bare Lightning step: a one-parameter LightningModule's training step,
Lightning's fixed per-step cost.

    python benchmarks/bench_engine.py [--rows ...] [--variants ...] [--repeats 3] [--quick] [--device cpu]
        [--out benchmarks/results/engine.md] [--no-write]
    python benchmarks/bench_engine.py --check        # plain loop == Trainer.fit, weights after a short run

Steady state, every variant alike: the clock (process time on the CPU; wall time between CUDA syncs with
``--device cuda``) starts after the warm-up updates (PPO: the first rollout's; the others: a tenth of the run,
after the random warm-up), so setup, the random warm-up and compilation are outside the rates; what the
window holds is collection and updates. ``compile s``: the ``compile=True`` module's
``compile_seconds`` (wall seconds of the compiled functions' first calls, the env step's included), of the first
repeat (later repeats compile their own copies from inductor's caches, faster; its disk cache may hold it from an
earlier run). One torch thread; the variants alternate ``--repeats`` times, medians reported.
"""

from __future__ import annotations

import argparse
import inspect
import logging
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
import torch
import yaml
from _time_to_solve import machine_line
from torch import nn
from torch.utils.data import DataLoader, IterableDataset

from rl_lightning import DQNModule, PPOModule, SACModule
from rl_lightning.callbacks.epsilon import EpsilonDecay
from rl_lightning.callbacks.guard import RunGuard
from rl_lightning.callbacks.lr_decay import LinearLRDecay
from rl_lightning.callbacks.schedule import linear_schedule
from rl_lightning.callbacks.target_sync import TargetNetworkSync, update_target_network
from rl_lightning.checkpoints import StepInNames

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
VARIANTS = ("lightning", "lightning_k1", "compile", "compile_whole", "plain", "sb3")
VARIANT_LABELS = {
    "compile": "lightning compiled loss",
    "compile_whole": "lightning compile=True (whole update)",
    "lightning_k1": "lightning updates_per_step=1",
}


def config_settings(name: str) -> dict[str, Any]:
    return yaml.safe_load((CONFIGS / name).read_text())["model"]["init_args"]


@dataclass(frozen=True)
class Row:
    """One task of the table: the module and its settings, the run's updates (default, ``--quick``)."""

    key: str
    label: str
    module_class: type | None  # None: the bare Lightning step
    settings: dict[str, Any] = field(default_factory=dict)
    updates: int = 2000
    quick_updates: int = 40
    sb3: bool = True  # an SB3 column

    def warmup_updates(self, module: Any, updates: int) -> int:
        """Updates before the clock starts: PPO's first rollout, else a tenth of the run (at least one)."""
        per_collection = getattr(module, "training_steps_per_collection", 1)
        return per_collection if per_collection > 1 else max(1, updates // 10)


# PPO CartPole-v1 at the settings the engine table was measured with (configs/ppo_cartpole.yaml before it took
# RL-Zoo's settings for robustness over seeds): 32 envs x 32 steps, 4 epochs of one minibatch, relu (64, 64).
PPO_CARTPOLE = {
    **config_settings("ppo_cartpole.yaml"),
    **dict(num_envs=32, lr=0.0025, gamma=0.99, gae_lambda=0.95, update_epochs=4, activation="relu"),
}
ROWS = {
    row.key: row
    for row in (
        Row("ppo_cartpole", "PPO CartPole-v1", PPOModule, PPO_CARTPOLE, updates=200, quick_updates=8),
        Row("ppo_pendulum", "PPO Pendulum-v1", PPOModule, config_settings("ppo_pendulum.yaml"), 600, 40),
        Row("dqn_cartpole", "DQN CartPole-v1", DQNModule, dict(seed=0), updates=2000, quick_updates=40),
        Row("sac_pendulum", "SAC Pendulum-v1", SACModule, config_settings("sac_pendulum.yaml"), 2000, 40),
        Row("bare", "bare Lightning step", None, updates=3000, quick_updates=200, sb3=False),
        # Not in the default run (gpu.sh): PPO CartPole end to end at 4,096 envs (4 minibatches of 32,768).
        Row(
            "ppo_cartpole_4096",
            "PPO CartPole-v1, 4,096 envs",
            PPOModule,
            {**PPO_CARTPOLE, "num_envs": 4096, "num_minibatches": 4},
            updates=64,  # 4 rollouts of 131,072 env steps, 16 updates each
            quick_updates=32,
            sb3=False,
        ),
    )
}
DEFAULT_ROWS = ("ppo_cartpole", "ppo_pendulum", "dqn_cartpole", "sac_pendulum", "bare")


@dataclass
class Measure:
    """What one run of one variant took in its steady-state window."""

    seconds: float
    env_steps: int
    updates: int
    compile_seconds: float = 0.0

    @property
    def env_steps_per_second(self) -> float:
        return self.env_steps / self.seconds

    @property
    def ms_per_update(self) -> float:
        return 1000 * self.seconds / self.updates


class Clock:
    """Process time on the CPU; wall time after a CUDA sync on the GPU (host CPU time says little there)."""

    def __init__(self, device: torch.device):
        self.device = device

    def __call__(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            return time.perf_counter()
        return time.process_time()


class Window:
    """The steady-state window: ``mark`` once the warm-up updates are done, ``stop`` at the end."""

    def __init__(self, clock: Clock, warmup_updates: int):
        self.clock, self.warmup_updates = clock, warmup_updates
        self.start: tuple[float, int, int] | None = None
        self.end: tuple[float, int, int] | None = None

    def after_update(self, updates_done: int, env_steps: int) -> None:
        if self.start is None and updates_done >= self.warmup_updates:
            self.start = (self.clock(), env_steps, updates_done)

    def stop(self, updates_done: int, env_steps: int) -> None:
        self.end = (self.clock(), env_steps, updates_done)

    def measure(self) -> Measure:
        if self.start is None or self.end is None or self.end[2] <= self.start[2]:
            raise RuntimeError(f"no update after the {self.warmup_updates} warm-up updates: make the run longer")
        return Measure(*(end - start for end, start in zip(self.end, self.start, strict=True)))


def _env_steps(module: Any) -> int:
    return module.env_steps if hasattr(module, "env_steps") else 0


class _WindowCallback(L.Callback):
    def __init__(self, window: Window):
        self.window = window

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if not getattr(pl_module, "runs_update_hooks", False):  # the bare Lightning step: one update per step
            self.window.after_update(trainer.global_step, _env_steps(pl_module))

    def on_update_end(self, trainer: L.Trainer, pl_module: Any, loss: Any) -> None:  # an RL module's every update
        self.window.after_update(trainer.global_step, _env_steps(pl_module))

    def on_train_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        self.window.stop(trainer.global_step, _env_steps(pl_module))


# -- the bare Lightning step ----------------------------------------------------------------------


class _Constant(IterableDataset):
    def __init__(self, length: int):
        self.length, self.batch = length, torch.ones(1)

    def __len__(self) -> int:
        return self.length

    def __iter__(self):
        for _ in range(self.length):
            yield self.batch


class OneParameter(L.LightningModule):
    """The smallest training step: one parameter, SGD (what Lightning's loop costs per step on its own)."""

    def __init__(self, batches_per_epoch: int = 1000):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(1))
        self.batches_per_epoch = batches_per_epoch

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        return (self.weight * batch).square().sum()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=1e-3)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(_Constant(self.batches_per_epoch), batch_size=None)


# -- the variants --------------------------------------------------------------------------------------


def build_module(row: Row, compile: bool | dict = False, **overrides: Any) -> Any:
    """The row's module, eager (whatever its config says) or with ``compile`` (True or a dict)."""
    if row.module_class is None:
        return OneParameter()
    settings = {**row.settings, **overrides}
    if compile or "compile" in settings:
        settings["compile"] = compile
    return row.module_class(**settings)


def accepts_compile(row: Row) -> bool:
    """Whether the row's algorithm has the ``compile`` hyper-parameter yet."""
    return row.module_class is not None and "compile" in inspect.signature(row.module_class).parameters


def fit(module: Any, updates: int, device: torch.device, callbacks: list[L.Callback] = ()) -> Any:
    trainer = L.Trainer(
        max_steps=updates,
        accelerator=device.type,
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=list(callbacks),
    )
    trainer.fit(module)
    return module


def run_lightning(row: Row, updates: int, device: torch.device, compile: bool | dict = False) -> Measure | None:
    if compile and not accepts_compile(row):
        return None  # "n/a": the algorithm has no compile hyper-parameter yet
    module = build_module(row, compile)
    window = Window(Clock(device), row.warmup_updates(module, updates))
    fit(module, updates, device, [_WindowCallback(window)])
    measure = window.measure()
    compiled = getattr(module, "compiled", None)
    if compiled is not None:
        measure.compile_seconds = sum(module.compile_seconds.values())  # the updates' and the env step's
    return measure


def run_compile(row: Row, updates: int, device: torch.device) -> Measure | None:
    return run_lightning(row, updates, device, compile={"whole_update": False})


def run_compile_whole(row: Row, updates: int, device: torch.device) -> Measure | None:
    return run_lightning(row, updates, device, compile={"whole_update": True})


def run_lightning_k1(row: Row, updates: int, device: torch.device) -> Measure | None:
    """The off-policy rows with one update per Lightning training step ("n/a" for the others)."""
    if row.module_class is None or "updates_per_step" not in inspect.signature(row.module_class).parameters:
        return None
    module = build_module(row, updates_per_step=1)
    window = Window(Clock(device), row.warmup_updates(module, updates))
    fit(module, updates, device, [_WindowCallback(window)])
    return window.measure()


class _PlainCallbacks:
    """What the module's own callbacks do, without Lightning: each one's work as plain code (a callback this
    loop does not know is an error, so the plain loop never silently does less)."""

    def __init__(self, module: Any, optimizer: torch.optim.Optimizer, updates: int):
        self.module, self.optimizer = module, optimizer
        self.total_env_steps = module.planned_env_steps(updates)
        self.lr_decay: LinearLRDecay | None = None
        self.target_syncs: list[TargetNetworkSync] = []
        self.last_periods: dict[int, int] = {}  # env_steps // every_n_env_steps at each sync's last check
        self.epsilon: EpsilonDecay | None = None
        for callback in module.configure_callbacks():
            if isinstance(callback, LinearLRDecay):
                self.lr_decay = callback
                self.initial_lrs = [group["lr"] for group in optimizer.param_groups]
            elif isinstance(callback, TargetNetworkSync):
                self.target_syncs.append(callback)
                if callback.every_n_env_steps is not None:
                    self.last_periods[id(callback)] = module.env_steps // callback.every_n_env_steps
            elif isinstance(callback, EpsilonDecay):
                self.epsilon = callback
                module.epsilon = callback.value(module.env_steps, self.total_env_steps)
            elif not isinstance(callback, (RunGuard, StepInNames)):  # RunGuard checks; StepInNames names checkpoints
                raise TypeError(f"the plain loop does not know what {type(callback).__name__} does")

    def before_update(self) -> None:
        if self.lr_decay is not None:
            progress = self.module.env_steps_before_batch / self.total_env_steps
            for group, lr in zip(self.optimizer.param_groups, self.initial_lrs, strict=True):
                group["lr"] = linear_schedule(lr, self.lr_decay.lr_end, self.lr_decay.lr_frac, progress)

    def after_update(self, updates_done: int) -> None:
        module = self.module
        for sync in self.target_syncs:
            if sync.every_n_env_steps is not None:
                period = module.env_steps // sync.every_n_env_steps
                if period == self.last_periods[id(sync)]:
                    continue
                self.last_periods[id(sync)] = period
            elif sync.every_n_train_steps is not None and updates_done % sync.every_n_train_steps != 0:
                continue
            for target, online in module.target_network_pairs():
                update_target_network(target, online, sync.tau)
        if self.epsilon is not None:
            module.epsilon = self.epsilon.value(module.env_steps, self.total_env_steps)


def plain_loop(module: Any, updates: int, device: torch.device, window: Window | None = None) -> Any:
    """``updates`` optimizer steps of ``module``'s own functions in a plain loop (what Trainer.fit does)."""
    module.to(device)
    loader = module.train_dataloader()  # builds the source (RL modules) as Lightning's fit does
    source = getattr(module, "source", None)
    batches = iter(loader) if source is None else None
    batches_per_epoch = len(loader.dataset)
    optimizer = module.configure_optimizers()
    callbacks = _PlainCallbacks(module, optimizer, updates) if source is not None else None
    max_norm = module.hparams.get("max_grad_norm") if source is not None else None
    parameters = [p for group in optimizer.param_groups for p in group["params"]]
    for step in range(updates):
        batch_idx = step % batches_per_epoch
        if source is not None:
            batch = source.next_batch()
            callbacks.before_update()
        else:
            batch = next(batches, None)
            if batch is None:
                batches = iter(loader)
                batch = next(batches)
            batch = batch.to(device)

        def closure(batch: Any = batch, batch_idx: int = batch_idx) -> torch.Tensor:
            loss = module.training_step(batch, batch_idx)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if max_norm is not None:
                torch.nn.utils.clip_grad_norm_(parameters, max_norm)
            return loss

        module.optimizer_step(step // batches_per_epoch, batch_idx, optimizer, closure)
        if callbacks is not None:
            callbacks.after_update(step + 1)
        if window is not None:
            window.after_update(step + 1, _env_steps(module))
    if window is not None:
        window.stop(updates, _env_steps(module))
    return module


def run_plain(row: Row, updates: int, device: torch.device) -> Measure:
    module = build_module(row)
    window = Window(Clock(device), row.warmup_updates(module, updates))
    plain_loop(module, updates, device, window)
    return window.measure()


# -- Stable-Baselines3 given the same settings -----------------------------------------------------------


def sb3_ppo(settings: dict[str, Any], updates: int):
    """SB3 PPO given a PPOModule config's settings (gymnasium's env, DummyVecEnv), and its budget in env steps."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    defaults = PPOModule(**settings).hparams
    per_rollout = defaults.num_envs * defaults.num_steps_per_rollout
    rollouts = -(-updates // (defaults.update_epochs * defaults.num_minibatches))
    lr, lr_end, lr_frac = defaults.lr, defaults.lr_end, defaults.lr_frac

    def learning_rate(progress_remaining: float) -> float:
        return linear_schedule(lr, lr_end, lr_frac, 1.0 - progress_remaining) if defaults.anneal_lr else lr

    envs = make_vec_env(defaults.env_id, n_envs=defaults.num_envs, seed=0)
    if defaults.normalize_obs or defaults.normalize_rewards:
        envs = VecNormalize(
            envs, norm_obs=defaults.normalize_obs, norm_reward=defaults.normalize_rewards, gamma=defaults.gamma
        )
    activation = {"tanh": nn.Tanh, "relu": nn.ReLU}[defaults.activation]
    hidden = list(defaults.hidden_sizes)
    model = PPO(
        "MlpPolicy",
        envs,
        learning_rate=learning_rate,
        n_steps=defaults.num_steps_per_rollout,
        batch_size=per_rollout // defaults.num_minibatches,
        n_epochs=defaults.update_epochs,
        gamma=defaults.gamma,
        gae_lambda=defaults.gae_lambda,
        clip_range=defaults.clip_coef,
        clip_range_vf=defaults.clip_coef if defaults.clip_vloss else None,
        normalize_advantage=defaults.norm_adv,
        ent_coef=defaults.ent_coef,
        vf_coef=defaults.vf_coef,
        max_grad_norm=defaults.max_grad_norm if defaults.max_grad_norm is not None else float("inf"),
        target_kl=defaults.target_kl,
        policy_kwargs=dict(
            net_arch=dict(pi=hidden, vf=hidden),
            activation_fn=activation,
            share_features_extractor=defaults.shared_encoder,
            optimizer_kwargs=dict(eps=defaults.adam_eps),
        ),
        device="cpu",
        seed=0,
    )
    return model, rollouts * per_rollout, defaults.update_epochs * defaults.num_minibatches


def sb3_dqn(settings: dict[str, Any], updates: int):
    """SB3 DQN given DQNModule's settings (no double DQN, Huber loss in SB3: an update of the same size)."""
    from stable_baselines3 import DQN
    from stable_baselines3.common.env_util import make_vec_env

    defaults = DQNModule(**settings).hparams
    model = DQN(
        "MlpPolicy",
        make_vec_env(defaults.env_id, n_envs=defaults.num_envs, seed=0),
        learning_rate=defaults.lr,
        buffer_size=defaults.buffer_size,
        learning_starts=defaults.learning_starts,
        batch_size=defaults.batch_size,
        gamma=defaults.gamma,
        train_freq=defaults.train_freq,
        gradient_steps=defaults.gradient_steps,
        target_update_interval=defaults.target_update_env_steps,  # env steps: every 160 // 16 vector steps
        exploration_fraction=defaults.exploration_fraction,
        exploration_initial_eps=defaults.epsilon_start,
        exploration_final_eps=defaults.epsilon_end,
        max_grad_norm=defaults.max_grad_norm,
        policy_kwargs=dict(net_arch=list(defaults.hidden_sizes)),
        device="cpu",
        seed=0,
    )
    per_update = defaults.num_envs * defaults.train_freq / defaults.gradient_steps
    return model, defaults.learning_starts + round(updates * per_update), None


def sb3_sac(settings: dict[str, Any], updates: int):
    """SB3 SAC given configs/sac_pendulum.yaml's settings (bench_sac.py's ``same_settings``)."""
    from bench_sac import _sb3_model, same_settings

    kwargs, _, noise = same_settings("SAC")
    model = _sb3_model("SAC", settings["env_id"], kwargs, noise, seed=0)
    per_update = settings["train_freq"] / settings["gradient_steps"]
    return model, settings["learning_starts"] + round(updates * per_update), None


SB3_BUILDERS = {PPOModule: sb3_ppo, DQNModule: sb3_dqn, SACModule: sb3_sac}


def run_sb3(row: Row, updates: int, device: torch.device) -> Measure | None:
    from stable_baselines3.common.callbacks import BaseCallback

    if not row.sb3 or row.module_class not in SB3_BUILDERS:
        return None
    model, env_steps, updates_per_rollout = SB3_BUILDERS[row.module_class](row.settings, updates)
    warmup = updates_per_rollout if updates_per_rollout is not None else max(1, updates // 10)
    window = Window(Clock(torch.device("cpu")), warmup)

    class Timed(BaseCallback):
        rollouts = 0

        def updates_done(self) -> int:  # PPO's _n_updates counts epochs, not minibatch steps
            if updates_per_rollout is None:
                return self.model._n_updates
            return self.rollouts * updates_per_rollout

        def _on_rollout_start(self) -> None:  # after the previous collection's updates
            window.after_update(self.updates_done(), self.model.num_timesteps)
            self.rollouts += 1

        def _on_step(self) -> bool:
            return True

        def _on_training_end(self) -> None:
            window.stop(self.updates_done(), self.model.num_timesteps)

    model.learn(total_timesteps=env_steps, callback=Timed())
    return window.measure()


RUNNERS: dict[str, Callable[[Row, int, torch.device], Measure | None]] = {
    "lightning": run_lightning,
    "lightning_k1": run_lightning_k1,
    "compile": run_compile,
    "compile_whole": run_compile_whole,
    "plain": run_plain,
    "sb3": run_sb3,
}


# -- --check: the plain loop does Trainer.fit's work ---------------------------------------------------


def check_updates(row: Row) -> int:
    """A short run for ``--check``: two PPO rollouts' updates; 20 updates after the off-policy warm-up."""
    module = build_module(row)
    per_collection = getattr(module, "training_steps_per_collection", 1)
    return 2 * per_collection if per_collection > 1 else 20


def weight_difference(row: Row, device: torch.device, updates: int | None = None) -> float:
    """The largest absolute difference of any state-dict entry (weights, normaliser statistics) between
    ``Trainer.fit`` and the plain loop after ``updates`` (default ``check_updates``) seeded updates; also
    checks that both took the same env steps. 0.0: the plain loop does the same work."""
    updates = check_updates(row) if updates is None else updates
    fitted = fit(build_module(row), updates, device)
    plain = plain_loop(build_module(row), updates, device)
    if _env_steps(fitted) != _env_steps(plain):
        raise AssertionError(f"{row.label}: env steps {_env_steps(fitted)} (fit) != {_env_steps(plain)} (plain)")
    expected, actual = fitted.state_dict(), plain.state_dict()
    if expected.keys() != actual.keys():
        raise AssertionError(f"{row.label}: state-dict keys differ")
    return max(
        (expected[name].double() - actual[name].double()).abs().max().item() if expected[name].numel() else 0.0
        for name in expected
    )


# -- the report ----------------------------------------------------------------------------------------


def _format(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "n/a"
    if value >= 1000:
        return f"{value / 1000:.1f}k"
    return f"{value:.{digits}f}"


def report(rows: list[Row], variants: list[str], results: dict, args: argparse.Namespace) -> str:
    def median(row: Row, variant: str, attribute: str) -> float | None:
        values = [getattr(measure, attribute) for measure in results[row.key].get(variant, []) if measure is not None]
        return statistics.median(values) if values else None

    def largest(row: Row, variant: str, attribute: str) -> float | None:
        values = [getattr(measure, attribute) for measure in results[row.key].get(variant, []) if measure is not None]
        return max(values) if values else None

    clock = "wall s (CUDA synced)" if args.device == "cuda" else "CPU s"
    headers = [VARIANT_LABELS.get(variant, variant) for variant in variants]
    command = " ".join(["python benchmarks/bench_engine.py", *sys.argv[1:]])
    versions = {"torch": torch.__version__, "lightning": L.__version__}
    if "sb3" in variants:
        import stable_baselines3

        versions["stable-baselines3"] = stable_baselines3.__version__
    gpu = f" ({torch.cuda.get_device_name()})" if args.device == "cuda" else ""
    lines = [
        "# Engine speed at identical settings",
        "",
        f"Command: `{command}`",
        machine_line(versions, args.load_before),
        f"Ours on {args.device}{gpu}, SB3 on the CPU. Steady state: the clock starts after the warm-up updates (PPO: "
        "the first rollout's; the others: a tenth of the run, after the random warm-up), so setup, the random "
        "warm-up and compilation are outside the rates; medians of the repeats. "
        "sb3: Stable-Baselines3 given the same settings on gymnasium's envs.",
        "",
        f"## env steps per {clock.split(' ')[0]} {clock.split(' ', 1)[1]}",
        "",
        f"| task | updates | {' | '.join(headers)} |",
        "|---|---:|" + "---:|" * len(variants),
    ]
    for row in rows:
        if row.module_class is None:
            continue
        cells = [_format(median(row, variant, "env_steps_per_second")) for variant in variants]
        lines.append(f"| {row.label} | {results[row.key]['updates']} | {' | '.join(cells)} |")
    lines += [
        "",
        f"## ms per update ({clock.split(' ')[0]} time; collection included)",
        "",
        f"| task | {' | '.join(headers)} | compile s |",
        "|---|" + "---:|" * (len(variants) + 1),
    ]
    for row in rows:
        cells = [_format(median(row, variant, "ms_per_update"), 3) for variant in variants]
        # The first repeat's: later ones in the same process compile from inductor's caches (same shapes).
        compile_s = largest(row, "compile", "compile_seconds") if "compile" in variants else None
        lines.append(f"| {row.label} | {' | '.join(cells)} | {_format(compile_s, 1)} |")
    lines += ["", "## Derived", ""]
    for row in rows:
        lightning, plain = median(row, "lightning", "ms_per_update"), median(row, "plain", "ms_per_update")
        compiled, sb3 = median(row, "compile", "ms_per_update"), median(row, "sb3", "ms_per_update")
        whole = median(row, "compile_whole", "ms_per_update")
        parts = []
        if lightning is not None and plain is not None:
            parts.append(f"Lightning's share (lightning vs plain) {100 * (lightning / plain - 1):+.0f}%")
        if sb3 is not None:
            named = (("lightning", lightning), ("compile=True", compiled), ("whole_update", whole), ("plain", plain))
            for name, value in named:
                if value is not None:
                    parts.append(f"{name} vs SB3 {sb3 / value:.2f}x")
        if row.key == "ppo_cartpole_4096" and lightning is not None:
            rate = median(row, "compile", "env_steps_per_second") or median(row, "lightning", "env_steps_per_second")
            parts.append(f"{rate:.3g} env steps/s end to end (issue 24's target: 1e7 on a GPU)")
        if parts:
            lines.append(f"- {row.label}: {'; '.join(parts)}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", nargs="+", default=list(DEFAULT_ROWS), choices=list(ROWS))
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--updates", type=int, default=None, help="updates per run for every row (default: per row)")
    parser.add_argument("--quick", action="store_true", help="tiny runs (the tests, gpu.sh's CPU path)")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--check", action="store_true", help="plain loop == Trainer.fit, weights after a short run")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/engine.md"))
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    args.load_before = os.getloadavg()[0]
    if args.repeats < 1:
        raise ValueError(f"--repeats must be >= 1, got {args.repeats}")
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    for name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    device = torch.device(args.device)
    rows = [ROWS[key] for key in args.rows]
    if args.check:
        failed = False
        for row in rows:
            if row.module_class is None:
                continue
            difference = weight_difference(row, device)
            failed |= difference != 0.0
            verdict = "equal" if difference == 0.0 else "DIFFERENT"
            print(f"check {row.label}: plain loop vs Trainer.fit weights {verdict} (max |diff| {difference:.3g})")
        sys.exit(1 if failed else 0)
    repeats = 1 if args.quick else args.repeats
    results: dict[str, dict[str, Any]] = {}
    for row in rows:
        updates = args.updates or (row.quick_updates if args.quick else row.updates)
        results[row.key] = {"updates": updates, **{variant: [] for variant in args.variants}}
    for repeat in range(repeats):
        for row in rows:
            updates = results[row.key]["updates"]
            for variant in args.variants:
                if row.module_class is None and variant in ("compile", "compile_whole", "sb3"):
                    measure = None
                else:
                    measure = RUNNERS[variant](row, updates, device)
                results[row.key][variant].append(measure)
                shown = "n/a" if measure is None else f"{measure.ms_per_update:.3f} ms per update"
                print(f"repeat {repeat + 1}: {row.label} {variant}: {shown}", flush=True)
    text = report(rows, args.variants, results, args)
    print(text)
    if not args.no_write:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)


if __name__ == "__main__":
    main()
