"""RSSM / MUSE kernels: decisions/s of self_regulate (H=10) and rollouts/s of
rssm_imagine (H=15) on the cpu backend (fp32 and bf16) against the torch eager
reference and torch.compile of it, all in the same run, plus a roofline
measured in the same run on the same weight matrices.

    pytest bench/bench_rssm.py --benchmark-json=bench/results/rssm_cpu.json

Grid: presets XS, S; batch 1, 64, 1024; 1 and 2 threads. Environment knobs
(the defaults keep the whole file to roughly 15 minutes on 2 cores):
  METACOG_BENCH_COMPILE = xs (default: torch.compile for XS only; each compile
                          takes 1.5-3 minutes here) | all | none
  METACOG_BENCH_BATCHES = comma list, default 1,64,1024
  METACOG_BENCH_THREADS = comma list, default 1,2

extra_info of every cpu benchmark: per_s (decisions or rollouts per second),
eager_s and ratio_vs_eager, compile_s and ratio_vs_compile (or compile_status
saying why not), roofline (gemv_GBps, gemm_GFLOPs, floor_s) and
roofline_fraction = floor_s / measured time.
"""
from __future__ import annotations

import os
import statistics
import time
from typing import Any, Callable

import numpy as np
import pytest
import torch

from metacog_fast.ops.rssm import api as R
from metacog_fast.ops.rssm import naive as ref

H_SR = 10
H_IM = 15
BETA = 0.02
PRESETS = ("XS", "S")
BATCHES = tuple(int(b) for b in os.environ.get("METACOG_BENCH_BATCHES", "1,64,1024").split(","))
THREADS = tuple(int(t) for t in os.environ.get("METACOG_BENCH_THREADS", "1,2").split(","))
COMPILE = os.environ.get("METACOG_BENCH_COMPILE", "xs").lower()
IMPLS = ("eager", "compile", "cpu", "cpu_bf16")
OPS = ("self_regulate", "imagine")

_WEIGHTS: dict[str, tuple[dict[str, np.ndarray], dict[str, torch.Tensor]]] = {}
_EAGER: dict[tuple, float] = {}
_COMPILED_TIME: dict[tuple, float] = {}
_COMPILED_FN: dict[tuple, Callable[..., Any]] = {}
_COMPILE_STATUS: dict[tuple, str] = {}
_ROOF: dict[tuple, dict[str, float]] = {}


def _weights(preset: str):
    if preset not in _WEIGHTS:
        w = R.init_rssm_weights(preset, seed=0)
        _WEIGHTS[preset] = (w, {k: torch.from_numpy(v) for k, v in w.items()})
    return _WEIGHTS[preset]


def _inputs(op: str, preset: str, B: int):
    w, _ = _weights(preset)
    sz = R.infer_sizes(w)
    rng = np.random.default_rng(B)
    h = rng.standard_normal((B, sz.D), dtype=np.float32)
    if op == "self_regulate":
        eps = rng.standard_normal((H_SR + 1, B, sz.A), dtype=np.float32)
        u = rng.random((B, sz.S), dtype=np.float32)
        return dict(h=h, eps=eps, u=u)
    z = np.zeros((B, sz.S, sz.C), np.float32)
    np.put_along_axis(z, rng.integers(0, sz.C, (B, sz.S, 1)), 1.0, -1)
    eps = rng.standard_normal((H_IM, B, sz.A), dtype=np.float32)
    u = rng.random((H_IM, B, sz.S), dtype=np.float32)
    return dict(h=h, z=z.reshape(B, sz.Z), eps=eps, u=u)


def _callable(op: str, preset: str, B: int, impl: str) -> Callable[[], Any]:
    w, tw = _weights(preset)
    x = _inputs(op, preset, B)
    if impl in ("cpu", "cpu_bf16"):
        prec = "bf16" if impl == "cpu_bf16" else "fp32"
        if op == "self_regulate":
            return lambda: R.self_regulate(w, x["h"], None, H_SR, BETA, x["eps"], x["u"], backend="cpu", precision=prec)
        return lambda: R.rssm_imagine(w, x["h"], x["z"], H_IM, x["eps"], x["u"], backend="cpu", precision=prec)
    t = {k: torch.from_numpy(v) for k, v in x.items()}
    if impl == "eager":
        if op == "self_regulate":
            return lambda: R.self_regulate(tw, t["h"], None, H_SR, BETA, t["eps"], t["u"], backend="torch")
        return lambda: R.rssm_imagine(tw, t["h"], t["z"], H_IM, t["eps"], t["u"], backend="torch")
    # torch.compile of the same reference function (dynamic shapes: one compile per op and preset)
    key = (op, preset)
    if key not in _COMPILED_FN:
        if op == "self_regulate":
            fn = lambda h, eps, u: ref.self_regulate(tw, h, None, H_SR, BETA, eps, u, 32)  # noqa: E731
        else:
            fn = lambda h, z, eps, u: ref.imagine(tw, h, z, eps, u, 32)  # noqa: E731
        _COMPILED_FN[key] = torch.compile(fn, dynamic=True)
    cf = _COMPILED_FN[key]
    if op == "self_regulate":
        return lambda: _no_grad(cf, t["h"], t["eps"], t["u"])
    return lambda: _no_grad(cf, t["h"], t["z"], t["eps"], t["u"])


