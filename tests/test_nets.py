"""Encoders, policy heads and the two networks (rl_lightning/nets/), and the package's import layout."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from rl_lightning.nets import (
    CategoricalHead,
    GaussianHead,
    ImageEncoder,
    PolicyNetwork,
    QNetwork,
    VectorEncoder,
    make_encoder,
    sample_categorical,
)
from rl_lightning.seeding import seeded


def test_categorical_head_matches_torch_distributions():
    head = CategoricalHead(3, 4)
    logits = torch.randn(5, 4)
    actions = torch.tensor([0, 1, 2, 3, 1])
    reference = torch.distributions.Categorical(logits=logits)
    torch.testing.assert_close(head.log_prob(logits, actions), reference.log_prob(actions))
    torch.testing.assert_close(head.entropy(logits), reference.entropy())
    assert torch.equal(head.mode(logits), logits.argmax(-1))


def test_gaussian_head_matches_torch_distributions():
    head = GaussianHead(3, (2,))
    with torch.no_grad():
        head.log_std.copy_(torch.tensor([-0.5, 0.3]))
    mean = torch.randn(5, 2)
    actions = torch.randn(5, 2)
    reference = torch.distributions.Normal(mean, head.log_std.exp())
    torch.testing.assert_close(head.log_prob(mean, actions), reference.log_prob(actions).sum(-1))
    torch.testing.assert_close(head.entropy(mean), reference.entropy().sum(-1))
    assert torch.equal(head.mode(mean), mean)
    sampled, logprobs = head.sample(mean, torch.Generator().manual_seed(0))
    torch.testing.assert_close(logprobs, reference.log_prob(sampled).sum(-1))


def test_gaussian_samples_have_the_heads_mean_and_std_and_a_generator_repeats_them():
    head = GaussianHead(1, (3,), log_std_init=np.log(0.5))
    mean = torch.tensor([1.0, -2.0, 0.0]).expand(20_000, 3)
    actions, _ = head.sample(mean, torch.Generator().manual_seed(1))
    torch.testing.assert_close(actions.mean(0), mean[0], atol=0.02, rtol=0)
    torch.testing.assert_close(actions.std(0), torch.full((3,), 0.5), atol=0.01, rtol=0)
    again, _ = head.sample(mean, torch.Generator().manual_seed(1))
    assert torch.equal(actions, again)


def test_gaussian_head_keeps_multi_dimensional_action_shapes():
    head = GaussianHead(6, (2, 3))
    mean = head(torch.randn(4, 7, 6))
    assert mean.shape == (4, 7, 2, 3)
    actions, logprobs = head.sample(mean)
    assert actions.shape == (4, 7, 2, 3) and logprobs.shape == (4, 7)
    assert head.entropy(mean).shape == (4, 7)


def test_categorical_sampling_follows_the_softmax():
    logits = torch.log(torch.tensor([0.2, 0.5, 0.3])).expand(30_000, 3)
    actions, logprobs = sample_categorical(logits, torch.Generator().manual_seed(0))
    frequencies = torch.bincount(actions, minlength=3).float() / 30_000
    torch.testing.assert_close(frequencies, torch.tensor([0.2, 0.5, 0.3]), atol=0.01, rtol=0)
    torch.testing.assert_close(logprobs, torch.log(torch.tensor([0.2, 0.5, 0.3]))[actions])


def test_default_policy_is_the_120_84_mlp_with_the_same_init_as_a_plain_stack():
    """The defaults stay the (120, 84) MLP: built in the same order, so a seed gives the same weights."""
    with seeded(3):
        policy = PolicyNetwork((4,), 2)
    with seeded(3):
        plain = [nn.Linear(4, 120), nn.Linear(120, 84), nn.Linear(84, 2)]
    ours = [policy.encoder[0], policy.encoder[2], policy.head]
    for a, b in zip(ours, plain, strict=True):
        assert torch.equal(a.weight, b.weight) and torch.equal(a.bias, b.bias)
    assert sum(p.numel() for p in QNetwork((4,), 2).parameters()) == 10_934


def test_the_seeds_q_network_contract_as_written():
    """The seeds' DQN page, its test verbatim: ``layers`` is an nn.Sequential, no final ReLU, 10,934 parameters."""
    net = QNetwork(obs_shape=(4,), num_actions=2)
    n_params = sum((p.nelement() for p in net.parameters()))  # noqa: UP034 (as the seed writes it)
    assert isinstance(getattr(net, "layers", None), nn.Sequential)
    assert not isinstance(net.layers[-1], nn.ReLU)
    assert n_params == 10934


