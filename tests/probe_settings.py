"""The probe-learning settings shared by the float32 and the bf16-mixed tests (the seeds' values:
short runs on one-step episodes). Importable from any test: tests/ is on sys.path via conftest.py."""

from rl_lightning import DQNModule, VPGModule

GAMMA = 0.99

# probe, env steps, probe observations, expected action probabilities
VPG_PROBES = [
    (4, 2500, [[0.0]], [[0.0, 1.0]]),
    (5, 5000, [[0.0], [1.0]], [[1.0, 0.0], [0.0, 1.0]]),
]

# probe: probe observations, expected Q-values (num_obs, num_actions), float32 tolerance
DQN_PROBES = {
    1: ([[0.0]], [[1.0]], 5e-4),
    2: ([[-1.0], [1.0]], [[-1.0], [1.0]], 5e-4),
    3: ([[0.0], [1.0]], [[GAMMA], [1.0]], 5e-4),
    4: ([[0.0]], [[-1.0, 1.0]], 5e-4),
    5: ([[0.0], [1.0]], [[1.0, -1.0], [-1.0, 1.0]], 1e-3),
}
DQN_PROBE_UPDATES = 600
DQN_PROBE_LEARNING_STARTS = 100


def vpg_probe_module(probe: int, env_id: str | None = None) -> VPGModule:
    """Short rollouts of one-step episodes, raw returns (one update per 4 x 16 env steps)."""
    return VPGModule(
        env_id=env_id or f"Probe{probe}-v0",
        num_envs=4,
        num_steps_per_rollout=16,
        lr=5e-3,
        normalize_returns=False,
        iw_clip=None,
        seed=0,
    )


def dqn_probe_module(probe: int, env_id: str | None = None) -> DQNModule:
    """One update per vectorised step of 4 envs after 100 random steps."""
    return DQNModule(
        env_id=env_id or f"Probe{probe}-v0",
        num_envs=4,
        buffer_size=500,
        batch_size=128,
        learning_starts=DQN_PROBE_LEARNING_STARTS,
        train_freq=1,
        gamma=GAMMA,
        lr=1e-3,
        target_update_env_steps=80,  # every 20 training steps of 4 env steps
        epsilon_start=1.0,
        epsilon_end=0.5,  # probes 4 and 5 need both actions in the buffer to the end
        exploration_fraction=0.5,
        seed=0,
    )
