"""Train on a Ray cluster with Ray Train: ``python scripts/train_ray.py ALGORITHM [--help]``.

ALGORITHM is vpg, ppo, dqn, sac or td3; every hyper-parameter of its module, the evaluation and stopping options
and ``--max_steps`` / ``--total_env_steps`` are those of ``scripts/train_<algorithm>.py``. The run is a DDP run of
``--num_workers`` Ray workers (``ray.train.torch.TorchTrainer``, Ray's Lightning integration): the same start line,
report, logs and checkpoints (``lightning_logs/<run>/version_N``), and Ray's own checkpoint of every epoch under
``--storage_path/--name``.

    python scripts/train_ray.py ppo --num_workers 2 --num_cpus 2            (a local Ray of 2 CPUs)
    python scripts/train_ray.py ppo --num_workers 8 --address HEAD:6379    (a cluster: ray start --head there)
    python scripts/train_ray.py ppo --ckpt_path last                       (resume from the newest last.ckpt)

Without ``--address`` (or ``RAY_ADDRESS``) it starts a local Ray. Starting a run again with the same
``--storage_path`` and ``--name`` resumes from Ray's newest checkpoint of it.
"""

from __future__ import annotations

import sys
from typing import Any

from jsonargparse.typing import PositiveInt
from lightning.pytorch.cli import LightningArgumentParser

from rl_lightning import DQNModule, PPOModule, SACModule, TD3Module, VPGModule
from rl_lightning.callbacks import EnvStepBudget
from rl_lightning.cli import ScriptCLI, run_callback_options, run_length
from rl_lightning.scripting import run_script

# Each algorithm's defaults in its own script (scripts/train_<algorithm>.py): max_steps, eval_every_n_env_steps,
# video_every_n_env_steps, log_every_n_steps.
ALGORITHMS: dict[str, tuple[type, dict[str, int]]] = {
    "vpg": (VPGModule, dict(max_steps=50, eval=32_000, video=100_000, log=1)),
    "ppo": (PPOModule, dict(max_steps=3_200, eval=2_048, video=50_000, log=1)),
    "dqn": (DQNModule, dict(max_steps=10_000, eval=4_000, video=40_000, log=50)),
    "sac": (SACModule, dict(max_steps=20_000, eval=2_000, video=50_000, log=100)),
    "td3": (TD3Module, dict(max_steps=20_000, eval=2_000, video=50_000, log=100)),
}

#: Lightning strategies a Ray run takes: Ray's DDP, told of unused parameters or not.
_STRATEGIES = {"auto": {}, "ddp": {}, "ddp_find_unused_parameters_true": {"find_unused_parameters": True}}


