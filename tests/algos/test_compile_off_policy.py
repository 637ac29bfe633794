"""``compile=True`` for DQN, SAC and TD3: the compiled update gives the eager update's losses and weights.

DQN's update runs through inductor (the default ``torch.compile`` backend: generated C++ kernels, float
tolerance); SAC's and TD3's through ``aot_eager`` (the same traced forward and backward graphs, run by eager
kernels), which keeps this file's compile time to seconds on CI's two cores.
"""

import copy
import os
import pickle
from pathlib import Path

import lightning as L
import pytest
import torch

from rl_lightning import DQNModule, SACModule, TD3Module
from rl_lightning.algos.dqn import dqn_loss
from rl_lightning.compiling import CompiledFunctions, check_compile

STEPS = 40


class _Losses(L.Callback):
    def __init__(self):
        self.losses = []

    def on_update_end(self, trainer, pl_module, loss):  # every update
        self.losses.append(float(loss))


def _fit(module):
    losses = _Losses()
    trainer = L.Trainer(
        max_steps=STEPS,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=10,
        callbacks=[losses],
    )
    trainer.fit(module)
    return torch.tensor(losses.losses), module


def _assert_same_run(eager, compiled, rtol, atol):
    (eager_losses, eager_module), (compiled_losses, compiled_module) = eager, compiled
    assert len(eager_losses) == len(compiled_losses) == STEPS
    torch.testing.assert_close(compiled_losses, eager_losses, rtol=rtol, atol=1e-6)
    eager_weights, compiled_weights = eager_module.state_dict(), compiled_module.state_dict()
    assert eager_weights.keys() == compiled_weights.keys()
    for name, weight in eager_weights.items():
        torch.testing.assert_close(compiled_weights[name], weight, rtol=rtol, atol=atol, msg=name)
    # The same transitions were collected (the actions are the networks' choices: they did not flip).
    eager_buffer, compiled_buffer = eager_module.source.buffer, compiled_module.source.buffer
    torch.testing.assert_close(compiled_buffer.actions, eager_buffer.actions, rtol=rtol, atol=atol)


def test_dqn_compiled_update_matches_eager():
    def make(compile):
        return DQNModule(seed=3, learning_starts=200, steps_per_epoch=20, compile=compile)

    eager, compiled = _fit(make(False)), _fit(make(True))
    _assert_same_run(eager, compiled, rtol=1e-4, atol=1e-5)
    # The first call compiled, and was timed; 16 CartPole envs step eagerly on the CPU (cpu_compile_min_envs).
    assert set(compiled[1].compile_seconds) == {"dqn_loss"} and compiled[1].compile_seconds["dqn_loss"] > 0
    assert not compiled[1].source.envs.compile
    assert eager[1].compile_seconds == {}
    assert compiled[1].hparams.compile is True


@pytest.mark.parametrize(
    ("algorithm", "settings", "compiles_env"),
    [
        (DQNModule, dict(env_id="Acrobot-v1"), True),  # compiled dynamics win on the CPU at any size
        (DQNModule, dict(num_envs=4_096, buffer_size=40_960, learning_starts=4_096), True),  # CartPole from 4,096
        (DQNModule, dict(), False),  # 16 CartPole envs: a compiled call costs what fusing saves
        (SACModule, dict(), False),  # Pendulum's eager dynamics are a dozen ops
        (DQNModule, dict(env_id="Probe1-v0"), False),  # no compiled dynamics
    ],
)
def test_compile_reaches_the_training_envs_where_it_wins(algorithm, settings, compiles_env):
    module = algorithm(compile=True, **settings)
    module.train_dataloader()  # builds the training envs (they compile at their first step)
    assert getattr(module.source.envs, "compile", False) is compiles_env
    eager = algorithm(**settings)
    eager.train_dataloader()
    assert not getattr(eager.source.envs, "compile", False)


def test_compile_with_a_gymnasium_env_compiles_the_update_only():
    module = DQNModule(seed=0, env_backend="gymnasium", learning_starts=64, compile={"backend": "aot_eager"})
    _fit(module)
    assert set(module.compile_seconds) == {"dqn_loss"}


@pytest.mark.parametrize("algorithm", [SACModule, TD3Module])
def test_continuous_compiled_update_matches_eager(algorithm):
    def make(compile):
        return algorithm(seed=1, learning_starts=300, steps_per_epoch=20, hidden_sizes=(32, 32), compile=compile)

    # The compiled losses, stepped by the eager optimizer: equal to eager to 1e-6 (the default whole update's own
    # Adam rounds differently: tests/algos/test_compile_whole_update.py).
    eager, compiled = _fit(make(False)), _fit(make({"backend": "aot_eager", "whole_update": False}))
    _assert_same_run(eager, compiled, rtol=1e-6, atol=1e-6)
    update = {SACModule: "sac_losses", TD3Module: "td3_losses"}[algorithm]
    assert set(compiled[1].compile_seconds) == {update}


def test_dqn_loss_is_the_training_step_loss():
    module = DQNModule(seed=0, num_envs=2, batch_size=8, learning_starts=8)
    source = module.make_source(module.make_envs(2, 0))
    source.configure_run(0, 1, 0)
    module.source = source
    batch = source.next_batch()
    loss, q_mean = dqn_loss(module.q_network, module.target_network, batch, 0.99, None, True, "mse")
    assert torch.equal(module.training_step(batch, 0), loss)
    q_values = module.q_network(batch.obs).gather(1, batch.actions.unsqueeze(1)).squeeze(1)
    torch.testing.assert_close(q_mean, q_values.mean())
    assert not q_mean.requires_grad and loss.requires_grad


