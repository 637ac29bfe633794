"""Train VPG (REINFORCE) with Lightning: ``python scripts/train_vpg.py [--help]``.

The defaults solve CartPole-v1 in a few seconds on one CPU thread. Every VPGModule
hyper-parameter and the usual Trainer flags are options; logs and checkpoints go to
``lightning_logs/`` (watch with ``tensorboard --logdir lightning_logs``).
"""

import argparse
import time

import lightning as L
import torch

from rl_lightning import VPGModule
from rl_lightning.scripting import add_module_args, add_trainer_args, module_kwargs, trainer_kwargs


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_module_args(parser, VPGModule)
    add_trainer_args(parser, max_steps=50)
    args = parser.parse_args()
    torch.set_num_threads(args.num_threads)

    module = VPGModule(**module_kwargs(args, VPGModule))
    trainer = L.Trainer(log_every_n_steps=1, **trainer_kwargs(args))
    start = time.perf_counter()
    trainer.fit(module)
    seconds = time.perf_counter() - start

    if trainer.is_global_zero:
        metrics = trainer.callback_metrics
        ret = metrics.get("charts/episodic_return")
        ret_text = f"{ret.item():.1f}" if ret is not None else "n/a"
        print(
            f"done: {module.env_steps:,} env steps in {seconds:.1f} s, last rollout's mean return {ret_text}\n"
            f"  TensorBoard logs: {trainer.logger.log_dir}  (tensorboard --logdir {trainer.logger.save_dir})\n"
            f"  checkpoint:       {trainer.checkpoint_callback.best_model_path}"
        )


if __name__ == "__main__":
    main()