class RayScriptCLI(ScriptCLI):
    """A training script's command line (:class:`~rl_lightning.cli.ScriptCLI`) plus Ray's options; it builds
    ``.ray_trainer`` (a ``TorchTrainer``, :func:`rl_lightning.ray_train.ray_trainer`) in place of a Trainer. A bad
    value, an unreachable ``--address`` or a cluster too small for ``--num_workers`` exits with status 2 and a
    message naming the option, within seconds."""

    def __init__(self, algorithm: str, args: list[str]) -> None:
        self.algorithm = algorithm
        module_class, defaults = ALGORITHMS[algorithm]
        self.ray_trainer: Any = None
        super().__init__(
            module_class,
            __doc__,
            max_steps=defaults["max_steps"],
            eval_every_n_env_steps=defaults["eval"],
            video_every_n_env_steps=defaults["video"],
            log_every_n_steps=defaults["log"],
            args=args,
        )

    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        return super().init_parser(prog=f"train_ray.py {self.algorithm}", **kwargs)

    def add_core_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        super().add_core_arguments_to_parser(parser)
        group = parser.add_argument_group("Ray Train")
        group.add_argument(
            "--address",
            type=str | None,
            default=None,
            help="the Ray cluster to run on: its head's HOST:PORT (ray start --head prints it) or auto (null: "
            "RAY_ADDRESS, else a new local Ray on this machine)",
        )
        group.add_argument("--num_workers", type=int, default=2, help="Ray Train workers, one DDP process each")
        group.add_argument("--use_gpu", action="store_true", help="one GPU per worker (ScalingConfig(use_gpu=True))")
        group.add_argument(
            "--num_cpus", type=PositiveInt | None, default=None, help="CPUs of a new local Ray (null: the machine's)"
        )
        group.add_argument(
            "--storage_path",
            type=str | None,
            default=None,
            help="where Ray keeps the run's checkpoints (null: ~/ray_results; a cluster: shared storage or a URI)",
        )
        group.add_argument(
            "--name", type=str | None, default=None, help="the Ray run's name (the same again: resume from it)"
        )

    def instantiate_classes(self) -> None:
        from rl_lightning.loggers import logger_names
        from rl_lightning.ray_train import ray_trainer

        config = self.config
        refused = {
            "devices": (config.devices in (1, "1", "auto"), "the processes are --num_workers Ray workers"),
            "num_nodes": (config.num_nodes == 1, "Ray places the --num_workers workers on the cluster's nodes"),
            "accelerator": (config.accelerator in ("cpu", "auto"), "--use_gpu gives each worker a GPU"),
            "strategy": (config.strategy in _STRATEGIES, f"Ray's DDP: one of {', '.join(_STRATEGIES)}"),
        }
        for flag, (fine, reason) in refused.items():
            if not fine:
                self._usage_error(f"--{flag} {config[flag]} is not for a Ray Train run: {reason}")
        if "logger" in config and logger_names(config.logger) != ["tensorboard"]:
            self._usage_error("--logger: a Ray Train run logs to TensorBoard only (worker 0 writes the run's logs)")
        # ``instantiate`` is jsonargparse >= 4.49's name for ``instantiate_classes``.
        instantiate = getattr(self.parser, "instantiate", None) or self.parser.instantiate_classes
        self.config_init = instantiate(config)  # builds --network from its class_path and init_args
        length = run_length(config)
        run_callbacks = run_callback_options(config)
        try:
            self.ray_trainer = ray_trainer(
                self.model_class,
                {key: self.config_init[key] for key in self._module_keys},
                trainer_kwargs={"precision": config.precision, "log_every_n_steps": self._log_every_n_steps, **length},
                num_workers=config.num_workers,
                use_gpu=config.use_gpu,
                run_callbacks=run_callbacks,
                callbacks=[EnvStepBudget(config.total_env_steps)] if config.total_env_steps is not None else [],
                root_dir=config.default_root_dir,
                ckpt_path=config.ckpt_path,
                storage_path=config.storage_path,
                name=config.name,
                strategy_kwargs=_STRATEGIES[config.strategy],
                num_threads=config.num_threads,
                address=config.address,
                num_cpus=config.num_cpus,
            )
        except (TypeError, ValueError, ConnectionError) as error:
            self._usage_error(str(error), error)


def main() -> None:
    argv = sys.argv[1:]
    if not argv or argv[0] not in ALGORITHMS:
        names = ", ".join(ALGORITHMS)
        if argv and argv[0] in ("-h", "--help"):
            print(f"usage: train_ray.py ALGORITHM [--help] [options]  (ALGORITHM: {names})\n\n{__doc__}")
            return
        given = f"got {argv[0]!r}" if argv else "got none"
        print(
            f"usage: train_ray.py ALGORITHM [--help] [options]\nerror: ALGORITHM must be one of {names}, {given}",
            file=sys.stderr,
        )
        sys.exit(2)
    cli = RayScriptCLI(argv[0], argv[1:])
    result = cli.ray_trainer.fit()
    if result.checkpoint is not None:
        print(f"  Ray checkpoint:   {result.checkpoint.path}  (resume: the same --storage_path and --name)")


if __name__ == "__main__":
    run_script(main)
