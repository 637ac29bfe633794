"""The vector-env contract (rl_lightning/envs/base.py), checked for every registered env (the deprecated alias
CartPole-gpu, which is CartPole-v1, by its own test)."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_lightning.envs import CartPole, VectorEnv, make_envs, register, registered_env_ids
from rl_lightning.envs.base import resolve_device
from rl_lightning.envs.cartpole import CART_COLOR

REGISTERED_IDS = registered_env_ids()
ENV_IDS = [env_id for env_id in REGISTERED_IDS if env_id != "CartPole-gpu"]  # less a deprecated alias of CartPole-v1
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
NUM_ENVS = 8
# Envs whose observations are random; the others are deterministic whatever the seed.
RANDOM_ENV_IDS = {
    "CartPole-v1",
    "CartPoleNoVel-v1",
    "MemoryProbe-v0",
    "PrivilegedBandit-v0",
    "PrivilegedBanditContinuous-v0",
    "Acrobot-v1",
    "MountainCar-v0",
    "MountainCarContinuous-v0",
    "Pendulum-v1",
    "Probe2-v0",
    "Probe5-v0",
    "ContinuousProbe2-v0",
    "ImageProbe5-v0",
    "DictProbe-v0",
    "MaskedProbe-v0",
    "MultiBinaryProbe-v0",
    "MultiDiscreteProbe-v0",
    "BitFlipping10-v0",
    "BitFlipping20-v0",
    "RoleAssignment-v0",
}
DISCRETE_ENV_IDS = [env_id for env_id in ENV_IDS if make_envs(env_id, 1).action_kind == "discrete"]
BOX_ENV_IDS = [env_id for env_id in ENV_IDS if make_envs(env_id, 1).action_kind == "box"]


def _equal(a, b) -> bool:
    """``torch.equal``, key by key for dict observations."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)
    return torch.equal(a, b)


def _random_actions(env: VectorEnv, generator: torch.Generator) -> torch.Tensor:
    if env.action_kind in ("multi_discrete", "multi_binary"):
        return env.random_actions(generator)
    if env.action_kind == "discrete":
        actions = torch.randint(0, env.num_actions, (env.num_envs,), generator=generator)
    else:  # beyond the bounds too: the env clips
        actions = torch.randn((env.num_envs, *env.action_shape), generator=generator) * 2
    return actions.to(env.device)


def _zero_actions(env: VectorEnv) -> torch.Tensor:
    return torch.zeros((env.num_envs, *env.action_shape), dtype=env.action_dtype, device=env.device)


def _rollout(env: VectorEnv, num_steps: int, action_seed: int = 0, reset_seed: int | None = None):
    """Obs, reward, terminated, truncated and final obs of `num_steps` steps, stacked on dim 0."""
    generator = torch.Generator().manual_seed(action_seed)
    obs, _ = env.reset(seed=reset_seed)
    history = [[obs], [], [], [], []]
    for _ in range(num_steps):
        obs, reward, terminated, truncated, info = env.step(_random_actions(env, generator))
        for item, value in zip(history, (obs, reward, terminated, truncated, info["final_observation"]), strict=True):
            item.append(value)
    return [torch.stack(item) for item in history]


def test_registry_holds_cartpole_and_the_five_probes():
    assert {"CartPole-v1", "CartPole-gpu"} | {f"Probe{i}-v0" for i in range(1, 6)} <= set(REGISTERED_IDS)
    assert registered_env_ids() == sorted(registered_env_ids())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_reset_and_step_shapes_dtypes_devices(env_id, device):
    env = make_envs(env_id, NUM_ENVS, seed=0, device=device)
    # a multi-agent env's num_envs counts scenes, its rows are scenes x agents (rl_lightning.envs.multi_agent)
    assert env.num_envs == NUM_ENVS * getattr(env, "num_agents", 1) and env.device == resolve_device(device)
    if env.structured:
        _check_dict_observations(env, device)
        return
    obs_shape = tuple(env.single_observation_space.shape)
    assert env.obs_shape == obs_shape

    obs, info = env.reset()
    assert info == {}
    assert obs.shape == (NUM_ENVS, *obs_shape) and obs.dtype == env.obs_dtype
    assert env.obs_dtype in (torch.float32, torch.uint8)
    assert obs.device.type == torch.device(device).type

    obs, reward, terminated, truncated, info = env.step(_zero_actions(env))
    assert obs.shape == (NUM_ENVS, *obs_shape) and obs.dtype == env.obs_dtype
    assert reward.shape == (NUM_ENVS,) and reward.dtype == torch.float32
    assert terminated.shape == (NUM_ENVS,) and terminated.dtype == torch.bool
    assert truncated.shape == (NUM_ENVS,) and truncated.dtype == torch.bool
    final_obs = info["final_observation"]
    assert final_obs.shape == (NUM_ENVS, *obs_shape) and final_obs.dtype == env.obs_dtype
    for tensor in (obs, reward, terminated, truncated, final_obs):
        assert tensor.device.type == torch.device(device).type


