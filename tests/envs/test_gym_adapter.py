"""GymnasiumVectorEnv (rl_lightning/envs/gym_adapter.py): any gymnasium id behind the VectorEnv contract."""

from copy import deepcopy

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_lightning.envs import CartPole, GymnasiumVectorEnv, make_envs, registered_env_ids
from rl_lightning.envs.base import resolve_device
from rl_lightning.envs.cartpole import draw_cartpole
from rl_lightning.envs.gym_adapter import CARTPOLE_PIXELS_ID
from rl_lightning.envs.registry import is_native_env_id

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
NUM_ENVS = 4
# Short time limits, so that every rollout below ends episodes by truncation too.
SHORT = {"max_episode_steps": 25}

# env id -> (obs shape, obs dtype, number of actions or action shape), as the adapter exposes them.
CASES = {
    "CartPole-v1": ((4,), torch.float32, 2),  # has a native env: forced through the adapter
    "Acrobot-v1": ((6,), torch.float32, 3),
    "Pendulum-v1": ((3,), torch.float32, (1,)),
    "MountainCarContinuous-v0": ((2,), torch.float32, (1,)),
    "FrozenLake-v1": ((16,), torch.float32, 4),  # Discrete(16) observations, one-hot
    CARTPOLE_PIXELS_ID: ((64, 96, 3), torch.uint8, 2),
}
ENV_IDS = list(CASES)


def _make(env_id: str, num_envs: int = NUM_ENVS, seed: int | None = 0, **kwargs) -> GymnasiumVectorEnv:
    return make_envs(env_id, num_envs, seed=seed, backend="gymnasium", **{**SHORT, **kwargs})


def _gymnasium(env_id: str, num_envs: int = NUM_ENVS, **kwargs) -> gym.vector.VectorEnv:
    """gymnasium's own vector env, the reference."""
    return gym.make_vec(
        env_id,
        num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
        **{**SHORT, **kwargs},
    )


def _as_ours(env: GymnasiumVectorEnv, obs) -> torch.Tensor:
    """gymnasium's batched obs as the adapter must return them."""
    obs = np.stack(list(obs)) if obs.dtype == object else obs
    if isinstance(env.gymnasium_envs.single_observation_space, gym.spaces.Discrete):
        return torch.nn.functional.one_hot(torch.from_numpy(obs), env.obs_shape[0]).float()
    return torch.from_numpy(obs).to(env.obs_dtype)


def _rollout(env, num_steps: int, action_seed: int = 0, reset_seed: int | None = None):
    """Obs, reward, terminated, truncated and final obs of `num_steps` random steps, stacked on dim 0."""
    generator = torch.Generator().manual_seed(action_seed)
    obs, _ = env.reset(seed=reset_seed)
    history = [[obs], [], [], [], []]
    for _ in range(num_steps):
        obs, reward, terminated, truncated, info = env.step(env.random_actions(generator).to(env.device))
        for item, value in zip(history, (obs, reward, terminated, truncated, info["final_observation"]), strict=True):
            item.append(value)
    return [torch.stack(item) for item in history]


