"""EnvPool's Atari and MuJoCo envs behind the VectorEnv contract: ``make_envs(..., backend="envpool")``.

EnvPool (https://envpool.readthedocs.io) steps its envs in C++ threads and resets a finished env one
step late (gymnasium's "next step" autoreset: the step after an episode's end returns its first
obs, whatever the action). :class:`EnvPoolVectorEnv` resets the envs whose episode ended right
after the step, by sending them that next step at once (EnvPool's partial ``step(actions, env_id)``),
so that the step returns the first obs of the next episode and ``info["final_observation"]`` the
true last one: gymnasium's same-step semantics, as every rl_lightning env. The reset's work is the
one EnvPool would have done on the next step; what it adds is one more round trip to its threads
on a step where an episode ended (benchmarks/results/atari_envs.md measures the backend's cost).

For Atari ids the Atari preset runs as gymnasium's does (``rl_lightning.envs.atari``): EnvPool skips,
max-pools, resizes and greys the frames and draws the no-ops; this backend stacks the frames and does
what ``GameScore`` does with partial steps of the envs concerned: FIRE twice at a game's start and after
a lost life (within the step), a lost life ending the training episode with ``terminal_on_life_loss``
(its reset a NOOP step, then FIRE), the game's own reward and end in ``info``. Stacking here, not in
EnvPool, keeps one frame per agent step where those extra steps happen, as gymnasium's
``FrameStackObservation`` outside them does (and as ``FrameStackReplayBuffer`` needs).
"""

from __future__ import annotations

import functools
import os
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from rl_lightning._checks import check_bool, check_float, check_int, check_seed, check_str
from rl_lightning.envs._adapter_checks import refuse_given
from rl_lightning.envs._pooled import PooledVectorEnv, fire_index, lost_lives, pool_seed, preset_options
from rl_lightning.envs.atari import FIRE_STEPS
from rl_lightning.envs.spaces import float32_bounds

#: EnvPool's task families this backend wraps: its module -> our name.
_FAMILIES = {"envpool.atari": "atari", "envpool.mujoco.gym": "mujoco"}
#: EnvPool's arguments that this backend sets itself.
_SET_HERE = ("num_envs", "batch_size", "seed", "env_seed", "max_num_players", "base_path", "task", "env_type")
#: EnvPool's Atari arguments that the preset sets from its options.
_ATARI_SETS = (
    "noop_max",
    "frame_skip",
    "img_height",
    "img_width",
    "gray_scale",
    "stack_num",
    "episodic_life",
    "reward_clip",
    "use_fire_reset",
    "repeat_action_probability",
    "max_episode_steps",
)
INSTALL = "pip install 'rl_lightning[envpool]'"


def _envpool() -> Any:
    try:
        import envpool
    except ImportError as error:
        raise ImportError(f"backend='envpool' needs the envpool package: {INSTALL}") from error
    return envpool


def envpool_env_ids() -> list[str]:
    """The EnvPool ids this backend takes, sorted: its Atari games (``Breakout-v5``, also as
    ``ALE/Breakout-v5``) and its gymnasium-style MuJoCo tasks (``HalfCheetah-v5``, ``Hopper-v5``, ...)."""
    specs = _envpool().registration.registry.specs
    return sorted(task for task, (module, *_) in specs.items() if module in _FAMILIES)


def _task(env_id: str) -> tuple[str, str]:
    """EnvPool's task id and family (``"atari"`` / ``"mujoco"``) of ``env_id``; a ``ValueError`` listing
    what is allowed for another id."""
    specs = _envpool().registration.registry.specs
    task = env_id.removeprefix("ALE/")
    family = _FAMILIES.get(specs[task][0]) if task in specs else None
    if family is not None and (task == env_id or family == "atari"):
        return task, family
    ids = envpool_env_ids()
    games = [task for task in ids if _FAMILIES[specs[task][0]] == "atari"]
    mujoco = [task for task in ids if _FAMILIES[specs[task][0]] == "mujoco" and task.endswith("-v5")]
    elsewhere = f" (EnvPool's {specs[task][0]} task, which this backend does not wrap)" if task in specs else ""
    raise ValueError(
        f"unknown env_id {env_id!r} for backend='envpool'{elsewhere}: it takes Atari ids (ALE/Breakout-v5 or "
        f"EnvPool's Breakout-v5; {len(games)} games) and MuJoCo ids ({', '.join(mujoco)}, and older versions); "
        "all of them: rl_lightning.envs.envpool_adapter.envpool_env_ids()"
    )


