"""Triton RSSM / self-assessment kernels vs the torch reference (docs/design.md §1.1, §1.2).

Without a GPU the kernels run under TRITON_INTERPRET=1 (tests/conftest.py sets it) on CPU
tensors; with a GPU the same tests run on the device. Tolerances (fp32): states, logits,
actions and psi to 2e-5 absolute + 1e-4 relative; one-hot samples exactly (identical
noise); the analytic gradient to 1e-4 relative of its largest entry vs torch.autograd.
"""
from __future__ import annotations

import pytest
import torch

from metacog_fast.ops.rssm import naive as ref

rssm_triton = pytest.importorskip("metacog_fast.ops.rssm.triton")
from metacog_fast.ops.rssm import init_rssm_weights  # noqa: E402

DEV = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
ODD = dict(D=96, Hd=80, S=4, C=5, A=3, E=24, L=2)
XS_ISH = dict(D=256 if DEV.type == "cuda" else 128, Hd=256 if DEV.type == "cuda" else 128, S=32, C=32, A=4, E=64, L=2)
"""The XS preset's 32 x 32 categorical latent (Z = 1024: 16 column tiles, 32-class sample tiles) with
widths of several full tiles; under the CPU interpreter D = Hd = 128 (still 2 column and 4 reduction
tiles, half the interpreted work of 256; the odd sizes are ODD's)."""


