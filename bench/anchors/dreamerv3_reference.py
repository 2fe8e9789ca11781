"""A plain re-implementation of one training update of the reference PyTorch DreamerV3
(NM512/dreamerv3-torch: ``WorldModel._train`` then ``ImagBehavior._train``), for vector
observations. It is the speed anchor of ``bench/bench_dreamer_train.py``; nothing trains with it.

Written from the reference's structure and ``configs.yaml`` (defaults + ``dmc_proprio``), in our own
code and for reading:

* RSSM: ``img_in`` (Linear without bias -> LayerNorm(1e-3) -> SiLU) on [stoch, action], a GRU cell
  whose single Linear over [x, deter] is layer-normalised (update bias -1), ``img_out`` / ``obs_out``
  blocks and linear logits heads; 32 x 32 discrete latents with 1 % unimix, straight-through samples;
  a learned initial state (``tanh(W)`` and the mode of its prior); ``is_first`` resets.
* Encoder / decoder: MLPs (5 x 1024 by default) on symlog inputs / with symlog squared error.
* Reward and critic: 255-bin two-hot regression in symlog space (buckets -20 .. 20); continue:
  Bernoulli. KL balancing 0.5 dyn / 0.1 rep with 1 nat free bits per step.
* Actor-critic: imagination from every posterior state of the batch (B*T starts), horizon 15,
  actions reparameterised from Normal(tanh(mean), std in [0.1, 1]) (dynamics backprop, actor input
  detached), lambda-returns (0.997, 0.95), returns normalised by the EMA (0.01) of their 5 % / 95 %
  quantiles, entropy 3e-4, critic regularised towards a slow critic (EMA 0.02, every update).
* Only the module being trained requires grad while its graph is built (the reference's
  ``RequiresGrad`` contexts), so imagination builds no weight gradients for the world model.

Deviations that only make this anchor faster than the reference (the benchmark is conservative):
outputs of scans are collected in lists and stacked once (the reference concatenates at every step);
two tensors the reference computes in dynamics-gradient mode but never uses (a second actor forward
and the imagined-state entropy) are not computed; KLs are written as sum p (log p - log q) (equal to
torch's for unimixed categoricals, without its masking). Shapes: B batch, T rows, O observation,
A action, S x K discrete latents, Dt deter, F = S*K + Dt features, N = B*T imagination starts,
H horizon.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Mapping

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class ReferenceConfig:
    """Sizes and hyper-parameters of the reference (``configs.yaml`` defaults for vector observations)."""

    obs_dim: int = 59
    """Observation size O."""
    action_dim: int = 4
    """Action size A."""
    deter: int = 512
    """GRU (deterministic) state size (``dyn_deter``)."""
    hidden: int = 512
    """Width of the RSSM's dense blocks (``dyn_hidden``)."""
    stoch: int = 32
    """Categorical groups (``dyn_stoch``)."""
    discrete: int = 32
    """Classes per group (``dyn_discrete``)."""
    units: int = 512
    """Width of the reward, continue, actor and critic MLPs (``units``)."""
    head_layers: int = 2
    """Hidden layers of the reward, continue, actor and critic MLPs."""
    mlp_layers: int = 5
    """Hidden layers of the observation encoder and decoder (``encoder.mlp_layers``)."""
    mlp_units: int = 1024
    """Width of the observation encoder and decoder; the embedding size (``encoder.mlp_units``)."""
    bins: int = 255
    """Two-hot buckets of the reward and critic heads."""
    unimix: float = 0.01
    """Uniform mixture of the latent categoricals."""
    kl_free: float = 1.0
    """Free nats of each KL term."""
    dyn_scale: float = 0.5
    """Weight of the dynamics KL."""
    rep_scale: float = 0.1
    """Weight of the representation KL."""
    model_lr: float = 1e-4
    """World-model Adam learning rate."""
    model_eps: float = 1e-8
    """World-model Adam epsilon."""
    model_clip: float = 1000.0
    """World-model gradient-norm clip."""
    ac_lr: float = 3e-5
    """Actor and critic Adam learning rate."""
    ac_eps: float = 1e-5
    """Actor and critic Adam epsilon."""
    ac_clip: float = 100.0
    """Actor and critic gradient-norm clip."""
    min_std: float = 0.1
    """Actor std floor."""
    max_std: float = 1.0
    """Actor std ceiling."""
    entropy: float = 3e-4
    """Actor entropy bonus."""
    slow_fraction: float = 0.02
    """EMA rate of the slow critic."""
    discount: float = 0.997
    """Discount gamma."""
    lam: float = 0.95
    """lambda of the lambda-returns."""
    horizon: int = 15
    """Imagination horizon H."""
    return_ema: float = 0.01
    """EMA rate of the return quantiles."""
    seed: int = 0
    """Initialisation seed."""


