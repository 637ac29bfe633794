"""Experience replay for the off-policy algorithms (DQN, SAC, TD3): the buffer chosen for an env, and
the IterableDataset that fills it.

``make_replay_buffer`` picks the buffer (``ReplayBuffer``, in ``rl_lightning.data.replay_buffer``; each frame
of a frame stack once, ``rl_lightning.data.frame_replay``; by priority, ``rl_lightning.data.prioritized``) and
refuses one that does not fit in memory. ``ReplaySource`` owns the envs and the buffer: every
``gradient_steps`` items it plays ``train_freq`` vectorised env steps with the module's
exploration function, and each item is one sampled batch.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor

from rl_lightning._checks import SettingsError
from rl_lightning.data.episodes import game_steps
from rl_lightning.data.frame_replay import FrameStackReplayBuffer, frame_stack_axis
from rl_lightning.data.her import HERSettings, HindsightReplayBuffer, check_her_settings, describe
from rl_lightning.data.prioritized import PrioritizedFrameStackReplayBuffer, PrioritizedReplayBuffer
from rl_lightning.data.replay_buffer import ReplayBuffer, ReplayBufferSamples, check_buffer_settings, lazy_zeros
from rl_lightning.data.source import EnvSource
from rl_lightning.envs.base import VectorEnv, sample_legal
from rl_lightning.envs.spaces import ACTION_MASK_KEY, MASK_CONVENTION
from rl_lightning.sampling import masked_logits, rows_without_legal_action

__all__ = [
    "ExploreFn",
    "ReplayBuffer",
    "ReplayBufferSamples",
    "ReplaySource",
    "available_memory",
    "check_buffer_settings",
    "check_fits_in_memory",
    "epsilon_greedy",
    "format_bytes",
    "lazy_zeros",
    "make_replay_buffer",
]

_WARMUP_CHUNK = 256  # vectorised random steps between two checks for a stop request


def available_memory(device: torch.device) -> int | None:
    """Bytes that can still be allocated on ``device``: the machine's available memory for the CPU
    (``MemAvailable``), the free memory of a CUDA device; None where it cannot be told."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    if device.type != "cpu":
        return None
    try:
        with open("/proc/meminfo") as file:
            for line in file:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def format_bytes(nbytes: int) -> str:
    """``6.71 GiB``, ``13.8 MiB``, ``512 bytes``."""
    if nbytes >= 2**30:
        return f"{nbytes / 2**30:.2f} GiB"
    return f"{nbytes / 2**20:.1f} MiB" if nbytes >= 2**20 else f"{nbytes:,} bytes"


def check_fits_in_memory(nbytes: int, device: torch.device, what: str, settings: str) -> None:
    """A ``ValueError`` with the numbers and ``settings`` (what to change) if ``nbytes`` exceed what
    ``device`` can still allocate. Checked before allocating: a CPU buffer's pages are only touched
    when written (``lazy_zeros``), so an oversized buffer would otherwise fail hours into the run, killed
    by the OS."""
    available = available_memory(device)
    if available is not None and nbytes > available:
        raise SettingsError(
            f"{what} needs {format_bytes(nbytes)} on {device}, which has {format_bytes(available)} available: "
            f"{settings}"
        )


