"""A stand-in for a LightningModule that implements the callback protocols
(rl_lightning/protocols.py) with plain attributes, to drive callbacks by hand."""

from types import SimpleNamespace

import torch


class FakeModule:
    """``env_steps`` and ``epsilon`` are plain attributes; ``planned_env_steps`` is
    ``optimizer_steps * env_steps_per_training_step``; ``target_network_pairs`` returns
    ``(target_network, q_network)`` when both are given."""

    def __init__(self, env_steps=0, env_steps_per_training_step=10, epsilon=None, q_network=None, target_network=None):
        self.hparams = SimpleNamespace(env_id="Probe1-v0")
        self.device = torch.device("cpu")
        self.env_steps = env_steps
        self.env_steps_before_batch = env_steps
        self.env_steps_per_training_step = env_steps_per_training_step
        self.epsilon = epsilon
        self.q_network = q_network
        self.target_network = target_network

    def planned_env_steps(self, optimizer_steps):
        return optimizer_steps * self.env_steps_per_training_step

    def act(self, obs, greedy=False):
        return torch.zeros(obs.shape[0], dtype=torch.int64)

    def greedy_actor(self):
        return lambda obs, episode_start=None: self.act(obs, greedy=True)

    def make_envs(self, num_envs, seed, render=False):
        from rl_lightning import make_envs

        return make_envs(self.hparams.env_id, num_envs, seed=seed)  # a native probe: it draws, render or not

    def latest_rollout(self):
        return None

    def target_network_pairs(self):
        return [(self.target_network, self.q_network)]