def _atari_kwargs(options: dict[str, Any]) -> dict[str, Any]:
    """EnvPool's Atari arguments for the preset's options: its preprocessing of single frames; the stacks,
    lives, FIRE presses and clipping are this backend's."""
    return {
        "noop_max": max(options["noop_max"], 1),  # EnvPool draws 1 + U[0, noop_max) no-op frames
        "frame_skip": options["frame_skip"],  # with the max of the last two frames
        "img_height": options["screen_size"],
        "img_width": options["screen_size"],
        "gray_scale": options["grayscale"],
        "stack_num": 1,
        "episodic_life": False,
        "reward_clip": False,
        "use_fire_reset": False,
        "repeat_action_probability": options["repeat_action_probability"],
        "max_episode_steps": options["max_episode_steps"],
    }


def _check_kwargs(task: str, family: str, envpool_kwargs: dict[str, Any]) -> None:
    """A ``ValueError`` for an argument set here or by the preset, or one EnvPool's ``task`` lacks."""
    refuse_given(
        envpool_kwargs,
        _SET_HERE,
        "are set by EnvPoolVectorEnv itself: num_envs and seed are its own arguments (make_envs(env_id, num_envs, "
        "seed=...)); batch_size would make EnvPool asynchronous, outside the lock-step contract",
    )
    if "render_mode" in envpool_kwargs:
        raise ValueError("pass render=True (for render_mode='rgb_array') instead of render_mode")
    if family == "atari":
        refuse_given(
            envpool_kwargs,
            _ATARI_SETS,
            "beside the Atari preset: it sets EnvPool's preprocessing from its options; pass them there, e.g. "
            "env_kwargs={'atari': {'frame_skip': 4, 'screen_size': 84, 'terminal_on_life_loss': True, "
            "'max_episode_steps': 27000}} (rl_lightning.envs.atari)",
        )
    if not envpool_kwargs:
        return
    defaults = _envpool().make_spec(task).config._asdict()
    allowed = set(defaults) - set(_SET_HERE) - {"gym_reset_return_info"}
    if family == "atari":
        allowed -= set(_ATARI_SETS)
    unknown = sorted(set(envpool_kwargs) - allowed)
    if unknown:
        raise ValueError(f"EnvPool's {task!r} has no argument(s) {unknown}; it takes: {', '.join(sorted(allowed))}")
    for name, value in envpool_kwargs.items():
        _check_envpool_value(f"env_kwargs['{name}']", value, defaults[name], _MINIMUMS.get(name))


#: The smallest value of EnvPool's int arguments that it does not check itself (``num_threads=-1`` aborts the
#: process with no message; ``frame_skip=0`` gives NaN rewards; ``max_episode_steps=0`` truncates every step).
_MINIMUMS = {"num_threads": 0, "thread_affinity_offset": -1, "frame_skip": 1, "frame_stack": 1, "max_episode_steps": 1}


def _check_envpool_value(name: str, value: Any, default: Any, minimum: int | None) -> None:
    """``value`` of the type of EnvPool's ``default`` (which EnvPool coerces or aborts on), ints >= ``minimum``
    and floats finite."""
    if isinstance(default, bool):
        check_bool(name, value)
    elif isinstance(default, int):
        check_int(name, value, minimum)
    elif isinstance(default, float):
        check_float(name, value)
    elif isinstance(default, str):
        check_str(name, value)