def symlog(x: torch.Tensor) -> torch.Tensor:
    return torch.sign(x) * torch.log1p(x.abs())


def symexp(x: torch.Tensor) -> torch.Tensor:
    return torch.sign(x) * torch.expm1(x.abs())


def _trunc_normal_init(m: nn.Module) -> None:
    """The reference's fan-average truncated-normal init (biases 0, LayerNorm 1/0)."""
    if isinstance(m, nn.Linear):
        std = math.sqrt(2.0 / (m.in_features + m.out_features)) / 0.87962566103423978
        nn.init.trunc_normal_(m.weight, 0.0, std, -2.0 * std, 2.0 * std)
        if m.bias is not None:
            nn.init.zeros_(m.bias)
    elif isinstance(m, nn.LayerNorm):
        nn.init.ones_(m.weight)
        nn.init.zeros_(m.bias)


def _uniform_init(m: nn.Linear, scale: float) -> None:
    """Fan-average uniform init with ``scale`` (0: zero weights, as for reward and critic outputs)."""
    limit = math.sqrt(3.0 * scale / ((m.in_features + m.out_features) / 2.0))
    if limit > 0:
        nn.init.uniform_(m.weight, -limit, limit)
    else:
        nn.init.zeros_(m.weight)
    nn.init.zeros_(m.bias)


def _body(inp: int, units: int, layers: int) -> nn.Sequential:
    """``layers`` x (Linear without bias -> LayerNorm(1e-3) -> SiLU). [.., inp] -> [.., units]."""
    mods: list[nn.Module] = []
    for i in range(layers):
        mods += [nn.Linear(inp if i == 0 else units, units, bias=False), nn.LayerNorm(units, eps=1e-3), nn.SiLU()]
    body = nn.Sequential(*mods)
    body.apply(_trunc_normal_init)
    return body


class Head(nn.Module):
    """Body then a Linear output. [.., inp] -> [.., out]."""

    def __init__(self, inp: int, units: int, layers: int, out: int, outscale: float) -> None:
        super().__init__()
        self.body = _body(inp, units, layers)
        self.out = nn.Linear(units if layers else inp, out)
        _uniform_init(self.out, outscale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.body(x))


class TwoHot:
    """Categorical over ``bins`` symlog-spaced buckets in [-20, 20] (the reference's ``DiscDist``)."""

    def __init__(self, logits: torch.Tensor) -> None:
        self.logits = logits
        self.buckets = torch.linspace(-20.0, 20.0, logits.shape[-1], dtype=logits.dtype)

    def mode(self) -> torch.Tensor:
        """symexp of the expected bucket. [.., bins] -> [.., 1]."""
        return symexp((torch.softmax(self.logits, -1) * self.buckets).sum(-1, keepdim=True))

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        """Two-hot log-likelihood of x [.., 1] -> [..]."""
        x = symlog(x)
        n = len(self.buckets)
        below = ((self.buckets <= x[..., None]).to(torch.int32).sum(-1) - 1).clamp(0, n - 1)
        above = (n - (self.buckets > x[..., None]).to(torch.int32).sum(-1)).clamp(0, n - 1)
        equal = below == above
        to_below = torch.where(equal, 1, (self.buckets[below] - x).abs())
        to_above = torch.where(equal, 1, (self.buckets[above] - x).abs())
        total = to_below + to_above
        target = (F.one_hot(below, n) * (to_above / total)[..., None]
                  + F.one_hot(above, n) * (to_below / total)[..., None]).squeeze(-2)
        return (target * torch.log_softmax(self.logits, -1)).sum(-1)


