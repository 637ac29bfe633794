"""``compile=True``: an algorithm's update as a pure function of tensors and networks, through ``torch.compile``.

Every algorithm writes its update (DQN's TD loss, PPO's minibatch loss, SAC's three losses, ...) as a
module-level function of the batch's tensors, its networks and plain settings, with no logging and no
``self``: ``training_step`` calls it through :meth:`RLModule.compiled <rl_lightning.algos.base.RLModule.compiled>`,
which is the function itself unless the module was built with ``compile=True`` (or a dict of
``torch.compile`` arguments), and then ``torch.compile(function, dynamic=False, **options)``, built on the
first call (AOTAutograd compiles the backward pass as well). The optimizer step, clipping and logging stay
Lightning's.

Compiling takes seconds (CartPole DQN's loss, forward and backward: about 15 s on one core of this project's
CPU), spent in the first training step and reported as :attr:`CompiledFunctions.compile_seconds`; inductor
caches what it built on disk (``TORCHINDUCTOR_CACHE_DIR``, by default under the system's temporary folder),
so a second run of the same shapes compiles in a fraction of that.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import torch

#: The ``torch.compile`` arguments ``compile={...}`` may give.
COMPILE_ARGUMENTS = ("backend", "mode", "fullgraph", "dynamic", "options")


def check_compile(value: Any) -> dict[str, Any] | None:
    """The ``torch.compile`` arguments a ``compile`` hyper-parameter asks for: None for ``False``, ``{}`` for
    ``True``, the dict itself for a dict of :data:`COMPILE_ARGUMENTS` (``{"mode": "max-autotune"}``,
    ``{"backend": "aot_eager"}``)."""
    if isinstance(value, bool):
        return {} if value else None
    if isinstance(value, dict):
        unknown = sorted(set(value) - set(COMPILE_ARGUMENTS))
        if unknown:
            raise ValueError(
                f"compile got unknown torch.compile arguments {unknown}; allowed: {', '.join(COMPILE_ARGUMENTS)}"
            )
        _check_mode_and_backend(value)
        return dict(value)
    raise TypeError(
        f"compile must be a bool or a dict of torch.compile arguments ({', '.join(COMPILE_ARGUMENTS)}), "
        f"got {type(value).__name__}"
    )


def _check_mode_and_backend(arguments: dict[str, Any]) -> None:
    """torch.compile's own checks of ``mode`` and ``backend``, here where ``compile`` enters rather than at the
    first update (torch raises them inside the first training step)."""
    mode, backend = arguments.get("mode"), arguments.get("backend")
    if mode is not None and arguments.get("options") is not None:
        raise ValueError(
            f"compile got both mode ({mode!r}) and options: torch.compile takes one of them; "
            "give the mode's settings as options instead"
        )
    if mode is not None:
        import torch._inductor  # already imported by Lightning: no cost

        modes = tuple(torch._inductor.list_mode_options())
        if mode not in modes:
            raise ValueError(f"compile got mode {mode!r}; allowed modes: {', '.join(modes)}")
    if backend is not None and not callable(backend):
        import torch._dynamo

        backends = torch._dynamo.list_backends(exclude_tags=())
        if backend not in backends:
            raise ValueError(
                f"compile got backend {backend!r}; allowed backends: {', '.join(backends)} (or a callable)"
            )


def torch_compile(function: Callable[..., Any], **options: Any) -> Callable[..., Any]:
    """``torch.compile(function, dynamic=False, **options)``, with inductor's on-disk cache kept apart per CPU
    kernel set (:func:`use_capability_cache_dir`)."""
    use_capability_cache_dir()
    return torch.compile(function, **{"dynamic": False, **options})


def use_capability_cache_dir() -> None:
    """Keep inductor's on-disk cache in a folder of this process's CPU kernel set
    (``<tmp>/torchinductor_<user>_<AVX512|AVX2|DEFAULT>``), unless ``TORCHINDUCTOR_CACHE_DIR`` names another:
    inductor's cache key leaves out ``ATEN_CPU_CAPABILITY``, so a process under ``ATEN_CPU_CAPABILITY=default``
    otherwise reuses kernels generated natively with AVX-512 and fails to build them ("'at::vec' has not been
    declared")."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    default = os.path.abspath(default_cache_dir())
    # Importing Lightning already wrote inductor's default into the variable: only that value is replaced.
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR", default) == default:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = f"{default}_{torch.backends.cpu.get_cpu_capability()}"


class CompiledFunctions:
    """The compiled versions of a module's update functions, built on first use (``options`` None: none,
    every function is returned as it is). Not pickled or copied: a module sent to another process
    (``ddp_spawn``) or deep-copied compiles again there."""

    def __init__(self, options: dict[str, Any] | None):
        self.options = options
        if options is not None:
            use_capability_cache_dir()  # before anything of the run compiles (a native env's step)
        self._functions: dict[Callable[..., Any], Callable[..., Any]] = {}
        #: Seconds spent in each function's first call: compiling its forward graph, and one run of it
        #: (inductor compiles the backward graph lazily, at the first backward pass: not counted here).
        self.compile_seconds: dict[str, float] = {}

    @property
    def enabled(self) -> bool:
        return self.options is not None

    def __call__(self, function: Callable[..., Any]) -> Callable[..., Any]:
        if self.options is None:
            return function
        compiled = self._functions.get(function)
        if compiled is None:
            compiled = self._functions[function] = self._first_call_timed(
                function, torch_compile(function, **self.options)
            )
        return compiled

    def _first_call_timed(self, function: Callable[..., Any], compiled: Callable[..., Any]) -> Callable[..., Any]:
        def first_call(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            result = compiled(*args, **kwargs)
            self.compile_seconds[function.__name__] = time.perf_counter() - start
            self._functions[function] = compiled  # later calls go straight to the compiled function
            return result

        return first_call

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_functions": {}, "compile_seconds": {}}

    def __deepcopy__(self, memo: dict[int, Any]) -> CompiledFunctions:
        return CompiledFunctions(None if self.options is None else dict(self.options))