def make_replay_buffer(
    envs: VectorEnv,
    buffer_size: int,
    seed: int,
    n_step: int,
    gamma: float,
    frame_replay: bool | None = None,
    prioritized: bool = False,
    prioritized_alpha: float = 0.6,
    her: HERSettings | None = None,
) -> Any:
    """The replay buffer for ``envs`` (``ReplaySource``'s ``frame_replay``, ``prioritized`` and ``her``): each frame
    of a frame-stack observation once, else :class:`ReplayBuffer`, sampling by priority with ``prioritized``
    (``rl_lightning.data.prioritized``), relabelling goals with ``her`` (``rl_lightning.data.her``); its size logged,
    and refused if it does not fit in the device's available memory, before anything is allocated."""
    if her is not None:
        check_her_settings(n_step, frame_replay, prioritized)
        frame_replay = False
    axis = frame_stack_axis(envs.obs_shape, envs.obs_dtype)
    if frame_replay is None:
        frame_replay = axis is not None
    elif frame_replay and axis is None:
        raise SettingsError(
            f"frame_replay=True needs frame-stack observations (uint8 (K, H, W), (H, W, K) or (K, H, W, C) with "
            f"K >= 2), got {envs.obs_shape} {envs.obs_dtype}: pass frame_replay=None (or False)"
        )
    action_shape = () if envs.action_kind == "discrete" else envs.action_shape
    options: dict[str, Any] = {"alpha": prioritized_alpha} if prioritized else {}
    if frame_replay:
        cls: Any = PrioritizedFrameStackReplayBuffer if prioritized else FrameStackReplayBuffer
        nbytes = cls.bytes_needed(
            buffer_size, envs.obs_shape, envs.num_envs, action_shape, envs.obs_dtype, n_step, axis
        )
        kind = "each frame of the stacks once"
    else:
        cls = PrioritizedReplayBuffer if prioritized else HindsightReplayBuffer if her is not None else ReplayBuffer
        nbytes = cls.bytes_needed(buffer_size, envs.obs_shape, envs.num_envs, action_shape, envs.obs_dtype, n_step)
        kind = "obs and next_obs whole"
    if prioritized:
        kind += ", prioritized"
    if her is not None:
        kind += f", {describe(her)}"
        options["her"] = her
    what = f"the replay buffer ({buffer_size:,} transitions of {_describe_obs(envs)}, {kind})"
    check_fits_in_memory(
        nbytes,
        envs.device,
        what,
        "lower buffer_size"
        + ("" if frame_replay or axis is None else ", or store each frame once (frame_replay=None or True)"),
    )
    rank_zero_info(f"{what[0].upper()}{what[1:]}: {format_bytes(nbytes)} on {envs.device}")
    return cls.for_env(envs, buffer_size, seed=seed, n_step=n_step, gamma=gamma, **options)


def _describe_obs(envs: VectorEnv) -> str:
    if isinstance(envs.obs_shape, dict):
        return "dict observations"
    return f"{tuple(envs.obs_shape)} {str(envs.obs_dtype).removeprefix('torch.')}"


def epsilon_greedy(
    q_values: Tensor, epsilon: float, generator: torch.Generator | None = None, action_mask: Tensor | None = None
) -> Tensor:
    """Per row: argmax Q with probability 1 - epsilon, else a uniformly random action.

    Args:
        q_values: ``(num_envs, num_actions)``.
        epsilon: probability of a random action, in [0, 1].
        generator: source of the exploration draws (torch's global RNG if None).
        action_mask: bool ``(num_envs, num_actions)``: the argmax and the random actions are over the
            legal actions only (a row without one is a ``ValueError``).

    Returns:
        int64 ``(num_envs,)``.
    """
    if action_mask is not None:
        q_values = masked_logits(q_values, action_mask, check=True)
    greedy = q_values.argmax(dim=-1)
    if epsilon <= 0.0:
        return greedy
    num_envs, num_actions = q_values.shape
    explore = torch.rand(num_envs, generator=generator, device=q_values.device) < epsilon
    if action_mask is None:
        random_actions = torch.randint(0, num_actions, (num_envs,), generator=generator, device=q_values.device)
    else:
        random_actions = sample_legal(action_mask, generator=generator)
    return torch.where(explore, random_actions, greedy)


#: ``explore(obs, generator) -> actions``: the behaviour policy's actions for ``(num_envs, *obs_shape)``
#: observations, drawing its randomness from ``generator`` (epsilon-greedy for DQN, a sample of the
#: squashed Gaussian for SAC, the deterministic action plus noise for TD3).
ExploreFn = Callable[[Tensor, torch.Generator], Tensor]