def make_weights(D: int, Hd: int, S: int, C: int, A: int, E: int, L: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """init_rssm_weights with LayerNorm gains/biases and biases perturbed (so none is trivially 1 or 0)."""
    w = init_rssm_weights(None, D=D, Hd=Hd, S=S, C=C, A=A, E=E, L=L, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    out = {}
    for k, v in w.items():
        t = torch.from_numpy(v)
        if k.endswith("ln.g"):
            t = 1.0 + 0.3 * torch.randn(t.shape, generator=g)
        elif k.endswith(".b"):
            t = 0.1 * torch.randn(t.shape, generator=g)
        out[k] = t.to(DEV).contiguous()
    return out


def inputs(sz: dict, B: int, seed: int = 0):
    g = torch.Generator().manual_seed(100 + seed)
    D, S, C, A, E = sz["D"], sz["S"], sz["C"], sz["A"], sz["E"]
    h = torch.randn(B, D, generator=g)
    z = ref.sample_categorical(torch.randn(B, S * C, generator=g), torch.rand(B, S, generator=g), C)
    a = torch.tanh(torch.randn(B, A, generator=g))
    u = torch.rand(B, S, generator=g)
    e = torch.randn(B, E, generator=g)
    return [t.to(DEV) for t in (h, z, a, u, e)]


def close(x: torch.Tensor, y: torch.Tensor, atol: float = 2e-5, rtol: float = 1e-4) -> None:
    torch.testing.assert_close(x, y, atol=atol, rtol=rtol)


@pytest.fixture(scope="module")
def w_odd():
    return make_weights(**ODD)


@pytest.fixture(scope="module")
def w_xs():
    return make_weights(**XS_ISH, seed=3)


@pytest.mark.parametrize("B", [1, 3, 63, 257])
def test_img_step_odd(w_odd, B):
    h, z, a, u, _ = inputs(ODD, B)
    hn, zn, lo = rssm_triton.img_step(w_odd, h, z, a, u)
    rh, rz, rl = ref.img_step(w_odd, h, z, a, u, ODD["C"])
    close(hn, rh)
    close(lo, rl)
    assert torch.equal(zn, rz)
    assert torch.equal(zn.reshape(B, ODD["S"], ODD["C"]).sum(-1), torch.ones(B, ODD["S"], device=DEV))


@pytest.mark.parametrize("B", [1, 63])
def test_obs_step_odd(w_odd, B):
    h, z, a, u, e = inputs(ODD, B, seed=1)
    hn, zn, lo = rssm_triton.obs_step(w_odd, h, z, a, e, u)
    rh, rz, rl = ref.obs_step(w_odd, h, z, a, e, u, ODD["C"])
    close(hn, rh)
    close(lo, rl)
    assert torch.equal(zn, rz)


def _grad_close(g: torch.Tensor, rg: torch.Tensor) -> None:
    scale = float(rg.abs().max())
    assert scale > 0
    err = float((g - rg).abs().max())
    assert err <= 1e-4 * scale, f"gradient error {err:.3g} > 1e-4 x max|grad| {scale:.3g}"


@pytest.mark.parametrize("B", [1, 3, 63, 257])
def test_self_assess_and_gradient_odd(w_odd, B):
    h, z, *_ = inputs(ODD, B, seed=2)
    s = torch.cat([h, z], -1)
    psi, g = rssm_triton.self_assess(w_odd, s, grad=True)
    rpsi, rg = ref.self_assess(w_odd, s, grad=True)  # torch.autograd
    close(psi, rpsi)
    _grad_close(g, rg)
    close(rssm_triton.self_assess(w_odd, s), rpsi)


def test_gradient_continuous_state(w_odd):
    # after a regulation step z is no longer one-hot: the gradient must hold for any s
    g0 = torch.Generator().manual_seed(7)
    s = torch.randn(5, ODD["D"] + ODD["S"] * ODD["C"], generator=g0).to(DEV)
    _, g = rssm_triton.self_assess(w_odd, s, grad=True)
    _, rg = ref.self_assess(w_odd, s, grad=True)
    _grad_close(g, rg)


@pytest.mark.parametrize("B", [1, 3, 63])
def test_imagine_odd(w_odd, B):
    h, z, *_ = inputs(ODD, B, seed=4)
    g = torch.Generator().manual_seed(5)
    H = 4
    eps = torch.randn(H, B, ODD["A"], generator=g).to(DEV)
    u = torch.rand(H, B, ODD["S"], generator=g).to(DEV)
    hs, zs, acts = rssm_triton.imagine(w_odd, h, z, eps, u)
    rh, rz, ra = ref.imagine(w_odd, h, z, eps, u, ODD["C"])
    close(acts, ra)
    close(hs, rh)
    assert torch.equal(zs, rz)


@pytest.mark.parametrize("B", [1, 3, 63])
def test_self_regulate_odd(w_odd, B):
    h, z, *_ = inputs(ODD, B, seed=6)
    g = torch.Generator().manual_seed(8)
    H = 3
    eps = torch.randn(H + 1, B, ODD["A"], generator=g).to(DEV)
    out = rssm_triton.self_regulate(w_odd, h, z, H, 0.5, eps, trace=True)
    rz, ra, rh, rtr = ref.self_regulate(w_odd, h, z, H, 0.5, eps, None, ODD["C"], trace=True)
    assert torch.equal(out[0], rz)
    close(out[1], ra)
    close(out[2], rh)
    close(out[3], rtr)
    z2, a2, h2 = rssm_triton.self_regulate(w_odd, h, z, H, 0.5, eps)
    close(a2, out[1], atol=0, rtol=0)
    close(h2, out[2], atol=0, rtol=0)


def test_self_regulate_zero_iterations(w_odd):
    h, z, *_ = inputs(ODD, 2, seed=9)
    eps = torch.randn(1, 2, ODD["A"]).to(DEV)
    _, a, hn, tr = rssm_triton.self_regulate(w_odd, h, z, 0, 0.02, eps, trace=True)
    _, ra, rh, _ = ref.self_regulate(w_odd, h, z, 0, 0.02, eps, None, ODD["C"], trace=True)
    close(a, ra)
    close(hn, rh)
    assert tr.shape == (0, 2, 5)


@pytest.mark.parametrize("B", [3])
def test_xs_ish_step_and_regulate(w_xs, B):
    sz = XS_ISH
    h, z, a, u, e = inputs(sz, B, seed=10)
    hn, zn, lo = rssm_triton.img_step(w_xs, h, z, a, u)
    rh, rz, rl = ref.img_step(w_xs, h, z, a, u, sz["C"])
    close(hn, rh)
    close(lo, rl)
    assert torch.equal(zn, rz)
    s = torch.cat([h, z], -1)
    psi, g = rssm_triton.self_assess(w_xs, s, grad=True)
    rpsi, rg = ref.self_assess(w_xs, s, grad=True)
    close(psi, rpsi)
    _grad_close(g, rg)
    eps = torch.randn(3, B, sz["A"], generator=torch.Generator().manual_seed(11)).to(DEV)
    out = rssm_triton.self_regulate(w_xs, h, z, 2, 0.02, eps, trace=True)
    ref_out = ref.self_regulate(w_xs, h, z, 2, 0.02, eps, None, sz["C"], trace=True)
    for x, y in zip(out, ref_out):
        close(x, y)


# --- bad input ------------------------------------------------------------------------------


def test_bad_shapes_and_dtypes(w_odd):
    h, z, a, u, _ = inputs(ODD, 3)
    with pytest.raises(ValueError, match="^h: expected shape"):
        rssm_triton.img_step(w_odd, h[:, :-1], z, a, u)
    with pytest.raises(ValueError, match="^z: expected shape"):
        rssm_triton.img_step(w_odd, h, z[:2], a, u)
    with pytest.raises(TypeError, match="^a: expected dtype float32"):
        rssm_triton.img_step(w_odd, h, z, a.double(), u)
    with pytest.raises(ValueError, match="^u: last axis S=3 must divide Z=20"):
        rssm_triton.img_step(w_odd, h, z, a, u[:, :3])
    with pytest.raises(ValueError, match="^s: expected shape"):
        rssm_triton.self_assess(w_odd, h)
    with pytest.raises(ValueError, match=r"^eps: expected shape \[3, 3, 3\]"):
        rssm_triton.self_regulate(w_odd, h, z, 2, 0.02, torch.zeros(2, 3, 3, device=DEV))
    with pytest.raises(ValueError, match="^H: expected a non-negative"):
        rssm_triton.self_regulate(w_odd, h, z, -1, 0.02, torch.zeros(0, 3, 3, device=DEV))


def test_missing_and_malformed_weights(w_odd):
    h, z, a, u, _ = inputs(ODD, 2)
    bad = dict(w_odd)
    del bad["gru.w"]
    with pytest.raises(KeyError, match="gru.w"):
        rssm_triton.img_step(bad, h, z, a, u)
    bad = dict(w_odd)
    bad["gru.ln.g"] = bad["gru.ln.g"].double()
    with pytest.raises(TypeError, match="gru.ln.g"):
        rssm_triton.img_step(bad, h, z, a, u)
    bad = dict(w_odd)
    del bad["sa.1.w"]
    with pytest.raises(ValueError, match="actor has 2 hidden layers and sa has 1"):
        rssm_triton.self_assess(bad, torch.cat([h, z], -1))


def test_packed_weights_follow_in_place_updates(w_odd):
    w = {k: v.clone() for k, v in w_odd.items()}
    h, z, *_ = inputs(ODD, 2, seed=12)
    s = torch.cat([h, z], -1)
    p1 = rssm_triton.self_assess(w, s)
    w["sa.1.w"].mul_(0.5)  # in-place: the packed copy must be rebuilt
    p2 = rssm_triton.self_assess(w, s)
    close(p2, ref.self_assess(w, s))
    assert not torch.allclose(p1, p2)


def test_single_hidden_layer_and_three_outputs():
    # L=1 (no stacked hidden layers) and N=3 quantiles: the packing and loops must not assume L=2, N=5
    sz = dict(ODD, L=1)
    w = init_rssm_weights(None, D=sz["D"], Hd=sz["Hd"], S=sz["S"], C=sz["C"], A=sz["A"], E=sz["E"], L=1, N=3, seed=4)
    w = {k: torch.from_numpy(v).to(DEV) for k, v in w.items()}
    h, z, *_ = inputs(sz, 3, seed=13)
    s = torch.cat([h, z], -1)
    psi, g = rssm_triton.self_assess(w, s, grad=True)
    rpsi, rg = ref.self_assess(w, s, grad=True)
    assert psi.shape == (3, 3)
    close(psi, rpsi)
    _grad_close(g, rg)
    eps = torch.randn(3, 3, sz["A"], generator=torch.Generator().manual_seed(14)).to(DEV)
    out = rssm_triton.self_regulate(w, h, z, 2, 0.5, eps, trace=True)
    for x, y in zip(out, ref.self_regulate(w, h, z, 2, 0.5, eps, None, sz["C"], trace=True)):
        close(x, y)


# --- the kernels compile for a real GPU (sm_90) without one: Triton's own compiler and ptxas --------
# In a subprocess: under TRITON_INTERPRET=1 (set by conftest.py without a GPU) @triton.jit
# functions are interpreted and cannot be compiled.
_COMPILE_SCRIPT = r"""
import sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from metacog_fast.ops.rssm import triton as rssm_triton

PTR_ARGS = {"wi", "bi", "gi", "bei", "wg", "gg", "beg", "wo", "bo", "go", "beo", "wl", "bl",
            "aw0", "awh", "ab", "ag", "abe", "awo", "abo", "sw0", "swh", "sb", "sg", "sbe", "swo", "sbo"}
CASES = {
    "self_assess": ("_self_assess_kernel", dict(GRAD=True, BB=16, BN=64, BK=32, BO=16)),
    "img_step": ("_img_step_kernel", dict(BB=16, BN=64, BK=32, BC=32)),
    "obs_step": ("_obs_step_kernel", dict(BB=64, BN=64, BK=32, BC=8)),
    "imagine": ("_imagine_kernel", dict(BB=64, BN=64, BK=32, BC=32, BA=4)),
    "self_regulate": ("_self_regulate_kernel", dict(TRACE=True, BB=16, BN=64, BK=32, BA=4, BO=16)),
}
name, consts = CASES[sys.argv[1]]
fn = getattr(rssm_triton, name)
sig = {}
for arg in fn.arg_names:
    if arg in consts:
        sig[arg] = "constexpr"
    elif arg.endswith("_ptr") or arg in PTR_ARGS:
        sig[arg] = "*fp32"
    else:
        sig[arg] = "fp32" if arg == "beta" else "i32"
kernel = triton.compile(ASTSource(fn, sig, constexprs=consts), target=GPUTarget("cuda", 90, 32))
assert ".entry" in kernel.asm["ptx"]
assert len(kernel.asm["cubin"]) > 1000
print("compiled", name, len(kernel.asm["cubin"]))
"""


@pytest.mark.parametrize("case", [
    "self_assess",
    *[pytest.param(c, marks=pytest.mark.slow) for c in ("img_step", "obs_step", "imagine", "self_regulate")],
])
def test_kernel_compiles_for_sm90(case, tmp_path):
    # ~10 s for self_assess; the fused step/loop kernels take 10-70 s each on 2 cores (slow)
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton_cache")
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    res = subprocess.run([sys.executable, "-c", _COMPILE_SCRIPT, case], capture_output=True, text=True, env=env,
                         timeout=900)
    if res.returncode != 0 and "ptxas" in res.stderr and "not found" in res.stderr:
        pytest.skip("triton without its ptxas")
    assert res.returncode == 0, res.stderr[-4000:]
    assert f"compiled {_kernel_name(case)}" in res.stdout


def _kernel_name(case: str) -> str:
    return f"_{case}_kernel"
