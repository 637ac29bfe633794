"""DQN under DDP on CPU: two gloo processes train, log once, count env steps globally, and end
with identical online and target networks and the same epsilon."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rl_lightning.callbacks.epsilon import EpsilonDecay

HERE = Path(__file__).resolve().parent
# The launched script is also the source of the settings and of the module's initial weights.
_spec = importlib.util.spec_from_file_location("ddp_fit_dqn", HERE / "ddp_fit_dqn.py")
ddp_fit_dqn = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ddp_fit_dqn)
LEARNING_STARTS, MAX_STEPS, NUM_ENVS = ddp_fit_dqn.LEARNING_STARTS, ddp_fit_dqn.MAX_STEPS, ddp_fit_dqn.NUM_ENVS
WORLD_SIZE = 2
# Per rank: ceil(64 / (4 envs x 2 ranks)) = 8 random warm-up steps, then one step per update.
LOCAL_VECTOR_STEPS = LEARNING_STARTS // (NUM_ENVS * WORLD_SIZE) + MAX_STEPS


def _run(tmp_path: Path, strategy: str) -> tuple[dict, dict]:
    # A hung collective (ranks yielding different numbers of batches) ends here, not in CI's timeout.
    result = subprocess.run(
        [sys.executable, str(HERE / "ddp_fit_dqn.py"), str(tmp_path), strategy],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return torch.load(tmp_path / "rank0.pt"), torch.load(tmp_path / "rank1.pt")


@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn"])
def test_dqn_ddp_two_cpu_processes_agree_on_weights_env_steps_and_epsilon(tmp_path, strategy):
    rank0, rank1 = _run(tmp_path, strategy)
    assert rank0["world_size"] == rank1["world_size"] == WORLD_SIZE
    assert rank0["global_step"] == rank1["global_step"] == MAX_STEPS

    # Env steps: each rank steps its own 4 envs 28 times (112 steps); both count all 224.
    assert rank0["local_env_steps"] == rank1["local_env_steps"] == LOCAL_VECTOR_STEPS * NUM_ENVS == 112
    assert rank0["env_steps"] == rank1["env_steps"] == rank0["local_env_steps"] * WORLD_SIZE == 224

    # Online and target networks: identical on both ranks, bit for bit, and both moved from init.
    initial = ddp_fit_dqn.make_module().state_dict()
    state0, state1 = rank0["state_dict"], rank1["state_dict"]
    assert sorted(state0) == sorted(initial)
    assert any(name.startswith("target_network.") for name in state0)
    for name, tensor in state0.items():
        torch.testing.assert_close(tensor, state1[name], rtol=0, atol=0, msg=name)
    for prefix in ("q_network.", "target_network."):
        moved = [not torch.equal(state0[name], initial[name]) for name in state0 if name.startswith(prefix)]
        assert all(moved), f"{prefix} weights did not change during training"

    # Epsilon follows the schedule of the *global* env steps, identically on both ranks: at the
    # start of update k it is the value after update k - 1 (1.0 before the first update).
    assert rank0["schedule"] == rank1["schedule"]
    env_steps = [env_steps for env_steps, _ in rank0["schedule"]]
    assert env_steps == [LEARNING_STARTS + NUM_ENVS * WORLD_SIZE * (k + 1) for k in range(MAX_STEPS)]
    # The run's planned env steps include the random warm-up: 64 + 20 updates x 8 = 224.
    planned = LEARNING_STARTS + MAX_STEPS * NUM_ENVS * WORLD_SIZE
    schedule = EpsilonDecay(start=1.0, end=0.05, fraction=1.0, total_env_steps=planned)
    expected_epsilon = [1.0] + [schedule.value(steps) for steps in env_steps[:-1]]
    assert [epsilon for _, epsilon in rank0["schedule"]] == pytest.approx(expected_epsilon, abs=1e-12)
    assert expected_epsilon[1] == pytest.approx(1.0 - 0.95 * 72 / 224)  # mid-decay, not trivially 0.05
    assert rank0["epsilon"] == rank1["epsilon"] == pytest.approx(1.0 - 0.95 * 224 / 224)

    # One logger: a single event file (rank 0), one point per update, in global env steps.
    event_files = list(tmp_path.glob("lightning_logs/version_*/events.out.tfevents.*"))
    assert len(event_files) == 1, event_files
    events = EventAccumulator(str(event_files[0].parent))
    events.Reload()
    assert [event.value for event in events.Scalars("charts/env_steps")] == [float(steps) for steps in env_steps]
    td_losses = [event.value for event in events.Scalars("losses/td_loss")]
    assert len(td_losses) == MAX_STEPS and all(torch.isfinite(torch.tensor(td_losses)))
