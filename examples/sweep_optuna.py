"""A hyper-parameter sweep of VPGModule on CartPole-v1 with Optuna (TPE sampler, median pruning).

    pip install -e ".[sweep]"
    python examples/sweep_optuna.py --n_trials 20 [--timeout 300] [--seed 1] [--storage sqlite:///sweep.db]

Searched: ``lr`` log-uniform in [1e-4, 1e-1], ``num_envs`` in {8, 16, 32, 64}, ``gamma`` in
[0.9, 0.999], ``normalize_returns`` in {True, False} (the rest: VPGModule's defaults, 500 steps
per env per rollout, training seed ``--seed``).

Each trial trains for at most ``--budget_env_steps`` (320,000) env steps and evaluates the greedy
policy (``rl_lightning.callbacks.evaluate_policy``, 32 episodes, the value ``Evaluation`` logs as
``eval/episodic_return``) at every multiple of 32,000 env steps: one rollout of the largest
``num_envs``, so every trial is evaluated at the same env steps and the pruner compares like with
like. Each evaluation is reported to the trial (step = env steps); ``MedianPruner`` stops a trial
whose best return so far is below the median of the finished trials at that step (from the 5th
finished trial and the second evaluation on). A trial stops once it reaches 475 (solved).

Objective (maximised): the mean greedy return over the 10 evaluation points of the budget, a
solved trial keeping its last return for the points it skipped: the area under the evaluation
curve, in [0, 500]. It rewards solving early, not only solving: the defaults (lr 2e-2, 32 envs,
gamma 0.99, normalize_returns True) solve in 6-14 rollouts (96,000-224,000 env steps over training
seeds 1-4) and score 313-426.

Result of ``python examples/sweep_optuna.py --n_trials 20`` on the 2-core dev machine (one torch
thread, shared with other jobs): 20 trials in 0.9 min (54 s; 10 complete, 10 pruned at 64,000 env
steps; a rerun gives the same trials). Best: trial 14, value 500.0 (solved at the first
evaluation, 32,000 env steps) with lr 0.0168, num_envs 8, gamma 0.978, normalize_returns False.
lr and gamma land near the defaults; num_envs does not: counted in env steps, 8 envs (8 updates
per 32,000 env steps) learn faster than 32 (one update per 16,000). Checked over training seeds
1-4: the defaults with 8 envs instead of 32 solve in 32,000-64,000 env steps (objective 463-500),
the best trial's setting in 32,000-96,000 (464-500).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time
import warnings
from typing import NamedTuple

import lightning as L
import optuna
import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException
from optuna.exceptions import StorageInternalError
from sqlalchemy.exc import SQLAlchemyError

from rl_lightning import VPGModule
from rl_lightning.callbacks import evaluate_policy

NUM_ENVS_CHOICES = (8, 16, 32, 64)


class SweepSettings(NamedTuple):
    """What every trial shares (the budget and the evaluation), not searched."""

    #: env steps per env in one rollout.
    num_steps_per_rollout: int = 500
    #: the most env steps a trial trains for.
    budget_env_steps: int = 320_000
    #: greedy evaluation episodes at each evaluation point.
    num_eval_episodes: int = 32
    #: the greedy return that stops a trial (solved).
    solved_return: float = 475.0
    #: seeds the training of every trial (and the sampler): trials differ only in hyper-parameters.
    seed: int = 1

    @property
    def eval_every_n_env_steps(self) -> int:
        """One rollout of the largest ``num_envs``: a multiple of every trial's rollout."""
        return max(NUM_ENVS_CHOICES) * self.num_steps_per_rollout

    @property
    def eval_points(self) -> list[int]:
        """The env steps at which every trial is evaluated (the last one: the budget)."""
        every = self.eval_every_n_env_steps
        return [every * index for index in range(1, self.budget_env_steps // every + 1)]


DEFAULT_SETTINGS = SweepSettings()


class ReportToTrial(L.Callback):
    """Evaluate the greedy policy at every multiple of ``every_n_env_steps``, report the return to
    ``trial`` (step = env steps), and stop training when solved or when the trial should be pruned.

    Optuna-integration's ``PyTorchLightningPruningCallback`` reports in ``on_validation_end`` with
    the epoch as step; our modules have no validation loop and their epochs are rollouts of
    different sizes, so this callback reports at the end of a training epoch, in env steps.
    """

    def __init__(self, trial: optuna.Trial, every_n_env_steps: int, num_eval_episodes: int, solved_return: float):
        self.trial = trial
        self.every_n_env_steps = every_n_env_steps
        self.num_eval_episodes = num_eval_episodes
        self.solved_return = solved_return
        #: Every evaluation as (env_steps, mean greedy return).
        self.history: list[tuple[int, float]] = []
        self.pruned = False
        self.solved = False

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: VPGModule) -> None:
        env_steps = pl_module.env_steps
        if env_steps < self.every_n_env_steps * (len(self.history) + 1):
            return
        pl_module.eval()
        result = evaluate_policy(
            lambda obs: pl_module.act(obs, greedy=True),
            pl_module.make_envs(self.num_eval_episodes, seed=10_000),  # Evaluation's default seed
            seed=10_000,
        )
        pl_module.train()
        mean_return = result.returns.mean().item()
        pl_module.log("eval/episodic_return", mean_return, on_step=False, on_epoch=True, prog_bar=True)
        self.history.append((env_steps, mean_return))
        self.trial.report(mean_return, step=env_steps)
        if mean_return >= self.solved_return:
            self.solved = trainer.should_stop = True
        elif self.trial.should_prune():
            self.pruned = trainer.should_stop = True


def suggest_hyperparameters(trial: optuna.Trial) -> dict:
    """The searched VPGModule hyper-parameters."""
    return {
        "lr": trial.suggest_float("lr", 1e-4, 1e-1, log=True),
        "num_envs": trial.suggest_categorical("num_envs", NUM_ENVS_CHOICES),
        "gamma": trial.suggest_float("gamma", 0.9, 0.999),
        "normalize_returns": trial.suggest_categorical("normalize_returns", (True, False)),
    }


def objective(trial: optuna.Trial, settings: SweepSettings = DEFAULT_SETTINGS) -> float:
    """Train one VPGModule and return the mean greedy return over ``settings.eval_points``."""
    if not settings.eval_points:
        raise ValueError(
            f"budget_env_steps ({settings.budget_env_steps}) must reach the first evaluation point "
            f"({settings.eval_every_n_env_steps} env steps)"
        )
    hyperparameters = suggest_hyperparameters(trial)
    module = VPGModule(num_steps_per_rollout=settings.num_steps_per_rollout, seed=settings.seed, **hyperparameters)
    rollout_env_steps = hyperparameters["num_envs"] * settings.num_steps_per_rollout
    report = ReportToTrial(trial, settings.eval_every_n_env_steps, settings.num_eval_episodes, settings.solved_return)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=settings.eval_points[-1] // rollout_env_steps,  # one update per rollout
        callbacks=[report],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    start = time.perf_counter()
    trainer.fit(module)
    trial.set_user_attr("seconds", round(time.perf_counter() - start, 1))
    trial.set_user_attr("env_steps", module.env_steps)
    if report.pruned:
        raise optuna.TrialPruned(f"pruned at {module.env_steps} env steps")
    if report.solved:
        trial.set_user_attr("env_steps_to_solve", module.env_steps)
    # A solved trial keeps its last return at the points it skipped (reported too, so the pruner
    # compares later evaluations of slower trials with it).
    returns = [mean_return for _, mean_return in report.history]
    for env_steps in settings.eval_points[len(returns) :]:
        trial.report(returns[-1], step=env_steps)
        returns.append(returns[-1])
    return sum(returns) / len(returns)


def make_study(
    settings: SweepSettings = DEFAULT_SETTINGS, storage: str | None = None, study_name: str = "vpg_cartpole"
) -> optuna.Study:
    """A maximising study with a TPE sampler seeded with ``settings.seed`` and a median pruner
    that waits for 5 finished trials and for the second evaluation point."""
    return optuna.create_study(
        study_name=study_name,
        storage=storage,
        load_if_exists=storage is not None,
        direction="maximize",
        sampler=optuna.samplers.TPESampler(seed=settings.seed),
        pruner=optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=2 * settings.eval_every_n_env_steps),
    )


