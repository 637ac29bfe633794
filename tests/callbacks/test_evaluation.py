import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger

from rl_lightning import VPGModule
from rl_lightning.callbacks.evaluation import Evaluation, evaluate_policy
from rl_lightning.envs import make_envs


def test_evaluate_policy_on_probe3_counts_whole_episodes():
    # Probe3: two steps, rewards 0 then 1 -> every episode returns 1 in 2 steps.
    result = evaluate_policy(lambda obs: torch.zeros(obs.shape[0], dtype=torch.long), "Probe3-v0", 5, seed=0)
    assert result.returns.tolist() == [1.0] * 5
    assert result.lengths.tolist() == [2.0] * 5


def test_evaluate_policy_equals_a_hand_run_of_the_greedy_policy():
    """Probe5 rewards +1 when action == obs: the greedy policy 'action = obs' scores 1, the
    policy 'always 0' scores +1 exactly on the envs whose obs is 0."""

    def matching(obs):
        return obs[:, 0].long()

    assert evaluate_policy(matching, "Probe5-v0", 64, seed=1).returns.tolist() == [1.0] * 64
    envs = make_envs("Probe5-v0", 64, seed=1)
    first_obs, _ = envs.reset()
    expected = torch.where(first_obs[:, 0] == 0, 1.0, -1.0)
    result = evaluate_policy(lambda obs: torch.zeros(obs.shape[0], dtype=torch.long), "Probe5-v0", 64, seed=1)
    torch.testing.assert_close(result.returns, expected)


def test_evaluate_policy_cartpole_matches_manual_loop():
    def act(obs):  # a simple balancing controller: push towards the pole's lean
        return (obs[:, 2] + 0.5 * obs[:, 3] > 0).long()

    result = evaluate_policy(act, "CartPole-v1", 8, seed=3)
    envs = make_envs("CartPole-v1", 8, seed=3)
    obs, _ = envs.reset()
    returns, alive = torch.zeros(8), torch.ones(8, dtype=torch.bool)
    for _ in range(500):
        obs, reward, terminated, truncated, _ = envs.step(act(obs))
        returns += reward * alive
        alive &= ~(terminated | truncated)
    torch.testing.assert_close(result.returns, returns)
    assert result.returns.max().item() <= 500.0
    torch.testing.assert_close(result.lengths, returns)


def test_evaluation_callback_logs_metrics(tmp_path):
    evaluation = Evaluation(every_n_env_steps=640, num_eval_episodes=4)
    module = VPGModule(env_id="Probe4-v0", num_envs=4, num_steps_per_rollout=80, seed=0)
    logger = TensorBoardLogger(tmp_path, name="eval")
    trainer = L.Trainer(
        max_steps=5, logger=logger, callbacks=[evaluation], enable_progress_bar=False, enable_checkpointing=False
    )
    trainer.fit(module)
    # Evaluated at the end of epochs 0 (320 steps), 2 (960) and 4 (1600: the final one).
    assert [steps for steps, _ in evaluation.history] == [320, 960, 1600]
    assert set(evaluation.last_metrics) == {"eval/episodic_return", "eval/episodic_return_std", "eval/episodic_length"}
    assert evaluation.last_metrics["eval/episodic_length"] == 1.0
    assert trainer.callback_metrics["eval/episodic_return"].item() in (-1.0, 1.0)


@pytest.mark.learning
def test_early_stopping_on_eval_return_ends_a_solved_cartpole_run(tmp_path):
    """EarlyStopping(monitor='eval/episodic_return', stopping_threshold=475) stops VPG on
    CartPole once the greedy policy's mean return over 32 episodes reaches 475."""
    evaluation = Evaluation(every_n_env_steps=30_000, num_eval_episodes=32)
    stopper = EarlyStopping(monitor="eval/episodic_return", stopping_threshold=475.0, mode="max", patience=1000)
    best = ModelCheckpoint(monitor="eval/episodic_return", mode="max")
    trainer = L.Trainer(
        max_steps=60,
        logger=False,
        default_root_dir=tmp_path,
        callbacks=[evaluation, stopper, best],
        enable_progress_bar=False,
    )
    trainer.fit(VPGModule(seed=1))
    assert trainer.global_step < 60
    assert evaluation.history[-1][1] >= 475.0
    assert trainer.should_stop
    assert best.best_model_score.item() >= 475.0


def test_evaluation_rejects_bad_arguments():
    with pytest.raises(ValueError, match="every_n_env_steps"):
        Evaluation(every_n_env_steps=0)
    with pytest.raises(ValueError, match="num_eval_episodes"):
        Evaluation(num_eval_episodes=0)


