"""MuJoCo videos follow the agent: gymnasium's MuJoCo envs built to render (``render=True``: the grid videos,
``enjoy.py --video``, the Hub's replay) use their model's tracking camera ("track") unless the user chose a camera;
gymnasium 1.4 would otherwise render from a fixed free camera that the running agent leaves."""

import pytest

from rl_lightning.envs import make_envs

mujoco = pytest.importorskip("mujoco", reason="the mujoco extra is not installed")


def _camera(env_id: str, **kwargs) -> tuple[int, int]:
    envs = make_envs(env_id, 1, seed=0, backend="gymnasium", render=True, **kwargs)
    unwrapped = envs.gymnasium_envs.envs[0].unwrapped
    track = mujoco.mj_name2id(unwrapped.model, mujoco.mjtObj.mjOBJ_CAMERA, "track")
    camera = unwrapped.mujoco_renderer.camera_id
    envs.close()
    return camera, track


@pytest.mark.parametrize("env_id", ["HalfCheetah-v5", "Hopper-v5", "Walker2d-v5"])
def test_rendering_envs_use_the_models_tracking_camera(env_id):
    camera, track = _camera(env_id)
    assert track >= 0 and camera == track


def test_a_camera_the_user_chose_is_kept_and_a_model_without_track_keeps_the_free_camera():
    assert _camera("HalfCheetah-v5", camera_id=-1)[0] == -1
    assert _camera("InvertedPendulum-v5") == (-1, -1)