def _check_dict_observations(env: VectorEnv, device: str) -> None:
    """Each key ``(num_envs, *shape)`` of its leaf's dtype (float32, uint8 or bool), on the device."""
    leaves = env.single_observation_space.spaces
    assert env.obs_shape == {key: leaf.shape for key, leaf in leaves.items()}
    obs, _ = env.reset()
    obs2, reward, terminated, _, info = env.step(_zero_actions(env))
    for tree in (obs, obs2, info["final_observation"]):
        assert tree.keys() == leaves.keys()
        for key, leaf in tree.items():
            assert leaf.shape == (env.num_envs, *env.obs_shape[key]) and leaf.dtype == env.obs_dtype[key]
            assert leaf.device.type == torch.device(device).type
            assert env.single_observation_space[key].contains(leaf[0].cpu().numpy())
    assert reward.shape == (env.num_envs,) and terminated.dtype == torch.bool


@pytest.mark.parametrize("env_id", DISCRETE_ENV_IDS)
def test_every_integer_action_dtype_is_accepted(env_id):
    env = make_envs(env_id, NUM_ENVS, seed=0)
    env.reset()
    for dtype in (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64):
        _, reward, *_ = env.step(torch.full((env.num_envs,), env.num_actions - 1, dtype=dtype))
        assert reward.shape == (env.num_envs,)


@pytest.mark.parametrize("env_id", [env_id for env_id in DISCRETE_ENV_IDS if not make_envs(env_id, 1).structured])
def test_gymnasium_spaces(env_id):
    env = make_envs(env_id, NUM_ENVS, seed=0)
    assert isinstance(env.single_observation_space, gym.spaces.Box)
    assert env.single_observation_space.dtype in (np.float32, np.uint8)
    assert isinstance(env.single_action_space, gym.spaces.Discrete)
    assert env.num_actions == env.single_action_space.n >= 1
    assert env.observation_space.shape == (NUM_ENVS, *env.single_observation_space.shape)
    assert isinstance(env.action_space, gym.spaces.MultiDiscrete)
    assert env.action_space.shape == (NUM_ENVS,)
    assert (env.action_space.nvec == env.num_actions).all()
    obs, _ = env.reset()
    assert env.observation_space.contains(obs.numpy())
    for row in obs.numpy():
        assert env.single_observation_space.contains(row)


@pytest.mark.parametrize("env_id", BOX_ENV_IDS)
def test_box_action_spaces(env_id):
    env = make_envs(env_id, NUM_ENVS, seed=0)
    assert isinstance(env.single_action_space, gym.spaces.Box)
    assert env.num_actions is None and env.action_dtype == torch.float32
    assert env.action_shape == env.single_action_space.shape and len(env.action_shape) >= 1
    assert env.action_space.shape == (NUM_ENVS, *env.action_shape)


def test_box_actions_are_clipped_to_the_bounds():
    env = make_envs("ContinuousProbe1-v0", 3, seed=0)
    env.reset()
    # Reward -(a - 0.5)^2 with a clipped to [-1, 1]: 5 acts as 1, -7 as -1.
    _, reward, *_ = env.step(torch.tensor([[5.0], [-7.0], [0.5]]))
    assert reward.tolist() == pytest.approx([-0.25, -2.25, 0.0])


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_same_seed_same_trajectory(env_id):
    first = _rollout(make_envs(env_id, NUM_ENVS, seed=123), num_steps=60)
    second = _rollout(make_envs(env_id, NUM_ENVS, seed=123), num_steps=60)
    for a, b in zip(first, second, strict=True):
        assert _equal(a, b)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_different_seeds_differ_only_for_random_envs(env_id):
    first = _rollout(make_envs(env_id, NUM_ENVS, seed=1), num_steps=30)
    second = _rollout(make_envs(env_id, NUM_ENVS, seed=2), num_steps=30)
    assert _equal(first[0], second[0]) == (env_id not in RANDOM_ENV_IDS)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_instances_do_not_share_randomness(env_id):
    reference = _rollout(make_envs(env_id, NUM_ENVS, seed=7), num_steps=40)
    env_a = make_envs(env_id, NUM_ENVS, seed=7)
    env_b = make_envs(env_id, NUM_ENVS, seed=7)
    global_rng = torch.get_rng_state()
    _rollout(env_a, num_steps=100, action_seed=5)  # draws from env_a's generator only
    assert _equal(torch.get_rng_state(), global_rng)
    for a, b in zip(reference, _rollout(env_b, num_steps=40), strict=True):
        assert _equal(a, b)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_reset_with_seed_reseeds(env_id):
    fresh = _rollout(make_envs(env_id, NUM_ENVS, seed=42), num_steps=40)
    used = make_envs(env_id, NUM_ENVS, seed=0)
    _rollout(used, num_steps=25, action_seed=3)
    for a, b in zip(fresh, _rollout(used, num_steps=40, reset_seed=42), strict=True):
        assert _equal(a, b)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_rng_state_round_trip_replays_the_future(env_id):
    env = make_envs(env_id, NUM_ENVS, seed=9)
    env.reset()
    state = env.get_rng_state()
    first = env.reset()[0]
    env.set_rng_state(state)
    assert _equal(env.reset()[0], first)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_final_observation_equals_obs_unless_the_episode_ended(env_id):
    env = make_envs(env_id, 64, seed=0)
    # Past the time limit, if the env has one: episodes then surely end.
    num_steps = max(200, getattr(env, "max_episode_steps", 0) + 1)
    obs, _, terminated, truncated, final_obs = _rollout(env, num_steps=num_steps)
    done = terminated | truncated
    assert done.any(), "the rollout must contain episode ends"
    assert _equal(final_obs[~done], obs[1:][~done])
    assert not (terminated & truncated).all()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_returned_obs_is_not_mutated_by_later_steps(env_id):
    env = make_envs(env_id, NUM_ENVS, seed=0)
    obs, _ = env.reset()
    kept = obs.clone()
    _, _, _, _, info = env.step(_zero_actions(env))
    kept_final = info["final_observation"].clone()
    for _ in range(5):
        env.step(_zero_actions(env))
    assert _equal(obs, kept)
    assert _equal(info["final_observation"], kept_final)


