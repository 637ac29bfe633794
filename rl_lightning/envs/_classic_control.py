"""The machinery the classic-control envs (CartPole, Acrobot, MountainCar, Pendulum) share: the
constructor, the physical state stored as rows, the per-env episode clock and time limit."""

from __future__ import annotations

import functools
import time
import types
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import torch
from torch import Tensor

from rl_lightning._checks import check_bool, check_int
from rl_lightning.compiling import torch_compile
from rl_lightning.envs.base import VectorEnv

# The inputs' sizes and strides are guarded already (dynamic=False); inductor's own asserts of them
# cost ~10 us a call, a sixth of a compiled CartPole step at 4,096 envs (measured).
_COMPILE_OPTIONS = {"size_asserts": False, "alignment_asserts": False}


class ClassicControlEnv(VectorEnv):
    """``num_envs`` copies of a gymnasium classic-control env: a ``(num_envs, state_size)``
    physical state laid out as gymnasium's ``env.unwrapped.state``, stepped in ``dtype``, with
    gymnasium's ``TimeLimit``.

    Args:
        num_envs: number of copies.
        seed: seed of the private generator.
        device: where the state lives.
        dtype: ``torch.float32`` (default, fastest) or ``torch.float64`` (gymnasium computes in
            float64: trajectories then agree with it to rounding; each env says how closely).
            Observations are float32 either way.
        max_episode_steps: the time limit (None: gymnasium's, ``default_max_episode_steps``).
        compile: step through ``torch.compile(dynamic=False)``, built on the first step (the seconds
            it took: :attr:`compile_seconds`). Where the env draws fresh reset states for every env
            on every step (every env but the CPU's CartPole, whose reset draws only for the envs that
            finished, after reading which did), the whole step is one compiled function
            (:func:`fused_step`: the dynamics, the time limit, the auto-reset, the observations and
            the final observations); elsewhere the dynamics alone. The reset states are drawn eagerly
            from the env's generator, as the eager env draws them (dynamo cannot trace a
            ``torch.Generator``), so the random streams are the eager env's and the numbers agree with
            it to float rounding.

    ``env.state`` is the physical state ``(num_envs, state_size)``; it may be read and assigned
    (``env.state = s`` or ``env.state[i] = s_i``).

    Subclasses set ``state_size`` and ``default_max_episode_steps`` and implement ``_spaces``
    (called first), ``_setup`` (their constants, once the base is built), ``_random_states``,
    ``_step`` (which calls :meth:`_end_step` for the time limit and the auto-reset) and, unless
    the observation is the state, ``_obs``; ``_step`` calls the dynamics through :meth:`_dynamics`.
    """

    #: Length of one env's physical state (gymnasium's ``len(env.unwrapped.state)``).
    state_size: int
    #: gymnasium's time limit for the env.
    default_max_episode_steps: int
    _state_attributes = ("_state", "_clock", "_episode_start")
    #: The env's dynamics as a pure function of tensors (a ``staticmethod``), what ``compile=True`` compiles:
    #: ``dynamics(state, *inputs) -> (final, [final_obs,] reward, terminated)``.
    dynamics: Callable[..., Any]
    #: The observation of a ``(state_size, n)`` state as a pure function (a ``staticmethod``): float32
    #: ``(n, *obs_shape)`` in fresh memory, equal to :meth:`_obs`'s; what the fused step computes.
    observe: Callable[[Tensor], Tensor]
    #: Whether every step draws fresh reset states for every env (kept where an episode ended): then
    #: ``compile=True`` fuses the whole step (:func:`fused_step`).
    resets_every_step: bool = True
    #: The fewest copies from which the compiled dynamics step faster than the eager ones on a CPU (measured
    #: with ``benchmarks/bench_envs.py``: a compiled call's fixed ~25 us must buy more than it costs); None:
    #: never on a CPU. A module's ``compile=True`` compiles its training envs' step only from there (on
    #: other devices always: an eager step there is one kernel launch per op).
    cpu_compile_min_envs: int | None = None

    def __init__(
        self,
        num_envs: int,
        seed: int | None = None,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
        max_episode_steps: int | None = None,
        compile: bool = False,
    ):
        #: Whether the dynamics run through ``torch.compile``.
        self.compile = check_bool("compile", compile)
        self._compiled_dynamics: Callable[..., Any] | None = None
        self._compiled_step: Callable[..., Any] | None = None
        # The clock as a device tensor for the fused step (rebuilt when it falls behind the host's).
        self._device_clock: Tensor | None = None
        self._device_clock_at = -1
        #: Seconds the first compiled step took (compilation included); None before it or without compile.
        self.compile_seconds: float | None = None
        if dtype not in (torch.float32, torch.float64):
            raise TypeError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
        if max_episode_steps is None:
            max_episode_steps = self.default_max_episode_steps
        self.max_episode_steps = check_int("max_episode_steps", max_episode_steps, minimum=1)
        self.single_observation_space, self.single_action_space = self._spaces()
        super().__init__(num_envs, seed, device)
        self.dtype = dtype
        # Stored as (state_size, num_envs): each physical quantity is one contiguous row, so every
        # elementwise kernel of the dynamics runs over contiguous memory.
        self._state = torch.zeros(self.state_size, num_envs, dtype=dtype, device=self.device)
        # Episode lengths are kept as start times against a host-side clock: one comparison per
        # step instead of an increment and a comparison.
        self._clock = 0
        self._episode_start = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        self._setup()
        # A valid state before the first reset, drawn without advancing the generator, so that
        # `Env(n, seed=s).reset()` starts exactly like `reset(seed=s)` (and from that state).
        generator_state = self.generator.get_state()
        self._reset_all()
        self.generator.set_state(generator_state)

    def _dynamics(self, *args: Any) -> Any:
        """``self.dynamics(*args)``, through ``torch.compile`` with ``compile=True``: built on the
        first call by :func:`rl_lightning.compiling.torch_compile` (inductor's disk cache kept per CPU
        kernel set); torch caches the compiled code per function and shape, so a second env of the
        same size and dtype reuses it."""
        if not self.compile:
            return self.dynamics(*args)
        if self._compiled_dynamics is None:
            self._compiled_dynamics = torch_compile(self.dynamics, fullgraph=True, options=_COMPILE_OPTIONS)
            start = time.perf_counter()
            *outputs, terminated = self._compiled_dynamics(*args)
            self.compile_seconds = time.perf_counter() - start
        else:
            *outputs, terminated = self._compiled_dynamics(*args)
        return *outputs, terminated.bool()  # see compiled_flags

    @staticmethod
    def fused_inputs(actions: Tensor, *extras: Any) -> tuple[Any, ...]:
        """The dynamics' inputs after the state, for ``actions`` as given to :meth:`step` and :meth:`_fused_extras`
        (a pure function: it is traced into the fused step). Here: integer actions and the constants."""
        return (actions if actions.dtype in (torch.int32, torch.int64) else actions.long(), *extras)

    def _fused_extras(self) -> tuple[Any, ...]:
        """What :meth:`fused_inputs` takes after the actions."""
        return (self._constants,)

    def fused_step_arguments(self) -> tuple[Any, ...]:
        """The arguments of this env's fused step before the actions, ``env_step(*arguments, actions)``
        (:attr:`fused_step_function`), for a caller that runs the step inside its own compiled function (a rollout
        fusing its acting step with it); hand the step's outputs to :meth:`finish_fused_step`. Draws the reset states
        from the env's generator (eagerly: the eager auto-reset's draw, the same stream)."""
        reset_states = self._random_states()
        if self._device_clock is None or self._device_clock_at != self._clock:
            self._device_clock = torch.tensor(self._clock, dtype=torch.int64, device=self.device)
        return (
            self.dynamics,
            self.observe,
            self.fused_inputs,
            self._fused_extras(),
            self._state,
            self._episode_start,
            self._device_clock,
            self.max_episode_steps,
            reset_states,
        )

    @property
    def fused_step_function(self) -> Callable[..., Any]:
        """This env class's step as a pure function (:func:`env_step_function`, a code object per class)."""
        return _fused_step_of(type(self))

    def finish_fused_step(self, outputs: tuple[Tensor, ...]) -> tuple[Tensor, Tensor, Tensor, Tensor, dict[str, Any]]:
        """The env takes the state the fused step reached; returns :meth:`step`'s results."""
        self._state, self._episode_start, self._device_clock, obs, final_obs, reward, terminated, truncated = outputs
        self._clock += 1
        self._device_clock_at = self._clock
        return obs, reward, terminated.bool(), truncated.bool(), {"final_observation": final_obs}

    def _step_fused(self, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, dict[str, Any]]:
        """The whole step as one compiled function (:func:`fused_step`): the same results as ``_dynamics`` then
        ``_end_step`` with resets on every step."""
        arguments = (*self.fused_step_arguments(), actions)
        if self._compiled_step is None:
            options = {"fullgraph": True, "options": _COMPILE_OPTIONS}
            self._compiled_step = torch_compile(self.fused_step_function, **options)
            start = time.perf_counter()
            outputs = self._compiled_step(*arguments)
            self.compile_seconds = time.perf_counter() - start
        else:
            outputs = self._compiled_step(*arguments)
        return self.finish_fused_step(outputs)

    @property
    def fuses_step(self) -> bool:
        """Whether a step is one compiled function (``compile`` on, and resets drawn on every step)."""
        return self.compile and self.resets_every_step

    def __getstate__(self) -> dict[str, Any]:
        # A compiled function cannot be pickled or deep-copied: the copy compiles again on its first step.
        state = self.__dict__.copy()
        state["_compiled_dynamics"] = None
        state["_compiled_step"] = None
        return state

    def _spaces(self) -> tuple[gym.spaces.Box, gym.spaces.Discrete | gym.spaces.Box]:
        """``(single_observation_space, single_action_space)``, gymnasium's."""
        raise NotImplementedError

    def _setup(self) -> None:
        """Build the constants of the dynamics (in ``self.dtype``, on ``self.device``)."""

    def _constant(self, value: float) -> Tensor:
        """A 0-dim tensor of the state's dtype: a Python float would be re-wrapped every step."""
        return torch.tensor(value, dtype=self.dtype, device=self.device)

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
        memory, which an observation may then share).

        Here the observation is the state, as a transposed view: a contiguous ``(state_size, N)``
        copy is a memcpy, a transposing one costs ~10x more. So observations are not contiguous
        (use ``.reshape``, not ``.view``)."""
        if self.dtype != torch.float32:
            return state.T.float()  # float64 -> float32 is a copy anyway
        return state.T if private else state.clone().T

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
        self._auto_reset(final, terminated | truncated)
        return truncated, self._obs(self._state)

    def _auto_reset(self, final: Tensor, done: Tensor) -> None:
        """The state becomes ``final``, but a fresh start (and a restarted clock) where ``done``.

        Every env gets a freshly drawn reset state, kept only where its episode ended: no device
        sync to find which ones did, and the same draws whatever happened."""
        self._episode_start.masked_fill_(done, self._clock)
        self._state = torch.where(done, self._random_states(), final)


def compiled_flags(flags: Tensor) -> Tensor:
    """A dynamics function's bool output (its last, ``terminated``) as it leaves a compiled region:
    float32 on the CPU, where inductor's code stores a bool vector ~10 ns per element, 3x the rest
    of the CartPole step (measured at 65,536 envs), and a float one at memory speed;
    :meth:`ClassicControlEnv._dynamics` turns it back into bool. Eagerly and on other devices: ``flags``."""
    if torch.compiler.is_compiling() and flags.device.type == "cpu":
        return flags.float()
    return flags


def fused_step(
    dynamics: Callable[..., Any],
    observe: Callable[[Tensor], Tensor],
    state: Tensor,
    episode_start: Tensor,
    clock: Tensor,
    max_episode_steps: int,
    reset_states: Tensor,
    *inputs: Any,
) -> tuple[Tensor, ...]:
    """One step of every env as a pure function (the fused step ``compile=True`` compiles): the dynamics,
    gymnasium's ``TimeLimit``, the auto-reset to ``reset_states`` where an episode ended, and the observations.

    Args:
        dynamics: the env's :attr:`ClassicControlEnv.dynamics`, called as ``dynamics(state, *inputs)``.
        observe: the env's :attr:`ClassicControlEnv.observe`.
        state: ``(state_size, n)``; ``episode_start`` int64 ``(n,)``: the clock at each episode's start;
            ``clock``: int64 0-dim, the steps taken before this one.
        reset_states: ``(state_size, n)`` fresh start states (kept only where an episode ends).

    Returns:
        ``(next_state, next_episode_start, clock + 1, obs, final_obs, reward, terminated, truncated)``
        (the flags as :func:`compiled_flags` gives them).
    """
    final, *_, reward, terminated = dynamics(state, *inputs)
    terminated = terminated.bool()
    clock = clock + 1
    # gymnasium's TimeLimit: truncated on the limit's step even if the env also terminated.
    truncated = episode_start <= clock - max_episode_steps
    done = terminated | truncated
    # Row by row, stacked: one loop over the envs computes everything (a where over the (state_size, n) state is a
    # second loop, which reads `done` back from memory, stored as bool on the CPU at ~10 ns an element).
    rows = zip(reset_states.unbind(), final.unbind(), strict=True)
    next_state = torch.stack([torch.where(done, reset, row) for reset, row in rows])
    next_start = torch.where(done, clock, episode_start)
    obs, final_obs = observe(next_state), observe(final)
    return next_state, next_start, clock, obs, final_obs, reward, compiled_flags(terminated), compiled_flags(truncated)


def env_step_function(
    dynamics: Callable[..., Any],
    observe: Callable[[Tensor], Tensor],
    inputs: Callable[..., tuple[Any, ...]],
    extras: tuple[Any, ...],
    state: Tensor,
    episode_start: Tensor,
    clock: Tensor,
    max_episode_steps: int,
    reset_states: Tensor,
    actions: Tensor,
) -> tuple[Tensor, ...]:
    """A fusing env's whole step for ``actions`` as a pure function (:meth:`ClassicControlEnv.fused_step_arguments`
    gives the arguments before them): :func:`fused_step` of ``inputs(actions, *extras)``."""
    return fused_step(
        dynamics, observe, state, episode_start, clock, max_episode_steps, reset_states, *inputs(actions, *extras)
    )


@functools.cache
def _fused_step_of(env_class: type) -> Callable[..., Any]:
    """:func:`env_step_function` with a code object of its own per env class: dynamo keeps compiled code, and its
    recompilation limit, per code object (each env of a class and shape reuses its class's code)."""
    name = f"fused_step_{env_class.__name__}"
    code = env_step_function.__code__.replace(co_name=name)
    return types.FunctionType(code, env_step_function.__globals__, name)


def state_observation(state: Tensor) -> Tensor:
    """The observation that is the state itself: float32 ``(n, state_size)`` in fresh memory, a transposed view
    of a ``(state_size, n)`` copy (see :meth:`ClassicControlEnv._obs`: a transposing copy costs more)."""
    return state.to(torch.float32, copy=True).T
