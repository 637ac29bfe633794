"""Networks, by concern: ``encoders`` (observations to features), ``heads`` (features to a distribution),
``networks`` (the policy, Q and value networks and PPO's actor-critics), ``continuous`` (SAC's and TD3's actors and
their critic ensembles), ``categorical`` (discrete SAC's actor and critics). Every name is importable from
``rl_lightning.nets`` as before the split; the masked-sampling functions live below both this package and the envs,
in ``rl_lightning.sampling``, and are re-exported here."""

from rl_lightning.nets.categorical import CategoricalActor, DiscreteCriticEnsemble
from rl_lightning.nets.continuous import (
    CriticEnsemble,
    DeterministicActor,
    EnsembleLinear,
    FlatKeys,
    SquashedGaussianActor,
    flat_keys_encoder,
)
from rl_lightning.nets.encoders import (
    ACTIVATIONS,
    ImageEncoder,
    MultiInputEncoder,
    VectorEncoder,
    as_action_space,
    as_observation_space,
    is_image_space,
    make_encoder,
    mlp,
)
from rl_lightning.nets.heads import (
    BernoulliHead,
    CategoricalHead,
    GaussianHead,
    MultiCategoricalHead,
    categorical_entropy,
    is_masked,
    make_policy_head,
)
from rl_lightning.nets.networks import (
    CORES,
    ActorCritic,
    PolicyNetwork,
    QNetwork,
    RecurrentActorCritic,
    ValueNetwork,
    orthogonal_init,
)
from rl_lightning.nets.q_heads import NoisyLinear, QHead, RainbowQNetwork, factorised_noise
from rl_lightning.sampling import (
    MASK_CONVENTION,
    as_bool_mask,
    masked_logits,
    rows_without_legal_action,
    sample_categorical,
    sample_masked_categorical,
)

__all__ = [
    "ACTIVATIONS",
    "CORES",
    "MASK_CONVENTION",
    "ActorCritic",
    "BernoulliHead",
    "CategoricalActor",
    "CategoricalHead",
    "CriticEnsemble",
    "DeterministicActor",
    "DiscreteCriticEnsemble",
    "EnsembleLinear",
    "FlatKeys",
    "GaussianHead",
    "ImageEncoder",
    "MultiCategoricalHead",
    "MultiInputEncoder",
    "NoisyLinear",
    "PolicyNetwork",
    "QHead",
    "QNetwork",
    "RainbowQNetwork",
    "RecurrentActorCritic",
    "SquashedGaussianActor",
    "ValueNetwork",
    "VectorEncoder",
    "as_action_space",
    "as_bool_mask",
    "as_observation_space",
    "categorical_entropy",
    "factorised_noise",
    "flat_keys_encoder",
    "is_image_space",
    "is_masked",
    "make_encoder",
    "make_policy_head",
    "masked_logits",
    "mlp",
    "orthogonal_init",
    "rows_without_legal_action",
    "sample_categorical",
    "sample_masked_categorical",
]
