"""SACModule next to Stable-Baselines3's SAC at the same settings: where must they agree, and do they?

    python benchmarks/check_sac_vs_sb3.py pipeline          # obs dtype, bounds, buffer at a time-limit truncation
    python benchmarks/check_sac_vs_sb3.py onestep           # one update, identical weights, batch and noise
    python benchmarks/check_sac_vs_sb3.py loop [--updates 300]   # SACModule's Lightning loop vs a replay of it
    python benchmarks/check_sac_vs_sb3.py learn --lib {ours,sb3,ours_clamp,ours_sb3order} --seed S [--steps N]

``onestep`` copies SACModule's weights into SB3's ``SAC`` (actor.latent_pi / mu / log_std, critic.qf0/qf1,
critic_target), feeds one replay batch and the same standard-normal draws to both (SB3's through
``torch.distributions.normal._standard_normal``), and compares the losses, the gradients and the weights
after one update: SB3's ``train`` verbatim, and a hand-written update on SB3's modules in SACModule's order
(one step on the sum: the actor's loss on the critics from before this update).

``loop`` runs SACModule through Lightning (its real update loop, target sync, optimizer), records each
update's batch and noise, and replays them through a hand-written SAC update on an independent copy of the
initial weights: the weights must agree after every update if the loop does one plain SAC update each.

``learn`` trains one run (one process, one thread) on HalfCheetah-v5 and prints the greedy return of 10
episodes at 20k env steps and at the end. ``ours_clamp``: SACModule with SB3's log-std map (clamp to
[-20, 2]) instead of the tanh squash into [-5, 2]; ``ours_sb3order``: SACModule whose actor loss uses the
critics after this update's critic step (SB3's order).
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import math
import time
import warnings

import gymnasium as gym
import numpy as np
import torch
from torch import nn

ENV = "HalfCheetah-v5"
LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0  # ours (SquashedGaussianActor's default)


def quiet() -> None:
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.ERROR)


# -- building both with the same weights -----------------------------------------------------------------


def build_ours(seed: int = 0, **kwargs):
    from rl_lightning import SACModule

    settings = dict(env_id=ENV, learning_starts=5_000, buffer_size=20_000, seed=seed)
    settings.update(kwargs)
    return SACModule(**settings)


def build_sb3(seed: int = 0, **kwargs):
    from stable_baselines3 import SAC

    settings = dict(learning_starts=5_000, buffer_size=20_000)
    settings.update(kwargs)
    return SAC("MlpPolicy", gym.make(ENV), seed=seed, device="cpu", verbose=0, **settings)


def _critic_to_sb3(ours_critic, sb3_qs) -> None:
    """CriticEnsemble (stacked (members, in, out) weights) -> SB3's qf0/qf1 (Linear, ReLU, Linear, ReLU, Linear)."""
    linears = [m for m in sb3_qs[0] if isinstance(m, nn.Linear)]
    assert len(linears) == len(ours_critic.layers)
    with torch.no_grad():
        for member, q in enumerate(sb3_qs):
            for layer, linear in zip(ours_critic.layers, [m for m in q if isinstance(m, nn.Linear)], strict=True):
                linear.weight.copy_(layer.weight[member].T)
                linear.bias.copy_(layer.bias[member, 0])


def copy_ours_into_sb3(module, model) -> None:
    actor = model.actor
    ours_linears = [m for m in module.actor.trunk if isinstance(m, nn.Linear)]
    sb3_linears = [m for m in actor.latent_pi if isinstance(m, nn.Linear)]
    with torch.no_grad():
        for a, b in zip(ours_linears, sb3_linears, strict=True):
            b.weight.copy_(a.weight)
            b.bias.copy_(a.bias)
        actor.mu.weight.copy_(module.actor.mean.weight)
        actor.mu.bias.copy_(module.actor.mean.bias)
        actor.log_std.weight.copy_(module.actor.log_std.weight)
        actor.log_std.bias.copy_(module.actor.log_std.bias)
        model.log_ent_coef.copy_(module.log_alpha.detach().reshape(1))
    _critic_to_sb3(module.critic, list(model.critic.q_networks))
    _critic_to_sb3(module.target_critic, list(model.critic_target.q_networks))


