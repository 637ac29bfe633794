"""Greedy evaluation on a separate env instance, every N env steps and at the end of training (``Evaluation``), and
stopping once solved (``StopWhenSolved``); the episodes themselves are ``policy_evaluation.evaluate_policy``'s."""

from __future__ import annotations

import sys
import time
from typing import Any, ClassVar, NamedTuple

import lightning as L
import torch
from lightning.pytorch.callbacks.early_stopping import EarlyStopping, EarlyStoppingReason
from torch import Tensor
from torchmetrics import MeanMetric

from rl_lightning._checks import check_float, check_int, check_seed
from rl_lightning.callbacks.policy_evaluation import EvalResult, evaluate_policy
from rl_lightning.envs.base import VectorEnv
from rl_lightning.playing import PlayStopped
from rl_lightning.protocols import RLModuleProtocol, require
from rl_lightning.statistics import seed_aggregates

__all__ = ["Confirmation", "EvalResult", "Evaluation", "StopWhenSolved", "evaluate_policy"]


def _seed_modules(pl_module: Any) -> list[Any]:
    """The module's seeds (``num_seeds > 1``: each seed's module), or the module itself."""
    return pl_module.seed_modules() if hasattr(pl_module, "seed_modules") else [pl_module]


class Evaluation(L.Callback):
    """Evaluate the greedy policy (``pl_module.greedy_actor()``) every
    ``every_n_env_steps`` environment steps (checked at the end of each training epoch, first
    at the end of epoch 0) and once more when training ends.

    Logs ``eval/episodic_return`` (mean), ``eval/episodic_return_std`` and
    ``eval/episodic_length``, averaged over all processes with torchmetrics, so
    ``EarlyStopping(monitor="eval/episodic_return", stopping_threshold=475, mode="max")`` and
    ``ModelCheckpoint(monitor="eval/episodic_return", mode="max")`` work. Values are logged only
    when an evaluation ran (at the env step it ran at); between evaluations the monitored key keeps
    its last value in ``trainer.callback_metrics``. :class:`StopWhenSolved` (after it in the callbacks) stops
    the run once solved, confirmed on fresh episodes (:meth:`confirm`): the fixed start states can be overfit.

    The evaluation envs are built once (``pl_module.make_envs``, one copy per episode) and kept until the fit
    ends, each evaluation re-seeding them with ``seed``: the same start states as fresh envs, without building
    32 gymnasium (or MuJoCo) envs every time. An evaluation that takes longer than a few seconds says how far it
    got on stderr (rank 0), and one process's stop request (SIGTERM, Ctrl-C, SLURM's requeue signal) ends it
    within 64 steps, unlogged: the run then stops at its next step as it would have (under DDP the ranks finish
    the evaluation first, so that they stop at the same step).

    Args:
        every_n_env_steps: evaluation period in env steps.
        num_eval_episodes: episodes per evaluation (per process); None: sized to the env's cost, 32 for a native
            torch env (all stepped at once as tensors) and 10 for the others (a Python env, or a C++ one, per
            episode: SB3's and CleanRL's usual 10).
        seed: evaluation envs' seed (rank r: seed + r * num_eval_episodes).
        max_episode_steps: cap on an episode's length (None: the env's time limit, or 1,000 steps
            for an env without one; see :func:`evaluate_policy`).
    """

    #: ``num_eval_episodes=None``: for a native torch env, for the others.
    DEFAULT_EPISODES: ClassVar[dict[str, int]] = {"native": 32, "other": 10}
    #: Seconds an evaluation runs before it says how far it got (then every as many seconds).
    PROGRESS_EVERY_S = 5.0
    #: The fewest fresh episodes a confirmation plays by default (:meth:`confirm`).
    MIN_CONFIRM_EPISODES = 20
    #: Confirmation k plays with seed ``seed + (k + 1) * CONFIRM_SEED_STRIDE``: start states no evaluation had.
    CONFIRM_SEED_STRIDE = 1_000_000_007

    def __init__(
        self,
        every_n_env_steps: int = 50_000,
        num_eval_episodes: int | None = None,
        seed: int = 10_000,
        max_episode_steps: int | None = None,
    ):
        self.every_n_env_steps = check_int("every_n_env_steps", every_n_env_steps, 1)
        self.num_eval_episodes = (
            None if num_eval_episodes is None else check_int("num_eval_episodes", num_eval_episodes, 1)
        )
        self._envs: VectorEnv | None = None  # kept from one evaluation to the next
        self._envs_key: tuple[Any, ...] | None = None
        self.seed = check_seed("seed", seed)
        self.max_episode_steps = (
            None if max_episode_steps is None else check_int("max_episode_steps", max_episode_steps, 1)
        )
        self._mean_return = MeanMetric()
        self._mean_square_return = MeanMetric()
        self._mean_length = MeanMetric()
        self._confirmed_return = MeanMetric()
        self._confirmed_square_return = MeanMetric()
        self._next_eval_at = 0
        self._evaluated_at: int | None = None
        #: The latest evaluation, reduced over processes: {"eval/episodic_return": ..., ...}.
        self.last_metrics: dict[str, float] = {}
        #: Every evaluation as (env_steps, mean return).
        self.history: list[tuple[int, float]] = []
        #: With ``num_seeds > 1``: every evaluation as (env_steps, each seed's mean return).
        self.seed_history: list[tuple[int, list[float]]] = []
        #: Every confirmation on fresh episodes (:meth:`confirm`) as (env_steps, mean return).
        self.confirmations: list[tuple[int, float]] = []
        #: The latest confirmation's mean, standard deviation and episodes, over every process (None before one).
        self.last_confirmation: Confirmation | None = None

    def episodes(self, pl_module: L.LightningModule) -> int:
        """Episodes per evaluation: ``num_eval_episodes``, or where None sized to the module's env."""
        if self.num_eval_episodes is not None:
            return self.num_eval_episodes
        native = not getattr(pl_module, "_gymnasium_env", True) and getattr(pl_module, "_env_options", {}).get(
            "backend"
        ) in ("auto", "torch")
        return self.DEFAULT_EPISODES["native" if native else "other"]

    def _eval_envs(self, pl_module: L.LightningModule, num_episodes: int, seed: int) -> VectorEnv:
        """The kept evaluation envs, built again only for another module, device or size."""
        key = (id(pl_module), pl_module.device, num_episodes)
        if self._envs is None or self._envs_key != key:
            self._close_envs()
            self._envs, self._envs_key = pl_module.make_envs(num_episodes, seed), key
        return self._envs

    def _close_envs(self) -> None:
        if self._envs is not None:
            self._envs.close()
        self._envs, self._envs_key = None, None

    def evaluate(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, float]:
        """Run one evaluation now and return the reduced metrics (empty where a stop request ended it)."""
        num_episodes = self.episodes(pl_module)
        seed = self.seed + trainer.global_rank * num_episodes  # no two envs share a seed
        envs = self._eval_envs(pl_module, num_episodes, seed)
        # num_seeds > 1: every seed's policy on the same start states, then their mean, per seed and aggregates.
        seeds = [self._seed_metrics(trainer, module, envs, seed) for module in _seed_modules(pl_module)]
        if any(metrics is None for metrics in seeds):
            return {}
        self.last_metrics = {name: sum(m[name] for m in seeds) / len(seeds) for name in seeds[0]}
        mean = self.last_metrics["eval/episodic_return"]
        if len(seeds) > 1:
            returns = [metrics["eval/episodic_return"] for metrics in seeds]
            self.last_metrics.update(seed_aggregates("eval/episodic_return", returns))
            pl_module._seed_scores["eval"] = returns  # seed_index="best"
            self.seed_history.append((pl_module.env_steps, returns))
            self.last_metrics.update(
                {f"eval_per_seed/episodic_return/seed_{index}": value for index, value in enumerate(returns)}
            )
        self._evaluated_at = pl_module.env_steps
        self.history.append((self._evaluated_at, mean))
        return self.last_metrics

    def _seed_metrics(
        self, trainer: L.Trainer, pl_module: L.LightningModule, envs: VectorEnv, seed: int
    ) -> dict[str, float] | None:
        """One policy's evaluation: its mean return, their std and the mean length, all-reduced over processes."""
        result = self._play(trainer, pl_module, envs, seed, "evaluating")
        if result is None:
            return None
        mean = self._reduced_mean(self._mean_return, result.returns, pl_module)  # all-reduced under DDP
        variance = max(self._reduced_mean(self._mean_square_return, result.returns.square(), pl_module) - mean**2, 0.0)
        return {
            "eval/episodic_return": mean,
            "eval/episodic_return_std": variance**0.5,
            "eval/episodic_length": self._reduced_mean(self._mean_length, result.lengths, pl_module),
        }

    def confirm(
        self, trainer: L.Trainer, pl_module: L.LightningModule, num_episodes: int | None = None
    ) -> float | None:
        """Play the greedy policy on fresh episodes, start states no evaluation of the run has used (each
        confirmation its own seeds), and return their mean return, all-reduced over processes (None where a
        stop request ended it). A policy can fit the fixed start states every evaluation re-seeds to; a solved
        return must hold on episodes it never saw. Recorded in ``confirmations``; the mean's spread (for its
        standard error) in ``last_confirmation``.

        Args:
            num_episodes: fresh episodes per process; None: twice the evaluation's, at least 20.
        """
        if num_episodes is None:
            num_episodes = max(2 * self.episodes(pl_module), self.MIN_CONFIRM_EPISODES)
        check_int("num_episodes", num_episodes, 1)
        # Far from the evaluation's seeds (and from every other confirmation's), per process as there.
        seed = self.seed + self.CONFIRM_SEED_STRIDE * (len(self.confirmations) + 1) + trainer.global_rank * num_episodes
        envs = pl_module.make_envs(num_episodes, seed)
        try:
            result = self._play(trainer, pl_module, envs, seed, "confirming on fresh episodes")
        finally:
            envs.close()
        if result is None:
            return None
        mean = self._reduced_mean(self._confirmed_return, result.returns, pl_module)
        square = self._reduced_mean(self._confirmed_square_return, result.returns.square(), pl_module)
        std = max(square - mean**2, 0.0) ** 0.5
        self.last_confirmation = Confirmation(mean, std, num_episodes * trainer.world_size)
        self.confirmations.append((pl_module.env_steps, mean))
        return mean

    @property
    def evaluated_at(self) -> int | None:
        """The env step of this fit's latest evaluation (None before its first)."""
        return self._evaluated_at

    @staticmethod
    def _reduced_mean(metric: MeanMetric, values: Tensor, pl_module: L.LightningModule) -> float:
        """The mean of ``values`` over every process (torchmetrics' ``compute`` all-reduces under DDP)."""
        metric.to(pl_module.device)
        metric.reset()
        metric.update(values)
        return metric.compute().item()

    def _play(
        self, trainer: L.Trainer, pl_module: L.LightningModule, envs: VectorEnv, seed: int, doing: str
    ) -> EvalResult | None:
        """One episode per copy of ``envs`` (re-seeded with ``seed``) with the greedy policy, saying how far it
        got when it takes a while; None where a stop request ended it."""
        was_training = pl_module.training
        pl_module.eval()
        num_episodes = envs.num_envs
        started = said = time.monotonic()

        def every_64_steps(played: int) -> bool:
            nonlocal said
            if trainer.is_global_zero and time.monotonic() - said >= self.PROGRESS_EVERY_S:
                said = time.monotonic()
                print(f"{doing}: {played}/{num_episodes} episodes, {said - started:.0f} s", file=sys.stderr, flush=True)
            return trainer.world_size == 1 and trainer.received_sigterm  # under DDP: finish, stop together

        try:
            return evaluate_policy(
                pl_module, envs, seed=seed, max_episode_steps=self.max_episode_steps, every_64_steps=every_64_steps
            )
        except PlayStopped:
            return None
        finally:
            pl_module.train(was_training)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        require(pl_module, RLModuleProtocol, "Evaluation")
        # A resumed run: the last result (from the checkpoint) is what EarlyStopping and
        # ModelCheckpoint see until the next evaluation, as in the run before the interruption.
        for name, value in self.last_metrics.items():
            trainer.callback_metrics.setdefault(name, torch.tensor(value))

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if pl_module.env_steps < self._next_eval_at:
            return  # logged only when an evaluation ran: no staircase of stale values in the plots
        if not self.evaluate(trainer, pl_module):
            return  # stopped: nothing to log
        self._next_eval_at = pl_module.env_steps + self.every_n_env_steps
        for name, value in self.last_metrics.items():
            pl_module.log(
                name, value, on_step=False, on_epoch=True, prog_bar=name == "eval/episodic_return", batch_size=1
            )

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._evaluated_at == pl_module.env_steps or (trainer.world_size == 1 and trainer.received_sigterm):
            return  # evaluated here already, or asked to stop: the stop is not kept waiting
        metrics = self.evaluate(trainer, pl_module)
        if not metrics:
            return
        for logger in trainer.loggers:  # at the env step it ran at, like every RL curve
            logger.log_metrics(metrics, step=pl_module.env_steps)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._close_envs()

    def state_dict(self) -> dict:
        return {
            "next_eval_at": self._next_eval_at,
            "history": self.history,
            "last_metrics": self.last_metrics,
            "confirmations": self.confirmations,
            "seed_history": self.seed_history,
        }

    def load_state_dict(self, state_dict: dict) -> None:
        self._next_eval_at = state_dict["next_eval_at"]
        self.history = list(state_dict["history"])
        self.last_metrics = dict(state_dict["last_metrics"])
        self.confirmations = list(state_dict.get("confirmations", []))  # none in a checkpoint from before them
        self.seed_history = list(state_dict.get("seed_history", []))


