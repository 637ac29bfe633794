"""The robustness audit of issue 21: bad input, bad files and signals against the public surface
(the CLI, the scripts, enjoy, plot_runs, the sweep, the Python API), each attempt classified.

    python tools/audit_robustness.py [--only NAME ...] [--tries N] [--scripts DIR] [--show N]

Run from the repository root; it uses the ``rl_lightning`` that Python imports (``PYTHONPATH=DIR`` to
audit another checkout, e.g. an older commit's worktree, with the same attempts) and the scripts of
``--scripts DIR`` (default: this checkout's). Each attempt is one of: ``good`` (the expected exit
status and message, no traceback), ``poor`` (refused, but with another status or a message that does
not name the problem), ``silently wrong`` (exit 0, or a wrong result, where an error or another
result was due), ``crash`` (a traceback), ``hang`` (no end within the attempt's time limit). Signal
attempts are timing-dependent: ``--tries`` repeats them and each try counts.

Issue 31's attempts (``--only i31``) add files whose code must never run (an edited checkpoint, a module
in the working directory: each would create ``MARKER``, which makes the attempt silently wrong whatever
else happened), wrappers that are not wrappers, renamed arguments, action masks, shifted action spaces
and the crashes and poor messages of that issue; their envs are registered inside the attempt (``ENVS``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SETUP = r"""
import lightning as L, torch
from rl_lightning import DQNModule, PPOModule
def save(module, name):
    trainer = L.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(module)
    trainer.save_checkpoint(name)
save(PPOModule(num_envs=4, num_steps_per_rollout=8), "ppo.ckpt")
save(PPOModule(env_id="Acrobot-v1", num_envs=4, num_steps_per_rollout=8), "ppo_acrobot.ckpt")
save(PPOModule(recurrent="lstm", num_envs=4, num_steps_per_rollout=8), "ppo_lstm.ckpt")
save(DQNModule(num_envs=4, learning_starts=16, batch_size=16), "dqn.ckpt")
save(PPOModule(num_envs=4, num_steps_per_rollout=8, env_backend="gymnasium"), "ppo_gym.ckpt")
save(PPOModule(env_id="Acrobot-v1", num_envs=32, num_steps_per_rollout=8), "ppo_acrobot32.ckpt")
def edit(source, name, drop=(), **hparams):  # a real checkpoint edited by hand: it loads with weights_only=True
    checkpoint = torch.load(source, weights_only=True)
    checkpoint["hyper_parameters"].update(hparams)
    for key in drop:
        del checkpoint["hyper_parameters"][key]
    torch.save(checkpoint, name)
    torch.load(name, weights_only=True)
pipepager = {"class_path": "pydoc.pipepager", "init_args": {"cmd": "touch MARKER"}}
edit("ppo_gym.ckpt", "evil_pipepager.ckpt", env_kwargs={"wrappers": [pipepager]})
system = {"class_path": "os.system", "init_args": {"command": "touch MARKER"}}
edit("ppo_gym.ckpt", "evil_system.ckpt", env_kwargs={"x": system})
edit("ppo_gym.ckpt", "evil_import.ckpt", env_kwargs={"wrappers": ["relmark_import.Nothing"]})
edit("ppo.ckpt", "evil_class_path.ckpt", _class_path="relmark_import.PPOModule")
edit("ppo.ckpt", "evil_instantiator.ckpt", _instantiator="relmark_import.evil")
edit("dqn.ckpt", "dqn_old_names.ckpt", drop=["train_freq"], steps_per_train=4)
open("relmark_import.py", "w").write(
    "open('MARKER', 'w').close()  # importing this module is running a file's code\n"
    "from rl_lightning import PPOModule as _PPOModule\n"
    "class PPOModule(_PPOModule):\n    pass\n"
    "class Nothing:\n    pass\n"
    "def evil(cls, kwargs):\n    return cls(**kwargs)\n"
)
import sqlite3
sqlite3.connect("ro.db").execute("create table t (x)")  # a database, opened read-only by an attempt
open("empty.ckpt", "wb").close()
open("text.ckpt", "w").write("epoch: 3\ncallbacks: []\n")
open("truncated.ckpt", "wb").write(open("ppo.ckpt", "rb").read()[:3000])
from torch.utils.tensorboard import SummaryWriter
for name in ("run_a", "run_b"):
    writer = SummaryWriter(f"runs/{name}")
    for step in (100, 200, 300):
        writer.add_scalar("charts/episodic_return", float(step), step)
    writer.close()
