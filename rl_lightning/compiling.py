"""``compile=True``: an algorithm's update as a pure function of tensors and networks, through ``torch.compile``.

Every algorithm writes its update (DQN's TD loss, PPO's minibatch loss, SAC's three losses, ...) as a
module-level function of the batch's tensors, its networks and plain settings, with no logging and no
``self``: ``training_step`` calls it through :meth:`RLModule.compiled <rl_lightning.algos.base.RLModule.compiled>`,
which is the function itself unless the module was built with ``compile=True`` (or a dict of
``torch.compile`` arguments), and then ``torch.compile(function, dynamic=False, **options)``, built on the
first call (AOTAutograd compiles the backward pass as well).

By default the whole update is compiled (LeanRL's pattern): the loss, its backward pass, gradient clipping, Adam's
step (torch's own) and a per-update Polyak target update as one function of tensors (:class:`WholeUpdate`; dynamo
splits it at the backward call, which runs AOTAutograd's compiled backward graph). It applies where the loop steps
the optimizer itself (one device, float32, no hook on backward or the step: ``algos._run.can_step_directly``) and
the optimizer is Adam or AdamW; elsewhere the run compiles the loss only and Lightning's loop steps the optimizer,
with one warning naming what runs eagerly and why (``algos._whole_update``). ``compile={"whole_update": False}``
compiles the loss only. On this project's 2-core CPU the whole update is 1-5% faster per update than the compiled
loss followed by Adam's fused CPU kernel (``benchmarks/results/engine.md``); it is the shape CUDA graphs need.

Compiling takes seconds (CartPole DQN's loss, forward and backward: about 15 s on one core of this project's
CPU), spent in the first training step and reported as :attr:`CompiledFunctions.compile_seconds`; inductor
caches what it built on disk (``TORCHINDUCTOR_CACHE_DIR``, by default under the system's temporary folder),
so a second run of the same shapes compiles in a fraction of that.
"""

from __future__ import annotations

import functools
import os
import time
import types
from collections.abc import Callable
from typing import Any

import torch
from torch.optim.adam import adam as torch_adam

from rl_lightning._checks import _type_name

#: The ``torch.compile`` arguments ``compile={...}`` may give.
COMPILE_ARGUMENTS = ("backend", "mode", "fullgraph", "dynamic", "options")
#: Inductor settings of every compiled function unless ``compile`` gives ``mode`` or ``options``: its generated code's
#: checks of its inputs' sizes, strides and alignment are off (dynamo's guards with ``dynamic=False`` check the sizes
#: and strides already; the asserts cost ~0.7 us each, ~20 us per call of a fused collection step, measured).
FAST_INDUCTOR_OPTIONS = {"size_asserts": False, "alignment_asserts": False}
#: rl_lightning's own ``compile={...}`` settings: ``whole_update`` (bool, default True) compiles the whole update
#: (:class:`WholeUpdate`); False: its loss only.
UPDATE_ARGUMENTS = ("whole_update",)


def check_compile(value: Any) -> dict[str, Any] | None:
    """The settings a ``compile`` hyper-parameter asks for: None for ``False``, ``{}`` for ``True``, the dict
    itself for a dict of :data:`COMPILE_ARGUMENTS` and :data:`UPDATE_ARGUMENTS` (``{"mode": "max-autotune"}``,
    ``{"backend": "aot_eager"}``, ``{"whole_update": False}``)."""
    allowed = (*COMPILE_ARGUMENTS, *UPDATE_ARGUMENTS)
    if isinstance(value, bool):
        return {} if value else None
    if isinstance(value, dict):
        unknown = sorted(set(value) - set(allowed))
        if unknown:
            raise ValueError(
                f"compile got unknown torch.compile arguments {unknown}; allowed: {', '.join(COMPILE_ARGUMENTS)}, "
                f"and rl_lightning's {', '.join(UPDATE_ARGUMENTS)}"
            )
        if "whole_update" in value and not isinstance(value["whole_update"], bool):
            raise TypeError(f"compile's whole_update must be a bool, got {value['whole_update']!r}")
        _check_argument_types(value)
        _check_mode_and_backend(value)
        return dict(value)
    raise TypeError(
        f"compile must be a bool or a dict of torch.compile arguments ({', '.join(COMPILE_ARGUMENTS)}) and "
        f"{', '.join(UPDATE_ARGUMENTS)}, got {type(value).__name__}"
    )


