"""Time to a greedy-evaluation threshold on CartPoleNoVel-v1 (CartPole-v1 observed as (x, theta)
only: memory needed): rl_lightning's PPOModule with an LSTM core (configs/ppo_cartpole_novel.yaml)
next to sb3-contrib's RecurrentPPO with its RL-Zoo hyper-parameters, in one run.

    python benchmarks/bench_recurrent.py [--seeds 5] [--sb3_seeds 3] [--out benchmarks/results/recurrent.md]

One protocol for both: after each rollout and its updates, once another 4,096 env steps have
passed, a greedy evaluation of 32 episodes on a separate native torch ``CartPoleNoVel-v1`` with a
fixed seed (``rl_lightning.callbacks.evaluate_policy``: the same start states for both), the
recurrent state carried from step to step of the evaluation; "solved" = the first evaluation whose
mean return reaches 475. Times count training only (evaluations excluded: a pausable clock), on one
CPU thread; wall and process CPU seconds are both reported because other jobs may share the cores.
A seed that never reaches the threshold within its budget is unsolved and counts as infinitely
slow in the medians. Runs are interleaved (seed 1 of each library, then seed 2, ...) so that a busy
spell of the machine does not fall on one library only.

sb3-contrib needs a gymnasium CartPoleNoVel: RL-Zoo registers ``CartPoleNoVel-v1`` as CartPole-v1
behind ``rl_zoo3.wrappers.MaskVelocityWrapper``, which multiplies the two velocities by 0 (the
observation keeps 4 entries); sb3-contrib's own tests drop them (a 2-entry observation).
``NoVelocity`` below drops them, as the native env does, so that one evaluator serves both: a
masked entry is always 0 (and 0 again after VecNormalize), so the policy sees the same information.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import lightning as L
import numpy as np
import torch
import yaml
from _time_to_solve import (  # benchmarks/_time_to_solve.py: the protocol and report shared with bench_ppo
    EVAL_EPISODES,
    EVAL_SEED,
    Protocol,
    Run,
    Task,
    fit_until_solved,
    machine_line,
    report,
    run_interleaved,
)
from torch import Tensor, nn

from rl_lightning import PPOModule

ENV_ID = "CartPoleNoVel-v1"
TASK = Task(ENV_ID, 475.0, 4_096)  # greedy mean return that counts as solved, env steps between evaluations
CONFIG = Path(__file__).resolve().parents[1] / "configs" / "ppo_cartpole_novel.yaml"
OURS = "rl_lightning PPOModule (LSTM)"
THEIRS = "sb3-contrib RecurrentPPO (RL-Zoo)"
GOAL = 3.0  # RecurrentPPO median / ours at least this, wall and CPU, every seed of ours solved


def _linear(initial: float) -> Callable[[float], float]:
    """The zoo's ``lin_<initial>``: ``initial`` times the remaining progress (1 -> 0)."""
    return lambda progress_remaining: progress_remaining * initial


# RL-Zoo's RecurrentPPO for CartPoleNoVel-v1 (rl-baselines3-zoo hyperparams/ppo_lstm.yml, unchanged
# from the commit that added RecurrentPPO, 139477b, to the newest read, 22e3ff2, after v2.8.0).
ZOO_N_ENVS = 8
ZOO_N_TIMESTEPS = 100_000
ZOO_NORMALIZE = True  # VecNormalize(observations and rewards, gamma = the algorithm's): rl_zoo3's `normalize: True`
ZOO_KWARGS: dict[str, Any] = dict(
    n_steps=32,
    batch_size=256,
    gae_lambda=0.8,
    gamma=0.98,
    n_epochs=20,
    ent_coef=0.0,
    learning_rate=_linear(0.001),
    clip_range=_linear(0.2),
    policy_kwargs=dict(
        ortho_init=False,
        activation_fn=nn.ReLU,
        lstm_hidden_size=64,
        enable_critic_lstm=True,
        net_arch=dict(pi=[64], vf=[64]),
    ),
)


# -- rl_lightning ------------------------------------------------------------------------------


def load_config(path: Path = CONFIG) -> tuple[dict[str, Any], int]:
    """The config's PPOModule init_args and Trainer max_steps."""
    config = yaml.safe_load(path.read_text())
    return config["model"]["init_args"], config["trainer"]["max_steps"]