def sb3_params(model) -> dict[str, torch.Tensor]:
    """SB3's weights in SACModule's layout (for comparison)."""
    actor = model.actor
    lin = [m for m in actor.latent_pi if isinstance(m, nn.Linear)]
    out = {
        "actor.trunk.0.weight": lin[0].weight,
        "actor.trunk.0.bias": lin[0].bias,
        "actor.trunk.2.weight": lin[1].weight,
        "actor.trunk.2.bias": lin[1].bias,
        "actor.mean.weight": actor.mu.weight,
        "actor.mean.bias": actor.mu.bias,
        "actor.log_std.weight": actor.log_std.weight,
        "actor.log_std.bias": actor.log_std.bias,
        "log_alpha": model.log_ent_coef.reshape(()),
    }
    for name, qs in (("critic", model.critic.q_networks), ("target_critic", model.critic_target.q_networks)):
        layers = [[m for m in q if isinstance(m, nn.Linear)] for q in qs]
        for k in range(len(layers[0])):
            out[f"{name}.layers.{k}.weight"] = torch.stack([q[k].weight.T for q in layers])
            out[f"{name}.layers.{k}.bias"] = torch.stack([q[k].bias.unsqueeze(0) for q in layers])
    return {k: v.detach().clone() for k, v in out.items()}


def ours_params(module) -> dict[str, torch.Tensor]:
    out = {}
    for name, p in module.actor.named_parameters():
        out[f"actor.{name}"] = p
    out["log_alpha"] = module.log_alpha
    for name, p in module.critic.named_parameters():
        out[f"critic.{name}"] = p
    for name, p in module.target_critic.named_parameters():
        out[f"target_critic.{name}"] = p
    return {k: v.detach().clone() for k, v in out.items()}


def max_diffs(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> dict[str, float]:
    groups: dict[str, float] = {}
    for k in a:
        group = k.split(".")[0]
        groups[group] = max(groups.get(group, 0.0), float((a[k] - b[k]).abs().max()))
    return groups


def use_ours_log_std_map(model) -> None:
    """Give SB3's actor SACModule's log-std map (tanh into [-5, 2]) instead of its clamp to [-20, 2]."""
    actor = model.actor

    def get_action_dist_params(obs):
        features = actor.extract_features(obs, actor.features_extractor)
        latent = actor.latent_pi(features)
        raw = actor.log_std(latent)
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(raw) + 1)
        return actor.mu(latent), log_std, {}

    actor.get_action_dist_params = get_action_dist_params


class NoiseQueue:
    """Replaces torch.distributions' standard-normal draws by given tensors, in order."""

    def __init__(self):
        import torch.distributions.normal as normal

        self.normal, self.original, self.queue = normal, normal._standard_normal, []

    def __enter__(self):
        def draw(shape, dtype, device):
            assert self.queue, "no noise left in the queue"
            noise = self.queue.pop(0)
            assert tuple(noise.shape) == tuple(shape), (noise.shape, shape)
            return noise.to(dtype)

        self.normal._standard_normal = draw
        return self

    def __exit__(self, *exc):
        self.normal._standard_normal = self.original


def sb3_batch(batch):
    from stable_baselines3.common.type_aliases import ReplayBufferSamples as SB3Samples

    return SB3Samples(
        observations=batch.obs.float(),
        actions=batch.actions.float(),
        next_observations=batch.next_obs.float(),
        dones=batch.terminated.float().unsqueeze(1),
        rewards=batch.rewards.float().unsqueeze(1),
        discounts=None,
    )


def sb3_train_verbatim(model, batch, noise, next_noise) -> None:
    """SB3's own ``SAC.train(1, batch)`` on ``batch``, with SB3's draws replaced: first the actions', then the next
    actions'."""
    model.replay_buffer.sample = lambda batch_size, env=None: sb3_batch(batch)
    if not hasattr(model, "_logger"):
        from stable_baselines3.common.logger import configure

        model.set_logger(configure(None, [""]))
    with NoiseQueue() as q:
        q.queue += [noise, next_noise]
        model.train(gradient_steps=1, batch_size=batch.obs.shape[0])
        assert not q.queue


