"""Train VPG (REINFORCE) with Lightning: ``python scripts/train_vpg.py [--help]``.

The defaults solve CartPole-v1 in a few seconds on one CPU thread: the run stops once the
greedy policy's mean return over 32 evaluation episodes reaches 475 (``--no_stop_when_solved``
trains for the whole budget). Every VPGModule hyper-parameter and the usual Trainer flags are
options (``--lr 0.01 --hidden_sizes [64,64] --iw_clip null --anneal_lr true``; ``--print_config
> my.yaml`` writes them all, ``--config my.yaml`` reads them back). Logs, grid videos and checkpoints
go to ``lightning_logs/`` (watch them with ``tensorboard --logdir lightning_logs``).
"""

from rl_lightning import VPGModule
from rl_lightning.cli import ScriptCLI
from rl_lightning.scripting import run_script


def main() -> None:
    # VPGModule(...) and a Trainer from the command line: a bad value exits with status 2 before training.
    cli = ScriptCLI(
        VPGModule,
        __doc__,
        max_steps=50,
        eval_every_n_env_steps=32_000,
        video_every_n_env_steps=100_000,
        log_every_n_steps=1,
    )
    cli.trainer.fit(cli.model, ckpt_path=cli.ckpt_path)


if __name__ == "__main__":
    run_script(main)
