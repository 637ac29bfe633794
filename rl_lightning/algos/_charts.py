"""What every algorithm logs, and when: ``RLModule``'s ``log_metrics`` / ``log_charts`` / ``should_log``.

Per-step algorithms (DQN, SAC, TD3) log every ``Trainer(log_every_n_steps)`` updates, at that update (a training
step holds many); per-epoch ones (VPG, PPO: an epoch is a rollout and its updates) average each metric over the
epoch and write it once, at the epoch's last update. Every curve's x-axis is env steps.

The metrics are published as ``self.log`` would leave them (``publish``: the loggers, ``trainer.callback_metrics``,
``trainer.logged_metrics``, the progress bar's fields) without going through it: ``self.log`` costs ~1 ms a call
(Lightning moves its result metric to the value's device on every call), about a fifth of a PPO CartPole run's
time when it logged a dozen charts per rollout. Only the epoch's ``"step"`` still goes through ``self.log``: it
is the x-axis of what callbacks log at the epoch's end (``Evaluation``).
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import Tensor

#: The progress bar's fields (the same for every algorithm) and the charts they show.
_PROGRESS_BAR = (("env_steps", "charts/env_steps"), ("SPS", "charts/SPS"), ("return", "charts/episodic_return"))


class Charts:
    """The logging state of one module: the epoch's sums (per-epoch algorithms) and the last log's
    time and env steps (for ``charts/SPS``)."""

    def __init__(self) -> None:
        self.epoch_metrics: dict[str, tuple[Tensor | float, int]] = {}
        self.last_log: tuple[float, int] | None = None
        self.pending: dict[str, Tensor] = {}  # per-step algorithms: this update's metrics, written by flush
        self.progress: dict[str, float] = {}  # the progress bar's fields logged since the last flush

    def flush(self, module: Any) -> None:
        """Publish this update's metrics (per-step algorithms), at env steps."""
        if self.pending or self.progress:
            metrics = {**self.pending, "step": float(module.env_steps)} if self.pending else {}
            publish(module.trainer, metrics, self.progress)
            self.pending, self.progress = {}, {}

    def start(self, env_steps: int) -> None:
        self.last_log = (time.perf_counter(), env_steps)

    @staticmethod
    def should_log(module: Any) -> bool:
        if not module._attached:  # training_step called by hand (tests)
            return False
        if module.log_per_epoch:
            return True
        every = module.trainer.log_every_n_steps
        return every > 0 and (module.global_step + 1) % every == 0

    def log(self, module: Any, metrics: dict[str, Tensor | float], prog_bar: tuple[str, ...] = ()) -> None:
        if not module.log_per_epoch:
            # Lightning writes a training step's logs once, at its end, every log_every_n_steps *training steps*;
            # a training step holds many updates, so the update's metrics are published at the update they belong
            # to (``flush``).
            for name, value in metrics.items():
                self.pending[name] = _as_tensor(value)
                if name in prog_bar:
                    self.progress[name] = float(value)
            return
        for name, value in metrics.items():
            total, count = self.epoch_metrics.get(name, (0.0, 0))
            self.epoch_metrics[name] = (total + value, count + 1)

    def end_epoch(self, module: Any) -> None:
        means = {name: _as_tensor(total / count) for name, (total, count) in self.epoch_metrics.items()}
        self.epoch_metrics.clear()
        publish(module.trainer, {**means, "step": float(module.env_steps)} if means else {}, self.progress)
        self.progress = {}
        # The x-axis of everything written at the epoch's end (charts, evaluation): env steps.
        module.log("step", float(module.env_steps), on_step=False, on_epoch=True, reduce_fx="max", batch_size=1)

    def log_charts(self, module: Any) -> None:
        if module.source is None or not module._attached:  # training_step called by hand: nothing to log to
            return
        finished = module.source.episodes.pop()  # (return sum, length sum, episodes)
        if module.world_size > 1:
            finished = module.trainer.strategy.reduce(finished, reduce_op="sum")
        now, env_steps = time.perf_counter(), module.env_steps
        metrics: dict[str, Tensor | float] = {"charts/env_steps": float(env_steps)}
        if self.last_log is not None and now > self.last_log[0]:
            metrics["charts/SPS"] = (env_steps - self.last_log[1]) / (now - self.last_log[0])
        self.last_log = (now, env_steps)
        if finished.dim() == 2:  # num_seeds > 1: each seed's (3, num_seeds)
            metrics.update(_seed_episode_charts(finished, sorted(module._diverged_seeds)))
            if "charts/episodic_return" in metrics:  # seed_index="best"
                module._seed_scores["train"] = metrics["charts/episodic_return"].tolist()
        elif finished[2].item() > 0:  # a host sync, once per log
            metrics["charts/episodic_return"] = finished[0] / finished[2]
            metrics["charts/episodic_length"] = finished[1] / finished[2]
            if finished.numel() > 3:  # a multi-agent env's rows: each agent's mean return and the team's
                metrics.update(_agent_charts(finished, module.source.envs))
        if module._attached and module.trainer.optimizers:
            metrics["charts/learning_rate"] = module.trainer.optimizers[0].param_groups[0]["lr"]
        self.log(module, metrics)
        for name, key in _PROGRESS_BAR:
            if key in metrics:
                value = metrics.get(f"{key}_iqm", metrics[key])  # num_seeds > 1: the seeds' IQM
                self.progress[name] = float(value.nanmean() if isinstance(value, Tensor) else value)