# -- the contract, for every kind of space ----------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_spaces_shapes_dtypes_devices(env_id, device):
    obs_shape, obs_dtype, actions = CASES[env_id]
    env = _make(env_id, device=device)
    assert isinstance(env, GymnasiumVectorEnv) and env.device == resolve_device(device)
    space = env.single_observation_space
    assert isinstance(space, gym.spaces.Box) and space.shape == obs_shape
    assert space.dtype == (np.uint8 if obs_dtype == torch.uint8 else np.float32)
    if isinstance(actions, int):
        assert env.single_action_space == gym.spaces.Discrete(actions) and env.num_actions == actions
    else:
        assert isinstance(env.single_action_space, gym.spaces.Box) and env.action_shape == actions
        assert env.single_action_space.dtype == np.float32
    assert env.observation_space.shape == (NUM_ENVS, *obs_shape)

    obs, info = env.reset()
    assert info == {} and obs.shape == (NUM_ENVS, *obs_shape) and obs.dtype == obs_dtype
    assert space.contains(obs[0].cpu().numpy())
    obs, reward, terminated, truncated, info = env.step(env.random_actions().to(device))
    final_obs = info["final_observation"]
    assert obs.shape == final_obs.shape == (NUM_ENVS, *obs_shape)
    assert obs.dtype == final_obs.dtype == obs_dtype
    assert reward.shape == terminated.shape == truncated.shape == (NUM_ENVS,)
    assert (reward.dtype, terminated.dtype, truncated.dtype) == (torch.float32, torch.bool, torch.bool)
    for tensor in (obs, reward, terminated, truncated, final_obs):
        assert tensor.device.type == torch.device(device).type
    env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_trajectories_and_final_obs_equal_gymnasiums_own_vector_env(env_id):
    """Same seed, same actions: every obs, reward, flag and final obs equals gymnasium's."""
    env, reference = _make(env_id, seed=11), _gymnasium(env_id)
    generator = torch.Generator().manual_seed(0)
    obs, _ = env.reset()
    expected, _ = reference.reset(seed=11)
    assert torch.equal(obs, _as_ours(env, expected))
    num_ended = 0
    for _ in range(60):
        actions = env.random_actions(generator)
        obs, reward, terminated, truncated, info = env.step(actions)
        expected = reference.step(actions.numpy())
        assert torch.equal(obs, _as_ours(env, expected[0]))
        assert torch.equal(reward, torch.from_numpy(expected[1]).float())
        assert torch.equal(terminated, torch.from_numpy(expected[2]))
        assert torch.equal(truncated, torch.from_numpy(expected[3]))
        ended = terminated | truncated
        final_obs = info["final_observation"]
        assert torch.equal(final_obs[~ended], obs[~ended])
        if ended.any():
            num_ended += int(ended.sum())
            assert np.array_equal(expected[4]["_final_obs"], ended.numpy())
            assert torch.equal(final_obs[ended], _as_ours(env, expected[4]["final_obs"][ended.numpy()]))
    assert num_ended >= NUM_ENVS, "the rollout must contain episode ends"
    env.close()
    reference.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_seeding(env_id):
    """Same seed: same trajectories; another seed: others; reset(seed) reseeds a used env."""
    first = _rollout(_make(env_id, seed=5), num_steps=30)
    again = _rollout(_make(env_id, seed=5), num_steps=30)
    other = _rollout(_make(env_id, seed=6), num_steps=30)
    for a, b in zip(first, again, strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(first[0], other[0])
    used = _make(env_id, seed=0)
    _rollout(used, num_steps=17, action_seed=3)
    for a, b in zip(first, _rollout(used, num_steps=30, reset_seed=5), strict=True):
        assert torch.equal(a, b)


def test_reset_without_seed_continues_the_rng():
    env = _make("Acrobot-v1", seed=3)
    first, _ = env.reset()
    second, _ = env.reset()
    assert not torch.equal(first, second)
    assert torch.equal(env.reset(seed=3)[0], first)


def test_first_step_without_reset_starts_from_the_seeded_reset():
    actions = torch.tensor([0, 1, 2, 1])
    stepped = _make("Acrobot-v1", seed=8).step(actions)
    env = _make("Acrobot-v1", seed=8)
    env.reset()
    for a, b in zip(stepped[:4], env.step(actions)[:4], strict=True):
        assert torch.equal(a, b)


def test_one_hot_discrete_observations():
    env = _make("FrozenLake-v1", num_envs=8)
    obs, _, _, _, info = _rollout(env, num_steps=40)
    for tensor in (obs, info):
        assert set(tensor.unique().tolist()) == {0.0, 1.0}
        assert torch.equal(tensor.sum(-1), torch.ones(tensor.shape[:-1]))
    assert torch.equal(obs[0], torch.nn.functional.one_hot(torch.zeros(8, dtype=torch.int64), 16).float())
    assert obs.argmax(-1).unique().numel() > 3  # the agents moved


def test_returned_obs_are_not_mutated_by_later_steps():
    env = _make("CartPole-v1")
    obs, _ = env.reset()
    kept = obs.clone()
    _, _, _, _, info = env.step(torch.zeros(NUM_ENVS, dtype=torch.int64))
    kept_final = info["final_observation"].clone()
    for _ in range(30):
        env.step(torch.zeros(NUM_ENVS, dtype=torch.int64))
    assert torch.equal(obs, kept) and torch.equal(info["final_observation"], kept_final)


def test_box_actions_are_clipped_before_gymnasium():
    env, reference = _make("Pendulum-v1", seed=1), _gymnasium("Pendulum-v1")
    env.reset()
    reference.reset(seed=1)
    _, reward, *_ = env.step(torch.tensor([[5.0], [-7.0], [0.5], [float(2**40)]]))
    expected = reference.step(np.array([[2.0], [-2.0], [0.5], [2.0]], dtype=np.float32))[1]
    assert torch.equal(reward, torch.from_numpy(expected).float())


# -- CartPole: adapter vs native ---------------------------------------------------------------


def test_cartpole_through_the_adapter_equals_gymnasium_exactly():
    env = make_envs("CartPole-v1", 16, seed=4, backend="gymnasium")
    reference = _gymnasium("CartPole-v1", 16, max_episode_steps=500)
    assert isinstance(make_envs("CartPole-v1", 2), CartPole)  # backend "auto" keeps the native env
    generator = torch.Generator().manual_seed(1)
    obs, _ = env.reset()
    assert torch.equal(obs, torch.from_numpy(reference.reset(seed=4)[0]))
    for _ in range(600):  # past the 500-step limit of the longest possible episode
        actions = env.random_actions(generator)
        obs, reward, terminated, truncated, _ = env.step(actions)
        expected = reference.step(actions.numpy())
        assert torch.equal(obs, torch.from_numpy(expected[0]))
        assert torch.equal(reward, torch.from_numpy(expected[1]).float())
        assert torch.equal(terminated, torch.from_numpy(expected[2]))
        assert torch.equal(truncated, torch.from_numpy(expected[3]))


def _random_policy_statistics(env, num_steps: int) -> tuple[float, float, float]:
    """Mean episode length, mean |theta| of terminal obs and std of first obs, random actions."""
    generator = torch.Generator().manual_seed(0)
    obs, _ = env.reset()
    first_obs, lengths, terminal_theta = [obs], [], []
    length = torch.zeros(env.num_envs)
    for _ in range(num_steps):
        obs, _, terminated, truncated, info = env.step(env.random_actions(generator))
        length += 1
        ended = terminated | truncated
        lengths.append(length[ended])
        terminal_theta.append(info["final_observation"][terminated, 2].abs())
        first_obs.append(obs[ended])
        length[ended] = 0
    lengths, terminal_theta = torch.cat(lengths), torch.cat(terminal_theta)
    return lengths.mean().item(), terminal_theta.mean().item(), torch.cat(first_obs).std().item()


def test_adapter_and_native_cartpole_have_the_same_statistics():
    """Different RNGs, so not the same trajectories, but the same distributions: ~1,000 random
    episodes each (mean length ~22, its standard error ~0.4)."""
    adapter = _random_policy_statistics(make_envs("CartPole-v1", 64, seed=0, backend="gymnasium"), 350)
    native = _random_policy_statistics(make_envs("CartPole-v1", 64, seed=0), 350)
    assert 18 < native[0] < 26
    assert adapter[0] == pytest.approx(native[0], abs=2.0)
    assert adapter[1] == pytest.approx(native[1], rel=0.15)  # beyond the 0.2095 rad limit, or not
    assert adapter[2] == pytest.approx(native[2], rel=0.1)  # uniform in +-0.05: std 0.029
    assert native[2] == pytest.approx(0.1 / 12**0.5, rel=0.1)


# -- images: CartPolePixels, draw and render --------------------------------------------------


def test_cartpole_pixels_draws_the_state():
    env = _make(CARTPOLE_PIXELS_ID, seed=2)
    assert env.can_draw and env.render_fps == 50
    reference = _gymnasium("CartPole-v1", NUM_ENVS)
    state, _ = reference.reset(seed=2)
    obs, _ = env.reset()
    assert torch.equal(obs, draw_cartpole(torch.from_numpy(state), 64, 96))
    assert torch.equal(env.draw(obs), obs) and torch.equal(env.draw(obs[0]), obs[0])
    assert env.draw(torch.stack([obs, obs])).shape == (2, NUM_ENVS, 64, 96, 3)
    with pytest.raises(ValueError, match="shape"):
        env.draw(obs[..., :2])
    # The 500-step time limit of CartPole-v1, without SHORT.
    assert gym.spec(CARTPOLE_PIXELS_ID).max_episode_steps == 500


def test_cartpole_pixels_sizes():
    env = make_envs(CARTPOLE_PIXELS_ID, 2, seed=0, height=40, width=60)
    assert env.reset()[0].shape == (2, 40, 60, 3)
    with pytest.raises(ValueError, match="height"):
        make_envs(CARTPOLE_PIXELS_ID, 2, seed=0, height=2)


def test_non_image_envs_cannot_draw():
    env = _make("Acrobot-v1")
    assert not env.can_draw and not env.can_render
    obs, _ = env.reset()
    with pytest.raises(NotImplementedError, match=r"cannot draw 'Acrobot-v1'.*render=True"):
        env.draw(obs)
    with pytest.raises(NotImplementedError, match="render=True"):
        env.render()


def test_render_gives_the_current_frame_of_every_env():
    env = _make(CARTPOLE_PIXELS_ID, render=True)
    assert env.can_render
    obs, _ = env.reset()
    assert torch.equal(env.render(), obs)
    obs, *_ = env.step(torch.ones(NUM_ENVS, dtype=torch.int64))
    frames = env.render()
    assert frames.dtype == torch.uint8 and frames.device.type == "cpu" and torch.equal(frames, obs)


def test_render_classic_control_with_pygame():
    pytest.importorskip("pygame", reason="gymnasium's classic-control rendering needs pygame (the dev extra)")
    env = _make("Acrobot-v1", num_envs=2, render=True)
    assert env.can_render and not env.can_draw and env.render_fps == 15
    env.reset()
    env.step(torch.tensor([0, 2]))
    frames = env.render()
    assert frames.shape == (2, 500, 500, 3) and frames.dtype == torch.uint8
    assert (frames != 255).any() and not torch.equal(frames[0], frames[1])  # two different states
    env.close()


# -- state_dict ---------------------------------------------------------------------------------


def test_load_state_dict_warns_and_restarts_with_a_fresh_reset():
    env = _make("Pendulum-v1", num_envs=3, max_episode_steps=10)
    env.reset()
    for _ in range(7):
        env.step(torch.zeros(3, 1))
    state = env.state_dict()
    assert state["restorable"] is False and state["env_id"] == "Pendulum-v1" and state["num_envs"] == 3

    restored = [_make("Pendulum-v1", num_envs=3, seed=seed, max_episode_steps=10) for seed in (1, 2)]
    trajectories = []
    for other in restored:
        with pytest.warns(UserWarning, match="cannot restore.*fresh reset"):
            other.load_state_dict(state)
        # A fresh episode: truncated after 10 more steps, not after the saved episode's 3.
        truncated = torch.stack([other.step(torch.zeros(3, 1))[3] for _ in range(10)])
        assert not truncated[:9].any() and truncated[9].all()
        trajectories.append(_rollout(other, 5)[1:])
    # The fresh reset is seeded from the restored generator: two restores agree.
    for a, b in zip(*trajectories, strict=True):
        assert torch.equal(a, b)


def test_load_state_dict_of_another_env_raises():
    state = _make("Pendulum-v1").state_dict()
    with pytest.raises(ValueError, match=r"'Pendulum-v1'.*'MountainCarContinuous-v0'"):
        _make("MountainCarContinuous-v0").load_state_dict(state)
    with pytest.raises(ValueError, match="num_envs=8"):
        _make("Pendulum-v1", num_envs=8).load_state_dict(state)
    with pytest.raises(ValueError, match="GymnasiumVectorEnv"):
        make_envs("CartPole-v1", NUM_ENVS).load_state_dict(_make("CartPole-v1").state_dict())


# -- async, registry, bad input ----------------------------------------------------------------


def test_async_mode_equals_sync_mode():
    sync = _rollout(_make("CartPole-v1", num_envs=2, seed=9), num_steps=40)
    env = _make("CartPole-v1", num_envs=2, seed=9, vectorization_mode="async")
    try:
        assert isinstance(env.gymnasium_envs, gym.vector.AsyncVectorEnv)
        for a, b in zip(sync, _rollout(env, num_steps=40), strict=True):
            assert torch.equal(a, b)
    finally:
        env.close()
    assert env.gymnasium_envs.closed


def test_make_envs_backends():
    assert is_native_env_id("CartPole-v1") and not is_native_env_id("FrozenLake-v1")
    assert isinstance(make_envs("CartPole-v1", 2, seed=0), CartPole)
    assert isinstance(make_envs("CartPole-v1", 2, seed=0, backend="torch"), CartPole)
    assert isinstance(make_envs("FrozenLake-v1", 2, seed=0), GymnasiumVectorEnv)
    assert isinstance(make_envs("Acrobot-v1", 2, seed=0, backend="gymnasium"), GymnasiumVectorEnv)
    assert "FrozenLake-v1" not in registered_env_ids()
    with pytest.raises(ValueError, match=r"backend='torch'.*native env ids: .*CartPole-v1"):
        make_envs("FrozenLake-v1", 2, backend="torch")
    with pytest.raises(ValueError, match=r"'Probe1-v0'.*gymnasium"):
        make_envs("Probe1-v0", 2, backend="gymnasium")
    with pytest.raises(ValueError, match="backend must be one of 'auto', 'torch', 'gymnasium'"):
        make_envs("CartPole-v1", 2, backend="numpy")


def test_unknown_id_lists_native_ids_and_mentions_gymnasium():
    with pytest.raises(ValueError, match="CartPol-v1") as excinfo:
        make_envs("CartPol-v1", 2)
    message = str(excinfo.value)
    for env_id in registered_env_ids():
        assert env_id in message
    assert "any gymnasium id" in message and "FrozenLake-v1" in message
    assert "Did you mean" in message  # gymnasium's own hint
    with pytest.raises(TypeError, match="env_id"):
        make_envs(None, 2)


def test_a_namespace_whose_package_is_missing_says_what_to_install(monkeypatch):
    from rl_lightning.envs import gym_ids

    monkeypatch.setitem(gym_ids._NAMESPACE_PACKAGES, "Fake", ("no_such_package_xyz", "rl_lightning[fake]"))
    with pytest.raises(ValueError, match=r"Fake ids need the no_such_package_xyz package: pip install 'rl_lightning"):
        make_envs("Fake/Thing-v0", 2)


def test_gymnasium_kwargs_for_a_native_env_raise():
    with pytest.raises(TypeError, match=r"\['render', 'vectorization_mode'\].*native.*backend='gymnasium'"):
        make_envs("CartPole-v1", 2, vectorization_mode="async", render=True)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"vectorization_mode": "threads"}, ValueError, "vectorization_mode must be one of 'sync', 'async'"),
        ({"render": "yes"}, TypeError, "render must be a bool"),
        ({"render_mode": "rgb_array"}, TypeError, "render=True"),
        ({"num_envs": 0}, ValueError, "num_envs"),
        ({"seed": -1}, ValueError, "seed"),
        ({"no_such_argument": 1}, TypeError, "no_such_argument"),
    ],
    ids=["mode", "render", "render_mode", "num_envs", "seed", "env-kwarg"],
)
def test_bad_constructor_arguments(kwargs, error, message):
    arguments = {"env_id": "Acrobot-v1", "num_envs": 2, **kwargs}
    with pytest.raises(error, match=message):
        GymnasiumVectorEnv(**arguments)