def sb3_losses_by_hand(model, batch, noise, next_noise, gamma=0.99):
    """SB3's losses (its modules and its distribution code) with the actor's loss on the critics *before* the
    critic step (SACModule's order): (critic_loss, actor_loss, alpha_loss, logprob)."""
    data = sb3_batch(batch)
    with NoiseQueue() as q:
        q.queue += [noise, next_noise]
        actions_pi, log_prob = model.actor.action_log_prob(data.observations)
        with torch.no_grad():
            next_actions, next_log_prob = model.actor.action_log_prob(data.next_observations)
    log_prob = log_prob.reshape(-1, 1)
    ent_coef = torch.exp(model.log_ent_coef.detach())
    alpha_loss = -(model.log_ent_coef * (log_prob + model.target_entropy).detach()).mean()
    with torch.no_grad():
        next_q = torch.cat(model.critic_target(data.next_observations, next_actions), dim=1).min(dim=1, keepdim=True)[0]
        next_q = next_q - ent_coef * next_log_prob.reshape(-1, 1)
        target = data.rewards + (1 - data.dones) * gamma * next_q
    current = model.critic(data.observations, data.actions)
    critic_loss = 0.5 * sum(nn.functional.mse_loss(c, target) for c in current)
    q_pi = torch.cat(model.critic(data.observations, actions_pi), dim=1).min(dim=1, keepdim=True)[0]
    # the critics' parameters must not get the actor's gradient: evaluate on detached copies
    actor_loss = (ent_coef * log_prob - q_pi).mean()
    return critic_loss, actor_loss, alpha_loss, log_prob


def sb3_update_in_our_order(model, batch, noise, next_noise, gamma=0.99, critic_scale=1.0) -> dict[str, float]:
    """One update on SB3's modules and optimizers in SACModule's order: all three losses from the weights before the
    update (the actor's on the critics before their step), then the three optimizers' steps, then Polyak.
    ``critic_scale=2``: the critic loss as ours (the sum of the MSEs, not half of it; only Adam's eps sees it)."""
    from stable_baselines3.common.utils import polyak_update

    critic_loss, actor_loss, alpha_loss, _ = sb3_losses_by_hand(model, batch, noise, next_noise, gamma)
    critic_loss = critic_scale * critic_loss
    for opt in (model.actor.optimizer, model.critic.optimizer, model.ent_coef_optimizer):
        opt.zero_grad()
    alpha_loss.backward()
    critic_loss.backward()
    critic_grads = [p.grad.clone() for p in model.critic.parameters()]
    actor_loss.backward()  # reaches the critics too: restore their critic-loss gradient
    for p, g in zip(model.critic.parameters(), critic_grads, strict=True):
        p.grad = g
    model.ent_coef_optimizer.step()
    model.critic.optimizer.step()
    model.actor.optimizer.step()
    polyak_update(model.critic.parameters(), model.critic_target.parameters(), model.tau)
    return dict(critic=float(critic_loss), actor=float(actor_loss), alpha=float(alpha_loss))


def filled_module(steps: int = 2_000, seed: int = 0):
    """A SACModule with its source built and ``steps`` random env steps in its buffer (HalfCheetah)."""
    module = build_ours(seed=seed, learning_starts=steps, buffer_size=max(steps, 2_000))
    module.source = module._build_source()
    module.source.fill()
    return module


# -- 1 / 3: the pipeline -------------------------------------------------------------------------------------


