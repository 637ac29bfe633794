"""compile=True: the classic-control envs' dynamics through torch.compile (CPU inductor), equal to the
eager envs to float rounding, with the eager envs' random streams, state and pickling."""

import copy
import pickle

import pytest
import torch

from rl_lightning.envs import Acrobot, CartPole, MountainCar, MountainCarContinuous, Pendulum, make_envs

# Per env: float32 tolerance on observations and rewards over NUM_STEPS random steps. Acrobot and
# Pendulum are chaotic: a rounding difference grows over an episode (here at most 100 steps; measured
# ~7e-4 and ~7e-3 after 300 steps of one episode); CartPole's and MountainCar's grow less (~2e-5, ~6e-7).
TOLERANCES = {CartPole: 1e-4, Acrobot: 1e-2, MountainCar: 1e-5, MountainCarContinuous: 1e-5, Pendulum: 5e-2}
NUM_STEPS = 300


def _random_actions(env, generator):
    actions = env.random_actions(generator)
    return actions * 1.5 if env.action_kind == "box" else actions  # some out of bounds: clipped


@pytest.mark.parametrize("env_class", list(TOLERANCES), ids=lambda cls: cls.__name__)
def test_compiled_env_equals_the_eager_env(env_class):
    """Same seed, same actions: the compiled env's observations, rewards and final observations equal
    the eager env's to float rounding and its terminated / truncated flags exactly, over NUM_STEPS
    steps with auto-resets (the reset draws are the eager env's: one generator stream)."""
    # A 100-step time limit: every env restarts (from the same eager draws) within the test.
    eager = env_class(16, seed=3, max_episode_steps=100)
    compiled = env_class(16, seed=3, max_episode_steps=100, compile=True)
    assert torch.equal(eager.reset()[0], compiled.reset()[0])
    generator = torch.Generator().manual_seed(4)
    tolerance = TOLERANCES[env_class]
    ends = 0
    for _ in range(NUM_STEPS):
        actions = _random_actions(eager, generator)
        obs, reward, terminated, truncated, info = eager.step(actions)
        c_obs, c_reward, c_terminated, c_truncated, c_info = compiled.step(actions)
        torch.testing.assert_close(c_obs, obs, rtol=0, atol=tolerance)
        torch.testing.assert_close(c_reward, reward, rtol=0, atol=tolerance)
        torch.testing.assert_close(c_info["final_observation"], info["final_observation"], rtol=0, atol=tolerance)
        assert c_terminated.dtype == torch.bool and torch.equal(c_terminated, terminated)
        assert torch.equal(c_truncated, truncated)
        ends += int((terminated | truncated).sum())
    assert compiled.compile_seconds is not None and compiled.compile_seconds > 0
    assert eager.compile_seconds is None
    assert ends > 0  # the auto-reset was exercised
    assert torch.equal(compiled.get_rng_state(), eager.get_rng_state())  # the same draws


def test_compiled_float64_cartpole_state_dict_state_and_pickle():
    """float64, state_dict / load_state_dict, ``env.state = ...``, pickle and deepcopy of a compiled env:
    a copy compiles again lazily (the compiled function is not copied) and continues exactly like the
    original; a compiled float64 CartPole equals the eager one to rounding (~1e-15)."""
    env = CartPole(8, seed=1, dtype=torch.float64, compile=True)
    eager = CartPole(8, seed=1, dtype=torch.float64)
    env.reset(), eager.reset()
    generator = torch.Generator().manual_seed(2)
    for _ in range(30):
        actions = env.random_actions(generator)
        obs, *_ = env.step(actions)
        torch.testing.assert_close(obs, eager.step(actions)[0], rtol=0, atol=1e-12)
    assert env._compiled_dynamics is not None
    saved = env.state_dict()
    clones = [pickle.loads(pickle.dumps(env)), copy.deepcopy(env)]
    restored = CartPole(8, seed=99, dtype=torch.float64, compile=True)
    restored.load_state_dict(saved)
    for clone in clones:
        assert clone._compiled_dynamics is None and clone.compile
    actions = [env.random_actions(generator) for _ in range(20)]
    expected = [env.step(a) for a in actions]
    for other in (*clones, restored):
        for a, (obs, reward, terminated, truncated, _) in zip(actions, expected, strict=True):
            o, r, te, tr, _ = other.step(a)
            assert torch.equal(o, obs) and torch.equal(r, reward)
            assert torch.equal(te, terminated) and torch.equal(tr, truncated)

    # env.state = ... reaches the compiled dynamics: a pole far past 12 degrees terminates.
    state = env.state.clone()
    state[0] = torch.tensor([0.0, 0.0, 0.5, 0.0], dtype=torch.float64)
    env.state = state
    _, _, terminated, _, info = env.step(torch.zeros(8, dtype=torch.int64))
    assert terminated[0] and info["final_observation"][0, 2] == 0.5


def test_make_envs_passes_compile_to_native_envs():
    envs = make_envs("CartPole-v1", 4, seed=0, compile=True)
    assert isinstance(envs, CartPole) and envs.compile
    assert not make_envs("CartPole-v1", 4, seed=0).compile
    assert make_envs("Pendulum-v1", 4, seed=0, compile=True).compile
    with pytest.warns(DeprecationWarning):
        assert make_envs("CartPole-gpu", 4, seed=0, compile=True).compile


def test_compile_for_an_env_without_compiled_dynamics_is_a_value_error():
    with pytest.raises(ValueError, match=r"compile=True applies to native torch envs.*gymnasium env 'CartPole-v1'"):
        make_envs("CartPole-v1", 2, backend="gymnasium", compile=True)
    with pytest.raises(ValueError, match=r"compile=True applies to native torch envs.*'FrozenLake-v1'"):
        make_envs("FrozenLake-v1", 2, compile=True)
    with pytest.raises(ValueError, match=r"compile=True applies to native torch envs.*'Probe1-v0' has none"):
        make_envs("Probe1-v0", 2, compile=True)
    with pytest.raises(TypeError, match="compile must be a bool"):
        make_envs("CartPole-v1", 2, compile="yes")
    with pytest.raises(TypeError, match="compile must be a bool"):
        CartPole(2, compile=1)
