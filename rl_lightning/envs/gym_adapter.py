"""Any gymnasium env id behind the :class:`~rl_lightning.envs.base.VectorEnv` contract.

:class:`GymnasiumVectorEnv` wraps gymnasium's own vector env (``gymnasium.make_vec`` in
``"sync"`` or ``"async"`` mode, same-step auto-reset) and converts at the boundary: numpy in,
torch out, one batched conversion per array and no Python loop over envs. What it passes to
``make_vec`` from its ``env_kwargs`` is :mod:`rl_lightning.envs.gym_options`'s; an id's spec (the
``"module:id"`` form, namespace packages) and time limit are :mod:`rl_lightning.envs.gym_ids`'s.

Importing this module also registers ``rl_lightning/CartPolePixels-v1`` with gymnasium
(:mod:`rl_lightning.envs.cartpole_pixels`).
"""

from __future__ import annotations

import atexit
import contextlib
import warnings
import weakref
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from rl_lightning._checks import check_bool, check_choice, check_seed
from rl_lightning.envs._adapter_checks import uint8_to_draw
from rl_lightning.envs.atari import GAME_OVER_KEY, GAME_REWARD_KEY
from rl_lightning.envs.base import VectorEnv
from rl_lightning.envs.cartpole_pixels import CARTPOLE_PIXELS_ID as CARTPOLE_PIXELS_ID  # re-exported
from rl_lightning.envs.cartpole_pixels import CartPolePixelsEnv as CartPolePixelsEnv  # re-exported
from rl_lightning.envs.gym_ids import gymnasium_spec, time_limit
from rl_lightning.envs.gym_ids import import_env_module as import_env_module  # re-exported
from rl_lightning.envs.gym_options import check_rgb_array, gymnasium_make_kwargs
from rl_lightning.envs.gym_options import resolve_wrappers as resolve_wrappers  # re-exported
from rl_lightning.envs.gym_spaces import encode_observations as encode_observations  # re-exported
from rl_lightning.envs.gym_spaces import uint8_image_layout, unsupported_space
from rl_lightning.envs.mujoco_warnings import headless_mujoco_can_render, route_mujoco_warnings
from rl_lightning.envs.spaces import (
    ACTION_MASK_KEY,
    MASK_CONVENTION,
    OBSERVATION_KEY,
    TensorTree,
    as_bool_mask,
    empty_mask_rows,
    encode_leaf,
    flat_parts,
    flat_values,
    float32_bounds,
    is_structured,
    leaf_space,
)

VECTORIZATION_MODES = ("sync", "async")


#: Evaluation's cap on an episode of an env without a time limit (``evaluate_policy(max_episode_steps=None)``).
NO_TIME_LIMIT_EVAL_STEPS = 1_000
_WARNED_NO_TIME_LIMIT: set[str] = set()


def _quiet_async_worker(*args: Any) -> None:
    """gymnasium's async worker, quiet. It ignores SIGINT and SIGTERM: Ctrl-C (and a scheduler's
    SIGTERM) reach the whole process group, and the main process stops at its next safe point and
    closes its workers; a worker that died first would break the step under way (and one forked
    during a Lightning fit would otherwise run the SIGTERM handler it inherited, printing "Received
    SIGTERM" and staying alive). It ends, without a traceback, when told to close or when the main
    process has closed its pipe (gymnasium's forced close, or the main process gone)."""
    import signal

    from gymnasium.vector.async_vector_env import _async_worker

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    route_mujoco_warnings()  # a worker's MuJoCo models warn as the main process's do
    with contextlib.suppress(EOFError, BrokenPipeError, ConnectionResetError):
        _async_worker(*args)


def _close_quietly(reference: weakref.ref) -> None:
    envs = reference()
    if envs is not None:
        with contextlib.suppress(Exception):
            envs.close()


