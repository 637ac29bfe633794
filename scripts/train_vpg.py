"""Train VPG (REINFORCE) with Lightning: ``python scripts/train_vpg.py [--help]``.

The defaults solve CartPole-v1 in a few seconds on one CPU thread: the run stops once the
greedy policy's mean return over 32 evaluation episodes reaches 475 (``--no_stop_when_solved``
trains for the whole budget). Every VPGModule hyper-parameter and the usual Trainer flags are
options (``--lr 0.01 --hidden_sizes [64,64] --clip_coef null --use_lr_decay true``; ``--print_config
> my.yaml`` writes them all, ``--config my.yaml`` reads them back). Logs, grid videos and checkpoints
go to ``lightning_logs/`` (watch them with ``tensorboard --logdir lightning_logs``).
"""

import time

import lightning as L

from rl_lightning import VPGModule
from rl_lightning.scripting import (
    fit_kwargs,
    parse_script_args,
    report,
    run_script,
    trainer_kwargs,
    watch_callbacks,
)


def main() -> None:
    # VPGModule(...) from the command line: a bad value exits with status 2 before training.
    module, args = parse_script_args(VPGModule, __doc__, max_steps=50, eval_every=32_000, video_every=100_000)
    trainer = L.Trainer(log_every_n_steps=1, callbacks=watch_callbacks(args, module), **trainer_kwargs(args, module))
    start = time.perf_counter()
    trainer.fit(module, **fit_kwargs(args, module))
    if trainer.is_global_zero:
        print(report(trainer, module, time.perf_counter() - start))


if __name__ == "__main__":
    run_script(main)
