"""``Trainer.validate`` and ``Trainer.test`` of a module (``rl-lightning validate`` / ``test``): greedy episodes
on fresh envs of their own seeds, logged as ``eval/*`` and ``test/*``. During ``fit`` greedy evaluation is the
``Evaluation`` callback's, at its own cadence in env steps. ``RLModule`` inherits these hooks from
:class:`GreedyEvaluation`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from torch.utils.data import DataLoader


class GreedyEvaluation:
    """``RLModule``'s validation and test hooks (they use its ``make_envs`` and ``act``)."""

    #: Episodes and env seeds of ``Trainer.validate`` / ``Trainer.test`` (``rl-lightning validate``).
    eval_episodes: ClassVar[int] = 32
    validation_seed: ClassVar[int] = 10_000
    test_seed: ClassVar[int] = 30_000

    def val_dataloader(self) -> Any:
        # Trainer.validate only: during fit, greedy evaluation is the Evaluation callback's, at its
        # own cadence in env steps (an empty loader makes Lightning skip its validation loop).
        if self._attached and self.trainer.state.fn == "fit":
            return []
        return DataLoader([0], batch_size=None)

    def test_dataloader(self) -> Any:
        return DataLoader([0], batch_size=None)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._log_greedy_evaluation("eval", self.validation_seed)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._log_greedy_evaluation("test", self.test_seed)

    def _log_greedy_evaluation(self, prefix: str, seed: int) -> None:
        from rl_lightning.callbacks.evaluation import evaluate_policy

        seed += self.global_rank * self.eval_episodes
        result = evaluate_policy(self, self.make_envs(self.eval_episodes, seed), seed=seed)
        metrics = {
            f"{prefix}/episodic_return": result.returns.mean(),
            f"{prefix}/episodic_return_std": result.returns.std(unbiased=False),
            f"{prefix}/episodic_length": result.lengths.mean(),
        }
        self.log_dict(metrics, batch_size=self.eval_episodes, sync_dist=True)