class EnvPoolVectorEnv(PooledVectorEnv):
    """``num_envs`` copies of an EnvPool Atari or MuJoCo task, stepped in EnvPool's C++ threads.

    Atari ids (``ALE/Breakout-v5`` or EnvPool's ``Breakout-v5``) always run the Atari preset
    (:mod:`rl_lightning.envs.atari`: EnvPool's Atari envs always preprocess), with its defaults when
    ``atari`` is not given: uint8 ``(frame_stack, screen_size, screen_size)`` grey frame stacks
    (``(frame_stack, H, W, 3)`` in colour), rewards clipped to their sign, and ``info["game_reward"]`` /
    ``info["game_over"]``, the game's own score and ends, as gymnasium's preset gives them (see the
    module's doc). The preset's ``max_episode_steps`` counts EnvPool's steps (the FIRE steps too) from
    the end of the reset's no-ops; ``noop_max=0`` is EnvPool's 1 (one no-op frame).

    MuJoCo ids (``HalfCheetah-v5``, ``Hopper-v5``, ...; :func:`envpool_env_ids`) give float32
    observations and float32 ``Box`` actions, clipped to their bounds.

    Seeds: env ``i`` gets ``seed + i`` (folded into int32). EnvPool fixes its seeds when it builds its
    envs: a reset with a new seed (``reset(seed=s)``, ``seed(s)`` then ``reset()``) builds them again,
    which costs about 0.1 s per Atari env. Their state cannot be saved: ``restorable = False``, and
    :meth:`load_state_dict` restarts them fresh.

    Args:
        env_id: an Atari or MuJoCo id of EnvPool (see above).
        num_envs: envs, >= 1.
        seed: the envs' seed (None: one from torch's global RNG).
        device: where the tensors go.
        atari: the Atari preset's options (``True`` or a dict; None: the defaults), for Atari ids only.
        render: build the envs with ``render_mode="rgb_array"``: :meth:`render` gives their frames.
        **envpool_kwargs: EnvPool's own arguments (``envpool.make``), e.g. ``num_threads`` (0: EnvPool's
            choice), ``thread_affinity_offset``, ``full_action_space``, MuJoCo's ``ctrl_cost_weight``.

    Raises:
        ImportError: without the envpool package.
        ValueError: for an id this backend does not take (the message says which it takes), the preset
            for a MuJoCo id or ``atari=False`` for an Atari one, an argument EnvPool lacks or that is set here,
            or one out of range (``num_threads=-1``: EnvPool itself would abort the process).
        TypeError: for an EnvPool argument of another type than EnvPool's default (``full_action_space=1``).
    """

    backend_name = "EnvPool"

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        seed: int | None = None,
        device: torch.device | str = "cpu",
        atari: bool | dict[str, Any] | None = None,
        render: bool = False,
        **envpool_kwargs: Any,
    ):
        check_str("env_id", env_id)
        check_int("num_envs", num_envs, 1)
        check_bool("render", render)
        #: EnvPool's task id.
        self.task, family = _task(env_id)
        self.env_id = env_id
        if family == "atari":
            self.atari = preset_options(atari, env_id, "EnvPool's Atari envs always preprocess", "EnvPool")
        elif atari is not None and atari is not False:
            raise ValueError(
                f"env_kwargs['atari'] is the Atari preset, for Atari ids (ALE/Breakout-v5, ...); {env_id!r} is "
                "EnvPool's MuJoCo task"
            )
        else:
            self.atari = None
        _check_kwargs(self.task, family, envpool_kwargs)
        self._kwargs = {**envpool_kwargs, **(_atari_kwargs(self.atari) if self.atari else {})}
        if render:
            self._kwargs["render_mode"] = "rgb_array"
        if seed is None:  # drawn here: the envs are built with it
            seed = int(torch.randint(0, 2**62, (1,)).item())
        self.pool: Any = None
        self.num_envs = num_envs  # (set again by VectorEnv's __init__)
        self._build_pool(pool_seed(check_seed("seed", seed), num_envs))
        config = self.pool.spec.config._asdict()
        self.max_episode_steps = int(config["max_episode_steps"])
        self._set_spaces(self.pool.observation_space, self.pool.action_space)
        #: The index of FIRE, pressed at a game's start and after a lost life (None: not pressed).
        self._fire = None
        if self.atari and self.atari["fire_reset"]:
            self._fire = fire_index(_action_set(config["base_path"], config["task"], config["full_action_space"]))
        super().__init__(num_envs, seed, device)  # the same seed: the envs just built are not built again
        self.can_render = render

    def _set_spaces(self, obs_space: gym.spaces.Box, action_space: gym.Space) -> None:
        if self.atari is not None:
            size = self.atari["screen_size"]
            shape = (self.atari["frame_stack"], size, size) + (() if self.atari["grayscale"] else (3,))
            self.single_observation_space = gym.spaces.Box(0, 255, shape, np.uint8)
            self.single_action_space = gym.spaces.Discrete(int(action_space.n))
            self._action_np_dtype = np.int32
            return
        low, high = float32_bounds(obs_space.low), float32_bounds(obs_space.high)
        self.single_observation_space = gym.spaces.Box(low, high, obs_space.shape, np.float32)
        low, high = float32_bounds(action_space.low), float32_bounds(action_space.high)
        self.single_action_space = gym.spaces.Box(low, high, action_space.shape, np.float32)
        self._action_np_dtype = action_space.dtype

    def _build_pool(self, seed: int) -> None:
        """(Re)build EnvPool's envs with ``seed`` (EnvPool seeds its envs when it builds them)."""
        self.close()
        try:
            self.pool = _envpool().make(
                self.task, env_type="gymnasium", num_envs=self.num_envs, seed=seed, **self._kwargs
            )
        except (TypeError, ValueError, RuntimeError, AssertionError) as error:
            raise ValueError(f"EnvPool refused to build {self.task!r} with {self._kwargs}: {error}") from None
        self._pool_seed, self._pool_fresh = seed, True

    def _convert_obs(self, obs: np.ndarray) -> np.ndarray:
        return obs if self.atari is not None else obs.astype(np.float32)  # Atari: the stacks, built here

    def _send(self, actions: np.ndarray | int, env_ids: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
        """One EnvPool step of the envs ``env_ids`` (sorted; None: all) with ``actions`` (an int: that action in
        each): their obs (Atari: frames, :meth:`_frames`), rewards (float32),
        terminated, truncated and lives (None outside Atari), in the order of ``env_ids``. An env whose episode
        ended is reset by it, whatever its action (EnvPool's autoreset)."""
        count = self.num_envs if env_ids is None else len(env_ids)
        if isinstance(actions, int):
            actions = np.full((count, *self.action_shape), actions, self._action_np_dtype)
        obs, reward, terminated, truncated, info = self.pool.step(actions, env_ids)
        lives = info.get("lives")
        order = info["env_id"]
        if (np.diff(order) < 0).any():  # EnvPool's sync mode keeps the order sent; kept here if it did not
            obs, reward, terminated, truncated, lives = (
                None if value is None else value[np.argsort(order)]
                for value in (obs, reward, terminated, truncated, lives)
            )
        if self.atari is not None:
            obs = self._frames(obs)
        return obs, reward.astype(np.float32), terminated, truncated, None if lives is None else np.array(lives)

    # -- the contract ---------------------------------------------------------------------

    def _reset_all(self) -> Tensor:
        seed = self._reset_seed
        if self.pool is None:  # closed: built again (with the last seed, if no new one)
            self._build_pool(self._pool_seed if seed is None else seed)
        elif seed is not None and not (self._pool_fresh and self._pool_seed == seed):
            self._build_pool(seed)
        self._reset_seed, self._pool_fresh, self._needs_reset = None, False, False
        obs, info = self.pool.reset()
        if self.atari is None:
            return self._obs_tensor(obs)
        self._lives = np.array(info["lives"])
        obs = self._frames(obs)
        all_envs = np.arange(self.num_envs, dtype=np.int32)
        #: The frame stacks of the last step (never written to: the tensors returned share their memory).
        self._stacks = self._stacked(self._press_fire(all_envs, obs))
        return self._obs_tensor(self._stacks)

    def _step(self, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, dict[str, Any]]:
        if self._needs_reset:  # stepped before any reset: start where reset() would
            self._reset_all()
        obs, reward, terminated, truncated, lives = self._send(self._numpy(actions, self._action_np_dtype))
        game_over = None
        if self.atari is not None:
            game_over = terminated | truncated  # a game over or the time limit: the whole game ended
            lost = lost_lives(lives, self._lives) & ~game_over
            if lost.any() and self.atari["terminal_on_life_loss"]:
                terminated = terminated | lost  # the training episode ends, the game goes on
            elif lost.any() and self._fire is not None:  # the game goes on in the episode: launch the next ball
                fire_ids = np.flatnonzero(lost).astype(np.int32)
                fire_obs, fire_reward, fire_terminated, fire_truncated, fire_lives = self._fire_within(fire_ids)
                obs[fire_ids], terminated[fire_ids], truncated[fire_ids] = fire_obs, fire_terminated, fire_truncated
                reward[fire_ids] += fire_reward
                lives[fire_ids] = fire_lives
                game_over = terminated | truncated
            self._lives = lives
            obs = np.concatenate((self._stacks[:, 1:], obs), axis=1)  # a new array: returned tensors keep theirs
        ended = terminated | truncated
        final = None
        if ended.any():  # EnvPool would reset these on the next step: reset them now (same-step autoreset)
            final, obs = obs, np.array(obs)
            ended_ids = np.flatnonzero(ended).astype(np.int32)
            obs[ended_ids] = self._start(ended_ids)
        if self.atari is not None:
            self._stacks = obs
        return self._output(obs, final, reward, terminated, truncated, game_over)

    def _start(self, env_ids: np.ndarray) -> np.ndarray:
        """The first obs of the next episode of the envs ``env_ids``, whose episode ended.

        EnvPool's own autoreset, at once: a step sent to an env whose episode ended resets it, whatever the
        action. (Its ``reset(env_id=...)`` would do as well, but the step is also the preset's NOOP after a lost
        life that ended only the training episode.) Then the preset's FIRE, and the stack of the first frame."""
        obs, _, terminated, truncated, lives = self._send(0, env_ids)
        if self.atari is None:
            return obs
        over = terminated | truncated  # the NOOP after a lost life ended the game: a new one
        if over.any():
            obs[over], *_, lives[over] = self._send(0, env_ids[over])
        self._lives[env_ids] = lives
        return self._stacked(self._press_fire(env_ids, obs))

    def _press_fire(self, env_ids: np.ndarray, obs: np.ndarray) -> np.ndarray:
        """FIRE for ``FIRE_STEPS`` steps in the envs ``env_ids`` (at a game's start, or a life's, with
        ``terminal_on_life_loss``), where the game needs it, a game that ends on it starting again; their rewards
        are not counted (as gymnasium's preset, ``GameScore``). Returns their last obs (``obs`` without FIRE)."""
        if self._fire is None:
            return obs
        for _ in range(FIRE_STEPS):
            obs, _, terminated, truncated, lives = self._send(self._fire, env_ids)
            over = terminated | truncated
            if over.any():
                obs[over], *_, lives[over] = self._send(0, env_ids[over])
            self._lives[env_ids] = lives
        return obs

    def _fire_within(self, env_ids: np.ndarray) -> tuple[np.ndarray, ...]:
        """FIRE for ``FIRE_STEPS`` steps in the envs ``env_ids`` that lost a life, within the step (the game goes
        on in the training episode), an env stopping where its game ends: their last obs, flags and lives, and
        the sum of their rewards."""
        obs, reward, terminated, truncated, lives = (None,) * 5
        going = np.ones(len(env_ids), dtype=bool)
        for _ in range(FIRE_STEPS):
            step = self._send(self._fire, env_ids[going])
            if obs is None:
                obs, reward, terminated, truncated, lives = (np.array(value) for value in step)
            else:
                obs[going], terminated[going], truncated[going], lives[going] = step[0], *step[2:]
                reward[going] += step[1]
            going &= ~(terminated | truncated)
            if not going.any():
                break
        return obs, reward, terminated, truncated, lives

    def _frames(self, obs: np.ndarray) -> np.ndarray:
        """EnvPool's Atari obs (one frame: ``(k, 1, H, W)`` grey, ``(k, 3, H, W)`` colour) as frames to stack,
        ``(k, 1, H, W)`` or ``(k, 1, H, W, 3)``."""
        return obs if self.atari["grayscale"] else obs.transpose(0, 2, 3, 1)[:, None]

    def _stacked(self, frames: np.ndarray) -> np.ndarray:
        """Stacks of ``frames`` ``(k, 1, ...)`` repeated: a new episode's first obs (gymnasium's padding)."""
        return np.repeat(frames, self.atari["frame_stack"], axis=1)

    def render(self) -> Tensor:
        """The current frame of every env, uint8 ``(num_envs, H, W, 3)`` on the CPU (needs ``render=True``)."""
        if not self.can_render:
            raise NotImplementedError(f"build EnvPoolVectorEnv({self.env_id!r}, ...) with render=True to render it")
        if self._needs_reset:
            self._reset_all()
        return torch.from_numpy(np.ascontiguousarray(self.pool.render(env_ids=np.arange(self.num_envs))))

    def close(self) -> None:
        """Close EnvPool's envs (a later reset or step builds them again)."""
        pool, self.pool = getattr(self, "pool", None), None
        if pool is not None:
            pool.close()
            self._needs_reset = True


@functools.lru_cache(maxsize=64)
def _action_set(base_path: str, task: str, full_action_space: bool) -> tuple[Any, ...]:
    """The ALE actions of EnvPool's Atari task ``task`` (its minimal set, or the full one), read with ale-py
    from EnvPool's own ROM."""
    try:
        import ale_py
    except ImportError as error:
        raise ImportError(f"the Atari preset's fire_reset reads the game's actions with ale-py: {INSTALL}") from error
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
    ale = ale_py.ALEInterface()
    ale.loadROM(os.path.join(base_path, "atari", "roms", f"{task}.bin"))
    return tuple(ale.getLegalActionSet() if full_action_space else ale.getMinimalActionSet())
