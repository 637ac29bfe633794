"""ale-py's own vector env (``ale_py.vector_env.AtariVectorEnv``) behind the VectorEnv contract:
``make_envs(..., backend="ale_vector")``.

ale-py (0.12.1 and later) steps its Atari envs in C++ threads, with the preprocessing of DQN's
pipeline built in, and resets a finished env within the step that ended it when asked to
(``autoreset_mode=SAME_STEP``, the final observation in ``info["final_obs"]``): gymnasium's
same-step semantics, which :class:`AleVectorEnv` passes on.
"""

from __future__ import annotations

import inspect
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from rl_lightning._checks import check_int, check_str
from rl_lightning.envs._pooled import PooledVectorEnv, fire_index, lost_lives, preset_options
from rl_lightning.envs.atari import FIRE_STEPS

#: ale-py's vector-env arguments that may be passed through (the others are the preset's or set here).
_PASSED = ("num_threads", "thread_affinity_offset", "full_action_space")
INSTALL = "pip install 'ale-py>=0.12.1'"


def _vector_env_class() -> Any:
    """ale-py's ``AtariVectorEnv``; an ``ImportError`` saying what to install without ale-py, or with one
    too old for its same-step autoreset."""
    try:
        from ale_py.vector_env import AtariVectorEnv
    except ImportError as error:
        raise ImportError(
            f"backend='ale_vector' needs ale-py's AtariVectorEnv (ale-py 0.12.1 or later): {INSTALL}"
        ) from error
    if "autoreset_mode" not in inspect.signature(AtariVectorEnv).parameters:
        raise ImportError(f"backend='ale_vector' needs ale-py 0.12.1 or later (its same-step autoreset): {INSTALL}")
    return AtariVectorEnv


def _game(env_id: str) -> str:
    """ale-py's ROM name (``"breakout"``) of ``ALE/Breakout-v5``, ``Breakout-v5`` or ``breakout``; a
    ``ValueError`` saying which ids are taken for another one."""
    from ale_py import roms  # importing ale_py registers its ALE/ ids with gymnasium

    if env_id in roms.get_all_rom_ids():
        return env_id
    name = env_id if env_id.startswith("ALE/") else f"ALE/{env_id}"
    spec = gym.registry.get(name)
    if spec is not None and name.endswith("-v5") and spec.kwargs.get("obs_type", "rgb") == "rgb":
        return spec.kwargs["game"]
    raise ValueError(
        f"unknown env_id {env_id!r} for backend='ale_vector': it takes ALE's v5 ids (ALE/Breakout-v5, or "
        f"Breakout-v5) and ale-py's ROM names (breakout, ms_pacman, ...; {len(roms.get_all_rom_ids())} games: "
        "ale_py.roms.get_all_rom_ids())"
    )


def _ale_kwargs(options: dict[str, Any]) -> dict[str, Any]:
    """ale-py's vector-env arguments for the preset's options."""
    return {
        "noop_max": options["noop_max"],
        "frameskip": options["frame_skip"],
        "maxpool": True,  # the max of the last two frames
        "img_height": options["screen_size"],
        "img_width": options["screen_size"],
        "grayscale": options["grayscale"],
        "stack_num": options["frame_stack"],
        # A lost life is told here, from the lives (ale-py's episodic_life would start a new game).
        "episodic_life": False,
        "life_loss_info": False,
        "reward_clipping": False,  # clipped here, to the reward's sign
        "use_fire_reset": False,  # pressed here (FIRE_STEPS steps, as gymnasium's preset)
        "repeat_action_probability": options["repeat_action_probability"],
        "max_num_frames_per_episode": options["max_episode_steps"] * options["frame_skip"],
    }