class Confirmation(NamedTuple):
    """A confirmation on fresh episodes (:meth:`Evaluation.confirm`), over every process."""

    mean: float
    std: float  # of the episodes' returns
    num_episodes: int

    @property
    def standard_error(self) -> float:
        """The standard error of ``mean``."""
        return self.std / self.num_episodes**0.5


class StopWhenSolved(EarlyStopping):
    """Stop training once the greedy policy solves the env: an evaluation's mean return
    (``eval/episodic_return``, on :class:`Evaluation`'s fixed start states) reaches ``stopping_threshold``
    (equal counts: Lightning's ``EarlyStopping`` needs more), and so does the mean return on fresh episodes
    (:meth:`Evaluation.confirm`, logged as ``eval/confirmed_return``) less ``num_standard_errors`` of its
    standard errors (logged as ``eval/confirmed_lower_bound``): a policy whose true mean sits at the threshold
    passes a mean-only check half the time, and then scores below it on the next episodes. A policy that reaches
    the threshold only on the fixed start states trains on; so does one whose last evaluation reached it at the
    budget's end, unless confirmed there too. ``solved_at`` is the env step it was declared solved at (None: not
    solved). With ``num_seeds > 1`` the run is solved when every seed is: the worst seed's evaluation
    (``eval/episodic_return_min``) reaches the threshold, then each seed is confirmed and the worst bound counts.

    List it after the run's :class:`Evaluation`; it is an ``EarlyStopping`` (``stopping_reason``,
    ``stopping_threshold``, checkpointed state) that stops on the solved return alone.

    Args:
        stopping_threshold: the mean return that solves the env (CartPole-v1: 475).
        num_confirm_episodes: fresh episodes per process of each confirmation; None: twice the evaluation's,
            at least 20 (:meth:`Evaluation.confirm`).
        num_standard_errors: how many standard errors of the confirmation's mean must lie above the threshold
            (2: a policy whose true mean is at the threshold passes about 2% of its confirmations; 0: the mean
            alone). An env whose returns do not vary (CartPole at 500) needs no more than its mean.
        holds_on_episodes: where set (m), the bound is for the mean of a later check of m fresh episodes (a user
            playing 20 episodes of the trained policy), not for the policy's true mean: the standard error is
            ``std * sqrt(1/n + 1/m)`` for n confirmation episodes. Pendulum's returns spread by ~100 between start
            states: a policy whose true mean is -185 scores below -200 on one in four checks of 20 episodes.
    """

    def __init__(
        self,
        stopping_threshold: float,
        num_confirm_episodes: int | None = None,
        num_standard_errors: float = 2.0,
        holds_on_episodes: int | None = None,
    ):
        super().__init__(
            monitor="eval/episodic_return",
            mode="max",
            stopping_threshold=check_float("stopping_threshold", stopping_threshold),
            patience=2**62,  # never for lack of improvement
            check_on_train_epoch_end=True,
        )
        self.num_confirm_episodes = (
            None if num_confirm_episodes is None else check_int("num_confirm_episodes", num_confirm_episodes, 1)
        )
        self.num_standard_errors = check_float("num_standard_errors", num_standard_errors, low=0.0)
        self.holds_on_episodes = (
            None if holds_on_episodes is None else check_int("holds_on_episodes", holds_on_episodes, 1)
        )
        self.solved_at: int | None = None
        self._checked_at: int | None = None  # the env step of the evaluation last checked (one check each)

    def _evaluation(self, trainer: L.Trainer) -> Evaluation:
        """The run's Evaluation, listed before this callback (its final evaluation runs first at the end)."""
        position = trainer.callbacks.index(self)
        for index, callback in enumerate(trainer.callbacks):
            if isinstance(callback, Evaluation):
                if index > position:
                    raise ValueError("StopWhenSolved must come after the run's Evaluation in Trainer(callbacks=[...])")
                return callback
        raise ValueError("StopWhenSolved needs an Evaluation callback in Trainer(callbacks=[...]) (what it checks)")

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._evaluation(trainer)  # refused at the start, not at the first evaluation

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._check(trainer, pl_module) is not None:
            trainer.should_stop = True
            self.stopped_epoch = trainer.current_epoch

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Nothing: the check follows the evaluations, at epoch ends (EarlyStopping's would run here)."""

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.solved_at is None and not (trainer.world_size == 1 and trainer.received_sigterm):
            self._check(trainer, pl_module, at_end=True)  # Evaluation's final evaluation, when it reached the bar

    def _check(self, trainer: L.Trainer, pl_module: L.LightningModule, at_end: bool = False) -> float | None:
        """Check a new evaluation: where it reached the threshold, confirm it on fresh episodes; the confirmed
        return where that reached it too (the run is solved), else None. Every process decides alike (the
        returns are reduced over them), so under DDP they confirm and stop together."""
        evaluation = self._evaluation(trainer)
        evaluated_at = evaluation.evaluated_at
        if evaluated_at is None or evaluated_at != pl_module.env_steps or evaluated_at == self._checked_at:
            return None  # no evaluation since the last check
        self._checked_at = evaluated_at
        threshold = float(self.stopping_threshold)
        # num_seeds > 1: the worst seed's evaluation, then every seed confirmed (the worst bound counts)
        metrics = evaluation.last_metrics
        monitored = "eval/episodic_return_min" if "eval/episodic_return_min" in metrics else "eval/episodic_return"
        mean = metrics[monitored]
        if not mean >= threshold:
            return None
        bounds = []
        for module in pl_module.seed_modules() if hasattr(pl_module, "seed_modules") else [pl_module]:
            confirmed = evaluation.confirm(trainer, module, self.num_confirm_episodes)
            if confirmed is None:
                return None  # a stop request ended it
            confirmation = evaluation.last_confirmation
            error = confirmation.standard_error
            if self.holds_on_episodes is not None:  # the error of a later m-episode mean less this one's
                error = confirmation.std * (1 / confirmation.num_episodes + 1 / self.holds_on_episodes) ** 0.5
            bounds.append((confirmed - self.num_standard_errors * error, confirmed, error, confirmation))
        lower, confirmed, error, confirmation = min(bounds, key=lambda bound: bound[0])
        metrics = {"eval/confirmed_return": confirmed, "eval/confirmed_lower_bound": lower}
        if at_end:
            for logger in trainer.loggers:  # at the env step it ran at, like the final evaluation
                logger.log_metrics(metrics, step=pl_module.env_steps)
        else:
            for name, value in metrics.items():
                pl_module.log(name, value, on_step=False, on_epoch=True, batch_size=1)
        if not lower >= threshold:
            return None
        self.solved_at = pl_module.env_steps
        self.stopping_reason = EarlyStoppingReason.STOPPING_THRESHOLD
        later = "" if self.holds_on_episodes is None else f" for a later {self.holds_on_episodes}-episode mean"
        spread = (
            f" - {self.num_standard_errors:g} x {error:.3g} (standard error{later}) = {lower:g}"
            if confirmation.std > 0 and self.num_standard_errors > 0
            else ""
        )
        self.stopping_reason_message = (
            f"solved: {monitored} {mean:g} and eval/confirmed_return {confirmed:g}{spread} "
            f"({confirmation.num_episodes} fresh episodes) >= {threshold:g} at env step {self.solved_at:,}"
        )
        return confirmed

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "solved_at": self.solved_at, "checked_at": self._checked_at}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self.solved_at = state_dict.get("solved_at")
        self._checked_at = state_dict.get("checked_at")
