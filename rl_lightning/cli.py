"""The command line, one parser path: ``rl-lightning`` (also ``python -m rl_lightning``), Lightning's
``LightningCLI`` over our modules, and :class:`ScriptCLI`, the same CLI for one module with flat flags,
which the training scripts (``scripts/train_*.py``) are written with.

    rl-lightning fit --config configs/vpg_cartpole.yaml
    rl-lightning fit --config configs/dqn_cartpole.yaml --trainer.max_steps 2000
    rl-lightning fit --model VPGModule --model.init_args.num_envs 64 --trainer.precision bf16-mixed
    rl-lightning fit --config configs/vpg_cartpole.yaml --logger tensorboard wandb   (also mlflow, csv)
    rl-lightning fit --config configs/vpg_cartpole.yaml --print_config      (the full config, YAML)
    rl-lightning fit --model.help VPGModule                                 (a module's hyper-parameters)
    python scripts/train_vpg.py --lr 0.01 --devices 2 --strategy ddp        (ScriptCLI: the same, flat flags)

Each module builds its own envs and data in ``train_dataloader``, so there is no ``--data``. Logs,
checkpoints and the run's ``config.yaml`` go to ``<trainer.default_root_dir>/lightning_logs/<run>/version_N``
(``<run>`` says what ran: ``PPO-CartPole-v1``). ``fit`` prints a start line and, at the end, whether the
env was solved and where the checkpoints went; ``validate`` and ``test`` print one result line and
write nothing (unless given a ``--trainer.logger``).

What ``--ckpt_path`` takes from a checkpoint and what it refuses: :mod:`rl_lightning._command_line_resume`; the
scripts' flat flags and their spellings: :mod:`rl_lightning._script_flags`; former argument names:
:mod:`rl_lightning._command_line_renames`.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import jsonargparse
import lightning as L
from jsonargparse import ActionConfigFile
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.cli import ArgsType, LightningArgumentParser, LightningCLI, SaveConfigCallback

from rl_lightning._command_line_renames import model_class_at, renamed_arguments
from rl_lightning._command_line_resume import (
    checkpoint_to_resume,
    find_last,
    model_init_args,
    settings_of_file,
    settings_of_last,
)
from rl_lightning._script_flags import (
    SCRIPT_TRAINER_FLAGS,
    ScriptHelpFormatter,
    add_run_arguments,
    add_script_arguments,
    run_callback_options,
    run_length,
    script_arguments,
)
from rl_lightning.algos import ALGORITHMS
from rl_lightning.callbacks import CheckpointOnStop, EnvStepBudget
from rl_lightning.callbacks.guard import check_trainer_settings
from rl_lightning.loggers import add_logger_argument, logger_spellings
from rl_lightning.scripting import (
    RunLines,
    counted,
    default_callbacks,
    is_launching_process,
    run_loggers,
    use_run_directory,
)
from rl_lightning.threads import use_threads

# A ``{"class_path": ...}`` value of an untyped option (``env_kwargs``' values) stays a spec for the code
# that receives it (a wrapper spec for ``resolve_wrappers``), rather than being built by jsonargparse,
# whatever class it names (jsonargparse 5's default; older versions have no such setting).
if hasattr(jsonargparse, "set_parsing_settings"):
    jsonargparse.set_parsing_settings(instantiate_subclass_spec_in_any=False)

# The modules ``--model`` accepts, by short name (``--model DQNModule``) or class path.
MODEL_CLASSES = ALGORITHMS

# RL on small MLPs: the envs are torch tensors on the module's device, and on CPU one process
# with few threads is fastest. One optimizer step is one rollout or one replay batch, so log each.
# No model summary: the start line gives the parameter count.
TRAINER_DEFAULTS = {"accelerator": "cpu", "devices": 1, "log_every_n_steps": 1, "enable_model_summary": False}


class RLLightningCLI(LightningCLI):
    """``LightningCLI`` with ``--model`` limited to :data:`MODEL_CLASSES`, ``--num_threads`` and
    ``--total_env_steps``; ``fit`` logs to the run's directory and prints its first and last lines."""

    #: ``--ckpt_path last``'s checkpoint, found when parsing: its path and contents, ``(None, None)`` for none.
    _last_found: tuple[str | None, Any] | None = None

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        # fit trains; validate and test run the greedy policy for RLModule.eval_episodes episodes
        # (validation_step / test_step) and print eval/* or test/* returns.
        return {name: LightningCLI.subcommands()[name] for name in ("fit", "validate", "test")}

    def add_core_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        # As LightningCLI's without ``--data``: each module makes its own data.
        parser.add_lightning_class_args(self.trainer_class, "trainer")
        parser.set_defaults({f"trainer.{key}": value for key, value in self.trainer_defaults.items()})
        # Any LightningModule parses (a tuple of base classes would make jsonargparse report the first
        # class's error, not the chosen one's); before_instantiate_classes keeps ours.
        # Not required by the parser: `validate --ckpt_path X` takes the class and hyper-parameters
        # from the checkpoint (before_instantiate_classes insists on a model).
        parser.add_lightning_class_args(L.LightningModule, "model", subclass_mode=True, required=False)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        add_run_arguments(parser, "--trainer.max_steps (fit)")
        add_logger_argument(parser, None, "fit only; not with --trainer.logger")
        parser.add_argument(
            "--trust_checkpoint",
            action="store_true",
            help="the --ckpt_path file is yours: allow any class path in its hyper-parameters (by default only "
            "rl_lightning's algorithms and gymnasium's wrappers; nothing else is imported from a checkpoint), and take "
            "its process-level settings (by default env_backend ray, Ray's env_kwargs and compile's options are left "
            "out: the run is local)",
        )

    def parse_arguments(self, parser: LightningArgumentParser, args: ArgsType) -> None:
        # The command line as given (a former argument name spelled as now: renamed_arguments), to tell the
        # flags a user set from the defaults (_parse_ckpt_path).
        argv = list(args) if isinstance(args, (list, tuple)) else sys.argv[1:] if args is None else []
        self._argv = logger_spellings(renamed_arguments(argv, parser.error))
        if self._argv == argv:
            super().parse_arguments(parser, args)
        else:  # LightningCLI's own parse of a command line (without its warning that args and sys.argv are both given)
            self.config = parser.parse_args(self._argv)

    def _parse_ckpt_path(self) -> None:
        """``--ckpt_path FILE``: the module class and the hyper-parameters default to the checkpoint's; the flags and
        ``--config`` values given win over them, and a note on stderr names each one that differs from the
        checkpoint. What is taken and what refused (a usage error, exit status 2):
        :func:`~rl_lightning._command_line_resume.settings_of_file`."""
        subcommand = self.config.get("subcommand")
        if not subcommand:
            return
        config = self.config[subcommand]
        ckpt_path = config.get("ckpt_path")
        if ckpt_path == "last":
            self._parse_last_checkpoint(subcommand, config)
            return
        if not ckpt_path:
            return
        model = config.get("model")
        chosen, taken, replaced = settings_of_file(
            ckpt_path,
            model,
            trusted=bool(config.get("trust_checkpoint")),
            given_init_args=lambda chosen: self._given_init_args(chosen, model),
            error=self._parser(subcommand).error,
        )
        update = {"class_path": f"{chosen.__module__}.{chosen.__qualname__}", "init_args": taken}
        self.config = self._parse_taken({subcommand: {"model": update}}, f"--ckpt_path {ckpt_path}", chosen.__name__)
        if replaced and is_launching_process():
            print(
                f"note: the flags win over the hyper-parameters of {ckpt_path}: {', '.join(replaced)}",
                file=sys.stderr,
                flush=True,
            )

    def _parse_last_checkpoint(self, subcommand: str, config: Any) -> None:
        """``--ckpt_path last``: the newest last checkpoint of ``--model`` on the run's env; the hyper-parameters not
        given (on the command line or in ``--config``) come back from it, and one given with another value than the
        checkpoint's is a usage error: that is another run (:mod:`~rl_lightning._command_line_resume`). Without
        ``--model`` / ``--config`` there is nothing to look for (``before_instantiate_classes`` says so)."""
        model = config.get("model")
        chosen = model_class_at(model.class_path) if model is not None else None
        if chosen is None or not hasattr(chosen, "algorithm_name"):
            return
        parser = self._parser(subcommand)
        root = config.trainer.get("default_root_dir") or os.getcwd()  # the Trainer's default
        given = self._given_init_args(chosen, model)
        env_id = model_init_args(model).get("env_id")
        self._last_found = find_last(root, chosen.algorithm_name(), env_id, parser.error)
        trusted = bool(config.get("trust_checkpoint"))
        taken = settings_of_last(self._last_found, chosen, given, "--model.init_args.", trusted, parser.error)
        if taken is not None:
            update = {"class_path": model.class_path, "init_args": taken}
            source = f"--ckpt_path last ({self._last_found[0]})"
            self.config = self._parse_taken({subcommand: {"model": update}}, source, chosen.__name__)

    def _parse_taken(self, update: dict[str, Any], source: str, name: str) -> Any:
        """``self.config`` with ``update`` (the settings taken from the checkpoint ``source``) parsed in."""
        try:
            return self.parser.parse_object(update, self.config)
        except SystemExit:
            sys.stderr.write(f"the hyper-parameters of {source} do not parse for {name}\n")
            raise

    def _given_init_args(self, model_class: Any, model: Any) -> dict[str, Any]:
        """The module's init args the user gave, on the command line or in a ``--config`` file, whatever their value
        (one equal to the class's default is given too), and those without a default."""
        if model is None or model.get("init_args") is None:
            return {}
        given = self.parser.parse_args(self._argv, defaults=False)[self.config["subcommand"]]  # (parsed once more)
        named = model_init_args(given.get("model")).keys()
        parameters = inspect.signature(model_class.__init__).parameters
        no_default = {name for name, parameter in parameters.items() if parameter.default is inspect.Parameter.empty}
        return {name: value for name, value in model_init_args(model).items() if name in named or name in no_default}

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand]
        if config.get("model") is None:
            self._usage_error(
                "a model is required: --model NAME (or --config FILE), or --ckpt_path of an rl_lightning checkpoint"
            )
        module_name, _, class_name = config.model.class_path.rpartition(".")
        if not issubclass(getattr(importlib.import_module(module_name), class_name), MODEL_CLASSES):
            names = ", ".join(model_class.__name__ for model_class in MODEL_CLASSES)
            self._usage_error(f"--model must be one of {names}, got {config.model.class_path}")
        use_threads(config.num_threads)
        if self.subcommand == "fit" and config.get("total_env_steps") is not None:
            # EnvStepBudget sets max_steps from the budget; the epochs must not cut it short.
            config.trainer.max_steps, config.trainer.max_epochs = -1, -1
        if config.get("logger") is not None and self.subcommand != "fit":
            self._usage_error(f"--logger is for fit: {self.subcommand} writes nothing (a --trainer.logger still logs)")
        if config.get("logger") is not None and config.trainer.get("logger") is not None:
            self._usage_error("--logger and --trainer.logger both give the run's loggers: pass one of them")
        if self.subcommand in ("validate", "test"):
            # Greedy episodes of a checkpoint: one printed line, no version_N directory or config.yaml
            # (a --trainer.logger of the user's still logs).
            self.save_config_callback = None
            if config.trainer.get("logger") is None:
                config.trainer.logger = False

    def instantiate_classes(self) -> None:
        try:
            super().instantiate_classes()
        except ValueError as error:
            # A value its type allows but the module rejects (num_envs 0, an unknown env_id):
            # report it like any other bad option, with exit status 2, not as a traceback. jsonargparse
            # wraps the module's error in "Does not validate against any of the Union subtypes" (the
            # union of the module class and None).
            cause: BaseException = error
            while cause.__cause__ is not None:
                cause = cause.__cause__
            self._usage_error(str(cause), error)
        except (MisconfigurationException, TypeError, ImportError) as error:
            # The Trainer refuses its flags (--trainer.devices 0, --trainer.accelerator gpu without one).
            self._usage_error(f"the --trainer flags are not usable here: {error}", error)
        _refuse_unsupported_trainer_settings(self)
        if self.subcommand == "fit":
            config = self.config[self.subcommand]
            own_logger = config.trainer.get("logger") is None
            run_dir = self._set_up_run(config.get("total_env_steps"), own_logger, config.get("logger"))
            for callback in self.trainer.callbacks:
                if own_logger and isinstance(callback, _SaveRunConfig):  # whichever logger comes first
                    callback.in_run_dir, callback.run_dir = True, run_dir
            self.trainer.callbacks.append(RunLines(run_dir=None if run_dir is None else str(run_dir)))
            if not any(isinstance(callback, CheckpointOnStop) for callback in self.trainer.callbacks):
                # SIGTERM, Ctrl-C and SLURM's requeue signal leave an exact resume point, as in the scripts
                self.trainer.callbacks.append(CheckpointOnStop())

    # -- shared with ScriptCLI ------------------------------------------------------------------------

    def _usage_error(self, message: str, error: BaseException | None = None) -> NoReturn:
        """Exit with status 2 and ``message`` after the usage line, as for a value of the wrong type."""
        self._parser(self.subcommand).error(message, error)

    def _set_up_run(self, total_env_steps: int | None, own_logger: bool, logger: Any = None) -> Any:
        """A fit's plumbing on the Trainer: the run's loggers (``logger``: ``--logger``'s value, see
        :func:`~rl_lightning.scripting.run_loggers`), all in ``lightning_logs/<ALGO>-<env id>/version_N``, with the
        checkpoints and videos there (``own_logger`` False keeps the loggers given), and the env-step budget, if
        any. Returns the run's directory (None: the loggers given decide). An unknown logger, or one whose
        package is missing, is a usage error before any directory is claimed."""
        run_dir = None
        if own_logger:
            try:
                loggers, run_dir = run_loggers(self.model, self.trainer.default_root_dir, logger)
            except (ValueError, ImportError) as error:
                self._usage_error(str(error), error)
            self.trainer.loggers = loggers
            use_run_directory(self.trainer, run_dir)
        if total_env_steps is not None:
            self.trainer.callbacks.append(EnvStepBudget(total_env_steps))
        return run_dir

    def _checkpoint_to_resume(self, ckpt_path: str | None, root_dir: str) -> str | None:
        """``ckpt_path``, or for ``last`` the newest ``last.ckpt`` of this algorithm and env under ``root_dir``,
        checked to fit the module built from the flags, or a usage error naming both (exit status 2):
        :func:`~rl_lightning._command_line_resume.checkpoint_to_resume`."""
        verb = "resuming" if self.subcommand in (None, "fit") else "loading"  # None: a script (fit)
        return checkpoint_to_resume(ckpt_path, root_dir, self.model, self._last_found, verb, self._usage_error)

    # -- subcommands ----------------------------------------------------------------------------------

    def _resolve_ckpt_path(self) -> None:
        # What Lightning is handed as ckpt_path: the checked file (``last`` found).
        config = self.config_init[self.subcommand]
        config["ckpt_path"] = self._checkpoint_to_resume(config.get("ckpt_path"), self.trainer.default_root_dir)

    def before_fit(self) -> None:
        self._resolve_ckpt_path()

    def before_validate(self) -> None:
        self._resolve_ckpt_path()
        self.config_init[self.subcommand]["verbose"] = False  # Lightning's results table: one line instead

    before_test = before_validate

    def after_validate(self) -> None:
        if self.trainer.is_global_zero:
            print(self._result_line("eval"), flush=True)

    def after_test(self) -> None:
        if self.trainer.is_global_zero:
            print(self._result_line("test"), flush=True)

    def _result_line(self, prefix: str) -> str:
        """``validate: greedy eval return 500.0 +- 0.0, length 500.0, 32 episodes of PPOModule on CartPole-v1 ...``."""
        metrics = {key: float(value) for key, value in self.trainer.callback_metrics.items()}
        module = self.model
        line = (
            f"{self.subcommand}: greedy {prefix} return {metrics[f'{prefix}/episodic_return']:.1f} +- "
            f"{metrics[f'{prefix}/episodic_return_std']:.1f}, length {metrics[f'{prefix}/episodic_length']:.1f}, "
            f"{counted(module.eval_episodes, 'episode')} of {type(module).__name__} on {module.hparams.env_id}"
        )
        ckpt_path = self.config_init[self.subcommand].get("ckpt_path")
        line += f" from {ckpt_path}" if ckpt_path else " (untrained: no --ckpt_path)"
        logger = self.trainer.logger
        return line + (
            f"; logged to {logger.log_dir}" if logger is not None and logger.log_dir else "; nothing written"
        )


