"""The off-policy layer carries a whole algorithm: a minimal one defined here (one-step Q regression)
learns Probe5 and gets the buffer, warm-up, clock, evaluation and checkpoints from the layer."""

import lightning as L
import pytest
import torch
import torch.nn.functional as F

from rl_lightning import OffPolicyModule
from rl_lightning.callbacks import Evaluation
from rl_lightning.export import GreedyPolicy
from rl_lightning.nets import QNetwork


class OneStepQ(OffPolicyModule):  # the whole algorithm: 41 lines, 16 of them the layer's settings by name
    """Probe5's episodes are one step: Q(s, a) regresses on the reward; the policy is argmax Q."""

    action_kinds = ("discrete",)

    def __init__(self, env_id: str = "Probe5-v0", num_envs: int = 4, seed: int = 0):
        super().__init__(
            env_id=env_id,
            num_envs=num_envs,
            seed=seed,
            env_backend="auto",
            env_kwargs=None,
            buffer_size=400,
            batch_size=32,
            learning_starts=32,
            train_freq=1,  # 1 env step per 2 updates
            gradient_steps=2,
            steps_per_epoch=10,
            gamma=0.0,
            n_step=1,
            checkpoint_buffer=True,
        )
        self.save_hyperparameters()
        self.q_network = QNetwork(self.observation_space, self.action_space, (16,))

    def explore(self, obs, generator):
        return torch.randint(0, 2, obs.shape[:1], generator=generator, device=obs.device)

    def policy_actions(self, obs, greedy):
        return self.q_network.mode(obs)

    def greedy_policy(self):
        return GreedyPolicy(self.q_network)

    def update_loss(self, batch):
        q_values = self.q_network(batch.obs).gather(1, batch.actions.unsqueeze(1)).squeeze(1)
        if self.should_log():
            self.log_charts()
        return F.mse_loss(q_values, batch.rewards)

    def configure_optimizers(self):
        return torch.optim.Adam(self.q_network.parameters(), lr=1e-2)


@pytest.mark.learning
def test_a_minimal_off_policy_algorithm_learns_probe5_and_gets_the_rest_from_the_layer(tmp_path):
    """Greedy return 1.0 over 32 episodes after 200 updates; Q(0) = [1, -1], Q(1) = [-1, 1] within 0.05;
    the layer counted 32 warm-up env steps and 4 env steps per 2 updates, and its checkpoint resumes."""
    module = OneStepQ()
    evaluation = Evaluation(every_n_env_steps=10**9, num_eval_episodes=32)
    trainer = L.Trainer(
        max_steps=200, default_root_dir=tmp_path, logger=False, enable_progress_bar=False, callbacks=[evaluation]
    )
    trainer.fit(module)
    assert module.env_steps == module.planned_env_steps(200) == 32 + 100 * 4
    assert evaluation.last_metrics["eval/episodic_return"] == 1.0
    with torch.no_grad():
        q_values = module.q_network(torch.tensor([[0.0], [1.0]]))
    torch.testing.assert_close(q_values, torch.tensor([[1.0, -1.0], [-1.0, 1.0]]), atol=0.05, rtol=0)
    resumed = OneStepQ()
    L.Trainer(max_steps=210, default_root_dir=tmp_path, logger=False, enable_progress_bar=False).fit(
        resumed, ckpt_path=trainer.checkpoint_callback.best_model_path
    )
    assert resumed.env_steps == 32 + 105 * 4 and resumed.source.buffer.size == 400