def _no_grad(fn, *args):
    with torch.no_grad():
        return fn(*args)


def _rounds(fn: Callable[[], Any], budget_s: float = 2.0) -> int:
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    return int(min(50, max(3, budget_s / max(dt, 1e-6))))


def _median_time(fn: Callable[[], Any], rounds: int) -> float:
    ts = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def _eager_anchor(op: str, preset: str, B: int, nt: int) -> float:
    key = (op, preset, B, nt)
    if key not in _EAGER:  # normally filled by the eager benchmark just before
        fn = _callable(op, preset, B, "eager")
        _EAGER[key] = _median_time(fn, _rounds(fn))
    return _EAGER[key]


# --- roofline ------------------------------------------------------------------------------


def _matmuls(op: str, preset: str) -> list[tuple[str, int, int]]:
    """(weight name, uses per batch row, weight elements one use must read) of every dense
    product of one call. A one-hot z needs only S of the Z columns of img_in.w, actor.0.w and
    sa.0.w (the kernel gathers them), so those uses count Hd*S elements for the z part."""
    w, _ = _weights(preset)
    sz = R.infer_sizes(w)
    actor = [f"actor.{i}.w" for i in range(sz.L_actor)] + ["actor.out.w"]
    sa = [f"sa.{i}.w" for i in range(sz.L_sa)] + ["sa.out.w"]
    seq = ["img_in.w", "gru.w"]
    prior = ["img_out.w", "img_logits.w"]
    uses: dict[tuple[str, bool], int] = {}

    def add(names, n, onehot=False):
        for k in names:
            uses[(k, onehot)] = uses.get((k, onehot), 0) + n

    if op == "self_regulate":
        add(prior, 1)
        add(actor + seq + sa, 1, onehot=True)  # iteration 0: z_t is still one-hot
        add(sa, 1)  # its gradient wrt the whole s
        add(actor + seq, H_SR)  # iterations 1..H-1 and the final action, z continuous
        add(sa, 2 * (H_SR - 1))  # forward + analytic backward through the same matrices
    else:
        add(actor + seq + prior, H_IM, onehot=True)

    def elems(name: str, onehot: bool) -> int:
        n = int(np.prod(w[name].shape))
        if onehot and name in ("img_in.w", "actor.0.w", "sa.0.w"):
            n -= sz.Hd * (sz.Z - sz.S)
        return n

    return [(k, n, elems(k, oh)) for (k, oh), n in uses.items()]


def _roofline(op: str, preset: str, nt: int) -> dict[str, float]:
    """Memory bandwidth and GEMM peak measured with torch on the op's weight matrices.

    gemv_GBps: the better of torch.mv over every matrix in turn and a plain
    torch.sum read of the same bytes (both stream the same working set, so the
    same cache level). gemm_GFLOPs: the best torch.mm over the matrices at
    batch 1024 and a 1024^3 product.
    """
    key = (op, preset, nt)
    if key in _ROOF:
        return _ROOF[key]
    _, tw = _weights(preset)
    mats = [tw[k] for k in dict.fromkeys(k for k, _, _ in _matmuls(op, preset))]
    xs1 = [torch.randn(m.shape[1]) for m in mats]
    flat = torch.cat([m.flatten() for m in mats])
    nbytes = flat.numel() * 4

    def gemv():
        for m, x in zip(mats, xs1):
            torch.mv(m, x)

    t_mv = min(_median_time(gemv, 30) for _ in range(3))
    t_sum = min(_median_time(flat.sum, 30) for _ in range(3))
    peaks = []
    for m in mats:
        if m.shape[0] >= 64:
            X = torch.randn(1024, m.shape[1])
            peaks.append(2 * m.numel() * 1024 / _median_time(lambda: torch.mm(X, m.T), 3))
    Q = torch.randn(1024, 1024)
    peaks.append(2 * 1024**3 / _median_time(lambda: torch.mm(Q, Q), 3))
    _ROOF[key] = {
        "gemv_GBps": max(nbytes / t_mv, nbytes / t_sum) / 1e9,
        "torch_mv_GBps": nbytes / t_mv / 1e9,
        "read_GBps": nbytes / t_sum / 1e9,
        "gemm_GFLOPs": max(peaks) / 1e9,
        "working_set_MB": nbytes / 1e6,
    }
    return _ROOF[key]