class ScriptCLI(RLLightningCLI):
    """A training script's command line: ``model_class``'s hyper-parameters as flat options (``--lr``,
    ``--hidden_sizes [64,64]``, ``--network CLASS_PATH``), the Trainer flags, and the evaluation / video /
    stopping options of :func:`~rl_lightning.scripting.default_callbacks`. It builds ``.model`` and
    ``.trainer`` and finds ``.ckpt_path`` without running them (LightningCLI's ``run=False``); the script
    calls ``cli.trainer.fit(cli.model, ckpt_path=cli.ckpt_path)``. A value of the wrong type, one the
    module or Lightning refuses (``--lr -1``, ``--devices 0``) or a checkpoint that does not fit exits
    with status 2 and a message naming the option, before anything trains.

    Args:
        model_class: the module the script trains.
        description: the ``--help`` text (the script's docstring).
        max_steps: the run's length in optimizer steps when neither ``--max_steps`` nor
            ``--total_env_steps`` is given.
        eval_every_n_env_steps: the default of ``--eval_every_n_env_steps``.
        video_every_n_env_steps: the default of ``--video_every_n_env_steps``.
        log_every_n_steps: the Trainer's (optimizer steps between logged metrics).
        args: the command line (None: ``sys.argv[1:]``).
    """

    def __init__(
        self,
        model_class: type[L.LightningModule],
        description: str | None,
        *,
        max_steps: int,
        eval_every_n_env_steps: int,
        video_every_n_env_steps: int,
        log_every_n_steps: int = 1,
        args: Sequence[str] | None = None,
    ) -> None:
        self._defaults = {"max_steps": max_steps, "eval": eval_every_n_env_steps, "video": video_every_n_env_steps}
        self._log_every_n_steps = log_every_n_steps
        self.ckpt_path: str | None = None
        super().__init__(
            model_class,
            save_config_callback=None,  # no config.yaml next to the logs; --print_config writes one
            seed_everything_default=False,  # the module seeds itself from --seed
            parser_kwargs={"description": description, "formatter_class": ScriptHelpFormatter},
            run=False,
            auto_configure_optimizers=False,  # the modules make their own Adam from --lr
            load_from_checkpoint_support=False,  # the checkpoint's hyper-parameters are the module's own
            args=args,
        )

    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        parser = self.parser_class(**kwargs)
        parser.add_argument("--config", action=ActionConfigFile, help="a YAML file of options (see --print_config)")
        return parser

    def add_default_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        pass  # no --seed_everything: each module seeds its networks, envs and sampling from --seed

    def _set_seed(self) -> None:
        pass  # LightningCLI would call seed_everything(None), a random global seed, without --seed_everything

    def add_core_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        self._module_keys = add_script_arguments(parser, self.model_class, self._defaults)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        pass  # --num_threads and --total_env_steps are among the Trainer flags

    def parse_arguments(self, parser: LightningArgumentParser, args: ArgsType) -> None:
        argv = sys.argv[1:] if args is None else list(args)
        self._argv = argv = script_arguments(argv, parser, self.model_class, self._module_keys)
        self.config = parser.parse_args(argv)
        if self.config.max_steps is not None and self.config.total_env_steps is not None:
            parser.error("--max_steps and --total_env_steps both set the run's length: pass one of them")
        if self.config.max_steps is None and self.config.total_env_steps is None:
            self.config.max_steps = self._defaults["max_steps"]

    def _parse_ckpt_path(self) -> None:
        """``--ckpt_path last``: the newest last checkpoint of this module on ``--env_id`` under
        ``--default_root_dir``; the hyper-parameters not given (as flags or in ``--config``) come back from it, and
        one given with another value than the checkpoint's is a usage error: that is another run. (``--ckpt_path
        FILE``: the flags and their defaults, which the file must fit.)"""
        config = self.config
        if config.get("ckpt_path") != "last":
            return
        if not hasattr(self.model_class, "algorithm_name"):
            return
        named = self.parser.parse_args(self._argv, defaults=False)  # on the command line or in --config, any value
        given = {name: config[name] for name in self._module_keys if name in named}
        self._last_found = find_last(
            config.default_root_dir, self.model_class.algorithm_name(), config.get("env_id"), self.parser.error
        )
        trusted = bool(config.get("trust_checkpoint"))
        taken = settings_of_last(self._last_found, self.model_class, given, "--", trusted, self.parser.error)
        if taken is not None:
            taken = {name: value for name, value in taken.items() if name in self._module_keys}
            source = f"--ckpt_path last ({self._last_found[0]})"
            self.config = self._parse_taken(taken, source, self.model_class.__name__)

    def before_instantiate_classes(self) -> None:
        use_threads(self.config.num_threads)

    def instantiate_classes(self) -> None:
        config = self.config
        # ``instantiate`` is jsonargparse >= 4.49's name for ``instantiate_classes``.
        instantiate = getattr(self.parser, "instantiate", None) or self.parser.instantiate_classes
        self.config_init = instantiate(config)  # builds --network from its class_path and init_args
        try:
            self.model = self.model_class(**{key: self.config_init[key] for key in self._module_keys})
        except (TypeError, ValueError) as error:
            self._usage_error(str(error), error)
        self.ckpt_path = self._checkpoint_to_resume(config.ckpt_path, config.default_root_dir)
        length = run_length(config)
        callbacks = default_callbacks(self.model.hparams.env_id, **run_callback_options(config))
        try:
            self.trainer = self.instantiate_trainer(
                **{name: config[name] for name in SCRIPT_TRAINER_FLAGS},
                **length,
                callbacks=callbacks,
                log_every_n_steps=self._log_every_n_steps,
                logger=False,  # the run's own, once the Trainer accepts its flags: a refusal leaves no directory
                enable_model_summary=False,  # the start line gives the parameter count
            )
        except (MisconfigurationException, TypeError, ValueError, RuntimeError, ImportError) as error:
            given = " ".join(f"--{name} {config[name]}" for name in SCRIPT_TRAINER_FLAGS[:-1])
            self._usage_error(f"the Trainer flags ({given}) are not usable here: {error}", error)
        _refuse_unsupported_trainer_settings(self)
        self._set_up_run(config.total_env_steps, own_logger=True, logger=config.logger)


