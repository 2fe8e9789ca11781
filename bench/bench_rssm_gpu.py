"""GPU benchmarks of the RSSM kernels (CUDA and Triton) against torch eager on the same GPU.

    pytest bench/bench_rssm_gpu.py --benchmark-json=bench/results/rssm_gpu.json

- ``test_self_regulate_b1``: one MUSE Algorithm 1 decision (XS and S, batch 1, H=10,
  beta=0.02): latency vs the torch reference run eagerly (target >= 20x).
- ``test_imagine_b4096``: rssm_imagine, XS, batch 4096, horizon 15 (target >= 3x).

The anchor (metacog_fast.ops.rssm.naive, the same functions the tests compare with)
is timed in the same test, right before the candidate, with the same inputs; the ratio
anchor / candidate is in ``benchmark.extra_info["speedup_vs_eager"]``. Timings include a
``torch.cuda.synchronize()`` per call. Skipped without a CUDA device.
"""
from __future__ import annotations

import time

import pytest
import torch

from metacog_fast.ops.rssm import naive as ref

if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

from metacog_fast.ops.rssm import init_rssm_weights  # noqa: E402

DEV = torch.device("cuda")
SIZES = {"XS": dict(D=256, Hd=256), "S": dict(D=512, Hd=512)}
SR_H, SR_BETA = 10, 0.02
IMAGINE_H, IMAGINE_B = 15, 4096


def _weights(preset: str) -> dict[str, torch.Tensor]:
    w = init_rssm_weights(preset, A=4, seed=0)
    return {k: torch.from_numpy(v).to(DEV) for k, v in w.items()}


def _backend_module(name: str):
    if name == "cuda":
        import metacog_fast

        if not metacog_fast.backends()["cuda"]:
            pytest.skip("metacog_fast built without CUDA (METACOG_BACKEND=cuda)")
        from metacog_fast.ops.rssm import cuda as mod
    else:
        mod = pytest.importorskip("metacog_fast.ops.rssm.triton")
    return mod


def _synced(fn):
    def run():
        out = fn()
        torch.cuda.synchronize()
        return out

    return run


def _mean_ms(fn, reps: int, warmup: int = 3) -> float:
    run = _synced(fn)
    for _ in range(warmup):
        run()
    t0 = time.perf_counter()
    for _ in range(reps):
        run()
    return (time.perf_counter() - t0) / reps * 1e3


def _record(benchmark, anchor_ms: float, **facts) -> None:
    cand_ms = benchmark.stats.stats.mean * 1e3
    benchmark.extra_info.update(facts)
    benchmark.extra_info["anchor"] = "torch eager reference (metacog_fast.ops.rssm.naive), same GPU"
    benchmark.extra_info["anchor_ms"] = anchor_ms
    benchmark.extra_info["candidate_ms"] = cand_ms
    benchmark.extra_info["speedup_vs_eager"] = anchor_ms / cand_ms
    benchmark.extra_info["device"] = torch.cuda.get_device_name(DEV)


@pytest.mark.parametrize("preset", ["XS", "S"])
@pytest.mark.parametrize("backend", ["cuda", "triton"])
def test_self_regulate_b1(benchmark, backend, preset):
    mod = _backend_module(backend)
    w = _weights(preset)
    D = SIZES[preset]["D"]
    g = torch.Generator().manual_seed(0)
    h = torch.randn(1, D, generator=g).to(DEV)
    z = ref.sample_categorical(torch.randn(1, 1024, generator=g), torch.rand(1, 32, generator=g), 32).to(DEV)
    eps = torch.randn(SR_H + 1, 1, 4, generator=g).to(DEV)

    def anchor():
        with torch.no_grad():
            return ref.self_regulate(w, h, z, SR_H, SR_BETA, eps, None, 32)

    def cand():
        return mod.self_regulate(w, h, z, SR_H, SR_BETA, eps)

    want = _synced(anchor)()
    got = _synced(cand)()  # compiles Triton on the first call
    torch.testing.assert_close(got[1], want[1], atol=1e-4, rtol=1e-3)
    anchor_ms = _mean_ms(anchor, reps=20)
    benchmark.pedantic(_synced(cand), rounds=50, iterations=1, warmup_rounds=3)
    _record(benchmark, anchor_ms, op="self_regulate", preset=preset, B=1, H=SR_H, backend=backend, target=20.0)


@pytest.mark.parametrize("backend", ["cuda", "triton"])
def test_imagine_b4096(benchmark, backend):
    mod = _backend_module(backend)
    w = _weights("XS")
    B, H = IMAGINE_B, IMAGINE_H
    g = torch.Generator().manual_seed(1)
    h0 = torch.randn(B, 256, generator=g).to(DEV)
    z0 = ref.sample_categorical(torch.randn(B, 1024, generator=g), torch.rand(B, 32, generator=g), 32).to(DEV)
    eps = torch.randn(H, B, 4, generator=g).to(DEV)
    u = torch.rand(H, B, 32, generator=g).to(DEV)

    def anchor():
        with torch.no_grad():
            return ref.imagine(w, h0, z0, eps, u, 32)

    def cand():
        return mod.imagine(w, h0, z0, eps, u)

    want = _synced(anchor)()
    got = _synced(cand)()
    torch.testing.assert_close(got[2][0], want[2][0], atol=1e-4, rtol=1e-3)
    anchor_ms = _mean_ms(anchor, reps=5, warmup=1)
    benchmark.pedantic(_synced(cand), rounds=10, iterations=1, warmup_rounds=1)
    _record(benchmark, anchor_ms, op="imagine", preset="XS", B=B, H=H, backend=backend, target=3.0)
