"""Many CartPole steps per launch: the step as one pure function, compiled and graph-captured.

:class:`~rl_lightning.envs.CartPole` is exact (gymnasium's dynamics and reset stream) but runs
~20 kernels per step, each launched from Python: on a GPU that is ~100-500 us per vector step
whatever the number of envs, far from what the hardware can do. :class:`FusedCartPole` runs the
same dynamics (:func:`~rl_lightning.envs.cartpole.cartpole_step`, the exact env's own), termination,
truncation and auto-reset as one pure function of tensors, which
``torch.compile`` fuses into a few kernels, and captures ``horizon`` consecutive steps (random
actions included) in one CUDA graph: one launch per ``horizon`` steps, no host work in between.

What differs from ``CartPole`` (and why it is not the default): random numbers (reset states and
random actions) come from a counter-based hash of ``(seed, step, env)`` instead of the env's
``torch.Generator`` (a generator cannot advance inside a replayed graph), so trajectories after
the first reset differ from gymnasium's stream while following the same distribution; and only
the carried state is kept (observations, rewards and dones of the inner steps are not stored).
It measures and drives raw simulation throughput; training uses the exact env, whose ``compile=True`` fuses its
whole step the same way (``rl_lightning.envs._classic_control.fused_step``) with the env's own generator.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rl_lightning._checks import check_int, check_seed
from rl_lightning.compiling import torch_compile
from rl_lightning.envs.base import resolve_device
from rl_lightning.envs.cartpole import (
    MAX_EPISODE_STEPS,
    RESET_BOUND,
    CartPoleConstants,
    cartpole_step,
)


def _int32(value: int) -> int:
    """A 32-bit pattern as the signed int32 Python value with the same bits."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def _mix32(x: Tensor) -> Tensor:
    """A 32-bit integer hash (Wellons' lowbias32) of int32 values: a bijection with good
    avalanche, in int32 ops (multiplications wrap; shifts are made logical by masking), so that it
    is cheap on a GPU (int64 multiplications are emulated there) and fuses into one kernel."""
    x = x ^ ((x >> 16) & 0xFFFF)
    x = x * _int32(0x7FEB352D)
    x = x ^ ((x >> 15) & 0x1FFFF)
    x = x * _int32(0x846CA68B)
    return x ^ ((x >> 16) & 0xFFFF)


def hash_words(key: Tensor, counter: Tensor, index: Tensor, count: int) -> list[Tensor]:
    """``count`` words of 32 random bits per env, a pure function of ``(key, counter, index)``.

    Args:
        key: int32 0-dim seed tensor.
        counter: int32 0-dim step counter (a fresh stream per step).
        index: int32 ``(n,)`` env indices.
        count: words per env: a chain of hashes, each word the hash of the previous one.

    Returns:
        ``count`` int32 ``(n,)`` tensors.
    """
    base = _mix32(key ^ (counter * _int32(0x9E3779B9)))
    words = [_mix32(base + index * _int32(0x85EBCA6B))]
    for _ in range(count - 1):
        words.append(_mix32(words[-1] ^ _int32(0x68E31DA4)))
    return words


def uniform16(word: Tensor, half: int) -> Tensor:
    """Uniform float32 numbers in ``[0, 1)`` from the low (``half=0``) or high (``half=1``) 16 bits
    of a hash word: two numbers per word, 2**-16 apart (reset states need no more resolution)."""
    return ((word >> (16 * half)) & 0xFFFF).to(torch.float32) * (1.0 / 65536)


def seed_key(seed: int) -> int:
    """The int32 key of a seed in ``[0, 2**63)``: its 64 bits folded to 32, then hashed."""
    folded = torch.tensor(_int32(seed ^ (seed >> 32)), dtype=torch.int32)
    return int(_mix32(folded))


