"""The same contract on a CUDA device: one device convention, no host syncs in the loops, training,
acting and evaluation on the GPU. Skipped (with the reason) where no CUDA device is present; CI has
none: benchmarks/gpu.sh runs these on a GPU machine."""

import lightning as L
import pytest
import torch

from rl_lightning import DQNModule, PPOModule, VPGModule
from rl_lightning.callbacks import evaluate_policy
from rl_lightning.envs import Acrobot, CartPole, MountainCar, MountainCarContinuous, make_envs, registered_env_ids

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize("device", ["cuda", "cuda:0"])
@pytest.mark.parametrize("env_id", registered_env_ids())
def test_cuda_and_cuda_0_are_the_same_device(env_id, device):
    envs = make_envs(env_id, 16, seed=0, device=device)
    assert envs.device == torch.device("cuda", torch.cuda.current_device())
    envs.reset()
    for actions_device in ("cuda", "cuda:0"):
        actions = envs.random_actions(torch.Generator(device="cuda").manual_seed(0)).to(actions_device)
        obs, reward, terminated, truncated, info = envs.step(actions)
        assert obs.is_cuda and reward.is_cuda and terminated.is_cuda and truncated.is_cuda
        assert info["final_observation"].is_cuda


@pytest.mark.parametrize("env_id", registered_env_ids())
def test_env_steps_do_not_synchronise_with_the_host(env_id):
    envs = make_envs(env_id, 1024, seed=0, device="cuda")
    generator = torch.Generator(device="cuda").manual_seed(0)
    envs.reset()
    envs.step(envs.random_actions(generator))  # the first step checks action values (one sync)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(600):  # past every time limit, so resets happen
            envs.step(envs.random_actions(generator))
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.parametrize(
    ("cls", "kwargs"),
    [
        (VPGModule, dict(num_envs=64, num_steps_per_rollout=50)),
        (PPOModule, dict(num_envs=64, num_steps_per_rollout=16, normalize_obs=True)),
        (DQNModule, dict(num_envs=64, learning_starts=256, batch_size=64)),
    ],
)
def test_collecting_data_does_not_synchronise_with_the_host(cls, kwargs):
    module = cls(**kwargs).to("cuda")
    source = module.make_source(make_envs("CartPole-v1", kwargs["num_envs"], seed=0, device="cuda"))
    source.next_batch()  # the first step of the envs checks action values
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(5):
            source.next_batch()
    finally:
        torch.cuda.set_sync_debug_mode("default")


class _DevicesDuringFit(L.Callback):
    """Records the module's and its data source's devices at every training batch."""

    def __init__(self):
        self.seen = set()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.seen.add((pl_module.device, pl_module.source.device))


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
@pytest.mark.parametrize(
    ("cls", "kwargs"),
    [
        (VPGModule, dict(num_envs=32, num_steps_per_rollout=50)),
        (PPOModule, dict(num_envs=32, num_steps_per_rollout=16)),
        (DQNModule, dict(num_envs=16, learning_starts=64, batch_size=64)),
    ],
)
def test_fit_act_evaluate_and_export_on_the_gpu(cls, kwargs, precision, tmp_path):
    """During fit the module, its envs and buffers share the GPU; Lightning's teardown then moves
    the module to the CPU, where act, evaluation and export work, and back with ``.to("cuda")``."""
    module = cls(**kwargs)
    devices = _DevicesDuringFit()
    trainer = L.Trainer(
        accelerator="gpu",
        devices=1,
        max_steps=8,
        precision=precision,
        logger=False,
        enable_checkpointing=False,
        callbacks=[devices],
    )
    trainer.fit(module)
    cuda = torch.device("cuda", torch.cuda.current_device())
    assert devices.seen == {(cuda, cuda)}
    assert module.device.type == "cpu"  # Lightning's strategy teardown
    obs = torch.randn(6, 4)
    scripted = torch.jit.load(str(module.export_policy(tmp_path / "policy.pt")))
    assert torch.equal(scripted(obs), module.act(obs, greedy=True))
    assert (evaluate_policy(module, module.make_envs(8, 0)).returns >= 1).all()

    module.to("cuda")
    actions = module.act(torch.zeros(5, 4), greedy=True)  # a CPU observation is moved
    assert actions.device == cuda and actions.shape == (5,)
    result = evaluate_policy(module, module.make_envs(8, 0))
    assert result.returns.is_cuda and (result.returns >= 1).all()


