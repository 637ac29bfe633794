"""compile=True: the classic-control envs' dynamics through torch.compile (CPU inductor), equal to the
eager envs to float rounding, with the eager envs' random streams, state and pickling."""

import copy
import pickle

import pytest
import torch

from rl_lightning.envs import (
    Acrobot,
    CartPole,
    ContinuousProbe1,
    ContinuousProbe2,
    ImageProbe5,
    MountainCar,
    MountainCarContinuous,
    Pendulum,
    Probe1,
    Probe2,
    Probe3,
    Probe4,
    Probe5,
    make_envs,
)
from rl_lightning.envs.cartpole import resets_drawn_in_order

# Per env: float32 tolerance on observations and rewards over NUM_STEPS random steps. Acrobot and
# Pendulum are chaotic: a rounding difference grows over an episode (here at most 100 steps; measured
# ~7e-4 and ~7e-3 after 300 steps of one episode); CartPole's and MountainCar's grow less (~2e-5, ~6e-7).
TOLERANCES = {CartPole: 1e-4, Acrobot: 1e-2, MountainCar: 1e-5, MountainCarContinuous: 1e-5, Pendulum: 5e-2}
NUM_STEPS = 300


def _random_actions(env, generator):
    actions = env.random_actions(generator)
    return actions * 1.5 if env.action_kind == "box" else actions  # some out of bounds: clipped


def _sync_free(env):
    """CartPole with the reset it has off the CPU: fresh states drawn for every env on every step."""
    env.sync_free = True
    return env


# (env class, sync-free CartPole): CartPole (both resets: the CPU's index-based one from a draw for every env
# taken in its order), Acrobot and the MountainCars fuse the whole step; Pendulum's compiled dynamics are its
# whole step between the resets every env takes on the same step.
CASES = [(env_class, False) for env_class in TOLERANCES] + [(CartPole, True)]
FUSED = {CartPole, Acrobot, MountainCar, MountainCarContinuous}


@pytest.mark.parametrize(("env_class", "sync_free"), CASES, ids=lambda case: getattr(case, "__name__", f"{case}"))
def test_compiled_env_equals_the_eager_env(env_class, sync_free):
    """Same seed, same actions: the compiled env's observations, rewards and final observations equal
    the eager env's to float rounding and its terminated / truncated flags exactly, over NUM_STEPS
    steps with auto-resets (the reset draws are the eager env's: one generator stream)."""
    # A 100-step time limit: every env restarts (from the same eager draws) within the test.
    eager = env_class(16, seed=3, max_episode_steps=100)
    compiled = env_class(16, seed=3, max_episode_steps=100, compile=True)
    if sync_free:
        eager, compiled = _sync_free(eager), _sync_free(compiled)
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
    fused = env_class in FUSED or sync_free
    assert (compiled._compiled_step is not None) == fused  # the whole step is one compiled function
    assert (compiled._compiled_dynamics is not None) == (not fused)
    assert eager._compiled_step is None and eager._compiled_dynamics is None
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
    assert env._compiled_step is not None  # the fused step (the CPU's reset from a draw in its order)
    saved = env.state_dict()
    clones = [pickle.loads(pickle.dumps(env)), copy.deepcopy(env)]
    restored = CartPole(8, seed=99, dtype=torch.float64, compile=True)
    restored.load_state_dict(saved)
    for clone in clones:
        assert clone._compiled_step is None and clone.compile
    actions = [env.random_actions(generator) for _ in range(20)]
    expected = [env.step(a) for a in actions]
    for other in (*clones, restored):
        for a, (obs, reward, terminated, truncated, _) in zip(actions, expected, strict=True):
            o, r, te, tr, _ = other.step(a)
            assert torch.equal(o, obs) and torch.equal(r, reward)
            assert torch.equal(te, terminated) and torch.equal(tr, truncated)

    # env.state = ... reaches the fused step: a pole far past 12 degrees terminates.
    state = env.state.clone()
    state[0] = torch.tensor([0.0, 0.0, 0.5, 0.0], dtype=torch.float64)
    env.state = state
    _, _, terminated, _, info = env.step(torch.zeros(8, dtype=torch.int64))
    assert terminated[0] and info["final_observation"][0, 2] == 0.5


def test_the_fused_step_keeps_the_state_dict_copies_and_fresh_observations():
    """A fused compiled env (Acrobot, float64: equal to eager to ~1e-12): its copies (pickle, deepcopy) and an env
    restored from its ``state_dict`` continue exactly as it does (the clock the fused step reads follows the
    restored one); its observations are fresh memory (writing into one leaves the env alone), and ``env.state = ...``
    reaches the fused step."""
    env = Acrobot(4, seed=1, dtype=torch.float64, max_episode_steps=20, compile=True)
    eager = Acrobot(4, seed=1, dtype=torch.float64, max_episode_steps=20)
    generator = torch.Generator().manual_seed(2)
    env.reset(), eager.reset()
    for _ in range(30):
        actions = env.random_actions(generator)
        outputs, expected = env.step(actions), eager.step(actions)
        torch.testing.assert_close(outputs[0], expected[0], rtol=0, atol=1e-12)
        assert torch.equal(outputs[3], expected[3])  # truncated on the same steps
    assert env._compiled_step is not None
    saved = env.state_dict()
    clones = [pickle.loads(pickle.dumps(env)), copy.deepcopy(env)]
    restored = Acrobot(4, seed=99, dtype=torch.float64, max_episode_steps=20, compile=True)
    restored.step(env.random_actions(generator))  # its own clock, moved on: the restored one replaces it
    restored.load_state_dict(saved)
    actions = [env.random_actions(generator) for _ in range(25)]
    expected = [env.step(a) for a in actions]
    assert any(bool(step[3].any()) for step in expected)  # a time limit reached after the copy
    for other in (*clones, restored):
        assert other._compiled_step is None or other is restored
        for a, (obs, reward, terminated, truncated, _) in zip(actions, expected, strict=True):
            o, r, te, tr, _ = other.step(a)
            assert torch.equal(o, obs) and torch.equal(r, reward)
            assert torch.equal(te, terminated) and torch.equal(tr, truncated)

    obs, *_, info = env.step(env.random_actions(generator))
    before = env.state.clone()
    obs.fill_(7.0), info["final_observation"].fill_(7.0)
    assert torch.equal(env.state, before)
    state = env.state.clone()
    state[0] = torch.tensor([3.0, 0.0, 0.0, 0.0], dtype=torch.float64)  # the free end up: terminates
    env.state = state
    _, reward, terminated, _, _ = env.step(torch.ones(4, dtype=torch.int64))
    assert terminated[0] and reward[0] == 0.0