def step_with_reset(
    state: Tensor,
    episode_steps: Tensor,
    actions: Tensor,
    reset_states: Tensor,
    max_episode_steps: int,
    constants: CartPoleConstants,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """One CartPole-v1 step of every env (:func:`~rl_lightning.envs.cartpole.cartpole_step`) with
    the time limit and the auto-reset, as a pure function.

    Args:
        state: ``(4, n)`` (x, x_dot, theta, theta_dot), float32 or float64.
        episode_steps: int32 or int64 ``(n,)`` steps taken in each current episode.
        actions: int32 or int64 ``(n,)`` in ``{0, 1}``.
        reset_states: ``(4, n)`` start states for the envs whose episode ends on this step.
        max_episode_steps: the time limit.
        constants: :class:`~rl_lightning.envs.cartpole.CartPoleConstants` of ``state``'s dtype.

    Returns:
        ``(next_state, next_episode_steps, final_state, terminated, truncated)``: the state after
        auto-reset, the episode clock after it, the state each env reached before any reset
        (gymnasium's final observation), and the bool flags.
    """
    final, terminated = cartpole_step(state, actions, constants)
    steps = episode_steps + 1
    truncated = steps >= max_episode_steps
    done = terminated | truncated
    next_state = torch.where(done, reset_states, final)
    return next_state, torch.where(done, 0, steps), final, terminated, truncated


def start_states(first: Tensor, second: Tensor) -> Tensor:
    """CartPole's start states ``(4, n)``, uniform in ``[-0.05, 0.05)``, from two hash words."""
    halves = [uniform16(first, 0), uniform16(first, 1), uniform16(second, 0), uniform16(second, 1)]
    return torch.stack(halves) * (2 * RESET_BOUND) - RESET_BOUND


def _random_step(
    state: Tensor,
    episode_steps: Tensor,
    episodes: Tensor,
    counter: Tensor,
    key: Tensor,
    index: Tensor,
    max_episode_steps: int,
    constants: CartPoleConstants,
) -> None:
    """One step with uniformly random actions, updating the carried tensors in place (a module
    function, not a method, so that ``torch.compile`` guards on shapes only, not on an instance).
    Three hash words per env: two give the four reset numbers, the third the action."""
    first, second, third = hash_words(key, counter, index, 3)
    next_state, steps, _, terminated, truncated = step_with_reset(
        state, episode_steps, third & 1, start_states(first, second), max_episode_steps, constants
    )
    state.copy_(next_state)
    episode_steps.copy_(steps)
    episodes.add_((terminated | truncated).sum())
    counter.add_(1)


class FusedCartPole:
    """``num_envs`` CartPole-v1 copies advanced ``horizon`` steps per :meth:`run` call, with
    random actions, as fused kernels in one CUDA graph (see the module docstring for how this
    differs from :class:`~rl_lightning.envs.CartPole`).

    Args:
        num_envs: number of copies.
        seed: seed of the counter-based random stream (reset states, actions).
        device: where the state lives; CUDA graphs are used only on a CUDA device.
        horizon: steps per :meth:`run` (per graph launch).
        compile: fuse the step with ``torch.compile`` (False: the same function, eager).
        graph: capture the ``horizon`` steps in a CUDA graph (default: on CUDA devices).
        max_episode_steps: the time limit (500 for CartPole-v1).

    ``state`` ``(4, num_envs)``, ``episode_steps`` ``(num_envs,)`` and ``episodes``
    (a 0-dim count of finished episodes, summed over envs) are the carried tensors.
    """

    def __init__(
        self,
        num_envs: int,
        seed: int = 0,
        device: torch.device | str = "cuda",
        horizon: int = 100,
        compile: bool = True,
        graph: bool | None = None,
        max_episode_steps: int = MAX_EPISODE_STEPS,
    ):
        self.num_envs = check_int("num_envs", num_envs, minimum=1)
        self.horizon = check_int("horizon", horizon, minimum=1)
        self.max_episode_steps = check_int("max_episode_steps", max_episode_steps, minimum=1)
        self.device = resolve_device(device)
        graph = self.device.type == "cuda" if graph is None else graph
        if graph and self.device.type != "cuda":
            raise ValueError(f"graph=True needs a CUDA device, got device={self.device}")
        self.key = torch.tensor(seed_key(check_seed("seed", seed)), dtype=torch.int32, device=self.device)
        self.counter = torch.zeros((), dtype=torch.int32, device=self.device)
        self.index = torch.arange(num_envs, dtype=torch.int32, device=self.device)
        self.state = start_states(*hash_words(self.key, self.counter, self.index, 2))
        self.counter += 1
        self.episode_steps = torch.zeros(num_envs, dtype=torch.int32, device=self.device)
        self.episodes = torch.zeros((), dtype=torch.int64, device=self.device)
        self.constants = CartPoleConstants.make(torch.float32, self.device)
        self._fused_step = torch_compile(_random_step) if compile else _random_step
        self._graph: torch.cuda.CUDAGraph | None = None
        if graph:
            self._capture()

    def _step(self) -> None:
        carried = (self.state, self.episode_steps, self.episodes, self.counter)
        self._fused_step(*carried, self.key, self.index, self.max_episode_steps, self.constants)

    def _capture(self) -> None:
        saved = [t.clone() for t in (self.state, self.episode_steps, self.episodes, self.counter)]
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for _ in range(3):  # compile and warm up outside the capture
                self._step()
        torch.cuda.current_stream(self.device).wait_stream(stream)
        self._graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self._graph):
            for _ in range(self.horizon):
                self._step()
        for tensor, value in zip((self.state, self.episode_steps, self.episodes, self.counter), saved, strict=True):
            tensor.copy_(value)  # the warm-up and the capture do not count

    def run(self) -> None:
        """Advance every env ``horizon`` steps (asynchronously on a GPU: no host sync)."""
        if self._graph is not None:
            self._graph.replay()
        else:
            for _ in range(self.horizon):
                self._step()
