"""The machinery the classic-control envs (CartPole, Acrobot, MountainCar, Pendulum) share: the
constructor, the physical state stored as rows, the per-env episode clock and time limit."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import gymnasium as gym
import torch
from torch import Tensor

from rl_lightning._checks import check_bool, check_int
from rl_lightning.compiling import own_code, torch_compile
from rl_lightning.envs.base import VectorEnv

# The inputs' sizes and strides are guarded already (dynamic=False); inductor's own asserts of them
# cost ~10 us a call, a sixth of a compiled CartPole step at 4,096 envs (measured).
_COMPILE_OPTIONS = {"size_asserts": False, "alignment_asserts": False}


def resets_from_own_draw(draw: Tensor, done: Tensor, used: Tensor) -> tuple[Tensor, Tensor]:
    """:attr:`ClassicControlEnv.resets` of an env that draws a start state for every env on every step: the draw."""
    del done
    return draw, used


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
            it took: :attr:`compile_seconds`). Where the env's resets can be drawn before the step
            (:attr:`fuses_step`: every env but Pendulum, whose envs are all truncated on the same
            host-decided step, and a CPU CartPole of more than ``fused_reset_max_envs`` envs), the
            whole step is one compiled function (:func:`fused_step`: the dynamics, the time limit, the
            auto-reset, the observations and the final observations); elsewhere the dynamics alone.
            The reset states are drawn eagerly from the env's generator, as the eager env draws them
            (dynamo cannot trace a ``torch.Generator``), so the random streams are the eager env's and
            the numbers agree with it to float rounding.

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
    #: Which start state each env gets where its episode ends, as a pure function (a ``staticmethod``, traced into
    #: the fused step): ``resets(draw, done, used) -> (states, used)``, ``states`` ``(state_size, n)`` (kept only
    #: where ``done``) from ``draw``, one of :meth:`_fused_reset_draws`; ``used``: how many of a draw shared by
    #: several steps the steps before took (int64 0-dim). Here each step's own draw, a state for every env.
    resets: Callable[[Tensor, Tensor, Tensor], tuple[Tensor, Tensor]] = staticmethod(resets_from_own_draw)
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
        # A fused step's count of a shared reset draw's numbers taken, before any (FusedCarry.draws_used).
        self._no_draws_used = torch.zeros((), dtype=torch.int64, device=self.device)
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
    def fused_inputs(actions: Tensor, first_step: Tensor, *extras: Any) -> tuple[Any, ...]:
        """The dynamics' inputs after the state, for ``actions`` as given to :meth:`step`, the envs on an episode's
        first step (bool ``(n,)``, computed only where used) and :meth:`_fused_extras` (a pure function: it is
        traced into the fused step). Here: integer actions and the constants."""
        return (actions if actions.dtype in (torch.int32, torch.int64) else actions.long(), *extras)

    def _fused_extras(self) -> tuple[Any, ...]:
        """What :meth:`fused_inputs` takes after the actions and the first-step flags."""
        return (self._constants,)

    def fused_steps_arguments(self, count: int) -> tuple[Callable[..., Any], tuple[Any, ...], FusedCarry, list[Tensor]]:
        """What a caller needs to run this env's next ``count`` steps inside its own compiled function (a rollout
        fusing its acting steps with them): ``(step, arguments, carry, reset_draws)``; step ``i`` is
        ``carry, (obs, final_obs, reward, terminated, truncated) = step(*arguments, carry, reset_draws[i], actions)``
        (:func:`fused_step`, named after the env class). Hand the last carry to :meth:`finish_fused_steps`.
        The reset states are drawn here from the env's generator, eagerly: the eager auto-reset's draws, the same
        stream."""
        if self._device_clock is None or self._device_clock_at != self._clock:
            self._device_clock = torch.tensor(self._clock, dtype=torch.int64, device=self.device)
        arguments = (self.dynamics, self.observe, self.resets, self.fused_inputs, self._fused_extras())
        carry = FusedCarry(self._state, self._episode_start, self._device_clock, self._no_draws_used)
        return _fused_step_of(type(self)), (*arguments, self.max_episode_steps), carry, self._fused_reset_draws(count)

    def finish_fused_steps(self, carry: FusedCarry, count: int) -> None:
        """The env takes the state its fused steps reached (``count`` of them, the last ``carry``)."""
        self._state, self._episode_start, self._device_clock, _ = carry
        self._clock += count
        self._device_clock_at = self._clock

    def _fused_reset_draws(self, count: int) -> list[Tensor]:
        """The random numbers the next ``count`` fused steps' resets come from (:attr:`resets` picks them): here
        fresh states for every env on each step, drawn one step after another as the eager env draws them."""
        return [self._random_states() for _ in range(count)]

    def _step_fused(self, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, dict[str, Any]]:
        """The whole step as one compiled function (:func:`fused_step`): the same results as ``_dynamics`` then
        ``_end_step``."""
        step, arguments, carry, (reset_draw,) = self.fused_steps_arguments(1)
        if self._compiled_step is None:
            self._compiled_step = torch_compile(step, fullgraph=True, options=_COMPILE_OPTIONS)
            start = time.perf_counter()
            carry, outputs = self._compiled_step(*arguments, carry, reset_draw, actions)
            self.compile_seconds = time.perf_counter() - start
        else:
            carry, outputs = self._compiled_step(*arguments, carry, reset_draw, actions)
        self.finish_fused_steps(carry, 1)
        obs, final_obs, reward, terminated, truncated = outputs
        return obs, reward, terminated.bool(), truncated.bool(), {"final_observation": final_obs}

    @classmethod
    def fuses_step_at(cls, num_envs: int, device: torch.device) -> bool:
        """Whether ``cls(num_envs, device=device, compile=True)`` steps as one compiled function (``fuses_step``)."""
        return cls.resets_every_step

    @property
    def fuses_step(self) -> bool:
        """Whether a step is one compiled function (``compile`` on, and resets drawn before the step)."""
        return self.compile and type(self).fuses_step_at(self.num_envs, self.device)

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


def stacks_rows() -> bool:
    """Whether a pure env function must build its rows by stacking them, not by writing into views of one tensor:
    traced by ``torch.compile`` (inductor would recompute the step per row: see ``cartpole_step``), or batched by
    ``torch.func.vmap`` (a ``num_seeds > 1`` run's lock-step collection), which has no batching rule for ``out=``."""
    return torch.compiler.is_compiling() or torch._C._functorch.peek_interpreter_stack() is not None


def compiled_flags(flags: Tensor) -> Tensor:
    """A dynamics function's bool output (its last, ``terminated``) as it leaves a compiled region:
    float32 on the CPU, where inductor's code stores a bool vector ~10 ns per element, 3x the rest
    of the CartPole step (measured at 65,536 envs), and a float one at memory speed;
    :meth:`ClassicControlEnv._dynamics` turns it back into bool. Eagerly and on other devices: ``flags``."""
    if torch.compiler.is_compiling() and flags.device.type == "cpu":
        return flags.float()
    return flags


class FusedCarry(NamedTuple):
    """What one fused step hands the next (:func:`fused_step`): the env's state between steps."""

    state: Tensor  # (state_size, n)
    episode_start: Tensor  # int64 (n,): the clock at each episode's start
    clock: Tensor  # int64 0-dim: the steps taken
    draws_used: Tensor  # int64 0-dim: the numbers of a shared reset draw taken (ClassicControlEnv.resets)


def fused_step(
    dynamics: Callable[..., Any],
    observe: Callable[[Tensor], Tensor],
    resets: Callable[[Tensor, Tensor, Tensor], tuple[Tensor, Tensor]],
    inputs: Callable[..., tuple[Any, ...]],
    extras: tuple[Any, ...],
    max_episode_steps: int,
    carry: FusedCarry,
    reset_draw: Tensor,
    actions: Tensor,
) -> tuple[FusedCarry, tuple[Tensor, ...]]:
    """One step of every env as a pure function (the fused step ``compile=True`` compiles): the dynamics,
    gymnasium's ``TimeLimit``, the auto-reset where an episode ended, and the observations.

    Args:
        dynamics: the env's :attr:`ClassicControlEnv.dynamics`, called as ``dynamics(state, *inputs(...))``.
        observe, resets, inputs: the env's :attr:`ClassicControlEnv.observe`, :attr:`ClassicControlEnv.resets`
            and :meth:`ClassicControlEnv.fused_inputs`; ``extras``: its :meth:`ClassicControlEnv._fused_extras`.
        carry: the state the step starts from.
        reset_draw: what the env drew for this step's resets (:meth:`ClassicControlEnv._fused_reset_draws`).

    Returns:
        ``(carry, (obs, final_obs, reward, terminated, truncated))``, the flags as :func:`compiled_flags` gives them.
    """
    state, episode_start, clock, draws_used = carry
    final, *_, reward, terminated = dynamics(state, *inputs(actions, episode_start == clock, *extras))
    terminated = terminated.bool()
    clock = clock + 1
    # gymnasium's TimeLimit: truncated on the limit's step even if the env also terminated.
    truncated = episode_start <= clock - max_episode_steps
    done = terminated | truncated
    reset_states, draws_used = resets(reset_draw, done, draws_used)
    # Row by row, stacked: one loop over the envs computes everything (a where over the (state_size, n) state is a
    # second loop, which reads `done` back from memory, stored as bool on the CPU at ~10 ns an element).
    rows = zip(reset_states.unbind(), final.unbind(), strict=True)
    next_state = torch.stack([torch.where(done, reset, row) for reset, row in rows])
    next_start = torch.where(done, clock, episode_start)
    obs, final_obs = observe(next_state), observe(final)
    outputs = (obs, final_obs, reward, compiled_flags(terminated), compiled_flags(truncated))
    return FusedCarry(next_state, next_start, clock, draws_used), outputs


@functools.cache
def _fused_step_of(env_class: type) -> Callable[..., Any]:
    """:func:`fused_step` named after the env class (``fused_step_CartPole`` in dynamo's logs, profiles and the
    fused collection's name), one function per class."""
    return own_code(fused_step, f"fused_step_{env_class.__name__}")


def state_observation(state: Tensor) -> Tensor:
    """The observation that is the state itself: float32 ``(n, state_size)`` in fresh memory, a transposed view
    of a ``(state_size, n)`` copy (see :meth:`ClassicControlEnv._obs`: a transposing copy costs more)."""
    return state.to(torch.float32, copy=True).T
