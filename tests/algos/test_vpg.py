import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger

from rl_lightning import VPGModule
from rl_lightning.data.rollout import RolloutTensors
from rl_lightning.deprecations import RLLightningDeprecationWarning
from rl_lightning.losses import compute_logprobs

SMALL = dict(num_envs=8, num_steps_per_rollout=40, seed=3)


def _trainer(**kwargs) -> L.Trainer:
    defaults = dict(
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    defaults.update(kwargs)
    return L.Trainer(**defaults)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(env_id="Nope-v0"), "native env ids: .* or any gymnasium id"),
        (dict(num_envs=0), "num_envs"),
        (dict(num_envs=2.5), "num_envs"),
        (dict(num_steps_per_rollout=0), "num_steps_per_rollout"),
        (dict(lr=0.0), "lr"),
        (dict(gamma=1.5), "gamma"),
        (dict(rollout_use_count=2), "importance_weighting"),
        (dict(num_batches_per_rollout=2), "importance_weighting"),
        (dict(importance_weighting=True, num_batches_per_rollout=5), "divide num_envs"),
        (dict(importance_weighting=True, iw_clip=1.5), "iw_clip"),
        (dict(anneal_lr=True, lr_end=-1.0), "lr_end"),
        (dict(anneal_lr=True, lr_end=1e-3, lr_frac=0.0), "lr_frac"),
        (dict(hidden_sizes=(0,)), "hidden_sizes"),
        (dict(seed="1"), "seed"),
    ],
)
def test_inconsistent_hyperparameters_raise(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        VPGModule(**kwargs)


def test_hyperparameters_are_saved():
    module = VPGModule(num_envs=16, lr=1e-3, hidden_sizes=[32])
    assert module.hparams.num_envs == 16
    assert module.hparams.lr == 1e-3
    assert module.hparams.hidden_sizes == (32,)
    assert module.policy_network.encoder[0].out_features == 32


def test_same_seed_same_initial_weights():
    first, second = VPGModule(seed=5), VPGModule(seed=5)
    for a, b in zip(first.parameters(), second.parameters(), strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(next(VPGModule(seed=6).parameters()), next(first.parameters()))


def test_act_greedy_and_sampled():
    module = VPGModule(seed=0)
    obs = torch.zeros(5, 4)
    greedy = module.act(obs, greedy=True)
    assert greedy.shape == (5,) and greedy.dtype == torch.int64
    assert torch.equal(greedy, module.policy_network(obs).argmax(-1))
    sampled = module.act(torch.zeros(1000, 4), greedy=False)
    assert set(sampled.unique().tolist()) == {0, 1}


class _RecordingVPG(VPGModule):
    """Records, at each update, how far the batch's recorded logprobs are from the
    logprobs under the weights that are about to be updated."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.staleness: list[float] = []
        self.rollouts_at_step: list[int] = []

    def update_loss(self, batch: RolloutTensors):
        with torch.no_grad():
            current = compute_logprobs(batch.obs, batch.actions, self.policy_network)
        self.staleness.append((current - batch.logprobs).abs().max().item())
        self.rollouts_at_step.append(self.source.num_rollouts)
        return super().update_loss(batch)


def test_rollout_for_step_k_comes_from_weights_after_update_k_minus_1():
    """Strictly on-policy: Lightning must not prefetch the next rollout before the update."""
    module = _RecordingVPG(lr=0.05, **SMALL)
    _trainer(max_steps=6).fit(module)
    assert module.rollouts_at_step == [1, 2, 3, 4, 5, 6]
    # Weights change a lot at lr 0.05, so a one-update-stale rollout would differ by >> 1e-5.
    assert max(module.staleness) < 1e-5, module.staleness


def test_max_epochs_counts_rollouts_and_env_steps():
    module = VPGModule(rollouts_per_epoch=2, **SMALL)
    trainer = _trainer(max_epochs=3)
    trainer.fit(module)
    assert trainer.global_step == 6
    assert module.source.num_rollouts == 6
    assert module.env_steps == 6 * 8 * 40
    assert module.env_steps_per_training_step == 8 * 40


def test_iw_reuse_makes_several_updates_per_rollout():
    module = VPGModule(importance_weighting=True, rollout_use_count=2, num_batches_per_rollout=2, **SMALL)
    trainer = _trainer(max_steps=8)
    trainer.fit(module)
    assert module.source.num_rollouts == 2
    assert module.env_steps_per_training_step == 8 * 40 / 4
    assert "losses/importance_weight" in trainer.callback_metrics


def test_logs_cleanrl_metrics_to_tensorboard(tmp_path):
    logger = TensorBoardLogger(tmp_path, name="run")
    trainer = _trainer(max_steps=3, logger=logger, log_every_n_steps=1)
    trainer.fit(VPGModule(**SMALL))
    metrics = trainer.callback_metrics
    for key in (
        "charts/episodic_return",
        "charts/episodic_length",
        "charts/learning_rate",
        "charts/SPS",
        "charts/env_steps",
        "losses/policy_objective",
    ):
        assert key in metrics, key
    assert metrics["charts/env_steps"].item() == 3 * 8 * 40
    assert metrics["charts/learning_rate"].item() == pytest.approx(2e-2)
    assert metrics["charts/episodic_return"].item() > 0
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(logger.log_dir)
    events.Reload()
    steps = [event.value for event in events.Scalars("charts/env_steps")]
    assert steps == [320.0, 640.0, 960.0]


def test_checkpoint_restores_a_working_policy(tmp_path):
    module = VPGModule(**SMALL)
    trainer = _trainer(max_steps=2, default_root_dir=tmp_path)
    trainer.fit(module)
    path = tmp_path / "vpg.ckpt"
    trainer.save_checkpoint(path)
    restored = VPGModule.load_from_checkpoint(path)
    obs = torch.randn(10, 4)
    torch.testing.assert_close(restored.policy_network(obs), module.policy_network(obs))
    assert restored.hparams.num_steps_per_rollout == 40
    assert restored.env_steps == 2 * 8 * 40


def test_checkpoint_from_another_env_is_rejected(tmp_path):
    trainer = _trainer(max_steps=1)
    trainer.fit(VPGModule(env_id="Probe4-v0", num_envs=4, num_steps_per_rollout=4))
    path = tmp_path / "probe.ckpt"
    trainer.save_checkpoint(path)
    checkpoint = torch.load(path, weights_only=False)
    with pytest.raises(ValueError, match="Probe4-v0"):
        VPGModule(**SMALL).on_load_checkpoint(checkpoint)


def test_lr_decay_callback_is_added_and_keyed_on_env_steps():
    module = VPGModule(anneal_lr=True, lr=1e-2, lr_end=1e-3, lr_frac=0.5, **SMALL)
    seen = []

    class Spy(L.Callback):
        def on_before_optimizer_step(self, trainer, pl_module, optimizer):
            seen.append(trainer.optimizers[0].param_groups[0]["lr"])

    _trainer(max_steps=4, callbacks=[Spy()]).fit(module)
    # Total 4 rollouts; update k (from 0) uses the LR of the k rollouts before it (the seeds'
    # scheduler.step() after optimizer.step()); the decay ends at 1/2 of the run.
    assert seen == pytest.approx([1e-2, 1e-2 + (1e-3 - 1e-2) * 0.5, 1e-3, 1e-3])


def test_act_takes_one_observation_as_an_array():
    """E.g. a gymnasium env's numpy observation: one action back."""
    import numpy as np

    from rl_lightning import DQNModule

    obs = np.array([0.01, -0.02, 0.03, 0.04], dtype=np.float32)
    for module in (VPGModule(seed=0), DQNModule(seed=0)):
        action = module.act(obs, greedy=True)
        assert isinstance(action, np.int64)  # numpy in, numpy out: a numpy int for one Discrete observation
        assert action == module.act(torch.from_numpy(obs).unsqueeze(0), greedy=True).item()


def test_a_checkpoint_saved_under_the_former_hyperparameter_names_loads_with_its_values(tmp_path):
    """use_iw -> importance_weighting, clip_coef -> iw_clip, use_lr_decay -> anneal_lr; lr_end / lr_frac
    saved as None (no decay) take their defaults."""
    module = VPGModule(importance_weighting=True, iw_clip=None, rollout_use_count=2, **SMALL)
    trainer = _trainer(max_steps=2)
    trainer.fit(module)
    path = tmp_path / "old.ckpt"
    trainer.save_checkpoint(path)
    checkpoint = torch.load(path, weights_only=False)
    hparams = checkpoint["hyper_parameters"]
    for old, new in (("use_iw", "importance_weighting"), ("clip_coef", "iw_clip"), ("use_lr_decay", "anneal_lr")):
        hparams[old] = hparams.pop(new)
    hparams["lr_end"] = hparams["lr_frac"] = None
    torch.save(checkpoint, path)
    with pytest.warns(RLLightningDeprecationWarning) as former:
        loaded = VPGModule.load_from_checkpoint(path)
    messages = sorted(str(warning.message).split(":")[0] for warning in former)  # one for each former name
    assert messages == [
        f"the checkpoint's hyper-parameter {old} is VPGModule's {new} now"
        for old, new in (("clip_coef", "iw_clip"), ("use_iw", "importance_weighting"), ("use_lr_decay", "anneal_lr"))
    ]
    assert loaded.hparams.importance_weighting is True and loaded.hparams.iw_clip is None
    assert loaded.hparams.anneal_lr is False and (loaded.hparams.lr_end, loaded.hparams.lr_frac) == (0.0, 1.0)
    assert "use_iw" not in loaded.hparams and loaded.hparams.rollout_use_count == 2
    with pytest.warns(RLLightningDeprecationWarning):
        assert VPGModule.load_from_checkpoint(path, iw_clip=0.1).hparams.iw_clip == 0.1  # the caller's value wins
