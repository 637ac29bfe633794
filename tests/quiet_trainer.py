"""The tests' short fits: a Trainer that writes no logs or checkpoints and prints no bar or summary."""

import lightning as L

QUIET = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False}


def quiet_trainer(**kwargs) -> L.Trainer:
    """``L.Trainer(**kwargs)`` with :data:`QUIET`'s settings unless ``kwargs`` sets them."""
    return L.Trainer(**{**QUIET, **kwargs})


def quiet_fit(module: L.LightningModule, max_steps: int) -> L.Trainer:
    """Fit ``module`` for ``max_steps`` optimizer steps with a :func:`quiet_trainer`; returns the Trainer."""
    trainer = quiet_trainer(max_steps=max_steps)
    trainer.fit(module)
    return trainer
