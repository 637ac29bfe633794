"""What a trained module gives away: its greedy policy standalone (``torch.export``, ONNX, TorchScript:
``rl_lightning.export``) and the module itself on the Hugging Face Hub (``rl_lightning.hub``). ``RLModule``
inherits these methods from :class:`PolicySharing`.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from torch import nn

from rl_lightning.envs.spaces import zeros_like_space
from rl_lightning.export import export_policy, to_torchscript


class PolicySharing:
    """``RLModule``'s export and Hub methods: they read its ``greedy_policy()``, its spaces and its inputs."""

    policy_observation_space: Any
    _inputs: Any
    resolve_seed_index: Any
    seed_module: Any
    one_seed_module: Any

    def greedy_policy(self) -> nn.Module:
        raise NotImplementedError

    def export_policy(self, path: str | Path, format: str | None = None, seed_index: int | str | None = None) -> Path:
        """Save the greedy policy, standalone, to ``path``: a ``torch.export`` program (``.pt2``), ONNX
        (``.onnx``, the ``onnx`` extra) or TorchScript (``.pt``, ``.ts``); ``format`` (``"export"``,
        ``"onnx"``, ``"torchscript"``) overrides the suffix. It maps observations ``(batch, *obs_shape)``
        to the actions ``act(obs, greedy=True)`` gives (a recurrent policy also takes and returns its
        state: ``rl_lightning.export``), with no env, Lightning or rl_lightning needed to run it: in gymnasium's
        values for a ``Discrete(n, start)`` / ``MultiDiscrete(..., start)`` env (``start + index``). ``seed_index``:
        with ``num_seeds > 1``, the seed's policy (an index or ``"best"``; None: seed 0, this module)."""
        if seed_index is not None and self.resolve_seed_index(seed_index) > 0:
            return self.seed_module(seed_index).export_policy(path, format)
        start = getattr(self._inputs.gymnasium_action_space, "start", None)
        example = zeros_like_space(self.policy_observation_space, 2)
        return export_policy(self._standalone_policy(), example, path, format, action_start=start)

    def to_torchscript(
        self, file_path: str | Path | None = None, method: str = "trace", example_inputs: Any = None, **kwargs: Any
    ) -> Any:
        """The greedy policy as TorchScript (traced; saved as :meth:`export_policy` saves, if ``file_path``).
        (Lightning's default scripts the whole module, which a module with envs and sources cannot be.)
        ``example_inputs``: observations ``(batch, *obs_shape)`` (or a recurrent policy's ``(obs, state,
        episode_start)``); None: zeros."""
        example = example_inputs if example_inputs is not None else zeros_like_space(self.policy_observation_space, 2)
        return to_torchscript(self._standalone_policy(), example, file_path, method)

    def _standalone_policy(self) -> nn.Module:
        return copy.deepcopy(self.greedy_policy()).cpu().eval()

    def save_pretrained(self, directory: str | Path, seed_index: int | str | None = None, **options: Any) -> Path:
        """Write the module to ``directory`` as the Hub holds it: ``model.safetensors``, ``config.json`` (algorithm,
        env spec, hyper-parameters, evaluation), ``policy.pt2`` / ``policy.onnx``, ``replay.mp4`` and a model card
        ``README.md``. ``options``: ``rl_lightning.hub.save_pretrained``'s (``repo_id``, ``eval_episodes``,
        ``eval_seed``, ``video_steps``, ``export_formats``). With ``num_seeds > 1``, one seed's agent as a one-seed
        module: ``seed_index`` (an index or ``"best"``; None: seed 0)."""
        from rl_lightning.hub import save_pretrained

        return save_pretrained(self.one_seed_module(seed_index), directory, **options)

    @classmethod
    def from_pretrained(cls, source: str | Path, **options: Any) -> Any:
        """The module saved by :meth:`save_pretrained` in the folder or Hub repo id ``source``, from its
        ``config.json`` and ``model.safetensors`` only (no pickle); ``RLModule.from_pretrained`` takes any algorithm's.
        A folder of another algorithm, env or spaces is a ``ValueError`` saying what differs. ``options``:
        ``rl_lightning.hub.load_pretrained``'s (``revision``, ``token``, ``trust_remote_code``, hyper-parameters)."""
        from rl_lightning.hub import load_pretrained

        return load_pretrained(source, cls, **options)

    def push_to_hub(self, repo_id: str, seed_index: int | str | None = None, **options: Any) -> Any:
        """:meth:`save_pretrained`, then upload the folder to the Hub model repo ``repo_id`` (created if need be);
        returns ``huggingface_hub``'s ``CommitInfo``. ``options``: ``rl_lightning.hub.push_to_hub``'s (``private``,
        ``token``, ``commit_message``, ``local_dir`` and :meth:`save_pretrained`'s); ``seed_index`` as there."""
        from rl_lightning.hub import push_to_hub

        return push_to_hub(self.one_seed_module(seed_index), repo_id, **options)