class AleVectorEnv(PooledVectorEnv):
    """``num_envs`` copies of an Atari game in ale-py's vector env, stepped in its C++ threads.

    It always runs the Atari preset (:mod:`rl_lightning.envs.atari`; ale-py's vector env always
    preprocesses), with its defaults when ``atari`` is not given: uint8 ``(frame_stack, screen_size,
    screen_size)`` grey frame stacks (``(frame_stack, H, W, 3)`` in colour; ale-py fills a new
    episode's stack with zeros, gymnasium and EnvPool with its first frame), rewards clipped to their
    sign, and ``info["game_reward"]`` / ``info["game_over"]``, the game's own score and ends. The
    preset's ``max_episode_steps`` counts agent steps from the end of the reset's no-ops. With
    ``terminal_on_life_loss`` a lost life ends the training episode (``terminated``) while the game
    goes on (the next obs follows the last one, no reset). With ``fire_reset``, for games that need
    it, the first two actions of each game and the two after each lost life are FIRE in place of the
    ones sent (gymnasium's preset presses FIRE twice within its reset or step; ale-py cannot step
    some of its envs alone): the actions a learner records for those steps are not the ones played.

    Seeds: env ``i`` gets ``seed + i`` (folded into int32); ale-py reloads the ROM at a seeded
    reset (about 0.1 s per env). Its state cannot be saved: ``restorable = False``, and
    :meth:`load_state_dict` restarts the envs fresh.

    Args:
        env_id: ``ALE/Breakout-v5``, ``Breakout-v5`` or ale-py's ROM name ``breakout``.
        num_envs: envs, >= 1.
        seed: the envs' seed (None: one from torch's global RNG).
        device: where the tensors go.
        atari: the Atari preset's options (``True`` or a dict; None: the defaults).
        **ale_kwargs: ale-py's own ``num_threads`` (0: ale-py's choice), ``thread_affinity_offset``,
            ``full_action_space``.

    Raises:
        ImportError: without ale-py 0.12.1 or later.
        ValueError: for an id that is no ALE game, ``atari=False``, or another ale-py argument.
    """

    backend_name = "ale-py"

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        seed: int | None = None,
        device: torch.device | str = "cpu",
        atari: bool | dict[str, Any] | None = None,
        **ale_kwargs: Any,
    ):
        check_str("env_id", env_id)
        check_int("num_envs", num_envs, 1)
        vector_env_class = _vector_env_class()
        #: ale-py's ROM name of the game.
        self.game = _game(env_id)
        self.env_id = env_id
        self.atari = preset_options(atari, env_id, "ale-py's vector env always preprocesses", "ale_vector")
        unknown = sorted(set(ale_kwargs) - set(_PASSED))
        if unknown:
            raise ValueError(
                f"env_kwargs {unknown} are not passed to ale-py's vector env: it takes {', '.join(_PASSED)}; the "
                "Atari preset sets its preprocessing from env_kwargs['atari'] (rl_lightning.envs.atari), e.g. "
                "{'atari': {'frame_skip': 4, 'terminal_on_life_loss': True}}"
            )
        self.max_episode_steps = self.atari["max_episode_steps"]
        #: ale-py's vector env doing the work.
        self.pool = vector_env_class(
            self.game,
            num_envs,
            autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
            **_ale_kwargs(self.atari),
            **ale_kwargs,
        )
        self.single_observation_space = self.pool.single_observation_space
        self.single_action_space = gym.spaces.Discrete(int(self.pool.single_action_space.n))
        #: The index of FIRE, the first actions of a game and after a lost life (None: not pressed).
        self._fire = fire_index(self.pool.ale.get_action_set()) if self.atari["fire_reset"] else None
        super().__init__(num_envs, seed, device)
        #: Per env, the FIRE actions still to send in place of the ones given.
        self._fire_left = np.zeros(num_envs, dtype=np.int64)

    # -- the contract ---------------------------------------------------------------------

    def _reset_all(self) -> Tensor:
        obs, info = self.pool.reset(seed=self._reset_seed)
        self._reset_seed, self._needs_reset = None, False
        self._lives = np.array(info["lives"])
        self._fire_left[:] = FIRE_STEPS if self._fire is not None else 0
        return self._obs_tensor(obs)

    def _step(self, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, dict[str, Any]]:
        if self._needs_reset:  # stepped before any reset: start where reset() would
            self._reset_all()
        ale_actions = self._numpy(actions, np.int32)
        pressing = self._fire_left > 0
        if pressing.any():
            ale_actions = np.where(pressing, self._fire, ale_actions).astype(np.int32)
            self._fire_left[pressing] -= 1
        obs, reward, terminated, truncated, info = self.pool.step(ale_actions)
        ended = terminated | truncated  # the envs ale-py reset (same step): a game over or the time limit
        final = None
        if ended.any():
            final = np.array(obs)
            final[ended] = info["final_obs"][ended]
        # A life lost with the game going on (the reset envs' lives are their new game's).
        lost = lost_lives(info["lives"], self._lives) & ~ended
        self._lives = np.array(info["lives"])
        if self._fire is not None:  # a new game (reset by ale-py in this step) or a new life: FIRE
            self._fire_left[ended | lost] = FIRE_STEPS
        game_over = ended
        if self.atari["terminal_on_life_loss"]:
            terminated = terminated | lost
        return self._output(obs, final, reward, terminated, truncated, game_over)

    def render(self) -> Tensor:
        raise NotImplementedError(
            "ale-py's vector env renders no frames of its own: AleVectorEnv.draw(obs) draws the newest frame of "
            "the observations"
        )

    def close(self) -> None:
        """Close ale-py's vector env."""
        pool = getattr(self, "pool", None)
        if pool is not None and not pool.closed:
            pool.close()
