"""What the EnvPool and ale-py backends share: C++ vector envs that step numpy batches in threads.

:class:`PooledVectorEnv` turns their numpy batches into the contract's tensors, holds the seed of
their next reset, the Atari preset's ``info["game_reward"]`` / ``info["game_over"]`` and reward
clipping, draws the frame stacks, and says that the envs' state cannot be saved
(``restorable = False``). Each backend (``envpool_adapter``, ``ale_vector``) gives gymnasium's
same-step autoreset in its own ``_step``. Both backends' Atari envs always preprocess:
:func:`preset_options` gives them the preset's options, and refuses ``atari=False`` in one wording.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import torch
from torch import Tensor

from rl_lightning.envs._adapter_checks import uint8_to_draw
from rl_lightning.envs.atari import GAME_OVER_KEY, GAME_REWARD_KEY, atari_options
from rl_lightning.envs.base import VectorEnv

#: Seeds of the C++ envs are int32: env ``i`` of a batch gets ``seed + i``.
_INT32_SEEDS = 2**31


def pool_seed(seed: int, num_envs: int) -> int:
    """The C++ envs' seed for our ``seed``: itself where ``seed + num_envs`` fits an int32, else folded into it."""
    return seed % (_INT32_SEEDS - num_envs)


def fire_index(actions: list[Any]) -> int | None:
    """The index of FIRE in a game's (minimal) action set where the game needs it to start and to go on
    after a lost life (Breakout's ball), as the preset's ``fire_reset`` reads it: action 1 is FIRE
    (:func:`rl_lightning.envs.atari.needs_fire`); None for the others."""
    import ale_py

    return 1 if len(actions) > 2 and actions[1] == ale_py.Action.FIRE else None


def preset_options(atari: bool | dict[str, Any] | None, env_id: str, preprocessing: str, form: str) -> dict[str, Any]:
    """The Atari preset's options for a backend whose envs always preprocess, so that the preset always runs
    (``atari`` None: its defaults). ``atari=False`` asks for raw frames that the backend cannot give: a
    ``ValueError`` that says ``preprocessing`` (the backend's envs always preprocess), that ``env_id`` has no
    ``form`` form without the preset, and what to do instead."""
    options = atari_options(True if atari is None else atari)
    if options is None:
        raise ValueError(
            f"{preprocessing}: env_kwargs['atari']={atari!r} has no {form} form for {env_id!r}; leave it out (the "
            "preset's defaults) or pass its options, or use backend='gymnasium' for the raw frames"
        )
    return options


def lost_lives(lives: np.ndarray, previous: np.ndarray) -> np.ndarray:
    """Where a life was lost with lives left (ALE's own test: fewer lives than before, and more than 0)."""
    return (lives < previous) & (lives > 0)


