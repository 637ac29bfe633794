"""Train DQN with Lightning: ``python scripts/train_dqn.py [--help]``.

The defaults solve CartPole-v1 in seconds on one CPU thread: the run stops once the greedy
policy's mean return over 32 evaluation episodes reaches 475 (``--no_stop_when_solved`` trains
for the whole budget). Every DQNModule hyper-parameter and the usual Trainer flags are options
(``--double_dqn false``, ``--target_update_env_steps null --tau 0.01``, ``--hidden_sizes [64,64]``;
``--config my.yaml`` reads them from a file). Logs, grid videos and checkpoints go to
``lightning_logs/`` (watch them with ``tensorboard --logdir lightning_logs``).
"""

from rl_lightning import DQNModule
from rl_lightning.cli import ScriptCLI
from rl_lightning.scripting import run_script


def main() -> None:
    # DQNModule(...) and a Trainer from the command line: a bad value exits with status 2 before training.
    cli = ScriptCLI(
        DQNModule,
        __doc__,
        max_steps=10_000,
        eval_every_n_env_steps=4_000,
        video_every_n_env_steps=40_000,
        log_every_n_steps=50,
    )
    cli.trainer.fit(cli.model, ckpt_path=cli.ckpt_path)


if __name__ == "__main__":
    run_script(main)