def cmd_pipeline(args) -> None:
    from stable_baselines3.common.buffers import ReplayBuffer as SB3Buffer

    report = {}
    for env_id in ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5", "Humanoid-v5"):
        env = gym.make(env_id)
        report[env_id] = dict(
            obs_dtype=str(env.observation_space.dtype),
            low=float(env.action_space.low.min()),
            high=float(env.action_space.high.max()),
        )
    print("gymnasium spaces:", json.dumps(report))

    module = filled_module(1_200)
    envs, buf = module.source.envs, module.source.buffer
    print("our envs: obs dtype", envs.obs_dtype, "| buffer obs dtype", buf.obs.dtype, "actions", buf.actions.dtype)
    print(
        "our actor action bounds: scale", module.actor.action_scale.tolist(), "bias", module.actor.action_bias.tolist()
    )
    n = buf.size
    term = buf.terminated[:n]
    print(f"our buffer: {n} transitions, terminated.any()={bool(term.any())}")
    chain = (buf.next_obs[: n - 1] - buf.obs[1:n]).abs().amax(dim=1)  # next_obs[t] == obs[t+1] except at a reset
    breaks = (chain > 0).nonzero().flatten().tolist()
    print(f"our buffer: next_obs[t] != obs[t+1] only at t = {breaks} (the 1,000th step of the episode: index 999)")
    t = 999
    print(
        f"  at t=999: terminated={bool(buf.terminated[t])}, "
        f"|next_obs - obs[t]|={float((buf.next_obs[t] - buf.obs[t]).abs().max()):.3f}"
        f" (a real step), |next_obs[t] - obs[t+1] (the reset obs)|="
        f"{float((buf.next_obs[t] - buf.obs[t + 1]).abs().max()):.3f}"
    )
    # the reset obs of HalfCheetah is qpos/qvel noise of scale 0.1: the true final obs is far from it
    print(
        f"  obs[1000] (reset) max |x| = {float(buf.obs[1000].abs().max()):.3f}; "
        f"next_obs[999] max |x| = {float(buf.next_obs[999].abs().max()):.3f}"
    )
    a = buf.actions[:n]
    print(
        f"  warm-up actions: min {float(a.min()):.4f} max {float(a.max()):.4f} mean {float(a.mean()):.4f}"
        " (uniform in [-1, 1])"
    )

    # SB3: its collection with learning_starts > steps (random actions), then the buffer at the truncation
    model = build_sb3(seed=0, learning_starts=2_000, buffer_size=2_000)
    model.learn(total_timesteps=1_200)
    rb: SB3Buffer = model.replay_buffer
    print(
        f"SB3 buffer: obs dtype {rb.observations.dtype}, actions {rb.actions.dtype}, "
        f"dones.any()={bool(rb.dones[:1200].any())},"
        f" timeouts at {np.nonzero(rb.timeouts[:1200, 0])[0].tolist()}"
    )
    sb3_chain = np.abs(rb.next_observations[:1199, 0] - rb.observations[1:1200, 0]).max(axis=1)
    print(f"SB3 buffer: next_obs[t] != obs[t+1] only at t = {np.nonzero(sb3_chain > 0)[0].tolist()}")
    with torch.no_grad():
        data = rb.sample(4)
    print(
        f"SB3 sampled batch dtypes: obs {data.observations.dtype}, actions {data.actions.dtype}, "
        f"dones {data.dones.dtype}"
    )
    acts = rb.actions[:1200, 0]
    print(f"  SB3 warm-up actions: min {acts.min():.4f} max {acts.max():.4f} mean {acts.mean():.4f}")


# -- 2 / 5: one update ----------------------------------------------------------------------------------------


