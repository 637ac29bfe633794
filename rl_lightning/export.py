"""Trained policies outside training: a standalone greedy policy, saved as a ``torch.export``
program, ONNX or TorchScript.

A feed-forward policy maps a batch of observations to greedy actions:

    policy(obs) -> actions
    obs      (batch, *obs_shape)       float32, or uint8 for images
    actions  (batch,)                  int64 for ``Discrete`` spaces
             (batch, *action_shape)    float32 for ``Box`` ones (VPG's and PPO's Gaussian mean,
                                       unclipped, as ``act`` gives, the env clips; SAC's squashed
                                       mean and TD3's action, in the bounds)

A recurrent policy (``PPOModule(recurrent="lstm" | "gru")``) also takes and returns its state, as
``act(obs, greedy=True, state=..., episode_start=...)`` does:

    policy(obs, state, episode_start) -> (actions, next_state)
    state, next_state  (num_state, batch, core_size)  float32: [h; c] for an LSTM (num_state 2),
                                                      [h] for a GRU (num_state 1)
    episode_start      (batch,)                       bool: zero that env's state before this step

Start every env from a zero state (or with ``episode_start`` all True), then feed back each call's
``next_state``. In ONNX the inputs are named ``obs``, ``state``, ``episode_start`` and the outputs
``actions``, ``next_state``. The batch dimension is dynamic in every format. Observation
normalisation, when the module has it, is inside. A Dict observation is one input per key (named
after the key in ONNX, in the observation space's order; an action mask is one of them, bool).
With ``action_start`` (gymnasium's ``Discrete(n, start)`` or ``MultiDiscrete(nvec, start)``) the
actions are gymnasium's values, ``start + k``, which a gymnasium env takes as they are; without it
they are the indices ``k`` our envs take. No env, no Lightning and no rl_lightning are needed to run it:

- ``.pt2`` (``torch.export``): ``torch.export.load(path).module()(obs)``;
- ``.onnx`` (the ``onnx`` extra): ``onnxruntime.InferenceSession(path).run(None, {"obs": obs})``;
- ``.pt`` / ``.ts`` (TorchScript, while torch ships it): ``torch.jit.load(path)(obs)``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from rl_lightning.deprecations import renamed_keywords
from rl_lightning.envs.spaces import TensorTree

#: File formats by suffix.
FORMATS = {
    ".pt2": "export",
    ".onnx": "onnx",
    ".pt": "torchscript",
    ".ts": "torchscript",
    ".torchscript": "torchscript",
}

# torch's own warnings while it exports, about its internals: nothing a user of ours can act on.
_TORCH_INTERNAL_WARNINGS = (
    # torch.jit.trace itself is deprecated in torch >= 2.10; TorchScript is kept while torch ships it
    (DeprecationWarning, r"`torch\.jit\.trace(_method)?` is deprecated", ""),
    # nn.LSTM / nn.GRU check their input sizes in Python: a check, not part of the traced computation
    (torch.jit.TracerWarning, r"Converting a tensor to a Python boolean", r"torch\.nn\.modules\.rnn"),
    # torch.export deep-copies its tree specs with a deprecated LeafSpec check (torch 2.13)
    (FutureWarning, r"`isinstance\(treespec, LeafSpec\)` is deprecated", ""),
    # nn.LSTM / nn.GRU refresh their _flat_weights list (views of their parameters) in forward
    (UserWarning, r"The tensor attributes (self\.network\.core\._flat_weights\[\d+\](, )?)+ were assigned", ""),
    # the three inputs of a recurrent policy share one batch dimension, named once
    (UserWarning, r"# The axis name: batch will not be used, since it shares .* another axis: batch\.", ""),
)


class GreedyPolicy(nn.Module):
    """``obs -> greedy action`` from any network with a ``mode(obs)``: a ``PolicyNetwork`` (argmax of
    the logits, the Gaussian's mean), a ``QNetwork`` (argmax Q), SAC's ``SquashedGaussianActor`` (the
    squashed mean, in the bounds) or TD3's ``DeterministicActor``.

    Args:
        network: the policy; its ``mode`` gives the greedy action.
        normalizer: observation normalisation applied first (PPO's ``normalize_obs``).
    """

    @renamed_keywords(q_values="network")  # its first release's name
    def __init__(self, network: nn.Module, normalizer: nn.Module | None = None):
        super().__init__()
        if not callable(getattr(network, "mode", None)):
            raise TypeError(
                f"network must have a mode(obs) giving the greedy action (PolicyNetwork, QNetwork, "
                f"SquashedGaussianActor, DeterministicActor), got {type(network).__name__}"
            )
        self.network = network
        self.normalizer = normalizer if normalizer is not None else nn.Identity()

    def forward(self, obs: Tensor) -> Tensor:
        actions = self.network.mode(self.normalizer(obs))
        return actions if actions.dtype == torch.int64 else actions.float()


class RecurrentGreedyPolicy(nn.Module):
    """``(obs, state, episode_start) -> (greedy action, next state)`` from a ``RecurrentActorCritic``
    (one step of its ``act(obs, state, episode_start, greedy=True)``).

    Args:
        network: the recurrent policy: ``act`` and ``initial_state(batch)``.
        normalizer: observation normalisation applied first (PPO's ``normalize_obs``).
    """

    def __init__(self, network: nn.Module, normalizer: nn.Module | None = None):
        super().__init__()
        if not (callable(getattr(network, "act", None)) and callable(getattr(network, "initial_state", None))):
            raise TypeError(
                "network must have act(obs, state, episode_start, greedy) and initial_state(batch) "
                f"(a RecurrentActorCritic), got {type(network).__name__}"
            )
        self.network = network
        self.normalizer = normalizer if normalizer is not None else nn.Identity()

    def initial_state(self, batch: int) -> Tensor:
        """Zeros ``(num_state, batch, core_size)``: the state of envs that have not started."""
        return self.network.initial_state(batch)

    def forward(self, obs: Tensor, state: Tensor, episode_start: Tensor) -> tuple[Tensor, Tensor]:
        actions, _, next_state = self.network.act(self.normalizer(obs), state, episode_start, greedy=True)
        return (actions if actions.dtype == torch.int64 else actions.float()), next_state


class GymnasiumActions(nn.Module):
    """``policy`` with ``start`` added to its actions: gymnasium's values ``start + k`` of a
    ``Discrete(n, start)`` or ``MultiDiscrete(nvec, start)`` for our indices ``k`` (a recurrent
    policy's state passes through).

    Args:
        policy: a policy of the module docstring's signature.
        start: gymnasium's start: an int, or one per dimension of a ``MultiDiscrete``.
    """

    def __init__(self, policy: nn.Module, start: int | Sequence[int] | np.ndarray):
        super().__init__()
        self.policy = policy
        self.register_buffer("start", torch.as_tensor(np.asarray(start, dtype=np.int64)))
        if callable(getattr(policy, "initial_state", None)):
            self.initial_state = policy.initial_state

    def forward(self, *inputs: Any) -> Tensor | tuple[Tensor, Tensor]:
        output = self.policy(*inputs)
        if isinstance(output, tuple):
            return output[0] + self.start, output[1]
        return output + self.start


class KeyedInputs(nn.Module):
    """A policy of Dict observations with one input tensor per key (``keys`` in order, then a
    recurrent policy's state and episode start): what ONNX, ``torch.export`` and TorchScript take.
    The action-mask check (a read of the mask's values) is off inside: an exported graph cannot
    branch on data."""

    def __init__(self, policy: nn.Module, keys: list[str]):
        super().__init__()
        self.policy = policy
        self.keys = list(keys)
        for module in policy.modules():
            if hasattr(module, "check_masks"):
                module.check_masks = False
        if callable(getattr(policy, "initial_state", None)):
            self.initial_state = policy.initial_state

    def forward(self, *inputs: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        obs = TensorTree(dict(zip(self.keys, inputs[: len(self.keys)], strict=True)))
        return self.policy(obs, *inputs[len(self.keys) :])


def export_policy(
    policy: nn.Module,
    example_obs: Tensor | TensorTree,
    path: str | Path,
    format: str | None = None,
    action_start: int | Sequence[int] | np.ndarray | None = None,
) -> Path:
    """Save ``policy`` to ``path`` with a dynamic batch dimension: as a ``torch.export`` program
    (``.pt2``), ONNX through the dynamo exporter (``.onnx``, needs the ``onnx`` extra) or TorchScript
    (``.pt``, ``.ts``). The inputs and outputs are the module docstring's.

    Args:
        policy: a :class:`GreedyPolicy` (observations -> actions) or a :class:`RecurrentGreedyPolicy`
            (or any module with their signature; ``initial_state(batch)`` marks a recurrent one), on
            the CPU.
        example_obs: ``(batch, *obs_shape)`` observations to export with (batch >= 2: torch.export
            cannot make a dimension of size 1 dynamic); for Dict observations a dict of such tensors:
            the export then has one input per key, named after it (ONNX), in the dict's order.
        format: ``"export"``, ``"onnx"`` or ``"torchscript"``; None: from the suffix of ``path``.
        action_start: gymnasium's start of a ``Discrete`` / ``MultiDiscrete`` action space (the
            adapter's ``gymnasium_action_space.start``): the export then answers in gymnasium's values,
            ``start + k``, as a user's gymnasium env takes them (:class:`GymnasiumActions`); None or 0:
            our indices ``k``.

    Returns:
        the path written.
    """
    path = Path(path)
    if format is None:
        if path.suffix not in FORMATS:
            raise ValueError(
                f"cannot tell the format of {str(path)!r}: use a suffix in {sorted(FORMATS)} or format=..."
            )
        format = FORMATS[path.suffix]
    if format not in set(FORMATS.values()):
        raise ValueError(f"format must be one of {sorted(set(FORMATS.values()))} or None, got {format!r}")
    policy = policy.eval()
    if action_start is not None and np.any(np.asarray(action_start) != 0):
        policy = GymnasiumActions(policy, action_start).eval()
    obs_names = ["obs"]
    if isinstance(example_obs, dict):
        obs_names = list(example_obs)
        policy = KeyedInputs(policy, obs_names).eval()
        example_obs = tuple(example_obs.values())
    inputs = _example_inputs(policy, example_obs)
    if format == "onnx":
        try:
            import onnx  # noqa: F401
            import onnxscript  # noqa: F401  (the dynamo exporter's ONNX functions)
        except ImportError as error:
            raise ImportError("ONNX export needs onnx and onnxscript: pip install 'rl_lightning[onnx]'") from error
    # Written next to the target and renamed over it: a failed export leaves no half-written file, and
    # a directory that cannot be written is one clear OSError here, not a C++ message from the writer.
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix, dir=path.parent)
        os.close(handle)
    except OSError as error:
        raise OSError(error.errno, f"cannot write the export {path}: {error.strerror or error}") from error
    temporary = Path(temporary_name)
    try:
        _export(policy, inputs, temporary, format, obs_names)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    return path


def _export(policy: nn.Module, inputs: tuple[Tensor, ...], path: Path, format: str, obs_names: list[str]) -> None:
    recurrent = callable(getattr(policy, "initial_state", None))
    dynamic_shapes = _dynamic_shapes(inputs, recurrent)
    if isinstance(policy, (KeyedInputs, GymnasiumActions)):  # forward(*inputs): one varargs argument holding them all
        dynamic_shapes = (dynamic_shapes,)
    with torch.no_grad(), _without_torch_internal_warnings():
        if format == "torchscript":
            torch.jit.trace(policy, inputs, check_trace=False).save(str(path))
        elif format == "export":
            program = torch.export.export(policy, inputs, dynamic_shapes=dynamic_shapes)
            torch.export.save(program, path)
        else:
            torch.onnx.export(
                policy,
                inputs,
                str(path),
                input_names=[*obs_names, "state", "episode_start"] if recurrent else obs_names,
                output_names=["actions", "next_state"] if recurrent else ["actions"],
                dynamic_shapes=dynamic_shapes,
                dynamo=True,
                external_data=False,  # one self-contained file: a policy is far below ONNX's 2 GB limit
                verbose=False,
            )


def trace_policy(policy: nn.Module, example_obs: Tensor | TensorTree | tuple[Tensor, ...]) -> torch.jit.ScriptModule:
    """``policy`` traced to TorchScript with ``example_obs`` (or all its inputs, a tuple; a dict of
    tensors for Dict observations: one input per key)."""
    if isinstance(example_obs, dict):
        policy = KeyedInputs(policy, list(example_obs))
        example_obs = tuple(example_obs.values())
    inputs = example_obs if isinstance(example_obs, tuple) else _example_inputs(policy.eval(), example_obs)
    with torch.no_grad(), _without_torch_internal_warnings():
        return torch.jit.trace(policy.eval(), inputs, check_trace=False)


def to_torchscript(
    policy: nn.Module,
    example_obs: Tensor | TensorTree | tuple[Tensor, ...],
    path: str | Path | None = None,
    method: str = "trace",
) -> torch.jit.ScriptModule:
    """``policy`` traced to TorchScript (``method`` must be ``"trace"``: a policy with data-dependent
    heads does not script); with ``path``, written there as :func:`export_policy` writes, and loaded back."""
    if method != "trace":
        raise ValueError(f"method must be 'trace' for an RL module, got {method!r}")
    if path is None:
        return trace_policy(policy, example_obs)
    return torch.jit.load(str(export_policy(policy, example_obs, path, "torchscript")))


def _example_inputs(policy: nn.Module, example_obs: Tensor | tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    """``(obs,)`` (or one tensor per key), then ``(zero state, no episode start)`` for a recurrent ``policy``."""
    obs = example_obs if isinstance(example_obs, tuple) else (example_obs,)
    initial_state = getattr(policy, "initial_state", None)
    if not callable(initial_state):
        return obs
    batch = obs[0].shape[0]
    return (*obs, initial_state(batch), torch.zeros(batch, dtype=torch.bool))


def _dynamic_shapes(inputs: tuple[Tensor, ...], recurrent: bool) -> tuple[dict[int, torch.export.Dim], ...]:
    """One dynamic batch dimension shared by the inputs: dim 0 of the observations and episode_start,
    dim 1 of the state (``(num_state, batch, core_size)``, as ``act`` takes it)."""
    batch = torch.export.Dim("batch")
    shapes = [{0: batch} for _ in inputs]
    if recurrent:
        shapes[-2] = {1: batch}
    return tuple(shapes)


@contextlib.contextmanager
def _without_torch_internal_warnings() -> Iterator[None]:
    """Silence, for one export, torch's warnings about its own internals (``_TORCH_INTERNAL_WARNINGS``)
    and the ONNX exporter's log lines about the torchvision ops it skips (a policy has none)."""
    registration_log = logging.getLogger("torch.onnx._internal.exporter._registration")
    with warnings.catch_warnings():
        for category, message, module in _TORCH_INTERNAL_WARNINGS:
            warnings.filterwarnings("ignore", message=message, category=category, module=module)
        registration_log.addFilter(_not_about_torchvision)
        try:
            yield
        finally:
            registration_log.removeFilter(_not_about_torchvision)


def _not_about_torchvision(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("torchvision is not installed")