def run_rl_lightning(seed: int, init_args: dict[str, Any] | None = None, max_steps: int | None = None) -> Run:
    """PPOModule with the config's settings (or ``init_args`` / ``max_steps``) and ``seed``."""
    if init_args is None or max_steps is None:
        config_args, config_steps = load_config()
        init_args, max_steps = init_args or config_args, max_steps or config_steps
    # The module itself is evaluated: evaluate_policy plays its greedy_actor, which carries the LSTM state.
    return fit_until_solved(
        TASK, lambda: PPOModule(**{**init_args, "seed": seed}), max_steps, OURS, seed, policy=lambda module: module
    )


# -- sb3-contrib ---------------------------------------------------------------------------------


class NoVelocity(gym.ObservationWrapper):
    """CartPole-v1 observed as (x, theta): the cart and pole velocities dropped."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        low, high = env.observation_space.low, env.observation_space.high
        self.observation_space = gym.spaces.Box(low[0::2], high[0::2], dtype=np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[0::2].astype(np.float32)


class _RecurrentGreedy:
    """RecurrentPPO's greedy policy as a callable obs -> actions for ``evaluate_policy``, carrying
    the LSTM states from call to call. evaluate_policy plays one episode per env in lock-step, so a
    fresh instance (zero states, every episode starting) per evaluation is all the resetting needed;
    what an env does after its episode ended is not counted."""

    def __init__(self, model: Any, normalizer: Any = None):
        self.model, self.normalizer = model, normalizer
        self.states: Any = None
        self.episode_start: np.ndarray | None = None

    def __call__(self, obs: Tensor) -> Tensor:
        obs = obs.numpy()
        if self.normalizer is not None:  # the training statistics, as the zoo's evaluation uses them
            obs = self.normalizer.normalize_obs(obs)
        if self.episode_start is None:
            self.episode_start = np.ones(len(obs), dtype=bool)
        actions, self.states = self.model.predict(
            obs, state=self.states, episode_start=self.episode_start, deterministic=True
        )
        self.episode_start = np.zeros(len(obs), dtype=bool)
        return torch.as_tensor(actions)


def run_sb3_contrib(seed: int) -> Run:
    """RecurrentPPO with the zoo's settings; evaluated when a rollout starts (= after the previous
    rollout's updates) and when training ends (after the last one)."""
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    protocol = Protocol(TASK)
    envs = make_vec_env("CartPole-v1", n_envs=ZOO_N_ENVS, seed=seed, wrapper_class=NoVelocity)
    # The zoo's `normalize: True`: VecNormalize of observations and rewards with the algorithm's gamma.
    normalizer = VecNormalize(envs, gamma=ZOO_KWARGS["gamma"]) if ZOO_NORMALIZE else None
    model = RecurrentPPO("MlpLstmPolicy", normalizer or envs, seed=seed, device="cpu", verbose=0, **ZOO_KWARGS)

    class StopWhenSolved(BaseCallback):
        def _on_training_start(self) -> None:
            protocol.start()

        def _on_rollout_start(self) -> None:
            protocol.after_update(self.num_timesteps, lambda: _RecurrentGreedy(model, normalizer))

        def _on_step(self) -> bool:
            return protocol.solved is None

        def _on_training_end(self) -> None:
            protocol.after_update(self.num_timesteps, lambda: _RecurrentGreedy(model, normalizer))

    model.learn(total_timesteps=ZOO_N_TIMESTEPS, callback=StopWhenSolved())
    return protocol.result(THEIRS, seed, model.num_timesteps)


# -- the report ------------------------------------------------------------------------------------


