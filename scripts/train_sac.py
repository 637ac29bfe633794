"""Train SAC with Lightning: ``python scripts/train_sac.py [--help]``.

The defaults train SACModule's defaults (MuJoCo-sized: (256, 256) networks, lr 3e-4, 5,000 random steps first)
on Pendulum-v1 and stop once the greedy policy's mean return over 32 evaluation episodes reaches the env's
solved return (-200 for Pendulum-v1). ``configs/sac_pendulum.yaml`` holds settings tuned for time to solve,
for ``rl-lightning fit``. Every SACModule hyper-parameter and the usual Trainer flags are options
(``--env_id HalfCheetah-v5 --total_env_steps 100000``, the ``mujoco`` extra). Logs, grid videos and
checkpoints go to ``lightning_logs/SAC-<env id>/``.
"""

import time

import lightning as L

from rl_lightning import SACModule
from rl_lightning.scripting import (
    fit_kwargs,
    parse_script_args,
    report,
    run_script,
    trainer_kwargs,
    watch_callbacks,
)


def main() -> None:
    # SACModule(...) from the command line: a bad value exits with status 2 before training.
    module, args = parse_script_args(SACModule, __doc__, max_steps=20_000, eval_every=2_000, video_every=50_000)
    trainer = L.Trainer(log_every_n_steps=100, callbacks=watch_callbacks(args, module), **trainer_kwargs(args, module))
    start = time.perf_counter()
    trainer.fit(module, **fit_kwargs(args, module))
    if trainer.is_global_zero:
        print(report(trainer, module, time.perf_counter() - start))


if __name__ == "__main__":
    run_script(main)
