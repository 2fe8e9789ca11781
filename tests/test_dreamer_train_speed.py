"""The training-speed pieces: the reference DreamerV3 update (the benchmark's anchor), the fused RSSM
ops our training differentiates, the bfloat16 option and the reference-sized encoder / decoder."""
from __future__ import annotations

import math

import pytest
import torch

from bench.anchors.dreamerv3_reference import ReferenceConfig, ReferenceDreamer, TwoHot, symexp
from metacog_fast.metaworld.models import rssm_train_ops as fused
from metacog_fast.metaworld.models.dreamer import Dreamer, DreamerConfig
from metacog_fast.ops.rssm import naive as ref
from metacog_fast.ops.rssm.weights import init_rssm_weights

TINY_REF = dict(obs_dim=7, action_dim=2, deter=16, hidden=16, stoch=4, discrete=4, units=16, mlp_layers=2,
                mlp_units=16, bins=15, horizon=4)
TINY = dict(preset=None, D=16, Hd=16, S=4, C=4, layers=1, horizon=3, obs_dim=7, action_dim=2)


def _ref_data(B: int = 3, T: int = 6, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    is_first = torch.zeros(B, T)
    is_first[:, 0] = 1
    is_first[1, 3] = 1  # an episode boundary inside one sequence
    return {"obs": torch.randn(B, T, 7, generator=g), "action": torch.rand(B, T, 2, generator=g) * 2 - 1,
            "reward": torch.rand(B, T, generator=g) * 3, "is_first": is_first, "is_terminal": torch.zeros(B, T)}


def _our_batch(B: int = 3, T: int = 5, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"obs": torch.randn(B, T, 7, generator=g), "prev_action": torch.rand(B, T, 2, generator=g) * 2 - 1,
            "reward": torch.rand(B, T, generator=g), "cont": torch.ones(B, T),
            "labels": (torch.rand(B, T, 5, generator=g) > 0.5).float()}


# --- the anchor ------------------------------------------------------------------------------------

def test_reference_world_model_losses_and_finite_gradients():
    torch.manual_seed(0)
    m = ReferenceDreamer(ReferenceConfig(**TINY_REF))
    m.world_model.requires_grad_(True)
    loss, losses, post = m.world_model_losses(_ref_data())
    assert set(losses) == {"decoder", "reward", "cont", "dyn", "rep"}
    for k, v in losses.items():
        assert v.shape == (3, 6) and torch.isfinite(v).all(), k
    assert (losses["decoder"] >= 0).all() and (losses["reward"] > 0).all() and (losses["cont"] > 0).all()
    torch.testing.assert_close(losses["dyn"], losses["rep"])  # equal values, different gradients
    assert post["stoch"].shape == (3, 6, 4, 4) and post["deter"].shape == (3, 6, 16)
    loss.backward()
    grads = [p.grad for p in m.world_model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert m.rssm.W.grad.abs().sum() > 0  # the learned initial state is used at is_first rows


def test_reference_update_changes_every_part_and_reports_finite_losses():
    torch.manual_seed(0)
    m = ReferenceDreamer(ReferenceConfig(**TINY_REF))
    before = {k: v.detach().clone() for k, v in m.state_dict().items()}
    metrics = m.train_step(_ref_data())
    for k in ("decoder_loss", "reward_loss", "cont_loss", "dyn_loss", "rep_loss", "model_loss", "actor_loss",
              "value_loss", "actor_entropy", "model_grad_norm", "actor_grad_norm", "value_grad_norm"):
        assert math.isfinite(metrics[k]), k
    after = m.state_dict()
    for prefix in ("encoder.", "rssm.", "decoder.", "reward.", "cont.", "actor.", "value.", "slow_value."):
        changed = [k for k in after if k.startswith(prefix) and not torch.equal(after[k], before[k])]
        assert changed, prefix
    assert all(torch.isfinite(v).all() for v in after.values())
    assert not any(p.requires_grad for p in m.parameters())  # only the module in training requires grad


def test_reference_imagination_builds_no_world_model_weight_gradients():
    torch.manual_seed(0)
    m = ReferenceDreamer(ReferenceConfig(**TINY_REF))
    post, _ = m.train_world_model(_ref_data())
    m.actor.requires_grad_(True)
    feat, state, action = m.imagine(post)
    assert feat.shape == (4, 18, 16 + 16) and action.shape == (4, 18, 2)
    assert action.abs().max() <= 1.0 + 1e-6
    feat.sum().backward()
    assert all(p.grad is None for p in m.world_model.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in m.actor.parameters())


def test_reference_two_hot_and_lambda_return_by_hand():
    logits = torch.randn(2, 15)
    d = TwoHot(logits)
    b = d.buckets
    x = torch.stack([b[3], (b[5] + b[6]) / 2])  # symlog-space targets: on a bucket, half-way
    lp = d.log_prob(symexp(x)[:, None])
    logp = torch.log_softmax(logits, -1)
    torch.testing.assert_close(lp, torch.stack([logp[0, 3], 0.5 * (logp[1, 5] + logp[1, 6])]), rtol=1e-4, atol=1e-4)
    m = ReferenceDreamer(ReferenceConfig(**TINY_REF))
    r, v, c = torch.tensor([[[1.0]], [[2.0]]]), torch.tensor([[[0.5]], [[0.25]]]), torch.tensor([[[0.9]], [[0.8]]])
    boot = torch.tensor([[3.0]])
    lam = m.cfg.lam
    R1 = 2.0 + 0.8 * ((1 - lam) * 3.0 + lam * 3.0)
    R0 = 1.0 + 0.9 * ((1 - lam) * 0.25 + lam * R1)
    torch.testing.assert_close(m.lambda_return(r, v, c, boot).flatten(), torch.tensor([R0, R1]))


# --- ours --------------------------------------------------------------------------------------------

def test_fused_rssm_ops_match_the_reference():
    w = {k: torch.tensor(v) for k, v in init_rssm_weights(None, D=24, Hd=20, S=4, C=5, A=3, E=12, seed=1).items()}
    g = torch.Generator().manual_seed(0)
    for k in w:  # non-trivial gains and biases
        if k.endswith(".b"):
            w[k] = torch.randn(w[k].shape, generator=g) * 0.3
        if k.endswith("ln.g"):
            w[k] = 1 + torch.randn(w[k].shape, generator=g) * 0.3
    h, z = torch.randn(6, 24, generator=g), torch.rand(6, 20, generator=g)
    a, e = torch.rand(6, 3, generator=g), torch.randn(6, 12, generator=g)
    s = torch.cat([h, z], -1)
    close = lambda x, y: torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)  # noqa: E731
    close(fused.sequence_model(w, h, z, a), ref.sequence_model(w, h, z, a))
    close(fused.prior_logits(w, h), ref.prior_logits(w, h))
    close(fused.posterior_logits(w, h, e), ref.posterior_logits(w, h, e))
    close(torch.cat(fused.actor_stats(w, s)), torch.cat(ref.actor_stats(w, s)))
    close(fused.sa_logits(w, s), ref.sa_logits(w, s))


def test_bfloat16_update_tracks_float32_losses():
    """Same weights, same noise: a few bf16 updates give the float32 losses within bf16 rounding."""
    out = {}
    for prec in ("float32", "bfloat16"):
        m = Dreamer(DreamerConfig(precision=prec, **TINY))
        runs = []
        for i in range(3):
            torch.manual_seed(10 + i)
            runs.append(m.train_step(_our_batch(seed=i), ac_starts=None))
        out[prec] = runs
        assert all(math.isfinite(v) for r in runs for v in r.values())
        assert all(p.dtype == torch.float32 for p in m.parameters())
    for r32, r16 in zip(out["float32"], out["bfloat16"]):
        for k in ("loss_wm", "loss_dec", "kl_dyn", "loss_sa"):
            assert r16[k] == pytest.approx(r32[k], rel=0.03, abs=0.02), k
    assert out["float32"][0] != out["bfloat16"][0]  # bf16 is really on


def test_precision_and_obs_mlp_options():
    with pytest.raises(ValueError, match="precision"):
        Dreamer(DreamerConfig(precision="float16", **TINY))
    m = Dreamer(DreamerConfig(obs_mlp_layers=3, obs_mlp_units=24, E=10, **TINY))
    assert len(m.encoder.body) == 9 and m.encoder.body[0].out_features == 24 and m.encoder.out.out_features == 10
    assert len(m.decoder.body) == 9 and m.decoder.out.in_features == 24
    assert len(m.reward.body) == 3  # the heads keep ``layers`` x Hd
    loss, _ = m.world_model_loss(_our_batch())
    assert torch.isfinite(loss)
