"""One function run for many seeds as one batched call: ``torch.func.vmap`` over each seed's modules' parameters
and buffers (stacked, ``torch.func.functional_call``) and its tensors (stacked), the hyper-parameters shared. What a
``num_seeds > 1`` run's updates (``rl_lightning.algos._seeds``) and lock-step collection
(``rl_lightning.data._fused_collection.play_fused_together``) are made of."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils import _pytree as pytree

from rl_lightning.envs.spaces import TensorTree

# A Dict observation's batch (a TensorTree) is a node of the seeds' argument trees, its leaves stacked per seed like
# any tensor's (pytree knows only plain dicts: it would take the tree for one value, shared by the seeds).
pytree.register_pytree_node(
    TensorTree,
    lambda tree: (list(tree.values()), list(tree)),
    lambda values, keys: TensorTree(zip(keys, values, strict=True)),
    serialized_type_name="rl_lightning.envs.spaces.TensorTree",
)


class _Call(nn.Module):
    """``function(*arguments)`` with the argument tree's modules as submodules, so that ``functional_call`` can
    give them one seed's parameters."""

    def __init__(self, function: Callable[..., Any], modules: list[nn.Module]):
        super().__init__()
        self.function = function
        self.nets = nn.ModuleList(modules)

    def forward(self, spec: pytree.TreeSpec, leaves: list[Any]) -> Any:
        return self.function(*pytree.tree_unflatten(leaves, spec))


class _ModuleSlot:
    """Where an argument tree holds a module (its index among the call's modules)."""

    def __init__(self, index: int):
        self.index = index


def call_per_seed(function: Callable[..., Any], calls: Sequence[tuple[Any, ...]]) -> Any:
    """``function(*calls[i])`` for every seed i as one batched call (``torch.func.vmap``): the outputs stacked along a
    new first dimension (a loss ``(num_seeds,)``, each metric ``(num_seeds,)``).

    Each call's arguments hold the same tree (named tuples, tuples, dicts): at a position, modules (each seed's
    own: their parameters and buffers are stacked, and gradients flow back to each seed's), tensors (stacked) or
    plain values, which must be equal for every seed (hyper-parameters)."""
    flat = [pytree.tree_flatten(call) for call in calls]
    spec = flat[0][1]
    for _, other in flat[1:]:
        if other != spec:
            raise ValueError(f"{function.__name__}: the seeds' arguments differ in structure")
    columns = list(zip(*(leaves for leaves, _ in flat), strict=True))
    modules: list[nn.Module] = []
    states: dict[str, Tensor] = {}
    leaves: list[Any] = []
    tensor_positions: list[int] = []
    tensors: list[Tensor] = []
    for position, column in enumerate(columns):
        first = column[0]
        if isinstance(first, nn.Module):
            index = len(modules)
            modules.append(first)
            seed_states = [_states(member) for member in column]
            for name in seed_states[0]:
                states[f"nets.{index}.{name}"] = torch.stack([state[name] for state in seed_states])
            leaves.append(_ModuleSlot(index))
        elif isinstance(first, Tensor):
            tensor_positions.append(position)
            tensors.append(torch.stack(column))
            leaves.append(None)
        else:
            if any(value != first for value in column[1:]):
                raise ValueError(
                    f"{function.__name__}: argument {position} differs between seeds ({column!r}): num_seeds > 1 "
                    "shares the hyper-parameters"
                )
            leaves.append(first)
    call = _Call(function, modules)
    output_spec: list[pytree.TreeSpec] = []
    empty: list[list[int]] = []

    def one_seed(state: dict[str, Tensor], seed_tensors: list[Tensor]) -> list[Tensor]:
        seed_leaves = list(leaves)
        for position, tensor in zip(tensor_positions, seed_tensors, strict=True):
            seed_leaves[position] = tensor
        for position, leaf in enumerate(seed_leaves):
            if isinstance(leaf, _ModuleSlot):
                seed_leaves[position] = call.nets[leaf.index]
        outputs, spec_out = pytree.tree_flatten(torch.func.functional_call(call, state, (spec, seed_leaves)))
        # vmap returns tensors only: a None output (no critic's values) is put back afterwards.
        output_spec[:], empty[:] = [spec_out], [[index for index, value in enumerate(outputs) if value is None]]
        return [value for value in outputs if value is not None]

    stacked = torch.func.vmap(one_seed, randomness="error")(states, tensors)
    outputs = iter(stacked)
    return pytree.tree_unflatten(
        [None if index in empty[0] else next(outputs) for index in range(len(stacked) + len(empty[0]))], output_spec[0]
    )


#: Each module's parameters and buffers as (name, owning submodule, attribute, is a parameter), found once.
_STATE_SLOTS: weakref.WeakKeyDictionary[nn.Module, list[tuple[str, nn.Module, str, bool]]] = weakref.WeakKeyDictionary()


def _states(module: nn.Module) -> dict[str, Tensor]:
    """``module``'s parameters and buffers by name (``named_parameters`` walks the module tree at every call; the
    slots are found once, and read each time: ``.to()`` replaces buffer tensors)."""
    if torch.compiler.is_compiling():  # traced: no guard on the cache (a global whose contents come and go)
        return {**dict(module.named_parameters()), **dict(module.named_buffers())}
    slots = _STATE_SLOTS.get(module)
    if slots is None:
        slots = []
        for prefix, submodule in module.named_modules():
            for attribute in submodule._parameters:
                slots.append((f"{prefix}.{attribute}".lstrip("."), submodule, attribute, True))
            for attribute in submodule._buffers:
                slots.append((f"{prefix}.{attribute}".lstrip("."), submodule, attribute, False))
        _STATE_SLOTS[module] = slots
    states = {}
    for name, submodule, attribute, is_parameter in slots:
        tensor = (submodule._parameters if is_parameter else submodule._buffers)[attribute]
        if tensor is not None:
            states[name] = tensor
    return states


@functools.cache
def per_seed(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` over seeds (:func:`call_per_seed`), one object per function (what ``compile`` caches by)."""

    def seeds_call(calls: Sequence[tuple[Any, ...]]) -> Any:
        return call_per_seed(function, calls)

    seeds_call.__name__ = f"{function.__name__}_per_seed"
    return seeds_call


def loop_per_seed(function: Callable[..., Any], calls: Sequence[tuple[Any, ...]]) -> Any:
    """``function(*calls[i])`` for each seed in turn, the outputs stacked as :func:`call_per_seed` stacks them: for a
    function ``vmap`` cannot batch (``nn.LSTM`` / ``nn.GRU``'s kernels have no batching rule). Each seed's numbers are
    its one-seed run's, bit for bit."""
    flat = [pytree.tree_flatten(function(*call)) for call in calls]
    columns = zip(*(leaves for leaves, _ in flat), strict=True)
    return pytree.tree_unflatten([None if column[0] is None else torch.stack(column) for column in columns], flat[0][1])