class GymnasiumVectorEnv(VectorEnv):
    """``num_envs`` copies of a gymnasium env id, stepped by gymnasium's own vector env, as tensors.

    The contract is :class:`VectorEnv`'s: tensors on ``device``, auto-reset inside ``step`` with
    ``info["final_observation"]`` (gymnasium's same-step ``final_obs`` where an episode ended),
    ``terminated`` / ``truncated`` exactly as gymnasium says. Spaces are converted:

    - Box observations: float32 (from any float, int or bool dtype; bounds cast to float32),
      except uint8 images (``(H, W)``, ``(H, W, C)``, ``(C, H, W)`` with C up to 16, ``(K, H, W, C)``
      with C 1 or 3: :func:`~rl_lightning.envs.spaces.image_layout`), which stay uint8 (scaled
      inside the network) and are what :meth:`draw` can show (``can_draw``). A uint8 Box of a
      shape whose channel axis cannot be told is a ``ValueError`` saying what to wrap it with.
    - Discrete observations ``Discrete(n, start)``: one-hot, a float32 ``Box(0, 1, (n,))``
      (``obs[i, k] = 1`` for gymnasium's observation ``start + k``).
    - Discrete actions ``Discrete(n, start)``: our ``Discrete(n)``; action ``k`` is gymnasium's
      ``start + k``. Box actions: a float32 Box with the same bounds (clipped by ``step``).
    - Any other space (Dict, Tuple, MultiDiscrete, MultiBinary, Text, ...) is a ``ValueError``.

    Seeding: the first reset (and the first after ``reset(seed=s)``) seeds gymnasium's env ``i``
    with ``seed + i``; later resets continue each env's own RNG, as in gymnasium.

    A gymnasium env cannot save its internal state: :meth:`state_dict` holds only the env id,
    ``num_envs``, the private generator and ``"restorable": False``; :meth:`load_state_dict` warns
    and restarts every env with a fresh reset (seeded from the restored generator), so a resumed
    run goes on with new episodes rather than the saved ones. Likewise ``get_rng_state`` /
    ``set_rng_state`` cover the private generator only, not gymnasium's per-env RNGs.

    Args:
        env_id: a gymnasium id (``gymnasium.registry``; ``ALE/...`` imports ``ale_py``).
        num_envs: number of copies.
        seed: seed of the first reset (``None``: drawn from torch's global RNG).
        device: where observations, rewards and flags are returned.
        vectorization_mode: ``"sync"`` (one process) or ``"async"`` (one subprocess per env).
        render: build the envs with ``render_mode="rgb_array"`` so that :meth:`render` works
            (off by default: some envs then set up a renderer, which costs time and memory, and
            gymnasium's classic-control ones need pygame).
        **env_kwargs: passed to the env's constructor (``gymnasium.make``), e.g.
            ``max_episode_steps=100``; ``wrappers`` (:func:`resolve_wrappers`); ``atari``: the Atari preset
            (``True`` or a dict of its options, :mod:`rl_lightning.envs.atari`), for ALE ids: the standard
            84x84 grey 4-frame pipeline, the training reward clipped, and ``info["game_reward"]`` /
            ``info["game_over"]`` (tensors) with the real game score and game ends.
    """

    restorable = False  # gymnasium envs cannot save their internal state

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        seed: int | None = None,
        device: torch.device | str = "cpu",
        vectorization_mode: str = "sync",
        render: bool = False,
        **env_kwargs: Any,
    ):
        spec = gymnasium_spec(env_id)
        check_choice("vectorization_mode", vectorization_mode, VECTORIZATION_MODES)
        check_bool("render", render)
        # Checked before any env (or subprocess) exists; the base class checks them again.
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
        if seed is not None:
            check_seed("seed", seed)
        #: The Atari preset's options (``rl_lightning.envs.atari``), None without it.
        self.atari, env_kwargs = gymnasium_make_kwargs(env_id, spec, env_kwargs, render)

        self.env_id = env_id
        self.vectorization_mode = vectorization_mode
        #: The episodes' time limit in steps (None: the env has none, an episode may never end).
        self.max_episode_steps = self.atari["max_episode_steps"] if self.atari else time_limit(spec, env_kwargs)
        if self.max_episode_steps is None and env_id not in _WARNED_NO_TIME_LIMIT:
            _WARNED_NO_TIME_LIMIT.add(env_id)  # once per process, not per env instance
            warnings.warn(
                f"{env_id} has no time limit (its gymnasium spec has no max_episode_steps): an episode may never "
                f"end; set one with env_kwargs={{'max_episode_steps': N}} (make_envs({env_id!r}, ..., "
                f"max_episode_steps=N)). Evaluation cuts its episodes at {NO_TIME_LIMIT_EVAL_STEPS:,} steps "
                f"(evaluate_policy / Evaluation max_episode_steps, the scripts' --eval_max_episode_steps)",
                stacklevel=2,
            )
        self._mujoco = "mujoco" in str(spec.entry_point)
        if self._mujoco:
            route_mujoco_warnings()  # its C warnings once, not at every model load (mujoco_warnings)
        #: gymnasium's vector env doing the work.
        self.gymnasium_envs = self._make_gymnasium_envs(env_id, num_envs, env_kwargs)
        try:
            self._convert_action_space(env_id, self.gymnasium_envs.single_action_space)
            self._convert_observation_space(env_id, self.gymnasium_envs.single_observation_space)
            metadata = self.gymnasium_envs.metadata
            if render:
                check_rgb_array(env_id, metadata.get("render_modes", []))
            super().__init__(num_envs, seed, device)
        except BaseException:
            self.gymnasium_envs.close()
            raise
        fps = metadata.get("render_fps")
        if isinstance(fps, (int, float)) and not isinstance(fps, bool) and fps > 0:
            self.render_fps = max(1, round(fps))
        self.can_draw = self._obs_kind == "image"
        self.can_render = render
        self._on_cpu = self.device.type == "cpu"
        self._needs_reset = True
        self._steps_since_reset = 0
        if vectorization_mode == "async":
            # Subprocesses left running at interpreter exit hang it (a broken pipe in a worker):
            # close them first, unless closed before.
            atexit.register(_close_quietly, weakref.ref(self))

    def _convert_observation_space(self, env_id: str, space: gym.Space) -> None:
        """Set ``single_observation_space`` (our form) and how to convert gymnasium's obs."""
        #: gymnasium's own observation space of one env (a Discrete one is one-hot in ours).
        self.gymnasium_observation_space = space
        #: Where the action masks come from: None (no masks), "obs" (a Dict key) or "info" (``info["action_mask"]``).
        self.mask_source = self._find_action_masks(space)
        if is_structured(space) or self.mask_source == "info":
            self._obs_kind = "structured"
            parts = flat_parts(space) if is_structured(space) else {OBSERVATION_KEY: space}
            if self.mask_source == "info":
                if ACTION_MASK_KEY in parts:
                    raise ValueError(f"{env_id!r} has an action mask both in its observation and in its info")
                parts[ACTION_MASK_KEY] = gym.spaces.MultiBinary(self._mask_size)
            #: The gymnasium space of each of our observation keys.
            self.observation_parts = parts
            self.single_observation_space = gym.spaces.Dict({key: leaf_space(key, part) for key, part in parts.items()})
        elif isinstance(space, gym.spaces.Discrete):
            self._obs_kind = "one_hot"
            self._obs_start = int(space.start)
            self._obs_size = int(space.n)
            self.single_observation_space = gym.spaces.Box(0.0, 1.0, (int(space.n),), np.float32)
        elif isinstance(space, gym.spaces.Box) and (layout := uint8_image_layout(env_id, space)) is not None:
            self._obs_kind = "image"
            #: How :meth:`draw` reads the images (``rl_lightning.envs.spaces.image_layout``).
            self._image_layout = layout
            self.single_observation_space = space
        elif isinstance(space, gym.spaces.Box):
            self._obs_kind = "float32" if space.dtype == np.float32 else "cast"
            low, high = float32_bounds(space.low), float32_bounds(space.high)
            self.single_observation_space = gym.spaces.Box(low, high, space.shape, np.float32)
        else:
            raise unsupported_space(env_id, "observation", space, "Box, Discrete, Dict and Tuple observations")

    def _find_action_masks(self, space: gym.Space) -> str | None:
        """``"obs"`` for a Dict observation with an ``"action_mask"`` key, ``"info"`` for an env whose
        reset info has ``"action_mask"`` (Taxi-v3; looked up with one reset), else None."""
        self._mask_size = None
        if isinstance(space, gym.spaces.Dict) and ACTION_MASK_KEY in space.spaces:
            return "obs"
        if not isinstance(self.single_action_space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
            return None
        _, info = self.gymnasium_envs.reset()
        mask = info.get(ACTION_MASK_KEY) if isinstance(info, dict) else None
        if mask is None:
            return None
        self._mask_size = int(np.asarray(mask).reshape(self.gymnasium_envs.num_envs, -1).shape[1])
        return "info"

    def _convert_action_space(self, env_id: str, space: gym.Space) -> None:
        """Set ``single_action_space`` (our form) and how to map actions back to gymnasium's."""
        #: gymnasium's own action space of one env (``Discrete(n, start)``: our action k is its start + k).
        self.gymnasium_action_space = space
        self._action_np_dtype = getattr(space, "dtype", None)
        if isinstance(space, gym.spaces.Discrete):
            self._action_start = int(space.start)
            self.single_action_space = gym.spaces.Discrete(int(space.n))
        elif isinstance(space, gym.spaces.MultiDiscrete) and space.nvec.ndim == 1:
            self._action_start = np.asarray(space.start, dtype=np.int64)
            self.single_action_space = gym.spaces.MultiDiscrete(space.nvec.astype(np.int64))
        elif isinstance(space, gym.spaces.MultiBinary) and len(space.shape) == 1:
            self.single_action_space = gym.spaces.MultiBinary(space.shape[0])
        elif isinstance(space, gym.spaces.Box) and np.issubdtype(space.dtype, np.floating):
            self._action_np_dtype = space.dtype
            low, high = float32_bounds(space.low), float32_bounds(space.high)
            self.single_action_space = gym.spaces.Box(low, high, space.shape, np.float32)
        else:
            raise unsupported_space(
                env_id, "action", space, "Discrete, floating Box, 1-d MultiDiscrete and 1-d MultiBinary actions"
            )

    def _make_gymnasium_envs(self, env_id: str, num_envs: int, env_kwargs: dict[str, Any]) -> gym.vector.VectorEnv:
        """Gymnasium's vector env doing the work (``RayVectorEnv``: its copies in Ray actors)."""
        return gym.make_vec(
            env_id,
            num_envs=num_envs,
            vectorization_mode=self.vectorization_mode,
            # copy=False: every array is converted (copied) into a fresh tensor anyway.
            vector_kwargs={
                "autoreset_mode": gym.vector.AutoresetMode.SAME_STEP,
                "copy": False,
                **({"worker": _quiet_async_worker} if self.vectorization_mode == "async" else {}),
            },
            **env_kwargs,
        )

    # -- the contract ---------------------------------------------------------------------

    def seed(self, seed: int | None) -> None:
        """Seed the private generator and the next reset of the gymnasium envs (env ``i`` gets
        ``seed + i``; ``None``: a seed from torch's global RNG)."""
        if seed is None:
            seed = int(torch.randint(0, 2**62, (1,)).item())
        super().seed(seed)
        self._reset_seed: int | None = seed

    def _reset_all(self) -> Tensor | TensorTree:
        obs, info = self.gymnasium_envs.reset(seed=self._reset_seed)
        self._reset_seed = None  # later resets continue each env's RNG
        self._needs_reset = False
        self._steps_since_reset = 0  # what a mask error names: "reset" or "step N"
        if self._obs_kind == "structured":
            return self._obs_tree(obs, info)
        return self._obs_tensor(obs)

    def _step(self, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, dict[str, Any]]:
        if self._needs_reset:  # stepped before any reset: start where reset() would
            self._reset_all()
        self._steps_since_reset += 1
        gym_actions = self._numpy(actions)
        if self.action_kind == "discrete":
            if gym_actions.dtype != np.int64 or self._action_start:
                gym_actions = gym_actions.astype(np.int64) + self._action_start
        elif self.action_kind == "multi_discrete":
            gym_actions = (gym_actions + self._action_start).astype(self._action_np_dtype)
        elif self._action_np_dtype != np.float32:
            gym_actions = gym_actions.astype(self._action_np_dtype)
        obs, reward, terminated, truncated, info = self.gymnasium_envs.step(gym_actions)
        ended = info.get("_final_obs")
        if self._obs_kind == "structured":
            next_obs: Tensor | TensorTree = self._obs_tree(obs, info)
            final_obs = next_obs if ended is None else self._final_obs_tree(next_obs, ended, info)
        else:
            next_obs = self._obs_tensor(obs)
            if ended is None:  # gymnasium adds the key only when an episode ended
                final_obs = next_obs
            else:
                # Built in numpy: one masked assignment costs less than a torch index_put.
                final = np.array(obs)
                final[ended] = np.array(info["final_obs"][ended].tolist(), dtype=final.dtype)
                final_obs = self._obs_tensor(final, owned=True)
        reward = torch.from_numpy(reward.astype(np.float32))
        # gymnasium returns fresh flag arrays: no copy needed.
        terminated, truncated = torch.from_numpy(terminated), torch.from_numpy(truncated)
        step_info = {"final_observation": final_obs}
        if self.atari is not None:
            step_info.update(self._game_info(info, ended))
        if not self._on_cpu:
            reward, terminated, truncated = (
                reward.to(self.device),
                terminated.to(self.device),
                truncated.to(self.device),
            )
        return next_obs, reward, terminated, truncated, step_info

    def _game_info(self, info: dict[str, Any], ended: np.ndarray | None) -> dict[str, Tensor]:
        """The Atari preset's ``game_reward`` / ``game_over`` of every env as tensors on the device: of the
        step's info, or of its ``final_info`` for the envs whose episode ended (their info is the reset's)."""
        values = {}
        for key, dtype in (GAME_REWARD_KEY, np.float32), (GAME_OVER_KEY, np.bool_):
            value = np.asarray(info.get(key, np.zeros(self.num_envs)), dtype=dtype)  # absent: every env ended
            if ended is not None:
                value = np.where(ended, np.asarray(info["final_info"][key], dtype=dtype), value)
            values[key] = torch.from_numpy(value).to(self.device)
        return values

    def _check_action_values(self, actions: Tensor) -> None:
        # The actions go to numpy for gymnasium anyway: numpy's reductions cost less than
        # torch's for a small batch (the same checks and messages as the base class).
        values = self._numpy(actions)
        if self.action_kind == "discrete":
            low, high = int(values.min()), int(values.max())
            if low < 0 or high >= self.num_actions:
                raise ValueError(f"actions must be in [0, {self.num_actions}), got values in [{low}, {high}]")
        elif self.action_kind in ("multi_discrete", "multi_binary"):
            super()._check_action_values(actions)
        elif not np.isfinite(values).all():
            raise ValueError("actions must be finite, got NaN or infinite values")

    def _obs_tree(self, obs: Any, info: dict[str, Any]) -> TensorTree:
        """A batch of structured gymnasium observations (and, for masks from ``info``, its masks) as a tree."""
        values = self._flat(obs)
        if self.mask_source == "info":
            values[ACTION_MASK_KEY] = self._info_mask(info)
        if self.mask_source is not None:
            values[ACTION_MASK_KEY] = self._legal_mask(values[ACTION_MASK_KEY])
        return TensorTree(
            {
                key: encode_leaf(part, values[key], key, self.device).clone()
                for key, part in self.observation_parts.items()
            }
        )

    def _at(self) -> str:
        """Where the latest observations came from, for an error: ``"reset"`` or ``"step N"``."""
        return "reset" if self._steps_since_reset == 0 else f"step {self._steps_since_reset}"

    def _mask_place(self, final: bool = False) -> str:
        """Where the adapter reads the masks, for an error: ``info['action_mask']`` or ``obs['action_mask']``."""
        place = f"info[{ACTION_MASK_KEY!r}]" if self.mask_source == "info" else f"obs[{ACTION_MASK_KEY!r}]"
        return f"the final {place} (of the episodes that ended)" if final else place

    def _info_mask(self, info: dict[str, Any], envs: np.ndarray | None = None, final: bool = False) -> np.ndarray:
        """gymnasium's ``info["action_mask"]`` (of the envs ``envs``; None: all); a ``ValueError`` naming the env
        id, the step and where it looked if one lacks it (gymnasium's ``info["_action_mask"]`` says which have it)."""
        mask = info.get(ACTION_MASK_KEY)
        present = np.broadcast_to(info.get(f"_{ACTION_MASK_KEY}", mask is not None), (self.num_envs,))
        envs = np.arange(self.num_envs) if envs is None else envs
        missing = envs[~present[envs]]
        if len(missing):
            place = "info['final_info']['action_mask'] (of the episodes that ended)" if final else "info['action_mask']"
            raise ValueError(
                f"{self.env_id!r} gave no action mask at {self._at()} for env(s) {missing[:8].tolist()} of "
                f"{self.num_envs}: rl_lightning looked in {place}; an env whose masks come from info must give "
                "info['action_mask'] at reset and at every step"
            )
        return np.asarray(mask)

    def _legal_mask(self, mask: Any, final: bool = False) -> np.ndarray:
        """A batch of masks as bool (:func:`as_bool_mask`); outside ``final``, a ``ValueError`` naming the env
        id, the step and the rows if a row has no legal action (no action could be sent for it). In numpy:
        gymnasium's arrays are on the CPU, so the check costs no device sync."""
        where = f"{self.env_id!r} at {self._at()}: {self._mask_place(final)}"
        mask = as_bool_mask(np.asarray(mask), where)
        if not final:
            nvec = self.single_action_space.nvec.tolist() if self.action_kind == "multi_discrete" else None
            rows = empty_mask_rows(mask.reshape(self.num_envs, -1), nvec)
            if rows:
                raise ValueError(
                    f"{where} has no legal action in row(s) {rows[:8]}"
                    f"{' (in one of its dimensions)' if nvec is not None else ''} (the env(s) of those rows, of "
                    f"{self.num_envs}): no action can be sent for them; {MASK_CONVENTION}"
                )
        return mask

    def _flat(self, obs: Any) -> dict[str, Any]:
        """gymnasium's (batch of) observations by our flat keys (a Box one masked from ``info``: ``"observation"``)."""
        space = self.gymnasium_observation_space
        return flat_values(space, obs) if is_structured(space) else {OBSERVATION_KEY: obs}

    def _final_obs_tree(self, next_obs: TensorTree, ended: np.ndarray, info: dict[str, Any]) -> TensorTree:
        """``next_obs`` with the true last observation (and mask) of every env whose episode ended."""
        final = next_obs.clone()
        final_infos = info.get("final_info", {})
        ended_envs = np.flatnonzero(ended)
        if self.mask_source == "info":
            final_masks = self._info_mask(final_infos, ended_envs, final=True)
        for index in ended_envs:
            one = info["final_obs"][index]
            values = self._flat(one)
            if self.mask_source == "info":
                values[ACTION_MASK_KEY] = final_masks[index]
            if self.mask_source is not None:  # a terminal state may have no legal action
                values[ACTION_MASK_KEY] = self._legal_mask(values[ACTION_MASK_KEY], final=True)
            for key, part in self.observation_parts.items():
                final[key][index] = encode_leaf(part, np.asarray(values[key])[None], key, self.device)[0]
        return final

    def _numpy(self, tensor: Tensor) -> np.ndarray:
        """``tensor`` as a numpy array on the CPU (each torch call costs microseconds here)."""
        if tensor.requires_grad:
            tensor = tensor.detach()
        return tensor.numpy() if self._on_cpu else tensor.cpu().numpy()

    def _obs_tensor(self, array: np.ndarray, owned: bool = False) -> Tensor:
        """A ``(batch, *obs_shape)`` tensor on ``self.device`` that does not alias ``array``
        unless ``owned`` (gymnasium reuses its buffers with ``copy=False``)."""
        if self._obs_kind == "one_hot":
            index = torch.from_numpy(np.asarray(array, dtype=np.int64) - self._obs_start).to(self.device)
            one_hot = torch.zeros(index.shape[0], self._obs_size, device=self.device)
            return one_hot.scatter_(1, index.unsqueeze(1), 1.0)
        if self._obs_kind == "cast":
            tensor = torch.from_numpy(array.astype(np.float32))
        elif self._on_cpu:
            return torch.from_numpy(array if owned else array.copy())
        else:
            tensor = torch.from_numpy(array)
        return tensor if self._on_cpu else tensor.to(self.device)

    def draw(self, obs: Tensor) -> Tensor:
        """Image observations as uint8 RGB ``(*batch, H, W, 3)`` on the CPU: 1 channel as grey, 3 as RGB; of a
        frame stack (``(C, H, W)`` or ``(H, W, C)`` with other C, ``(K, H, W, C)``) the last frame, the newest
        in gymnasium's ``FrameStackObservation``."""
        # Named as GymnasiumVectorEnv, not type(self): RayVectorEnv draws as the gymnasium adapter does.
        refusal = f"GymnasiumVectorEnv cannot draw {self.env_id!r}'s observations (only uint8 image observations)"
        images = uint8_to_draw(self, obs, refusal)
        layout = self._image_layout
        if layout == "HW":
            images = images.unsqueeze(-1)
        elif layout == "CHW":
            images = images.movedim(-3, -1)
        elif layout == "KHWC":
            images = images[..., -1, :, :, :]
        if images.shape[-1] not in (1, 3):  # a stack of grey frames
            images = images[..., -1:]
        return images.expand(*images.shape[:-1], 3).clone()

    def render(self) -> Tensor:
        """The current frame of every env, uint8 ``(num_envs, H, W, 3)`` on the CPU (needs ``render=True``)."""
        if not self.can_render:
            raise NotImplementedError(f"build GymnasiumVectorEnv({self.env_id!r}, ...) with render=True to render it")
        if self._mujoco and not headless_mujoco_can_render():
            # GLFW (MuJoCo's default) without a display fails, and off the main thread (the video logger's) it
            # can hang inside MuJoCo's context set-up instead: say so before trying.
            raise RuntimeError(
                f"{self.env_id} cannot render here: MuJoCo needs an OpenGL context, and there is no display (DISPLAY "
                "is unset) and no MUJOCO_GL; headless MuJoCo renders with MUJOCO_GL=egl (or osmesa)"
            )
        if self._needs_reset:
            self._reset_all()
        return torch.from_numpy(np.stack(self.gymnasium_envs.render()))

    def close(self) -> None:
        """Close gymnasium's vector env (and its subprocesses in ``"async"`` mode)."""
        if not self.gymnasium_envs.closed:
            self.gymnasium_envs.close()

    def __del__(self) -> None:
        # An instance dropped without close() (an evaluation's envs): its workers are told to close,
        # rather than terminated by gymnasium's own __del__ while they wait on their pipes.
        with contextlib.suppress(Exception):
            if not self.gymnasium_envs.closed:
                self.gymnasium_envs.close()

    def state_dict(self) -> dict[str, Any]:
        """What can be saved: env id, ``num_envs``, the private generator; ``"restorable": False``
        (gymnasium envs cannot save their internal state)."""
        return {**super().state_dict(), "env_id": self.env_id, "restorable": False}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the private generator, warn, and restart every env with a fresh reset (a
        gymnasium env cannot be put back into a saved state).

        Raises:
            ValueError: if the state comes from another env type, env id or ``num_envs``.
        """
        self._restart_fresh(state, "gymnasium envs")

    def __repr__(self) -> str:
        return (
            f"GymnasiumVectorEnv({self.env_id!r}, num_envs={self.num_envs}, device={self.device}, "
            f"vectorization_mode={self.vectorization_mode!r})"
        )
