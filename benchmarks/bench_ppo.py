"""Time to a greedy-evaluation threshold: rl_lightning's PPOModule (configs/ppo_*.yaml) next to
Stable-Baselines3's PPO with its RL-Zoo hyper-parameters and CleanRL's ppo.py (CartPole-v1), in one run.

    python benchmarks/bench_ppo.py [--seeds 5] [--sb3_seeds 3] [--cleanrl_seeds 3]
        [--envs CartPole-v1 Acrobot-v1 Pendulum-v1] [--out benchmarks/results/ppo.md]

One protocol for every library: after each rollout and its updates, once another N env steps have
passed, a greedy evaluation of 32 episodes on a separate native torch env (the same evaluator and
start states for all: ``rl_lightning.callbacks.evaluate_policy``); "solved" = the first evaluation
whose mean return reaches the env's threshold. Times count training only (evaluation excluded), on
one CPU thread; wall and process CPU seconds are both reported because other jobs may share the
cores. A seed that never reaches the threshold within its library's budget is unsolved and counts
as infinitely slow in the medians. Runs are interleaved (seed 1 of every library, then seed 2, ...)
so that a busy spell of the machine does not fall on one library only.

The ``cleanrl`` PyPI package (0.4.8, 2021) imports ``gym`` and ``gym.wrappers.Monitor`` (gone since
gym 0.22) and predates the ppo.py described here, so CleanRL's ppo.py is reproduced below.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import random
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

import gymnasium as gym
import lightning as L
import numpy as np
import torch
import yaml
from _time_to_solve import (  # benchmarks/_time_to_solve.py: the protocol and report shared with bench_recurrent
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
from torch.distributions import Categorical

from rl_lightning import PPOModule

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
OURS = "rl_lightning PPOModule"


TASKS = {
    "CartPole-v1": Task("CartPole-v1", 475.0, 2_048),
    "Acrobot-v1": Task("Acrobot-v1", -100.0, 8_192),
    "Pendulum-v1": Task("Pendulum-v1", -200.0, 8_192),
}
CONFIG_FILES = {
    "CartPole-v1": "ppo_cartpole.yaml",
    "Acrobot-v1": "ppo_acrobot.yaml",
    "Pendulum-v1": "ppo_pendulum.yaml",
}


def _linear(initial: float) -> Callable[[float], float]:
    """The zoo's ``lin_<initial>``: ``initial`` times the remaining progress (1 -> 0)."""
    return lambda progress_remaining: progress_remaining * initial


class _ZooSettings(NamedTuple):
    n_envs: int
    n_timesteps: int  # the budget
    normalize: bool  # VecNormalize (observations and rewards, the zoo's `normalize: true`)
    ppo_kwargs: dict[str, Any]  # PPO("MlpPolicy", ...) arguments; the rest are SB3's defaults


# RL-Zoo's tuned PPO (rl-baselines3-zoo hyperparams/ppo.yml), as bench_vpg.py for CartPole-v1.
ZOO_PPO = {
    "CartPole-v1": _ZooSettings(
        8,
        100_000,
        False,
        dict(
            n_steps=32,
            batch_size=256,
            gae_lambda=0.8,
            gamma=0.98,
            n_epochs=20,
            ent_coef=0.0,
            learning_rate=_linear(0.001),
            clip_range=_linear(0.2),
        ),
    ),
    "Acrobot-v1": _ZooSettings(
        16, 1_000_000, True, dict(n_steps=256, gae_lambda=0.94, gamma=0.99, n_epochs=4, ent_coef=0.0)
    ),
    "Pendulum-v1": _ZooSettings(
        4,
        100_000,
        False,
        dict(
            n_steps=1024,
            gae_lambda=0.95,
            gamma=0.9,
            n_epochs=10,
            ent_coef=0.0,
            learning_rate=1e-3,
            clip_range=0.2,
            use_sde=True,
            sde_sample_freq=4,
        ),
    ),
}


