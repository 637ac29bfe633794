"""``num_seeds``: N independent agents trained in lock-step by one module, in one process, under one Trainer.

The module given to the Trainer is seed 0 (its own networks, normaliser and source are the run's with ``seed``); it
builds ``num_seeds - 1`` members, each the same algorithm with ``seed + i`` and ``num_seeds=1`` (``seed_members``),
so that every seed owns its networks, optimizer state, envs, replay buffer or rollout, random streams and
normaliser, exactly as its one-seed run would. What is shared is the computation:

- an update runs the algorithm's loss for every seed as ONE batched call: ``torch.func.vmap`` over the seeds'
  parameters stacked (``torch.func.functional_call``) and their batches stacked (:func:`call_per_seed`); the sum of
  the seeds' losses is one backward pass, and each seed's gradients land on its own parameters;
- one optimizer holds every seed's parameter groups (torch's own Adam, which steps each tensor alone: a seed's
  step equals its one-seed run's); gradient-norm clipping is per seed, and a seed that is stopped (PPO's
  ``target_kl``) or diverged (a loss that is not finite) has no gradient at the step, so Adam leaves its weights,
  moments and step count as they are;
- the data sources step in lock-step (``rl_lightning.data.seed_sources.SeedSources``), each from its own streams.

Nothing flows between seeds. Seed i equals the one-seed run with ``seed + i`` to float tolerance (the batched
matmuls round differently from the single ones): ``tests/algos/test_num_seeds.py``.
"""

from __future__ import annotations

import copy
import functools
import inspect
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import lightning as L
import torch
from torch import Tensor, nn

from rl_lightning._checks import check_int
from rl_lightning.deprecations import _InitLink
from rl_lightning.per_seed import loop_per_seed, per_seed


