"""Vanilla policy gradient (REINFORCE) as a LightningModule.

One training step = one batch of whole trajectories from a rollout of the current policy:

    rollout  = RolloutSource.collect().rollout         (envs stepped num_steps_per_rollout times)
    G_t      = compute_returns(rewards, dones, gamma)  (optionally normalised)
    J        = mean_t,env[ iw * log pi(a_t|s_t) * (G_t - mean_env G_t) ]
    loss     = -J                                      (Adam minimises -J, i.e. ascends J)

An epoch is ``rollouts_per_epoch`` rollouts (default one), so ``max_epochs`` counts rollouts
and ``max_steps`` counts optimizer updates. Discrete actions get a categorical policy, ``Box``
actions a diagonal Gaussian (``rl_lightning.nets.PolicyNetwork``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from rl_lightning._checks import check_bool, check_float, check_int, check_sizes
from rl_lightning.algos.on_policy import OnPolicyModule
from rl_lightning.data.rollout import RolloutSource, RolloutTensors
from rl_lightning.envs.base import VectorEnv
from rl_lightning.export import GreedyPolicy
from rl_lightning.losses import (
    compute_importance_weights,
    compute_logprobs,
    compute_reinforce_loss,
    compute_returns,
    normalize_returns,
)
from rl_lightning.nets import PolicyNetwork
from rl_lightning.seeding import seeded


class VPGModule(OnPolicyModule):
    """REINFORCE with a per-timestep baseline across envs, on torch vector envs.

    Args:
        env_id: a native env id (``rl_lightning.registered_env_ids()``) or any gymnasium id.
        num_envs: envs stepped in lock-step per process.
        num_steps_per_rollout: steps per env in one rollout.
        lr: Adam learning rate.
        gamma: discount factor in [0, 1].
        normalize_returns: rescale returns to zero mean, unit variance per batch.
        importance_weighting: weight by importance ratios pi / pi_old (needed to reuse a rollout).
        iw_clip: clamp the importance weights to [1 - iw_clip, 1 + iw_clip] (None: no clamp).
        rollout_use_count: updates per batch of each rollout (> 1 needs ``importance_weighting``).
        num_batches_per_rollout: batches each rollout is split into along envs (> 1 needs
            ``importance_weighting``; must divide ``num_envs``).
        rollouts_per_epoch: rollouts per Lightning epoch.
        full_reset: reset every env at the start of each rollout.
        anneal_lr: decay the learning rate linearly from ``lr`` to ``lr_end`` over the first ``lr_frac``
            of the run's env steps (adds a ``LinearLRDecay`` callback), as PPO's ``anneal_lr``.
        lr_end: the learning rate the decay ends at (None, the seeds' ``VPGArgs`` default: 0).
        lr_frac: the fraction of the run's env steps the decay takes, in (0, 1] (None, the seeds' default: 1).
        hidden_sizes: widths of the policy MLP's hidden layers.
        adam_eps: Adam's epsilon.
        seed: seeds the network init (identical on every rank), the envs (``seed + rank *
            num_envs``: no two ranks share env seeds) and action sampling.
        network: your own encoder (observations -> features; the policy head is added); None:
            an MLP of ``hidden_sizes`` (a CNN for image observations). Not saved in checkpoints'
            hyper-parameters: pass it again to ``load_from_checkpoint``.
        env_backend: ``"auto"`` (native torch env where there is one, else gymnasium's),
            ``"torch"``, ``"gymnasium"`` (the adapter, also for a native id), ``"envpool"``, ``"ale_vector"``
            (Atari and EnvPool's MuJoCo tasks in C++: ``EnvPoolVectorEnv``, ``AleVectorEnv``) or ``"ray"``
            (gymnasium's envs in Ray actors: ``RayVectorEnv``; ``env_kwargs={"num_workers": 2}``).
        env_kwargs: for gymnasium envs, e.g. ``{"vectorization_mode": "async"}`` or env arguments.
        compile: the whole update (:func:`vpg_loss`, backward, clipping, Adam) and, on CUDA, the acting step
            through ``torch.compile`` (``rl_lightning.compiling``); a dict gives its arguments
            (``{"backend": "aot_eager"}``; ``{"whole_update": False}``: the loss only). Equal to eager to float
            tolerance.
    """

    renamed_hyperparameters: ClassVar[dict[str, str]] = {
        "use_iw": "importance_weighting",
        "clip_coef": "iw_clip",
        "use_lr_decay": "anneal_lr",
    }
    action_kinds = ("discrete", "box", "multi_discrete", "multi_binary")

    def __init__(
        self,
        env_id: str = "CartPole-v1",
        num_envs: int = 32,
        num_steps_per_rollout: int = 500,
        lr: float = 2e-2,
        gamma: float = 0.99,
        normalize_returns: bool = True,
        importance_weighting: bool = False,
        iw_clip: float | None = 0.2,
        rollout_use_count: int = 1,
        num_batches_per_rollout: int = 1,
        rollouts_per_epoch: int = 1,
        full_reset: bool = True,
        anneal_lr: bool = False,
        lr_end: float | None = 0.0,
        lr_frac: float | None = 1.0,
        hidden_sizes: Sequence[int] = (120, 84),
        adam_eps: float = 1e-5,
        seed: int = 1,
        network: nn.Module | None = None,
        env_backend: str = "auto",
        env_kwargs: dict[str, Any] | None = None,
        compile: bool | dict[str, Any] = False,
        num_seeds: int = 1,
    ):
        super().__init__(
            env_id=env_id,
            num_envs=num_envs,
            seed=seed,
            env_backend=env_backend,
            env_kwargs=env_kwargs,
            compile=compile,
            num_seeds=num_seeds,
        )
        check_int("num_steps_per_rollout", num_steps_per_rollout, 1)
        check_float("lr", lr, 0.0, low_open=True)
        check_float("gamma", gamma, 0.0, 1.0)
        check_bool("normalize_returns", normalize_returns)
        check_bool("importance_weighting", importance_weighting)
        if iw_clip is not None:
            check_float("iw_clip", iw_clip, 0.0, 1.0, low_open=True, high_open=True)
        check_int("rollout_use_count", rollout_use_count, 1)
        check_int("num_batches_per_rollout", num_batches_per_rollout, 1)
        check_int("rollouts_per_epoch", rollouts_per_epoch, 1)
        check_bool("full_reset", full_reset)
        check_bool("anneal_lr", anneal_lr)
        # The seeds' VPGArgs say None for "no decay settings": the defaults.
        lr_end = 0.0 if lr_end is None else lr_end
        lr_frac = 1.0 if lr_frac is None else lr_frac
        check_float("lr_end", lr_end, 0.0)  # checked whether or not the decay is on: a typo is never ignored
        check_float("lr_frac", lr_frac, 0.0, 1.0, low_open=True)
        check_float("adam_eps", adam_eps, 0.0, low_open=True)
        hidden_sizes = check_sizes("hidden_sizes", hidden_sizes)
        if num_envs % num_batches_per_rollout != 0:
            raise ValueError(f"num_batches_per_rollout ({num_batches_per_rollout}) must divide num_envs ({num_envs})")
        if num_envs // num_batches_per_rollout < 2:
            # The baseline is each timestep's mean return over a batch's envs: with one env per batch
            # every advantage is zero and the weights would never move.
            raise ValueError(
                f"VPG needs at least 2 envs per batch (num_envs={num_envs}, num_batches_per_rollout="
                f"{num_batches_per_rollout}): its baseline is the mean return over a batch's envs at each timestep, "
                "so one env has an advantage of zero everywhere and learns nothing; raise num_envs"
            )
        if not importance_weighting and (rollout_use_count != 1 or num_batches_per_rollout != 1):
            raise ValueError(
                "reusing a rollout (rollout_use_count > 1) or splitting it into several batches "
                "(num_batches_per_rollout > 1) makes all but the first update off-policy: set "
                f"importance_weighting=True, or keep both at 1 (got rollout_use_count={rollout_use_count}, "
                f"num_batches_per_rollout={num_batches_per_rollout})"
            )
        self.save_hyperparameters(ignore=["network"])
        with seeded(seed):  # the same initial weights on every rank
            self.policy_network = PolicyNetwork(self.observation_space, self.action_space, hidden_sizes, network)

    @property
    def _acting_head(self) -> nn.Module:
        return self.policy_network.head

    @classmethod
    def upgraded_hyperparameters(cls, saved: dict[str, Any]) -> dict[str, Any]:
        upgraded = super().upgraded_hyperparameters(saved)
        # lr_end / lr_frac were None (no decay) before they had defaults.
        defaults = {"lr_end": 0.0, "lr_frac": 1.0}
        return upgraded | {name: value for name, value in defaults.items() if name in saved and saved[name] is None}

    # -- the algorithm ----------------------------------------------------------------------

    def update_loss(self, batch: RolloutTensors) -> Tensor:
        hp = self.hparams
        # Returns in float32 whatever the precision: they sum hundreds of rewards. Computed eagerly, outside the
        # compiled update: their backward loop over the steps would unroll into its graph (inductor took ~50 s
        # for the default 500 steps).
        loss, metrics = self.seed_update(
            vpg_loss,
            batch,
            lambda module, part: (
                module.policy_network,
                part,
                compute_returns(part.rewards, part.dones, hp.gamma),
                hp.normalize_returns,
                hp.importance_weighting,
                hp.iw_clip,
            ),
        )
        self.log_metrics(metrics)
        if self.update_in_rollout == 0:  # once per rollout
            self.log_charts()
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.policy_network.parameters(), lr=self.hparams.lr, eps=self.hparams.adam_eps)

    # -- what the base needs ----------------------------------------------------------------

    def make_source(self, envs: VectorEnv) -> RolloutSource:
        hp = self.hparams
        return RolloutSource(
            envs,
            self.policy_network,
            num_steps=hp.num_steps_per_rollout,
            num_batches=hp.num_batches_per_rollout,
            rollout_use_count=hp.rollout_use_count,
            rollouts_per_epoch=hp.rollouts_per_epoch,
            full_reset=hp.full_reset,
            compiled=self.compiled,
        )

    def greedy_policy(self) -> nn.Module:
        return GreedyPolicy(self.policy_network)

    def policy_actions(self, obs: Tensor, greedy: bool) -> Tensor:
        params = self.policy_network(obs)
        self.check_finite_outputs(params, "policy's outputs")
        head = self.policy_network.head
        return head.mode(params) if greedy else head.sample(params)[0]

    @property
    def training_steps_per_collection(self) -> int:
        return self.hparams.num_batches_per_rollout * self.hparams.rollout_use_count


def vpg_loss(
    policy_network: PolicyNetwork,
    batch: RolloutTensors,
    returns: Tensor,
    normalize: bool,
    importance_weighting: bool,
    iw_clip: float | None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """VPG's update as a pure function (``VPGModule.update_loss`` calls it, through ``torch.compile``
    with ``compile=True``): the loss ``-J`` of a batch of whole trajectories, differentiable w.r.t.
    ``policy_network``'s parameters, and the metrics it logs (detached): the objective J and, with
    ``importance_weighting``, the mean importance weight.

    Args:
        batch: the rollout's batch of envs, each field ``(batch_envs, num_steps, ...)``.
        returns: float32 ``(batch_envs, num_steps)``, the batch's discounted returns (``compute_returns``).
        normalize: rescale the returns to zero mean, unit variance over the batch.
        importance_weighting: weight by pi / pi_old, clamped to ``1 +- iw_clip`` (None: no clamp).
    """
    if normalize:
        returns = normalize_returns(returns)
    logprobs = compute_logprobs(batch.obs, batch.actions, policy_network)
    metrics: dict[str, Tensor] = {}
    if importance_weighting:
        weights = compute_importance_weights(logprobs, batch.logprobs, iw_clip)
        metrics["losses/importance_weight"] = weights.mean()
    else:
        weights = torch.ones_like(logprobs)
    objective = compute_reinforce_loss(returns, logprobs, weights)
    metrics["losses/policy_objective"] = objective.detach()
    return -objective, metrics
