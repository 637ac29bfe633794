"""Train VPG (REINFORCE) with Lightning: ``python scripts/train_vpg.py [--help]``.

The defaults solve CartPole-v1 in a few seconds on one CPU thread: the run stops once the
greedy policy's mean return over 32 evaluation episodes reaches 475 (``--no_stop_when_solved``
trains for the whole budget). Every VPGModule hyper-parameter and the usual Trainer flags are
options. Logs, grid videos and checkpoints go to ``lightning_logs/`` (watch them with
``tensorboard --logdir lightning_logs``).
"""

import argparse
import time

import lightning as L
import torch

from rl_lightning import VPGModule
from rl_lightning.scripting import (
    add_module_args,
    add_trainer_args,
    add_watch_args,
    fit_kwargs,
    module_kwargs,
    report,
    trainer_kwargs,
    watch_callbacks,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_module_args(parser, VPGModule)
    add_trainer_args(parser, max_steps=50)
    add_watch_args(parser, eval_every=32_000, video_every=100_000)
    args = parser.parse_args()
    torch.set_num_threads(args.num_threads)

    module = VPGModule(**module_kwargs(args, VPGModule))
    trainer = L.Trainer(log_every_n_steps=1, callbacks=watch_callbacks(args), **trainer_kwargs(args))
    start = time.perf_counter()
    trainer.fit(module, **fit_kwargs(args))
    if trainer.is_global_zero:
        print(report(trainer, module, time.perf_counter() - start))


if __name__ == "__main__":
    main()
