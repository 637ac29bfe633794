"""``python -m rl_lightning``: the same command as ``rl-lightning`` (see :mod:`rl_lightning.cli`)."""

from rl_lightning.cli import main

if __name__ == "__main__":
    main()