def _floor_s(op: str, preset: str, B: int, roof: dict[str, float], bytes_per_weight: int = 4) -> float:
    """Roofline time: every needed weight element streamed once per use, or the FLOPs at peak."""
    elems = sum(n * e for _, n, e in _matmuls(op, preset))
    t_bw = elems * bytes_per_weight / (roof["gemv_GBps"] * 1e9)
    t_fl = 2 * elems * B / (roof["gemm_GFLOPs"] * 1e9)
    return max(t_bw, t_fl)


# --- the benchmarks ----------------------------------------------------------------------------

CASES = [
    (op, preset, B, nt, impl)
    for op in OPS
    for preset in PRESETS
    for B in BATCHES
    for nt in THREADS
    for impl in IMPLS
]


def _compile_wanted(preset: str) -> str | None:
    if COMPILE == "none":
        return "skipped: METACOG_BENCH_COMPILE=none"
    if COMPILE == "xs" and preset != "XS":
        return "skipped: METACOG_BENCH_COMPILE=xs (each compile takes minutes on this machine)"
    return None


@pytest.mark.parametrize("op,preset,B,nt,impl", CASES, ids=[f"{o}-{p}-B{b}-t{n}-{i}" for o, p, b, n, i in CASES])
def test_rssm(benchmark, torch_threads, op, preset, B, nt, impl):
    torch_threads(nt)
    key = (op, preset, B, nt)
    benchmark.group = f"{op}-{preset}-B{B}-t{nt}"
    benchmark.extra_info.update(op=op, preset=preset, batch=B, threads=nt, impl=impl,
                                horizon=H_SR if op == "self_regulate" else H_IM)
    if impl == "compile":
        why = _compile_wanted(preset)
        if why is None and (op, preset) in _COMPILE_STATUS and _COMPILE_STATUS[(op, preset)].startswith("failed"):
            why = _COMPILE_STATUS[(op, preset)]
        if why is not None:
            _COMPILE_STATUS.setdefault((op, preset), why)
            pytest.skip(why)
        try:
            fn = _callable(op, preset, B, impl)
            t0 = time.perf_counter()
            fn()  # compiles (or recompiles for a new batch)
            benchmark.extra_info["first_call_s"] = time.perf_counter() - t0
            _COMPILE_STATUS[(op, preset)] = "ok"
        except Exception as exc:  # torch.compile is optional: record why and move on
            _COMPILE_STATUS[(op, preset)] = f"failed: {type(exc).__name__}: {str(exc)[:300]}"
            pytest.skip(_COMPILE_STATUS[(op, preset)])
    else:
        fn = _callable(op, preset, B, impl)
    rounds = _rounds(fn, budget_s=2.0 if impl in ("eager", "compile") else 1.0)
    benchmark.pedantic(fn, rounds=rounds, iterations=1, warmup_rounds=1)
    t = benchmark.stats.stats.median
    benchmark.extra_info["per_s"] = B / t
    benchmark.extra_info["unit"] = "decisions/s" if op == "self_regulate" else "rollouts/s"
    if impl == "eager":
        _EAGER[key] = t
        return
    if impl == "compile":
        _COMPILED_TIME[key] = t
    eager = _eager_anchor(op, preset, B, nt)
    benchmark.extra_info["eager_s"] = eager
    benchmark.extra_info["ratio_vs_eager"] = eager / t
    if key in _COMPILED_TIME and impl != "compile":
        benchmark.extra_info["compile_s"] = _COMPILED_TIME[key]
        benchmark.extra_info["ratio_vs_compile"] = _COMPILED_TIME[key] / t
    else:
        benchmark.extra_info["compile_status"] = _COMPILE_STATUS.get((op, preset), "not run")
    roof = _roofline(op, preset, nt)
    floor = _floor_s(op, preset, B, roof)
    benchmark.extra_info["roofline"] = dict(roof, floor_s=floor)
    benchmark.extra_info["roofline_fraction"] = floor / t
    if impl == "cpu_bf16":  # half the bytes per weight: its own bandwidth floor
        benchmark.extra_info["roofline_fraction_bf16_bytes"] = _floor_s(op, preset, B, roof, 2) / t