def cmd_onestep(args) -> None:
    from rl_lightning.algos.sac import sac_losses
    from rl_lightning.callbacks.target_sync import update_target_network

    module = filled_module(2_000, seed=args.seed)
    gen = torch.Generator().manual_seed(123)
    batch = module.source.buffer.sample(256)
    B, A = 256, 6
    next_noise = torch.randn(B, A, generator=gen)
    noise = torch.randn(B, A, generator=gen)

    model = build_sb3(seed=args.seed)
    print("target entropy: ours", module.target_entropy, "SB3", model.target_entropy)
    print("initial alpha: ours", float(module.alpha), "SB3", float(model.log_ent_coef.exp()))
    print(
        "SB3 optimizers:",
        {
            k: (type(o).__name__, o.defaults["lr"], o.defaults["eps"])
            for k, o in dict(
                actor=model.actor.optimizer, critic=model.critic.optimizer, alpha=model.ent_coef_optimizer
            ).items()
        },
    )

    # log-std at init: ours tanh-squashed into [-5, 2], SB3 clamped to [-20, 2]
    copy_ours_into_sb3(module, model)
    with torch.no_grad():
        _, ours_log_std = module.actor(batch.obs)
        sb3_log_std = model.actor.get_action_dist_params(batch.obs)[1]
    print(
        f"log-std at init, identical weights: ours mean {float(ours_log_std.mean()):.3f} "
        f"(std {float(ours_log_std.exp().mean()):.3f}),"
        f" SB3 mean {float(sb3_log_std.mean()):.3f} (std {float(sb3_log_std.exp().mean()):.3f})"
    )

    # (a) ours: the losses, gradients, one Adam step and Polyak, exactly as SACModule.update_loss + the loop
    optimizer = module.configure_optimizers()
    loss, metrics = sac_losses(
        module.actor,
        module.critic,
        module.target_critic,
        module.log_alpha,
        batch,
        0.99,
        next_noise,
        noise,
        module.target_entropy,
        True,
    )
    optimizer.zero_grad()
    loss.backward()
    ours_grads = {
        k: (p.grad.clone() if p.grad is not None else torch.zeros_like(p))
        for k, p in [
            *[(f"actor.{n}", p) for n, p in module.actor.named_parameters()],
            ("log_alpha", module.log_alpha),
            *[(f"critic.{n}", p) for n, p in module.critic.named_parameters()],
        ]
    }
    before = ours_params(module)
    optimizer.step()
    update_target_network(module.target_critic, module.critic, 0.005)
    ours_after = ours_params(module)
    print("ours: losses", {k: round(float(v), 6) for k, v in metrics.items()})

    # (b) SB3's modules, our log-std map, by hand in our order: losses and gradients from the same weights
    model = build_sb3(seed=args.seed)
    copy_ours_into_sb3(_restore(module, before), model)
    use_ours_log_std_map(model)
    assert max(max_diffs(sb3_params(model), before).values()) == 0.0
    critic_loss, actor_loss, alpha_loss, log_prob = sb3_losses_by_hand(model, batch, noise, next_noise)
    print(
        f"SB3 (by hand, same weights/batch/noise): critic loss {float(critic_loss):.6f} "
        f"(x2 = {2 * float(critic_loss):.6f}),"
        f" actor loss {float(actor_loss):.6f}, alpha loss {float(alpha_loss):.6f}, "
        f"entropy {float(-log_prob.mean()):.6f}"
    )
    for opt in (model.actor.optimizer, model.critic.optimizer, model.ent_coef_optimizer):
        opt.zero_grad()
    (2 * critic_loss).backward()  # ours sums the critics' MSEs, SB3 halves the sum: x2 to compare gradients
    critic_grads = _sb3_critic_grads(model)
    for opt in (model.actor.optimizer, model.critic.optimizer):
        opt.zero_grad()
    actor_loss.backward()
    actor_grads = _sb3_actor_grads(model)
    alpha_loss.backward()
    grad_diffs = {}
    for k, g in {**critic_grads, **actor_grads, "log_alpha": model.log_ent_coef.grad.reshape(())}.items():
        grad_diffs[k.split(".")[0]] = max(grad_diffs.get(k.split(".")[0], 0.0), float((g - ours_grads[k]).abs().max()))
    scale = {k.split(".")[0]: float(v.abs().max()) for k, v in ours_grads.items()}
    print(
        "gradients, max |ours - SB3| per group:",
        {k: f"{v:.2e} (of max |g| {scale[k]:.2e})" for k, v in grad_diffs.items()},
    )

    # (c) SB3 by hand in our order, with SB3's own optimizers and polyak_update: the weights after one update
    model = build_sb3(seed=args.seed)
    copy_ours_into_sb3(_restore(module, before), model)
    use_ours_log_std_map(model)
    sb3_update_in_our_order(model, batch, noise, next_noise)
    print("weights after one update, ours vs SB3 modules in our order:", _fmt(max_diffs(sb3_params(model), ours_after)))

    # (d) SB3's train() verbatim (actor loss after the critic step), our log-std map
    model = build_sb3(seed=args.seed)
    copy_ours_into_sb3(_restore(module, before), model)
    use_ours_log_std_map(model)
    sb3_train_verbatim(model, batch, noise, next_noise)
    sb3_after = sb3_params(model)
    print("weights after one update, ours vs SB3.train verbatim:", _fmt(max_diffs(sb3_after, ours_after)))
    moved = max_diffs(ours_after, before)
    print("  (the update itself moved them by:", _fmt(moved), ")")
    # how many actor weights moved in a different direction
    flips = sum(
        int((torch.sign(ours_after[k] - before[k]) != torch.sign(sb3_after[k] - before[k])).sum())
        for k in ours_after
        if k.startswith("actor")
    )
    total = sum(ours_after[k].numel() for k in ours_after if k.startswith("actor"))
    print(f"  actor weights whose first update has another sign in SB3's order: {flips} of {total}")

    # (e) the learning runs' variant ours_sb3order (sb3_order_loss, then the loop's step on the actor loss) vs (d)
    _restore(module, before)
    optimizer = module.configure_optimizers()
    actor_loss = sb3_order_loss(module, batch, optimizer, (noise, next_noise))
    optimizer.zero_grad()
    actor_loss.backward()
    optimizer.step()
    update_target_network(module.target_critic, module.critic, 0.005)
    print(
        "weights after one update, ours_sb3order vs SB3.train verbatim:",
        _fmt(max_diffs(sb3_after, ours_params(module))),
    )
    _restore(module, before)

    # (f) and SB3's train() verbatim with its own log-std clamp
    model = build_sb3(seed=args.seed)
    copy_ours_into_sb3(_restore(module, before), model)
    sb3_train_verbatim(model, batch, noise, next_noise)
    print(
        "weights after one update, ours vs SB3.train verbatim (SB3's clamp):",
        _fmt(max_diffs(sb3_params(model), ours_after)),
    )