@pytest.mark.learning
def test_dqn_solves_cartpole_on_the_gpu_greedy_mean_return_at_least_475_over_32_episodes():
    from lightning.pytorch.callbacks import EarlyStopping

    from rl_lightning.callbacks import Evaluation

    evaluation = Evaluation(every_n_env_steps=4_000, num_eval_episodes=32)
    stop = EarlyStopping(
        monitor="eval/episodic_return",
        stopping_threshold=475,
        mode="max",
        patience=10**9,
        check_on_train_epoch_end=True,
    )
    trainer = L.Trainer(
        accelerator="gpu",
        devices=1,
        max_steps=5_000,
        logger=False,
        enable_checkpointing=False,
        callbacks=[evaluation, stop],
    )
    trainer.fit(DQNModule(seed=0))
    assert evaluation.last_metrics["eval/episodic_return"] >= 475


@pytest.mark.parametrize(
    "make",
    [
        lambda compile: DQNModule(seed=3, learning_starts=200, steps_per_epoch=20, compile=compile),
        lambda compile: PPOModule(seed=1, num_envs=8, num_steps_per_rollout=16, anneal_lr=True, compile=compile),
    ],
    ids=["dqn", "ppo"],
)
def test_the_whole_update_compiled_on_the_gpu_matches_eager(make):
    """compile={"whole_update": True} on CUDA (never run in CI: benchmarks/gpu.sh's CUDA tests): the same updates as
    the eager run to float tolerance, as on the CPU (tests/algos/test_compile_whole_update.py)."""
    runs = []
    for compile in (False, {"whole_update": True}):
        module = make(compile)
        trainer = L.Trainer(
            max_steps=16, accelerator="cuda", devices=1, logger=False, enable_checkpointing=False,
            enable_progress_bar=False, enable_model_summary=False,
        )  # fmt: skip
        trainer.fit(module)
        runs.append(module)
    eager, whole = runs
    assert whole.global_step == eager.global_step == 16 and whole.env_steps == eager.env_steps
    buffers = [getattr(module.source, "buffer", None) for module in runs]
    if buffers[0] is not None:
        # The data first: with compile=True the envs step compiled on CUDA (rounding their observations differently
        # from the eager envs), and an argmax near a tie may then pick another action, after which the two runs
        # learn from different transitions and their weights legitimately part (not the update's arithmetic).
        size = buffers[0].size
        actions = [buffer.actions[:size] for buffer in buffers]
        differing = (actions[0] != actions[1]).nonzero()
        assert differing.numel() == 0, f"the runs' transitions part at slot {differing[0].tolist()} of {size}"
        torch.testing.assert_close(buffers[1].obs[:size], buffers[0].obs[:size], rtol=1e-5, atol=1e-5)
    for name, weight in eager.state_dict().items():
        torch.testing.assert_close(whole.state_dict()[name], weight, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("env_class", [CartPole, Acrobot, MountainCar, MountainCarContinuous], ids=lambda c: c.__name__)
def test_the_fused_env_step_on_the_gpu_equals_eager(env_class):
    """The training path's env on CUDA (``compile=True``: the whole step one compiled function, resets drawn for every
    env on every step from the env's own generator): the eager env's flags exactly, its observations to float
    rounding, and the same generator state after 150 steps with time limits (tests/envs/test_compile.py on the CPU)."""
    eager = env_class(64, seed=3, device="cuda", max_episode_steps=50)
    compiled = env_class(64, seed=3, device="cuda", max_episode_steps=50, compile=True)
    assert torch.equal(eager.reset()[0], compiled.reset()[0])
    generator = torch.Generator(device="cuda").manual_seed(4)
    for _ in range(150):
        actions = eager.random_actions(generator)
        obs, reward, terminated, truncated, info = eager.step(actions)
        c_obs, c_reward, c_terminated, c_truncated, c_info = compiled.step(actions)
        torch.testing.assert_close(c_obs, obs, rtol=0, atol=1e-2)
        torch.testing.assert_close(c_reward, reward, rtol=0, atol=1e-2)
        torch.testing.assert_close(c_info["final_observation"], info["final_observation"], rtol=0, atol=1e-2)
        assert torch.equal(c_terminated, terminated) and torch.equal(c_truncated, truncated)
    assert compiled._compiled_step is not None
    assert torch.equal(compiled.get_rng_state(), eager.get_rng_state())
