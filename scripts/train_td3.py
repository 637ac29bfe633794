"""Train TD3 with Lightning: ``python scripts/train_td3.py [--help]``.

The defaults train TD3Module's defaults (MuJoCo-sized: (256, 256) networks, lr 3e-4, 5,000 random steps first)
on Pendulum-v1 and stop once the greedy policy's mean return over 32 evaluation episodes reaches the env's
solved return (-200 for Pendulum-v1). ``configs/td3_pendulum.yaml`` holds settings tuned for time to solve,
for ``rl-lightning fit``. Every TD3Module hyper-parameter and the usual Trainer flags are options
(``--env_id HalfCheetah-v5 --total_env_steps 100000``, the ``mujoco`` extra). Logs, grid videos and
checkpoints go to ``lightning_logs/TD3-<env id>/``.
"""

from rl_lightning import TD3Module
from rl_lightning.cli import ScriptCLI
from rl_lightning.scripting import run_script


def main() -> None:
    # TD3Module(...) and a Trainer from the command line: a bad value exits with status 2 before training.
    cli = ScriptCLI(
        TD3Module,
        __doc__,
        max_steps=20_000,
        eval_every_n_env_steps=2_000,
        video_every_n_env_steps=50_000,
        log_every_n_steps=100,
    )
    cli.trainer.fit(cli.model, ckpt_path=cli.ckpt_path)


if __name__ == "__main__":
    run_script(main)