PROBES = [Probe1, Probe2, Probe3, Probe4, Probe5, ContinuousProbe1, ContinuousProbe2, ImageProbe5]


@pytest.mark.parametrize("probe_class", PROBES, ids=lambda cls: cls.__name__)
def test_a_compiled_probe_equals_the_eager_probe(probe_class):
    """The probes' whole step compiled (reward, episode clock, auto-reset, observations): the eager probe's results
    exactly (a few exact ops), from the same draws, over episodes of every length; copies compile again."""
    eager = probe_class(6, seed=5)
    compiled = make_envs(f"{probe_class.__name__}-v0", 6, seed=5, compile=True)
    assert isinstance(compiled, probe_class) and compiled.compile
    assert torch.equal(eager.reset()[0], compiled.reset()[0])
    generator = torch.Generator().manual_seed(6)
    for _ in range(7):
        actions = _random_actions(eager, generator)
        for got, expected in zip(compiled.step(actions), eager.step(actions), strict=True):
            if isinstance(expected, dict):
                got, expected = got["final_observation"], expected["final_observation"]
            assert got.dtype == expected.dtype and torch.equal(got, expected)
    assert compiled.compile_seconds > 0 and compiled._compiled_step is not None
    assert torch.equal(compiled.get_rng_state(), eager.get_rng_state())
    assert copy.deepcopy(compiled)._compiled_step is None and pickle.loads(pickle.dumps(compiled)).compile


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
    with pytest.raises(ValueError, match=r"compile=True applies to native torch envs.*'MemoryProbe-v0' has none"):
        make_envs("MemoryProbe-v0", 2, compile=True)
    with pytest.raises(TypeError, match="compile must be a bool"):
        make_envs("CartPole-v1", 2, compile="yes")
    with pytest.raises(TypeError, match="compile must be a bool"):
        CartPole(2, compile=1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_resets_drawn_in_order_give_the_index_based_resets_draws(dtype):
    """The CPU CartPole's fused step takes the finished envs' start states from numbers drawn for every env: env j,
    the r-th of k finished ones, gets component c from number used + c * k + r, what the index-based reset's
    (4, k) draw gives it (a CPU generator's numbers come one after another whatever the draw's size)."""
    done = torch.tensor([False, True, False, True, True, False, False])
    k, used = int(done.sum()), 5
    generator = torch.Generator().manual_seed(7)
    before = generator.get_state()
    torch.empty(used, dtype=dtype).uniform_(-0.05, 0.05, generator=generator)  # an earlier step's resets
    index_based = torch.empty(4, k, dtype=dtype).uniform_(-0.05, 0.05, generator=generator)
    generator.set_state(before)
    draw = torch.empty(2 * 4 * done.numel(), dtype=dtype).uniform_(-0.05, 0.05, generator=generator)
    picked, now_used = resets_drawn_in_order(draw, done, torch.tensor(used))
    assert picked.shape == (4, done.numel()) and picked.dtype == dtype
    assert torch.equal(picked[:, done], index_based)
    assert int(now_used) == used + 4 * k

    # The env: a compiled CPU CartPole's generator moves on by the finished envs' numbers only, as the eager one's.
    env = CartPole(7, seed=1, dtype=torch.float64, compile=True)
    eager = CartPole(7, seed=1, dtype=torch.float64)
    env.reset(seed=2), eager.reset(seed=2)
    assert env.fuses_step and not env.sync_free
    ends = 0
    for _ in range(40):
        actions = torch.ones(7, dtype=torch.int64)  # pushing right: every episode ends within ~10 steps
        _, _, terminated, truncated, _ = env.step(actions)
        eager.step(actions)
        ends += int((terminated | truncated).sum())
        assert torch.equal(env.get_rng_state(), eager.get_rng_state())
        torch.testing.assert_close(env.state, eager.state, rtol=0, atol=1e-12)  # the same start states
    assert ends >= 14  # every env finished at least twice
    assert not CartPole(1_025, compile=True).fuses_step  # more envs: compiled dynamics and the eager reset


def test_each_compiled_env_compiles_its_own_copy_of_its_step():
    """Dynamo's recompilation limit (8) is per code object: each env compiles its own copy of its step
    (``compiling.torch_compile``), so a process that compiles more sizes of one env than the limit (a sweep, the
    tests) neither fails (the steps compile with fullgraph=True) nor runs eagerly. Here with a limit of 2."""
    with torch._dynamo.config.patch(recompile_limit=2):
        for env_class in (Pendulum, Acrobot, Probe1):  # dynamics alone, the fused step, a probe's step
            for num_envs in (1, 2, 3):
                env = env_class(num_envs, seed=0, compile=True)
                env.reset()
                env.step(env.random_actions(torch.Generator().manual_seed(0)))
                assert env.compile_seconds > 0