class ReferenceRSSM(nn.Module):
    """The reference RSSM with discrete latents. States are dicts: stoch [.., S, K], deter [.., Dt],
    logit [.., S, K] (logits already unimixed: log of the mixed probabilities)."""

    def __init__(self, cfg: ReferenceConfig, embed: int) -> None:
        super().__init__()
        self.cfg = cfg
        S, K, Dt, Hd = cfg.stoch, cfg.discrete, cfg.deter, cfg.hidden
        self.img_in = _body(S * K + cfg.action_dim, Hd, 1)
        self.gru = nn.Linear(Hd + Dt, 3 * Dt, bias=False)
        self.gru_norm = nn.LayerNorm(3 * Dt, eps=1e-3)
        self.gru.apply(_trunc_normal_init)
        self.img_out = _body(Dt, Hd, 1)
        self.obs_out = _body(Dt + embed, Hd, 1)
        self.img_stat = nn.Linear(Hd, S * K)
        self.obs_stat = nn.Linear(Hd, S * K)
        _uniform_init(self.img_stat, 1.0)
        _uniform_init(self.obs_stat, 1.0)
        self.W = nn.Parameter(torch.zeros(1, Dt))

    # distributions
    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        """Raw stats [.., S*K] -> unimixed logits [.., S, K]."""
        lg = x.reshape(*x.shape[:-1], self.cfg.stoch, self.cfg.discrete)
        probs = torch.softmax(lg, -1) * (1 - self.cfg.unimix) + self.cfg.unimix / self.cfg.discrete
        return probs.log()

    @staticmethod
    def sample(logit: torch.Tensor) -> torch.Tensor:
        """One-hot sample with straight-through gradient. [.., S, K] -> [.., S, K]."""
        probs = logit.exp()
        idx = torch.multinomial(probs.reshape(-1, probs.shape[-1]).detach(), 1).reshape(probs.shape[:-1])
        return F.one_hot(idx, probs.shape[-1]).to(probs.dtype) + probs - probs.detach()

    @staticmethod
    def mode(logit: torch.Tensor) -> torch.Tensor:
        onehot = F.one_hot(logit.argmax(-1), logit.shape[-1]).to(logit.dtype)
        return onehot + logit - logit.detach()

    @staticmethod
    def feat(state: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """[stoch flattened, deter] -> [.., F]."""
        st = state["stoch"]
        return torch.cat([st.reshape(*st.shape[:-2], -1), state["deter"]], -1)

    def initial(self, batch: int) -> dict[str, torch.Tensor]:
        deter = torch.tanh(self.W).repeat(batch, 1)
        logit = self._logits(self.img_stat(self.img_out(deter)))
        return {"stoch": self.mode(logit), "deter": deter, "logit": logit}

    # steps
    def img_step(self, prev: Mapping[str, torch.Tensor], action: torch.Tensor) -> dict[str, torch.Tensor]:
        st = prev["stoch"]
        x = self.img_in(torch.cat([st.reshape(*st.shape[:-2], -1), action], -1))
        h = prev["deter"]
        r, c, u = torch.split(self.gru_norm(self.gru(torch.cat([x, h], -1))), self.cfg.deter, -1)
        r = torch.sigmoid(r)
        c = torch.tanh(r * c)
        u = torch.sigmoid(u - 1.0)
        deter = u * c + (1 - u) * h
        logit = self._logits(self.img_stat(self.img_out(deter)))
        return {"stoch": self.sample(logit), "deter": deter, "logit": logit}

    def obs_step(self, prev: dict[str, torch.Tensor] | None, prev_action: torch.Tensor, embed: torch.Tensor,
                 is_first: torch.Tensor) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """One filtering step; ``is_first`` [B] resets the state (and the action) of those rows."""
        B = len(is_first)
        if prev is None or bool(is_first.sum() == B):
            prev = self.initial(B)
            prev_action = torch.zeros_like(prev_action)
        elif bool(is_first.sum() > 0):
            keep = 1.0 - is_first.to(prev_action.dtype)
            prev_action = prev_action * keep[:, None]
            init = self.initial(B)
            prev = {k: v * keep.reshape(-1, *([1] * (v.dim() - 1)))
                    + init[k] * (1 - keep).reshape(-1, *([1] * (v.dim() - 1))) for k, v in prev.items()}
        prior = self.img_step(prev, prev_action)
        logit = self._logits(self.obs_stat(self.obs_out(torch.cat([prior["deter"], embed], -1))))
        post = {"stoch": self.sample(logit), "deter": prior["deter"], "logit": logit}
        return post, prior

    def observe(self, embed: torch.Tensor, action: torch.Tensor, is_first: torch.Tensor):
        """embed [B, T, E], action [B, T, A] (the action before each row), is_first [B, T] ->
        (post, prior), each a dict of [B, T, ..] tensors."""
        posts, priors = [], []
        post = None
        for t in range(embed.shape[1]):
            post, prior = self.obs_step(post, action[:, t], embed[:, t], is_first[:, t])
            posts.append(post)
            priors.append(prior)
        stack = lambda xs: {k: torch.stack([x[k] for x in xs], 1) for k in xs[0]}  # noqa: E731
        return stack(posts), stack(priors)

    def kl(self, lhs: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
        """KL between independent categoricals given unimixed logits [.., S, K] -> [..]."""
        return (lhs.exp() * (lhs - rhs)).sum((-2, -1))


class Actor(nn.Module):
    """Normal(tanh(mean), std) with std = (max - min) * sigmoid(raw + 2) + min; samples are scaled back
    into [-1, 1] where they leave it. feat [.., F] -> (mean [.., A], std [.., A])."""

    def __init__(self, cfg: ReferenceConfig, inp: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.body = _body(inp, cfg.units, cfg.head_layers)
        self.mean = nn.Linear(cfg.units, cfg.action_dim)
        self.std = nn.Linear(cfg.units, cfg.action_dim)
        _uniform_init(self.mean, 1.0)
        _uniform_init(self.std, 1.0)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.body(x)
        std = (self.cfg.max_std - self.cfg.min_std) * torch.sigmoid(self.std(y) + 2.0) + self.cfg.min_std
        return torch.tanh(self.mean(y)), std

    @staticmethod
    def sample(mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
        a = mean + std * torch.randn_like(mean)
        return a * (1.0 / torch.clamp(a.abs(), min=1.0)).detach()

    @staticmethod
    def entropy(std: torch.Tensor) -> torch.Tensor:
        return (0.5 + 0.5 * math.log(2 * math.pi) + std.log()).sum(-1)


class ReferenceDreamer(nn.Module):
    """World model + actor-critic of the reference, with its three Adam optimisers."""

    def __init__(self, cfg: ReferenceConfig) -> None:
        super().__init__()
        self.cfg = cfg
        torch.manual_seed(cfg.seed)
        Fs = cfg.stoch * cfg.discrete + cfg.deter
        self.encoder = _body(cfg.obs_dim, cfg.mlp_units, cfg.mlp_layers)
        self.rssm = ReferenceRSSM(cfg, cfg.mlp_units)
        self.decoder = Head(Fs, cfg.mlp_units, cfg.mlp_layers, cfg.obs_dim, 1.0)
        self.reward = Head(Fs, cfg.units, cfg.head_layers, cfg.bins, 0.0)
        self.cont = Head(Fs, cfg.units, cfg.head_layers, 1, 1.0)
        self.actor = Actor(cfg, Fs)
        self.value = Head(Fs, cfg.units, cfg.head_layers, cfg.bins, 0.0)
        self.slow_value = copy.deepcopy(self.value).requires_grad_(False)
        self.register_buffer("ema_vals", torch.zeros(2))
        self.world_model = nn.ModuleList([self.encoder, self.rssm, self.decoder, self.reward, self.cont])
        self.model_opt = torch.optim.Adam(self.world_model.parameters(), lr=cfg.model_lr, eps=cfg.model_eps)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=cfg.ac_lr, eps=cfg.ac_eps)
        self.value_opt = torch.optim.Adam(self.value.parameters(), lr=cfg.ac_lr, eps=cfg.ac_eps)
        self.requires_grad_(False)

    @staticmethod
    def _step(opt: torch.optim.Optimizer, loss: torch.Tensor, params: list[nn.Parameter], clip: float) -> float:
        """zero_grad, backward (graph kept, as the reference), clip, Adam step; returns the grad norm."""
        opt.zero_grad()
        loss.backward(retain_graph=True)
        norm = nn.utils.clip_grad_norm_(params, clip)
        opt.step()
        opt.zero_grad()
        return float(norm)

    # --- world model ------------------------------------------------------------------------------

    def world_model_losses(self, data: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, dict, dict]:
        """data: obs [B, T, O], action [B, T, A], reward [B, T], is_first [B, T], is_terminal [B, T].
        Returns (mean loss, per-term losses [B, T], posterior states)."""
        cfg = self.cfg
        embed = self.encoder(symlog(data["obs"]))
        post, prior = self.rssm.observe(embed, data["action"], data["is_first"])
        sg = lambda s: {k: v.detach() for k, v in s.items()}  # noqa: E731
        rep = self.rssm.kl(post["logit"], sg(prior)["logit"])
        dyn = self.rssm.kl(sg(post)["logit"], prior["logit"])
        kl_loss = cfg.dyn_scale * dyn.clamp(min=cfg.kl_free) + cfg.rep_scale * rep.clamp(min=cfg.kl_free)
        feat = self.rssm.feat(post)
        dist = (self.decoder(feat) - symlog(data["obs"])) ** 2
        losses = {
            "decoder": torch.where(dist < 1e-8, 0, dist).sum(-1),
            "reward": -TwoHot(self.reward(feat)).log_prob(data["reward"][..., None]),
            "cont": F.binary_cross_entropy_with_logits(
                self.cont(feat).squeeze(-1), 1.0 - data["is_terminal"], reduction="none"),
            "dyn": dyn, "rep": rep,
        }
        model_loss = losses["decoder"] + losses["reward"] + losses["cont"] + kl_loss
        return model_loss.mean(), losses, post

    def train_world_model(self, data: Mapping[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
        self.world_model.requires_grad_(True)
        loss, losses, post = self.world_model_losses(data)
        norm = self._step(self.model_opt, loss, list(self.world_model.parameters()), self.cfg.model_clip)
        self.world_model.requires_grad_(False)
        metrics = {f"{k}_loss": float(v.detach().mean()) for k, v in losses.items()}
        metrics.update(model_loss=float(loss.detach()), model_grad_norm=norm)
        return {k: v.detach() for k, v in post.items()}, metrics

    # --- actor-critic -----------------------------------------------------------------------------

    def imagine(self, start: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, dict, torch.Tensor]:
        """start: posterior states [B, T, ..] -> feats [H, N, F], states (the same H states), actions [H, N, A]."""
        state = {k: v.reshape(-1, *v.shape[2:]) for k, v in start.items()}
        feats, states, actions = [], [], []
        for _ in range(self.cfg.horizon):
            feat = self.rssm.feat(state)
            action = Actor.sample(*self.actor(feat.detach()))
            feats.append(feat)
            states.append(state)
            actions.append(action)
            state = self.rssm.img_step(state, action)
        stacked = {k: torch.stack([s[k] for s in states]) for k in states[0]}
        return torch.stack(feats), stacked, torch.stack(actions)

    def lambda_return(self, reward: torch.Tensor, value: torch.Tensor, pcont: torch.Tensor,
                      bootstrap: torch.Tensor) -> torch.Tensor:
        """reward, value, pcont [H-1, N, 1], bootstrap [N, 1] -> targets [H-1, N, 1]."""
        lam = self.cfg.lam
        next_values = torch.cat([value[1:], bootstrap[None]], 0)
        inputs = reward + pcont * next_values * (1 - lam)
        last, out = bootstrap, []
        for t in reversed(range(reward.shape[0])):
            last = inputs[t] + pcont[t] * lam * last
            out.append(last)
        return torch.stack(out[::-1])

    def train_actor_critic(self, start: Mapping[str, torch.Tensor]) -> dict[str, float]:
        cfg = self.cfg
        with torch.no_grad():  # slow critic first, every update
            for s, d in zip(self.value.parameters(), self.slow_value.parameters()):
                d.copy_(cfg.slow_fraction * s + (1 - cfg.slow_fraction) * d)
        self.actor.requires_grad_(True)
        feat, state, action = self.imagine(start)
        reward = TwoHot(self.reward(self.rssm.feat(state))).mode()
        actor_ent = Actor.entropy(self.actor(feat)[1])
        discount = cfg.discount * torch.sigmoid(self.cont(self.rssm.feat(state)))
        value = TwoHot(self.value(feat)).mode()
        target = self.lambda_return(reward[1:], value[:-1], discount[1:], value[-1])
        weights = torch.cumprod(torch.cat([torch.ones_like(discount[:1]), discount[:-1]], 0), 0).detach()
        base = value[:-1]
        q = torch.quantile(target.detach().flatten(), torch.tensor([0.05, 0.95]))
        self.ema_vals.copy_(cfg.return_ema * q + (1 - cfg.return_ema) * self.ema_vals)
        scale = torch.clamp(self.ema_vals[1] - self.ema_vals[0], min=1.0)
        offset = self.ema_vals[0]
        adv = (target - offset) / scale - (base - offset) / scale
        actor_loss = (-weights[:-1] * adv - cfg.entropy * actor_ent[:-1, ..., None]).mean()
        self.value.requires_grad_(True)
        vin = feat[:-1].detach()
        dist = TwoHot(self.value(vin))
        value_loss = -dist.log_prob(target.detach()) - dist.log_prob(TwoHot(self.slow_value(vin)).mode().detach())
        value_loss = (weights[:-1] * value_loss[:, :, None]).mean()
        metrics = {"actor_loss": float(actor_loss.detach()), "value_loss": float(value_loss.detach()),
                   "imag_reward": float(reward.detach().mean()), "target_mean": float(target.detach().mean()),
                   "actor_entropy": float(actor_ent.detach().mean()), "EMA_005": float(self.ema_vals[0]),
                   "EMA_095": float(self.ema_vals[1])}
        metrics["actor_grad_norm"] = self._step(self.actor_opt, actor_loss, list(self.actor.parameters()), cfg.ac_clip)
        metrics["value_grad_norm"] = self._step(self.value_opt, value_loss, list(self.value.parameters()), cfg.ac_clip)
        self.actor.requires_grad_(False)
        self.value.requires_grad_(False)
        return metrics

    def train_step(self, data: Mapping[str, torch.Tensor]) -> dict[str, float]:
        """One world-model update, then one actor and one critic update from every posterior state."""
        post, metrics = self.train_world_model(data)
        metrics.update(self.train_actor_critic(post))
        return metrics
