"""Train SAC with Lightning: ``python scripts/train_sac.py [--help]``.

The defaults train SACModule's defaults (MuJoCo-sized: (256, 256) networks, lr 3e-4, 5,000 random steps first)
on Pendulum-v1 and stop once the greedy policy's mean return over 32 evaluation episodes reaches the env's
solved return (-200 for Pendulum-v1). ``configs/sac_pendulum.yaml`` holds settings tuned for time to solve,
for ``rl-lightning fit``. Every SACModule hyper-parameter and the usual Trainer flags are options
(``--env_id HalfCheetah-v5 --total_env_steps 100000``, the ``mujoco`` extra). Logs, grid videos and
checkpoints go to ``lightning_logs/SAC-<env id>/``.
"""

from rl_lightning import SACModule
from rl_lightning.cli import ScriptCLI
from rl_lightning.scripting import run_script


def main() -> None:
    # SACModule(...) and a Trainer from the command line: a bad value exits with status 2 before training.
    cli = ScriptCLI(
        SACModule,
        __doc__,
        max_steps=20_000,
        eval_every_n_env_steps=2_000,
        video_every_n_env_steps=50_000,
        log_every_n_steps=100,
    )
    cli.trainer.fit(cli.model, ckpt_path=cli.ckpt_path)


if __name__ == "__main__":
    run_script(main)