"""


@dataclass
class Attempt:
    name: str
    #: argv after ``python``: ``["-m", "rl_lightning", ...]``, ``["SCRIPT", ...]`` or ``["-c", code]``.
    argv: list[str]
    code: int
    #: substrings the output must hold for ``good``.
    words: list[str] = field(default_factory=list)
    timeout: float = 120.0
    #: signal attempts: (delay after the start line, [signals with the gaps before them]).
    signals: list[tuple[float, int]] | None = None
    #: an extra check of the result (a file written, a note printed): False -> silently wrong.
    check: Callable[[Path, str], bool] | None = None
    #: start a new process group and signal all of it.
    group: bool = False
    #: the check decides first, whatever the exit and output (a file's code ran: silently wrong even with a
    #: traceback after it).
    check_first: bool = False


def _script(name: str) -> str:
    return f"SCRIPT:{name}"


def _python(code: str) -> list[str]:
    return ["-c", "import warnings, sys\n" + code]


def _catching(statement: str) -> list[str]:
    """A Python statement that must raise ValueError/TypeError: exit 2 with its message if it does,
    0 if it does not (silently accepted), a traceback for anything else."""
    return _python(
        "try:\n    " + statement.replace("\n", "\n    ") + "\nexcept (ValueError, TypeError) as error:\n"
        "    print(f'{type(error).__name__}: {error}', file=sys.stderr); sys.exit(2)\n"
    )


TINY_PPO = ["--num_envs", "4", "--num_steps_per_rollout", "8", "--no_video", "--eval_every_n_env_steps", "1000000"]
LONG = ["--env_id", "Acrobot-v1", "--num_envs", "4", "--max_steps", "100000", "--no_video", "--no_stop_when_solved"]
CLI_FIT = ["-m", "rl_lightning", "fit", "--model", "PPOModule", "--trainer.max_steps", "3"]


def _versions_distinct(directory: Path, _: str) -> bool:
    versions = sorted((directory / "lightning_logs" / "PPO-CartPole-v1").glob("version_*"))
    return len(versions) == 3 and all(len(list(v.glob("events.out.tfevents.*"))) == 1 for v in versions)


#: The file that code run from a file creates (``touch MARKER``, importing ``relmark_import``).
MARKER = "MARKER"


def _ran_nothing(directory: Path, _: str) -> bool:
    return not (directory / MARKER).exists()


# Envs of issue 31's attempts, registered inside the attempt's process: action masks in info (bool, in the
# logits convention, missing on some steps or after reset), a Dict mask in the logits convention, a mask
# row without a legal action, and shifted Discrete / MultiDiscrete action spaces that count the actions
# outside them.
ENVS = r"""
import gymnasium as gym, numpy as np
from gymnasium import spaces
OUTSIDE = [0]
class AuditEnv(gym.Env):
    def __init__(self, action_space=None, info_mask=None, missing_every=0, dict_mask=None, empty_at=-1):
        self.action_space = action_space or spaces.Discrete(3)
        self.info_mask, self.missing_every = info_mask, missing_every
        self.dict_mask, self.empty_at = dict_mask, empty_at
        box = spaces.Box(-1.0, 1.0, (2,), np.float32)
        if dict_mask == "logits":
            mask = spaces.Box(-np.inf, 0.0, (3,), np.float32)
            self.observation_space = spaces.Dict({"obs": box, "action_mask": mask})
        elif dict_mask == "bool":
            self.observation_space = spaces.Dict({"obs": box, "action_mask": spaces.MultiBinary(3)})
        else:
            self.observation_space = box
    def _obs(self):
        obs = np.zeros(2, np.float32)
        if self.dict_mask == "logits":
            return {"obs": obs, "action_mask": np.array([0.0, -np.inf, 0.0], np.float32)}
        if self.dict_mask == "bool":
            legal = self.t != self.empty_at
            return {"obs": obs, "action_mask": np.array([legal, legal, False], np.int8)}
        return obs
    def _info(self, reset):
        if self.info_mask is None or (not reset and self.missing_every == -1):
            return {}
        if self.missing_every > 0 and self.t > 0 and self.t % self.missing_every == 0:
            return {}
        if self.info_mask == "logits":
            return {"action_mask": np.array([0.0, -np.inf, 0.0], np.float32)}
        return {"action_mask": np.array([True, False, True])}
    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), self._info(True)
    def step(self, action):
        try:
            inside = self.action_space.contains(action)
        except Exception:
            inside = False
        OUTSIDE[0] += not inside
        self.t += 1
        return self._obs(), 1.0, False, False, self._info(False)
def register(env_id, entry_point=AuditEnv, **kwargs):
    gym.register(env_id, entry_point=entry_point, kwargs=kwargs, max_episode_steps=10)
