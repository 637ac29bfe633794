"""A module in a checkpoint: built back from one with nothing in the file able to run code, and its rl_lightning
payload (the clock, the sources, the algorithm's extra state) written and read. ``RLModule`` inherits its
checkpoint methods from :class:`CheckpointPayload`; the files themselves (atomic writes, clear read errors, the one
to resume from) are :mod:`rl_lightning.checkpoints`.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import IO, Any

from lightning.fabric.utilities.apply_func import move_data_to_device
from torch import Tensor

from rl_lightning._checks import check_bool
from rl_lightning.checkpoints import (
    CHECKPOINT_KEY,
    check_checkpoint_fits,
    gather_over_ranks,
    load_checkpoint_file,
    scale_restored_lr,
)
from rl_lightning.deprecations import renamed_in_checkpoint
from rl_lightning.trust import check_file_hyperparameters, local_file_settings, untrusted


def save_payload(module: Any, checkpoint: dict[str, Any]) -> None:
    """``RLModule.on_save_checkpoint``: the module's class path in the hyper-parameters (for ``rl-lightning
    validate --ckpt_path X``: LightningCLI reads it from there) and the rl_lightning payload under
    :data:`~rl_lightning.checkpoints.CHECKPOINT_KEY`: algorithm, env, env steps, every rank's source state and
    the algorithm's ``extra_checkpoint_state``."""
    checkpoint.setdefault("hyper_parameters", {})["_class_path"] = (
        f"{type(module).__module__}.{type(module).__qualname__}"
    )
    state = None if module.source is None else move_data_to_device(module.source.state_dict(), "cpu")
    checkpoint[CHECKPOINT_KEY] = {
        "algorithm": module.algorithm_name(),
        "env_id": module.hparams.env_id,
        "env_steps": module.env_steps,
        "num_seeds": module.num_seeds,
        "sources": gather_over_ranks(state, module.world_size) if module.source is not None else None,
        **module.extra_checkpoint_state(),
    }
    if module.num_seeds > 1:  # each other seed's extra state (its update generators, epsilon, ...)
        checkpoint[CHECKPOINT_KEY]["seed_members"] = [m.extra_checkpoint_state() for m in module.seed_modules()[1:]]


def load_payload(module: Any, checkpoint: dict[str, Any]) -> None:
    """``RLModule.on_load_checkpoint``: check that ``checkpoint`` fits ``module``, rescale the restored LR to a new
    ``lr``, and restore the clock, the sources' states (for ``train_dataloader`` to rebuild them) and the
    algorithm's extra state."""
    module.check_checkpoint(checkpoint)
    scale_restored_lr(checkpoint, module.hparams.get("lr"))  # a resume with another --lr uses it
    payload = checkpoint.get(CHECKPOINT_KEY) or {}
    module._start_env_steps = int(payload.get("env_steps", 0))
    module._restored_sources = payload.get("sources")
    module.source = None  # rebuilt (and restored) by train_dataloader
    module.load_extra_checkpoint_state(payload)
    for member, state in zip(module.seed_modules()[1:], payload.get("seed_members") or [], strict=False):
        member.load_extra_checkpoint_state(state)