def settings_report() -> list[str]:
    defaults = dict(PPOModule().hparams)
    init_args, max_steps = load_config()
    changed = {k: v for k, v in init_args.items() if k != "seed" and defaults.get(k) != v and k in defaults}
    changed = {k: v for k, v in changed.items() if not (isinstance(v, list) and tuple(v) == defaults[k])}
    budget = PPOModule(**init_args).planned_env_steps(max_steps)
    zoo_args = {k: (f"lin_{v(1.0):g}" if callable(v) else v) for k, v in ZOO_KWARGS.items() if k != "policy_kwargs"}
    policy_kwargs = {k: (v.__name__ if isinstance(v, type) else v) for k, v in ZOO_KWARGS["policy_kwargs"].items()}
    return [
        "## Settings",
        "",
        f"- rl_lightning: `configs/{CONFIG.name}` (max_steps {max_steps:,} = {budget:,} env steps, the "
        f"learning-rate annealing horizon; differs from the PPOModule defaults in `{changed}`).",
        f"- sb3-contrib RecurrentPPO (`MlpLstmPolicy`): n_envs {ZOO_N_ENVS}, n_timesteps {ZOO_N_TIMESTEPS:,}, "
        f"normalize {ZOO_NORMALIZE}, `{zoo_args}`, policy_kwargs `{policy_kwargs}`, the rest sb3-contrib's "
        "defaults (e.g. vf_coef 0.5, max_grad_norm 0.5, shared_lstm False).",
        "- RL-Zoo: rl-baselines3-zoo `hyperparams/ppo_lstm.yml`, `CartPoleNoVel-v1` (the same from the commit "
        "that added RecurrentPPO, 139477b, to 22e3ff2, after v2.8.0); `lin_x` = x times the remaining "
        "progress; `normalize: True` = `VecNormalize` of observations and rewards with the algorithm's gamma "
        "(rl_zoo3's ExperimentManager), whose observation statistics the greedy evaluation uses. The `sb3/ppo_lstm-"
        "CartPoleNoVel-v1` model card lists `normalize_kwargs: {norm_obs: True, norm_reward: False}` (how the "
        "zoo builds its evaluation env); rewards are normalized here as in the zoo's training env. "
        "`make_vec_env` (DummyVecEnv, Monitor) of gymnasium's CartPole-v1 behind `NoVelocity` (velocities "
        "dropped; the zoo's `MaskVelocityWrapper` zeroes them instead, the same information).",
        "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5, help="rl_lightning seeds (default 5)")
    parser.add_argument("--sb3_seeds", type=int, default=3, help="RecurrentPPO seeds, 0 to skip (default 3)")
    parser.add_argument("--out", default="benchmarks/results/recurrent.md")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    for name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)

    import sb3_contrib
    import stable_baselines3

    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    runs = run_interleaved([(run_rl_lightning, args.seeds), (run_sb3_contrib, args.sb3_seeds)])
    total_minutes = (time.perf_counter() - started) / 60

    command = " ".join(["python benchmarks/bench_recurrent.py", *sys.argv[1:]])
    lines = [
        "# Recurrent PPO: time to a greedy-evaluation threshold on CartPoleNoVel-v1, rl_lightning vs sb3-contrib",
        "",
        f"Command: `{command}` (the whole run: {total_minutes:.1f} min)",
        "",
        machine_line(
            {
                "torch": torch.__version__,
                "lightning": L.__version__,
                "stable-baselines3": stable_baselines3.__version__,
                "sb3-contrib": sb3_contrib.__version__,
                "gymnasium": gym.__version__,
            },
            load_before,
        ),
        "",
        f"Protocol, the same for both libraries: after each rollout and its updates, once {TASK.eval_every:,} more env "
        f"steps have passed, a greedy evaluation of {EVAL_EPISODES} episodes (argmax) on a separate native torch "
        f"`{ENV_ID}` with seed {EVAL_SEED} (`rl_lightning.callbacks.evaluate_policy`: the same start states for "
        "both; one episode per env in lock-step, the recurrent state carried from step to step: rl_lightning's "
        "module through its greedy actor, RecurrentPPO through a callable keeping its LSTM states); solved = the "
        "first evaluation at the threshold. wall / CPU s = training time from the start of training to that "
        "evaluation, evaluations excluded (a pausable clock), on one CPU thread; CPU = process time. env steps = "
        "at the solving evaluation (all the budget if unsolved); env steps / CPU s = the training throughput, "
        "updates included. setup s = building the run (module and Trainer / envs and model) up to the start of "
        "training, not in wall. Medians count an unsolved seed as infinitely slow. Budgets: rl_lightning the "
        "config's max_steps, RecurrentPPO the zoo's n_timesteps.",
        "",
        *report(TASK, runs, OURS, {THEIRS: GOAL}),
        *settings_report(),
    ]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