def _agent_charts(finished: Tensor, envs: Any) -> dict[str, Tensor]:
    """A multi-agent env's episode charts from ``(return sum, length sum, episodes, each agent's return sum...)``:
    ``charts/team_return`` (the mean over the scenes' episodes of the agents' summed returns; ``episodic_return`` is
    the mean agent's) and ``charts/agent_returns/<agent>`` (each agent's mean return)."""
    agent_sums = finished[3:]
    scene_episodes = finished[2] / agent_sums.numel()  # every row of a scene ends its episode with the scene
    names = getattr(envs, "agent_names", None) or [f"agent_{index}" for index in range(agent_sums.numel())]
    charts = {"charts/team_return": agent_sums.sum() / scene_episodes}
    for name, total in zip(names, agent_sums.unbind(), strict=True):
        charts[f"charts/agent_returns/{name}"] = total / scene_episodes
    return charts


def _seed_episode_charts(finished: Tensor, diverged: list[int]) -> dict[str, Tensor | float]:
    """The episode charts of a ``num_seeds > 1`` run from each seed's ``(return sum, length sum, episodes)``
    columns: each seed's mean return and length (NaN for a seed without a finished episode; written per seed and as
    their mean by ``seed_metrics``), and the return's aggregates over the seeds that have one and have not diverged
    (``rl_lightning.statistics.seed_aggregates``: its IQM with a 95% bootstrap interval, the worst seed)."""
    from rl_lightning.statistics import seed_aggregates

    returns, lengths = finished[0] / finished[2], finished[1] / finished[2]  # NaN where no episode finished
    if not bool((finished[2] > 0).any()):
        return {}
    scores = [float("nan") if index in diverged else value for index, value in enumerate(returns.tolist())]
    return {
        "charts/episodic_return": returns,
        "charts/episodic_length": lengths,
        **seed_aggregates("charts/episodic_return", scores),
    }


def seed_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    """``metrics`` with each per-seed tensor ``(num_seeds,)`` (a ``num_seeds > 1`` run's) written as its mean over
    the seeds (NaN ones left out) under its name, and each seed's value under ``<group>_per_seed/<name>/seed_<i>``
    (``charts/episodic_return`` -> ``charts_per_seed/episodic_return/seed_3``: TensorBoard groups them)."""
    if not any(isinstance(value, Tensor) and value.dim() == 1 for value in metrics.values()):
        return metrics
    written: dict[str, Any] = {}
    for name, value in metrics.items():
        if not (isinstance(value, Tensor) and value.dim() == 1):
            written[name] = value
            continue
        written[name] = value.float().nanmean()
        group, _, rest = name.partition("/")
        for index, seed_value in enumerate(value.unbind()):
            written[f"{group}_per_seed/{rest or group}/seed_{index}"] = seed_value
    return written


def _as_tensor(value: Tensor | float) -> Tensor:
    """As ``self.log`` stores a value: a float becomes a float32 tensor."""
    return value if isinstance(value, Tensor) else torch.tensor(value, dtype=torch.float32)


def publish(trainer: Any, metrics: dict[str, Any], progress: dict[str, float] | None = None) -> None:
    """Leave ``metrics`` (tensors, ``"step"``: the x-axis) and the progress bar's fields ``progress`` where
    ``self.log`` would: written to every logger as Lightning writes a step's logs (scalars, then ``logger.save()``),
    in ``trainer.logged_metrics`` and ``trainer.callback_metrics`` (what ModelCheckpoint and EarlyStopping monitor),
    and in ``trainer.progress_bar_metrics``. Through Lightning's logger connector: the one place that reaches it;
    ``tests/algos/test_update_loop.py`` fails if Lightning renames what it uses."""
    connector = trainer._logger_connector  # Lightning 2.6: no public API writes logged metrics outside self.log
    metrics = seed_metrics(metrics)
    if metrics:
        connector._callback_metrics.update({name: _as_tensor(value) for name, value in metrics.items()})
        connector.log_metrics(metrics)  # the loggers (none: nothing written) and logged_metrics
        if not trainer.loggers:
            connector._logged_metrics.update(metrics)
    if progress:
        connector._progress_bar_metrics.update(progress)
