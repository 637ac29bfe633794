"""StopWhenSolved: a run is solved only when the evaluation's return reaches the threshold (equal counts) AND a
confirmation on fresh episodes reaches it too; a policy that fits the evaluation's fixed start states trains on."""

from types import SimpleNamespace

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import EarlyStopping
from lightning.pytorch.callbacks.early_stopping import EarlyStoppingReason

from rl_lightning import VPGModule, make_envs
from rl_lightning.callbacks import Evaluation
from rl_lightning.callbacks.evaluation import StopWhenSolved
from tests.fake_module import FakeModule

EVAL_SEED = 123
EPISODES = 16


class MemorizingModule(FakeModule):
    """Probe5 (+1 when the action equals the obs, else -1) with a greedy policy that learnt the answers to the
    evaluation's fixed start states by heart: it scores 1 there and about 0 on any other episodes."""

    def __init__(self, env_steps: int = 1_000, knows_every_obs: bool = False):
        super().__init__(env_steps=env_steps)
        self.hparams.env_id = "Probe5-v0"
        self.training = True
        self.logged: dict[str, float] = {}
        first_obs, _ = make_envs("Probe5-v0", EPISODES, seed=EVAL_SEED).reset(seed=EVAL_SEED)
        self.answers = first_obs[:, 0].long()
        self.knows_every_obs = knows_every_obs

    def act(self, obs, greedy=False):
        if self.knows_every_obs:
            return obs[:, 0].long()
        return self.answers.repeat(obs.shape[0] // EPISODES + 1)[: obs.shape[0]]

    def eval(self):
        self.training = False
        return self

    def train(self, mode=True):
        self.training = mode
        return self

    def log(self, name, value, **kwargs):
        self.logged[name] = value


def _trainer(*callbacks):
    return SimpleNamespace(
        callbacks=list(callbacks),
        global_rank=0,
        world_size=1,
        is_global_zero=True,
        received_sigterm=False,
        loggers=[],
        should_stop=False,
        current_epoch=3,
    )


def _evaluated(module, threshold, **stop_options):
    evaluation = Evaluation(every_n_env_steps=1_000, num_eval_episodes=EPISODES, seed=EVAL_SEED)
    stopper = StopWhenSolved(threshold, **stop_options)
    trainer = _trainer(evaluation, stopper)
    stopper.on_train_start(trainer, module)
    assert evaluation.evaluate(trainer, module)["eval/episodic_return"] == 1.0  # the fixed start states
    return evaluation, stopper, trainer


def test_a_policy_that_passes_on_the_fixed_start_states_only_is_not_solved():
    module = MemorizingModule()
    evaluation, stopper, trainer = _evaluated(module, 0.9)
    stopper.on_train_epoch_end(trainer, module)
    assert not trainer.should_stop and stopper.solved_at is None
    assert stopper.stopping_reason == EarlyStoppingReason.NOT_STOPPED
    [(env_steps, confirmed)] = evaluation.confirmations
    assert env_steps == 1_000 and confirmed < 0.5  # 32 fresh episodes: about half its answers are wrong
    mean, std, episodes = evaluation.last_confirmation
    assert mean == confirmed and episodes == 2 * EPISODES and 0.8 < std <= 1.0  # returns of +-1
    lower = confirmed - 2 * std / episodes**0.5
    assert module.logged == pytest.approx({"eval/confirmed_return": confirmed, "eval/confirmed_lower_bound": lower})
    # The same evaluation is not checked (nor confirmed) again at the next epoch's end.
    stopper.on_train_epoch_end(trainer, module)
    assert len(evaluation.confirmations) == 1 and not trainer.should_stop
    # Nor at the end of training, where no new evaluation ran.
    stopper.on_train_end(trainer, module)
    assert len(evaluation.confirmations) == 1 and stopper.solved_at is None


def test_a_policy_that_holds_on_fresh_episodes_is_solved_and_stops():
    module = MemorizingModule(knows_every_obs=True)
    evaluation, stopper, trainer = _evaluated(module, 1.0)  # equal to the best return: that counts
    stopper.on_train_epoch_end(trainer, module)
    assert trainer.should_stop and stopper.solved_at == 1_000 and stopper.stopped_epoch == 3
    assert stopper.stopping_reason == EarlyStoppingReason.STOPPING_THRESHOLD
    assert module.logged == {"eval/confirmed_return": 1.0, "eval/confirmed_lower_bound": 1.0}
    assert evaluation.confirmations == [(1_000, 1.0)] and evaluation.last_confirmation == (1.0, 0.0, 32)
    assert stopper.stopping_reason_message == (
        "solved: eval/episodic_return 1 and eval/confirmed_return 1 (32 fresh episodes) >= 1 at env step 1,000"
    )


class SpreadModule(MemorizingModule):
    """Right on the evaluation's start states; on fresh episodes wrong on every fourth copy: returns of +1 and -1
    with mean 0.5 and spread sqrt(0.75)."""

    def __init__(self):
        super().__init__(knows_every_obs=True)

    def act(self, obs, greedy=False):
        right = obs[:, 0].long()
        if len(obs) == EPISODES:
            return right
        wrong = torch.arange(len(obs)) % 4 == 0
        return torch.where(wrong, 1 - right, right)


@pytest.mark.parametrize("num_standard_errors", [0.0, 2.0, 6.0])
def test_the_confirmations_mean_less_its_standard_errors_must_reach_the_threshold(num_standard_errors):
    """A mean that reaches the threshold by its noise alone is not solved: the lower bound must."""
    module = SpreadModule()
    evaluation, stopper, trainer = _evaluated(module, 0.0, num_standard_errors=num_standard_errors)
    stopper.on_train_epoch_end(trainer, module)
    mean, std, episodes = evaluation.last_confirmation
    standard_error = std / episodes**0.5
    assert mean == 0.5 and std == pytest.approx(0.75**0.5) and episodes == 32
    lower = mean - num_standard_errors * standard_error
    assert module.logged == pytest.approx({"eval/confirmed_return": mean, "eval/confirmed_lower_bound": lower})
    assert trainer.should_stop == (lower >= 0.0) == (num_standard_errors < 6.0)
    if trainer.should_stop:
        assert stopper.solved_at == 1_000
        assert "(32 fresh episodes) >= 0 at env step 1,000" in stopper.stopping_reason_message
    if num_standard_errors == 2.0:
        assert f"- 2 x {standard_error:.3g} (standard error) = {lower:g}" in stopper.stopping_reason_message


@pytest.mark.parametrize("holds_on_episodes", [32, 4])
def test_with_holds_on_episodes_the_bound_is_for_a_later_check_of_that_many_episodes(holds_on_episodes):
    """The standard error of a later m-episode mean less the confirmation's n-episode mean: std sqrt(1/n + 1/m)."""
    module = SpreadModule()
    evaluation, stopper, trainer = _evaluated(module, 0.0, holds_on_episodes=holds_on_episodes)
    stopper.on_train_epoch_end(trainer, module)
    mean, std, episodes = evaluation.last_confirmation
    error = std * (1 / episodes + 1 / holds_on_episodes) ** 0.5
    lower = mean - 2 * error
    assert lower == pytest.approx(0.5 - 2 * 0.75**0.5 * (1 / 32 + 1 / holds_on_episodes) ** 0.5)
    assert module.logged["eval/confirmed_lower_bound"] == pytest.approx(lower)
    assert trainer.should_stop == (holds_on_episodes == 32)  # 0.067 >= 0; 4 episodes: -0.42 < 0
    if trainer.should_stop:
        assert f"- 2 x {error:.3g} (standard error for a later 32-episode mean) = {lower:g}" in (
            stopper.stopping_reason_message
        )


def test_no_confirmation_below_the_threshold():
    module = MemorizingModule(knows_every_obs=True)
    evaluation, stopper, trainer = _evaluated(module, 1.01)
    stopper.on_train_epoch_end(trainer, module)
    assert not trainer.should_stop and evaluation.confirmations == [] and module.logged == {}


def test_the_final_evaluation_is_confirmed_at_the_end_of_training():
    module = MemorizingModule(knows_every_obs=True)
    _evaluation, stopper, trainer = _evaluated(module, 1.0)
    logged = []
    trainer.loggers = [SimpleNamespace(log_metrics=lambda metrics, step: logged.append((metrics, step)))]
    stopper.on_train_end(trainer, module)  # the evaluation Evaluation.on_train_end ran, before this callback
    assert stopper.solved_at == 1_000
    assert logged == [({"eval/confirmed_return": 1.0, "eval/confirmed_lower_bound": 1.0}, 1_000)]


def test_each_confirmation_plays_start_states_no_evaluation_had():
    module = MemorizingModule()
    evaluation, _stopper, trainer = _evaluated(module, 0.9, num_confirm_episodes=EPISODES)
    seeds = []
    make = module.make_envs
    module.make_envs = lambda num_envs, seed, render=False: seeds.append((num_envs, seed)) or make(num_envs, seed)
    evaluation.confirm(trainer, module)
    evaluation.confirm(trainer, module, num_episodes=EPISODES)
    stride = Evaluation.CONFIRM_SEED_STRIDE
    assert seeds == [(2 * EPISODES, EVAL_SEED + stride), (EPISODES, EVAL_SEED + 2 * stride)]
    assert [steps for steps, _ in evaluation.confirmations] == [1_000, 1_000]


def test_confirmation_episodes_default_to_twice_the_evaluation_at_least_20():
    module = MemorizingModule(knows_every_obs=True)
    trainer = _trainer()
    seen = []
    make = module.make_envs
    module.make_envs = lambda num_envs, seed, render=False: seen.append(num_envs) or make(num_envs, seed)
    Evaluation(num_eval_episodes=4).confirm(trainer, module)
    Evaluation(num_eval_episodes=16).confirm(trainer, module)
    assert seen == [20, 32]


def test_it_needs_an_evaluation_before_it():
    module = MemorizingModule()
    stopper = StopWhenSolved(1.0)
    with pytest.raises(ValueError, match="StopWhenSolved needs an Evaluation callback"):
        stopper.on_train_start(_trainer(stopper), module)
    with pytest.raises(ValueError, match="StopWhenSolved must come after the run's Evaluation"):
        stopper.on_train_start(_trainer(stopper, Evaluation()), module)


def test_bad_arguments_are_refused():
    with pytest.raises(TypeError, match="stopping_threshold must be a float"):
        StopWhenSolved("475")
    with pytest.raises(ValueError, match="num_confirm_episodes must be >= 1"):
        StopWhenSolved(475.0, num_confirm_episodes=0)
    with pytest.raises(ValueError, match=r"num_standard_errors must be a finite number in \[0.0, inf\], got -1.0"):
        StopWhenSolved(475.0, num_standard_errors=-1.0)
    with pytest.raises(TypeError, match="num_standard_errors must be a float"):
        StopWhenSolved(475.0, num_standard_errors="2")
    with pytest.raises(ValueError, match="holds_on_episodes must be >= 1"):
        StopWhenSolved(475.0, holds_on_episodes=0)
    with pytest.raises(ValueError, match="num_episodes must be >= 1"):
        Evaluation().confirm(_trainer(), MemorizingModule(), num_episodes=0)


def test_state_survives_a_checkpoint():
    module = MemorizingModule(knows_every_obs=True)
    evaluation, stopper, trainer = _evaluated(module, 1.0)
    stopper.on_train_epoch_end(trainer, module)
    restored_stopper, restored_evaluation = StopWhenSolved(1.0), Evaluation()
    restored_stopper.load_state_dict(stopper.state_dict())
    restored_evaluation.load_state_dict(evaluation.state_dict())
    assert restored_stopper.solved_at == 1_000 and restored_evaluation.confirmations == [(1_000, 1.0)]
    assert restored_stopper.stopping_reason == EarlyStoppingReason.STOPPING_THRESHOLD
    old = {key: value for key, value in evaluation.state_dict().items() if key != "confirmations"}
    restored_evaluation.load_state_dict(old)  # a checkpoint from before confirmations
    assert restored_evaluation.confirmations == []


def test_a_run_whose_best_return_equals_the_threshold_stops_at_its_first_evaluation():
    """Probe4's best return is 1 (action 1): StopWhenSolved(1.0) stops once the policy takes it, where
    Lightning's EarlyStopping(stopping_threshold=1.0) needs more than 1 and trains the whole budget."""

    def fit(stopper):
        module = VPGModule(env_id="Probe4-v0", num_envs=8, num_steps_per_rollout=16, lr=0.05, seed=0)
        evaluation = Evaluation(every_n_env_steps=128, num_eval_episodes=8)
        trainer = L.Trainer(
            max_steps=60,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            callbacks=[evaluation, stopper],
        )
        trainer.fit(module)
        return module, trainer, evaluation

    torch.manual_seed(0)
    module, trainer, evaluation = fit(StopWhenSolved(1.0))
    solved_at = next(steps for steps, mean in evaluation.history if mean >= 1.0)
    assert trainer.callbacks[1].solved_at == solved_at == module.env_steps < 60 * 128
    assert evaluation.confirmations == [(solved_at, 1.0)]
    assert trainer.callback_metrics["eval/confirmed_return"].item() == 1.0
    module, trainer, evaluation = fit(
        EarlyStopping(monitor="eval/episodic_return", stopping_threshold=1.0, mode="max", patience=10**9)
    )
    assert module.env_steps == 60 * 128 and trainer.global_step == 60  # Lightning's: strictly more than 1


class TwoSeeds(MemorizingModule):
    """A num_seeds=2 module as the callbacks see it: itself (seed 0) and ``other`` (seed 1)."""

    def __init__(self, other: MemorizingModule, **kwargs):
        super().__init__(**kwargs)
        self.other = other
        self._seed_scores: dict[str, list[float]] = {}

    def seed_modules(self):
        return [self, self.other]


def test_with_several_seeds_the_run_is_solved_only_when_every_seed_is_confirmed():
    """Both seeds score 1 on the evaluation's fixed start states (eval/episodic_return_min reaches the threshold);
    each is then confirmed on fresh episodes, and a seed that only memorised them keeps the run going."""
    one_memorised = TwoSeeds(MemorizingModule(), knows_every_obs=True)
    evaluation, stopper, trainer = _evaluated(one_memorised, 0.9)
    assert evaluation.last_metrics["eval/episodic_return_min"] == 1.0
    assert evaluation.last_metrics["eval_per_seed/episodic_return/seed_1"] == 1.0
    stopper.on_train_epoch_end(trainer, one_memorised)
    assert not trainer.should_stop and stopper.solved_at is None
    assert len(evaluation.confirmations) == 2  # every seed confirmed: seed 1 scored ~0 on fresh episodes
    assert evaluation.confirmations[0][1] == 1.0 and evaluation.confirmations[1][1] < 0.5

    both_solve = TwoSeeds(MemorizingModule(knows_every_obs=True), knows_every_obs=True)
    evaluation, stopper, trainer = _evaluated(both_solve, 0.9)
    stopper.on_train_epoch_end(trainer, both_solve)
    assert trainer.should_stop and stopper.solved_at == 1_000
    assert [confirmed for _, confirmed in evaluation.confirmations] == [1.0, 1.0]
