"""Using a trained policy: TorchScript and ONNX exports act like the module, evaluate_policy takes
a module, an exported policy, an env id or a gymnasium env, and validate/test run greedy episodes."""

import gymnasium as gym
import lightning as L
import numpy as np
import onnxruntime
import pytest
import torch

from rl_lightning import DQNModule, PPOModule, VPGModule
from rl_lightning.callbacks import evaluate_policy
from rl_lightning.envs.probes import ImageProbe5


def _trained(cls, env_id="CartPole-v1", **kwargs):
    defaults = {"DQNModule": dict(learning_starts=16, batch_size=16), "PPOModule": dict(num_steps_per_rollout=8)}
    module = cls(env_id=env_id, num_envs=4, **{**defaults.get(cls.__name__, dict(num_steps_per_rollout=8)), **kwargs})
    L.Trainer(max_steps=4, logger=False, enable_checkpointing=False, enable_progress_bar=False).fit(module)
    return module


CASES = [
    (VPGModule, "CartPole-v1", {}),
    (DQNModule, "CartPole-v1", {}),
    (PPOModule, "CartPole-v1", {"normalize_obs": True}),  # the normaliser is part of the export
    (PPOModule, "Pendulum-v1", {}),  # a Box action: the mean
    (VPGModule, "ImageProbe5-v0", {}),  # uint8 images through the CNN
]


def _observations(module, batch):
    if module.obs_dtype == torch.uint8:
        return ImageProbe5._image(torch.randint(0, 2, (batch, 1)).float())
    return torch.randn(batch, *module.obs_shape)


@pytest.mark.parametrize(("cls", "env_id", "kwargs"), CASES, ids=lambda v: getattr(v, "__name__", str(v)))
def test_torchscript_and_onnx_exports_give_the_modules_greedy_actions(tmp_path, cls, env_id, kwargs):
    module = _trained(cls, env_id, **kwargs)
    obs = _observations(module, 9)  # another batch size than the one traced with
    expected = module.act(obs, greedy=True)

    scripted = torch.jit.load(str(module.export_policy(tmp_path / "policy.pt")))
    torch.testing.assert_close(scripted(obs), expected)

    session = onnxruntime.InferenceSession(str(module.export_policy(tmp_path / "policy.onnx")))
    actions = session.run(None, {"obs": obs.numpy()})[0]
    torch.testing.assert_close(torch.from_numpy(actions), expected, atol=1e-5, rtol=1e-5)

    torch.testing.assert_close(module.to_torchscript()(obs), expected)


def test_export_needs_a_known_format(tmp_path):
    with pytest.raises(ValueError, match=r"cannot tell the format.*\.onnx"):
        VPGModule().export_policy(tmp_path / "policy.zip")


def test_evaluate_policy_takes_a_module_an_exported_policy_an_id_or_a_gymnasium_env(tmp_path):
    module = VPGModule(env_id="Probe5-v0", num_envs=4, num_steps_per_rollout=16, lr=5e-3, normalize_returns=False)
    L.Trainer(max_steps=80, logger=False, enable_checkpointing=False, enable_progress_bar=False).fit(module)
    exported = torch.jit.load(str(module.export_policy(tmp_path / "probe5.pt")))
    for policy in (module, exported):
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
