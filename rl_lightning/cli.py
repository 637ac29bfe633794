"""The ``rl-lightning`` command (also ``python -m rl_lightning``): Lightning's ``LightningCLI`` over our modules.

    rl-lightning fit --config configs/vpg_cartpole.yaml
    rl-lightning fit --config configs/dqn_cartpole.yaml --trainer.max_steps 2000
    rl-lightning fit --model VPGModule --model.init_args.num_envs 64 --trainer.precision bf16-mixed
    rl-lightning fit --config configs/vpg_cartpole.yaml --print_config      (the full config, YAML)
    rl-lightning fit --model.help VPGModule                                 (a module's hyper-parameters)

Each module builds its own envs and data in ``train_dataloader``, so there is no ``--data``. Logs,
checkpoints and the run's ``config.yaml`` go to ``<trainer.default_root_dir>/lightning_logs/<run>/version_N``
(``<run>`` says what ran: ``PPO-CartPole-v1``). ``fit`` prints a start line and, at the end, whether the
env was solved and where the checkpoints went; ``validate`` and ``test`` print one result line and
write nothing (unless given a ``--trainer.logger``).
"""

from __future__ import annotations

import importlib
import inspect
import sys
import time
from typing import Any

import lightning as L
import torch
from jsonargparse.typing import PositiveInt
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.cli import ArgsType, LightningArgumentParser, LightningCLI

from rl_lightning.algos import ALGORITHMS
from rl_lightning.callbacks import EnvStepBudget
from rl_lightning.checkpoints import CHECKPOINT_KEY, load_checkpoint_file, resolve_ckpt_path
from rl_lightning.scripting import StartLine, is_launching_process, report, run_logger

# The modules ``--model`` accepts, by short name (``--model DQNModule``) or class path.
MODEL_CLASSES = ALGORITHMS

# RL on small MLPs: the envs are torch tensors on the module's device, and on CPU one process
# with few threads is fastest. One optimizer step is one rollout or one replay batch, so log each.
# No model summary: the start line gives the parameter count.
TRAINER_DEFAULTS = {"accelerator": "cpu", "devices": 1, "log_every_n_steps": 1, "enable_model_summary": False}


