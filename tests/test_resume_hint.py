"""Issue 37: a resume hint that tells the truth. The report's "(resume: --ckpt_path last)" only where that flag
picks the run's own file; ``--ckpt_path last`` says which checkpoint it resumes, takes the settings not given
from it and refuses one whose given settings differ (another run); best checkpoints are named by env steps,
the charts' x-axis, after a resume too; counts read "1 env", "3,500 updates"."""

import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from rl_lightning import PPOModule, VPGModule, scripting
from rl_lightning.checkpoints import EnvStepCheckpoint
from rl_lightning.cli import ScriptCLI, make_cli
from rl_lightning.scripting import counted, report, start_line

ROOT = Path(__file__).resolve().parents[1]
TINY_VPG_CLI = [
    "--trainer.max_steps=2",
    "--model.init_args.num_envs=4",
    "--model.init_args.num_steps_per_rollout=16",
    "--trainer.enable_progress_bar=false",
]
TINY_PPO = ["--num_envs", "2", "--num_steps_per_rollout", "16", "--update_epochs", "1", "--num_minibatches", "1"]


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the scripts' runs go to ./lightning_logs
    monkeypatch.setattr(sys, "argv", ["rl-lightning"])
    num_threads = torch.get_num_threads()
    yield
    torch.set_num_threads(num_threads)


def _script(module_class, *argv: str) -> ScriptCLI:
    every = {"eval_every_n_env_steps": 32, "video_every_n_env_steps": 10**6}
    return ScriptCLI(module_class, None, max_steps=2, **every, args=argv)


def _fit(module_class, *argv: str) -> ScriptCLI:
    cli = _script(module_class, "--no_video", *argv)
    cli.trainer.fit(cli.model, ckpt_path=cli.ckpt_path)
    return cli


