"""The networks the algorithms are built from: an encoder and a head as ``PolicyNetwork`` (VPG), ``QNetwork``
(DQN) and ``ValueNetwork``; ``ActorCritic`` (PPO: separate encoders or one shared trunk) and
``RecurrentActorCritic`` (recurrent PPO: one LSTM or GRU core shared by both heads)."""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import torch
from torch import Tensor, nn

from rl_lightning._checks import check_choice
from rl_lightning.deprecations import renamed_keywords
from rl_lightning.envs.base import space_kind
from rl_lightning.envs.spaces import (
    ACTION_MASK_KEY,
    TensorTree,
)
from rl_lightning.nets.encoders import VectorEncoder, as_action_space, as_observation_space, make_encoder
from rl_lightning.nets.heads import is_masked, make_policy_head
from rl_lightning.sampling import masked_logits


class _EncoderHeadNetwork(nn.Module):
    """An encoder then a head, kept as one ``nn.Sequential`` called ``layers`` (a stable state-dict
    layout: for a vector observation it is Linear-ReLU-...-Linear, no final activation); ``encoder`` and
    ``head`` are views of the same modules (``layers[:-1]`` or the one encoder module, and
    ``layers[-1]``), not extra copies: the parameters and the state dict are ``layers``' alone."""

    layers: nn.Sequential

    def __init__(self, encoder: nn.Module, head: nn.Module):
        super().__init__()
        # A VectorEncoder is itself a Sequential of layers: spliced in, so CartPole's network is
        # Linear-ReLU-Linear-ReLU-Linear. Any other encoder (a CNN, a user's network) is one module.
        self._single_encoder = not isinstance(encoder, VectorEncoder)
        self.layers = nn.Sequential(encoder, head) if self._single_encoder else nn.Sequential(*encoder, head)
        # An unregistered view (registering it would list every encoder parameter twice in the state dict).
        self.__dict__["_encoder_view"] = encoder if self._single_encoder else self.layers[:-1]

    @property
    def encoder(self) -> nn.Module:
        """Observations -> features: ``layers`` without its last module."""
        return self.__dict__["_encoder_view"]

    @property
    def head(self) -> nn.Module:
        """Features -> outputs: the last module of ``layers``."""
        return self.layers[-1]

    def forward(self, obs: Tensor) -> Tensor:
        return self.layers(obs)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, errors):
        # Checkpoints written before ``layers`` named the modules ``encoder.*`` and ``head.*``.
        renames = {
            f"{prefix}encoder.": f"{prefix}layers.0." if self._single_encoder else f"{prefix}layers.",
            f"{prefix}head.": f"{prefix}layers.{len(self.layers) - 1}.",
        }
        for key in [key for key in state_dict if key.startswith(tuple(renames))]:
            old = next(old for old in renames if key.startswith(old))
            state_dict[renames[old] + key[len(old) :]] = state_dict.pop(key)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, errors)