@pytest.mark.parametrize("cls", [QNetwork, PolicyNetwork])
def test_vector_networks_are_one_linear_relu_linear_relu_linear_sequential(cls):
    net = cls((4,), 2)
    assert [type(layer) for layer in net.layers] == [nn.Linear, nn.ReLU, nn.Linear, nn.ReLU, type(net.head)]
    assert isinstance(net.head, nn.Linear) and net.head is net.layers[-1]
    assert [layer.out_features for layer in net.layers if isinstance(layer, nn.Linear)] == [120, 84, 2]
    # encoder and head are views of the same modules: the parameters and the state dict are layers' alone
    assert all(a is b for a, b in zip(net.encoder, net.layers[:-1], strict=True))
    assert sum(p.numel() for p in net.parameters()) == 10_934
    assert all(key.startswith("layers.") for key in net.state_dict())
    obs = torch.randn(5, 4)
    torch.testing.assert_close(net(obs), net.head(net.encoder(obs)))


def test_a_state_dict_with_the_older_encoder_and_head_names_still_loads():
    net = QNetwork((4,), 2)
    old_names = {
        key.replace("layers.4.", "head.").replace("layers.", "encoder."): value
        for key, value in net.state_dict().items()
    }
    assert "head.weight" in old_names and "encoder.0.weight" in old_names
    again = QNetwork((4,), 2)
    again.load_state_dict(old_names)
    obs = torch.randn(3, 4)
    torch.testing.assert_close(again(obs), net(obs))


def test_policy_network_for_a_box_space_is_gaussian_and_samples_unclipped_actions():
    policy = PolicyNetwork(gym.spaces.Box(-1, 1, (1,)), gym.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32))
    assert isinstance(policy.head, GaussianHead)
    obs = torch.zeros(5000, 1)
    with torch.no_grad():
        policy.head.log_std.fill_(1.0)
        actions, logprobs = policy.sample(obs)
    assert actions.shape == (5000, 2) and actions.abs().max() > 1.0  # the env clips, not the policy
    torch.testing.assert_close(policy.log_prob(obs, actions).detach(), logprobs)
    assert torch.equal(policy.act(obs, greedy=True), policy(obs))


def test_vector_encoder_flattens_any_observation_shape():
    encoder = VectorEncoder((2, 3), hidden_sizes=(8,))
    assert encoder(torch.randn(5, 7, 2, 3)).shape == (5, 7, 8)
    assert VectorEncoder((4,), hidden_sizes=()).num_features == 4


@pytest.mark.parametrize(
    ("obs_shape", "first_conv"),
    [((36, 36, 3), (32, 3, 8)), ((4, 84, 84), (32, 4, 8)), ((8, 8, 1), (16, 1, 3))],
    ids=["nature-hwc", "nature-chw-atari", "small-hwc"],
)
def test_image_encoder_layouts_and_sizes(obs_shape, first_conv):
    encoder = ImageEncoder(obs_shape)
    conv = encoder.convs[0]
    assert (conv.out_channels, conv.in_channels, conv.kernel_size[0]) == first_conv
    pixels = torch.randint(0, 256, (2, 5, *obs_shape), dtype=torch.uint8)
    assert encoder(pixels).shape == (2, 5, 512)


