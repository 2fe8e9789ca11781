"""Dreamer-v3 world model + actor-critic on the docs/design.md §1.1 RSSM, with the MUSE self-assessment
head (paper 000 §3, Eq. 2 and Eq. 4). ``DreamerConfig.muse=False`` is the Dreamer-v3 baseline:
the same code with the SA loss off (self-regulation is an acting option, see
:mod:`metacog_fast.metaworld.muse_wm`).

Shapes: ``B`` batch, ``T`` sequence length, ``O`` observation size, ``A`` action size,
``D`` deter, ``Z = S*C`` stochastic, ``N`` quantiles, feature ``s = [h, z]`` is ``[.., D+Z]``.
Training uses autograd through the RSSM functions of :mod:`metacog_fast.metaworld.models.rssm_train_ops`
(the torch reference's maths with fused ops).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from metacog_fast.metaworld.models import rssm_train_ops as fused
from metacog_fast.ops.rssm import naive as ref
from metacog_fast.ops.rssm.weights import init_rssm_weights
from metacog_fast.metaworld.models.rssm import RSSM


def symlog(x: torch.Tensor) -> torch.Tensor:
    return torch.sign(x) * torch.log1p(x.abs())


def symexp(x: torch.Tensor) -> torch.Tensor:
    return torch.sign(x) * torch.expm1(x.abs())


def squashed_entropy(std: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """One-sample estimate (up to a constant) of the entropy of the action a = tanh(u),
    u ~ Normal(mean, std): sum over actions of log std + log(1 - tanh(u)^2). [.., A] -> [..].

    The Gaussian's entropy alone (sum log std) grows without bound as std grows while the
    squashed action only saturates at +-1: rewarded for it, the actor's std ran to 4-6 within 400
    updates and its actions became bang-bang (docs/muse_wm.md "Single-task learning curves"). The tanh term
    (the log-determinant of the squashing, as in SAC) makes the bonus peak at a finite std.
    ``log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))``, stable for large |u|."""
    log_det = 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))
    return (std.log() + log_det).sum(-1)


@dataclass
class DreamerConfig:
    """Sizes and hyper-parameters of the world model and the actor-critic."""

    obs_dim: int = 59
    """Observation size O (Meta-World: 39-d state + 20-d task one-hot)."""
    action_dim: int = 4
    """Action size A."""
    preset: str | None = "XS"
    """RSSM preset ("XS": D=Hd=256, "S": D=Hd=512) or None to use D/Hd below."""
    D: int = 256
    """Deterministic state size (used when preset is None)."""
    Hd: int = 256
    """Hidden width (used when preset is None); also the MLP width of the heads."""
    S: int = 32
    """Categorical groups."""
    C: int = 32
    """Classes per group."""
    E: int | None = None
    """Encoder output size (None: Hd)."""
    layers: int = 2
    """Hidden layers of the encoder, decoder, reward/continue/critic heads, actor and SA MLPs."""
    obs_mlp_layers: int | None = None
    """Hidden layers of the observation encoder and decoder (None: ``layers``; the reference
    DreamerV3 uses 5 for vector observations)."""
    obs_mlp_units: int | None = None
    """Width of the observation encoder and decoder (None: Hd; the reference uses 1024)."""
    N: int = 5
    """Self-assessment quantiles."""
    muse: bool = True
    """Train the self-assessment head (Eq. 4). False = the Dreamer-v3 baseline."""
    free_bits: float = 1.0
    """KL free bits (nats), applied to the KL summed over groups."""
    dyn_scale: float = 1.0
    """Weight of the dynamics KL (Eq. 2)."""
    rep_scale: float = 0.1
    """Weight of the representation KL (Eq. 2)."""
    sa_scale: float = 1.0
    """Weight of the summed per-quantile BCE added to the prediction loss."""
    horizon: int = 15
    """Imagination horizon of the actor-critic."""
    gamma: float = 0.997
    """Discount (Dreamer-v3: 1 - 1/333)."""
    lam: float = 0.95
    """lambda of the lambda-returns."""
    entropy: float = 3e-4
    """Actor entropy bonus eta."""
    return_decay: float = 0.99
    """EMA decay of the return scale (95th - 5th percentile)."""
    critic_ema: float = 0.02
    """Update rate of the slow target critic."""
    critic_reg: float = 1.0
    """Weight of the regulariser pulling the critic towards the slow critic."""
    wm_lr: float = 1e-4
    """World-model Adam learning rate."""
    ac_lr: float = 3e-5
    """Actor and critic Adam learning rate."""
    wm_clip: float = 1000.0
    """Gradient-norm clip of the world model."""
    ac_clip: float = 100.0
    """Gradient-norm clip of the actor and of the critic."""
    seed: int = 0
    """Initialisation seed."""
    precision: str = "float32"
    """Matmul precision of ``train_step``: "float32", "bfloat16" (autocast: the matmuls of the
    forward and backward passes in bf16, with float32 weights, optimiser state, head outputs,
    losses and returns; fast on CPUs with AVX512-BF16/AMX, see docs/muse_wm.md "Training speed"),
    or "auto" (:func:`resolve_precision`: bfloat16 where it is fast, else float32)."""

    def sizes(self) -> dict[str, int]:
        """Resolved D, Hd, E."""
        if self.preset is not None:
            from metacog_fast.ops.rssm.weights import PRESETS

            D, Hd = PRESETS[self.preset]["D"], PRESETS[self.preset]["Hd"]
        else:
            D, Hd = self.D, self.Hd
        return {"D": D, "Hd": Hd, "E": Hd if self.E is None else self.E}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class MLP(nn.Module):
    """``layers`` x (Linear -> LayerNorm(eps 1e-3) -> SiLU), then a Linear output. [.., in] -> [.., out]."""

    def __init__(self, inp: int, hidden: int, out: int, layers: int, zero_out: bool = False) -> None:
        super().__init__()
        mods: list[nn.Module] = []
        for i in range(layers):
            mods += [nn.Linear(inp if i == 0 else hidden, hidden), nn.LayerNorm(hidden, eps=ref.LN_EPS), nn.SiLU()]
        self.body = nn.Sequential(*mods)
        self.out = nn.Linear(hidden if layers else inp, out)
        if zero_out:  # Dreamer-v3 zero-initialises reward and critic outputs
            nn.init.zeros_(self.out.weight)
            nn.init.zeros_(self.out.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.body(x)
        if torch.is_autocast_enabled(x.device.type):
            # The (small) output layer in float32, so heads, losses and returns are float32.
            with torch.autocast(x.device.type, enabled=False):
                return self.out(x.float())
        return self.out(x)


PRECISIONS = ("auto", "float32", "bfloat16")
"""Values of ``DreamerConfig.precision``."""


def resolve_precision(precision: str, device: str = "cpu") -> str:
    """``"float32"`` or ``"bfloat16"`` for ``precision``. ``"auto"`` is bfloat16 on a CUDA device or on
    a CPU with native bf16 dot products (AVX512-BF16 / AMX-BF16), else float32: an AVX2-only CPU
    emulates bf16 GEMMs, 9x slower than fp32 for a [1024, 512] x [512, 768] matmul on one thread."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision: expected one of {PRECISIONS}, got {precision!r}")
    if precision != "auto":
        return precision
    from metacog_fast.scoring.encoder import cpu_has_bf16

    return "bfloat16" if device == "cuda" or cpu_has_bf16() else "float32"


