"""Everything a short fit leaves behind, as one comparable record: the update loop's tests run an algorithm
twice (one update per training step and several; the loop before and after a change) and assert the two
records are equal bit for bit.

    python tests/loop_fingerprint.py OUT.pt [--updates_per_step K]

writes the records of every case of :data:`CASES` (a reference to compare a later version of the loop with).
"""

from __future__ import annotations

import argparse
import inspect
from typing import Any

import lightning as L
import torch
from lightning.pytorch.loggers import Logger

from rl_lightning import DQNModule, PPOModule, SACModule, TD3Module, VPGModule
from rl_lightning.callbacks import LinearLRDecay

#: name -> (module class, hyper-parameters, max_steps): each exercises the loop's edge cases: several rollouts
#: or collections per epoch, a run that ends inside one, target_kl's break, delayed updates, LR decay.
CASES: dict[str, tuple[type, dict[str, Any], int]] = {
    "vpg": (
        VPGModule,
        dict(
            num_envs=8,
            num_steps_per_rollout=20,
            importance_weighting=True,
            rollout_use_count=2,
            num_batches_per_rollout=2,
            rollouts_per_epoch=2,
            full_reset=False,
            anneal_lr=True,
            seed=3,
        ),
        22,
    ),
    "ppo": (
        PPOModule,
        dict(num_envs=4, num_steps_per_rollout=16, update_epochs=3, num_minibatches=2, target_kl=0.0005, seed=3),
        40,
    ),
    "ppo_pendulum": (
        PPOModule,
        dict(
            env_id="Pendulum-v1",
            num_envs=4,
            num_steps_per_rollout=16,
            update_epochs=2,
            num_minibatches=2,
            normalize_obs=True,
            normalize_rewards=True,
            seed=3,
        ),
        21,
    ),
    "ppo_lstm": (
        PPOModule,
        dict(num_envs=4, num_steps_per_rollout=8, update_epochs=2, num_minibatches=2, recurrent="lstm", seed=3),
        12,
    ),
    "dqn": (
        DQNModule,
        dict(
            num_envs=2,
            buffer_size=400,
            batch_size=16,
            learning_starts=40,
            train_freq=2,
            gradient_steps=3,
            steps_per_epoch=8,
            target_update_env_steps=20,
            n_step=2,
            hidden_sizes=(16,),
            seed=3,
        ),
        45,
    ),
    "sac": (
        SACModule,
        dict(
            num_envs=2,
            buffer_size=400,
            batch_size=16,
            learning_starts=40,
            gradient_steps=2,
            steps_per_epoch=8,
            hidden_sizes=(16, 16),
            seed=3,
        ),
        37,
    ),
    "td3": (
        TD3Module,
        dict(
            num_envs=2,
            buffer_size=400,
            batch_size=16,
            learning_starts=40,
            train_freq=3,
            steps_per_epoch=8,
            policy_delay=2,
            hidden_sizes=(16, 16),
            seed=3,
        ),
        37,
    ),
}


class RecordingLogger(Logger):
    """Every ``log_metrics`` call, in order, as ``(step, {name: float})``."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[tuple[int | None, dict[str, float]]] = []

    @property
    def name(self) -> str:
        return "recording"

    @property
    def version(self) -> int:
        return 0

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        # charts/SPS is wall-clock: its presence is compared, not its value.
        self.records.append((step, {k: (0.0 if k == "charts/SPS" else float(v)) for k, v in sorted(metrics.items())}))

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass


def fingerprint(name: str, callbacks: tuple[L.Callback, ...] = (), **overrides: Any) -> dict[str, Any]:
    """Fit case ``name`` (``overrides`` replace its hyper-parameters, ``callbacks`` join the Trainer's) and return
    its record: weights, optimizer state, env steps, global step, epoch, every logged metric, every generator's
    state."""
    cls, hparams, max_steps = CASES[name]
    module = cls(**{**hparams, **overrides})
    logger = RecordingLogger()
    trainer = L.Trainer(
        max_steps=max_steps,
        logger=logger,
        log_every_n_steps=4,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[
            *callbacks,
            *([] if "anneal_lr" in inspect.signature(cls).parameters else [LinearLRDecay(1e-4, 0.5)]),
        ],
    )
    trainer.fit(module)
    source = module.source
    generators = {"source": source.generator.get_state()}
    buffer = getattr(source, "buffer", None)
    if buffer is not None:
        generators["replay"] = buffer.generator.get_state()
    if getattr(module, "_update_generator", None) is not None:
        generators["updates"] = module._update_generator.get_state()
    shuffle = getattr(getattr(source, "collection", None), "generator", None)
    if shuffle is not None:
        generators["shuffle"] = shuffle.get_state()
    optimizer = trainer.optimizers[0].state_dict()
    return {
        "state_dict": {k: v.clone() for k, v in module.state_dict().items()},
        "optimizer": optimizer,
        "env_steps": module.env_steps,
        "global_step": trainer.global_step,
        "epoch": trainer.current_epoch,
        "metrics": logger.records,
        "generators": generators,
        "obs": source.obs.clone() if isinstance(source.obs, torch.Tensor) else None,
    }


def differences(a: Any, b: Any, where: str = "") -> list[str]:
    """Where two records differ (tensors bit for bit, floats exactly), as readable paths."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        same = a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)
        return [] if same else [f"{where}: tensors differ"]
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{where}: keys {sorted(set(a) ^ set(b), key=str)}"]
        return [d for key in a for d in differences(a[key], b[key], f"{where}.{key}")]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return [f"{where}: length {len(a)} != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {a!r} != {b!r}"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--updates_per_step", type=int)
    parser.add_argument("--cases", nargs="*", default=list(CASES))
    args = parser.parse_args()
    torch.set_num_threads(1)
    records = {}
    for name in args.cases:
        overrides = {} if args.updates_per_step is None else {"updates_per_step": args.updates_per_step}
        if args.updates_per_step is not None and "updates_per_step" not in inspect.signature(CASES[name][0]).parameters:
            overrides = {}
        records[name] = fingerprint(name, **overrides)
        print(name, records[name]["global_step"], records[name]["env_steps"], len(records[name]["metrics"]))
    torch.save(records, args.out)


if __name__ == "__main__":
    main()