register("AuditInfoMask-v0", info_mask="bool")
register("AuditInfoLogitsMask-v0", info_mask="logits")
register("AuditDictLogitsMask-v0", dict_mask="logits")
register("AuditNoLegalAction-v0", dict_mask="bool", empty_at=2)
register("AuditMaskAtResetOnly-v0", info_mask="bool", missing_every=-1)
register("AuditMaskSometimes-v0", info_mask="bool", missing_every=3)
register("AuditShifted-v0", action_space=spaces.Discrete(3, start=-1))
register("AuditShiftedMulti-v0", action_space=spaces.MultiDiscrete([3, 4], start=[-1, 2]))
register("AuditHugeBounds-v0", action_space=spaces.Box(-1e38, 1e38, (1,), np.float32))
class TupleEnv(AuditEnv):
    def __init__(self):
        super().__init__(action_space=spaces.Box(-1.0, 1.0, (1,), np.float32))
        self.observation_space = spaces.Tuple((spaces.Box(-1, 1, (2,), np.float32), spaces.Discrete(3)))
    def _obs(self):
        return (np.zeros(2, np.float32), 0)
register("AuditTupleObs-v0", entry_point=TupleEnv)
import lightning as L
def fit(module, steps=2):
    L.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
              enable_model_summary=False).fit(module)
"""


def _with_envs(statement: str) -> list[str]:
    """``_catching(statement)`` after the audit's envs are registered (``ENVS``)."""
    return _catching(ENVS + statement)


CLI_VALIDATE = ["-m", "rl_lightning", "validate", "--ckpt_path"]
NOT_A_WRAPPER = ["gymnasium.Wrapper"]


