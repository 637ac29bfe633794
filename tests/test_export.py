"""Using a trained policy: exports (torch.export, ONNX, TorchScript) act like the module, a recurrent
one step by step with its state too, evaluate_policy takes a module, an exported policy, an env id or
a gymnasium env, and validate/test run greedy episodes."""

import warnings

import gymnasium as gym
import lightning as L
import numpy as np
import onnxruntime
import pytest
import torch

from rl_lightning import DQNModule, PPOModule, SACModule, TD3Module, VPGModule
from rl_lightning.callbacks import evaluate_policy
from rl_lightning.envs.probes import ImageProbe5

SUFFIXES = (".pt2", ".onnx", ".pt")
OFF_POLICY = dict(learning_starts=16, batch_size=16)


def _trained(cls, env_id="CartPole-v1", **kwargs):
    defaults = {
        "DQNModule": OFF_POLICY,
        "SACModule": {**OFF_POLICY, "hidden_sizes": (16, 16)},
        "TD3Module": {**OFF_POLICY, "hidden_sizes": (16, 16)},
    }
    module = cls(env_id=env_id, num_envs=4, **{**defaults.get(cls.__name__, dict(num_steps_per_rollout=8)), **kwargs})
    L.Trainer(max_steps=4, logger=False, enable_checkpointing=False, enable_progress_bar=False).fit(module)
    return module


def _load(path):
    """The exported policy at ``path`` as a function of tensors, run by what its format needs."""
    if path.suffix == ".pt2":
        return torch.export.load(path).module()
    if path.suffix == ".pt":
        with warnings.catch_warnings():  # torch >= 2.10 deprecates torch.jit.load: the user's call, not ours
            warnings.simplefilter("ignore", DeprecationWarning)
            return torch.jit.load(str(path))
    session = onnxruntime.InferenceSession(str(path))
    names = [graph_input.name for graph_input in session.get_inputs()]

    def run(*inputs):
        outputs = session.run(None, {name: tensor.numpy() for name, tensor in zip(names, inputs, strict=True)})
        outputs = tuple(torch.from_numpy(output) for output in outputs)
        return outputs if len(outputs) > 1 else outputs[0]

    return run


CASES = [
    (VPGModule, "CartPole-v1", {}),
    (DQNModule, "CartPole-v1", {}),
    (PPOModule, "CartPole-v1", {"normalize_obs": True}),  # the normaliser is part of the export
    (PPOModule, "Pendulum-v1", {}),  # a Box action: the mean
    (VPGModule, "ImageProbe5-v0", {}),  # uint8 images through the CNN
    (SACModule, "Pendulum-v1", {}),  # the squashed mean, in the bounds
    (TD3Module, "Pendulum-v1", {}),
]


def _observations(module, batch):
    if module.obs_dtype == torch.uint8:
        return ImageProbe5._image(torch.randint(0, 2, (batch, 1)).float())
    return torch.randn(batch, *module.obs_shape)


@pytest.mark.parametrize(("cls", "env_id", "kwargs"), CASES, ids=lambda v: getattr(v, "__name__", str(v)))
def test_every_format_gives_the_modules_greedy_actions(tmp_path, cls, env_id, kwargs):
    module = _trained(cls, env_id, **kwargs)
    policies = {suffix: _load(module.export_policy(tmp_path / f"policy{suffix}")) for suffix in SUFFIXES}
    policies["to_torchscript"] = module.to_torchscript()
    for batch in (9, 1):  # other batch sizes than the one exported with
        obs = _observations(module, batch)
        expected = module.act(obs, greedy=True)
        for name, policy in policies.items():
            actions = policy(obs)
            assert actions.dtype == expected.dtype and actions.shape == expected.shape, name
            torch.testing.assert_close(actions, expected, atol=1e-5, rtol=1e-5, msg=name)


RECURRENT_CASES = [
    ("CartPole-v1", {"recurrent": "lstm", "normalize_obs": True}),
    ("Pendulum-v1", {"recurrent": "gru"}),  # a Box action
]


@pytest.mark.parametrize(("env_id", "kwargs"), RECURRENT_CASES, ids=["lstm-CartPole", "gru-Pendulum"])
def test_a_recurrent_export_steps_like_act_with_its_state(tmp_path, env_id, kwargs):
    module = _trained(PPOModule, env_id, core_size=8, **kwargs)
    num_envs, num_steps = 3, 6
    observations = torch.randn(num_steps, num_envs, *module.obs_shape)
    episode_starts = torch.zeros(num_steps, num_envs, dtype=torch.bool)
    episode_starts[0] = True
    episode_starts[3, 1] = True  # env 1 starts a new episode in the middle: its state is zeroed
    for suffix in SUFFIXES:
        policy = _load(module.export_policy(tmp_path / f"policy{suffix}"))
        state = expected_state = torch.zeros(module.model.num_state, num_envs, module.model.core_size)
        for obs, episode_start in zip(observations, episode_starts, strict=True):
            expected, expected_state = module.act(obs, greedy=True, state=expected_state, episode_start=episode_start)
            actions, state = policy(obs, state, episode_start)
            torch.testing.assert_close(actions, expected, atol=1e-5, rtol=1e-5, msg=suffix)
            torch.testing.assert_close(state, expected_state, atol=1e-5, rtol=1e-5, msg=suffix)
        assert state.abs().sum() > 0  # it carried a state, not zeros
    expected = module.act(observations[0], greedy=True, state=state, episode_start=episode_starts[3])
    torch.testing.assert_close(module.to_torchscript()(observations[0], state, episode_starts[3]), expected)