# -- rl_lightning ------------------------------------------------------------------------------


def load_config(task: Task) -> tuple[dict[str, Any], int]:
    """The config's PPOModule init_args and Trainer max_steps."""
    config = yaml.safe_load((CONFIGS / CONFIG_FILES[task.env_id]).read_text())
    return config["model"]["init_args"], config["trainer"]["max_steps"]


def run_rl_lightning(task: Task, seed: int) -> Run:
    init_args, max_steps = load_config(task)
    return fit_until_solved(task, lambda: PPOModule(**{**init_args, "seed": seed}), max_steps, OURS, seed)


# -- Stable-Baselines3 ---------------------------------------------------------------------------


def run_sb3(task: Task, seed: int) -> Run:
    """SB3 PPO with the zoo's settings for ``task``; evaluated when a rollout starts (= after the
    previous rollout's updates) and when training ends (after the last one)."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    protocol = Protocol(task)
    zoo = ZOO_PPO[task.env_id]
    envs = make_vec_env(task.env_id, n_envs=zoo.n_envs, seed=seed)
    # The zoo's `normalize: true`: VecNormalize of observations and rewards with the algorithm's gamma.
    normalizer = VecNormalize(envs, gamma=zoo.ppo_kwargs["gamma"]) if zoo.normalize else None
    model = PPO("MlpPolicy", normalizer or envs, seed=seed, device="cpu", verbose=0, **zoo.ppo_kwargs)

    def act(obs: Tensor) -> Tensor:
        obs = obs.numpy()
        if normalizer is not None:  # the training statistics, as the zoo's evaluation uses them
            obs = normalizer.normalize_obs(obs)
        actions, _ = model.predict(obs, deterministic=True)  # argmax / the mean action (clipped)
        return torch.as_tensor(actions)

    class StopWhenSolved(BaseCallback):
        def _on_training_start(self) -> None:
            protocol.start()

        def _on_rollout_start(self) -> None:
            protocol.after_update(self.num_timesteps, lambda: act)

        def _on_step(self) -> bool:
            return protocol.solved is None

        def _on_training_end(self) -> None:
            protocol.after_update(self.num_timesteps, lambda: act)

    model.learn(total_timesteps=zoo.n_timesteps, callback=StopWhenSolved())
    return protocol.result("SB3 PPO (RL-Zoo)", seed, model.num_timesteps)


# -- CleanRL's ppo.py, reproduced ------------------------------------------------------------------


@dataclass
class CleanRLArgs:
    """CleanRL ppo.py's Args (its defaults, for CartPole-v1)."""

    total_timesteps: int = 500_000  # total timesteps of the experiment
    learning_rate: float = 2.5e-4  # Adam's learning rate
    num_envs: int = 4  # parallel gymnasium envs (SyncVectorEnv)
    num_steps: int = 128  # steps per env per rollout
    anneal_lr: bool = True  # linear learning-rate annealing to 0
    gamma: float = 0.99  # discount factor
    gae_lambda: float = 0.95  # GAE lambda
    num_minibatches: int = 4  # minibatches per epoch
    update_epochs: int = 4  # epochs over each rollout
    norm_adv: bool = True  # advantage normalisation per minibatch
    clip_coef: float = 0.2  # surrogate clipping coefficient
    clip_vloss: bool = True  # clipped value loss
    ent_coef: float = 0.01  # entropy coefficient
    vf_coef: float = 0.5  # value-loss coefficient
    max_grad_norm: float = 0.5  # gradient-norm clip
    target_kl: float | None = None  # KL early stop (off)


