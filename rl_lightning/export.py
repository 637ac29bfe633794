"""Trained policies outside training: a standalone greedy policy, saved as TorchScript or ONNX.

The exported policy maps a batch of observations ``(batch, *obs_shape)`` (float32, or uint8 for
images) to greedy actions: int64 ``(batch,)`` for ``Discrete`` spaces, float32
``(batch, *action_shape)`` for ``Box`` ones (the Gaussian's mean, unclipped, as ``act`` gives;
the env clips). Observation normalisation, when the module has it, is inside. No env, no
Lightning and no rl_lightning are needed to run it: ``torch.jit.load(path)(obs)``, or
``onnxruntime.InferenceSession(path).run(None, {"obs": obs})``.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch import Tensor, nn

from rl_lightning.nets import CategoricalHead, GaussianHead

#: File formats by suffix.
FORMATS = {".pt": "torchscript", ".ts": "torchscript", ".torchscript": "torchscript", ".onnx": "onnx"}


class GreedyPolicy(nn.Module):
    """``obs -> greedy action`` from an encoder-and-head network (``PolicyNetwork``) or a Q-network.

    Args:
        network: a ``PolicyNetwork`` (categorical: argmax of the logits; Gaussian: the mean), or
            a Q-network (``q_values=True``: argmax of the Q-values).
        normalizer: observation normalisation applied first (PPO's ``normalize_obs``).
        q_values: ``network`` outputs Q-values.
    """

    def __init__(self, network: nn.Module, normalizer: nn.Module | None = None, q_values: bool = False):
        super().__init__()
        self.network = network
        self.normalizer = normalizer if normalizer is not None else nn.Identity()
        self.continuous = not q_values and isinstance(getattr(network, "head", None), GaussianHead)
        if not q_values and not isinstance(getattr(network, "head", None), (CategoricalHead, GaussianHead)):
            raise TypeError(f"network must be a PolicyNetwork or a Q-network, got {type(network).__name__}")

    def forward(self, obs: Tensor) -> Tensor:
        outputs = self.network(self.normalizer(obs))
        return outputs.float() if self.continuous else outputs.argmax(dim=-1)


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