class RLLightningCLI(LightningCLI):
    """``LightningCLI`` with ``--model`` limited to :data:`MODEL_CLASSES` and a ``--num_threads`` option."""

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
        parser.add_argument(
            "--num_threads", type=PositiveInt, default=1, help="torch CPU threads (torch.set_num_threads)"
        )
        parser.add_argument(
            "--total_env_steps",
            type=PositiveInt | None,
            default=None,
            help="fit: the run's length in env steps (SB3's total_timesteps), in place of --trainer.max_steps",
        )

    def parse_arguments(self, parser: LightningArgumentParser, args: ArgsType) -> None:
        # The command line as given, to tell the flags a user set from the defaults (_parse_ckpt_path).
        self._argv = list(args) if isinstance(args, (list, tuple)) else sys.argv[1:] if args is None else []
        super().parse_arguments(parser, args)

    def _parse_ckpt_path(self) -> None:
        """``--ckpt_path FILE``: the module class and the hyper-parameters default to the checkpoint's;
        the flags and ``--config`` values given win over them, and a note on stderr names each one that
        differs from the checkpoint. A file that is not an rl_lightning checkpoint, or a checkpoint of
        another class than ``--model``, is a usage error (exit status 2). (Lightning's own version
        silently lets the checkpoint's values replace the flags, its class replace ``--model``.)"""
        subcommand = self.config.get("subcommand")
        if not subcommand:
            return
        config = self.config[subcommand]
        ckpt_path = config.get("ckpt_path")
        if not ckpt_path or ckpt_path == "last":
            return
        parser = self._parser(subcommand)
        try:
            checkpoint = load_checkpoint_file(ckpt_path)
        except ValueError as error:
            parser.error(f"--ckpt_path: {error}")
        hparams = dict(checkpoint.get("hyper_parameters") or {})
        hparams.pop("_instantiator", None)
        saved_by = checkpoint[CHECKPOINT_KEY].get("algorithm")
        saved_class = _model_class(hparams.pop("_class_path", None)) or {c.__name__: c for c in MODEL_CLASSES}.get(
            saved_by
        )
        if saved_class is None:
            parser.error(f"--ckpt_path {ckpt_path} does not say which module saved it (no class path): pass --model")
        model = config.get("model")
        chosen = _model_class(model.class_path) if model is not None else saved_class
        if chosen is not None and saved_class.algorithm_name() != getattr(chosen, "algorithm_name", lambda: None)():
            parser.error(
                f"--ckpt_path {ckpt_path} is a checkpoint of {saved_class.algorithm_name()} on "
                f"{checkpoint[CHECKPOINT_KEY].get('env_id')}, but --model is {chosen.__name__}: pass a "
                f"{chosen.__name__} checkpoint, or --model {saved_class.__name__} (or no --model: the checkpoint's)"
            )
        given = self._given_init_args(chosen, model)
        replaced = [
            f"{name} {given[name]!r} (checkpoint: {hparams[name]!r})"
            for name in sorted(given)
            if name in hparams and not _same_value(given[name], hparams[name])
        ]
        taken = {name: value for name, value in hparams.items() if name not in given}
        update = {"class_path": f"{chosen.__module__}.{chosen.__qualname__}", "init_args": taken}
        try:
            self.config = self.parser.parse_object({subcommand: {"model": update}}, self.config)
        except SystemExit:
            sys.stderr.write(f"the hyper-parameters of --ckpt_path {ckpt_path} do not parse for {chosen.__name__}\n")
            raise
        if replaced and is_launching_process():
            print(
                f"note: the flags win over the hyper-parameters of {ckpt_path}: {', '.join(replaced)}",
                file=sys.stderr,
                flush=True,
            )

    def _given_init_args(self, model_class: Any, model: Any) -> dict[str, Any]:
        """The module's init args the user set: named on the command line, or (from a ``--config`` file or a
        flag) different from the class's default."""
        if model is None or model.get("init_args") is None:
            return {}
        defaults = {
            name: parameter.default
            for name, parameter in inspect.signature(model_class.__init__).parameters.items()
            if parameter.default is not inspect.Parameter.empty
        }
        named = {
            token.split("=", 1)[0].removeprefix("--model.").removeprefix("init_args.")
            for token in self._argv
            if token.startswith("--model.")
        }
        init_args = dict(model.init_args.items()) if hasattr(model.init_args, "items") else dict(vars(model.init_args))
        return {
            name: value
            for name, value in init_args.items()
            if name in named or name not in defaults or not _same_value(value, defaults[name])
        }

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand]
        if config.get("model") is None:
            self._parser(self.subcommand).error(
                "a model is required: --model NAME (or --config FILE), or --ckpt_path of an rl_lightning checkpoint"
            )
        module_name, _, class_name = config.model.class_path.rpartition(".")
        if not issubclass(getattr(importlib.import_module(module_name), class_name), MODEL_CLASSES):
            names = ", ".join(model_class.__name__ for model_class in MODEL_CLASSES)
            self._parser(self.subcommand).error(f"--model must be one of {names}, got {config.model.class_path}")
        torch.set_num_threads(config.num_threads)
        if self.subcommand == "fit" and config.get("total_env_steps") is not None:
            # EnvStepBudget sets max_steps from the budget; the epochs must not cut it short.
            config.trainer.max_steps, config.trainer.max_epochs = -1, -1
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
            self._parser(self.subcommand).error(str(cause), error)
        except (MisconfigurationException, TypeError, ImportError) as error:
            # The Trainer refuses its flags (--trainer.devices 0, --trainer.accelerator gpu without one).
            self._parser(self.subcommand).error(f"the --trainer flags are not usable here: {error}", error)
        if self.subcommand != "fit":
            return
        config = self.config[self.subcommand]
        if config.trainer.get("logger") is None:  # Lightning's default logger, named after the run
            self.trainer.loggers = [run_logger(self.model, self.trainer.default_root_dir)]
        if config.get("total_env_steps") is not None:
            self.trainer.callbacks.append(EnvStepBudget(config.total_env_steps))
        self.trainer.callbacks.append(StartLine())

    def _resolve_ckpt_path(self) -> None:
        # `--ckpt_path last`: the newest last.ckpt of this algorithm and env under default_root_dir,
        # since this run's own (new) version_N folder has none for Lightning's lookup to find.
        config = self.config_init[self.subcommand]
        config["ckpt_path"] = resolve_ckpt_path(
            config.get("ckpt_path"),
            self.trainer.default_root_dir,
            self.model.algorithm_name(),
            self.model.hparams.env_id,
        )

    def _check_ckpt_path(self) -> None:
        """The checkpoint (a path, or the one ``last`` found) fits the module built from the flags: the same
        algorithm, env and network shapes, or a usage error naming both (exit status 2)."""
        ckpt_path = self.config_init[self.subcommand].get("ckpt_path")
        if ckpt_path is None:
            return
        try:
            self.model.check_checkpoint(load_checkpoint_file(ckpt_path))
        except ValueError as error:
            self._parser(self.subcommand).error(f"--ckpt_path {ckpt_path}: {error}")

    def before_fit(self) -> None:
        self._resolve_ckpt_path()
        self._check_ckpt_path()
        self._start = time.perf_counter()

    def after_fit(self) -> None:
        if self.trainer.is_global_zero:
            print(report(self.trainer, self.model, time.perf_counter() - self._start), flush=True)

    def before_validate(self) -> None:
        self._resolve_ckpt_path()
        self._check_ckpt_path()
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
            f"{module.eval_episodes} episodes of {type(module).__name__} on {module.hparams.env_id}"
        )
        ckpt_path = self.config_init[self.subcommand].get("ckpt_path")
        line += f" from {ckpt_path}" if ckpt_path else " (untrained: no --ckpt_path)"
        logger = self.trainer.logger
        return line + (
            f"; logged to {logger.log_dir}" if logger is not None and logger.log_dir else "; nothing written"
        )