def _restore(module, params):
    with torch.no_grad():
        for name, p in [
            *[(f"actor.{n}", p) for n, p in module.actor.named_parameters()],
            ("log_alpha", module.log_alpha),
            *[(f"critic.{n}", p) for n, p in module.critic.named_parameters()],
            *[(f"target_critic.{n}", p) for n, p in module.target_critic.named_parameters()],
        ]:
            p.copy_(params[name])
    return module


def _sb3_critic_grads(model):
    qs = [[m for m in q if isinstance(m, nn.Linear)] for q in model.critic.q_networks]
    out = {}
    for k in range(len(qs[0])):
        out[f"critic.layers.{k}.weight"] = torch.stack([q[k].weight.grad.T for q in qs])
        out[f"critic.layers.{k}.bias"] = torch.stack([q[k].bias.grad.unsqueeze(0) for q in qs])
    return out


def _sb3_actor_grads(model):
    actor = model.actor
    lin = [m for m in actor.latent_pi if isinstance(m, nn.Linear)]
    return {
        "actor.trunk.0.weight": lin[0].weight.grad,
        "actor.trunk.0.bias": lin[0].bias.grad,
        "actor.trunk.2.weight": lin[1].weight.grad,
        "actor.trunk.2.bias": lin[1].bias.grad,
        "actor.mean.weight": actor.mu.weight.grad,
        "actor.mean.bias": actor.mu.bias.grad,
        "actor.log_std.weight": actor.log_std.weight.grad,
        "actor.log_std.bias": actor.log_std.bias.grad,
    }


def _fmt(d):
    return {k: f"{v:.2e}" for k, v in d.items()}


# -- 4: the Lightning loop, replayed ------------------------------------------------------------------------


