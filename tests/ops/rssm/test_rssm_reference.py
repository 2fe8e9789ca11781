"""The torch reference of the RSSM / MUSE kernels against independent numpy
re-derivations, finite differences and the sampling semantics of docs/design.md §1.1-1.2;
plus the public API's conversions, noise and input validation (torch backend)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from metacog_fast.ops.rssm import api as R
from metacog_fast.ops.rssm import naive as ref
from metacog_fast.metaworld.models.rssm import RSSM

SMALL = dict(preset=None, D=12, Hd=10, S=3, C=4, A=2, E=5, L=2, N=5)


def _perturbed(seed: int = 0, **kw) -> dict[str, np.ndarray]:
    """Weights with non-trivial LayerNorm gains/biases and biases (catches swapped parameters)."""
    w = R.init_rssm_weights(**(kw or SMALL), seed=seed)
    rng = np.random.default_rng(seed + 100)
    for k in w:
        if k.endswith("ln.g"):
            w[k] = (1 + 0.3 * rng.standard_normal(w[k].shape)).astype(np.float32)
        elif k.endswith(".b"):
            w[k] = (0.2 * rng.standard_normal(w[k].shape)).astype(np.float32)
    return w


def _t(w: dict[str, np.ndarray], dtype=torch.float64) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(v).to(dtype) for k, v in w.items()}


# --- independent numpy maths (float64) ---------------------------------------------------


def np_ln(x, g, b, eps=1e-3):
    m = x.mean(-1, keepdims=True)
    v = x.var(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * g + b


def np_sig(x):
    return 1 / (1 + np.exp(-x))


def np_silu(x):
    return x * np_sig(x)


def np_block(w, name, x):
    return np_silu(np_ln(x @ w[f"{name}.w"].T + w[f"{name}.b"], w[f"{name}.ln.g"], w[f"{name}.ln.b"]))


def np_seq(w, h, z, a):
    x = np_block(w, "img_in", np.concatenate([z, a], -1))
    g = np_ln(np.concatenate([x, h], -1) @ w["gru.w"].T, w["gru.ln.g"], w["gru.ln.b"])
    D = h.shape[-1]
    r, c, u = g[:, :D], g[:, D : 2 * D], g[:, 2 * D :]
    r = np_sig(r)
    c = np.tanh(r * c)
    u = np_sig(u - 1)
    return u * c + (1 - u) * h


def np_sa(w, s, L=2):
    x = s
    for i in range(L):
        x = np_block(w, f"sa.{i}", x)
    return np_sig(x @ w["sa.out.w"].T + w["sa.out.b"])


def _state(rng, B, sz):
    h = rng.standard_normal((B, sz.D))
    k = rng.integers(0, sz.C, (B, sz.S))
    z = np.zeros((B, sz.S, sz.C))
    np.put_along_axis(z, k[..., None], 1.0, -1)
    return h, z.reshape(B, sz.Z)


# --- weights ------------------------------------------------------------------------------


def test_init_names_shapes_and_init_values():
    w = R.init_rssm_weights("XS")
    sz = R.infer_sizes(w)
    assert (sz.D, sz.Hd, sz.S, sz.C, sz.A, sz.E, sz.L_actor, sz.L_sa, sz.N) == (256, 256, 32, 32, 4, 256, 2, 2, 5)
    assert sorted(w) == sorted(R.weight_names(sz))
    assert w["img_in.w"].shape == (256, 32 * 32 + 4)
    assert w["gru.w"].shape == (3 * 256, 256 + 256) and "gru.b" not in w
    assert w["obs_out.w"].shape == (256, 256 + 256)
    assert w["actor.0.w"].shape == (256, 256 + 1024) and w["actor.out.w"].shape == (8, 256)
    assert w["sa.0.w"].shape == (256, 256 + 1024) and w["sa.out.w"].shape == (5, 256)
    for k, v in w.items():
        assert v.dtype == np.float32 and v.flags.c_contiguous, k
        if k.endswith("ln.g"):
            assert np.all(v == 1)
        elif k.endswith(".b"):
            assert np.all(v == 0)
    lim = np.sqrt(6 / (256 + 1028))
    assert np.abs(w["img_in.w"]).max() <= lim and np.abs(w["img_in.w"]).max() > 0.9 * lim
    S = R.init_rssm_weights("S")
    assert S["gru.w"].shape == (1536, 1024)
    # deterministic per seed
    assert np.array_equal(R.init_rssm_weights("XS", seed=3)["gru.w"], R.init_rssm_weights("XS", seed=3)["gru.w"])
    assert not np.array_equal(R.init_rssm_weights("XS", seed=3)["gru.w"], w["gru.w"])


@pytest.mark.parametrize(
    "kw, match",
    [(dict(preset="M"), "preset"), (dict(preset=None, D=8), "Hd"), (dict(preset="XS", A=0), "A")],
)
def test_init_rejects_bad_sizes(kw, match):
    with pytest.raises(ValueError, match=match):
        R.init_rssm_weights(**kw)


def test_model_state_dict_uses_spec_names_and_reference():
    w = _perturbed()
    m = RSSM(weights=w, classes=4)
    assert sorted(m.state_dict()) == sorted(w)
    sz = R.infer_sizes(w, 4)
    rng = np.random.default_rng(1)
    h, z = _state(rng, 3, sz)
    a = rng.uniform(-1, 1, (3, sz.A))
    u = rng.random((3, sz.S))
    f = lambda x: torch.from_numpy(x).float()  # noqa: E731
    h2, z2, lg = m(f(h), f(z), f(a), f(u))
    rh, rz, rl = ref.img_step(_t(w, torch.float32), f(h), f(z), f(a), f(u), 4)
    torch.testing.assert_close(h2, rh)
    torch.testing.assert_close(z2, rz)
    # straight-through: gradient reaches the prior logits through the sample
    (z2 * torch.arange(sz.Z).float()).sum().backward()
    assert m.img_logits.w.grad.abs().sum() > 0


# --- building blocks against numpy --------------------------------------------------------


def test_layer_norm_matches_torch_functional():
    x = torch.randn(7, 33, dtype=torch.float64)
    g, b = torch.randn(33, dtype=torch.float64), torch.randn(33, dtype=torch.float64)
    torch.testing.assert_close(ref.layer_norm(x, g, b), torch.nn.functional.layer_norm(x, (33,), g, b, eps=1e-3))


def test_sequence_model_prior_posterior_match_numpy():
    w = _perturbed()
    sz = R.infer_sizes(w, 4)
    rng = np.random.default_rng(2)
    h, z = _state(rng, 5, sz)
    a = rng.uniform(-1, 1, (5, sz.A))
    e = rng.standard_normal((5, sz.E))
    tw = _t(w)
    t = torch.from_numpy
    h2 = ref.sequence_model(tw, t(h), t(z), t(a)).numpy()
    np.testing.assert_allclose(h2, np_seq(w, h, z, a), rtol=1e-10, atol=1e-12)
    pri = np_block(w, "img_out", h2) @ w["img_logits.w"].T + w["img_logits.b"]
    np.testing.assert_allclose(ref.prior_logits(tw, t(h2)).numpy(), pri, rtol=1e-10, atol=1e-12)
    post = np_block(w, "obs_out", np.concatenate([h2, e], -1)) @ w["obs_logits.w"].T + w["obs_logits.b"]
    np.testing.assert_allclose(ref.posterior_logits(tw, t(h2), t(e)).numpy(), post, rtol=1e-10, atol=1e-12)


def test_categorical_inverse_cdf_semantics():
    C = 4
    logits = torch.tensor([[0.0, 1.0, -1.0, 2.0, 5.0, 5.0, 5.0, 5.0]], dtype=torch.float64)  # S=2 groups
    p = 0.99 * torch.softmax(logits.view(1, 2, C), -1) + 0.01 / C
    cdf = torch.cumsum(p, -1)[0]
    # u just below / at each boundary
    for g in range(2):
        for k in range(C):
            lo = (cdf[g, k - 1].item() if k else 0.0) + 1e-9
            hi = cdf[g, k].item() - 1e-9
            for uval in (lo, hi):
                u = torch.full((1, 2), 0.5, dtype=torch.float64)
                u[0, g] = uval
                oh = ref.sample_categorical(logits, u, C).view(2, C)
                assert oh[g].argmax().item() == k and oh[g].sum().item() == 1.0
    # exactly at a boundary -> the next class ("first k with cdf[k] > u")
    u = torch.tensor([[cdf[0, 0].item(), 0.0]], dtype=torch.float64)
    assert ref.sample_categorical(logits, u, C).view(2, C)[0].argmax().item() == 1
    assert ref.sample_categorical(logits, u, C).view(2, C)[1].argmax().item() == 0
    # u just below 1 with rounding: never out of range
    u = torch.full((1, 2), np.nextafter(1.0, 0.0), dtype=torch.float64)
    assert ref.sample_categorical(logits, u, C).view(2, C).argmax(-1).tolist() == [C - 1, C - 1]


def test_categorical_frequencies_follow_unimix_probs():
    C = 5
    logits = torch.tensor([[8.0, -8.0, 0.0, -8.0, 1.0]])
    u = torch.from_numpy(np.random.default_rng(0).random((200_000, 1), dtype=np.float32))
    oh = ref.sample_categorical(logits.expand(200_000, C), u, C)
    freq = oh.mean(0).numpy()
    p = (0.99 * torch.softmax(logits, -1) + 0.01 / C)[0].numpy()
    np.testing.assert_allclose(freq, p, atol=3e-3)
    assert freq.min() > 0.5 * 0.01 / C  # unimix keeps every class alive


def test_actor_sample_formula():
    w = _perturbed()
    sz = R.infer_sizes(w, 4)
    rng = np.random.default_rng(3)
    h, z = _state(rng, 4, sz)
    s = np.concatenate([h, z], -1)
    eps = rng.standard_normal((4, sz.A))
    x = s
    for i in range(2):
        x = np_block(w, f"actor.{i}", x)
    out = x @ w["actor.out.w"].T + w["actor.out.b"]
    mean, raw = out[:, : sz.A], out[:, sz.A :]
    want = np.tanh(mean + (np.log1p(np.exp(raw)) + 0.1) * eps)
    got = ref.actor_sample(_t(w), torch.from_numpy(s), torch.from_numpy(eps)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_self_assess_and_gradient_match_numpy_and_finite_differences():
    w = _perturbed()
    sz = R.infer_sizes(w, 4)
    rng = np.random.default_rng(4)
    h, z = _state(rng, 3, sz)
    s = np.concatenate([h, z], -1)
    psi, g = ref.self_assess(_t(w), torch.from_numpy(s), grad=True)
    np.testing.assert_allclose(psi.numpy(), np_sa(w, s), rtol=1e-10)
    fd = np.zeros_like(s)
    d = 1e-6
    for j in range(s.shape[1]):
        sp, sm = s.copy(), s.copy()
        sp[:, j] += d
        sm[:, j] -= d
        fd[:, j] = (np_sa(w, sp).sum(-1) - np_sa(w, sm).sum(-1)) / (2 * d)
    np.testing.assert_allclose(g.numpy(), fd, rtol=1e-5, atol=1e-8)


def test_imagine_is_actor_then_img_step():
    w = _t(_perturbed(), torch.float32)
    sz = R.infer_sizes(w, 4)
    rng = np.random.default_rng(5)
    h, z = (torch.from_numpy(x).float() for x in _state(rng, 3, sz))
    eps = torch.from_numpy(rng.standard_normal((4, 3, sz.A))).float()
    u = torch.from_numpy(rng.random((4, 3, sz.S))).float()
    hs, zs, acts = ref.imagine(w, h, z, eps, u, 4)
    assert hs.shape == (4, 3, sz.D) and zs.shape == (4, 3, sz.Z) and acts.shape == (4, 3, sz.A)
    for t in range(4):
        a = ref.actor_sample(w, torch.cat([h, z], -1), eps[t])
        h, z, _ = ref.img_step(w, h, z, a, u[t], 4)
        torch.testing.assert_close(acts[t], a)
        torch.testing.assert_close(hs[t], h)
        torch.testing.assert_close(zs[t], z)


def test_self_regulate_follows_algorithm_1():
    w = _t(_perturbed(), torch.float64)
    sz = R.infer_sizes(w, 4)
    rng = np.random.default_rng(6)
    h, _ = _state(rng, 3, sz)
    h = torch.from_numpy(h)
    eps = torch.from_numpy(rng.standard_normal((4, 3, sz.A)))
    u = torch.from_numpy(rng.random((3, sz.S)))
    beta = 0.5
    zt, at, hn, tr = ref.self_regulate(w, h, None, 3, beta, eps, u, 4, trace=True)
    # by hand, with the SA gradient from finite differences (independent of autograd)
    z0 = ref.sample_categorical(ref.prior_logits(w, h), u, 4)
    torch.testing.assert_close(zt, z0)
    wn = {k: v.numpy() for k, v in w.items()}
    s = torch.cat([h, z0], -1)
    D = sz.D
    for k in range(3):
        a = ref.actor_sample(w, s, eps[k])
        s = torch.cat([ref.sequence_model(w, s[:, :D], s[:, D:], a), s[:, D:]], -1)
        sn = s.numpy()
        np.testing.assert_allclose(tr[k].numpy(), np_sa(wn, sn), rtol=1e-7)  # fd error carried over
        fd = np.zeros_like(sn)
        for j in range(sn.shape[1]):
            sp, sm = sn.copy(), sn.copy()
            sp[:, j] += 1e-6
            sm[:, j] -= 1e-6
            fd[:, j] = (np_sa(wn, sp).sum(-1) - np_sa(wn, sm).sum(-1)) / 2e-6
        s = torch.from_numpy(sn + beta * fd)
    a_t = ref.actor_sample(w, s, eps[3])
    torch.testing.assert_close(at, a_t, rtol=1e-6, atol=1e-8)
    torch.testing.assert_close(hn, ref.sequence_model(w, s[:, :D], s[:, D:], a_t), rtol=1e-6, atol=1e-8)


def test_self_regulate_beta_zero_is_a_plain_rollout_and_keeps_posterior_z():
    w = _t(_perturbed(), torch.float64)
    sz = R.infer_sizes(w, 4)
    rng = np.random.default_rng(7)
    h, z = (torch.from_numpy(x) for x in _state(rng, 2, sz))
    eps = torch.from_numpy(rng.standard_normal((3, 2, sz.A)))
    zt, at, hn = ref.self_regulate(w, h, z, 2, 0.0, eps, None, 4)
    assert torch.equal(zt, z)
    hh = h
    for k in range(2):
        hh = ref.sequence_model(w, hh, z, ref.actor_sample(w, torch.cat([hh, z], -1), eps[k]))
    a = ref.actor_sample(w, torch.cat([hh, z], -1), eps[2])
    torch.testing.assert_close(at, a)
    torch.testing.assert_close(hn, ref.sequence_model(w, hh, z, a))


# --- public API (torch backend) ---------------------------------------------------------------


def test_api_types_seed_and_noise_order():
    w = _perturbed()
    sz = R.infer_sizes(w, 4)
    rng = np.random.default_rng(8)
    h, z = (x.astype(np.float32) for x in _state(rng, 3, sz))
    hs, zs, acts = R.rssm_imagine(w, h, z, 4, seed=11, classes=4, backend="torch")
    assert isinstance(hs, np.ndarray) and hs.dtype == np.float32 and hs.shape == (4, 3, sz.D)
    g = np.random.default_rng(11)
    eps = g.standard_normal((4, 3, sz.A), dtype=np.float32)
    u = g.random((4, 3, sz.S), dtype=np.float32)
    hs2, zs2, acts2 = R.rssm_imagine(w, h, z, 4, eps, u, backend="torch")  # classes from u
    np.testing.assert_array_equal(hs, hs2)
    np.testing.assert_array_equal(acts, acts2)
    th = R.rssm_imagine(w, torch.from_numpy(h), torch.from_numpy(z), 4, seed=11, classes=4, backend="torch")
    assert isinstance(th[0], torch.Tensor)
    np.testing.assert_array_equal(th[0].numpy(), hs)
    # self_regulate: eps first, then u for the prior sample
    out = R.self_regulate(w, h, None, H=2, seed=5, classes=4, backend="torch", trace=True)
    g = np.random.default_rng(5)
    eps = g.standard_normal((3, 3, sz.A), dtype=np.float32)
    u = g.random((3, sz.S), dtype=np.float32)
    out2 = R.self_regulate(w, h, None, 2, 0.02, eps, u, backend="torch", trace=True)
    for a, b in zip(out, out2):
        np.testing.assert_array_equal(a, b)
    assert out[3].shape == (2, 3, sz.N)


def test_api_converts_float64_and_non_contiguous():
    w = _perturbed()
    sz = R.infer_sizes(w, 4)
    rng = np.random.default_rng(9)
    h, z = _state(rng, 4, sz)
    s = np.concatenate([h, z], -1)
    psi = R.self_assess(w, s.astype(np.float32), classes=4, backend="torch")
    np.testing.assert_allclose(R.self_assess(w, s, classes=4, backend="torch"), psi, rtol=1e-6)
    big = np.zeros((4, 2 * s.shape[1]), np.float32)
    big[:, ::2] = s
    np.testing.assert_allclose(R.self_assess(w, big[:, ::2], classes=4, backend="torch"), psi, rtol=1e-6)


@pytest.mark.parametrize("backend", ["torch"])
def test_api_bad_inputs(backend):
    w = _perturbed()
    sz = R.infer_sizes(w, 4)
    h = np.zeros((2, sz.D), np.float32)
    z = np.zeros((2, sz.Z), np.float32)
    a = np.zeros((2, sz.A), np.float32)
    u = np.full((2, sz.S), 0.5, np.float32)
    kw = dict(classes=4, backend=backend)
    with pytest.raises(ValueError, match=r"h: expected shape \[\?, 12\]"):
        R.rssm_img_step(w, h[:, :5], z, a, u, **kw)
    with pytest.raises(ValueError, match="z: expected shape"):
        R.rssm_img_step(w, h, z[:1], a, u, **kw)
    with pytest.raises(TypeError, match="a: expected float32"):
        R.rssm_img_step(w, h, z, a.astype(np.int64), u, **kw)
    hn = h.copy()
    hn[1, 3] = np.nan
    with pytest.raises(ValueError, match="h: contains NaN"):
        R.rssm_img_step(w, hn, z, a, u, **kw)
    with pytest.raises(ValueError, match=r"u: uniforms must lie in \[0, 1\)"):
        R.rssm_img_step(w, h, z, a, u + 1, **kw)
    bad = dict(w)
    bad["gru.ln.g"] = w["gru.ln.g"].copy()
    bad["gru.ln.g"][0] = np.nan
    with pytest.raises(ValueError, match=r"weights\['gru.ln.g'\]: contains NaN"):
        R.rssm_img_step(bad, h, z, a, u, **kw)
    bad = dict(w)
    bad["img_out.w"] = w["img_out.w"][:, :-1].copy()
    with pytest.raises(ValueError, match=r"weights\['img_out.w'\]: expected shape"):
        R.rssm_img_step(bad, h, z, a, u, **kw)
    bad = dict(w)
    del bad["sa.out.b"]
    with pytest.raises(ValueError, match=r"missing key 'sa.out.b'"):
        R.self_assess(bad, np.zeros((1, sz.D + sz.Z), np.float32), **kw)
    with pytest.raises(ValueError, match="classes"):
        R.rssm_img_step(w, h, z, a, classes=5, backend=backend)
    with pytest.raises(ValueError, match="eps: expected shape"):
        R.self_regulate(w, h, z, H=3, eps=np.zeros((3, 2, sz.A), np.float32), **kw)
    with pytest.raises(ValueError, match="backend"):
        R.self_assess(w, np.zeros((1, sz.D + sz.Z), np.float32), classes=4, backend="gpu")
    with pytest.raises(ValueError, match="precision"):
        R.self_assess(w, np.zeros((1, sz.D + sz.Z), np.float32), classes=4, backend=backend, precision="fp8")
    with pytest.raises(TypeError, match="s: expected a numpy array or torch tensor"):
        R.self_assess(w, "state", classes=4, backend=backend)


def test_bf16_is_a_cpu_option():
    w = _perturbed()
    with pytest.raises(ValueError, match="bf16"):
        R.self_assess(w, np.zeros((1, 12 + 12), np.float32), classes=4, backend="torch", precision="bf16")