@pytest.mark.parametrize("env_id", [env_id for env_id in ENV_IDS if make_envs(env_id, 1).can_draw])
def test_draw_gives_uint8_rgb_for_single_and_batched_obs(env_id):
    env = make_envs(env_id, NUM_ENVS, seed=0)
    obs, _ = env.reset()
    single = env.draw(obs[0])
    assert single.dtype == torch.uint8 and single.device.type == "cpu"
    assert single.ndim == 3 and single.shape[-1] == 3 and min(single.shape[:2]) >= 8
    batched = env.draw(obs)
    assert batched.shape == (NUM_ENVS, *single.shape) and batched.dtype == torch.uint8
    assert _equal(batched[0], single)
    time_batched = env.draw(torch.stack([obs, obs, obs]))
    assert time_batched.shape == (3, NUM_ENVS, *single.shape)
    assert isinstance(env.render_fps, int) and env.render_fps > 0


def test_cartpole_draw_moves_with_the_cart():
    env = CartPole(1, seed=0)
    left = env.draw(torch.tensor([-1.5, 0.0, 0.0, 0.0]))
    right = env.draw(torch.tensor([1.5, 0.0, 0.0, 0.0]))
    assert (left != 255).any() and not _equal(left, right)
    width = left.shape[1]

    def cart_column(image):
        is_cart = (image == torch.tensor(CART_COLOR, dtype=torch.uint8)).all(-1)
        return is_cart.any(0).nonzero().float().mean()

    assert cart_column(left) < width / 2 < cart_column(right)


@pytest.mark.parametrize("env_id", DISCRETE_ENV_IDS)
@pytest.mark.parametrize(
    ("actions", "error", "message"),
    [
        (lambda n, k: [0] * n, TypeError, "torch.Tensor"),
        (lambda n, k: np.zeros(n, dtype=np.int64), TypeError, "torch.Tensor"),
        (lambda n, k: torch.zeros(n + 1, dtype=torch.int64), ValueError, "shape"),
        (lambda n, k: torch.zeros(n, 1, dtype=torch.int64), ValueError, "shape"),
        (lambda n, k: torch.zeros((), dtype=torch.int64), ValueError, "shape"),
        (lambda n, k: torch.zeros(n), TypeError, "integer dtype"),
        (lambda n, k: torch.zeros(n, dtype=torch.bool), TypeError, "integer dtype"),
        (lambda n, k: torch.full((n,), -1), ValueError, "in [0,"),
        (lambda n, k: torch.full((n,), k), ValueError, "in [0,"),
        (lambda n, k: torch.zeros(n, dtype=torch.int64, device="meta"), ValueError, "must be on"),
    ],
    ids=["list", "numpy", "too-long", "2d", "scalar", "float", "bool", "negative", "too-big", "device"],
)
def test_bad_actions_raise_helpful_errors(env_id, actions, error, message):
    env = make_envs(env_id, NUM_ENVS, seed=0)
    env.reset()
    with pytest.raises(error, match=message.replace("[", r"\[").replace(".", r"\.")):
        env.step(actions(env.num_envs, env.num_actions))


