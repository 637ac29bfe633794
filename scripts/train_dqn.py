"""Train DQN with Lightning: ``python scripts/train_dqn.py [--help]``.

The defaults solve CartPole-v1 in seconds on one CPU thread: the run stops once the greedy
policy's mean return over 32 evaluation episodes reaches 475 (``--no_stop_when_solved`` trains
for the whole budget). Every DQNModule hyper-parameter and the usual Trainer flags are options
(``--double_dqn false``, ``--target_update_env_steps null --tau 0.01``, ``--hidden_sizes [64,64]``;
``--config my.yaml`` reads them from a file). Logs, grid videos and checkpoints go to
``lightning_logs/`` (watch them with ``tensorboard --logdir lightning_logs``).
"""

import time

import lightning as L

from rl_lightning import DQNModule
from rl_lightning.scripting import (
    fit_kwargs,
    parse_script_args,
    report,
    run_script,
    trainer_kwargs,
    watch_callbacks,
)


def main() -> None:
    # DQNModule(...) from the command line: a bad value exits with status 2 before training.
    module, args = parse_script_args(DQNModule, __doc__, max_steps=10_000, eval_every=4_000, video_every=40_000)
    trainer = L.Trainer(log_every_n_steps=50, callbacks=watch_callbacks(args, module), **trainer_kwargs(args, module))
    start = time.perf_counter()
    trainer.fit(module, **fit_kwargs(args, module))
    if trainer.is_global_zero:
        print(report(trainer, module, time.perf_counter() - start))


if __name__ == "__main__":
    run_script(main)