def _issue_31_attempts() -> list[Attempt]:
    """Issue 31: nothing runs from a file, wrappers that are not wrappers, renamed arguments, action masks,
    shifted action spaces, the CLI's checkpoint check, and the crashes and poor messages."""

    def never_runs(name: str, argv: list[str], words: list[str]) -> Attempt:
        return Attempt(name, argv, 2, words, check=_ran_nothing, check_first=True)

    evil = [
        never_runs(
            f"i31 cli {command} a checkpoint whose wrapper is pydoc.pipepager",
            ["-m", "rl_lightning", command, "--ckpt_path", "evil_pipepager.ckpt", *extra],
            ["pydoc.pipepager"],
        )
        for command, extra in (("validate", []), ("test", []), ("fit", ["--trainer.max_steps", "3"]))
    ]
    evil += [
        never_runs(
            "i31 enjoy a checkpoint whose wrapper is pydoc.pipepager",
            [_script("enjoy.py"), "--ckpt_path", "evil_pipepager.ckpt", "--episodes", "1", "--video", "e.mp4"],
            ["pydoc.pipepager"],
        ),
        never_runs(
            "i31 load_from_checkpoint a checkpoint whose wrapper is pydoc.pipepager",
            _catching("from rl_lightning import PPOModule\nPPOModule.load_from_checkpoint('evil_pipepager.ckpt')"),
            ["pydoc.pipepager"],
        ),
        never_runs(
            "i31 cli validate a checkpoint with an os.system spec in env_kwargs",
            [*CLI_VALIDATE, "evil_system.ckpt"],
            ["os.system"],
        ),
        never_runs(
            "i31 load_from_checkpoint a checkpoint with an os.system spec in env_kwargs",
            _catching("from rl_lightning import PPOModule\nPPOModule.load_from_checkpoint('evil_system.ckpt')"),
            ["os.system"],
        ),
        never_runs(
            "i31 cli validate a checkpoint whose wrapper imports a local module",
            [*CLI_VALIDATE, "evil_import.ckpt"],
            ["relmark_import"],
        ),
        never_runs(
            "i31 cli validate a checkpoint whose _class_path imports a local module",
            [*CLI_VALIDATE, "evil_class_path.ckpt"],
            ["relmark_import"],
        ),
        never_runs(
            "i31 load_from_checkpoint a checkpoint whose _class_path imports a local module",
            _catching("from rl_lightning import PPOModule\nPPOModule.load_from_checkpoint('evil_class_path.ckpt')"),
            ["relmark_import"],
        ),
        never_runs(
            "i31 load_from_checkpoint a checkpoint whose Lightning _instantiator imports a local module",
            _catching("from rl_lightning import PPOModule\nPPOModule.load_from_checkpoint('evil_instantiator.ckpt')"),
            ["relmark_import"],
        ),
        never_runs(
            "i31 cli validate a checkpoint whose Lightning _instantiator imports a local module",
            [*CLI_VALIDATE, "evil_instantiator.ckpt"],
            ["relmark_import"],
        ),
    ]
    not_wrappers = ("os.system", "builtins.exec", "subprocess.Popen", "json.dumps")
    wrappers = [
        Attempt(
            f"i31 cli wrappers [{path}]",
            [
                *CLI_FIT,
                "--model.init_args.env_backend",
                "gymnasium",
                "--model.init_args.env_kwargs",
                f'{{"wrappers": ["{path}"]}}',
            ],
            2,
            [path, *NOT_A_WRAPPER],
        )
        for path in not_wrappers
    ]
    wrappers += [
        Attempt(
            f"i31 python wrappers [{path}]",
            _catching(
                f"from rl_lightning import PPOModule\nPPOModule(env_backend='gymnasium', "
                f"env_kwargs={{'wrappers': ['{path}']}})"
            ),
            2,
            [path, *NOT_A_WRAPPER],
        )
        for path in not_wrappers
    ]
    renames = [
        Attempt(
            "i31 load a DQN checkpoint saved with steps_per_train",
            _python(
                "from rl_lightning import DQNModule\nm = DQNModule.load_from_checkpoint('dqn_old_names.ckpt')\n"
                "print('train_freq', m.hparams.train_freq)"
            ),
            0,
            ["train_freq 4"],
        ),
        Attempt(
            "i31 DQNModule(steps_per_train=4)",
            _python(
                "from rl_lightning import DQNModule\nwith warnings.catch_warnings(record=True) as seen:\n"
                "    warnings.simplefilter('always')\n    m = DQNModule(steps_per_train=4)\n"
                "print('train_freq', m.hparams.train_freq, 'warned',\n"
                "      any(w.category is DeprecationWarning and 'train_freq' in str(w.message) for w in seen))"
            ),
            0,
            ["train_freq 4 warned True"],
        ),
        Attempt(
            "i31 VPGModule(clip_coef=0.1, use_iw=True, use_lr_decay=True)",
            _python(
                "from rl_lightning import VPGModule\nwith warnings.catch_warnings(record=True) as seen:\n"
                "    warnings.simplefilter('always')\n"
                "    m = VPGModule(clip_coef=0.1, use_iw=True, use_lr_decay=True)\n"
                "h = m.hparams\nprint('new names', h.iw_clip, h.importance_weighting, h.anneal_lr, 'warned',\n"
                "      sum(w.category is DeprecationWarning for w in seen))"
            ),
            0,
            ["new names 0.1 True True warned 3"],
        ),
        Attempt(
            "i31 cli validate a checkpoint of old names",
            [*CLI_VALIDATE, "dqn_old_names.ckpt"],
            0,
            ["validate: greedy", "DQNModule"],
        ),
    ]
    convention = ["-inf", "legal"]
    masks = [
        Attempt(
            "i31 a logits-convention mask in info['action_mask']",
            _with_envs(
                "from rl_lightning import PPOModule\n"
                "fit(PPOModule(env_id='AuditInfoLogitsMask-v0', num_envs=2, num_steps_per_rollout=8))"
            ),
            2,
            convention,
        ),
        Attempt(
            "i31 a logits-convention mask as a Dict key",
            _with_envs(
                "from rl_lightning import PPOModule\n"
                "fit(PPOModule(env_id='AuditDictLogitsMask-v0', num_envs=2, num_steps_per_rollout=8))"
            ),
            2,
            convention,
        ),
        Attempt(
            "i31 a logits-convention mask to act(action_mask=)",
            _with_envs(
                "from rl_lightning import PPOModule\nm = PPOModule(env_id='AuditInfoMask-v0')\n"
                "m.act(np.zeros((1, 2), np.float32), action_mask=np.array([[0.0, -np.inf, 0.0]], np.float32))"
            ),
            2,
            convention,
        ),
        Attempt(
            "i31 DQN's random warm-up on a mask row without a legal action",
            _with_envs(
                "from rl_lightning import DQNModule\n"
                "fit(DQNModule(env_id='AuditNoLegalAction-v0', num_envs=2, learning_starts=40, batch_size=8))"
            ),
            2,
            ["no legal action"],
        ),
        Attempt(
            "i31 a mask in reset's info only",
            _with_envs(
                "from rl_lightning import PPOModule\n"
                "fit(PPOModule(env_id='AuditMaskAtResetOnly-v0', num_envs=2, num_steps_per_rollout=8))"
            ),
            2,
            ["action_mask", "step"],
        ),
        Attempt(
            "i31 a mask missing from info on some steps",
            _with_envs(
                "from rl_lightning import PPOModule\n"
                "fit(PPOModule(env_id='AuditMaskSometimes-v0', num_envs=2, num_steps_per_rollout=8))"
            ),
            2,
            ["action_mask", "step"],
        ),
    ]
    play = (
        "obs, _ = env.reset(seed=0)\nfor _ in range(30):\n    obs, *_ = env.step(m.act(obs))\n"
        "print('outside the space', OUTSIDE[0])"
    )
    shifted = [
        Attempt(
            f"i31 env.step(module.act(obs)) on gymnasium's {env_id}",
            _python(
                ENVS + f"from rl_lightning import PPOModule\nm = PPOModule(env_id='{env_id}')\n"
                f"env = gym.make('{env_id}')\n" + play
            ),
            0,
            ["outside the space 0"],
        )
        for env_id in ("AuditShifted-v0", "AuditShiftedMulti-v0")
    ]
    shifted.append(
        Attempt(
            "i31 evaluate_policy on gymnasium instances of shifted action spaces",
            _python(
                ENVS + "from rl_lightning import PPOModule, evaluate_policy\n"
                "for env_id in ('AuditShifted-v0', 'AuditShiftedMulti-v0'):\n"
                "    evaluate_policy(PPOModule(env_id=env_id), gym.make(env_id), num_episodes=2)\n"
                "print('outside the space', OUTSIDE[0])"
            ),
            0,
            ["outside the space 0"],
        )
    )
    checkpoint_check = [
        Attempt(
            "i31 cli fit the CartPole config from an Acrobot checkpoint of equal num_envs",
            [
                "-m",
                "rl_lightning",
                "fit",
                "--config",
                "CONFIG:ppo_cartpole.yaml",
                "--ckpt_path",
                "ppo_acrobot32.ckpt",
                "--trainer.max_steps",
                "3",
            ],
            2,
            ["Acrobot-v1", "CartPole-v1"],
        ),
    ]
    crashes = [
        Attempt(
            f"i31 {algorithm} learning_starts=0 with n_step=3",
            _with_envs(f"from rl_lightning import {algorithm}\nfit({algorithm}(learning_starts=0, n_step=3))"),
            2,
            ["learning_starts", "n_step"],
        )
        for algorithm in ("DQNModule", "SACModule")
    ]
    crashes += [
        Attempt(
            f"i31 compile={compile}",
            _with_envs(f"from rl_lightning import DQNModule\nfit(DQNModule(learning_starts=16, compile={compile}))"),
            2,
            ["compile", *words],
        )
        for compile, words in (
            ("{'mode': 'fastest'}", ["mode", "max-autotune"]),
            ("{'backend': 'fastest'}", ["backend", "inductor"]),
            ("{'mode': 'max-autotune', 'options': {'max_autotune': True}}", ["mode", "options"]),
        )
    ]
    crashes += [
        Attempt(
            "i31 cli --trainer.precision 64-true",
            [*CLI_FIT, "--trainer.precision", "64-true"],
            2,
            ["precision", "32-true"],
        ),
        Attempt(
            "i31 cli --trainer.accumulate_grad_batches 2",
            [*CLI_FIT, "--trainer.accumulate_grad_batches", "2"],
            2,
            ["accumulate_grad_batches"],
        ),
        Attempt(
            "i31 train_vpg --precision 64-true",
            [_script("train_vpg.py"), "--precision", "64-true", "--no_video"],
            2,
            ["precision", "32-true"],
        ),
        Attempt(
            "i31 SAC on action bounds of 1e38",
            _with_envs(
                "from rl_lightning import SACModule\n"
                "fit(SACModule(env_id='AuditHugeBounds-v0', learning_starts=64, batch_size=32), steps=20)"
            ),
            2,
            ["action bounds", "RescaleAction"],
        ),
        Attempt(
            "i31 sweep a budget too small for one trial",
            ["EXAMPLE:sweep_optuna.py", "--n_trials", "1", "--budget_env_steps", "100"],
            2,
            ["--budget_env_steps"],
        ),
        Attempt(
            "i31 sweep into a storage it cannot write",
            ["EXAMPLE:sweep_optuna.py", "--n_trials", "1", "--storage", "sqlite:///no_such_dir/sweep.db"],
            2,
            ["--storage"],
        ),
        Attempt(
            "i31 sweep into a read-only storage",
            ["EXAMPLE:sweep_optuna.py", "--n_trials", "1", "--storage", "sqlite:///file:ro.db?mode=ro&uri=true"],
            2,
            ["--storage"],
        ),
        Attempt(
            "i31 SAC on a Tuple observation",
            _with_envs("from rl_lightning import SACModule\nSACModule(env_id='AuditTupleObs-v0')"),
            2,
            ["Tuple space"],
        ),
    ]
    return [*evil, *wrappers, *renames, *masks, *shifted, *checkpoint_check, *crashes]


