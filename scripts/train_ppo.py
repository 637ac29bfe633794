"""Train PPO with Lightning: ``python scripts/train_ppo.py [--help]``.

The defaults solve CartPole-v1 in seconds on one CPU thread: the run stops once the greedy
policy's mean return over 32 evaluation episodes reaches 475 (``--no_stop_when_solved`` trains
for the whole budget). Every PPOModule hyper-parameter and the usual Trainer flags are options
(``--env_id Acrobot-v1 --solved_return -100 --hidden_sizes [64,64] --target_kl null``).
``configs/ppo_*.yaml`` hold tuned settings for Acrobot-v1 and Pendulum-v1, for ``rl-lightning fit``.
Logs, grid videos and checkpoints go to ``lightning_logs/``.
"""

from rl_lightning import PPOModule
from rl_lightning.cli import ScriptCLI
from rl_lightning.scripting import run_script


def main() -> None:
    # PPOModule(...) and a Trainer from the command line: a bad value exits with status 2 before training.
    cli = ScriptCLI(
        PPOModule,
        __doc__,
        max_steps=3_200,
        eval_every_n_env_steps=2_048,
        video_every_n_env_steps=50_000,
        log_every_n_steps=1,
    )
    cli.trainer.fit(cli.model, ckpt_path=cli.ckpt_path)


if __name__ == "__main__":
    run_script(main)