@pytest.mark.parametrize(
    ("env_id", "actions", "error", "message"),
    [
        ("Acrobot-v1", lambda n: [0] * n, TypeError, "torch.Tensor"),
        ("Acrobot-v1", lambda n: np.zeros(n, dtype=np.int64), TypeError, "torch.Tensor"),
        ("Acrobot-v1", lambda n: torch.zeros(n + 1, dtype=torch.int64), ValueError, "shape"),
        ("Acrobot-v1", lambda n: torch.zeros(n), TypeError, "integer dtype"),
        ("Acrobot-v1", lambda n: torch.full((n,), -1), ValueError, r"in \[0, 3\)"),
        ("Acrobot-v1", lambda n: torch.full((n,), 3), ValueError, r"in \[0, 3\)"),
        ("Acrobot-v1", lambda n: torch.zeros(n, dtype=torch.int64, device="meta"), ValueError, "must be on"),
        ("Pendulum-v1", lambda n: torch.zeros(n), ValueError, "shape"),
        ("Pendulum-v1", lambda n: torch.zeros(n, 1, dtype=torch.int64), TypeError, "floating dtype"),
        ("Pendulum-v1", lambda n: torch.full((n, 1), float("nan")), ValueError, "finite"),
    ],
    ids=["list", "numpy", "too-long", "float", "negative", "too-big", "device", "box-1d", "box-int", "box-nan"],
)
def test_bad_actions_raise_helpful_errors(env_id, actions, error, message):
    env = _make(env_id)
    env.reset()
    with pytest.raises(error, match=message):
        env.step(actions(NUM_ENVS))
    assert env.step(env.random_actions())[0].shape[0] == NUM_ENVS  # still usable


