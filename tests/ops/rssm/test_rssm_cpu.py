"""The compiled CPU backend of the RSSM / MUSE kernels against the torch reference.

fp32 tolerance: max |cpu - ref| <= 1e-4 * max |ref| per output (states, logits,
psi, gradient). Categorical samples must be identical except where the
reference's CDF lies within 1e-5 of the uniform (an fp32 rounding tie); rows
with such a tie are left out of multi-step comparisons (at least 80 % remain).
bf16 tolerances (docs/kernels.md): see BF16_* below.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import metacog_fast
from metacog_fast.ops.rssm import api as R
from metacog_fast.ops.rssm import naive as ref

try:
    CORE = metacog_fast.core()
    HAS_CPU = hasattr(CORE, "RssmCpu")
except metacog_fast.BackendUnavailable:
    CORE, HAS_CPU = None, False
pytestmark = pytest.mark.skipif(not HAS_CPU, reason="compiled core without RssmCpu")

RTOL = 1e-4
TIE = 1e-5
BF16_STATE = 1e-2  # one step: h', logits, psi relative to the largest magnitude
BF16_GRAD = 2e-2
BF16_ACTION = 5e-2  # self_regulate (H=10 with gradient steps), absolute on actions in [-1, 1]
BF16_SAMPLE_AGREE = 0.98  # fraction of categorical groups sampled identically after one step

CONFIGS = {
    "XS": dict(preset="XS"),
    "odd": dict(preset=None, D=96, Hd=80, S=4, C=5, A=3, E=7),
    "odd_L1": dict(preset=None, D=33, Hd=17, S=3, C=7, A=1, E=2, L=1, N=3),
}
CLASSES = {"XS": 32, "odd": 5, "odd_L1": 7}


def _weights(name: str, seed: int = 0) -> dict[str, np.ndarray]:
    w = R.init_rssm_weights(**CONFIGS[name], seed=seed) if name in CONFIGS else R.init_rssm_weights(name, seed=seed)
    rng = np.random.default_rng(seed + 7)
    for k in w:
        if k.endswith("ln.g"):
            w[k] = (1 + 0.3 * rng.standard_normal(w[k].shape)).astype(np.float32)
        elif k.endswith(".b"):
            w[k] = (0.1 * rng.standard_normal(w[k].shape)).astype(np.float32)
    return w


_W: dict[str, dict[str, np.ndarray]] = {}


def weights(name: str) -> dict[str, np.ndarray]:
    if name not in _W:  # one dict per config: the cpu backend packs it once
        _W[name] = _weights(name)
    return _W[name]


def _inputs(sz: R.Sizes, B: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    h = rng.standard_normal((B, sz.D)).astype(np.float32)
    k = rng.integers(0, sz.C, (B, sz.S))
    z = np.zeros((B, sz.S, sz.C), np.float32)
    np.put_along_axis(z, k[..., None], 1.0, -1)
    a = np.tanh(rng.standard_normal((B, sz.A))).astype(np.float32)
    e = rng.standard_normal((B, sz.E)).astype(np.float32)
    u = rng.random((B, sz.S), dtype=np.float32)
    return h, z.reshape(B, sz.Z), a, e, u


def close(got: np.ndarray, want: np.ndarray, rtol: float = RTOL, what: str = "") -> None:
    scale = float(np.abs(want).max()) or 1.0
    err = float(np.abs(got - want).max()) if want.size else 0.0
    assert err <= rtol * scale, f"{what}: max error {err:.3g} > {rtol:g} * {scale:.3g}"


def tie_margin(logits: np.ndarray, u: np.ndarray, C: int) -> np.ndarray:
    """[B] smallest |cdf - u| over the groups of each row (reference CDF, float64)."""
    lg = logits.astype(np.float64).reshape(logits.shape[0], -1, C)
    p = np.exp(lg - lg.max(-1, keepdims=True))
    p = 0.99 * p / p.sum(-1, keepdims=True) + 0.01 / C
    return np.abs(np.cumsum(p, -1) - u[..., None].astype(np.float64)).min(axis=(1, 2))


def samples_match(z_cpu, z_ref, logits, u, C) -> None:
    bad = ~(z_cpu == z_ref).all(1)
    assert not (bad & (tie_margin(logits, u, C) > TIE)).any(), "samples differ away from a CDF tie"


def reference_tie_rows(w, h, z, eps, u, C, *, imagine: bool) -> np.ndarray:
    """Rows whose reference trajectory never puts a uniform within TIE of a CDF step."""
    tw = {k: torch.from_numpy(v) for k, v in w.items()}
    ok = np.ones(h.shape[0], bool)
    ht, zt = torch.from_numpy(h), torch.from_numpy(z)
    with torch.no_grad():
        if imagine:
            for t in range(eps.shape[0]):
                a = ref.actor_sample(tw, torch.cat([ht, zt], -1), torch.from_numpy(eps[t]))
                ht, zt, lg = ref.img_step(tw, ht, zt, a, torch.from_numpy(u[t]), C)
                ok &= tie_margin(lg.numpy(), u[t], C) > TIE
        else:
            ok &= tie_margin(ref.prior_logits(tw, ht).numpy(), u, C) > TIE
    return ok


CASES = [(c, B) for c in ("XS", "odd") for B in (1, 3, 63, 257)] + [("odd_L1", 5)]


@pytest.mark.parametrize("cfg,B", CASES)
def test_steps_and_self_assess_match_reference(cfg, B):
    w, C = weights(cfg), CLASSES[cfg]
    sz = R.infer_sizes(w, C)
    h, z, a, e, u = _inputs(sz, B, seed=B)
    kw = dict(classes=C)
    got = R.rssm_img_step(w, h, z, a, u, backend="cpu", **kw)
    want = R.rssm_img_step(w, h, z, a, u, backend="torch", **kw)
    close(got[0], want[0], what="img_step h")
    close(got[2], want[2], what="img_step prior logits")
    samples_match(got[1], want[1], want[2], u, C)
    got = R.rssm_obs_step(w, h, z, a, e, u, backend="cpu", **kw)
    want = R.rssm_obs_step(w, h, z, a, e, u, backend="torch", **kw)
    close(got[0], want[0], what="obs_step h")
    close(got[2], want[2], what="obs_step posterior logits")
    samples_match(got[1], want[1], want[2], u, C)
    s = np.concatenate([h, z], 1)
    psi, g = R.self_assess(w, s, grad=True, backend="cpu", **kw)
    rpsi, rg = R.self_assess(w, s, grad=True, backend="torch", **kw)
    close(psi, rpsi, what="psi")
    close(g, rg, what="d sum psi / ds")
    np.testing.assert_array_equal(R.self_assess(w, s, backend="cpu", **kw), psi)
    # gradient on a continuous (non one-hot) state, as inside self_regulate
    s2 = s + 0.05 * np.random.default_rng(B).standard_normal(s.shape).astype(np.float32)
    close(R.self_assess(w, s2, True, backend="cpu", **kw)[1], R.self_assess(w, s2, True, backend="torch", **kw)[1],
          what="gradient on continuous s")


@pytest.mark.parametrize("cfg,B", CASES)
def test_imagine_matches_reference(cfg, B):
    w, C = weights(cfg), CLASSES[cfg]
    sz = R.infer_sizes(w, C)
    h, z, *_ = _inputs(sz, B, seed=B + 1)
    H = 4
    g = np.random.default_rng(B)
    eps = g.standard_normal((H, B, sz.A), dtype=np.float32)
    u = g.random((H, B, sz.S), dtype=np.float32)
    got = R.rssm_imagine(w, h, z, H, eps, u, backend="cpu", classes=C)
    want = R.rssm_imagine(w, h, z, H, eps, u, backend="torch", classes=C)
    ok = reference_tie_rows(w, h, z, eps, u, C, imagine=True)
    assert ok.sum() >= int(0.8 * B)
    for gx, wx, name in zip(got, want, ("hs", "zs", "actions")):
        assert gx.shape == wx.shape
        close(gx[:, ok], wx[:, ok], what=name)


@pytest.mark.parametrize("cfg,B", CASES)
def test_self_regulate_matches_reference(cfg, B):
    w, C = weights(cfg), CLASSES[cfg]
    sz = R.infer_sizes(w, C)
    h, z, *_ = _inputs(sz, B, seed=B + 2)
    H = 3
    g = np.random.default_rng(B + 3)
    eps = g.standard_normal((H + 1, B, sz.A), dtype=np.float32)
    u = g.random((B, sz.S), dtype=np.float32)
    # prior z_t (line 4) and given posterior z_t
    for zin in (None, z):
        got = R.self_regulate(w, h, zin, H, 0.3, eps, u, backend="cpu", trace=True, classes=C)
        want = R.self_regulate(w, h, zin, H, 0.3, eps, u, backend="torch", trace=True, classes=C)
        ok = np.ones(B, bool) if zin is not None else reference_tie_rows(w, h, z, eps, u, C, imagine=False)
        assert ok.sum() >= int(0.8 * B)
        for gx, wx, name in zip(got, want, ("z_t", "a_t", "h_next", "trace")):
            assert gx.shape == wx.shape, name
            close(gx[..., ok, :] if name == "trace" else gx[ok], wx[..., ok, :] if name == "trace" else wx[ok], what=name)
    # H = 0: the plain actor step
    got = R.self_regulate(w, h, z, 0, 0.02, eps[:1], backend="cpu", classes=C)
    want = R.self_regulate(w, h, z, 0, 0.02, eps[:1], backend="torch", classes=C)
    for gx, wx in zip(got, want):
        close(gx, wx, what="H=0")


@pytest.mark.parametrize("B", [1, 3])
def test_S_preset(B):
    w = weights("S")
    sz = R.infer_sizes(w)
    h, z, a, e, u = _inputs(sz, B, seed=B)
    s = np.concatenate([h, z], 1)
    for gx, wx in zip(R.self_assess(w, s, True, backend="cpu"), R.self_assess(w, s, True, backend="torch")):
        close(gx, wx, what="S self_assess")
    eps = np.random.default_rng(0).standard_normal((3, B, sz.A), dtype=np.float32)
    for gx, wx in zip(R.self_regulate(w, h, z, 2, 0.02, eps, backend="cpu"),
                      R.self_regulate(w, h, z, 2, 0.02, eps, backend="torch")):
        close(gx, wx, what="S self_regulate")


@pytest.mark.parametrize("B", [1, 63])
def test_bf16_within_documented_tolerance(B):
    w = weights("XS")
    sz = R.infer_sizes(w)
    h, z, a, e, u = _inputs(sz, B, seed=B + 10)
    got = R.rssm_img_step(w, h, z, a, u, backend="cpu", precision="bf16")
    want = R.rssm_img_step(w, h, z, a, u, backend="torch")
    close(got[0], want[0], BF16_STATE, "bf16 h")
    close(got[2], want[2], BF16_STATE, "bf16 logits")
    agree = (got[1] * want[1]).sum() / (B * sz.S)
    assert agree >= BF16_SAMPLE_AGREE
    s = np.concatenate([h, z], 1)
    psi, g = R.self_assess(w, s, True, backend="cpu", precision="bf16")
    rpsi, rg = R.self_assess(w, s, True, backend="torch")
    close(psi, rpsi, BF16_STATE, "bf16 psi")
    close(g, rg, BF16_GRAD, "bf16 grad")
    eps = np.random.default_rng(B).standard_normal((11, B, sz.A), dtype=np.float32)
    got = R.self_regulate(w, h, z, 10, 0.02, eps, backend="cpu", precision="bf16")
    want = R.self_regulate(w, h, z, 10, 0.02, eps, backend="torch")
    assert np.abs(got[1] - want[1]).max() <= BF16_ACTION
    close(got[2], want[2], BF16_GRAD, "bf16 h_next")
    # and bf16 really is a different computation from fp32
    assert not np.array_equal(psi, R.self_assess(w, s, backend="cpu"))


def test_every_isa_path_and_thread_mode():
    w = weights("odd")
    C = CLASSES["odd"]
    sz = R.infer_sizes(w, C)
    supported = CORE.build_info()["isa_supported"]
    threads = CORE.get_num_threads()
    try:
        for isa in supported:
            CORE.set_isa(isa)
            for nt in (1, 2):
                CORE.set_num_threads(nt)
                for B in (1, 3, 40):  # 2 threads: B < 16 splits columns, B=40 splits tiles
                    h, z, a, e, u = _inputs(sz, B, seed=B)
                    s = np.concatenate([h, z], 1)
                    for prec, tol in (("fp32", RTOL), ("bf16", BF16_GRAD)):
                        psi, g = R.self_assess(w, s, True, backend="cpu", precision=prec, classes=C)
                        rpsi, rg = R.self_assess(w, s, True, backend="torch", classes=C)
                        close(psi, rpsi, tol, f"{isa}/{nt}/{prec} psi")
                        close(g, rg, tol, f"{isa}/{nt}/{prec} grad")
                    eps = np.random.default_rng(B).standard_normal((3, B, sz.A), dtype=np.float32)
                    for gx, wx in zip(R.self_regulate(w, h, z, 2, 0.1, eps, backend="cpu", classes=C),
                                      R.self_regulate(w, h, z, 2, 0.1, eps, backend="torch", classes=C)):
                        close(gx, wx, what=f"{isa}/{nt} self_regulate")
                    got = R.rssm_img_step(w, h, z, a, u, backend="cpu", classes=C)
                    want = R.rssm_img_step(w, h, z, a, u, backend="torch", classes=C)
                    close(got[2], want[2], what=f"{isa}/{nt} logits")
    finally:
        CORE.set_isa("auto")
        CORE.set_num_threads(threads)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    D=st.integers(1, 40), Hd=st.integers(1, 40), S=st.integers(1, 5), C=st.integers(2, 9), A=st.integers(1, 5),
    E=st.integers(1, 9), L=st.integers(1, 3), N=st.integers(1, 6), B=st.integers(1, 20), seed=st.integers(0, 1000),
)
def test_property_random_shapes(D, Hd, S, C, A, E, L, N, B, seed):
    w = R.init_rssm_weights(None, D=D, Hd=Hd, S=S, C=C, A=A, E=E, L=L, N=N, seed=seed)
    sz = R.infer_sizes(w, C)
    h, z, a, e, u = _inputs(sz, B, seed=seed)
    got = R.rssm_obs_step(w, h, z, a, e, u, backend="cpu", classes=C)
    want = R.rssm_obs_step(w, h, z, a, e, u, backend="torch", classes=C)
    close(got[0], want[0], what="h")
    close(got[2], want[2], what="logits")
    samples_match(got[1], want[1], want[2], u, C)
    s = np.concatenate([h, z], 1) + 0.1 * np.random.default_rng(seed).standard_normal((B, D + sz.Z)).astype(np.float32)
    for gx, wx in zip(R.self_assess(w, s, True, backend="cpu", classes=C),
                      R.self_assess(w, s, True, backend="torch", classes=C)):
        close(gx, wx, what="self_assess")
    R.clear_cache()


def test_torch_tensors_in_torch_out_and_conversions():
    w = weights("odd")
    C = CLASSES["odd"]
    sz = R.infer_sizes(w, C)
    h, z, a, e, u = _inputs(sz, 3)
    tw = {k: torch.from_numpy(v) for k, v in w.items()}
    out = R.rssm_img_step(tw, torch.from_numpy(h), torch.from_numpy(z), torch.from_numpy(a), torch.from_numpy(u),
                          backend="cpu")  # classes from u
    assert all(isinstance(o, torch.Tensor) for o in out)
    np.testing.assert_array_equal(out[0].numpy(), R.rssm_img_step(w, h, z, a, u, backend="cpu")[0])
    # auto picks the compiled path for CPU inputs
    np.testing.assert_array_equal(R.rssm_img_step(w, h, z, a, u)[2], R.rssm_img_step(w, h, z, a, u, backend="cpu")[2])
    # float64 and non-contiguous inputs are converted
    s = np.concatenate([h, z], 1)
    psi = R.self_assess(w, s, backend="cpu", classes=C)
    np.testing.assert_allclose(R.self_assess(w, s.astype(np.float64), backend="cpu", classes=C), psi, rtol=1e-6)
    wide = np.zeros((3, 2 * s.shape[1]), np.float32)
    wide[:, 1::2] = s
    np.testing.assert_array_equal(R.self_assess(w, wide[:, 1::2], backend="cpu", classes=C), psi)
    # a torch weight changed in place is seen (version counter); numpy needs clear_cache()
    tw["sa.out.b"] += 1.0
    psi2 = R.self_assess(tw, torch.from_numpy(s), backend="cpu", classes=C)
    assert (psi2.numpy() > psi).all()
    tw["sa.out.b"] -= 1.0


def test_bad_inputs_cpu():
    w = weights("odd")
    C = CLASSES["odd"]
    sz = R.infer_sizes(w, C)
    h, z, a, e, u = _inputs(sz, 2)
    kw = dict(classes=C, backend="cpu")
    with pytest.raises(ValueError, match="h: expected shape"):
        R.rssm_img_step(w, h[:, :-1], z, a, u, **kw)
    with pytest.raises(ValueError, match="embed: expected shape"):
        R.rssm_obs_step(w, h, z, a, e[:, :-1], u, **kw)
    with pytest.raises(TypeError, match="z: expected float32"):
        R.rssm_img_step(w, h, z.astype(np.int32), a, u, **kw)
    hn = h.copy()
    hn[0, 0] = np.inf
    with pytest.raises(ValueError, match="h_t: contains NaN or Inf"):
        R.self_regulate(w, hn, z, 2, **kw)
    bad = dict(w)
    bad["actor.1.w"] = w["actor.1.w"].copy()
    bad["actor.1.w"][2, 2] = np.nan
    with pytest.raises(ValueError, match=r"weights\['actor.1.w'\]: contains NaN"):
        R.self_regulate(bad, h, z, 2, **kw)
    bad = dict(w)
    bad["gru.w"] = w["gru.w"][:-1]
    with pytest.raises(ValueError, match=r"weights\['gru.w'\]"):
        R.self_assess(bad, np.zeros((1, sz.D + sz.Z), np.float32), **kw)
    with pytest.raises(ValueError, match="u: expected shape"):
        R.rssm_imagine(w, h, z, 3, u=np.zeros((3, 2, sz.S + 1), np.float32), **kw)
    with pytest.raises(ValueError, match="H: expected a positive int"):
        R.rssm_imagine(w, h, z, 0, **kw)
    # the compiled object checks raw buffers itself too (never a segfault)
    obj = CORE.RssmCpu({k: v for k, v in w.items()}, sz.S, C, False)
    with pytest.raises(ValueError, match="h: axis 1 must have size"):
        obj.img_step(h[:, :-1].copy(), z, a, u)
    with pytest.raises(ValueError, match="s: expected a C-contiguous array"):
        obj.self_assess(np.zeros((4, 2 * (sz.D + sz.Z)), np.float32)[:, ::2], False)
    with pytest.raises(ValueError, match="expected dtype float32"):
        obj.self_assess(np.zeros((1, sz.D + sz.Z)), False)
    with pytest.raises(ValueError, match="missing key 'obs_out.b'"):
        CORE.RssmCpu({k: v for k, v in w.items() if k != "obs_out.b"}, sz.S, C, False)


def test_cuda_request_without_cuda_fails_loudly():
    if metacog_fast.backends()["cuda"] is not None:
        pytest.skip("this build has CUDA")
    w = weights("odd")
    with pytest.raises(metacog_fast.BackendUnavailable):
        R.self_assess(w, np.zeros((1, 96 + 20), np.float32), classes=5, backend="cuda")


def test_onehot_gather_equals_dense_path():
    """A one-hot z takes the gather path (S weight rows added); one non one-hot row in the
    tile sends every row through the GEMM: fp32 results must be bitwise equal."""
    w = weights("XS")
    sz = R.infer_sizes(w)
    h, z, a, e, u = _inputs(sz, 3, seed=5)
    z_soft = z.copy()
    z_soft[2] = 0.5 * z_soft[2] + 0.5 / sz.C  # not one-hot
    for prec in ("fp32", "bf16"):
        gathered = R.rssm_img_step(w, h[:2], z[:2], a[:2], u[:2], backend="cpu", precision=prec)
        dense = R.rssm_img_step(w, h, np.concatenate([z[:2], z_soft[2:]]), a, u, backend="cpu", precision=prec)
        if prec == "fp32":
            np.testing.assert_array_equal(gathered[0], dense[0][:2])
            np.testing.assert_array_equal(gathered[2], dense[2][:2])
        else:  # vdpbf16ps pairs products differently from the row sums
            close(gathered[0], dense[0][:2], 1e-5, "bf16 gather vs dense")
