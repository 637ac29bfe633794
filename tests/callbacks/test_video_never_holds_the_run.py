"""GridVideoLogger never holds a run (issue 46, items 9 and 12): the end of training waits a bounded time for a clip
still being made, a stop request ends the run within seconds whatever the clip does, and MuJoCo rendering in software
is detected and lightened (or the clips are off), saying so in one line."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import lightning as L
import pytest

from rl_lightning import VPGModule
from rl_lightning.callbacks.video import GridVideoLogger
from rl_lightning.envs import CartPole
from rl_lightning.envs.gym_adapter import GymnasiumVectorEnv

ROOT = Path(__file__).resolve().parents[2]
_NOTE = "MuJoCo renders in software here (MUJOCO_GL=egl: OpenGL renderer 'llvmpipe (LLVM 15)', no GPU)"


def _trainer(tmp_path, callbacks, max_steps):
    return L.Trainer(
        max_steps=max_steps,
        default_root_dir=tmp_path,
        callbacks=callbacks,
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )


class _EndTime(L.Callback):
    """When training's last step ended (before the video logger's on_train_end, which comes after it)."""

    def on_train_end(self, trainer, pl_module):
        self.at = time.monotonic()


@pytest.fixture
def said(monkeypatch) -> list[str]:
    """What GridVideoLogger says (its ``rank_zero_info`` lines), recorded where it says them: Lightning's logging
    state in this process (a logger that stopped propagating to the root, or a rank an earlier test's Trainer set)
    does not decide what the test sees, as it did with caplog under pytest-xdist."""
    from rl_lightning.callbacks import video as video_module

    lines: list[str] = []
    original = video_module.rank_zero_info

    def record(message, *args, **kwargs):
        lines.append(str(message))
        original(message, *args, **kwargs)

    monkeypatch.setattr(video_module, "rank_zero_info", record)
    return lines


def _info_lines(said) -> list[str]:
    return [line for line in said if "GridVideoLogger" in line]


def test_the_fit_ends_within_seconds_of_its_budget_while_a_slow_clip_draws(tmp_path, monkeypatch, said):
    """A native env whose draw takes 1 s per chunk of 16 frames: the clip needs ~16 s, final_clip_timeout=1: the
    fit ends ~1 s after the budget (plus at most one chunk for the thread to notice), the clip is abandoned."""
    draw = CartPole.draw

    def slow_draw(self, obs):
        time.sleep(1.0)
        return draw(self, obs)

    monkeypatch.setattr(CartPole, "draw", slow_draw)
    end, video = _EndTime(), GridVideoLogger(every_n_env_steps=1, num_steps=256, frame_stride=1, final_clip_timeout=1)
    _trainer(tmp_path, [end, video], max_steps=1).fit(VPGModule(num_envs=16, num_steps_per_rollout=256))
    seconds_after_budget = time.monotonic() - end.at
    assert seconds_after_budget < 4.0
    assert video.video_paths == [] and video.abandoned_env_steps == [16 * 256]
    (line,) = [line for line in _info_lines(said) if "abandoned" in line]
    assert "abandoned the clip of env step 4,096" in line and "final_clip_timeout=1 s" in line


def test_a_clip_that_will_not_finish_in_time_is_abandoned_at_once(tmp_path, monkeypatch, said):
    """A gymnasium env whose render sleeps 0.2 s: 200 renders, ~40 s; final_clip_timeout=20: its pace says it
    cannot finish, so the fit ends within seconds rather than after 20 s."""
    render = GymnasiumVectorEnv.render

    def slow_render(self):
        time.sleep(0.2)
        return render(self)

    monkeypatch.setattr(GymnasiumVectorEnv, "render", slow_render)

    class LetItStart(L.Callback):  # a few frames in, so that its pace is known
        def on_train_end(self, trainer, pl_module):
            time.sleep(2.0)
            self.at = time.monotonic()

    end = LetItStart()
    video = GridVideoLogger(every_n_env_steps=1, num_steps=400, final_clip_timeout=20)
    module = VPGModule(env_id="MountainCar-v0", env_backend="gymnasium", num_envs=2, num_steps_per_rollout=4)
    _trainer(tmp_path, [end, video], max_steps=1).fit(module)
    assert time.monotonic() - end.at < 6.0  # 20 s if it waited for the timeout, ~40 s for the clip
    assert video.abandoned_env_steps == [8]
    (line,) = [line for line in _info_lines(said) if "abandoned" in line]
    assert "s more needed, over final_clip_timeout=20 s" in line


def test_a_clip_that_finishes_in_time_is_waited_for(tmp_path, monkeypatch):
    draw = CartPole.draw

    def slow_draw(self, obs):
        time.sleep(0.3)
        return draw(self, obs)

    monkeypatch.setattr(CartPole, "draw", slow_draw)
    video = GridVideoLogger(every_n_env_steps=1, num_steps=64, frame_stride=1, final_clip_timeout=30)
    _trainer(tmp_path, [video], max_steps=1).fit(VPGModule(num_envs=16, num_steps_per_rollout=64))
    assert [path.name for path in video.video_paths] == ["step_1024.mp4"] and video.abandoned_env_steps == []


_SCRIPT = textwrap.dedent(
    """
    import sys, time
    import torch
    torch.set_num_threads(1)
    import lightning as L
    from rl_lightning import VPGModule
    from rl_lightning.callbacks.video import GridVideoLogger
    from rl_lightning.envs import CartPole
    from rl_lightning.scripting import run_script

    draw = CartPole.draw
    calls = []

    def slow_draw(self, obs):  # the clip's draw: 1.5 s for each chunk of 16 frames, ~24 s the clip
        calls.append(1)
        if len(calls) == 2:  # the first call is the spec env's (one env, one frame)
            print("DRAWING", flush=True)
        time.sleep(1.5)
        return draw(self, obs)

    CartPole.draw = slow_draw

    def main():
        video = GridVideoLogger(every_n_env_steps=10**9, num_steps=256, frame_stride=1, final_clip_timeout=600)
        trainer = L.Trainer(max_steps=int(sys.argv[1]), default_root_dir=sys.argv[2], callbacks=[video], logger=False,
                            enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False)
        trainer.fit(VPGModule(num_envs=16, num_steps_per_rollout=256))
        print("FIT ENDED", flush=True)

    run_script(main)
    """
)


def _stop_during_the_clip(tmp_path, max_steps: int) -> tuple[int, float, str, str]:
    """Run the script above, SIGTERM it once its clip draws; its exit code, seconds from the signal to the exit,
    stdout and stderr."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, "-c", _SCRIPT, str(max_steps), str(tmp_path)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        lines = []
        for line in process.stdout:  # blocks until the clip draws (or the process ends)
            lines.append(line)
            if line.startswith("DRAWING"):
                break
        time.sleep(0.5)  # inside the slow draw
        process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        stdout, stderr = process.communicate(timeout=60)
        return process.returncode, time.monotonic() - signalled, "".join(lines) + stdout, stderr
    finally:
        if process.poll() is None:
            process.kill()


def test_a_sigterm_while_a_clip_draws_ends_a_script_run_within_seconds(tmp_path):
    """Training goes on while the clip draws (~24 s); SIGTERM: the run stops at its next step, the clip at its next
    frame, exit 143 within a few seconds (before: the clip's remaining ~20 s)."""
    returncode, seconds, stdout, stderr = _stop_during_the_clip(tmp_path, max_steps=10**6)
    assert returncode == 143, stderr[-3000:]
    assert seconds < 8.0, stderr[-3000:]
    assert "stopped by SIGTERM" in stderr and "FIT ENDED" not in stdout
    assert "GridVideoLogger: abandoned the clip of env step" in stderr and "the run stopped" in stderr


def test_a_sigterm_while_the_end_of_training_waits_for_a_clip_ends_the_run_within_seconds(tmp_path):
    """The budget (one update) is reached while the clip draws; final_clip_timeout=600: the SIGTERM abandons it."""
    returncode, seconds, _, stderr = _stop_during_the_clip(tmp_path, max_steps=1)
    assert returncode in (0, 143), stderr[-3000:]  # 0: after the budget, the run had finished
    assert seconds < 8.0, stderr[-3000:]
    assert "GridVideoLogger: abandoned the clip of env step 4,096" in stderr


# -- MuJoCo in software ---------------------------------------------------------------------------------------


def _mountain_car():
    return VPGModule(env_id="MountainCar-v0", env_backend="gymnasium", num_envs=2, num_steps_per_rollout=4)


def _as_if_mujoco_in_software(monkeypatch):
    import rl_lightning.callbacks.video as video_module

    monkeypatch.setattr(video_module, "is_mujoco_env_id", lambda env_id: True)
    monkeypatch.setattr(video_module, "software_rendering_note", lambda: _NOTE)


def test_software_rendering_off_means_no_clips_and_one_line_saying_why(tmp_path, monkeypatch, said):
    _as_if_mujoco_in_software(monkeypatch)
    video = GridVideoLogger(every_n_env_steps=1, num_steps=4, software_rendering="off")
    _trainer(tmp_path, [video], max_steps=3).fit(_mountain_car())
    assert video.video_paths == [] and video.training_seconds == []
    assert _info_lines(said) == [
        f"GridVideoLogger: {_NOTE}; no grid videos this run (software_rendering='off'; 'light' draws them cheaply, "
        "'full' as on a GPU)"
    ]


def test_software_rendering_light_says_what_it_does_once(tmp_path, monkeypatch, said):
    import rl_lightning.callbacks.video as video_module

    _as_if_mujoco_in_software(monkeypatch)
    lightened = []
    monkeypatch.setattr(
        video_module, "lighten_mujoco_rendering", lambda envs, max_side: lightened.append(max_side) or 1
    )
    video = GridVideoLogger(every_n_env_steps=8, num_steps=4)  # software_rendering="light", the default
    _trainer(tmp_path, [video], max_steps=3).fit(_mountain_car())
    assert len(video.video_paths) + len(video.skipped_env_steps) == 3 and lightened == [160] * len(video.video_paths)
    (line,) = [line for line in _info_lines(said) if "software" in line]
    assert line.startswith(f"GridVideoLogger: {_NOTE}: clips are drawn at 160 px without anti-aliasing")
    assert "32 frames a clip" in line and "software_rendering='full'" in line


def test_clip_envs_that_cannot_be_lightened_mean_no_clips_with_the_reason(tmp_path, monkeypatch):
    """Where the clip's envs render in other processes (Ray's, async) their rendering cannot be lightened."""
    _as_if_mujoco_in_software(monkeypatch)
    video = GridVideoLogger(every_n_env_steps=1, num_steps=4)
    with pytest.warns(UserWarning, match=r"render in other processes, where their rendering cannot be lightened"):
        _trainer(tmp_path, [video], max_steps=3).fit(_mountain_car())
    assert video.video_paths == []


def test_full_software_rendering_warns_of_its_cost(tmp_path, monkeypatch):
    _as_if_mujoco_in_software(monkeypatch)
    video = GridVideoLogger(every_n_env_steps=100, num_steps=4, software_rendering="full")
    with pytest.warns(UserWarning, match=r"clips render at full quality .*32 frames a clip at ~0.2 CPU s each"):
        _trainer(tmp_path, [video], max_steps=1).fit(_mountain_car())
    assert len(video.video_paths) == 1


def test_the_new_arguments_are_checked():
    with pytest.raises(ValueError, match=r"software_rendering must be one of 'light', 'full', 'off'; got 'fast'"):
        GridVideoLogger(software_rendering="fast")
    with pytest.raises(ValueError, match=r"final_clip_timeout must be a finite number in \[0.0, inf\], got -1"):
        GridVideoLogger(final_clip_timeout=-1)
    with pytest.raises(TypeError, match="final_clip_timeout must be a float, got str"):
        GridVideoLogger(final_clip_timeout="60")


def test_software_renderers_are_recognised_by_name():
    from rl_lightning.envs.mujoco_render import is_software_renderer

    assert is_software_renderer("llvmpipe (LLVM 15.0.6, 256 bits)")
    assert is_software_renderer("softpipe") and is_software_renderer("Google SwiftShader")
    assert not is_software_renderer("NVIDIA H200/PCIe/SSE2") and not is_software_renderer(None)


def test_lightened_mujoco_envs_render_at_the_cells_size_without_shadows_reflections_or_antialiasing():
    pytest.importorskip("mujoco")
    from rl_lightning import make_envs
    from rl_lightning.envs.mujoco_render import is_mujoco_env_id, lighten_mujoco_rendering

    assert is_mujoco_env_id("Hopper-v5") and not is_mujoco_env_id("CartPole-v1") and not is_mujoco_env_id("Nope-v0")
    envs = make_envs("Hopper-v5", 2, seed=0, render=True)
    try:
        assert lighten_mujoco_rendering(envs, max_side=160)
        for env in envs.gymnasium_envs.envs:
            model, renderer = env.unwrapped.model, env.unwrapped.mujoco_renderer
            assert (renderer.width, renderer.height) == (160, 160)  # gymnasium's 480 x 480, scaled
            assert model.vis.quality.offsamples == 0 and model.vis.quality.shadowsize == 0
            assert not model.light_castshadow.any() and not model.mat_reflectance.any()
        if os.environ.get("MUJOCO_GL") in ("egl", "osmesa"):
            assert tuple(envs.render().shape) == (2, 160, 160, 3)
    finally:
        envs.close()
    assert not lighten_mujoco_rendering(make_envs("CartPole-v1", 2, seed=0), max_side=160)  # nothing to lighten


def test_the_opengl_renderer_is_read_where_mujoco_can_render(monkeypatch):
    pytest.importorskip("mujoco")
    from rl_lightning.envs import mujoco_render

    if os.environ.get("MUJOCO_GL") not in ("egl", "osmesa"):
        pytest.skip("needs MUJOCO_GL=egl or osmesa")
    name = mujoco_render.mujoco_opengl_renderer()
    assert isinstance(name, str) and name
    note = mujoco_render.software_rendering_note()
    assert (note is not None) == mujoco_render.is_software_renderer(name)
    if note is not None:
        assert f"OpenGL renderer {name!r}" in note