def build_seed_members(module: Any, cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """``module.seed_members``: the algorithm ``cls`` built again for seeds ``seed + 1 .. seed + num_seeds - 1``
    from the arguments ``module`` was built with (``num_seeds=1``; a ``network`` given is copied for each, as
    each one-seed run would start from it)."""
    bound = inspect.signature(cls.__init__).bind(module, *args, **kwargs)
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    arguments.pop(next(iter(arguments)))  # self
    extra = arguments.pop(_var_keyword(cls), {}) if _var_keyword(cls) else {}
    arguments = {**arguments, **extra}
    object.__setattr__(module, "_seed_arguments", arguments)  # for one_seed_module(0)
    seed = module.hparams.get("seed", arguments.get("seed"))  # a subclass may pass it on in its **kwargs
    members = []
    for index in range(1, module.num_seeds):
        member_arguments = {**arguments, "seed": seed + index, "num_seeds": 1}
        if isinstance(member_arguments.get("network"), nn.Module):
            member_arguments["network"] = copy.deepcopy(member_arguments["network"])
        members.append(cls(**member_arguments))
    module.seed_members = nn.ModuleList(members)


def _var_keyword(cls: type) -> str | None:
    parameters = inspect.signature(cls.__init__).parameters.values()
    return next((p.name for p in parameters if p.kind is inspect.Parameter.VAR_KEYWORD), None)


def merged_optimizer(optimizers: Sequence[torch.optim.Optimizer], fused: bool | None) -> torch.optim.Optimizer:
    """One optimizer of every seed's parameters, of the seeds' optimizer class and settings: group k holds every
    seed's k-th group (the seeds' settings are equal), so a step is one call per group, not per seed; it steps each
    parameter tensor on its own (Adam's state is per tensor), as each seed's optimizer would."""
    first = optimizers[0]
    if any(type(optimizer) is not type(first) for optimizer in optimizers):
        raise TypeError("num_seeds > 1: every seed's configure_optimizers must return the same optimizer class")
    if any(len(optimizer.param_groups) != len(first.param_groups) for optimizer in optimizers):
        raise ValueError("num_seeds > 1: every seed's optimizer must have the same parameter groups")
    groups = []
    for index, group in enumerate(first.param_groups):
        settings = {name: value for name, value in group.items() if name != "params"}
        for optimizer in optimizers[1:]:
            other = {name: value for name, value in optimizer.param_groups[index].items() if name != "params"}
            if other != settings:
                raise ValueError(f"num_seeds > 1: the seeds' optimizer group {index} settings differ: {other}")
        if fused is not None and "fused" in settings:
            settings["fused"] = fused
        groups.append({**settings, "params": [p for o in optimizers for p in o.param_groups[index]["params"]]})
    defaults = dict(first.defaults)
    if fused is not None and "fused" in defaults:
        defaults["fused"] = fused
    return type(first)(groups, **defaults)


def clip_per_seed(parameters: Sequence[Sequence[Tensor]], max_norm: float, algorithm: str) -> None:
    """Clip each seed's gradients as ``Trainer(gradient_clip_val=...)`` / ``max_grad_norm`` clip one run's: the norm
    over that seed's parameters alone, computed as ``torch.nn.utils.clip_grad_norm_`` does (each tensor's norm, then
    their norm; the coefficient ``max_norm / (norm + 1e-6)`` clamped to 1), for all seeds in one pass; or each value
    (``"value"``)."""
    seeds = [[p.grad for p in seed_parameters if p.grad is not None] for seed_parameters in parameters]
    seeds = [grads for grads in seeds if grads]
    grads = [grad for seed_grads in seeds for grad in seed_grads]
    if not grads:
        return
    if algorithm == "value":
        torch.nn.utils.clip_grad_value_(grads, max_norm)
        return
    norms = torch._foreach_norm(grads, 2.0)
    coefficients: list[Tensor] = []
    start = 0
    for seed_grads in seeds:
        total = torch.linalg.vector_norm(torch.stack(norms[start : start + len(seed_grads)]), 2.0)
        clamped = torch.clamp(max_norm / (total + 1e-6), max=1.0)
        coefficients.extend([clamped] * len(seed_grads))
        start += len(seed_grads)
    torch._foreach_mul_(grads, coefficients)


def drop_gradients(parameters: Sequence[Sequence[Tensor]], seeds: Sequence[int]) -> None:
    """No gradient for the parameters of ``seeds``: the optimizer step then leaves them (weights, moments, step
    count) as they are."""
    for seed in seeds:
        for parameter in parameters[seed]:
            parameter.grad = None


def warn_once_diverged(seeds: Sequence[int], first_seed: int, env_steps: int) -> None:
    """Say which seeds stopped learning: their loss is no longer finite (the others go on)."""
    names = ", ".join(f"{index} (seed {first_seed + index})" for index in seeds)
    warnings.warn(
        f"num_seeds: seed index {names} diverged at {env_steps} env steps (a loss that is not finite): its weights "
        "stay as they were before, it is masked out of every later update and out of the aggregate charts, and the "
        "other seeds go on",
        RuntimeWarning,
        stacklevel=2,
    )


class SeedMembers:
    """``RLModule``'s ``num_seeds`` side (module docstring): the members, their trainer, one optimizer of every
    seed's groups, the per-seed optimizer step, the lock-step sources."""

    num_seeds: int
    _modules: dict[str, nn.Module]

    @property
    def trainer(self) -> Any:
        return L.LightningModule.trainer.fget(self)

    @trainer.setter
    def trainer(self, trainer: Any) -> None:
        # Lightning gives its trainer to child LightningModules only; the members sit in a ModuleList.
        L.LightningModule.trainer.fset(self, trainer)
        for member in self.seed_modules()[1:]:
            member.trainer = trainer

    def seed_modules(self) -> list[Any]:
        """Every seed's module, seed 0's (this one) first."""
        members = self._modules.get("seed_members")
        return [self, *members] if members is not None else [self]

    def seed_module(self, seed_index: int | str) -> Any:
        """The module of seed ``seed + seed_index`` (0: this one), or of the best seed (``"best"``:
        :meth:`best_seed_index`): its networks act, evaluate and export as a one-seed module's do."""
        return self.seed_modules()[self.resolve_seed_index(seed_index)]

    def resolve_seed_index(self, seed_index: int | str | None) -> int:
        """``seed_index`` checked: an index in ``[0, num_seeds)``, ``"best"`` (:meth:`best_seed_index`) or None (0)."""
        if seed_index is None:
            return 0
        if isinstance(seed_index, str):
            if seed_index != "best":
                raise ValueError(
                    f"seed_index must be an int in [0, {self.num_seeds - 1}] or 'best', got {seed_index!r}"
                )
            return self.best_seed_index()
        return check_int("seed_index", seed_index, 0, self.num_seeds - 1)

    def best_seed_index(self) -> int:
        """The seed with the highest mean return in the newest greedy evaluation of every seed (``Evaluation``), or
        where none ran yet in the newest finished training episodes; a diverged seed is never the best."""
        scores = self._seed_scores.get("eval") or self._seed_scores.get("train")
        if self.num_seeds == 1:
            return 0
        if not scores:
            raise ValueError(
                "seed_index='best': no seed has a return yet (no greedy evaluation and no finished training episode): "
                "train first, or pick a seed_index"
            )
        ranked = [(score, -index) for index, score in enumerate(scores) if score == score]
        ranked = [entry for entry in ranked if -entry[1] not in self._diverged_seeds] or ranked
        return -max(ranked)[1]

    def one_seed_module(self, seed_index: int | str | None = None) -> Any:
        """Seed ``seed_index``'s agent as a one-seed module (``num_seeds=1``): a member as it is; seed 0 (this module,
        which also holds the others) a copy of its own networks, normalisers and settings. What ``save_pretrained``
        and ``push_to_hub`` save."""
        index = self.resolve_seed_index(seed_index)
        if index > 0 or self.num_seeds == 1:
            return self.seed_modules()[index]
        single = type(self)(**{**self._seed_arguments, "num_seeds": 1})
        own = {name: value for name, value in self.state_dict().items() if not name.startswith("seed_members.")}
        single.load_state_dict(own)
        single.load_extra_checkpoint_state(self.extra_checkpoint_state())
        return single.to(self.device)

    def seed_optimizers(self, configure: Callable[[Any], Any]) -> Any:
        """``configure_optimizers`` of a ``num_seeds > 1`` module: each seed's optimizer merged into one
        (:func:`merged_optimizer`); each seed's parameters kept for its clipping and masking."""
        optimizers = [configure(self), *(member.configure_optimizers() for member in self.seed_modules()[1:])]
        for optimizer in optimizers:
            if not isinstance(optimizer, torch.optim.Optimizer):
                raise TypeError(
                    f"num_seeds > 1 takes one torch optimizer from configure_optimizers, got {type(optimizer).__name__}"
                )
        self._seed_parameters = [[p for group in o.param_groups for p in group["params"]] for o in optimizers]
        return merged_optimizer(optimizers, self.use_fused_adam() if "fused" in optimizers[0].defaults else None)

    def inactive_seeds(self) -> list[int]:
        """Seeds that get no update now: diverged, or stopped for the rest of the rollout (``target_kl``)."""
        frozen = getattr(self.source, "frozen", None) or [False] * self.num_seeds
        return sorted(set(self._diverged_seeds) | {index for index, stop in enumerate(frozen) if stop})

    def step_per_seed(self, clipping: tuple[float, str] | None) -> None:
        """Before a ``num_seeds > 1`` optimizer step: no gradient for the inactive seeds, each other's clipped."""
        parameters = self._seed_parameters
        drop_gradients(parameters, self.inactive_seeds())
        if clipping is not None:
            clip_per_seed(parameters, *clipping)

    def seed_loss(self, losses: Tensor) -> tuple[Tensor, Tensor]:
        """The seeds' losses ``(num_seeds,)`` -> what backward takes (their sum: each seed's gradient its own) and
        what the update reports (the mean over the seeds that have not diverged); a seed whose loss is not finite
        is marked diverged, with a warning (a host read per update)."""
        finite = torch.isfinite(losses.detach()).tolist()
        new = [index for index, ok in enumerate(finite) if not ok and index not in self._diverged_seeds]
        if new:
            self._diverged_seeds.update(new)
            warn_once_diverged(new, self.hparams.seed, self.env_steps)
        alive = [index for index in range(self.num_seeds) if index not in self._diverged_seeds]
        reported = losses.detach()[alive].mean() if alive else losses.detach().sum()
        return losses.sum(), reported

    def seed_update(
        self, function: Callable[..., Any], batch: Any, arguments: Callable[[Any, Any], tuple[Any, ...]]
    ) -> Any:
        """The algorithm's update function on ``batch``: ``function(*arguments(self, batch))`` (through
        ``compile``); with ``num_seeds > 1``, ``batch`` holds every seed's and the call runs for all seeds at once
        (:func:`call_per_seed`), each seed's arguments from its own module: outputs with a first ``num_seeds``
        dimension."""
        if self.num_seeds == 1:
            return self.compiled.update(function)(*arguments(self, batch))
        calls = [arguments(module, part) for module, part in zip(self.seed_modules(), batch, strict=True)]
        if not self.batches_seeds:  # vmap cannot batch it: each seed's call in turn
            return loop_per_seed(function, calls)
        return self.compiled(per_seed(function))(calls)

    @property
    def batches_seeds(self) -> bool:
        """Whether the seeds' update runs as one ``vmap``-batched call (else each seed's in turn: a recurrent PPO
        policy, whose ``nn.LSTM`` / ``nn.GRU`` kernels ``vmap`` cannot batch)."""
        return True

    def build_seed_sources(self, build: Callable[[Any], Any]) -> Any:
        """The lock-step sources of a ``num_seeds > 1`` run: each seed's built as its one-seed run builds it, then
        restored from the checkpoint's states (``SeedSources``)."""
        from rl_lightning.checkpoints import restore_source
        from rl_lightning.data.seed_sources import SeedSources

        states, self._restored_sources = self._restored_sources, None
        for member in self.seed_modules()[1:]:
            member._start_env_steps = self._start_env_steps
        sources = SeedSources([build(module) for module in self.seed_modules()])
        sources.should_stop = self._received_sigterm
        if states is not None:
            restore_source(sources, states, self.global_rank, self.world_size, self.hparams.env_id)
        return sources


def builds_seed_members(cls: type, init: Callable[..., None]) -> Callable[..., None]:
    """``cls.__init__`` that, where it is the most derived ``__init__`` of the module built, builds the seed members
    after it (``num_seeds > 1``), from the same arguments."""

    __class__ = _InitLink  # the wrapper frame's __class__: save_hyperparameters collects a subclass's arguments

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # named __init__: save_hyperparameters checks
        __class__  # noqa: B018 (a free variable of this frame: see deprecations._InitLink)
        init(self, *args, **kwargs)
        outermost = next(klass for klass in type(self).__mro__ if "__init__" in vars(klass)) is cls
        if outermost and self.num_seeds > 1 and "seed_members" not in self._modules:
            build_seed_members(self, type(self), args, kwargs)

    __init__.__signature__ = inspect.signature(init)  # type: ignore[attr-defined]
    return __init__


def optimizes_every_seed(configure: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``configure_optimizers`` that, with ``num_seeds > 1``, returns one optimizer of every seed's
    (``SeedMembers.seed_optimizers``); a subclass's ``super().configure_optimizers()`` inside it stays one seed's."""

    @functools.wraps(configure)
    def configure_optimizers(self: Any) -> Any:
        if self.num_seeds == 1 or self.__dict__.get("_configuring_seeds"):
            return configure(self)
        object.__setattr__(self, "_configuring_seeds", True)
        try:
            return self.seed_optimizers(configure)
        finally:
            object.__delattr__(self, "_configuring_seeds")

    return configure_optimizers