class PolicyNetwork(_EncoderHeadNetwork):
    """A stochastic policy: an encoder and a head for the action space, as one ``nn.Sequential``
    ``layers`` (Linear-ReLU-Linear-ReLU-Linear for CartPole with the defaults: 10,934 parameters).

    Args:
        observation_space: a ``Box`` (or an observation shape, taken as float32).
        action_space: ``Discrete`` (or an int n) -> categorical; ``Box`` -> diagonal Gaussian.
        hidden_sizes: widths of the default MLP encoder's hidden layers.
        network: your own encoder (observations -> features) instead of the default.
        activation: the default MLP's activation, ``"relu"`` or ``"tanh"``.
    """

    @renamed_keywords(obs_shape="observation_space", num_actions="action_space")  # the seeds' names
    def __init__(
        self,
        observation_space: gym.spaces.Box | gym.spaces.Dict | Sequence[int],
        action_space: gym.Space | int,
        hidden_sizes: Sequence[int] = (120, 84),
        network: nn.Module | None = None,
        activation: str = "relu",
    ):
        observation_space, action_space = as_observation_space(observation_space), as_action_space(action_space)
        encoder, num_features = make_encoder(observation_space, hidden_sizes, network, activation)
        masked = is_masked(observation_space)
        super().__init__(encoder, make_policy_head(num_features, action_space, masked))
        #: Whether the logits are masked with the observations' ``"action_mask"``.
        self.masked = masked
        self.check_masks = True  # see mask()

    def forward(self, obs: Tensor | TensorTree) -> Tensor:
        """The distribution's parameters: logits (masked: ``-inf`` at illegal actions) or the mean (Box)."""
        return self.mask(self.layers(obs), obs)

    def mask(self, logits: Tensor, obs: Tensor | TensorTree) -> Tensor:
        """``logits`` masked with ``obs["action_mask"]`` for a masked policy (checking that every row has a
        legal action while ``check_masks``; the losses turn it off for masks checked at collection)."""
        if not self.masked:
            return logits
        return masked_logits(logits, obs[ACTION_MASK_KEY], self.check_masks, getattr(self.head, "nvec", None))

    def sample(self, obs: Tensor, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """Sampled actions for ``obs`` and their log-probabilities."""
        return self.head.sample(self(obs), generator)

    def log_prob(self, obs: Tensor, actions: Tensor) -> Tensor:
        """log pi(actions | obs), differentiable w.r.t. the parameters."""
        return self.head.log_prob(self(obs), actions)

    def entropy(self, obs: Tensor) -> Tensor:
        return self.head.entropy(self(obs))

    def log_prob_and_entropy(self, obs: Tensor, actions: Tensor) -> tuple[Tensor, Tensor]:
        """log pi(actions | obs) and the entropy, from one forward pass."""
        params = self(obs)
        return self.head.log_prob(params, actions), self.head.entropy(params)

    def act(self, obs: Tensor, greedy: bool = False, generator: torch.Generator | None = None) -> Tensor:
        """The most likely action (argmax / mean) if ``greedy``, else a sampled one."""
        params = self(obs)
        return self.head.mode(params) if greedy else self.head.sample(params, generator)[0]

    def mode(self, obs: Tensor) -> Tensor:
        """The greedy action: the argmax of the logits, or the Gaussian's mean."""
        return self.head.mode(self(obs))


class QNetwork(_EncoderHeadNetwork):
    """One Q-value per discrete action: an encoder and a Linear layer, as one ``nn.Sequential``
    ``layers`` (Linear-ReLU-Linear-ReLU-Linear: 10,934 parameters for CartPole with the
    default (120, 84) MLP).

    Args:
        obs_shape: the shape of one observation (taken as float32), or a gymnasium ``Box``.
        num_actions: the number of actions, or a gymnasium ``Discrete`` space.
        hidden_sizes: widths of the default MLP encoder's hidden layers.
        network: your own encoder (observations -> features) instead of the default.
    """

    @renamed_keywords(observation_space="obs_shape", action_space="num_actions")  # the names it had for a while
    def __init__(
        self,
        obs_shape: Sequence[int] | gym.spaces.Box,
        num_actions: int | gym.spaces.Discrete,
        hidden_sizes: Sequence[int] = (120, 84),
        network: nn.Module | None = None,
    ):
        observation_space, action_space = as_observation_space(obs_shape), as_action_space(num_actions)
        if space_kind(action_space) != "discrete":
            raise ValueError(f"a QNetwork needs a Discrete action space, got {action_space!r}")
        encoder, num_features = make_encoder(observation_space, hidden_sizes, network)
        super().__init__(encoder, nn.Linear(num_features, int(action_space.n)))
        #: Whether observations carry an ``"action_mask"`` (DQN then acts and bootstraps over legal actions only).
        self.masked = is_masked(observation_space)
        self.check_masks = True  # mode() checks every row has a legal action (off in an export)

    def forward(self, obs: Tensor) -> Tensor:
        """``(*batch, *obs_shape)`` -> Q-values ``(*batch, num_actions)``."""
        return self.layers(obs)

    def mode(self, obs: Tensor) -> Tensor:
        """The greedy action: argmax Q (int64), over the legal actions for a masked network."""
        q_values = self.layers(obs)
        if self.masked:
            q_values = masked_logits(q_values, obs[ACTION_MASK_KEY], check=self.check_masks)
        return q_values.argmax(dim=-1)


class ValueNetwork(nn.Module):
    """A state-value function V(obs): an encoder and a Linear layer to one value.

    Args:
        observation_space: a ``Box`` (or an observation shape, taken as float32).
        hidden_sizes: widths of the default MLP encoder's hidden layers.
        network: your own encoder (observations -> features) instead of the default.
        activation: the default MLP's activation, ``"relu"`` or ``"tanh"``.
    """

    def __init__(
        self,
        observation_space: gym.spaces.Box | gym.spaces.Dict | Sequence[int],
        hidden_sizes: Sequence[int] = (64, 64),
        network: nn.Module | None = None,
        activation: str = "relu",
    ):
        super().__init__()
        self.encoder, num_features = make_encoder(
            as_observation_space(observation_space), hidden_sizes, network, activation
        )
        self.head = nn.Linear(num_features, 1)

    def forward(self, obs: Tensor) -> Tensor:
        """``(*batch, *obs_shape)`` -> float32 values ``(*batch,)``."""
        return self.head(self.encoder(obs)).squeeze(-1).float()


def orthogonal_init(module: nn.Module, gain: float = math.sqrt(2)) -> None:
    """Orthogonal weights with ``gain`` and zero biases for every Linear and Conv2d layer of
    ``module`` (the common PPO implementations' init: sqrt(2) hidden, 0.01 policy head, 1 value head)."""
    for layer in module.modules():
        if isinstance(layer, (nn.Linear, nn.Conv2d)):
            nn.init.orthogonal_(layer.weight, gain)
            nn.init.zeros_(layer.bias)


class ActorCritic(nn.Module):
    """A policy and a state-value function, with separate encoders or one shared trunk.

    Args:
        observation_space: a ``Box`` (or an observation shape, taken as float32).
        action_space: ``Discrete`` -> categorical policy; ``Box`` -> diagonal Gaussian.
        hidden_sizes: widths of the default MLP encoders' hidden layers.
        shared_encoder: one encoder for both heads (one forward pass); else one each.
        network: your own encoder (observations -> features) for the actor; the critic gets a deep
            copy of it, or shares it with ``shared_encoder``.
        activation: the default MLP's activation, ``"relu"`` or ``"tanh"``.
        orthogonal: the common PPO init: orthogonal weights (gain sqrt(2) in the encoders, 0.01
            for the policy head, 1 for the value head), zero biases.
        critic_observation_space: the keys of a Dict observation the critic reads, when they are not the actor's
            (an asymmetric actor-critic: ``observation_space`` is then the actor's keys; the critic gets its own
            default encoder, even beside ``network``); None: the actor's.
        critic_network: your own encoder for the critic (not initialised here, as ``network``); None: as above.
    """

    def __init__(
        self,
        observation_space: gym.spaces.Box | gym.spaces.Dict | Sequence[int],
        action_space: gym.Space | int,
        hidden_sizes: Sequence[int] = (64, 64),
        shared_encoder: bool = False,
        network: nn.Module | None = None,
        activation: str = "tanh",
        orthogonal: bool = True,
        critic_observation_space: gym.spaces.Dict | None = None,
        critic_network: nn.Module | None = None,
    ):
        super().__init__()
        asymmetric = reads_other_keys(observation_space, critic_observation_space)
        if asymmetric and shared_encoder:
            raise ValueError(
                "shared_encoder=True needs the actor and the critic to read the same observation keys, but the "
                f"critic reads {sorted(critic_observation_space.spaces)}: use shared_encoder=False"
            )
        self.shared_encoder = shared_encoder
        self.actor = PolicyNetwork(observation_space, action_space, hidden_sizes, network, activation)
        own_critic = critic_network is not None
        if critic_network is not None and shared_encoder:
            raise ValueError("critic_network is the critic's own encoder: it needs shared_encoder=False")
        if critic_network is None and network is not None and not shared_encoder and not asymmetric:
            critic_network = copy.deepcopy(network)
        critic_space = critic_observation_space if asymmetric else observation_space
        self.critic = ValueNetwork(critic_space, hidden_sizes, critic_network, activation)
        if shared_encoder:
            self.critic.encoder = self.actor.encoder
        if orthogonal:
            if network is None:
                orthogonal_init(self.actor.encoder)
            if not own_critic and (network is None or asymmetric):
                orthogonal_init(self.critic.encoder)
            orthogonal_init(self.actor.head, gain=0.01)
            orthogonal_init(self.critic.head, gain=1.0)

    def forward(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """The policy's distribution parameters and the values ``(*batch,)`` of ``obs``."""
        if self.shared_encoder:
            features = self.actor.encoder(obs)
            params = self.actor.mask(self.actor.head(features), obs)
            return params, self.critic.head(features).squeeze(-1).float()
        return self.actor(obs), self.critic(obs)

    def sample(self, obs: Tensor, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Sampled actions, their log-probabilities and the values of ``obs``."""
        params, values = self(obs)
        actions, logprobs = self.actor.head.sample(params, generator)
        return actions, logprobs, values

    def evaluate(self, obs: Tensor, actions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """log pi(actions | obs), the policy's entropy and V(obs), differentiable (masks, checked when
        the actions were sampled, are not checked again)."""
        self.actor.check_masks = False
        try:
            params, values = self(obs)
        finally:
            self.actor.check_masks = True
        return self.actor.head.log_prob(params, actions), self.actor.head.entropy(params), values

    def value(self, obs: Tensor) -> Tensor:
        return self.critic(obs)

    def act(self, obs: Tensor, greedy: bool = False, generator: torch.Generator | None = None) -> Tensor:
        return self.actor.act(obs, greedy, generator)


def reads_other_keys(observation_space: Any, critic_observation_space: Any) -> bool:
    """Whether a critic of ``critic_observation_space`` (None: the actor's) reads other features than an actor of
    ``observation_space`` (the action mask is the actor's alone and not a feature)."""
    if critic_observation_space is None:
        return False
    features = [
        set(space.spaces) - {ACTION_MASK_KEY} if isinstance(space, gym.spaces.Dict) else space
        for space in (observation_space, critic_observation_space)
    ]
    return features[0] != features[1]


#: Recurrent cores by name.
CORES: dict[str, type[nn.RNNBase]] = {"lstm": nn.LSTM, "gru": nn.GRU}


class RecurrentActorCritic(nn.Module):
    """A policy and a value function with memory: an encoder, one recurrent core (LSTM or GRU)
    shared by both, and a policy head and a value head on the core's output (CleanRL's LSTM PPO;
    sb3-contrib's ``RecurrentPPO`` keeps a second core for the critic by default).

    The state is one tensor ``(num_state, batch, core_size)``: ``[h; c]`` for an LSTM, ``[h]`` for
    a GRU. It is zeroed for every env whose episode starts at a step (``episode_start``) before
    that step's observation goes in, during collection and during training alike.

    Args:
        observation_space: a ``Box`` (or an observation shape, taken as float32).
        action_space: ``Discrete`` -> categorical policy; ``Box`` -> diagonal Gaussian.
        hidden_sizes: the encoder MLP's hidden layers (before the core).
        core: ``"lstm"`` or ``"gru"``.
        core_size: the core's hidden size.
        network: your own encoder (observations -> features) instead of the MLP.
        activation: the encoder MLP's activation.
        orthogonal: the common PPO init (and zero-bias, orthogonal core weights).
        critic_observation_space: the keys of a Dict observation the critic reads, when they are not the actor's
            (an asymmetric actor-critic): the critic is then a feed-forward ``ValueNetwork`` of its keys beside the
            core (the privileged state a simulator gives is Markov: it needs no memory); None: the value head
            reads the core's output.
    """

    def __init__(
        self,
        observation_space: gym.spaces.Box | gym.spaces.Dict | Sequence[int],
        action_space: gym.Space | int,
        hidden_sizes: Sequence[int] = (64,),
        core: str = "lstm",
        core_size: int = 64,
        network: nn.Module | None = None,
        activation: str = "tanh",
        orthogonal: bool = True,
        critic_observation_space: gym.spaces.Dict | None = None,
    ):
        super().__init__()
        check_choice("core", core, CORES)
        observation_space, action_space = as_observation_space(observation_space), as_action_space(action_space)
        self.encoder, num_features = make_encoder(observation_space, hidden_sizes, network, activation)
        self.core = CORES[core](num_features, core_size)
        self.num_state = 2 if core == "lstm" else 1
        self.core_size = core_size
        self.masked = is_masked(observation_space)
        self.check_masks = True  # acting checks every row has a legal action (off in an export)
        self.actor_head = make_policy_head(core_size, action_space, self.masked)
        #: The asymmetric critic of its own keys (``critic_observation_space``; then no ``critic_head``), else None.
        self.critic: ValueNetwork | None = None
        if reads_other_keys(observation_space, critic_observation_space):
            self.critic_head: nn.Linear | None = None
            self.critic = ValueNetwork(critic_observation_space, hidden_sizes, None, activation)
        else:
            self.critic_head = nn.Linear(core_size, 1)
        if orthogonal:
            if network is None:
                orthogonal_init(self.encoder)
            for name, param in self.core.named_parameters():
                if "weight" in name:
                    nn.init.orthogonal_(param, 1.0)
                else:
                    nn.init.zeros_(param)
            orthogonal_init(self.actor_head, gain=0.01)
            if self.critic is None:
                orthogonal_init(self.critic_head, gain=1.0)
            else:
                orthogonal_init(self.critic.encoder)
                orthogonal_init(self.critic.head, gain=1.0)

    def initial_state(self, batch: int, device: torch.device | str = "cpu") -> Tensor:
        """Zeros ``(num_state, batch, core_size)``."""
        return torch.zeros(self.num_state, batch, self.core_size, device=device)

    def _core_step(self, features: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        """One step of the core for features ``(batch, F)`` from ``state``."""
        if self.num_state == 2:
            output, (h, c) = self.core(features.unsqueeze(0), (state[0:1].contiguous(), state[1:2].contiguous()))
            return output.squeeze(0), torch.cat([h, c])
        output, h = self.core(features.unsqueeze(0), state.contiguous())
        return output.squeeze(0), h

    def unroll(self, obs: Tensor, state: Tensor, episode_starts: Tensor) -> tuple[Tensor, Tensor]:
        """Core outputs ``(batch, T, core_size)`` for observations ``(batch, T, *obs_shape)`` from
        ``state`` ``(num_state, batch, core_size)``, zeroing it where ``episode_starts``
        ``(batch, T)`` says a new episode starts; and the state after the last step."""
        features = self.encoder(obs).float()  # all steps at once; only the core runs step by step
        keep = (~episode_starts.bool()).float()
        outputs = []
        for t in range(features.shape[1]):
            state = state * keep[:, t].view(1, -1, 1)
            output, state = self._core_step(features[:, t], state)
            outputs.append(output)
        return torch.stack(outputs, dim=1), state

    def sample(
        self, obs: Tensor, state: Tensor, episode_start: Tensor, generator: torch.Generator | None = None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """One step of every env: sampled actions, their log-probabilities, the values, and the
        state after the step (``obs`` ``(batch, *obs_shape)``, ``episode_start`` ``(batch,)``)."""
        output, state = self.unroll(obs.unsqueeze(1), state, episode_start.unsqueeze(1))
        output = output.squeeze(1)
        actions, logprobs = self.actor_head.sample(self._logits(output, obs, check=self.check_masks), generator)
        return actions, logprobs, self._values(output, obs), state

    def _values(self, output: Tensor, obs: Tensor | TensorTree) -> Tensor:
        """V from the core's ``output`` (or, for an asymmetric critic, from its keys of ``obs``), float32."""
        if self.critic is not None:
            return self.critic(obs)
        return self.critic_head(output).squeeze(-1).float()

    def _logits(self, output: Tensor, obs: Tensor | TensorTree, check: bool) -> Tensor:
        """The policy head's outputs, masked with ``obs["action_mask"]`` for a masked policy."""
        params = self.actor_head(output)
        if not self.masked:
            return params
        return masked_logits(params, obs[ACTION_MASK_KEY], check, getattr(self.actor_head, "nvec", None))

    def evaluate(
        self, obs: Tensor, actions: Tensor, state: Tensor, episode_starts: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """log pi(actions), the entropy and V along whole sequences ``(batch, T, ...)`` replayed from
        their initial ``state`` with the collection's masking; each ``(batch, T)``, differentiable."""
        output, _ = self.unroll(obs, state, episode_starts)
        params = self._logits(output, obs, check=False)
        values = self._values(output, obs)
        return self.actor_head.log_prob(params, actions), self.actor_head.entropy(params), values

    def value(self, obs: Tensor, state: Tensor, episode_start: Tensor) -> Tensor:
        if self.critic is not None:
            return self.critic(obs)
        output, _ = self.unroll(obs.unsqueeze(1), state, episode_start.unsqueeze(1))
        return self.critic_head(output.squeeze(1)).squeeze(-1).float()

    def act(
        self, obs: Tensor, state: Tensor, episode_start: Tensor, greedy: bool = False
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Actions (argmax / mean if ``greedy``), the policy's outputs, and the state after the step."""
        output, state = self.unroll(obs.unsqueeze(1), state, episode_start.unsqueeze(1))
        params = self._logits(output.squeeze(1), obs, check=self.check_masks)
        actions = self.actor_head.mode(params) if greedy else self.actor_head.sample(params)[0]
        return actions, params, state