def attempts() -> list[Attempt]:
    ckpt_files = [
        Attempt(f"cli {kind} checkpoint", [*CLI_FIT, "--ckpt_path", f"{kind}.ckpt"], 2, [f"{kind}.ckpt"])
        for kind in ("empty", "text", "truncated")
    ]
    ckpt_files += [
        Attempt(
            f"train_ppo {kind} checkpoint",
            [_script("train_ppo.py"), *TINY_PPO, "--ckpt_path", f"{kind}.ckpt"],
            2,
            [f"{kind}.ckpt"],
        )
        for kind in ("empty", "text", "truncated")
    ]
    return [
        Attempt(
            "cli fit PPO from a DQN checkpoint", [*CLI_FIT, "--ckpt_path", "dqn.ckpt"], 2, ["DQNModule", "PPOModule"]
        ),
        Attempt(
            "cli fit PPO CartPole from an Acrobot checkpoint",
            [*CLI_FIT, "--model.init_args.env_id", "CartPole-v1", "--ckpt_path", "ppo_acrobot.ckpt"],
            2,
            ["Acrobot-v1", "CartPole-v1"],
        ),
        Attempt(
            "cli validate DQN on a PPO checkpoint",
            ["-m", "rl_lightning", "validate", "--model", "DQNModule", "--ckpt_path", "ppo.ckpt"],
            2,
            ["PPOModule", "DQNModule"],
        ),
        Attempt(
            "cli flags with a checkpoint",
            [*CLI_FIT, "--model.init_args.ent_coef", "0.5", "--model.init_args.lr", "1e-4", "--ckpt_path", "ppo.ckpt"],
            0,
            ["ent_coef 0.5", "lr 0.0001"],
        ),
        *ckpt_files,
        Attempt("enjoy a text file", [_script("enjoy.py"), "--ckpt_path", "text.ckpt"], 2, ["text.ckpt"]),
        Attempt(
            "train_ppo from a DQN checkpoint",
            [_script("train_ppo.py"), *TINY_PPO, "--ckpt_path", "dqn.ckpt"],
            2,
            ["DQNModule"],
        ),
        Attempt(
            "train_ppo recurrent from a feed-forward checkpoint",
            [_script("train_ppo.py"), *TINY_PPO, "--recurrent", "lstm", "--ckpt_path", "ppo.ckpt"],
            2,
            ["recurrent"],
        ),
        Attempt(
            "crafted pickle inspected",
            _catching(
                "import os, torch\nclass P:\n    def __reduce__(self): return (os.system, ('touch ran',))\n"
                "torch.save({'state_dict': {}, 'rl_lightning': {}, 'x': P()}, 'evil.ckpt')\n"
                "from rl_lightning.checkpoints import load_checkpoint_file\nload_checkpoint_file('evil.ckpt')"
            ),
            2,
            ["weights_only"],
            check=lambda directory, _: not (directory / "ran").exists(),
        ),
        Attempt(
            "feed-forward checkpoint into a recurrent module",
            _catching(
                "import lightning as L\nfrom rl_lightning import PPOModule\n"
                "m = PPOModule(recurrent='lstm', num_envs=4, num_steps_per_rollout=8)\n"
                "L.Trainer(max_steps=3, logger=False, enable_checkpointing=False, enable_progress_bar=False).fit(m, "
                "ckpt_path='ppo.ckpt')"
            ),
            2,
            ["recurrent"],
        ),
        Attempt(
            "enjoy --episodes 0", [_script("enjoy.py"), "--ckpt_path", "ppo.ckpt", "--episodes", "0"], 2, ["--episodes"]
        ),
        Attempt(
            "enjoy --episodes -2",
            [_script("enjoy.py"), "--ckpt_path", "ppo.ckpt", "--episodes", "-2"],
            2,
            ["--episodes"],
        ),
        Attempt(
            "enjoy --max_episode_steps 0",
            [_script("enjoy.py"), "--ckpt_path", "ppo.ckpt", "--max_episode_steps", "0"],
            2,
            ["--max_episode_steps"],
        ),
        Attempt("sweep --n_trials 0", ["EXAMPLE:sweep_optuna.py", "--n_trials", "0"], 2, ["--n_trials"]),
        Attempt(
            "plot_runs --out into a new directory",
            [_script("plot_runs.py"), "runs/run_a", "--out", "nodir/x.png"],
            0,
            check=lambda directory, _: (directory / "nodir" / "x.png").is_file(),
        ),
        Attempt(
            "plot_runs over the parent of two runs",
            [_script("plot_runs.py"), "--run", "X", "runs", "--out", "p.png"],
            0,
            ["several runs"],
        ),
        Attempt(
            "make_envs on cuda without CUDA",
            _catching("from rl_lightning import make_envs\nmake_envs('CartPole-v1', 2, device='cuda')"),
            2,
            ["device"],
        ),
        Attempt(
            "make_envs on gpu0",
            _catching("from rl_lightning import make_envs\nmake_envs('CartPole-v1', 2, device='gpu0')"),
            2,
            ["device"],
        ),
        Attempt("train_ppo --devices 0", [_script("train_ppo.py"), *TINY_PPO, "--devices", "0"], 2, ["devices"]),
        Attempt("cli --trainer.devices 0", [*CLI_FIT, "--trainer.devices", "0"], 2, ["devices"]),
        Attempt(
            "VPG with one env", _catching("from rl_lightning import VPGModule\nVPGModule(num_envs=1)"), 2, ["num_envs"]
        ),
        Attempt(
            "VPG lr_end abc",
            _catching("from rl_lightning import VPGModule\nVPGModule(lr_end='abc', lr_frac=7)"),
            2,
            ["lr_"],
        ),
        Attempt(
            "PPO minibatches of one",
            _catching(
                "from rl_lightning import PPOModule\nPPOModule(num_envs=2, num_steps_per_rollout=2, num_minibatches=4)"
            ),
            2,
            ["minibatch"],
        ),
        Attempt(
            "float images to act",
            _catching(
                "import torch\nfrom rl_lightning import VPGModule\nm = VPGModule(env_id='ImageProbe5-v0')\n"
                "m.act(torch.rand(3, *m.obs_shape))"
            ),
            2,
            ["uint8"],
        ),
        Attempt(
            "recurrent act episode_start of the wrong length",
            _catching(
                "import torch\nfrom rl_lightning import PPOModule\nm = PPOModule(recurrent='lstm')\n"
                "m.act(torch.zeros(2, 4), episode_start=torch.zeros(3, dtype=torch.bool))"
            ),
            2,
            ["episode_start"],
        ),
        Attempt(
            "export a recurrent policy",
            _python(
                "from rl_lightning import PPOModule\nm = PPOModule(recurrent='lstm')\n"
                "with warnings.catch_warnings(record=True) as seen:\n    warnings.simplefilter('always')\n"
                "    m.export_policy('p.pt2'); m.export_policy('p.onnx')\n"
                "assert not seen, [str(w.message) for w in seen]"
            ),
            0,
        ),
        Attempt(
            "evaluate FrozenLake as a gymnasium Env",
            _python(
                "import gymnasium as gym\nfrom rl_lightning import PPOModule, evaluate_policy\n"
                "evaluate_policy(PPOModule(env_id='FrozenLake-v1'), gym.make('FrozenLake-v1'), num_episodes=2)"
            ),
            0,
        ),
        Attempt(
            "evaluate CliffWalking (no time limit)",
            _python(
                "import torch\nfrom rl_lightning import evaluate_policy\n"
                "up = lambda obs: torch.zeros(len(obs), dtype=torch.int64)\n"
                "evaluate_policy(up, 'CliffWalking-v1', num_episodes=4)"
            ),
            0,
            ["no time limit", "cut at"],
            timeout=20,
        ),
        Attempt(
            "async gymnasium envs, a normal exit",
            [
                _script("train_ppo.py"),
                *TINY_PPO,
                "--max_steps",
                "4",
                "--env_backend",
                "gymnasium",
                "--env_kwargs",
                '{"vectorization_mode": "async"}',
            ],
            0,
        ),
        Attempt(
            "three runs at once in one directory",
            ["PARALLEL3", _script("train_ppo.py"), *TINY_PPO, "--max_steps", "2"],
            0,
            check=_versions_distinct,
        ),
        Attempt("Ctrl-C mid-fit", [_script("train_ppo.py"), *LONG], 130, ["Ctrl-C"], signals=[(2.0, signal.SIGINT)]),
        Attempt(
            "SIGTERM, and another 50 ms later",
            [_script("train_ppo.py"), *LONG],
            143,
            ["SIGTERM"],
            signals=[(2.0, signal.SIGTERM), (0.05, signal.SIGTERM)],
        ),
        Attempt(
            "SIGTERM to the group of async gymnasium envs",
            [
                _script("train_ppo.py"),
                *LONG,
                "--env_backend",
                "gymnasium",
                "--env_kwargs",
                '{"vectorization_mode": "async"}',
            ],
            143,
            ["SIGTERM"],
            signals=[(2.0, signal.SIGTERM)],
            group=True,
        ),
        Attempt(
            "SIGTERM to a DDP run",
            [_script("train_ppo.py"), *LONG, "--devices", "2", "--strategy", "ddp"],
            143,
            ["SIGTERM"],
            signals=[(2.0, signal.SIGTERM)],
            timeout=60,
        ),
        *_issue_31_attempts(),
    ]