def test_a_cli_run_that_saved_no_last_ckpt_does_not_send_you_to_an_older_run(tmp_path, capsys):
    """Run A (seed 1) leaves last.ckpt; run B (seed 2, a config whose resumable checkpoint is latest.ckpt) must
    not print "--ckpt_path last", which would resume A: it names its own file; and "--ckpt_path last" with B's
    settings is refused, naming the differing seed and A's file."""
    config = (ROOT / "configs" / "vpg_cartpole.yaml").read_text()
    assert config.count("filename: last") == 1
    latest = tmp_path / "latest.yaml"
    latest.write_text(config.replace("filename: last", "filename: latest"))
    root = f"--trainer.default_root_dir={tmp_path}"
    make_cli(["fit", "--config", str(ROOT / "configs" / "vpg_cartpole.yaml"), *TINY_VPG_CLI, root])
    runs = tmp_path / "lightning_logs" / "VPG-CartPole-v1"
    run_a = runs / "version_0" / "checkpoints" / "last.ckpt"
    assert f"  last checkpoint:  {run_a}  (resume: --ckpt_path last)" in capsys.readouterr().out.splitlines()

    seed_2 = "--model.init_args.seed=2"
    make_cli(["fit", "--config", str(latest), *TINY_VPG_CLI, seed_2, root])
    run_b = runs / "version_1" / "checkpoints" / "latest.ckpt"
    assert f"  last checkpoint:  {run_b}  (resume: --ckpt_path {run_b})" in capsys.readouterr().out.splitlines()

    with pytest.raises(SystemExit) as exit_info:
        make_cli(["fit", "--config", str(latest), *TINY_VPG_CLI, seed_2, root, "--ckpt_path=last"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"--ckpt_path last is {run_a} (VPGModule on CartPole-v1 at env step 128, saved " in err
    assert "--model.init_args.seed 2 (checkpoint: 1)" in err
    cli = make_cli(["fit", "--config", str(latest), *TINY_VPG_CLI, root, "--ckpt_path=last"])  # A's settings: fine
    assert cli.trainer.ckpt_path == str(run_a)
    assert capsys.readouterr().out.startswith(f"--ckpt_path last: resuming {run_a} (VPGModule on CartPole-v1 at ")


def test_ckpt_path_last_names_its_checkpoint_takes_the_settings_not_given_and_refuses_other_given_ones(capsys):
    """A script run with --num_envs 2 --lr 1e-3; `--ckpt_path last` alone resumes it with its settings (said
    before anything trains), `--ckpt_path last --lr 3e-4 --seed 2` is another run: exit 2 naming both."""
    _fit(PPOModule, *TINY_PPO, "--lr", "1e-3")
    last = "lightning_logs/PPO-CartPole-v1/version_0/checkpoints/last.ckpt"
    capsys.readouterr()
    cli = _script(PPOModule, "--ckpt_path", "last", "--max_steps", "4")
    assert cli.ckpt_path == last
    assert (cli.model.hparams.num_envs, cli.model.hparams.num_steps_per_rollout) == (2, 16)  # not the defaults
    assert cli.model.hparams.lr == 1e-3 and cli.model.hparams.update_epochs == 1
    out = capsys.readouterr().out
    assert f"--ckpt_path last: resuming {last} (PPOModule on CartPole-v1 at env step 64, saved " in out

    with pytest.raises(SystemExit) as exit_info:
        _script(PPOModule, "--ckpt_path", "last", "--lr", "3e-4", "--seed", "2", "--compile", "false")
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"--ckpt_path last is {last} (PPOModule on CartPole-v1 at env step 64" in err
    assert "--lr 0.0003 (checkpoint: 0.001), --seed 2 (checkpoint: 1)." in err  # compile may change: not named
    assert f"pass its path (--ckpt_path {last})" in err
    cli = _script(PPOModule, "--ckpt_path", last, *TINY_PPO, "--lr", "3e-4")  # its path: the flags win, as before
    assert cli.ckpt_path == last and cli.model.hparams.lr == 3e-4


def test_a_scripts_ckpt_path_last_counts_a_config_value_equal_to_the_default_as_given(capsys):
    """A script run with --lr 1e-3; `--config C --ckpt_path last`, C saying lr: 0.0025 (PPOModule's default), is
    another run: exit 2 naming --lr (it counted as not given: the run went on with the checkpoint's 1e-3)."""
    _fit(PPOModule, *TINY_PPO, "--lr", "1e-3")
    Path("default_lr.yaml").write_text("lr: 0.0025\n")
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        _script(PPOModule, "--config", "default_lr.yaml", "--ckpt_path", "last", "--max_steps", "4")
    assert exit_info.value.code == 2
    assert "a run with other settings than the ones given: --lr 0.0025 (checkpoint: 0.001)." in capsys.readouterr().err


def test_best_checkpoints_are_named_by_env_steps_after_a_resume_too():
    """VPG: 4 envs x 16 steps a rollout (one update); 2 updates, then resumed to 4: the resumed run's best
    checkpoint says the env steps it holds (the charts' x-axis), not the epochs and updates of the run."""
    tiny = ["--num_envs", "4", "--num_steps_per_rollout", "16"]
    _fit(VPGModule, *tiny)
    _fit(VPGModule, *tiny, "--ckpt_path", "last", "--max_steps", "4")
    names = [path.name for path in Path("lightning_logs/VPG-CartPole-v1/version_1/checkpoints").glob("*.ckpt")]
    best = [name for name in names if name.startswith("best-")]
    assert sorted(names) == sorted([*best, "last.ckpt"]) and len(best) == 1
    assert re.fullmatch(r"best-env_steps=(128|192|256)\.ckpt", best[0]), best
    saved = torch.load(Path("lightning_logs/VPG-CartPole-v1/version_1/checkpoints") / best[0], weights_only=True)
    assert best[0] == f"best-env_steps={saved['rl_lightning']['env_steps']}.ckpt"
    # A run from before (Lightning's ModelCheckpoint) restores its state into EnvStepCheckpoint and back.
    settings = dict(monitor="eval/episodic_return", mode="max")
    assert EnvStepCheckpoint(**settings).state_key == ModelCheckpoint(**settings).state_key


def test_counts_have_thousands_separators_and_agree_with_their_noun():
    assert [counted(1, "env"), counted(3500, "update"), counted(2, "process", "processes")] == [
        "1 env",
        "3,500 updates",
        "2 processes",
    ]
    cli = _script(PPOModule, "--num_envs", "1", "--max_steps", "3500", "--no_video")
    assert ", 1 env: up to 7,008 env steps (3,500 updates), " in start_line(cli.trainer, cli.model)
    trainer = SimpleNamespace(
        callbacks=[], checkpoint_callbacks=[], max_steps=3500, global_step=3500, loggers=[], logger=None
    )
    module = SimpleNamespace(env_steps=1, hparams=SimpleNamespace(env_id="CartPole-v1"))
    assert report(trainer, module, 1.0).splitlines()[0].endswith("1.0 s wall, 1 env step, 3,500 updates")


def test_a_stop_says_resume_with_last_only_for_a_run_that_wrote_its_own_file(monkeypatch):
    monkeypatch.setattr(scripting, "_training_run", None)  # stopped while starting up: nothing of this run saved
    assert scripting._stop_resume_hint() == " before training started: this run wrote no checkpoint"
    _fit(PPOModule, *TINY_PPO)
    assert scripting._stop_resume_hint() == ": resume with --ckpt_path last"
