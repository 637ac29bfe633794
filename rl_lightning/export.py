"""Trained policies outside training: a standalone greedy policy, saved as TorchScript or ONNX.

The exported policy maps a batch of observations ``(batch, *obs_shape)`` (float32, or uint8 for
images) to greedy actions: int64 ``(batch,)`` for ``Discrete`` spaces, float32
``(batch, *action_shape)`` for ``Box`` ones (VPG's and PPO's Gaussian mean, unclipped, as ``act``
gives, the env clips; SAC's squashed mean and TD3's action, in the bounds). Observation
normalisation, when the module has it, is inside. No env, no Lightning and no rl_lightning are
needed to run it: ``torch.jit.load(path)(obs)``, or
``onnxruntime.InferenceSession(path).run(None, {"obs": obs})``.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch import Tensor, nn

#: File formats by suffix.
FORMATS = {".pt": "torchscript", ".ts": "torchscript", ".torchscript": "torchscript", ".onnx": "onnx"}


class GreedyPolicy(nn.Module):
    """``obs -> greedy action`` from any network with a ``mode(obs)``: a ``PolicyNetwork`` (argmax of
    the logits, the Gaussian's mean), a ``QNetwork`` (argmax Q), SAC's ``SquashedGaussianActor`` (the
    squashed mean, in the bounds) or TD3's ``DeterministicActor``.

    Args:
        network: the policy; its ``mode`` gives the greedy action.
        normalizer: observation normalisation applied first (PPO's ``normalize_obs``).
    """

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


def export_policy(policy: nn.Module, example_obs: Tensor, path: str | Path, format: str | None = None) -> Path:
    """Save ``policy`` (observations -> actions) to ``path`` as TorchScript (``.pt``) or ONNX (``.onnx``,
    with a dynamic batch dimension; needs the ``onnx`` extra).

    Args:
        policy: e.g. a :class:`GreedyPolicy`, on the CPU, in eval mode.
        example_obs: ``(batch, *obs_shape)`` observations to trace with.
        format: ``"torchscript"`` or ``"onnx"``; None: from the suffix of ``path``.

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
    if format not in ("torchscript", "onnx"):
        raise ValueError(f"format must be 'torchscript' or 'onnx', got {format!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    policy = policy.eval()
    with torch.no_grad():
        if format == "torchscript":
            traced = torch.jit.trace(policy, example_obs, check_trace=False)
            traced.save(str(path))
            return path
        try:
            import onnx  # noqa: F401
        except ImportError as error:
            raise ImportError("ONNX export needs the onnx package: pip install 'rl_lightning[onnx]'") from error
        with warnings.catch_warnings():  # the TorchScript-based exporter: fast, no onnxscript needed
            warnings.simplefilter("ignore", DeprecationWarning)
            torch.onnx.export(
                policy,
                (example_obs,),
                str(path),
                input_names=["obs"],
                output_names=["actions"],
                dynamic_axes={"obs": {0: "batch"}, "actions": {0: "batch"}},
                dynamo=False,
            )
    return path