def test_evaluate_policy_is_a_top_level_name_and_gives_mean_and_std_as_sb3_does():
    import rl_lightning
    from rl_lightning import EvalResult, evaluate_policy

    assert evaluate_policy is rl_lightning.callbacks.evaluate_policy
    # Probe4: action 1 earns +1, action 0 earns -1; action = env index mod 2: returns -1, 1, -1, 1
    result = evaluate_policy(lambda obs: torch.arange(obs.shape[0]).remainder(2), "Probe4-v0", 4, seed=0)
    assert isinstance(result, EvalResult) and result.returns.tolist() == [-1.0, 1.0, -1.0, 1.0]
    assert result.mean == 0.0 and result.std == 1.0  # the returns' std over the episodes (numpy's, SB3's)
    returns, lengths = result  # still the per-episode tensors when unpacked
    assert returns is result.returns and lengths.tolist() == [1.0] * 4


def test_a_gymnasium_env_is_reset_once_per_episode_and_seeded_once():
    import gymnasium as gym

    seeds = []

    class CountResets(gym.Wrapper):
        def reset(self, **kwargs):
            seeds.append(kwargs.get("seed"))
            return self.env.reset(**kwargs)

    push_left = lambda obs: torch.zeros(obs.shape[0], dtype=torch.int64)  # noqa: E731
    result = evaluate_policy(push_left, CountResets(gym.make("CartPole-v1")), num_episodes=3, seed=4)
    assert seeds == [4, None, None] and (result.lengths < 20).all()  # no reset after the last one
    seeds.clear()
    with pytest.warns(UserWarning, match="cut at max_episode_steps=5"):
        result = evaluate_policy(push_left, CountResets(gym.make("CartPole-v1")), 3, seed=4, max_episode_steps=5)
    assert seeds == [4, None, None] and result.lengths.tolist() == [5.0] * 3


def _fake_trainer(**overrides):
    from types import SimpleNamespace

    return SimpleNamespace(
        **{"global_rank": 0, "is_global_zero": True, "world_size": 1, "received_sigterm": False, **overrides}
    )


def test_the_eval_envs_are_built_once_and_reseeded_giving_what_fresh_envs_give(monkeypatch):
    from rl_lightning import PPOModule

    module = PPOModule(env_id="CartPole-v1", env_backend="gymnasium", num_envs=2)
    built = []
    make = module.make_envs
    monkeypatch.setattr(module, "make_envs", lambda *args, **kwargs: built.append(args) or make(*args, **kwargs))
    evaluation = Evaluation(num_eval_episodes=4, seed=3)
    first = evaluation.evaluate(_fake_trainer(), module)
    second = evaluation.evaluate(_fake_trainer(), module)
    assert len(built) == 1 and first == second  # kept, and re-seeded the same way
    fresh = evaluate_policy(module, make(4, 3), seed=3)
    assert first["eval/episodic_return"] == pytest.approx(fresh.mean)
    evaluation.teardown(None, module, "fit")
    assert evaluation._envs is None


def test_evaluation_episodes_default_to_the_envs_cost():
    from rl_lightning import PPOModule

    assert Evaluation().episodes(PPOModule(env_id="CartPole-v1", num_envs=2)) == 32  # native: all at once
    assert Evaluation().episodes(PPOModule(env_id="CartPole-v1", env_backend="gymnasium", num_envs=2)) == 10
    assert Evaluation(num_eval_episodes=5).episodes(PPOModule(env_id="CartPole-v1", num_envs=2)) == 5


def test_a_long_evaluation_says_how_far_it_got_and_a_stop_ends_it_unlogged(monkeypatch, capsys):
    from rl_lightning import PPOModule

    module = PPOModule(env_id="Pendulum-v1", num_envs=2)  # 200-step episodes: checked at steps 64, 128, 192
    evaluation = Evaluation(num_eval_episodes=3)
    monkeypatch.setattr(Evaluation, "PROGRESS_EVERY_S", 0.0)
    metrics = evaluation.evaluate(_fake_trainer(), module)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("evaluating: ")]
    assert [line.split(",")[0] for line in lines] == ["evaluating: 0/3 episodes"] * 3
    assert metrics["eval/episodic_length"] == 200.0
    assert evaluation.evaluate(_fake_trainer(received_sigterm=True), module) == {}  # stopped within 64 steps
    assert evaluation.last_metrics == metrics  # the stopped one is not a result
    # under DDP the ranks finish it, to stop at the same step
    assert evaluation.evaluate(_fake_trainer(received_sigterm=True, world_size=2), module) == metrics