def _layer_init(layer: nn.Linear, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Linear:
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class _CleanRLAgent(nn.Module):
    """CleanRL ppo.py's Agent: separate tanh 64-64 actor and critic, orthogonal init."""

    def __init__(self, envs: gym.vector.VectorEnv):
        super().__init__()
        obs_size = int(np.array(envs.single_observation_space.shape).prod())
        self.critic = nn.Sequential(
            _layer_init(nn.Linear(obs_size, 64)),
            nn.Tanh(),
            _layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            _layer_init(nn.Linear(64, 1), std=1.0),
        )
        self.actor = nn.Sequential(
            _layer_init(nn.Linear(obs_size, 64)),
            nn.Tanh(),
            _layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            _layer_init(nn.Linear(64, envs.single_action_space.n), std=0.01),
        )

    def get_value(self, x: Tensor) -> Tensor:
        return self.critic(x)

    def get_action_and_value(self, x: Tensor, action: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        logits = self.actor(x)
        probs = Categorical(logits=logits)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(x)


def _make_cleanrl_env(env_id: str) -> Callable[[], gym.Env]:
    def thunk() -> gym.Env:
        return gym.wrappers.RecordEpisodeStatistics(gym.make(env_id))

    return thunk


def run_cleanrl(task: Task, seed: int, args: CleanRLArgs | None = None) -> Run:
    """CleanRL's ppo.py (gymnasium version) line by line, without its TensorBoard writer and prints;
    evaluated at the end of each iteration (a rollout and its updates)."""
    args = args or CleanRLArgs()
    batch_size = args.num_envs * args.num_steps
    minibatch_size = batch_size // args.num_minibatches
    num_iterations = args.total_timesteps // batch_size
    protocol = Protocol(task)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    device = torch.device("cpu")
    # CleanRL pins gymnasium 0.29, whose vector envs reset a finished env within the same step.
    envs = gym.vector.SyncVectorEnv(
        [_make_cleanrl_env(task.env_id) for _ in range(args.num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    agent = _CleanRLAgent(envs).to(device)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    def act(obs: Tensor) -> Tensor:
        return agent.actor(obs).argmax(dim=-1)

    obs = torch.zeros((args.num_steps, args.num_envs, *envs.single_observation_space.shape)).to(device)
    actions = torch.zeros((args.num_steps, args.num_envs, *envs.single_action_space.shape)).to(device)
    logprobs = torch.zeros((args.num_steps, args.num_envs)).to(device)
    rewards = torch.zeros((args.num_steps, args.num_envs)).to(device)
    dones = torch.zeros((args.num_steps, args.num_envs)).to(device)
    values = torch.zeros((args.num_steps, args.num_envs)).to(device)

    protocol.start()
    global_step = 0
    next_obs, _ = envs.reset(seed=seed)
    next_obs = torch.Tensor(next_obs).to(device)
    next_done = torch.zeros(args.num_envs).to(device)
    for iteration in range(1, num_iterations + 1):
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / num_iterations
            optimizer.param_groups[0]["lr"] = frac * args.learning_rate

        for step in range(args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs
            dones[step] = next_done
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step] = value.flatten()
            actions[step] = action
            logprobs[step] = logprob
            next_obs, reward, terminations, truncations, _ = envs.step(action.cpu().numpy())
            next_done = np.logical_or(terminations, truncations)
            rewards[step] = torch.tensor(reward).to(device).view(-1)
            next_obs, next_done = torch.Tensor(next_obs).to(device), torch.Tensor(next_done).to(device)

        # bootstrap value if not done (CleanRL treats a time-limit truncation as a termination)
        with torch.no_grad():
            next_value = agent.get_value(next_obs).reshape(1, -1)
            advantages = torch.zeros_like(rewards).to(device)
            lastgaelam = 0
            for t in reversed(range(args.num_steps)):
                if t == args.num_steps - 1:
                    nextnonterminal = 1.0 - next_done
                    nextvalues = next_value
                else:
                    nextnonterminal = 1.0 - dones[t + 1]
                    nextvalues = values[t + 1]
                delta = rewards[t] + args.gamma * nextvalues * nextnonterminal - values[t]
                advantages[t] = lastgaelam = delta + args.gamma * args.gae_lambda * nextnonterminal * lastgaelam
            returns = advantages + values

        b_obs = obs.reshape((-1, *envs.single_observation_space.shape))
        b_logprobs = logprobs.reshape(-1)
        b_actions = actions.reshape((-1, *envs.single_action_space.shape))
        b_advantages = advantages.reshape(-1)
        b_returns = returns.reshape(-1)
        b_values = values.reshape(-1)

        b_inds = np.arange(batch_size)
        clipfracs = []
        for _epoch in range(args.update_epochs):
            np.random.shuffle(b_inds)
            for start in range(0, batch_size, minibatch_size):
                mb_inds = b_inds[start : start + minibatch_size]
                _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb_inds], b_actions.long()[mb_inds])
                logratio = newlogprob - b_logprobs[mb_inds]
                ratio = logratio.exp()
                with torch.no_grad():
                    approx_kl = ((ratio - 1) - logratio).mean()
                    clipfracs += [((ratio - 1.0).abs() > args.clip_coef).float().mean().item()]

                mb_advantages = b_advantages[mb_inds]
                if args.norm_adv:
                    mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)

                pg_loss1 = -mb_advantages * ratio
                pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
                pg_loss = torch.max(pg_loss1, pg_loss2).mean()

                newvalue = newvalue.view(-1)
                if args.clip_vloss:
                    v_loss_unclipped = (newvalue - b_returns[mb_inds]) ** 2
                    v_clipped = b_values[mb_inds] + torch.clamp(
                        newvalue - b_values[mb_inds], -args.clip_coef, args.clip_coef
                    )
                    v_loss_clipped = (v_clipped - b_returns[mb_inds]) ** 2
                    v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
                else:
                    v_loss = 0.5 * ((newvalue - b_returns[mb_inds]) ** 2).mean()

                loss = pg_loss - args.ent_coef * entropy.mean() + v_loss * args.vf_coef
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()

            if args.target_kl is not None and approx_kl > args.target_kl:
                break

        # What ppo.py logs each iteration (its writer itself is left out).
        y_pred, y_true = b_values.cpu().numpy(), b_returns.cpu().numpy()
        var_y = np.var(y_true)
        _explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y

        if protocol.after_update(global_step, lambda: act):
            break
    envs.close()
    return protocol.result("CleanRL ppo.py (reproduced)", seed, global_step)


GOALS = {"CartPole-v1": 5.0, "Acrobot-v1": 3.0, "Pendulum-v1": 3.0}  # SB3 median / ours at least this


def settings_report(env_ids: list[str]) -> list[str]:
    defaults = dict(PPOModule().hparams)
    lines = ["## Settings", ""]
    for env_id in env_ids:
        task = TASKS[env_id]
        init_args, max_steps = load_config(task)
        changed = {k: v for k, v in init_args.items() if k != "seed" and defaults.get(k) != v and k in defaults}
        changed = {k: v for k, v in changed.items() if not (isinstance(v, list) and tuple(v) == defaults[k])}
        module = PPOModule(**init_args)
        budget = module.planned_env_steps(max_steps)
        zoo = ZOO_PPO[env_id]
        zoo_args = {k: (f"lin_{v(1.0):g}" if callable(v) else v) for k, v in zoo.ppo_kwargs.items()}
        lines += [
            f"- **{env_id}**: rl_lightning `configs/{CONFIG_FILES[env_id]}` (max_steps {max_steps:,} = "
            f"{budget:,} env steps; "
            f"differs from the PPOModule defaults in `{changed}`). SB3: n_envs {zoo.n_envs}, "
            f"n_timesteps {zoo.n_timesteps:,}, normalize {zoo.normalize}, `{zoo_args}`, the rest SB3's defaults.",
        ]
    lines.append(
        "- SB3 settings: rl-baselines3-zoo `hyperparams/ppo.yml` (two revisions read, identical for these envs); "
        "`lin_x` = x times the remaining progress; `normalize: true` = `VecNormalize` of observations and rewards "
        "with the algorithm's gamma (rl_zoo3's ExperimentManager), whose training observation statistics the "
        "greedy evaluation uses; `make_vec_env` (DummyVecEnv, Monitor) of gymnasium's envs."
    )
    if "CartPole-v1" in env_ids:
        lines.append(f"- CleanRL ppo.py (CartPole-v1 only, it is discrete-only): `{asdict(CleanRLArgs())}`.")
    return [*lines, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5, help="rl_lightning seeds (default 5)")
    parser.add_argument("--sb3_seeds", type=int, default=3, help="SB3 seeds, 0 to skip (default 3)")
    parser.add_argument("--cleanrl_seeds", type=int, default=3, help="CleanRL seeds (CartPole-v1), 0 to skip")
    parser.add_argument("--envs", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--out", default="benchmarks/results/ppo.md")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    for name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)

    import stable_baselines3

    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    sections = []
    for env_id in args.envs:
        task = TASKS[env_id]
        runners = [(run_rl_lightning, args.seeds), (run_sb3, args.sb3_seeds)]
        if env_id == "CartPole-v1":
            runners.append((run_cleanrl, args.cleanrl_seeds))
        runs = run_interleaved([(functools.partial(runner, task), count) for runner, count in runners], env_id)
        sections += report(task, runs, OURS, {"SB3 PPO (RL-Zoo)": GOALS[env_id]})
    total_minutes = (time.perf_counter() - started) / 60

    command = " ".join(["python benchmarks/bench_ppo.py", *sys.argv[1:]])
    lines = [
        "# PPO: time to a greedy-evaluation threshold, rl_lightning vs Stable-Baselines3 vs CleanRL",
        "",
        f"Command: `{command}` (the whole run: {total_minutes:.1f} min)",
        "",
        machine_line(
            {
                "torch": torch.__version__,
                "lightning": L.__version__,
                "stable-baselines3": stable_baselines3.__version__,
                "gymnasium": gym.__version__,
            },
            load_before,
        ),
        "",
        f"Protocol, the same for every library: after each rollout and its updates, once N more env steps have "
        f"passed, a greedy evaluation of {EVAL_EPISODES} episodes (argmax / the mean action, clipped by the env) "
        f"on a separate native torch env with seed {EVAL_SEED} (`rl_lightning.callbacks.evaluate_policy`: the same "
        "start states for all); solved = the first evaluation at the threshold. wall / CPU s = training time "
        "from the start of training to that evaluation, evaluations excluded (a pausable clock), on one CPU "
        "thread; CPU = process time. env steps = at the solving evaluation (all the budget if unsolved); "
        "env steps / CPU s = the training throughput, updates included. "
        "setup s = building the run (module and Trainer / envs and model) up to the start of training, not in "
        "wall. Medians count an unsolved seed as infinitely slow. Budgets: rl_lightning the config's max_steps, "
        "SB3 the zoo's n_timesteps, CleanRL its total_timesteps.",
        "",
        "CleanRL: the `cleanrl` PyPI package (0.4.8, the newest there) cannot run next to this project's "
        "gymnasium: it imports `gym` and `gym.wrappers.Monitor` (removed in gym 0.22; gym 0.21 fails "
        "to build here), and its ppo.py is an older script than CleanRL's current one. The benchmark reproduces "
        "the current ppo.py (`run_cleanrl`): SyncVectorEnv of 4 CartPole-v1 with RecordEpisodeStatistics "
        "(same-step autoreset, as the gymnasium 0.29 CleanRL pins), its Agent, GAE, losses and schedule line "
        "by line, without its TensorBoard writer and prints.",
        "",
        *sections,
        *settings_report(args.envs),
    ]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