def test_compile_argument_is_checked():
    assert check_compile(False) is None
    assert check_compile(True) == {}
    assert check_compile({"mode": "max-autotune"}) == {"mode": "max-autotune"}
    with pytest.raises(TypeError, match="compile must be a bool or a dict"):
        DQNModule(compile="yes")
    with pytest.raises(ValueError, match=r"compile got unknown torch.compile arguments \['modes'\]"):
        SACModule(compile={"modes": "max-autotune"})


@pytest.mark.parametrize(
    ("compile_arguments", "error", "words"),
    [
        ({"dynamic": "yes"}, TypeError, "compile's dynamic must be True, False or None, got str 'yes'"),
        ({"fullgraph": 1}, TypeError, "compile's fullgraph must be True or False, got int 1"),
        ({"options": "max-autotune"}, TypeError, "compile's options must be a dict .* got str 'max-autotune'"),
        ({"options": {1: True}}, TypeError, "compile's options must be a dict of inductor settings with str keys"),
        ({"options": {"max_autotun": True}}, ValueError, r"unknown inductor settings \['max_autotun'\]"),
        ({"options": {"max_autotune": "yes"}}, TypeError, "max_autotune, got str should be bool"),
        ({"mode": 3}, TypeError, "compile's mode must be a str such as 'max-autotune', got int 3"),
        ({"backend": 3}, TypeError, "compile's backend must be a str such as 'inductor' or a callable, got int 3"),
    ],
)
def test_compile_arguments_types_are_checked_at_construction(compile_arguments, error, words):
    # Each of these used to pass the constructor and crash inside the first update.
    with pytest.raises(error, match=words):
        DQNModule(compile=compile_arguments)


def test_compile_arguments_of_the_right_types_pass():
    def backend(graph, inputs):
        return graph

    arguments = {"dynamic": None, "fullgraph": True, "options": {"max_autotune": False}}
    assert check_compile(arguments) == arguments
    assert check_compile({"dynamic": True, "backend": backend})["backend"] is backend
    # A backend other than inductor takes options of its own: not inductor's names.
    assert check_compile({"backend": "eager", "options": {"anything": 1}})["options"] == {"anything": 1}


def test_compiled_functions_are_not_pickled_or_copied():
    compiled = CompiledFunctions({"backend": "eager"})

    def double(x):
        return 2 * x

    assert torch.equal(compiled(double)(torch.ones(2)), torch.full((2,), 2.0))
    assert "double" in compiled.compile_seconds
    for other in (pickle.loads(pickle.dumps(compiled)), copy.deepcopy(compiled)):
        assert other.options == {"backend": "eager"} and other._functions == {} and other.compile_seconds == {}
    off = CompiledFunctions(None)
    assert off(double) is double and not off.enabled


def test_each_module_compiles_its_own_copy_of_a_function():
    """Dynamo's recompilation limit is per code object: each module's compiled functions are copies of their own
    (``compiling.torch_compile``), so the modules of one process never exhaust one another's (a shared code object
    fails here under fullgraph=True at the second shape, with a limit of 1)."""

    def double(x):
        return 2 * x

    with torch._dynamo.config.patch(recompile_limit=1):
        for size in (1, 2, 3):
            compiled = CompiledFunctions({"backend": "eager", "fullgraph": True})
            assert torch.equal(compiled(double)(torch.ones(size)), torch.full((size,), 2.0))


def test_own_copies_are_a_code_object_per_module_and_name():
    """``own_copy``: each module's own code object of a function (dynamo's recompilation limit is per code object,
    so the runs of one process never exhaust each other's), the same one for the same name, named by it."""
    first, second = CompiledFunctions({"backend": "eager"}), CompiledFunctions({"backend": "eager"})

    def triple(x):
        return 3 * x

    assert torch.equal(first.own_copy(triple, "triple_for_a")(torch.ones(2)), torch.full((2,), 3.0))
    assert list(first.compile_seconds) == ["triple_for_a"]
    compiled = first.own_copy(triple, "triple_for_a")  # after the first call: the compiled function itself
    assert first.own_copy(triple, "triple_for_a") is compiled and compiled(torch.ones(1)) == 3
    second.own_copy(triple, "triple_for_a"), first.own_copy(triple, "triple_for_b")
    copies = [first._own_copies["triple_for_a"], first._own_copies["triple_for_b"], second._own_copies["triple_for_a"]]
    assert len({id(code) for code in [triple.__code__, *(function.__code__ for function in copies)]}) == 4
    assert [function.__code__.co_name for function in copies] == ["triple_for_a", "triple_for_b", "triple_for_a"]
    assert pickle.loads(pickle.dumps(first))._own_copies == {}


def test_inductor_cache_is_kept_per_cpu_kernel_set(monkeypatch, tmp_path):
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    from rl_lightning.compiling import use_capability_cache_dir

    default = str(Path(default_cache_dir()).absolute())
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", default)  # what importing Lightning leaves there
    use_capability_cache_dir()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == f"{default}_{torch.backends.cpu.get_cpu_capability()}"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))  # a folder the user chose stays
    use_capability_cache_dir()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path)
