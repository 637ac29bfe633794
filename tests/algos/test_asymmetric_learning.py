"""A privileged critic learns faster: PPO on ``PrivilegedBandit-v0``, whose every reward carries an episode's hidden
offset that only the ``"state"`` key shows. With ``critic_keys=["state"]`` the critic removes the offset from the
advantages; with the actor's keys it cannot, and the advantages carry it as noise."""

from __future__ import annotations

import lightning as L
import pytest
import torch

from rl_lightning import PPOModule
from rl_lightning.envs.privileged import STATE_KEY
from rl_lightning.envs.spaces import OBSERVATION_KEY
from tests.quiet_trainer import quiet_trainer

#: Seeds 11-18 (the env's and the settings' were chosen on seeds 1-10, 21-28, 31-38 and 41-48).
SEED, NUM_SEEDS = 11, 8
SETTINGS = dict(num_envs=16, num_steps_per_rollout=32, ent_coef=0.01, actor_keys=[OBSERVATION_KEY])
#: Env steps per seed the run may take (40 rollouts); a seed that never solves counts as this.
BUDGET = 20_480
#: Each seed's greedy policy must pick the cued action for every cue and time within this with the privileged
#: critic (measured on seeds 21-28, 31-38, 41-48: 3,584-9,216).
PRIVILEGED_BUDGET = 16_384
#: The privileged critic's seeds together must take at most this fraction of the env steps the others' take
#: (measured on those seeds, 8 at a time: 0.35, 0.55, 0.41; without a difference it would be about 1).
FASTER = 0.75


class FirstSolve(L.Callback):
    """The env steps at which each seed's greedy policy first picks the cued action for every cue and time; stops
    the run once every seed has."""

    def __init__(self, num_seeds: int):
        self.first: list[int | None] = [None] * num_seeds

    def on_train_batch_end(self, trainer: L.Trainer, module: PPOModule, *args) -> None:
        cues = torch.eye(8).repeat_interleave(4, 0)
        time = torch.arange(4).float().div(4).repeat(8).unsqueeze(1)
        obs = {OBSERVATION_KEY: torch.cat([cues, time], dim=1)}
        for index, first in enumerate(self.first):
            if first is None and bool((module.act(obs, greedy=True, seed_index=index) == cues.argmax(1)).all()):
                self.first[index] = module.env_steps  # one seed's: the seeds step in lock-step
        trainer.should_stop = all(first is not None for first in self.first)


def _first_solves(critic_key: str) -> list[int]:
    module = PPOModule("PrivilegedBandit-v0", seed=SEED, num_seeds=NUM_SEEDS, critic_keys=[critic_key], **SETTINGS)
    solves = FirstSolve(NUM_SEEDS)
    trainer = quiet_trainer(max_steps=BUDGET // (16 * 32) * 16, callbacks=[solves])
    trainer.fit(module)
    return [BUDGET if first is None else first for first in solves.first]


@pytest.mark.learning
def test_a_critic_of_the_privileged_state_learns_faster_than_one_of_the_actor_keys():
    torch.set_num_threads(1)
    privileged, unprivileged = _first_solves(STATE_KEY), _first_solves(OBSERVATION_KEY)
    print(f"first solves, privileged critic {privileged}, actor's keys {unprivileged}")
    assert max(privileged) <= PRIVILEGED_BUDGET, privileged
    assert sum(privileged) <= FASTER * sum(unprivileged), (privileged, unprivileged)