def cmd_loop(args) -> None:
    import lightning as L

    from rl_lightning import SACModule

    records = []

    class Recording(SACModule):
        def update_loss(self, batch):
            state = self.update_generator.get_state()
            records.append(
                dict(
                    batch=copy.deepcopy(batch),
                    gen=state.clone(),
                    env_steps=self.source.env_steps,
                    buffer_size=self.source.buffer.size,
                )
            )
            return super().update_loss(batch)

    module = Recording(env_id=ENV, learning_starts=1_000, buffer_size=5_000, seed=args.seed)
    initial = ours_params(module)
    L.Trainer(
        max_steps=args.updates,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    ).fit(module)
    final = ours_params(module)
    print(
        f"{len(records)} updates; env steps at update 1: {records[0]['env_steps']}, at update {len(records)}: "
        f"{records[-1]['env_steps']} (buffer {records[-1]['buffer_size']}); final env steps {module.source.env_steps}"
    )

    # replay 1: SACModule's own functions (sac_losses, its Adam, update_target_network) on a copy of the initial
    # weights, outside Lightning: equal to the run if the loop does exactly one plain update per training step
    from rl_lightning.algos.sac import sac_losses
    from rl_lightning.callbacks.target_sync import update_target_network

    def noises(r):
        gen = torch.Generator().manual_seed(0)
        gen.set_state(r["gen"])
        shape = (r["batch"].rewards.shape[0], 6)
        next_noise = torch.randn(shape, generator=gen)
        return torch.randn(shape, generator=gen), next_noise

    ref = build_ours(seed=args.seed, learning_starts=1_000, buffer_size=5_000)
    _restore(ref, initial)
    optimizer = ref.configure_optimizers()
    # replay 2, in lock-step: SB3's modules, optimizers and polyak_update (our log-std map, our order, critic loss x2)
    model = build_sb3(seed=args.seed)
    copy_ours_into_sb3(ref, model)
    use_ours_log_std_map(model)
    # replay 3, in lock-step: SACModule's functions with a non-fused Adam (a rounding difference only), to show how
    # fast float32 rounding differences grow in this update
    ref2 = build_ours(seed=args.seed, learning_starts=1_000, buffer_size=5_000)
    _restore(ref2, initial)
    optimizer2 = torch.optim.Adam(
        [{"params": list(m.parameters())} for m in (ref2.actor, ref2.critic)] + [{"params": [ref2.log_alpha]}],
        lr=3e-4,
        foreach=False,
    )
    trace = []
    for i, r in enumerate(records, 1):
        noise, next_noise = noises(r)
        for m, opt in ((ref, optimizer), (ref2, optimizer2)):
            loss, _ = sac_losses(
                m.actor,
                m.critic,
                m.target_critic,
                m.log_alpha,
                r["batch"],
                0.99,
                next_noise,
                noise,
                m.target_entropy,
                True,
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
            update_target_network(m.target_critic, m.critic, 0.005)
        sb3_update_in_our_order(model, r["batch"], noise, next_noise, critic_scale=2.0)
        if i in (1, 2, 5, 10, 20, 50, 100, 200, 300, 500, 1000) or i == len(records):
            a, b, init = ours_params(ref), sb3_params(model), initial
            rel = {
                g: math.sqrt(sum(float((a[k] - b[k]).square().sum()) for k in a if k.startswith(g + ".") or k == g))
                / max(
                    math.sqrt(
                        sum(float((a[k] - init[k]).square().sum()) for k in a if k.startswith(g + ".") or k == g)
                    ),
                    1e-30,
                )
                for g in ("actor", "critic", "log_alpha")
            }
            c = ours_params(ref2)
            rel2 = {
                g: math.sqrt(sum(float((a[k] - c[k]).square().sum()) for k in a if k.startswith(g + ".") or k == g))
                / max(
                    math.sqrt(
                        sum(float((a[k] - init[k]).square().sum()) for k in a if k.startswith(g + ".") or k == g)
                    ),
                    1e-30,
                )
                for g in ("actor", "critic", "log_alpha")
            }
            trace.append((i, max(max_diffs(a, b).values()), rel, max(max_diffs(a, c).values()), rel2))
    print(
        "weights after all updates, SACModule (Lightning loop) vs its functions replayed by hand:",
        _fmt(max_diffs(ours_params(ref), final)),
    )
    print("SACModule's functions vs SB3's modules/optimizers (our order, our log-std map), in lock-step:")
    print("  (and, for scale, SACModule's functions with a non-fused Adam: a rounding difference alone)")
    for i, worst, rel, worst2, rel2 in trace:
        print(
            f"  after {i:4d} updates: vs SB3: max |diff| {worst:.2e}, ||diff||/||moved||: "
            + ", ".join(f"{g} {v:.1e}" for g, v in rel.items())
            + f" | vs non-fused Adam: max |diff| {worst2:.2e}, "
            + ", ".join(f"{g} {v:.1e}" for g, v in rel2.items())
        )
    print("  (the run moved them by:", _fmt(max_diffs(final, initial)), ")")
    gap = max((final["target_critic." + k[7:]] - final[k]).abs().max() for k in final if k.startswith("critic."))
    print(f"  target critic vs online critic, max |diff|: {float(gap):.3e}")


# -- learning runs ---------------------------------------------------------------------------------------------


def greedy_returns(act, seed: int, episodes: int = 10) -> tuple[float, float]:
    env = gym.make(ENV)
    returns = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed if episode == 0 else None)
        done, total = False, 0.0
        while not done:
            obs, reward, terminated, truncated, _ = env.step(act(obs))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return float(np.mean(returns)), float(np.std(returns))