def _raise_sigterm(signum: int, frame: object) -> None:
    raise SIGTERMException


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n_trials", type=int, default=20, help="trials to run (default: 20)")
    parser.add_argument("--timeout", type=float, default=None, help="stop starting trials after SECONDS")
    parser.add_argument("--seed", type=int, default=1, help="seeds the sampler and every trial's training")
    parser.add_argument("--storage", default=None, help="e.g. sqlite:///sweep.db to keep (and resume) the study")
    parser.add_argument("--study_name", default="vpg_cartpole", help="the study's name in --storage")
    parser.add_argument("--budget_env_steps", type=int, default=320_000, help="env steps per trial at most")
    parser.add_argument("--num_threads", type=int, default=1, help="torch CPU threads (default: 1)")
    args = parser.parse_args(argv)
    for name in ("n_trials", "budget_env_steps", "num_threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.timeout is not None and not args.timeout > 0:
        parser.error(f"--timeout must be a positive number of seconds, got {args.timeout}")
    settings = SweepSettings(budget_env_steps=args.budget_env_steps, seed=args.seed)
    if not settings.eval_points:
        parser.error(
            f"--budget_env_steps ({args.budget_env_steps:,}) must reach the first evaluation point "
            f"({settings.eval_every_n_env_steps:,} env steps): a trial needs at least one evaluation"
        )
    torch.set_num_threads(args.num_threads)
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)  # no per-trial Trainer banner
    warnings.filterwarnings("ignore", message=".*treespec, LeafSpec.*")  # Lightning's own, once per trial
    try:
        study = make_study(settings, args.storage, args.study_name)
    except (StorageInternalError, SQLAlchemyError, ValueError) as error:
        parser.error(f"--storage {args.storage}: cannot open or write the study there: {_first_line(error)}")
    start = time.perf_counter()
    # A SIGTERM between trials (or before the first fit) stops the sweep as one inside a fit does: with the
    # same message and exit status (Lightning calls this handler too, after its own, during a fit).
    signal.signal(signal.SIGTERM, _raise_sigterm)
    try:
        print(f"study {args.study_name!r}: {args.n_trials} trials", file=sys.stderr, flush=True)
        study.optimize(lambda trial: objective(trial, settings), n_trials=args.n_trials, timeout=args.timeout)
    except (SIGTERMException, KeyboardInterrupt) as stop:
        # Lightning stops the running trial's fit at a SIGTERM with a SystemExit of code 0: not a success.
        name = "Ctrl-C" if isinstance(stop, KeyboardInterrupt) else "SIGTERM"
        kept = f"kept in {args.storage}: rerun the same command to continue" if args.storage else "lost (no --storage)"
        finished = sum(trial.state.is_finished() for trial in study.trials)
        print(f"stopped by {name} after {finished} finished trials, {kept}", file=sys.stderr)
        sys.exit(130 if isinstance(stop, KeyboardInterrupt) else 143)
    minutes = (time.perf_counter() - start) / 60
    states = [trial.state.name for trial in study.trials]
    counts = f"{states.count('COMPLETE')} complete, {states.count('PRUNED')} pruned"
    print(f"{len(states)} trials in {minutes:.1f} min: {counts}")
    if not any(trial.state.name == "COMPLETE" for trial in study.trials):
        print("no trial completed (all pruned or failed): no best trial", file=sys.stderr)
        sys.exit(1)
    best = study.best_trial
    solved = best.user_attrs.get("env_steps_to_solve")
    print(f"best trial {best.number}: value {best.value:.1f}, params {best.params}")
    print(f"  solved at {solved:,} env steps" if solved else "  not solved within the budget")


def _first_line(error: BaseException) -> str:
    """The error's message without SQLAlchemy's background link and statement lines (its cause's, for
    Optuna's wrapper of it)."""
    cause = error.__cause__ if isinstance(error, StorageInternalError) and error.__cause__ else error
    return str(cause).splitlines()[0] if str(cause) else type(cause).__name__


if __name__ == "__main__":
    main()
