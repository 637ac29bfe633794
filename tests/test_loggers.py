"""Every chart and the grid video reach whichever loggers a run has, at env steps: TensorBoard, W&B (offline),
MLflow (a local store), CSV, and a logger of one's own without a directory; ``--logger`` on the scripts and the
CLI. Read back from each library's own files."""

import csv
import hashlib
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
from lightning.pytorch.loggers import CSVLogger, Logger, MLFlowLogger, TensorBoardLogger, WandbLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rl_lightning import VPGModule
from rl_lightning.callbacks.video import GridVideoLogger
from rl_lightning.cli import ScriptCLI, make_cli
from rl_lightning.loggers import logger_names, logger_spellings

wandb = pytest.importorskip("wandb")
mlflow = pytest.importorskip("mlflow")
from mlflow.tracking import MlflowClient  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
#: 16 envs x 60 steps: a rollout is 960 env steps; 3 updates log at 960, 1,920 and 2,880, and a clip is due at each
#: (every 1,000 env steps, the first at the first update).
ENV_STEPS = [960, 1920, 2880]
QUIET_WANDB = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_CONSOLE": "off"}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def wandb_records(run_dir: Path) -> list:
    """The records of an offline W&B run's ``run-<id>.wandb`` file (W&B's LevelDB-style log: a 7-byte file header,
    32 KiB blocks of records with a 7-byte header each, a record split over blocks as first/middle/last)."""
    import time

    from wandb.proto import wandb_internal_pb2

    for _ in range(300):  # W&B's service writes the file in another process: on a busy machine it can lag
        files = list(run_dir.glob("run-*.wandb"))
        if files:
            break
        time.sleep(0.2)
    assert files, f"no run-*.wandb in {run_dir}: {sorted(path.name for path in run_dir.iterdir())}"
    data = files[0].read_bytes()
    assert data[:4] == b":W&B"
    block, position, parts, records = 32768, 7, b"", []
    while position + 7 <= len(data):
        if block - position % block < 7:  # a block's tail too short for a header is padding
            position += block - position % block
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        if kind == 0:  # zero padding to the block's end
            position += block - position % block
            continue
        parts += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):  # a full record, or a split record's last part
            record = wandb_internal_pb2.Record()
            record.ParseFromString(parts)
            records.append(record)
            parts = b""
    return records