def cmd_learn(args) -> None:
    quiet()
    results: dict = dict(lib=args.lib, seed=args.seed, steps=args.steps, evals={})
    eval_at = sorted({20_000, args.steps} if args.steps > 20_000 else {args.steps})
    started = time.process_time()
    if args.lib == "sb3":
        from stable_baselines3.common.callbacks import BaseCallback

        model = build_sb3(seed=args.seed, buffer_size=args.steps)

        def act(obs):
            return model.predict(obs, deterministic=True)[0]

        class Eval(BaseCallback):
            def _on_step(self) -> bool:
                if self.num_timesteps in eval_at and self.num_timesteps < args.steps:
                    results["evals"][self.num_timesteps] = (
                        *greedy_returns(act, 10_000 + args.seed),
                        float(model.log_ent_coef.exp()),
                    )
                    print(results, flush=True)
                return True

        model.learn(total_timesteps=args.steps, callback=Eval())
        results["evals"][args.steps] = (*greedy_returns(act, 10_000 + args.seed), float(model.log_ent_coef.exp()))
    else:
        import lightning as L

        from rl_lightning import SACModule
        from rl_lightning.nets import SquashedGaussianActor

        class ClampActor(SquashedGaussianActor):  # SB3's log-std map
            def forward(self, obs):
                features = self.trunk(obs)
                return self.mean(features).float(), torch.clamp(self.log_std(features).float(), -20.0, 2.0)

        class Variant(SACModule):
            def __init__(self, **kwargs):
                super().__init__(**kwargs)
                if args.lib == "ours_clamp":
                    self.actor.__class__ = ClampActor

            def update_loss(self, batch):
                if args.lib != "ours_sb3order":
                    return super().update_loss(batch)
                return sb3_order_loss(self, batch)

        module = Variant(env_id=ENV, learning_starts=5_000, buffer_size=args.steps, seed=args.seed)

        def act(obs):
            with torch.no_grad():
                return module.actor.mode(torch.as_tensor(obs, dtype=torch.float32).unsqueeze(0))[0].numpy()

        class Eval(L.Callback):
            def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
                steps = pl_module.source.env_steps
                for mark in eval_at:
                    if mark < args.steps and steps >= mark and mark not in results["evals"]:
                        results["evals"][mark] = (*greedy_returns(act, 10_000 + args.seed), float(pl_module.alpha))
                        print(results, flush=True)

        trainer = L.Trainer(
            max_steps=module.optimizer_steps_for(args.steps),
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[Eval()],
        )
        trainer.fit(module)
        results["updates"] = trainer.global_step
        results["env_steps"] = module.source.env_steps
        results["evals"][args.steps] = (*greedy_returns(act, 10_000 + args.seed), float(module.alpha))
    results["cpu_s"] = round(time.process_time() - started)
    print("RESULT", json.dumps(results), flush=True)
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps(results) + "\n")


def sb3_order_loss(module, batch, optimizer=None, noises=None):
    """SACModule's update in SB3's order: temperature and critics step first (from the weights before the update),
    then the actor's loss on the updated critics is returned for the loop's optimizer step (the critics' and the
    temperature's gradients are None then: Adam leaves them)."""
    from rl_lightning.losses import (
        compute_ensemble_td_loss,
        compute_sac_actor_loss,
        compute_sac_alpha_loss,
        compute_sac_target,
    )

    if noises is None:
        shape = (batch.rewards.shape[0], 6)
        gen = module.update_generator
        next_noise = torch.randn(shape, generator=gen)
        noise = torch.randn(shape, generator=gen)
    else:
        noise, next_noise = noises
    alpha = module.log_alpha.detach().exp()
    with torch.no_grad():
        next_actions, next_logprobs = module.actor.sample(batch.next_obs, noise=next_noise)
        td = compute_sac_target(
            batch.rewards,
            batch.terminated,
            module.target_critic(batch.next_obs, next_actions),
            next_logprobs,
            alpha,
            module.discounts(batch),
        )
    actions, logprobs = module.actor.sample(batch.obs, noise=noise)
    first = compute_ensemble_td_loss(module.critic(batch.obs, batch.actions), td) + compute_sac_alpha_loss(
        module.log_alpha, logprobs, module.target_entropy
    )
    optimizer = module.optimizers().optimizer if optimizer is None else optimizer
    optimizer.zero_grad(set_to_none=True)
    first.backward()
    for p in module.actor.parameters():  # the alpha loss does not reach the actor (logprobs detached); be sure
        p.grad = None
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return compute_sac_actor_loss(module.critic(batch.obs, actions, detach_params=True), logprobs, alpha)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cmd", choices=["pipeline", "onestep", "loop", "learn"])
    parser.add_argument("--lib", default="ours", choices=["ours", "sb3", "ours_clamp", "ours_sb3order"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=30_000)
    parser.add_argument("--updates", type=int, default=300)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    quiet()
    {"pipeline": cmd_pipeline, "onestep": cmd_onestep, "loop": cmd_loop, "learn": cmd_learn}[args.cmd](args)


if __name__ == "__main__":
    main()