class ReplaySource(EnvSource):
    """Envs + replay buffer as a torch ``IterableDataset`` of ``ReplayBufferSamples``.

    Iterating first fills the buffer with uniformly random actions until ``env_steps >=
    learning_starts`` (:meth:`fill`); then every ``gradient_steps`` items it plays ``train_freq``
    vectorised env steps with ``explore`` (:meth:`collect`), and each item is one batch sampled
    from the buffer. ``len(source)`` is the number of items per epoch: with a length, Lightning
    does not prefetch, so the env steps of a collection use the networks after the update before it.

    Args:
        envs: the vector env (its device is the buffer's device).
        explore: the behaviour policy (:data:`ExploreFn`), e.g. a module's ``explore`` method.
        buffer_size: replay capacity in transitions (the buffer is built for ``envs``' spaces).
        batch_size: transitions per sampled batch.
        learning_starts: env steps (all processes) of random play before the first batch.
        train_freq: vectorised env steps per collection.
        gradient_steps: batches (training steps) per collection: the update-to-data ratio is
            ``gradient_steps / (train_freq * num_envs)``.
        num_batches: items per epoch (``len``).
        seed: seed of the exploration generator.
        buffer_seed: seed of the buffer's sampling generator.
        n_step: transitions summed per sample (``ReplayBuffer``).
        gamma: the discount of n-step sums.
        world_size: processes each running their own source (``env_steps`` counts them all).
        env_steps: env steps already taken (a resumed run).
        checkpoint_buffer: include the buffer's contents in :meth:`state_dict`.
        frame_replay: store each frame of a frame-stack observation once
            (:class:`~rl_lightning.data.frame_replay.FrameStackReplayBuffer`); None: where the observation
            is a frame stack (``frame_stack_axis``); False: the plain :class:`ReplayBuffer`.
        prioritized: sample by priority (``rl_lightning.data.prioritized``): batches carry importance ``weights``
            and slot ``indices``, and the learner calls ``buffer.update_priorities(indices, td_errors)``.
        prioritized_alpha: how much the priorities count (0: uniform).
        prioritized_beta: the importance weights' exponent, or a function of ``env_steps`` giving it at each
            sample (an annealing schedule).
        her: relabel goal-conditioned samples with hindsight goals (``rl_lightning.data.her``); None: none.

    Before allocating, the buffer's size is logged, and a buffer larger than the device's available memory
    (RAM or GPU) is a ``ValueError`` with the numbers.
    """

    def __init__(
        self,
        envs: VectorEnv,
        explore: ExploreFn,
        buffer_size: int,
        batch_size: int,
        learning_starts: int,
        train_freq: int = 1,
        gradient_steps: int = 1,
        num_batches: int = 1,
        seed: int = 0,
        buffer_seed: int = 0,
        n_step: int = 1,
        gamma: float = 0.99,
        world_size: int = 1,
        env_steps: int = 0,
        checkpoint_buffer: bool = True,
        frame_replay: bool | None = None,
        prioritized: bool = False,
        prioritized_alpha: float = 0.6,
        prioritized_beta: float | Callable[[int], float] = 0.4,
        her: HERSettings | None = None,
    ):
        super().__init__(envs, seed=seed, world_size=world_size, env_steps=env_steps)
        # The settings were checked where they entered (OffPolicyModule; the buffer's by ReplayBuffer).
        self.explore = explore
        self.buffer = make_replay_buffer(
            envs, buffer_size, buffer_seed, n_step, gamma, frame_replay, prioritized, prioritized_alpha, her
        )
        self.prioritized = prioritized
        self.prioritized_beta = prioritized_beta
        self.batch_size, self.learning_starts, self.num_batches = batch_size, learning_starts, num_batches
        self.train_freq, self.gradient_steps, self.checkpoint_buffer = train_freq, gradient_steps, checkpoint_buffer
        #: This batch's place among its collection's ``gradient_steps`` batches (0: collect first).
        self.batch_in_collection = 0

    def __len__(self) -> int:
        return self.num_batches

    def state_dict(self, include_buffer: bool | None = None) -> dict[str, Any]:
        """Envs, RNG, counters, the current obs and (``include_buffer``, default
        ``checkpoint_buffer``) the buffer's contents."""
        include_buffer = self.checkpoint_buffer if include_buffer is None else include_buffer
        return {
            **super().state_dict(),
            "batch_in_collection": self.batch_in_collection,
            "buffer": self.buffer.state_dict() if include_buffer else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict`; without a saved buffer the buffer stays as it is."""
        super().load_state_dict(state)
        self.batch_in_collection = int(state.get("batch_in_collection", 0))
        if state["buffer"] is not None:
            self.buffer.load_state_dict(state["buffer"])

    def next_batch(self) -> ReplayBufferSamples:
        """At a collection's first batch: fill if needed and play ``train_freq`` steps; then sample."""
        self.check_stop()
        if self.batch_in_collection == 0:
            self.env_steps_before_batch = self.env_steps
            self.fill()
            self.collect(self.train_freq)
        self.batch_in_collection = (self.batch_in_collection + 1) % self.gradient_steps
        if self.prioritized:
            beta = self.prioritized_beta
            return self.buffer.sample(self.batch_size, beta(self.env_steps) if callable(beta) else beta)
        return self.buffer.sample(self.batch_size)

    def fill(self) -> None:
        """Random actions until ``env_steps >= learning_starts`` (nothing once it is). An empty
        buffer past that point (a run resumed without its buffer) is refilled the same way."""
        done_already = self.env_steps if self.buffer.size > 0 else 0
        missing = self.learning_starts - done_already
        vector_steps = math.ceil(max(missing, 0) / (self.envs.env_steps_per_step * self.world_size))
        while vector_steps > 0:  # in chunks, so that a SIGTERM is heard during a long warm-up
            self.check_stop()
            chunk = min(vector_steps, _WARMUP_CHUNK)
            self._play(chunk, random_actions=True)
            vector_steps -= chunk

    def _check_warmup_mask(self, mask: Tensor, step: int) -> None:
        """A ``ValueError`` naming the env, the step and the rows if a row of ``mask`` has no legal action:
        no random action can be drawn for it (the policies raise the same for their own actions). One
        reduction, read back once per warm-up step."""
        envs = self.envs
        nvec = envs.action_nvec.tolist() if envs.action_kind == "multi_discrete" else None
        empty = rows_without_legal_action(mask, nvec)
        if bool(empty.any()):
            steps_done = self.env_steps // (envs.env_steps_per_step * self.world_size) + step
            rows = empty.nonzero().flatten().tolist()
            raise ValueError(
                f"{getattr(envs, 'env_id', type(envs).__name__)!r} at "
                f"{'reset' if steps_done == 0 else f'step {steps_done}'}, in the random warm-up before learning_starts "
                f"({self.learning_starts}): obs[{ACTION_MASK_KEY!r}] has no legal action in row(s) {rows[:8]}"
                f"{' (in one of its dimensions)' if nvec is not None else ''}: no random action can be drawn for "
                f"those envs; {MASK_CONVENTION}"
            )

    @torch.no_grad()
    def collect(self, num_steps: int) -> None:
        """``num_steps`` vectorised env steps with ``explore`` into the buffer."""
        self._play(num_steps, random_actions=False)

    def _play(self, num_steps: int, random_actions: bool) -> None:
        envs, obs = self.envs, self.obs
        for step in range(num_steps):
            if random_actions:  # uniform over the legal actions where the env gives masks
                mask = obs[ACTION_MASK_KEY] if envs.has_action_mask else None
                if mask is not None:
                    self._check_warmup_mask(mask, step)
                actions = envs.random_actions(self.generator, mask)
            else:
                actions = self.explore(obs, self.generator)
            next_obs, rewards, terminated, truncated, info = envs.step(actions)
            dones = terminated | truncated
            # For an env that just finished, next_obs is the first obs of its next episode; the
            # transition must end in the obs the episode really reached, which the env contract
            # puts in info["final_observation"] for every env (equal to next_obs where no reset).
            final_obs = info["final_observation"]
            self.buffer.add(obs, actions, rewards, terminated, final_obs, dones)
            self.episodes.update(*game_steps(rewards, dones, info))
            obs = next_obs
        self._obs = obs
        self.count(num_steps)