def wandb_history(run_dir: Path) -> list[dict]:
    """The rows an offline W&B run logged (``run.log`` calls), as dicts."""
    return [
        {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
        for record in wandb_records(run_dir)
        if record.WhichOneof("record_type") == "history"
    ]


def csv_charts(path: Path) -> dict[tuple[str, int], float]:
    """``{(name, step): value}`` of the charts and losses in a CSVLogger's ``metrics.csv``."""
    with path.open() as file:
        rows = list(csv.DictReader(file))
    return {
        (name, int(row["step"])): float(value)
        for row in rows
        for name, value in row.items()
        if name.startswith(("charts/", "losses/")) and value != ""
    }


class Recorder(Logger):
    """A logger of one's own with no directory at all (no ``log_dir``, no ``save_dir``): it records."""

    def __init__(self):
        super().__init__()
        self.logged: list[tuple[int, dict]] = []

    name, version = "recorder", 0

    def log_metrics(self, metrics, step=None):
        self.logged.append((step, dict(metrics)))

    def log_hyperparams(self, params, *args, **kwargs):
        pass


@pytest.fixture(scope="module")
def four_loggers(tmp_path_factory):
    """One VPG fit with W&B (offline, first: it has no log_dir), CSV, MLflow (a local file store) and TensorBoard,
    and a grid video every 1,000 env steps."""
    root = tmp_path_factory.mktemp("loggers")
    with pytest.MonkeyPatch.context() as patch:
        # MLflow 3 refuses a new file store unless told that it is wanted (the scripts use a SQLite store).
        settings = {**QUIET_WANDB, "WANDB_DIR": str(root / "wandb_dir"), "MLFLOW_ALLOW_FILE_STORE": "true"}
        for name, value in settings.items():
            patch.setenv(name, value)
        (root / "wandb_dir").mkdir()
        if wandb.run is not None:  # a run left in progress in this process would be reused by the WandbLogger
            wandb.finish()
        loggers = [
            WandbLogger(save_dir=str(root / "wandb_dir"), project="rl_lightning_tests"),
            CSVLogger(root / "csv", name="run"),
            MLFlowLogger(experiment_name="loggers", tracking_uri=f"file:{root / 'mlruns'}"),
            TensorBoardLogger(root / "tb", name="run"),
        ]
        video = GridVideoLogger(every_n_env_steps=1000, num_steps=40)
        trainer = L.Trainer(
            max_steps=3,
            logger=loggers,
            callbacks=[video],
            enable_progress_bar=False,
            enable_checkpointing=False,
            enable_model_summary=False,
        )
        trainer.fit(VPGModule(num_envs=16, num_steps_per_rollout=60, seed=0))
        run_settings = loggers[0].experiment.settings
        wandb_dir = Path(run_settings.sync_dir)
        assert wandb_dir.is_relative_to(root / "wandb_dir"), (
            f"the W&B run is in {wandb_dir} (root_dir {run_settings.root_dir!r}), not under {root / 'wandb_dir'}"
        )
        wandb.finish()  # flushes the offline run's file
    return {"root": root, "loggers": loggers, "video": video, "wandb_dir": wandb_dir, "trainer": trainer}


def test_csv_gets_every_chart_at_env_steps_and_a_copy_of_each_video(four_loggers):
    csv_logger: CSVLogger = four_loggers["loggers"][1]
    charts = csv_charts(Path(csv_logger.log_dir) / "metrics.csv")
    assert sorted({step for _, step in charts}) == ENV_STEPS
    assert [charts["charts/env_steps", step] for step in ENV_STEPS] == ENV_STEPS
    assert {name for name, _ in charts} >= {"charts/episodic_return", "charts/SPS", "losses/policy_objective"}
    # The MP4s go to the first logger with a directory (W&B's save_dir); CSV's log_dir holds identical copies.
    video = four_loggers["video"]
    assert [path.name for path in video.video_paths] == [f"step_{step}.mp4" for step in ENV_STEPS]
    assert video.video_dir == four_loggers["root"] / "wandb_dir" / "videos"
    for path in video.video_paths:
        copy = Path(csv_logger.log_dir) / "videos" / path.name
        assert copy.stat().st_size > 1000 and _sha256(copy) == _sha256(path)


def test_tensorboard_output_is_as_before_scalars_at_env_steps_and_the_gif(four_loggers):
    csv_logger, tensorboard = four_loggers["loggers"][1], four_loggers["loggers"][3]
    charts = csv_charts(Path(csv_logger.log_dir) / "metrics.csv")
    events = EventAccumulator(tensorboard.log_dir, size_guidance={"images": 0, "scalars": 0})
    events.Reload()
    scalars = {(tag, event.step): event.value for tag in events.Tags()["scalars"] for event in events.Scalars(tag)}
    assert scalars.keys() == charts.keys()
    assert all(scalars[key] == pytest.approx(charts[key], rel=1e-6) for key in charts)
    # TensorBoard is not the first logger here, and still gets the GIF at the clips' env steps.
    assert [image.step for image in events.Images("videos/grid")] == ENV_STEPS
    assert all(image.encoded_image_string[:6] == b"GIF89a" for image in events.Images("videos/grid"))


def test_wandb_gets_every_chart_and_the_videos_at_env_steps(four_loggers):
    """W&B's x-axis is Lightning's trainer/global_step, which holds the env step (the step every chart is logged at)."""
    csv_logger = four_loggers["loggers"][1]
    charts = csv_charts(Path(csv_logger.log_dir) / "metrics.csv")
    rows = wandb_history(four_loggers["wandb_dir"])
    logged = {
        (name, row["trainer/global_step"]): value
        for row in rows
        for name, value in row.items()
        if name.startswith(("charts/", "losses/"))
    }
    assert logged.keys() == charts.keys()
    assert all(logged[key] == pytest.approx(charts[key], rel=1e-9) for key in charts)
    videos = [row for row in rows if "videos/grid/videos" in row]
    assert [row["trainer/global_step"] for row in videos] == ENV_STEPS
    local = [_sha256(path) for path in four_loggers["video"].video_paths]
    assert [row["videos/grid/videos"][0]["sha256"] for row in videos] == local  # the very MP4s, as wandb.Video
    media = four_loggers["wandb_dir"] / "files"
    assert sorted(_sha256(media / row["videos/grid/videos"][0]["path"]) for row in videos) == sorted(local)
    assert [row["videos/grid/captions"][0].split(":")[0] for row in videos] == [
        f"env steps {step:,}" for step in ENV_STEPS
    ]


def test_mlflow_gets_every_chart_at_env_steps_and_each_video_as_an_mp4_artifact(four_loggers, tmp_path):
    csv_logger, mlflow_logger = four_loggers["loggers"][1], four_loggers["loggers"][2]
    charts = csv_charts(Path(csv_logger.log_dir) / "metrics.csv")
    client = MlflowClient(f"file:{four_loggers['root'] / 'mlruns'}")
    run_id = mlflow_logger.run_id
    logged = {
        (name, metric.step): metric.value
        for name in {name for name, _ in charts}
        for metric in client.get_metric_history(run_id, name)
    }
    assert logged.keys() == charts.keys()
    assert all(logged[key] == pytest.approx(charts[key], rel=1e-9) for key in charts)
    artifacts = sorted(info.path for info in client.list_artifacts(run_id, "videos"))
    assert artifacts == sorted(f"videos/step_{step}.{kind}" for step in ENV_STEPS for kind in ("mp4", "txt"))
    for path in four_loggers["video"].video_paths:
        downloaded = Path(client.download_artifacts(run_id, f"videos/{path.name}", str(tmp_path)))
        assert _sha256(downloaded) == _sha256(path)
    caption = Path(client.download_artifacts(run_id, "videos/step_960.txt", str(tmp_path))).read_text()
    assert caption.startswith("env steps 960: rollout, mean first-episode return ")


def test_a_logger_without_any_directory_first_and_alone_gets_the_charts_and_no_crash(tmp_path):
    """The old crash (the video logger read trainer.logger.log_dir): the videos go to default_root_dir/videos."""
    recorder = Recorder()
    video = GridVideoLogger(every_n_env_steps=1000, num_steps=20)
    trainer = L.Trainer(
        max_steps=2,
        logger=recorder,
        callbacks=[video],
        default_root_dir=tmp_path,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    trainer.fit(VPGModule(num_envs=16, num_steps_per_rollout=60, seed=0))
    charts = [(step, metrics) for step, metrics in recorder.logged if "charts/env_steps" in metrics]
    assert [step for step, _ in charts] == ENV_STEPS[:2]
    assert [metrics["charts/env_steps"] for _, metrics in charts] == ENV_STEPS[:2]
    assert video.video_paths == [tmp_path / "videos" / "step_960.mp4", tmp_path / "videos" / "step_1920.mp4"]
    assert all(path.stat().st_size > 1000 for path in video.video_paths)


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--logger", "wandb"], ["--logger", "wandb"]),
        (["--logger", "tensorboard", "wandb", "--lr", "0.1"], ["--logger", "[tensorboard,wandb]", "--lr", "0.1"]),
        (["--logger", "tensorboard,wandb"], ["--logger", "[tensorboard,wandb]"]),
        (["--logger=csv,mlflow"], ["--logger", "[csv,mlflow]"]),
        (["--logger", "[csv,wandb]"], ["--logger", "[csv,wandb]"]),
    ],
)
def test_logger_spellings(argv, expected):
    assert logger_spellings(argv) == expected