def _check_argument_types(arguments: dict[str, Any]) -> None:
    """Each ``torch.compile`` argument's type (torch checks most of them only inside the first training step)."""
    for name in ("fullgraph", "dynamic"):
        value = arguments.get(name)
        if name in arguments and not (isinstance(value, bool) or (name == "dynamic" and value is None)):
            allowed = "True, False or None" if name == "dynamic" else "True or False"
            raise TypeError(f"compile's {name} must be {allowed}, got {_type_name(value)}")
    options = arguments.get("options")
    if options is not None and not (isinstance(options, dict) and all(isinstance(key, str) for key in options)):
        raise TypeError(
            "compile's options must be a dict of inductor settings with str keys (such as "
            f"{{'max_autotune': True}}), got {_type_name(options)}"
        )
    if options and arguments.get("backend", "inductor") == "inductor":
        _check_inductor_options(options)
    mode = arguments.get("mode")
    if mode is not None and not isinstance(mode, str):
        raise TypeError(f"compile's mode must be a str such as 'max-autotune', got {_type_name(mode)}")
    backend = arguments.get("backend")
    if backend is not None and not (isinstance(backend, str) or callable(backend)):
        raise TypeError(f"compile's backend must be a str such as 'inductor' or a callable, got {_type_name(backend)}")


def _check_inductor_options(options: dict[str, Any]) -> None:
    """Inductor's names and types of ``options``, checked as ``torch.compile`` checks them when it is called."""
    import torch._inductor

    known = set(torch._inductor.list_options())
    unknown = sorted(key for key in options if key.replace("-", "_") not in known)
    if unknown:
        raise ValueError(
            f"compile's options has unknown inductor settings {unknown}; torch._inductor.list_options() lists them"
        )
    try:
        torch.compile(_compile_nothing, options=options)  # builds no code: compiling waits for the first call
    except RuntimeError as error:  # "Unexpected type of attr max_autotune, got str should be bool"
        raise TypeError(f"compile's options: {error}") from None


def _compile_nothing() -> None:
    """A function for :func:`_check_inductor_options` to hand ``torch.compile``."""


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
    """``torch.compile(dynamic=False, **options)`` of ``function`` as a code object of its own (:func:`own_code`),
    with inductor's on-disk cache kept apart per CPU kernel set (:func:`use_capability_cache_dir`).

    Dynamo keeps compiled code, and its recompilation limit (8), per code object: with a copy per call, each caller
    (a module's update, an env's step) has its own, and the runs of one process (a sweep, the tests) never exhaust
    one another's (a 9th shape of one shared code object runs eagerly, or fails under ``fullgraph=True``).
    Inductor's caches still share the generated code between equal graphs."""
    use_capability_cache_dir()
    return torch.compile(own_code(function), **{"dynamic": False, **options})


