"""One progress bar over the whole run, in env steps, with an ETA and the same fields for every
algorithm; plain status lines, not a redrawn bar, when stdout is not a terminal."""

from __future__ import annotations

import math
import sys
import time
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm

from rl_lightning.callbacks.schedule import planned_env_steps

#: Fields shown, in order: (label, key in the progress-bar or callback metrics).
_FIELDS = (("SPS", "SPS"), ("return", "return"), ("eval", "eval/episodic_return"))


class RLProgressBar(TQDMProgressBar):
    """A single bar from 0 to the run's planned env steps (``max_steps`` updates plus any random
    warm-up), not one bar per epoch of ``1/1`` or ``250/250``: env steps so far, the ETA, SPS, the
    episodic return of the latest episodes and the latest greedy evaluation.

    When stdout is not a terminal (a log file, CI) the bar is not redrawn; a status line is printed
    every ``print_every_seconds`` instead, and one when training ends. ``RLModule`` puts this bar in
    place of Lightning's default one; pass your own progress bar to the Trainer to keep yours.

    Args:
        refresh_rate: redraw the bar every this many training steps.
        print_every_seconds: period of the status lines when stdout is not a terminal.
    """

    def __init__(self, refresh_rate: int = 1, print_every_seconds: float = 10.0):
        super().__init__(refresh_rate=refresh_rate)
        self.print_every_seconds = print_every_seconds
        self._total: float | None = None
        self._last_print = -math.inf
        self._interactive = sys.stdout.isatty()

    def init_sanity_tqdm(self) -> Tqdm:
        return Tqdm(disable=True)  # an RL module's validation is a greedy evaluation, not run in fit

    # Off a terminal no bar at all (a bar disabled after it was made has already printed its first frame).
    def init_validation_tqdm(self) -> Tqdm:
        return super().init_validation_tqdm() if self._interactive else Tqdm(disable=True)

    def init_test_tqdm(self) -> Tqdm:
        return super().init_test_tqdm() if self._interactive else Tqdm(disable=True)

    def on_train_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        try:
            self._total = planned_env_steps(trainer, pl_module, "RLProgressBar")
        except ValueError:  # an unbounded run: no total, no ETA
            self._total = None
        self.train_progress_bar = Tqdm(
            desc="Training",
            total=self._total,
            initial=pl_module.env_steps,
            unit=" env steps",
            unit_scale=True,
            position=2 * self.process_position,
            disable=self.is_disabled or not self._interactive,
            leave=True,
            dynamic_ncols=True,
            file=sys.stdout,
            smoothing=0,
        )
        self._start = time.monotonic()
        self._start_env_steps = pl_module.env_steps

    def on_train_epoch_start(self, trainer: L.Trainer, *_: Any) -> None:
        pass  # one bar for the whole run: nothing to reset

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        # A training step may hold many updates: refresh when global_step passed a multiple of refresh_rate.
        period = trainer.global_step // self.refresh_rate
        if period != getattr(self, "_refreshed_period", None):
            self._refreshed_period = period
            self._update(trainer, pl_module)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        self._update(trainer, pl_module)

    def on_train_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        self._update(trainer, pl_module, force_print=True)
        self.train_progress_bar.close()

    def fields(self, trainer: L.Trainer) -> dict[str, str]:
        """The status fields from the latest logged values."""
        metrics = {**trainer.callback_metrics, **trainer.progress_bar_metrics}
        shown = {}
        for label, key in _FIELDS:
            if key in metrics:
                value = float(metrics[key])
                shown[label] = f"{value:,.0f}" if label == "SPS" else f"{value:.1f}"
        return shown

    def _update(self, trainer: L.Trainer, pl_module: Any, force_print: bool = False) -> None:
        env_steps = pl_module.env_steps
        fields = self.fields(trainer)
        bar = self.train_progress_bar
        if not bar.disable:
            bar.n = env_steps
            bar.set_postfix(fields, refresh=False)
            bar.refresh()
            return
        now = time.monotonic()
        if self.is_disabled or not (force_print or now - self._last_print >= self.print_every_seconds):
            return
        self._last_print = now
        print(self.status_line(env_steps, now - self._start, fields), flush=True)

    def status_line(self, env_steps: int, seconds: float, fields: dict[str, str]) -> str:
        """``env steps 12,288/102,400 (12%), 1.4 s, ETA 9.9 s, SPS 8,777, return 163.2, eval 231.4``."""
        parts = [f"env steps {env_steps:,}"]
        if self._total:
            parts[0] += f"/{self._total:,.0f} ({env_steps / self._total:.0%})"
        parts.append(f"{seconds:.1f} s")
        done = env_steps - self._start_env_steps
        if self._total and done > 0:
            parts.append(f"ETA {seconds / done * max(self._total - env_steps, 0):.1f} s")
        parts += [f"{label} {value}" for label, value in fields.items()]
        return ", ".join(parts)