def test_logger_names_are_lightnings_in_a_fixed_order_and_a_typo_names_the_choices(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert logger_names(None) == ["tensorboard"]
    assert logger_names(["mlflow", "Tensorboard,wandb", "csv"]) == ["tensorboard", "csv", "wandb", "mlflow"]
    with pytest.raises(ValueError, match="'wanb'; choose from tensorboard, wandb, mlflow, csv"):
        logger_names("wanb")


def test_a_missing_extra_is_a_usage_error_naming_it_before_any_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if not installed
    with pytest.raises(SystemExit) as exit_:
        ScriptCLI(
            VPGModule,
            None,
            max_steps=1,
            eval_every_n_env_steps=1000,
            video_every_n_env_steps=1000,
            args=["--logger", "tensorboard", "wandb", "--default_root_dir", str(tmp_path)],
        )
    assert exit_.value.code == 2
    assert "--logger wandb needs the wandb package, which is not installed: pip install 'rl_lightning[wandb]'" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "lightning_logs").exists()


def test_cli_fit_with_mlflow_alone_keeps_config_checkpoints_and_videos_in_the_run_directory(
    tmp_path, monkeypatch, capsys
):
    """MLflow first and alone: trainer.log_dir is nothing, yet config.yaml, the checkpoints and the videos are in
    lightning_logs/<run>/version_0 (so --ckpt_path last finds them), and the report names the MLflow run."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"file:{tmp_path / 'mlruns'}")
    monkeypatch.setattr(sys, "argv", ["rl-lightning"])  # the command line is args alone
    cli = make_cli(
        [
            "fit",
            "--config",
            str(ROOT / "configs" / "vpg_cartpole.yaml"),
            "--trainer.max_steps=2",
            "--model.init_args.num_envs=8",
            "--model.init_args.num_steps_per_rollout=20",
            "--trainer.enable_progress_bar=false",
            f"--trainer.default_root_dir={tmp_path}",
            "--logger",
            "mlflow",
        ]
    )
    run_dir = tmp_path / "lightning_logs" / "VPG-CartPole-v1" / "version_0"
    assert (run_dir / "config.yaml").is_file() and (run_dir / "checkpoints" / "last.ckpt").is_file()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith(f"; logs in {run_dir}")
    logger = cli.trainer.logger
    assert isinstance(logger, MLFlowLogger) and not any("TensorBoard logs:" in line for line in lines)
    assert f"  MLflow run:       {logger.run_id} in file:{tmp_path / 'mlruns'}" in "\n".join(lines)
    client = MlflowClient(f"file:{tmp_path / 'mlruns'}")
    assert client.get_run(logger.run_id).info.run_name == "version_0"
    assert [metric.step for metric in client.get_metric_history(logger.run_id, "charts/env_steps")] == [160, 320]


@pytest.mark.slow
def test_a_script_run_with_wandb_mlflow_and_csv_logs_to_each_and_says_where(tmp_path):
    """``--logger wandb`` crashed every script with a TypeError; now W&B (offline), MLflow (the run's own store)
    and CSV each get the charts and the video, and the report names each instead of TensorBoard."""
    # Not this process's W&B settings: an in-process run leaves some (its service's address) in os.environ.
    env = {name: value for name, value in os.environ.items() if not name.startswith(("WANDB_", "MLFLOW_"))}
    env.update(QUIET_WANDB)
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "train_vpg.py"), "--max_steps", "2", "--logger", "wandb,mlflow,csv"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = Path("lightning_logs/VPG-CartPole-v1/version_0")
    lines = result.stdout.splitlines()
    assert lines[0].endswith(f"; logs in {run_dir}")
    assert not any("TensorBoard logs:" in line for line in lines)
    assert not list((tmp_path / run_dir).glob("events.out.tfevents.*"))
    assert f"  last checkpoint:  {run_dir}/checkpoints/last.ckpt  (resume: --ckpt_path last)" in lines
    assert f"  videos:           {run_dir}/videos (1 mp4)" in lines
    assert f"  CSV metrics:      {run_dir}/metrics.csv" in lines
    (wandb_line,) = [line for line in lines if line.startswith("  W&B run:          ")]
    (mlflow_line,) = [line for line in lines if line.startswith("  MLflow run:       ")]
    done = next(line for line in lines if line.startswith("done: "))
    eval_return = float(done.split("greedy eval return ")[1].split()[0])

    wandb_dir = tmp_path / wandb_line.split()[2]
    assert wandb_dir.parent == tmp_path / run_dir / "wandb"
    rows = wandb_history(wandb_dir)
    evals = [row for row in rows if "eval/episodic_return" in row]
    assert evals[-1]["trainer/global_step"] == 32_000 and round(evals[-1]["eval/episodic_return"], 1) == eval_return
    (clip,) = [row for row in rows if "videos/grid/videos" in row]
    assert clip["trainer/global_step"] == 16_000
    assert clip["videos/grid/videos"][0]["sha256"] == _sha256(tmp_path / run_dir / "videos" / "step_16000.mp4")

    run_id, uri = mlflow_line.split()[2], mlflow_line.split()[4]
    assert uri == f"sqlite:///{(tmp_path / run_dir / 'mlflow.db').resolve()}"
    client = MlflowClient(uri)
    history = client.get_metric_history(run_id, "eval/episodic_return")
    assert history[-1].step == 32_000 and round(history[-1].value, 1) == eval_return
    assert [info.path for info in client.list_artifacts(run_id, "videos")] == [
        "videos/step_16000.mp4",
        "videos/step_16000.txt",
    ]
    with (tmp_path / run_dir / "metrics.csv").open() as file:
        rows = [row for row in csv.DictReader(file) if row.get("eval/episodic_return")]
    assert int(rows[-1]["step"]) == 32_000 and round(float(rows[-1]["eval/episodic_return"]), 1) == eval_return


def test_wandb_without_an_account_or_offline_mode_is_one_line_saying_how_to_log_in(tmp_path):
    """No API key, no terminal to ask for one, W&B online: one line and exit 2 before any directory (W&B's
    UsageError traceback at the first metric before); WANDB_MODE=offline passes that check."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("WANDB_") and key not in ("NETRC",)}
    env.update(HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(tmp_path / "home" / ".config"))
    script = str(ROOT / "scripts" / "train_vpg.py")
    command = [sys.executable, script, "--logger", "wandb", "--max_steps", "1", "--no_video"]
    result = subprocess.run(command, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert "--logger wandb: no W&B API key is set up on this machine" in result.stderr
    assert "`wandb login`" in result.stderr and "WANDB_MODE=offline" in result.stderr
    assert not (tmp_path / "lightning_logs").exists()
    offline = subprocess.run(
        [sys.executable, "-c", "from rl_lightning.loggers import logger_names; print(logger_names('wandb'))"],
        env={**env, "WANDB_MODE": "offline"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
    )
    assert offline.stdout.strip() == "['wandb']", offline.stderr[-2000:]