def own_code(function: Callable[..., Any], name: str | None = None) -> Callable[..., Any]:
    """A copy of the Python function ``function`` with a code object of its own (named ``name``, else as it is);
    anything else as it is."""
    if not isinstance(function, types.FunctionType):
        return function
    name = function.__name__ if name is None else name
    code = function.__code__.replace(co_name=name)
    copy = types.FunctionType(code, function.__globals__, name, function.__defaults__, function.__closure__)
    copy.__kwdefaults__, copy.__qualname__ = function.__kwdefaults__, function.__qualname__
    return copy


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
        #: ``torch.compile``'s arguments among ``options`` (with inductor's own size and alignment asserts off where
        #: the options leave inductor's settings to rl_lightning: :data:`FAST_INDUCTOR_OPTIONS`).
        self.compile_arguments = {k: v for k, v in (options or {}).items() if k not in UPDATE_ARGUMENTS}
        arguments = self.compile_arguments
        leaves_inductor_settings = "mode" not in arguments and "options" not in arguments
        if arguments.get("backend", "inductor") == "inductor" and leaves_inductor_settings:
            arguments["options"] = dict(FAST_INDUCTOR_OPTIONS)
        if options is not None:
            use_capability_cache_dir()  # before anything of the run compiles (a native env's step)
        self._functions: dict[Callable[..., Any], Callable[..., Any]] = {}
        self._own_copies: dict[str, Callable[..., Any]] = {}
        #: The whole update's compiled functions while a run holds them (``algos._whole_update.start_whole_updates``).
        self.whole_update: WholeUpdate | None = None
        #: Seconds spent in each function's first call: compiling its forward graph, and one run of it
        #: (inductor compiles the backward graph lazily, at the first backward pass: not counted here).
        self.compile_seconds: dict[str, float] = {}

    @property
    def enabled(self) -> bool:
        return self.options is not None

    @property
    def wants_whole_update(self) -> bool:
        """Whether the whole update is to be compiled: ``compile`` on, unless ``{"whole_update": False}``."""
        return self.options is not None and bool(self.options.get("whole_update", True))

    def __call__(self, function: Callable[..., Any]) -> Callable[..., Any]:
        if self.options is None:
            return function
        compiled = self._functions.get(function)
        if compiled is None:
            compiled = self._functions[function] = self._first_call_timed(
                function, None, torch_compile(function, **self.compile_arguments)
            )
        return compiled

    def own_copy(self, function: Callable[..., Any], name: str) -> Callable[..., Any]:
        """``function`` as :meth:`__call__` compiles it, named ``name`` (in :attr:`compile_seconds` and dynamo's
        logs: a function called with several kinds of arguments, a name for each)."""
        own = self._own_copies.get(name)
        if own is None:
            own = self._own_copies[name] = own_code(function, name)
        return self(own)

    def update(self, loss_function: Callable[..., Any]) -> Callable[..., Any]:
        """An update's loss function (returning ``(loss, *others)``) as the loop should call it: compiled as
        :meth:`__call__` compiles it or, while :attr:`whole_update` is held, the whole update around it
        (:class:`WholeUpdate`: it returns ``(loss.detach(), *others)`` after the optimizer step)."""
        whole = self.whole_update
        if whole is None:
            return self(loss_function)
        compiled = whole.functions.get(loss_function)
        if compiled is None:
            compiled = whole.functions[loss_function] = self._first_call_timed(
                loss_function, whole.functions, whole(loss_function)
            )
        return compiled

    def _first_call_timed(
        self,
        function: Callable[..., Any],
        cache: dict[Callable[..., Any], Callable[..., Any]] | None,
        compiled: Callable[..., Any],
    ) -> Callable[..., Any]:
        def first_call(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            result = compiled(*args, **kwargs)
            self.compile_seconds[function.__name__] = time.perf_counter() - start
            (self._functions if cache is None else cache)[function] = compiled  # later calls: straight to it
            return result

        return first_call

    def __getstate__(self) -> dict[str, Any]:
        return {
            "options": self.options,
            "compile_arguments": self.compile_arguments,
            "_functions": {},
            "_own_copies": {},
            "compile_seconds": {},
            "whole_update": None,
        }

    def __deepcopy__(self, memo: dict[int, Any]) -> CompiledFunctions:
        return CompiledFunctions(None if self.options is None else dict(self.options))


class WholeUpdate:
    """One update as one compiled function (LeanRL's pattern), for a loss function ``f(*args) -> (loss, *others)``:

        loss, *others = f(*args); loss.backward(); clip; Adam's step; target <- lerp(target, online, tau)

    (the gradients zeroed before it). Adam's step is torch's own (``torch.optim.adam.adam``, the function
    ``Adam.step`` calls; ``capturable`` on CUDA), called on the parameters, their gradients and the optimizer's own
    state tensors (``exp_avg``, ``exp_avg_sq``, ``step``, created in Adam's format, so checkpoints and an eager resume
    see a plain ``torch.optim.Adam``) rather than through ``optimizer.step()`` (which dynamo would guard on the
    optimizer object and its float learning rate), with the learning rate passed as a tensor:
    a schedule's new value is a new input, not a recompilation (no guard on an optimizer object). Dynamo splits the
    function at ``backward`` (AOTAutograd's compiled backward graph runs there). Each module compiles its own copy of
    the function for each loss (:func:`torch_compile`), so its recompilations (other shapes, TD3's actor step) count
    against its own limit.

    Args:
        optimizer: the module's optimizer (the torch optimizer, not Lightning's wrapper): ``Adam`` or ``AdamW``
            (:meth:`unsupported` says why another cannot be).
        clipping: ``(value, "norm" | "value")`` or None.
        polyak: ``(targets, onlines, tau)`` of the target networks moved after every update, or None.
        compile_arguments: ``torch.compile``'s arguments.
        moves_targets_of: the callback that schedules the Polyak update (a ``TargetNetworkSync``): it keeps its
            schedule and leaves the moving to this function.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        clipping: tuple[float, str] | None,
        polyak: tuple[list[torch.Tensor], list[torch.Tensor], float] | None,
        compile_arguments: dict[str, Any],
        moves_targets_of: Any = None,
    ):
        self.optimizer = optimizer
        self.clipping = clipping
        self.polyak = polyak
        self.compile_arguments = compile_arguments
        self.moves_targets_of = moves_targets_of
        #: The compiled functions, per loss function (``CompiledFunctions.update``).
        self.functions: dict[Callable[..., Any], Callable[..., Any]] = {}
        self._state: list[tuple[list[torch.Tensor], ...]] | None = None
        # Per param group: the learning rate as a 0-dim tensor on the parameters' device (the same tensor every
        # update, refilled when a schedule changes the group's float: an input at a fixed address, no recompiling).
        self._lr_tensors: list[tuple[float, torch.Tensor]] = []

    @staticmethod
    def unsupported(optimizer: torch.optim.Optimizer) -> str | None:
        """Why ``optimizer``'s step cannot be the compiled function's (None: it can)."""
        if type(optimizer) not in (torch.optim.Adam, torch.optim.AdamW):
            return f"its step is Adam's or AdamW's, and the optimizer is {type(optimizer).__name__}"
        for group in optimizer.param_groups:
            for option in ("amsgrad", "maximize", "differentiable"):
                if group.get(option):
                    return f"its Adam step has no {option}"
            if isinstance(group["lr"], torch.Tensor):
                return "its Adam step takes a float learning rate"
        return None

    def __call__(self, loss_function: Callable[..., Any]) -> Callable[..., Any]:
        """The whole update around ``loss_function``, compiled."""
        # Split at backward by design (each side one graph): a fullgraph=True asked for holds on the loss's side
        # (``compile={"fullgraph": True, "whole_update": False}`` checks it), not across the backward call.
        arguments = {key: value for key, value in self.compile_arguments.items() if key != "fullgraph"}
        step = torch_compile(_whole_update_for(loss_function), **arguments)
        optimizer, constants = self.optimizer, self._constants

        def whole_update(*args: Any) -> Any:
            optimizer.zero_grad(set_to_none=True)
            return step(loss_function, args, self._tensors(), self._lrs(), constants, self.clipping, self.polyak)

        return whole_update

    def _lrs(self) -> list[torch.Tensor]:
        """Each param group's learning rate as a tensor on its parameters' device, updated in place."""
        groups = self.optimizer.param_groups
        if not self._lr_tensors:
            devices = [group["params"][0].device if group["params"] else torch.device("cpu") for group in groups]
            self._lr_tensors = [(float("nan"), torch.zeros((), device=device)) for device in devices]
        lrs = []
        for index, (group, (value, tensor)) in enumerate(zip(groups, self._lr_tensors, strict=True)):
            lr = float(group["lr"])
            if lr != value:
                tensor.fill_(lr)
                self._lr_tensors[index] = (lr, tensor)
            lrs.append(tensor)
        return lrs

    @property
    def _constants(self) -> tuple[tuple[float, float, float, float, bool], ...]:
        decoupled = type(self.optimizer) is torch.optim.AdamW
        return tuple(
            (*group["betas"], group["eps"], group["weight_decay"], decoupled) for group in self.optimizer.param_groups
        )

    def _tensors(self) -> list[tuple[list[torch.Tensor], ...]]:
        """Per param group: its parameters and their ``exp_avg``, ``exp_avg_sq`` and ``step`` (created as Adam
        creates them where the optimizer has not stepped yet)."""
        if self._state is None:
            groups = []
            for group in self.optimizer.param_groups:
                params = list(group["params"])
                for param in params:
                    state = self.optimizer.state[param]
                    if not state:
                        # On CUDA the step counts live on the device: Adam's capturable step, no host read.
                        on_device = group.get("fused") or group.get("capturable") or param.device.type == "cuda"
                        state["step"] = torch.zeros((), dtype=torch.float32, device=param.device if on_device else None)
                        state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
                        state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
                states = [self.optimizer.state[param] for param in params]
                groups.append(
                    (
                        params,
                        [s["exp_avg"] for s in states],
                        [s["exp_avg_sq"] for s in states],
                        [s["step"] for s in states],
                    )
                )
            self._state = groups
        return self._state


@functools.cache
def _whole_update_for(loss_function: Callable[..., Any]) -> Callable[..., Any]:
    """:func:`_whole_update` named after ``loss_function`` (``whole_update_<loss>`` in dynamo's logs and profiles)."""
    return own_code(_whole_update, f"whole_update_{loss_function.__name__}")


def _whole_update(
    loss_function: Callable[..., Any],
    args: tuple[Any, ...],
    groups: list[tuple[list[torch.Tensor], ...]],
    lrs: list[torch.Tensor],
    constants: tuple[tuple[float, float, float, float, bool], ...],
    clipping: tuple[float, str] | None,
    polyak: tuple[list[torch.Tensor], list[torch.Tensor], float] | None,
) -> Any:
    """:class:`WholeUpdate`'s function (its docstring), of tensors only."""
    loss, *others = loss_function(*args)
    loss.backward()
    parameters = [p for params, *_ in groups for p in params]
    if clipping is not None:
        value, algorithm = clipping
        if algorithm == "value":
            torch.nn.utils.clip_grad_value_(parameters, value, foreach=True)
        else:
            torch.nn.utils.clip_grad_norm_(parameters, value, foreach=True)
    with torch.no_grad():
        for (params, exp_avgs, exp_avg_sqs, steps), lr, group_constants in zip(groups, lrs, constants, strict=True):
            _adam_step(params, exp_avgs, exp_avg_sqs, steps, lr, *group_constants)
        if polyak is not None:
            targets, onlines, tau = polyak
            torch._foreach_lerp_(targets, onlines, tau)
    return (loss.detach(), *others)


def _adam_step(
    params: list[torch.Tensor],
    exp_avgs: list[torch.Tensor],
    exp_avg_sqs: list[torch.Tensor],
    steps: list[torch.Tensor],
    lr: torch.Tensor,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
    decoupled: bool,
) -> None:
    """``torch.optim.Adam`` / ``AdamW``'s step, torch's own (``torch.optim.adam.adam``, the function their ``step``
    calls), on the parameters with a gradient; ``capturable`` where the step counts live on the parameters' device
    (CUDA: no host read of a step count, so the step can be graph-captured)."""
    # A parameter this loss does not reach (TD3's actor between its delayed steps) has no gradient: not stepped.
    with_grad = [i for i, param in enumerate(params) if param.grad is not None]
    if not with_grad:
        return
    torch_adam(
        [params[i] for i in with_grad],
        [params[i].grad for i in with_grad],
        [exp_avgs[i] for i in with_grad],
        [exp_avg_sqs[i] for i in with_grad],
        [],
        [steps[i] for i in with_grad],
        foreach=False,
        capturable=steps[with_grad[0]].device.type != "cpu",
        decoupled_weight_decay=decoupled,
        amsgrad=False,
        beta1=beta1,
        beta2=beta2,
        lr=lr,
        weight_decay=weight_decay,
        eps=eps,
        maximize=False,
    )