def test_every_integer_action_dtype_is_accepted():
    actions = torch.tensor([0, 2, 1, 2])
    reference = _make("Acrobot-v1")
    reference.reset()
    expected = reference.step(actions)[0]
    for dtype in (torch.int8, torch.uint8, torch.int16, torch.int32):
        env = _make("Acrobot-v1")
        env.reset()
        assert torch.equal(env.step(actions.to(dtype))[0], expected)


# Tiny gymnasium envs with a given observation and action space, registered under test ids.
class _SpaceEnv(gym.Env):
    """Observes the last action it was given where its observation space holds it, else its first obs."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space):
        self.observation_space, self.action_space = observation_space, action_space
        box = isinstance(observation_space, gym.spaces.Box)
        self._first = np.zeros(observation_space.shape, observation_space.dtype) if box else observation_space.sample()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return deepcopy(self._first), {}

    def step(self, action):
        obs = action if self.observation_space.contains(action) else deepcopy(self._first)
        terminated = isinstance(self.action_space, gym.spaces.Discrete) and action == self.action_space.start
        return obs, float(np.sum(action)), bool(terminated), False, {}


_DISCRETE = gym.spaces.Discrete(3)
UNSUPPORTED = {
    "MultiDiscreteObs": (gym.spaces.MultiDiscrete([2, 3]), _DISCRETE, "observation", "MultiDiscrete"),
    "MultiBinaryObs": (gym.spaces.MultiBinary(4), _DISCRETE, "observation", "MultiBinary"),
    "TupleAction": (_DISCRETE, gym.spaces.Tuple((_DISCRETE, _DISCRETE)), "action", "Tuple"),
    "MultiDiscrete2dAction": (_DISCRETE, gym.spaces.MultiDiscrete([[2, 3]]), "action", "MultiDiscrete"),
    "IntBoxAction": (_DISCRETE, gym.spaces.Box(0, 3, (2,), np.int64), "action", "Box"),
}


def _register_space_env(name: str, observation_space: gym.Space, action_space: gym.Space) -> str:
    env_id = f"rl_lightning_test/{name}-v0"
    if env_id not in gym.registry:
        spaces = {"observation_space": observation_space, "action_space": action_space}
        gym.register(env_id, entry_point=_SpaceEnv, max_episode_steps=5, kwargs=spaces)
    return env_id


@pytest.mark.parametrize("name", list(UNSUPPORTED))
def test_unsupported_spaces_raise_naming_the_space_and_the_id(name):
    obs_space, action_space, which, space_name = UNSUPPORTED[name]
    env_id = _register_space_env(name, obs_space, action_space)
    with pytest.raises(ValueError, match=rf"'{env_id}' has an unsupported {which} space .*\({space_name}\)"):
        make_envs(env_id, 2, seed=0)


def test_multi_discrete_and_multi_binary_actions_pass_through_with_their_start():
    env_id = _register_space_env("MultiAction", _DISCRETE, gym.spaces.MultiDiscrete([2, 3], start=[1, -1]))
    env = make_envs(env_id, 2, seed=0)
    assert env.single_action_space == gym.spaces.MultiDiscrete([2, 3]) and env.action_kind == "multi_discrete"
    env.reset()
    _, reward, *_ = env.step(torch.tensor([[0, 0], [1, 2]]))
    assert reward.tolist() == [0.0, 3.0]  # gymnasium got (1, -1) and (2, 1)
    env_id = _register_space_env("BinaryAction", _DISCRETE, gym.spaces.MultiBinary(3))
    env = make_envs(env_id, 2, seed=0)
    env.reset()
    _, reward, *_ = env.step(torch.tensor([[1, 0, 1], [0, 0, 0]]))
    assert reward.tolist() == [2.0, 0.0]


def test_dict_observations_with_an_unconvertible_part_name_it():
    space = gym.spaces.Dict({"text": gym.spaces.Text(5), "x": gym.spaces.Box(0, 1, (2,))})
    env_id = _register_space_env("TextPart", space, _DISCRETE)
    with pytest.raises(ValueError, match=r"the observation part 'text' is Text"):
        make_envs(env_id, 2, seed=0)


def test_dict_and_tuple_observations_are_flat_keys_of_our_leaves():
    space = gym.spaces.Dict(
        {
            "pos": gym.spaces.Tuple((gym.spaces.Discrete(3, start=1), gym.spaces.Box(-2, 2, (2,), np.float64))),
            "pixels": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8),
            "flags": gym.spaces.MultiBinary(2),
            "grid": gym.spaces.MultiDiscrete([2, 3]),
        }
    )
    env_id = _register_space_env("Nested", space, _DISCRETE)
    env = make_envs(env_id, 2, seed=0)
    assert env.obs_shape == {"flags": (2,), "grid": (5,), "pixels": (8, 8, 3), "pos/0": (3,), "pos/1": (2,)}
    assert env.obs_dtype["pixels"] == torch.uint8 and env.obs_dtype["pos/1"] == torch.float32
    obs, _ = env.reset()
    first = env.gymnasium_envs.envs[0].unwrapped._first
    assert int(obs["pos/0"][0].argmax()) == first["pos"][0] - 1
    assert obs["grid"][0].tolist()[:2] == np.eye(2)[first["grid"][0]].tolist()
    assert torch.equal(obs["pixels"][0], torch.from_numpy(first["pixels"]))


def test_discrete_spaces_with_a_start_are_shifted():
    """Actions k -> gymnasium's start + k; observations start + k -> one-hot k."""
    env_id = _register_space_env("Shifted", gym.spaces.Discrete(3, start=-1), gym.spaces.Discrete(3, start=-1))
    env = make_envs(env_id, 3, seed=0)
    assert env.single_action_space == gym.spaces.Discrete(3) and env.obs_shape == (3,)
    env.reset()
    _, reward, terminated, _, info = env.step(torch.tensor([0, 1, 2]))
    assert reward.tolist() == [-1.0, 0.0, 1.0]  # gymnasium got -1, 0, 1
    assert terminated.tolist() == [True, False, False]
    assert torch.equal(info["final_observation"], torch.eye(3))