class PooledVectorEnv(VectorEnv):
    """Base of the backends over a C++ vector env (EnvPool, ale-py's): conversions, seeds, the Atari
    preset's score and clipping, drawing, checkpoints.

    Subclasses set ``single_observation_space`` / ``single_action_space``, ``env_id``, ``atari`` (the
    preset's options or None) and ``max_episode_steps`` before ``super().__init__``, and implement
    ``_reset_all`` (reading ``self._reset_seed``), ``_step`` (calling :meth:`_output`) and ``close``.
    """

    restorable = False  # the C++ envs cannot save their internal state
    can_draw = False
    #: The backend's name in messages.
    backend_name = "pooled"
    env_id: str
    atari: dict[str, Any] | None
    #: The episodes' time limit in agent steps.
    max_episode_steps: int | None

    def __init__(self, num_envs: int, seed: int | None, device: torch.device | str):
        super().__init__(num_envs, seed, device)
        self._on_cpu = self.device.type == "cpu"
        self._needs_reset = True
        if self.atari is not None:
            self.can_draw = True
            self.render_fps = max(1, round(60 / self.atari["frame_skip"]))  # ALE runs at 60 frames per second

    # -- seeds ---------------------------------------------------------------------------

    def seed(self, seed: int | None) -> None:
        """Seed the private generator and the next reset of the envs (env ``i`` gets ``seed + i``, folded
        into int32; ``None``: a seed from torch's global RNG)."""
        if seed is None:
            seed = int(torch.randint(0, 2**62, (1,)).item())
        super().seed(seed)
        #: The seed of the next reset (None: the next reset goes on with each env's RNG).
        self._reset_seed: int | None = pool_seed(seed, self.num_envs)

    # -- conversions ---------------------------------------------------------------------

    def _convert_obs(self, obs: np.ndarray) -> np.ndarray:
        """The backend's batch of observations in our layout and dtype (as it is, by default)."""
        return obs

    def _obs_tensor(self, obs: np.ndarray) -> Tensor:
        # The C++ envs hand out a fresh array per call (tests/envs/test_envpool.py checks that
        # returned observations are not mutated by later steps): no copy on the CPU.
        tensor = torch.from_numpy(self._convert_obs(obs))
        return tensor if self._on_cpu else tensor.to(self.device)

    def _tensor(self, array: np.ndarray, dtype: np.dtype) -> Tensor:
        tensor = torch.from_numpy(np.asarray(array, dtype=dtype))
        return tensor if self._on_cpu else tensor.to(self.device)

    def _numpy(self, actions: Tensor, dtype: np.dtype) -> np.ndarray:
        """``actions`` as a C-contiguous numpy array of ``dtype`` on the CPU."""
        if actions.requires_grad:
            actions = actions.detach()
        array = actions.numpy() if self._on_cpu else actions.cpu().numpy()
        return np.ascontiguousarray(array, dtype=dtype)

    def _output(
        self,
        obs: np.ndarray,
        final: np.ndarray | None,
        reward: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        game_over: np.ndarray | None = None,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, dict[str, Any]]:
        """The contract's step from numpy: ``obs`` the next observations (first of the next episode where
        one ended), ``final`` the observations reached before any reset (None: no env ended), ``reward``
        the game's own (for the Atari preset clipped to its sign here, the unclipped one going to
        ``info["game_reward"]``), ``game_over`` the preset's whole-game ends."""
        next_obs = self._obs_tensor(obs)
        info: dict[str, Any] = {"final_observation": next_obs if final is None else self._obs_tensor(final)}
        if self.atari is not None:
            info[GAME_REWARD_KEY] = self._tensor(reward, np.float32)
            info[GAME_OVER_KEY] = self._tensor(game_over, np.bool_)
            if self.atari["clip_rewards"]:
                reward = np.sign(reward)
        flags = self._tensor(terminated, np.bool_), self._tensor(truncated, np.bool_)
        return next_obs, self._tensor(reward, np.float32), *flags, info

    # -- drawing -------------------------------------------------------------------------

    def draw(self, obs: Tensor) -> Tensor:
        """The newest frame of Atari frame stacks as uint8 RGB ``(*batch, H, W, 3)`` on the CPU (grey frames
        ``(K, H, W)`` repeated on the 3 channels, colour ones ``(K, H, W, 3)`` as they are)."""
        refusal = f"{type(self).__name__} cannot draw {self.env_id!r}'s observations (only Atari frame stacks)"
        images = uint8_to_draw(self, obs, refusal)
        if self.atari["grayscale"]:
            newest = images[..., -1, :, :].unsqueeze(-1)
            return newest.expand(*newest.shape[:-1], 3).clone()
        return images[..., -1, :, :, :].clone()

    # -- checkpoints ---------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """What can be saved: env id, ``num_envs``, the private generator; ``"restorable": False``
        (the C++ envs cannot save their internal state)."""
        return {**super().state_dict(), "env_id": self.env_id, "restorable": False}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the private generator, warn, and restart every env with a fresh reset, seeded from the
        generator (the C++ envs cannot be put back into a saved state).

        Raises:
            ValueError: if the state comes from another env type, env id or ``num_envs``.
        """
        self._restart_fresh(state, f"{self.backend_name}'s envs")

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.env_id!r}, num_envs={self.num_envs}, device={self.device})"
