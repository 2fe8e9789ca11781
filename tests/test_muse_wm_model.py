"""Dreamer-v3 / MUSE-WM model pieces, checkpoints and the acting agent."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from metacog_fast.metaworld.muse_wm import MuseWMAgent, NumpyEncoder
from metacog_fast.ops.rssm import naive as ref
from metacog_fast.metaworld.models.dreamer import Dreamer, DreamerConfig, symexp, symlog
from metacog_fast.metaworld.train import checkpoint as ck
from metacog_fast.metaworld.train.config import ActConfig, profile

TINY = dict(preset=None, D=16, Hd=16, S=4, C=4, layers=1, horizon=3, obs_dim=7, action_dim=2)


def _batch(B: int, T: int, O: int = 7, A: int = 2, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "obs": torch.randn(B, T, O, generator=g),
        "prev_action": torch.rand(B, T, A, generator=g) * 2 - 1,
        "reward": torch.rand(B, T, generator=g),
        "cont": torch.ones(B, T),
        "labels": (torch.rand(B, T, 5, generator=g) > 0.5).float(),
    }


def test_symlog_symexp_inverse():
    x = torch.tensor([-1e4, -3.0, -1e-3, 0.0, 2.5, 1e5])
    torch.testing.assert_close(symexp(symlog(x)), x, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("muse", [True, False])
def test_sa_loss_trains_sa_head_only_for_muse(muse):
    m = Dreamer(DreamerConfig(muse=muse, **TINY))
    loss, aux = m.world_model_loss(_batch(3, 5))
    assert torch.isfinite(loss)
    loss.backward()
    sa_grads = [p.grad for p in m.rssm_group("sa")]
    if muse:
        assert all(g is not None and g.abs().sum() > 0 for g in sa_grads)
        assert "loss_sa" in aux["metrics"]
    else:
        assert all(g is None for g in sa_grads)
        assert "loss_sa" not in aux["metrics"]
    assert m.rssm.weights()["gru.w"].grad.abs().sum() > 0


def test_sa_loss_is_per_quantile_bce_sum():
    """Eq. 4: sum over the N quantiles of the binary cross-entropy of psi_i against c_i."""
    m = Dreamer(DreamerConfig(**TINY))
    feat = torch.randn(4, m.D + m.Z)
    labels = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 0, 0, 0], [0, 1, 1, 1, 1], [0, 0, 0, 1, 1]], dtype=torch.float32)
    psi = torch.sigmoid(m.sa_logits(feat))
    by_hand = -(labels * psi.log() + (1 - labels) * (1 - psi).log()).sum(-1)
    bce = torch.nn.functional.binary_cross_entropy_with_logits(m.sa_logits(feat), labels, reduction="none").sum(-1)
    torch.testing.assert_close(bce, by_hand, rtol=1e-5, atol=1e-6)


def test_kl_free_bits_and_lambda_returns():
    m = Dreamer(DreamerConfig(**TINY))
    lg = torch.randn(2, m.Z)
    assert torch.allclose(m._kl(lg, lg), torch.zeros(2), atol=1e-6)
    # lambda-returns by hand for H=2: R1 = r2 + d2 * v2 ; R0 = r1 + d1 ((1-l) v1 + l R1)
    r = torch.tensor([[1.0], [2.0]])
    d = torch.tensor([[0.9], [0.8]])
    v = torch.tensor([[0.5], [0.25], [4.0]])
    lam = m.cfg.lam
    R1 = 2.0 + 0.8 * 4.0
    R0 = 1.0 + 0.9 * ((1 - lam) * 0.25 + lam * R1)
    torch.testing.assert_close(m.lambda_returns(r, d, v), torch.tensor([[R0], [R1]]))


def test_train_step_updates_every_part():
    torch.manual_seed(0)
    m = Dreamer(DreamerConfig(**TINY))
    before = {k: v.detach().clone() for k, v in m.state_dict().items()}
    met = m.train_step(_batch(2, 6), ac_starts=8)
    assert all(np.isfinite(v) for v in met.values())
    after = m.state_dict()
    for key in ("rssm.gru.w", "rssm.sa.out.w", "rssm.actor.out.w", "encoder.out.weight", "decoder.out.weight",
                "critic.out.weight"):
        assert not torch.equal(before[key], after[key]), key
    assert int(m.updates) == 1


def test_checkpoint_round_trip_continues_identically(tmp_path):
    cfg = profile("smoke")
    m = Dreamer(cfg.model)
    obs_dim = cfg.model.obs_dim
    m.train_step(_batch(2, 6, O=obs_dim, A=4), ac_starts=8)
    ck.save_checkpoint(tmp_path / "c", m, cfg, meta={"k": 1})
    m2, cfg2, meta = ck.load_checkpoint(tmp_path / "c")
    assert meta == {"k": 1} and cfg2.to_dict() == cfg.to_dict()
    for k, v in m.state_dict().items():
        torch.testing.assert_close(m2.state_dict()[k], v, rtol=0, atol=0)
    # same optimiser state and RNG -> identical next update
    b = _batch(2, 6, O=obs_dim, A=4, seed=3)
    torch.manual_seed(7)
    m.train_step(b, ac_starts=8)
    torch.manual_seed(7)
    m2.train_step(b, ac_starts=8)
    for k, v in m.state_dict().items():
        torch.testing.assert_close(m2.state_dict()[k], v, rtol=0, atol=0)


def test_checkpoint_errors_are_clear(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        ck.read_config(tmp_path / "missing")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="not a valid checkpoint JSON"):
        ck.read_config(tmp_path / "bad")
    cfg = profile("smoke")
    ck.save_checkpoint(tmp_path / "c", Dreamer(cfg.model), cfg)
    with open(tmp_path / "c.safetensors", "r+b") as f:  # corrupt the tensors
        f.seek(200)
        f.write(b"\x00\x01\x02\x03")
    with pytest.raises(ValueError, match="digest"):
        ck.load_checkpoint(tmp_path / "c")


def test_numpy_encoder_matches_torch():
    m = Dreamer(DreamerConfig(**TINY))
    _, enc = m.acting_weights()
    x = np.random.default_rng(0).standard_normal((3, 7)).astype(np.float32) * 5
    np.testing.assert_allclose(NumpyEncoder(enc)(x), m.encode(torch.from_numpy(x)).detach().numpy(), rtol=1e-4, atol=1e-5)


def _reference_act(w, enc, hza, obs, u, u_prior, eps, cfg: ActConfig, C: int):
    """One decision written directly with the torch reference functions."""
    h, z, a = hza
    tw = {k: torch.from_numpy(v) for k, v in w.items()}
    e = torch.from_numpy(NumpyEncoder(enc)(obs[None]))
    h2, zpost, _ = ref.obs_step(tw, torch.from_numpy(h), torch.from_numpy(z), torch.from_numpy(a), e, torch.from_numpy(u), C)
    zin = zpost if (not cfg.self_regulation or cfg.sr_z == "posterior") else None
    H = cfg.H if cfg.self_regulation else 0
    _, a_t, _ = ref.self_regulate(tw, h2, zin, H, cfg.beta, torch.from_numpy(eps), torch.from_numpy(u_prior), C)
    psi = ref.self_assess(tw, torch.cat([h2, zpost], -1))
    return a_t.numpy()[0], psi.numpy()[0], (h2.numpy(), zpost.numpy(), a_t.numpy())


@pytest.mark.parametrize("sr", [("prior", True), ("posterior", True), ("prior", False)])
def test_agent_matches_reference_given_identical_noise(sr):
    sr_z, regulate = sr
    cfg = ActConfig(sr_z=sr_z, self_regulation=regulate, H=4, backend="torch")
    m = Dreamer(DreamerConfig(preset=None, D=16, Hd=16, S=4, C=4, layers=1, obs_dim=7, action_dim=2, seed=1))
    w, enc = m.acting_weights()
    agent = MuseWMAgent(w, enc, cfg, classes=4)
    rng = np.random.default_rng(5)
    state = (np.zeros((1, 16), np.float32), np.zeros((1, 16), np.float32), np.zeros((1, 2), np.float32))
    H = cfg.H if regulate else 0
    for _ in range(3):
        obs = rng.standard_normal(7).astype(np.float32)
        u, up = rng.random((1, 4), dtype=np.float32), rng.random((1, 4), dtype=np.float32)
        eps = rng.standard_normal((H + 1, 1, 2), dtype=np.float32)
        a = agent.act(obs, u=u, u_prior=up, eps=eps)
        a_ref, psi_ref, state = _reference_act(w, enc, state, obs, u, up, eps, cfg, 4)
        np.testing.assert_allclose(a, a_ref, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(agent.psi, psi_ref, rtol=1e-5, atol=1e-6)
        assert a.shape == (2,) and np.all(np.abs(a) <= 1)


def test_agent_fused_cpu_kernel_matches_torch_reference():
    from metacog_fast.ops.rssm import api as K

    if "cpu" not in K._available():
        pytest.skip("this build of the core has no RssmCpu (fused CPU RSSM kernel)")
    m = Dreamer(DreamerConfig(seed=2))  # XS, the acting preset
    w, enc = m.acting_weights()
    agents = {be: MuseWMAgent(w, enc, ActConfig(backend=be, sr_z="posterior")) for be in ("cpu", "torch")}
    rng = np.random.default_rng(0)
    for _ in range(3):
        obs = rng.standard_normal(59).astype(np.float32)
        u, up = rng.random((1, 32), dtype=np.float32), rng.random((1, 32), dtype=np.float32)
        eps = rng.standard_normal((11, 1, 4), dtype=np.float32)
        a_cpu = agents["cpu"].act(obs, u=u, u_prior=up, eps=eps)
        a_ref = agents["torch"].act(obs, u=u, u_prior=up, eps=eps)
        np.testing.assert_allclose(a_cpu, a_ref, rtol=1e-3, atol=1e-4)
        np.testing.assert_allclose(agents["cpu"].psi, agents["torch"].psi, rtol=1e-3, atol=1e-4)
        np.testing.assert_array_equal(agents["cpu"].z, agents["torch"].z)


def test_agent_rejects_bad_observations():
    m = Dreamer(DreamerConfig(**TINY))
    agent = MuseWMAgent(*m.acting_weights(), ActConfig(H=2, backend="torch"), classes=4)
    with pytest.raises(ValueError, match=r"obs: expected shape \[7\]"):
        agent.act(np.zeros(5, np.float32))
    with pytest.raises(ValueError, match="NaN"):
        agent.act(np.full(7, np.nan, np.float32))
    with pytest.raises(ValueError, match="sr_z"):
        MuseWMAgent(*m.acting_weights(), ActConfig(sr_z="both"), classes=4)