def test_integer_and_non_image_uint8_box_observations_become_float32():
    for name, space in [
        ("IntObs", gym.spaces.Box(-5, 5, (2,), np.int64)),
        ("RamObs", gym.spaces.Box(0, 255, (8,), np.uint8)),
        ("Float64Obs", gym.spaces.Box(-np.inf, 1e300, (2,), np.float64)),
    ]:
        env = make_envs(_register_space_env(name, space, gym.spaces.Box(-1, 1, (2,), np.float64)), 2, seed=0)
        assert env.single_observation_space.dtype == np.float32 and not env.can_draw
        obs, reward, *_ = env.step(torch.tensor([[0.5, -0.25], [1.0, 1.0]]))
        assert obs.dtype == torch.float32 and reward.tolist() == [0.25, 2.0]
        assert env.single_observation_space.high[0] == (np.inf if name == "Float64Obs" else space.high[0])


def test_render_needs_an_rgb_array_render_mode():
    env_id = _register_space_env("NoRender", gym.spaces.Discrete(2), gym.spaces.Discrete(2))
    with pytest.raises(ValueError, match="rgb_array"):
        make_envs(env_id, 2, render=True)


def test_close_closes_gymnasiums_vector_env():
    env = _make("Acrobot-v1")
    env.close()
    assert env.gymnasium_envs.closed


def test_atari_pong_through_make_envs():
    env = make_envs("ALE/Pong-v5", 2, seed=0)
    assert isinstance(env, GymnasiumVectorEnv) and env.num_actions == 6 and env.can_draw
    obs, _ = env.reset()
    assert obs.shape == (2, 210, 160, 3) and obs.dtype == torch.uint8
    for _ in range(3):
        obs, reward, terminated, truncated, info = env.step(env.random_actions())
    assert terminated.dtype == truncated.dtype == torch.bool
    assert obs.shape == info["final_observation"].shape == (2, 210, 160, 3) and reward.dtype == torch.float32
    assert env.draw(obs).shape == (2, 210, 160, 3)
    env.close()
