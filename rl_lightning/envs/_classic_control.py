"""Shared machinery of the classic-control envs (Acrobot, MountainCar, Pendulum): the physical
state stored as rows, the per-env episode clock and time limit, and the label-map rasteriser
their ``draw`` functions paint with."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from rl_lightning._checks import check_int
from rl_lightning.envs.base import VectorEnv

# Images rasterised at once: bounds the float temporaries and the palette lookup's indices.
_CHUNK = 512


class ClassicControlEnv(VectorEnv):
    """Base of the classic-control envs: a ``(num_envs, state_size)`` physical state laid out as
    gymnasium's ``env.unwrapped.state``, stepped in ``dtype``, with gymnasium's ``TimeLimit``.

    Subclasses set the spaces and ``state_size``, call ``super().__init__``, build their
    constants, then call :meth:`_start`; they implement ``_random_states``, ``_obs`` and
    ``_step`` (which calls :meth:`_end_step` for the time limit and the auto-reset).
    """

    #: Length of one env's physical state (gymnasium's ``len(env.unwrapped.state)``).
    state_size: int
    _state_attributes = ("_state", "_clock", "_episode_start")

    def __init__(
        self,
        num_envs: int,
        seed: int | None,
        device: torch.device | str,
        dtype: torch.dtype,
        max_episode_steps: int,
    ):
        if dtype not in (torch.float32, torch.float64):
            raise TypeError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
        check_int("max_episode_steps", max_episode_steps, minimum=1)
        super().__init__(num_envs, seed, device)
        self.dtype = dtype
        self.max_episode_steps = max_episode_steps
        # Stored as (state_size, num_envs): each physical quantity is one contiguous row, so every
        # elementwise kernel of the dynamics runs over contiguous memory.
        self._state = torch.zeros(self.state_size, num_envs, dtype=dtype, device=self.device)
        # Episode lengths are kept as start times against a host-side clock: one comparison per
        # step instead of an increment and a comparison.
        self._clock = 0
        self._episode_start = torch.zeros(num_envs, dtype=torch.int64, device=self.device)

    def _constant(self, value: float) -> Tensor:
        """A 0-dim tensor of the state's dtype: a Python float would be re-wrapped every step."""
        return torch.tensor(value, dtype=self.dtype, device=self.device)

    def _start(self) -> None:
        """A valid state before the first reset, drawn without advancing the generator, so that
        ``Env(n, seed=s).reset()`` starts exactly like ``reset(seed=s)`` (and from that state)."""
        generator_state = self.generator.get_state()
        self._reset_all()
        self.generator.set_state(generator_state)

    @property
    def episode_steps(self) -> Tensor:
        """Steps taken so far in each env's current episode, int64 ``(num_envs,)``."""
        return self._clock - self._episode_start

    @property
    def state(self) -> Tensor:
        """Physical state ``(num_envs, state_size)``: a view, so in-place writes reach the env."""
        return self._state.T

    @state.setter
    def state(self, value: Tensor) -> None:
        value = torch.as_tensor(value, dtype=self.dtype, device=self.device)
        if value.shape != (self.num_envs, self.state_size):
            raise ValueError(f"state must have shape ({self.num_envs}, {self.state_size}), got {tuple(value.shape)}")
        # Always a copy: a (1, k) value's transpose is already contiguous and would alias it.
        self._state = value.T.clone(memory_format=torch.contiguous_format)

    def _random_states(self) -> Tensor:
        """Fresh reset states ``(state_size, num_envs)`` drawn from ``self.generator``."""
        raise NotImplementedError

    def _obs(self, state: Tensor, private: bool = False) -> Tensor:
        """Float32 observations ``(num_envs, *obs_shape)`` of a ``(state_size, num_envs)`` state,
        in memory the env never reads or writes again (``private``: ``state`` itself is such
        memory, which an observation may then share)."""
        raise NotImplementedError

    def _reset_all(self) -> Tensor:
        self._state = self._random_states()
        self._episode_start.fill_(self._clock)
        return self._obs(self._state)

    def _end_step(self, final: Tensor, terminated: Tensor) -> tuple[Tensor, Tensor]:
        """Advance the clock, truncate at the time limit and auto-reset the finished envs.

        Args:
            final: ``(state_size, num_envs)`` the state every env reached this step.
            terminated: bool ``(num_envs,)``.

        Returns:
            truncated bool ``(num_envs,)`` and the obs to return (a fresh start where an
            episode ended).
        """
        self._clock += 1
        # gymnasium's TimeLimit: truncated on the limit's step even if the env also terminated.
        truncated = self._episode_start <= self._clock - self.max_episode_steps
        done = terminated | truncated
        self._episode_start.masked_fill_(done, self._clock)
        # Every env gets a freshly drawn reset state, kept only where its episode ended: no
        # device sync to find which ones did, and the same draws whatever happened.
        self._state = torch.where(done, self._random_states(), final)
        return truncated, self._obs(self._state)


def pixel_grid(height: int, width: int, world_height: float, world_width: float) -> tuple[Tensor, Tensor]:
    """Pixel centres in gymnasium's screen units: ``x`` ``(1, 1, width)`` from the left edge and
    ``y`` ``(1, height, 1)`` from the bottom edge (gymnasium draws y-up, then flips), for a
    ``world_width`` x ``world_height`` screen drawn at ``width`` x ``height`` pixels."""
    x = (torch.arange(width, dtype=torch.float32) + 0.5) * (world_width / width)
    y = (height - 0.5 - torch.arange(height, dtype=torch.float32)) * (world_height / height)
    return x.view(1, 1, -1), y.view(1, -1, 1)


def paint(
    obs: Tensor,
    labels: Callable[[Tensor], Tensor],
    palette: Tensor,
    height: int,
    width: int,
) -> Tensor:
    """Render ``(*batch, obs_size)`` observations chunk by chunk: ``labels(chunk)`` gives uint8
    label maps ``(chunk, height, width)`` that index ``palette`` ``(num_labels, 3)``.

    Returns:
        uint8 ``(*batch, height, width, 3)`` on the CPU.
    """
    obs = obs.detach().to("cpu", torch.float32)
    batch_shape = obs.shape[:-1]
    flat = obs.reshape(-1, obs.shape[-1])
    images = torch.empty(flat.shape[0], height, width, 3, dtype=torch.uint8)
    for start in range(0, flat.shape[0], _CHUNK):
        images[start : start + _CHUNK] = palette[labels(flat[start : start + _CHUNK]).long()]
    return images.reshape(*batch_shape, height, width, 3)


def rectangle(
    x: Tensor,
    y: Tensor,
    start_x: Tensor | float,
    start_y: Tensor | float,
    direction_x: Tensor | float,
    direction_y: Tensor | float,
    length: float,
    half_width: float,
) -> Tensor:
    """Which points ``(x, y)`` lie in the rectangle that runs ``length`` from ``(start_x, start_y)``
    along the unit vector ``(direction_x, direction_y)``, ``half_width`` either side of its axis.
    All arguments broadcast; so does the bool result."""
    dx, dy = x - start_x, y - start_y
    along = dx * direction_x + dy * direction_y
    across = dy * direction_x - dx * direction_y
    return (along >= 0) & (along <= length) & (across.abs() <= half_width)


def disc(x: Tensor, y: Tensor, centre_x: Tensor | float, centre_y: Tensor | float, radius: float) -> Tensor:
    """Which points ``(x, y)`` lie within ``radius`` of the centre (broadcasting like ``rectangle``)."""
    return (x - centre_x).square() + (y - centre_y).square() <= radius**2