def test_image_encoder_scales_uint8_pixels_to_unit_range():
    encoder = ImageEncoder((8, 8, 1))
    white = torch.full((1, 8, 8, 1), 255, dtype=torch.uint8)
    torch.testing.assert_close(encoder(white), encoder(torch.ones(1, 8, 8, 1)))


def test_make_encoder_picks_a_cnn_for_images_and_an_mlp_otherwise():
    image_space = gym.spaces.Box(0, 255, (36, 36, 3), dtype=np.uint8)
    assert isinstance(make_encoder(image_space)[0], ImageEncoder)
    assert isinstance(make_encoder(gym.spaces.Box(-1, 1, (6,)))[0], VectorEncoder)


def test_a_custom_network_is_used_as_the_encoder_and_its_width_is_measured():
    network = nn.Sequential(nn.Linear(4, 7), nn.Tanh())
    policy = PolicyNetwork((4,), 3, network=network)
    assert policy.encoder is network and policy.head.in_features == 7
    q_network = QNetwork((4,), 3, network=nn.Sequential(nn.Linear(4, 5)))
    assert q_network(torch.zeros(2, 4)).shape == (2, 3)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(network="mlp"), TypeError, "network must be a torch.nn.Module"),
        (dict(network=nn.Flatten(0)), ValueError, "network must map observations"),
        (dict(hidden_sizes=(2.5, 3)), TypeError, "hidden_sizes"),
        (dict(hidden_sizes=(0,)), ValueError, "hidden_sizes"),
        (dict(hidden_sizes="64"), TypeError, "hidden_sizes"),
    ],
)
def test_bad_network_arguments_raise(kwargs, error, match):
    with pytest.raises(error, match=match):
        PolicyNetwork((4,), 2, **kwargs)


def test_a_q_network_needs_discrete_actions():
    with pytest.raises(ValueError, match="Discrete"):
        QNetwork((4,), gym.spaces.Box(-1, 1, (2,)))
    with pytest.raises(ValueError, match="Tuple"):
        PolicyNetwork((4,), gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Discrete(2))))


# -- SAC's and TD3's networks ---------------------------------------------------------------------


def _pendulum_spaces():
    return gym.spaces.Box(-np.inf, np.inf, (3,), dtype=np.float32), gym.spaces.Box(-2.0, 2.0, (1,), dtype=np.float32)


def test_squashed_gaussian_actor_samples_in_the_bounds_with_the_change_of_variables_log_prob():
    from torch.distributions import Normal, TransformedDistribution
    from torch.distributions.transforms import AffineTransform, TanhTransform

    from rl_lightning.nets import SquashedGaussianActor

    observation_space = gym.spaces.Box(-1, 1, (3,), dtype=np.float32)
    action_space = gym.spaces.Box(np.array([-2.0, 0.0], dtype=np.float32), np.array([2.0, 1.0], dtype=np.float32))
    actor = SquashedGaussianActor(observation_space, action_space, hidden_sizes=(16,))
    obs = torch.randn(4000, 3)
    actions, logprobs = actor.sample(obs, torch.Generator().manual_seed(0))
    assert actions.shape == (4000, 2) and logprobs.shape == (4000,)
    assert (actions[:, 0].abs() <= 2).all() and (actions[:, 1] >= 0).all() and (actions[:, 1] <= 1).all()
    mean, log_std = actor(obs)
    assert (log_std >= -5).all() and (log_std <= 2).all()
    # torch's own tanh-then-affine distribution gives the same density (up to the 1e-6 guard)
    reference = TransformedDistribution(
        Normal(mean, log_std.exp()), [TanhTransform(), AffineTransform(actor.action_bias, actor.action_scale)]
    )
    inside = (actions - actor.action_bias).abs().max(dim=1).values < 0.99 * actor.action_scale.min()
    expected = reference.log_prob(actions).sum(-1)
    torch.testing.assert_close(logprobs[inside], expected[inside], atol=2e-3, rtol=1e-3)
    torch.testing.assert_close(actor.mode(obs[:5]), actor.action_bias + actor.action_scale * torch.tanh(mean[:5]))
    mean.sum().backward()  # reparameterised: the samples carry gradients to the actor
    assert actor.mean.weight.grad is not None


