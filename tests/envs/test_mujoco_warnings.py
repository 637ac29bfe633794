"""MuJoCo's C warnings: gymnasium's HalfCheetah model load no longer prints its deprecation notice at every env
built (a SAC run printed it 275 times) nor writes MUJOCO_LOG.TXT; other MuJoCo warnings come once per process as
Python warnings (``rl_lightning.envs.mujoco_warnings``)."""

import warnings

import pytest

from rl_lightning.envs import make_envs

mujoco = pytest.importorskip("mujoco")

from rl_lightning.envs import mujoco_warnings  # noqa: E402


@pytest.fixture
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def fresh_handler():
    previous = mujoco.get_mju_user_warning()
    mujoco.set_mju_user_warning(None)
    mujoco_warnings._seen.clear()
    yield
    mujoco.set_mju_user_warning(previous)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_halfcheetah_envs_load_quietly(in_tmp_path, fresh_handler, capfd, mode):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):  # the training envs, then evaluation envs built again and again
            envs = make_envs("HalfCheetah-v5", 2, seed=0, vectorization_mode=mode)
            envs.reset()
            envs.close()
    out, err = capfd.readouterr()
    assert "settotalmass" not in out + err
    assert not any("settotalmass" in str(w.message) for w in caught)
    assert not (in_tmp_path / "MUJOCO_LOG.TXT").exists()
    assert mujoco.get_mju_user_warning() is mujoco_warnings._warn_once


def test_other_mujoco_warnings_come_once_as_python_warnings(fresh_handler):
    assert mujoco_warnings.route_mujoco_warnings()
    handler = mujoco.get_mju_user_warning()
    with pytest.warns(RuntimeWarning, match=r"^MuJoCo: Nan, Inf or huge value in QACC at DOF 0\. The simulation"):
        handler("Nan, Inf or huge value in QACC at DOF 0.\nThe simulation is unstable. Time = 0.1.")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same text again: nothing
        handler("Nan, Inf or huge value in QACC at DOF 0.\nThe simulation is unstable. Time = 0.1.")


def test_a_users_own_handler_is_kept(fresh_handler):
    seen = []

    def mine(message):
        seen.append(message)

    mujoco.set_mju_user_warning(mine)
    assert not mujoco_warnings.route_mujoco_warnings()
    envs = make_envs("HalfCheetah-v5", 1, seed=0)
    envs.close()
    assert mujoco.get_mju_user_warning() is mine
    assert any("settotalmass" in message for message in seen)


def test_a_headless_mujoco_render_without_mujoco_gl_is_refused_before_it_can_hang(monkeypatch):
    # GLFW without a display fails, and from the video logger's thread it could hang inside MuJoCo's context set-up.
    for name in ("MUJOCO_GL", "DISPLAY", "WAYLAND_DISPLAY"):
        monkeypatch.delenv(name, raising=False)
    envs = make_envs("Hopper-v5", 1, seed=0, render=True)
    try:
        with pytest.raises(RuntimeError, match=r"Hopper-v5 cannot render here: .*MUJOCO_GL=egl \(or osmesa\)"):
            envs.render()
        monkeypatch.setenv("MUJOCO_GL", "egl")
        assert mujoco_warnings.headless_mujoco_can_render()
        monkeypatch.delenv("MUJOCO_GL")
        monkeypatch.setattr(mujoco_warnings.sys, "platform", "darwin")  # GLFW has Cocoa there, no DISPLAY
        assert mujoco_warnings.headless_mujoco_can_render()
    finally:
        envs.close()


def test_the_video_loggers_message_gives_the_hint_once(monkeypatch):
    from rl_lightning.callbacks.video import _render_or_explain

    for name in ("MUJOCO_GL", "DISPLAY", "WAYLAND_DISPLAY"):
        monkeypatch.delenv(name, raising=False)
    envs = make_envs("Hopper-v5", 1, seed=0, render=True)
    try:
        with pytest.raises(NotImplementedError, match="Hopper-v5 failed to render") as error:
            _render_or_explain(envs, "Hopper-v5")
        assert str(error.value).count("MUJOCO_GL=egl") == 1
    finally:
        envs.close()