def _argv(attempt: Attempt, scripts: Path) -> list[str]:
    argv = []
    for token in attempt.argv:
        if token.startswith("SCRIPT:"):
            token = str(scripts / "scripts" / token[7:])
        elif token.startswith("EXAMPLE:"):
            token = str(scripts / "examples" / token[8:])
        elif token.startswith("CONFIG:"):
            token = str(scripts / "configs" / token[7:])
        argv.append(token)
    return argv


def run(attempt: Attempt, directory: Path, scripts: Path, shown: list[str] | None = None) -> str:
    """The attempt's class: good, poor, silently wrong, crash or hang (``shown``: gets its output appended)."""
    argv = _argv(attempt, scripts)
    (directory / MARKER).unlink(missing_ok=True)  # left by an earlier attempt
    token = uuid.uuid4().hex  # in the environment of every process of this attempt (its leftovers)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "RL_AUDIT_ATTEMPT": token}
    start = dict(cwd=directory, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if argv[0] == "PARALLEL3":  # in a directory of their own
        directory = directory / "parallel"
        directory.mkdir(exist_ok=True)
        start["cwd"] = directory
        processes = [subprocess.Popen([sys.executable, *argv[1:], "--seed", str(seed)], **start) for seed in range(3)]
        outputs = [process.communicate(timeout=attempt.timeout) for process in processes]
        codes = {process.returncode for process in processes}
        text = "".join(out + err for out, err in outputs)
        if "Traceback" in text:
            return "crash"
        return "good" if codes == {0} and attempt.check(directory, text) else "silently wrong"
    process = subprocess.Popen([sys.executable, *argv], start_new_session=attempt.group, **start)
    try:
        if attempt.signals:
            line = process.stdout.readline()
            if " on Acrobot-v1, " not in line:
                process.kill()
                return "crash"
            for delay, signum in attempt.signals:
                time.sleep(delay)
                (os.killpg(process.pid, signum) if attempt.group else process.send_signal(signum))
        out, err = process.communicate(timeout=attempt.timeout)
    except subprocess.TimeoutExpired:
        _kill_leftovers(token)
        process.kill()
        process.communicate()
        return "hang"
    finally:
        _kill_leftovers(token)  # DDP workers that outlived their launcher
    text = out + err
    if shown is not None:
        shown.append(text)
    if attempt.check_first and not attempt.check(directory, text):
        return "silently wrong"
    if process.returncode < 0:
        return "crash"  # killed by a signal
    if "Traceback" in text:
        return "crash"
    if process.returncode == 0 and attempt.code != 0:
        return "silently wrong"
    if attempt.check is not None and not attempt.check(directory, text):
        return "silently wrong"
    if process.returncode != attempt.code or not all(word in text for word in attempt.words):
        return "silently wrong" if attempt.code == 0 and process.returncode == 0 else "poor"
    return "good"


def _kill_leftovers(token: str) -> None:
    """SIGKILL the processes an attempt started that still run: those with its token in their environment
    (only this attempt's, never another process of the same name)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone, or not ours to read
            continue
        if f"RL_AUDIT_ATTEMPT={token}".encode() in environ.split(b"\0"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", help="run the attempts whose names hold one of these words")
    parser.add_argument("--tries", type=int, default=1, help="tries of each signal attempt (default: 1)")
    parser.add_argument(
        "--scripts", type=Path, default=ROOT, help="the checkout whose scripts/, examples/ and configs/ run"
    )
    parser.add_argument("--show", type=int, default=0, help="print the last N lines of each attempt's output")
    args = parser.parse_args()
    if args.tries < 1:
        parser.error(f"--tries must be at least 1, got {args.tries}")
    with tempfile.TemporaryDirectory() as temporary:
        directory = Path(temporary)
        subprocess.run([sys.executable, "-c", SETUP], cwd=directory, check=True, capture_output=True)
        counts: Counter[str] = Counter()
        for attempt in attempts():
            if args.only and not any(word in attempt.name for word in args.only):
                continue
            for _ in range(args.tries if attempt.signals else 1):
                shown: list[str] = []
                outcome = run(attempt, directory, args.scripts, shown)
                counts[outcome] += 1
                print(f"{outcome:15} {attempt.name}", flush=True)
                if args.show and shown:
                    print("".join(f"    | {line}\n" for line in shown[0].splitlines()[-args.show :]), end="")
    total = sum(counts.values())
    summary = ", ".join(f"{counts[name]} {name}" for name in ("good", "poor", "silently wrong", "crash", "hang"))
    print(f"{total} attempts: {summary}")


if __name__ == "__main__":
    main()