class Dreamer(nn.Module):
    """World model (encoder, RSSM, decoder, reward, continue, SA head) + actor-critic."""

    def __init__(self, cfg: DreamerConfig) -> None:
        super().__init__()
        self.precision = resolve_precision(cfg.precision)
        """The resolved matmul precision of ``train_step`` ("float32" or "bfloat16")."""
        self.cfg = cfg
        sz = cfg.sizes()
        self.D, self.Hd, self.E = sz["D"], sz["Hd"], sz["E"]
        self.Z = cfg.S * cfg.C
        torch.manual_seed(cfg.seed)
        self.rssm = RSSM(None, weights=init_rssm_weights(
            None, D=self.D, Hd=self.Hd, S=cfg.S, C=cfg.C, A=cfg.action_dim, E=self.E,
            L=cfg.layers, N=cfg.N, seed=cfg.seed,
        ), classes=cfg.C)
        F_ = self.D + self.Z
        obs_layers = cfg.layers if cfg.obs_mlp_layers is None else cfg.obs_mlp_layers
        obs_units = self.Hd if cfg.obs_mlp_units is None else cfg.obs_mlp_units
        self.encoder = MLP(cfg.obs_dim, obs_units, self.E, obs_layers)
        self.decoder = MLP(F_, obs_units, cfg.obs_dim, obs_layers)
        self.reward = MLP(F_, self.Hd, 1, cfg.layers, zero_out=True)
        self.cont = MLP(F_, self.Hd, 1, cfg.layers)
        self.critic = MLP(F_, self.Hd, 1, cfg.layers, zero_out=True)
        self.slow_critic = MLP(F_, self.Hd, 1, cfg.layers, zero_out=True)
        self.slow_critic.load_state_dict(self.critic.state_dict())
        for p in self.slow_critic.parameters():
            p.requires_grad_(False)
        self.register_buffer("return_scale", torch.ones(()))
        self.register_buffer("updates", torch.zeros((), dtype=torch.int64))
        actor = set(id(p) for p in self.rssm_group("actor"))
        self.wm_params = [p for p in self.rssm.parameters() if id(p) not in actor]
        self.wm_params += list(self.encoder.parameters()) + list(self.decoder.parameters())
        self.wm_params += list(self.reward.parameters()) + list(self.cont.parameters())
        self.actor_params = self.rssm_group("actor")
        self.wm_opt = torch.optim.Adam(self.wm_params, lr=cfg.wm_lr, eps=1e-8)
        self.actor_opt = torch.optim.Adam(self.actor_params, lr=cfg.ac_lr, eps=1e-5)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=cfg.ac_lr, eps=1e-5)

    # --- pieces ---------------------------------------------------------------------------

    def autocast(self) -> torch.autocast:
        """The ``precision`` context of the forward passes of ``train_step`` (off for float32)."""
        dev = next(self.parameters()).device.type
        return torch.autocast(dev, dtype=torch.bfloat16, enabled=self.precision == "bfloat16")

    def rssm_group(self, prefix: str) -> list[nn.Parameter]:
        """RSSM parameters whose docs/design.md name starts with ``prefix + '.'`` (e.g. "actor", "sa")."""
        return [p for k, p in self.rssm.named_parameters() if k.startswith(prefix + ".")]

    def encode(self, obs: torch.Tensor) -> torch.Tensor:
        """obs [.., O] -> embed [.., E] (the encoder sees symlog(obs))."""
        return self.encoder(symlog(obs))

    def observe(
        self, obs: torch.Tensor, prev_actions: torch.Tensor, u: torch.Tensor | None = None
    ) -> dict[str, torch.Tensor]:
        """Filter a batch of sequences through the RSSM (posterior, straight-through samples).

        obs [B, T, O]; prev_actions [B, T, A] (the action before each observation, zeros at
        a sequence start); u [T, B, S] uniforms (drawn when None). The state is zero before
        the first step of every sequence. Returns h [B, T, D], z [B, T, Z], post and prior
        logits [B, T, Z].
        """
        B, T, _ = obs.shape
        w = self.rssm.weights()
        embed = self.encode(obs)
        if u is None:
            u = torch.rand(T, B, self.cfg.S)
        h = obs.new_zeros(B, self.D)
        z = obs.new_zeros(B, self.Z)
        hs, zs, posts, priors = [], [], [], []
        for t in range(T):
            a = prev_actions[:, t]
            if t == 0:
                a = torch.zeros_like(a)
            h = fused.sequence_model(w, h, z, a)
            post = fused.posterior_logits(w, h, embed[:, t])
            z = ref.sample_categorical(post, u[t], self.cfg.C, straight_through=True)
            hs.append(h)
            zs.append(z)
            posts.append(post)
            priors.append(fused.prior_logits(w, h))
        st = lambda xs: torch.stack(xs, 1)  # noqa: E731
        return {"h": st(hs), "z": st(zs), "post": st(posts), "prior": st(priors)}

    def _kl(self, lhs: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
        """KL(lhs || rhs) of the unimix categoricals, summed over groups. [.., Z] -> [..]."""
        p = ref.categorical_probs(lhs, self.cfg.C)
        q = ref.categorical_probs(rhs, self.cfg.C)
        return (p * (p.log() - q.log())).sum((-1, -2))

    def sa_logits(self, feat: torch.Tensor) -> torch.Tensor:
        """Self-assessment logits on s = [h, z] [.., D+Z] -> [.., N]."""
        return fused.sa_logits(self.rssm.weights(), feat)

    # --- world-model loss (Eq. 2 + Eq. 4) -------------------------------------------------------

    def world_model_loss(self, batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, Any]]:
        """batch: obs [B, T, O], prev_action [B, T, A], reward [B, T], cont [B, T], labels [B, T, N].

        Returns the scalar loss (mean over B, T of L_pred + 1.0 L_dyn + 0.1 L_rep) and the
        posterior states (detached) for imagination.
        """
        cfg = self.cfg
        out = self.observe(batch["obs"], batch["prev_action"])
        feat = torch.cat([out["h"], out["z"]], -1)
        dec = self.decoder(feat)
        l_dec = ((dec - symlog(batch["obs"])) ** 2).sum(-1)
        l_rew = (self.reward(feat).squeeze(-1) - symlog(batch["reward"])) ** 2
        l_cont = F.binary_cross_entropy_with_logits(self.cont(feat).squeeze(-1), batch["cont"], reduction="none")
        pred = l_dec + l_rew + l_cont
        metrics: dict[str, Any] = {}
        if cfg.muse:
            l_sa = F.binary_cross_entropy_with_logits(self.sa_logits(feat), batch["labels"], reduction="none").sum(-1)
            pred = pred + cfg.sa_scale * l_sa
            metrics["loss_sa"] = float(l_sa.detach().mean())
        dyn = self._kl(out["post"].detach(), out["prior"])
        rep = self._kl(out["post"], out["prior"].detach())
        l_dyn = torch.clamp(dyn, min=cfg.free_bits)
        l_rep = torch.clamp(rep, min=cfg.free_bits)
        loss = (pred + cfg.dyn_scale * l_dyn + cfg.rep_scale * l_rep).mean()
        metrics.update(
            loss_wm=float(loss.detach()), loss_dec=float(l_dec.detach().mean()), loss_rew=float(l_rew.detach().mean()),
            loss_cont=float(l_cont.detach().mean()), kl_dyn=float(dyn.detach().mean()), kl_rep=float(rep.detach().mean()),
        )
        return loss, {"metrics": metrics, "h": out["h"].detach(), "z": out["z"].detach()}

    # --- actor-critic in imagination -------------------------------------------------------------

    def imagine(self, h0: torch.Tensor, z0: torch.Tensor) -> dict[str, torch.Tensor]:
        """Actor-driven rollout with gradients through the dynamics (reparameterised actions,
        straight-through latents). h0 [M, D], z0 [M, Z] -> feats [H+1, M, D+Z], actions [H, M, A],
        entropy [H, M] (:func:`squashed_entropy` of each action, up to a constant)."""
        w = self.rssm.weights()
        cfg = self.cfg
        M = h0.shape[0]
        h, z = h0, z0
        feats = [torch.cat([h, z], -1)]
        acts, ents = [], []
        for _ in range(cfg.horizon):
            s = feats[-1]
            mean, std = fused.actor_stats(w, s)
            u = mean + std * torch.randn_like(mean)
            a = torch.tanh(u)
            h = fused.sequence_model(w, h, z, a)
            z = ref.sample_categorical(fused.prior_logits(w, h), torch.rand(M, cfg.S), cfg.C, straight_through=True)
            feats.append(torch.cat([h, z], -1))
            acts.append(a)
            ents.append(squashed_entropy(std, u))
        return {"feat": torch.stack(feats), "action": torch.stack(acts), "entropy": torch.stack(ents)}

    def lambda_returns(self, reward: torch.Tensor, disc: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        """reward, disc [H, M] (for steps 1..H), value [H+1, M] -> returns [H, M] for steps 0..H-1."""
        lam = self.cfg.lam
        out = []
        last = value[-1]
        for t in reversed(range(reward.shape[0])):
            last = reward[t] + disc[t] * ((1 - lam) * value[t + 1] + lam * last)
            out.append(last)
        return torch.stack(out[::-1])

    def actor_critic_loss(self, h0: torch.Tensor, z0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict]:
        """Imagine from the posterior states h0 [M, D], z0 [M, Z]; returns (actor loss, critic loss, metrics)."""
        cfg = self.cfg
        traj = self.imagine(h0, z0)
        feat = traj["feat"]
        # Heads are evaluated but not trained here (only actor / critic optimisers step).
        reward = symexp(self.reward(feat[1:]).squeeze(-1))
        cont = torch.sigmoid(self.cont(feat[1:]).squeeze(-1))
        disc = cfg.gamma * cont
        value = symexp(self.critic(feat).squeeze(-1))
        ret = self.lambda_returns(reward, disc, value)
        with torch.no_grad():
            weight = torch.cumprod(torch.cat([torch.ones_like(disc[:1]), disc[:-1]]), 0)
            lo, hi = torch.quantile(ret.detach().flatten(), torch.tensor([0.05, 0.95]))
            self.return_scale.mul_(cfg.return_decay).add_((1 - cfg.return_decay) * (hi - lo))
            scale = torch.clamp(self.return_scale, min=1.0)
        actor_loss = -(weight * (ret / scale + cfg.entropy * traj["entropy"])).mean()
        tgt = symlog(ret.detach())
        fd = feat[:-1].detach()
        pred = self.critic(fd).squeeze(-1)
        with torch.no_grad():
            slow = self.slow_critic(fd).squeeze(-1)
        critic_loss = (weight * ((pred - tgt) ** 2 + cfg.critic_reg * (pred - slow) ** 2)).mean()
        metrics = {
            "loss_actor": float(actor_loss.detach()), "loss_critic": float(critic_loss.detach()),
            "return_mean": float(ret.detach().mean()), "return_scale": float(self.return_scale),
            "imag_reward": float(reward.detach().mean()),
        }
        return actor_loss, critic_loss, metrics

    # --- one update --------------------------------------------------------------------------------

    def train_step(self, batch: Mapping[str, torch.Tensor], ac_starts: int | None = 256) -> dict[str, float]:
        """One world-model update then one actor and critic update on imagined data.

        ``ac_starts``: number of posterior states (random subset of B*T) to imagine from
        (None: all of them, as the reference DreamerV3).
        """
        h0, z0, metrics = self.train_world_model(batch)
        if ac_starts is not None and ac_starts < h0.shape[0]:
            idx = torch.randperm(h0.shape[0])[:ac_starts]
            h0, z0 = h0[idx], z0[idx]
        return {**metrics, **self.train_actor_critic(h0, z0)}

    def train_world_model(self, batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
        """One world-model update; returns the detached posterior states h0 [B*T, D], z0 [B*T, Z] and metrics."""
        cfg = self.cfg
        self.wm_opt.zero_grad(set_to_none=True)
        with self.autocast():
            loss, aux = self.world_model_loss(batch)
        loss.backward()
        nn.utils.clip_grad_norm_(self.wm_params, cfg.wm_clip)
        self.wm_opt.step()
        return aux["h"].reshape(-1, self.D), aux["z"].reshape(-1, self.Z), aux["metrics"]

    def train_actor_critic(self, h0: torch.Tensor, z0: torch.Tensor) -> dict[str, float]:
        """One actor and one critic update imagined from h0 [M, D], z0 [M, Z]; then the slow critic."""
        cfg = self.cfg
        with self.autocast():
            actor_loss, critic_loss, m2 = self.actor_critic_loss(h0, z0)
        self.actor_opt.zero_grad(set_to_none=True)
        self.critic_opt.zero_grad(set_to_none=True)
        # The actor loss backpropagates through the dynamics (Dreamer's dynamics backprop for
        # continuous actions); ``inputs=`` accumulates grads only into the actor's parameters.
        actor_loss.backward(inputs=self.actor_params)
        critic_loss.backward(inputs=list(self.critic.parameters()))
        nn.utils.clip_grad_norm_(self.actor_params, cfg.ac_clip)
        nn.utils.clip_grad_norm_(self.critic.parameters(), cfg.ac_clip)
        self.actor_opt.step()
        self.critic_opt.step()
        with torch.no_grad():
            for p, q in zip(self.slow_critic.parameters(), self.critic.parameters()):
                p.mul_(1 - cfg.critic_ema).add_(cfg.critic_ema * q)
            self.updates += 1
        return m2

    # --- export for acting ---------------------------------------------------------------------------

    def acting_weights(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """(RSSM weights with docs/design.md names, encoder weights) as float32 numpy, for the agent."""
        enc = {k: np.ascontiguousarray(v.detach().cpu().numpy(), dtype=np.float32) for k, v in self.encoder.state_dict().items()}
        return self.rssm.kernel_weights(), enc

    # --- optimiser state as flat tensors (safetensors-friendly) -------------------------------------

    def optimizer_tensors(self) -> dict[str, torch.Tensor]:
        """Adam moments and step counts as a flat name -> tensor mapping."""
        out: dict[str, torch.Tensor] = {}
        for oname, opt in (("wm", self.wm_opt), ("actor", self.actor_opt), ("critic", self.critic_opt)):
            params = [p for g in opt.param_groups for p in g["params"]]
            for i, p in enumerate(params):
                st = opt.state.get(p)
                if not st:
                    continue
                for k, v in st.items():
                    out[f"{oname}.{i}.{k}"] = torch.as_tensor(v).detach().clone().contiguous()
        return out

    def load_optimizer_tensors(self, tensors: Mapping[str, torch.Tensor]) -> None:
        for oname, opt in (("wm", self.wm_opt), ("actor", self.actor_opt), ("critic", self.critic_opt)):
            params = [p for g in opt.param_groups for p in g["params"]]
            opt.state.clear()
            for i, p in enumerate(params):
                st = {k.split(".", 2)[2]: v.clone() for k, v in tensors.items() if k.startswith(f"{oname}.{i}.")}
                if st:
                    avg = st.get("exp_avg")
                    if avg is not None and avg.shape != p.shape:
                        raise ValueError(f"optimizer state {oname}.{i}: shape {list(avg.shape)} does not match "
                                         f"its parameter {list(p.shape)} (checkpoint from a different model?)")
                    if "step" in st:
                        st["step"] = st["step"].float()
                    opt.state[p] = st
