"""Train PPO with Lightning: ``python scripts/train_ppo.py [--help]``.

The defaults solve CartPole-v1 in seconds on one CPU thread: the run stops once the greedy
policy's mean return over 32 evaluation episodes reaches 475 (``--no_stop_when_solved`` trains
for the whole budget). Every PPOModule hyper-parameter and the usual Trainer flags are options
(``--env_id Acrobot-v1 --solved_return -100 --hidden_sizes [64,64] --target_kl null``).
``configs/ppo_*.yaml`` hold tuned settings for Acrobot-v1 and Pendulum-v1, for ``rl-lightning fit``.
Logs, grid videos and checkpoints go to ``lightning_logs/``.
"""

import time

import lightning as L

from rl_lightning import PPOModule
from rl_lightning.scripting import (
    fit_kwargs,
    parse_script_args,
    report,
    run_script,
    trainer_kwargs,
    watch_callbacks,
)


def main() -> None:
    # PPOModule(...) from the command line: a bad value exits with status 2 before training.
    module, args = parse_script_args(PPOModule, __doc__, max_steps=3_200, eval_every=2_048, video_every=50_000)
    trainer = L.Trainer(log_every_n_steps=1, callbacks=watch_callbacks(args, module), **trainer_kwargs(args, module))
    start = time.perf_counter()
    trainer.fit(module, **fit_kwargs(args, module))
    if trainer.is_global_zero:
        print(report(trainer, module, time.perf_counter() - start))


if __name__ == "__main__":
    run_script(main)