def test_deterministic_actor_maps_into_the_bounds():
    from rl_lightning.nets import DeterministicActor

    observation_space, action_space = _pendulum_spaces()
    actor = DeterministicActor(observation_space, action_space, hidden_sizes=(8,))
    actions = actor(torch.randn(100, 3) * 100)
    assert (
        actions.shape == (100, 1)
        and (actions.abs() <= 2).all()
        and torch.equal(actor.mode(torch.zeros(2, 3)), actor(torch.zeros(2, 3)))
    )


def test_critic_ensemble_is_independent_mlps_evaluated_together():
    from rl_lightning.nets import CriticEnsemble

    observation_space, action_space = _pendulum_spaces()
    critics = CriticEnsemble(observation_space, action_space, num_critics=3, hidden_sizes=(8, 8))
    obs, actions = torch.randn(5, 3), torch.randn(5, 1, requires_grad=True)
    q = critics(obs, actions)
    assert q.shape == (3, 5)
    x = torch.cat([obs, actions], -1)
    for member in range(3):  # member i is its own MLP: the i-th slice of every layer
        h = x
        for index, layer in enumerate(critics.layers):
            h = h @ layer.weight[member] + layer.bias[member]
            h = torch.relu(h) if index < len(critics.layers) - 1 else h
        torch.testing.assert_close(q[member], h.squeeze(-1))
    # detach_params: gradients reach the actions, not the critics (the actor's loss)
    critics(obs, actions, detach_params=True).sum().backward()
    assert actions.grad is not None and all(p.grad is None for p in critics.parameters())


def test_off_policy_networks_refuse_images_and_unbounded_actions():
    from rl_lightning.nets import SquashedGaussianActor

    observation_space, _ = _pendulum_spaces()
    with pytest.raises(ValueError, match="finite action bounds"):
        SquashedGaussianActor(observation_space, gym.spaces.Box(-np.inf, np.inf, (1,), dtype=np.float32))
    with pytest.raises(ValueError, match="vector observations"):
        SquashedGaussianActor(gym.spaces.Box(0, 255, (36, 36, 3), dtype=np.uint8), _pendulum_spaces()[1])


def test_the_nets_package_keeps_every_name_and_sampling_sits_below_nets_and_envs():
    """The split of nets.py keeps ``from rl_lightning.nets import X`` working for every name it had, and the
    masked-sampling module imports neither ``rl_lightning.nets`` nor ``rl_lightning.envs`` (no import cycle)."""
    import ast
    import inspect

    import rl_lightning.nets as nets
    import rl_lightning.sampling as sampling
    from rl_lightning.envs import spaces

    for name in (
        "PolicyNetwork",
        "QNetwork",
        "ValueNetwork",
        "ActorCritic",
        "RecurrentActorCritic",
        "ImageEncoder",
        "MultiInputEncoder",
        "VectorEncoder",
        "CategoricalHead",
        "GaussianHead",
        "SquashedGaussianActor",
        "DeterministicActor",
        "CriticEnsemble",
        "masked_logits",
        "sample_masked_categorical",
        "rows_without_legal_action",
        "sample_categorical",
        "is_image_space",
        "is_masked",
        "orthogonal_init",
    ):
        assert hasattr(nets, name), name
    assert sorted(nets.__all__) == sorted(set(nets.__all__))
    imported = {
        node.module for node in ast.walk(ast.parse(inspect.getsource(sampling))) if isinstance(node, ast.ImportFrom)
    }
    assert not {module for module in imported if module and module.startswith("rl_lightning")}
    assert spaces.as_bool_mask is sampling.as_bool_mask and spaces.MASK_CONVENTION is sampling.MASK_CONVENTION