class _SaveRunConfig(SaveConfigCallback):
    """LightningCLI's ``config.yaml``, in the run's directory (``run_dir``; ``in_run_dir`` is set on every rank
    for a fit with the run's own loggers) whichever logger comes first: Lightning writes it to ``trainer.log_dir``,
    which is W&B's ``save_dir`` or, for MLflow, nothing (it fails) when one of them comes first. Otherwise
    Lightning's own."""

    in_run_dir = False
    run_dir: Any = None  # None on a rank that a launcher started without naming it: rank 0 writes

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if not self.in_run_dir:
            super().setup(trainer, pl_module, stage)
            return
        if self.already_saved:
            return
        # No broadcast (Lightning's broadcasts trainer.log_dir), so the same on every rank; rank 0 writes.
        if trainer.is_global_zero and self.run_dir is not None:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            path = str(self.run_dir / self.config_filename)
            self.parser.save(self.config, path, skip_none=False, overwrite=self.overwrite, multifile=self.multifile)
            self.save_config(trainer, pl_module, stage)
        self.already_saved = True


def make_cli(args: ArgsType = None) -> RLLightningCLI:
    """Parse ``args`` (None: ``sys.argv[1:]``), build the module and Trainer, run the subcommand
    (``fit`` ...) and return the CLI (``.model``, ``.trainer``, ``.config``)."""
    return RLLightningCLI(
        trainer_defaults=TRAINER_DEFAULTS,
        # Each module seeds its networks, envs and sampling from its own ``seed`` hyper-parameter.
        seed_everything_default=False,
        # The modules make their own Adam from ``lr``; a second ``--optimizer`` would silently win.
        auto_configure_optimizers=False,
        save_config_callback=_SaveRunConfig,
        save_config_kwargs={"overwrite": True},
        args=args,
    )


def main(args: ArgsType = None) -> None:
    """The ``rl-lightning`` console script and ``python -m rl_lightning`` (exit status: 143 after
    SIGTERM, 130 after Ctrl-C, 2 for a bad value or a setting refused once the run started, 1 when training
    diverged, 0 when done)."""
    from rl_lightning.scripting import run_script

    run_script(lambda: make_cli(args))


def _refuse_unsupported_trainer_settings(cli: RLLightningCLI) -> None:
    """A Trainer setting the modules cannot honour (a precision, gradient accumulation: the rule of
    ``RunGuard``, which would refuse it at setup) is a usage error, exit status 2, before anything runs."""
    try:
        check_trainer_settings(cli.trainer)
    except ValueError as error:
        cli._usage_error(str(error), error)