def test_export_emits_no_warnings(tmp_path):
    modules = [VPGModule(env_id="ImageProbe5-v0", num_envs=2), PPOModule(recurrent="lstm", core_size=8, num_envs=4)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # over pytest's own filters, which ignore DeprecationWarning
        for module in modules:
            for suffix in SUFFIXES:
                module.export_policy(tmp_path / f"{type(module).__name__}{suffix}")
            module.to_torchscript()
    assert [f"{w.category.__name__}: {w.message}" for w in caught] == []


def test_export_needs_a_known_format(tmp_path):
    module = VPGModule()
    with pytest.raises(ValueError, match=r"cannot tell the format.*\.onnx.*\.pt2"):
        module.export_policy(tmp_path / "policy.zip")
    with pytest.raises(ValueError, match=r"format must be one of \['export', 'onnx', 'torchscript'\].*'zip'"):
        module.export_policy(tmp_path / "policy.pt", format="zip")
    # format= overrides the suffix
    obs = torch.randn(3, 4)
    exported = _load(module.export_policy(tmp_path / "policy.pt", format="export").rename(tmp_path / "policy.pt2"))
    torch.testing.assert_close(exported(obs), module.act(obs, greedy=True))


def test_evaluate_policy_takes_a_module_an_exported_policy_an_id_or_a_gymnasium_env(tmp_path):
    module = VPGModule(env_id="Probe5-v0", num_envs=4, num_steps_per_rollout=16, lr=5e-3, normalize_returns=False)
    L.Trainer(max_steps=80, logger=False, enable_checkpointing=False, enable_progress_bar=False).fit(module)
    exported = [_load(module.export_policy(tmp_path / f"probe5{suffix}")) for suffix in SUFFIXES]
    for policy in (module, *exported):
        assert evaluate_policy(policy, "Probe5-v0", num_episodes=16).returns.tolist() == [1.0] * 16
    # CartPole: gymnasium's own env (episodes one after another) against the native torch env
    cartpole = _trained(VPGModule)
    on_gymnasium = evaluate_policy(cartpole, gym.make("CartPole-v1"), num_episodes=4, seed=0)
    assert on_gymnasium.returns.shape == (4,) and (on_gymnasium.returns == on_gymnasium.lengths).all()
    via_adapter = evaluate_policy(cartpole, "CartPole-v1", num_episodes=4, seed=0)
    assert via_adapter.returns.shape == (4,)
    with pytest.raises(TypeError, match="env must be"):
        evaluate_policy(cartpole, 3)


def test_gymnasium_env_episodes_match_a_hand_run(tmp_path):
    env = gym.make("CartPole-v1")
    always_left = lambda obs: torch.zeros(obs.shape[0], dtype=torch.int64)  # noqa: E731
    result = evaluate_policy(always_left, env, num_episodes=3, seed=5)
    env.reset(seed=5)
    lengths = []
    for episode in range(3):
        if episode:
            env.reset()
        steps, done = 0, False
        while not done:
            _, _, terminated, truncated, _ = env.step(0)
            steps += 1
            done = terminated or truncated
        lengths.append(steps)
    assert result.lengths.tolist() == lengths


@pytest.mark.parametrize("cls", [VPGModule, DQNModule, PPOModule])
def test_validate_and_test_run_greedy_episodes(cls):
    module = _trained(cls, "Probe3-v0")
    trainer = L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False)
    [validated] = trainer.validate(module, verbose=False)
    [tested] = trainer.test(module, verbose=False)
    assert validated["eval/episodic_return"] == 1.0 and validated["eval/episodic_length"] == 2.0
    assert tested["test/episodic_return"] == 1.0 and np.isfinite(tested["test/episodic_return_std"])


def test_an_export_into_a_directory_that_cannot_be_written_is_one_clear_oserror(tmp_path, monkeypatch):
    import tempfile

    module = VPGModule(num_envs=2, num_steps_per_rollout=4)

    def read_only(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    with pytest.raises(OSError, match=r"cannot write the export .*policy\.onnx: Permission denied"):
        module.export_policy(tmp_path / "policy.onnx")
    monkeypatch.undo()
    (tmp_path / "policy.pt").write_bytes(b"the previous export")

    def failing_save(*args, **kwargs):
        raise RuntimeError("the writer failed")

    monkeypatch.setattr(torch.jit.ScriptModule, "save", failing_save)
    with pytest.raises(RuntimeError, match="the writer failed"):
        module.export_policy(tmp_path / "policy.pt")
    assert (tmp_path / "policy.pt").read_bytes() == b"the previous export"  # never half-written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["policy.pt"]  # no temporary file left