@pytest.mark.parametrize("env_id", BOX_ENV_IDS)
@pytest.mark.parametrize(
    ("actions", "error", "message"),
    [
        (lambda n, d: [[0.0] * d] * n, TypeError, "torch.Tensor"),
        (lambda n, d: torch.zeros(n), ValueError, "shape"),
        (lambda n, d: torch.zeros(n, d + 1), ValueError, "shape"),
        (lambda n, d: torch.zeros(n, d, dtype=torch.int64), TypeError, "floating dtype"),
        (lambda n, d: torch.full((n, d), float("nan")), ValueError, "finite"),
        (lambda n, d: torch.full((n, d), float("inf")), ValueError, "finite"),
        (lambda n, d: torch.zeros(n, d, device="meta"), ValueError, "must be on"),
    ],
    ids=["list", "1d", "too-wide", "int", "nan", "inf", "device"],
)
def test_bad_box_actions_raise_helpful_errors(env_id, actions, error, message):
    env = make_envs(env_id, NUM_ENVS, seed=0)
    env.reset()
    with pytest.raises(error, match=message):
        env.step(actions(NUM_ENVS, env.action_shape[0]))


def test_action_values_are_checked_once_off_the_cpu_unless_asked():
    env = CartPole(3, seed=0)
    env.check_action_values = False  # what an env on a GPU does after its first step
    with pytest.raises(ValueError, match=r"in \[0, 2\)"):
        env.step(torch.tensor([0, 5, 1]))  # the first step is always checked
    env.step(torch.tensor([0, 1, 1]))
    env.check_action_values = True
    with pytest.raises(ValueError, match=r"in \[0, 2\)"):
        env.step(torch.tensor([0, 5, 1]))


def test_bad_action_message_names_the_allowed_range_and_the_values():
    env = CartPole(3, seed=0)
    with pytest.raises(ValueError, match=r"\[0, 2\).*\[0, 5\]"):
        env.step(torch.tensor([0, 5, 1]))


@pytest.mark.parametrize("num_envs", [0, -1, 2.0, True, "4"])
def test_bad_num_envs_raises(num_envs):
    with pytest.raises(ValueError, match="num_envs"):
        CartPole(num_envs)


def test_bad_seed_raises():
    with pytest.raises(TypeError, match="seed"):
        CartPole(2, seed=1.5)
    for seed in (-1, 2**63):
        with pytest.raises(ValueError, match="seed"):
            CartPole(2, seed=seed)


def test_make_envs_unknown_id_lists_the_registered_ids():
    with pytest.raises(ValueError, match="CartPol-v1") as excinfo:
        make_envs("CartPol-v1", 2)
    for env_id in ENV_IDS:
        assert env_id in str(excinfo.value)


def test_register_rejects_a_duplicate_id_unless_overwrite():
    with pytest.raises(ValueError, match="already registered"):
        register("CartPole-v1", CartPole)
    assert registered_env_ids() == REGISTERED_IDS
    env_id = "_TestOnlyCartPole-v0"
    register(env_id, CartPole)
    try:
        register(env_id, lambda num_envs, seed, device: CartPole(num_envs, seed, device), overwrite=True)
        assert isinstance(make_envs(env_id, 3, seed=0), CartPole)
    finally:
        from rl_lightning.envs import registry

        del registry._REGISTRY[env_id]
    with pytest.raises(TypeError):
        register("", CartPole)
    with pytest.raises(TypeError):
        register("_TestOnlyNotCallable-v0", 3)


def test_cartpole_gpu_alias_builds_the_same_env_with_a_deprecation_warning():
    with pytest.warns(DeprecationWarning, match='"CartPole-gpu" is deprecated: use "CartPole-v1"') as caught:
        alias = make_envs("CartPole-gpu", NUM_ENVS, seed=3)
    assert caught[0].filename == __file__  # the warning points at the caller of make_envs
    assert isinstance(alias, CartPole)
    original = _rollout(make_envs("CartPole-v1", NUM_ENVS, seed=3), 50)
    for a, b in zip(_rollout(alias, 50), original, strict=True):
        assert _equal(a, b)


def test_solved_return_is_the_native_envs_or_gymnasiums_reward_threshold():
    from rl_lightning.envs import solved_return

    assert solved_return("CartPole-v1") == solved_return("CartPole-gpu") == 475.0
    assert solved_return("Acrobot-v1") == -100.0 and solved_return("Pendulum-v1") == -200.0
    assert solved_return("MountainCar-v0") == -110.0 and solved_return("MountainCarContinuous-v0") == 90.0
    assert solved_return("LunarLander-v3") == 200.0  # gymnasium's spec (no Box2D needed to read it)
    assert solved_return("Probe1-v0") is None and solved_return("Blackjack-v1") is None
