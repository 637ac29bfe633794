"""The robustness audit of issue 21: bad input, bad files and signals against the public surface
(the CLI, the scripts, enjoy, plot_runs, the sweep, the Python API), each attempt classified.

    python tools/audit_robustness.py [--only NAME ...] [--tries N]

Run from the repository root; it uses the ``rl_lightning`` that Python imports (``PYTHONPATH=DIR`` to
audit another checkout, e.g. an older commit's worktree, with the same attempts) and the scripts of
``--scripts DIR`` (default: this checkout's). Each attempt is one of: ``good`` (the expected exit
status and message, no traceback), ``poor`` (refused, but with another status or a message that does
not name the problem), ``silently wrong`` (exit 0, or a wrong result, where an error or another
result was due), ``crash`` (a traceback), ``hang`` (no end within the attempt's time limit). Signal
attempts are timing-dependent: ``--tries`` repeats them and each try counts.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
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
    ]


def _argv(attempt: Attempt, scripts: Path) -> list[str]:
    argv = []
    for token in attempt.argv:
        if token.startswith("SCRIPT:"):
            token = str(scripts / "scripts" / token[7:])
        elif token.startswith("EXAMPLE:"):
            token = str(scripts / "examples" / token[8:])
        argv.append(token)
    return argv


def run(attempt: Attempt, directory: Path, scripts: Path) -> str:
    """The attempt's class: good, poor, silently wrong, crash or hang."""
    argv = _argv(attempt, scripts)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
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
        with_children = subprocess.run(["pkill", "-9", "-f", str(directory)], check=False)
        del with_children
        process.kill()
        process.communicate()
        return "hang"
    finally:
        subprocess.run(["pkill", "-9", "-f", "--", "--devices 2"], check=False, capture_output=True)
    text = out + err
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", help="run the attempts whose names hold one of these words")
    parser.add_argument("--tries", type=int, default=1, help="tries of each signal attempt (default: 1)")
    parser.add_argument("--scripts", type=Path, default=ROOT, help="the checkout whose scripts/ and examples/ run")
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
                outcome = run(attempt, directory, args.scripts)
                counts[outcome] += 1
                print(f"{outcome:15} {attempt.name}", flush=True)
    total = sum(counts.values())
    summary = ", ".join(f"{counts[name]} {name}" for name in ("good", "poor", "silently wrong", "crash", "hang"))
    print(f"{total} attempts: {summary}")


if __name__ == "__main__":
    main()