class CheckpointPayload:
    """``RLModule``'s checkpoint methods: Lightning's hooks write and read the rl_lightning payload, and
    ``load_from_checkpoint`` builds a module from a file without running anything in it."""

    renamed_hyperparameters: dict[str, str]

    @classmethod
    def load_from_checkpoint(  # type: ignore[override]
        cls,
        checkpoint_path: str | Path | IO[bytes],
        map_location: Any = None,
        hparams_file: str | Path | None = None,
        strict: bool | None = None,
        trust_remote_code: bool = False,
        **kwargs: Any,
    ) -> Any:
        """The module saved in ``checkpoint_path``, built as Lightning's
        ``load_from_checkpoint`` builds it (the saved hyper-parameters, ``kwargs`` overriding them, then the weights),
        with nothing in the file able to run code:

        - it is read with ``torch.load(weights_only=True)`` (no pickle runs); an empty, text or foreign file
          is a ``ValueError`` saying which, and so is a checkpoint of another algorithm or env;
        - its hyper-parameters are data: the class paths they name (wrappers, ``_class_path``, Lightning's
          ``_instantiator``, ``{"class_path": ...}`` specs) must be on ``rl_lightning.trust``'s allow-list,
          checked before anything is imported, and the module is built as ``cls(**hyper_parameters)``, never by
          jsonargparse; nor may they choose where the process connects or what it runs: ``env_backend="ray"`` and
          compile's ``options`` are left out, with a note (``rl_lightning.trust.local_file_settings``);
        - a value saved under a former name loads under its new one (``cls.upgraded_hyperparameters``).

        Args:
            checkpoint_path: a checkpoint file (or an open binary file).
            map_location: where the weights go (a device or Lightning's ``map_location`` forms; None: the
                CPU, or wherever the saved tensors were).
            hparams_file: a YAML or CSV file of hyper-parameters replacing the checkpoint's (yours: trusted).
            strict: as ``load_state_dict``'s.
            trust_remote_code: the file is yours: take any class path and process-level setting it holds.
            **kwargs: hyper-parameters that replace the checkpoint's (yours: not checked against the list).

        Raises:
            rl_lightning.trust.UntrustedCheckpointError: a ``ValueError`` naming the key, for a class path
                outside the allow-list.
        """
        from lightning.pytorch.core.saving import _load_state, load_hparams_from_tags_csv, load_hparams_from_yaml
        from lightning.pytorch.utilities.migration.utils import _pl_migrate_checkpoint

        check_bool("trust_remote_code", trust_remote_code)
        where = str(checkpoint_path) if isinstance(checkpoint_path, (str, Path)) else "the checkpoint"
        checkpoint = load_checkpoint_file(checkpoint_path, map_location)
        path = checkpoint_path if isinstance(checkpoint_path, (str, Path)) else None
        checkpoint = _pl_migrate_checkpoint(checkpoint, checkpoint_path=path)
        if hparams_file is not None:
            suffix = str(hparams_file).rsplit(".", 1)[-1].lower()
            if suffix not in ("csv", "yml", "yaml"):
                raise ValueError(f"hparams_file must be a .csv, .yml or .yaml file, got {str(hparams_file)!r}")
            load = load_hparams_from_tags_csv if suffix == "csv" else load_hparams_from_yaml
            checkpoint["hyper_parameters"] = dict(load(hparams_file) or {})
        # What the caller passes is theirs; what the file holds is data, checked before anything is built.
        from_file = {
            name: value for name, value in (checkpoint.get("hyper_parameters") or {}).items() if name not in kwargs
        }
        if not trust_remote_code and hparams_file is None:  # and it may not choose where the process connects
            check_file_hyperparameters(from_file, where)
            from_file = local_file_settings(from_file, where)
        for key in ("_instantiator", "_class_path"):  # Lightning's jsonargparse path, which would build class specs
            from_file.pop(key, None)
        checkpoint["hyper_parameters"] = {**from_file, **cls.upgraded_hyperparameters(from_file), **kwargs}
        # A wrapper class path the file holds resolves against the allow-list even at construction.
        trusted = trust_remote_code or hparams_file is not None or "env_kwargs" in kwargs
        with contextlib.nullcontext() if trusted else untrusted(where):
            model = _load_state(cls, checkpoint, strict=strict)
        tensor = next((value for value in checkpoint["state_dict"].values() if isinstance(value, Tensor)), None)
        return model.to(tensor.device) if tensor is not None else model

    @classmethod
    def upgraded_hyperparameters(cls, saved: dict[str, Any]) -> dict[str, Any]:
        """A checkpoint's hyper-parameters ``saved`` as this version spells them: a value saved under a former
        name (``renamed_hyperparameters``) under its new one, the former name gone, with a ``DeprecationWarning``
        (Lightning would drop the unknown name silently); the others as saved."""
        return renamed_in_checkpoint(saved, cls.renamed_hyperparameters, cls.__name__)

    def extra_checkpoint_state(self) -> dict[str, Any]:
        """What the algorithm adds to the checkpoint payload (besides weights and sources)."""
        return {}

    def load_extra_checkpoint_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`extra_checkpoint_state` saved."""

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        save_payload(self, checkpoint)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        load_payload(self, checkpoint)

    def check_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Raise ``ValueError`` if ``checkpoint`` was saved by another algorithm, for another env, with
        other network shapes or (a resume) another ``num_envs``."""
        check_checkpoint_fits(checkpoint, self.algorithm_name(), self.hparams, self.state_dict())
