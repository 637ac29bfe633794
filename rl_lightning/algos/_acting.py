"""What a trained module does with observations: ``act`` (numpy or tensors, any space's inputs, one seed of a
``num_seeds > 1`` module), the greedy actor and ``forward``. ``RLModule`` inherits them from :class:`Acting`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor

from rl_lightning._checks import check_bool
from rl_lightning.algos._inputs import as_numpy, is_tensor_input


class Acting:
    """``RLModule``'s acting methods: they read its ``policy_actions``, its inputs (``_inputs``), its device and its
    seeds (``resolve_seed_index``, ``seed_module``)."""

    _inputs: Any
    action_shape: tuple[int, ...]
    device: torch.device
    resolve_seed_index: Any
    seed_module: Any
    policy_actions: Any

    @torch.no_grad()
    def act(
        self, obs: Any, greedy: bool = False, action_mask: Any = None, seed_index: int | str | None = None
    ) -> Tensor | np.ndarray | np.generic:
        """Actions for observations ``(*batch, *obs_shape)`` (one observation gives one action): the
        most likely ones if ``greedy``, else sampled from the policy (with torch's global RNG).

        Tensors in, tensors out (on the module's device); anything else (a numpy array from a
        gymnasium env, a list) gives numpy, so ``env.step(module.act(obs))`` works on a gymnasium
        env: a numpy int for one ``Discrete`` observation, an array otherwise, in gymnasium's values
        (``start + k`` for a ``Discrete(n, start)``; tensors stay our indices ``k``). A Dict or Tuple
        observation is taken as gymnasium gives it (a dict / tuple of arrays or tensors, ``Discrete``
        parts as integers), or as our envs give it (a dict of tensors, ``rl_lightning.envs.spaces``).

        Args:
            action_mask: bool or 0 / 1 ``(*batch, n)``, True = legal, for an env with masks: required where
                they come from ``info["action_mask"]`` (Taxi), optional where the observation has an
                ``"action_mask"`` key (it then replaces that key).

            seed_index: with ``num_seeds > 1``, the seed that acts (``seed_module``; None: seed 0, this module).

        Returns:
            ``(*batch, *action_shape)``: int64 for ``Discrete`` actions, float32 for ``Box``.
        """
        if seed_index is not None and self.resolve_seed_index(seed_index) > 0:
            return self.seed_module(seed_index).act(obs, greedy, action_mask)
        check_bool("greedy", greedy)
        tensor_in = is_tensor_input(obs)
        obs, batch_shape = self._inputs.batch(obs, action_mask, self.device)
        actions = self.policy_actions(obs, greedy).reshape((*batch_shape, *self.action_shape))
        return actions if tensor_in else self._inputs.gymnasium_actions(as_numpy(actions))

    @property
    def recurrent(self) -> bool:
        """Whether the policy has memory: its ``act`` then takes and returns a state."""
        return False

    def greedy_actor(self) -> Callable[..., Tensor]:
        """A callable ``actor(obs, episode_start=None) -> actions`` playing the greedy policy (a
        recurrent policy's carries its state from call to call, zeroed where ``episode_start``)."""
        return lambda obs, episode_start=None: self.act(obs, greedy=True)

    def forward(self, obs: Tensor) -> Tensor:
        """Greedy actions for a batch of observations ``(batch, *obs_shape)``."""
        return self.policy_actions(obs, greedy=True)

    @staticmethod
    def check_finite_outputs(outputs: Tensor, what: str) -> None:
        """Raise ``FloatingPointError`` if a network's ``outputs`` (logits, means, Q-values) are not
        all finite (``-inf`` is a masked logit, allowed): an action picked from NaN would silently be
        action 0."""
        if not bool((torch.isfinite(outputs) | torch.isneginf(outputs)).all()):
            raise FloatingPointError(
                f"the {what} are not finite (NaN or infinite): the weights or the observation are; "
                "a run that diverged stops with an error before saving, so load an earlier checkpoint"
            )