def _model_class(class_path: str | None) -> Any:
    """The class at ``class_path`` (``rl_lightning.algos.ppo.PPOModule``); None if there is none."""
    if not class_path:
        return None
    module_name, _, class_name = class_path.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError, ValueError):
        return None


def _same_value(a: Any, b: Any) -> bool:
    """``a == b``, with lists and tuples alike (a YAML list is a checkpoint's tuple)."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b, strict=True))
    try:
        return bool(a == b)
    except Exception:  # values without a plain truth value (arrays): differ
        return False


def make_cli(args: ArgsType = None) -> RLLightningCLI:
    """Parse ``args`` (None: ``sys.argv[1:]``), build the module and Trainer, run the subcommand
    (``fit`` ...) and return the CLI (``.model``, ``.trainer``, ``.config``)."""
    return RLLightningCLI(
        trainer_defaults=TRAINER_DEFAULTS,
        # Each module seeds its networks, envs and sampling from its own ``seed`` hyper-parameter.
        seed_everything_default=False,
        # The modules make their own Adam from ``lr``; a second ``--optimizer`` would silently win.
        auto_configure_optimizers=False,
        save_config_kwargs={"overwrite": True},
        args=args,
    )


def main(args: ArgsType = None) -> None:
    """The ``rl-lightning`` console script and ``python -m rl_lightning`` (exit status: 143 after
    SIGTERM, 130 after Ctrl-C, 1 when training diverged, 0 when done)."""
    from rl_lightning.scripting import run_script

    run_script(lambda: make_cli(args))
