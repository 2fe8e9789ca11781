"""Robustness probes of the public kernels (``metacog_fast.kernels``, issue 55): wrong dtypes, wrong
ranks, mismatched shapes, non-contiguous and empty inputs, NaN, and sizes that cannot fit in memory.
Each bad input is a TypeError or ValueError whose message starts with the argument's name (never a
crash, an IndexError from inside, a MemoryError half-way or silent garbage); a non-contiguous or
float64 input gives the result of its contiguous float32 copy; an empty batch is an empty result or
a clear error, per op."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import metacog_fast.kernels as K

HUGE = 10**9


@pytest.fixture(scope="module")
def rssm():
    w = K.init_rssm_weights(None, D=16, Hd=16, S=4, C=4, A=3, E=8, L=1, N=2, seed=0)
    sz = K.infer_sizes(w, classes=4)
    B = 2
    rng = np.random.default_rng(0)
    f = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    return w, sz, {"h": f(B, sz.D), "z": np.eye(sz.Z, dtype=np.float32)[:B], "a": f(B, sz.A), "e": f(B, sz.E),
                   "s": f(B, sz.D + sz.Z)}


def _nan(x: np.ndarray) -> np.ndarray:
    y = x.copy()
    y.flat[0] = np.nan
    return y


RSSM_BAD = [  # (label, call(w, sz, x), exception, the message's start)
    ("int h", lambda w, sz, x: K.rssm_img_step(w, x["h"].astype(np.int32), x["z"], x["a"], seed=0, classes=4),
     TypeError, "h:"),
    ("torch int h", lambda w, sz, x: K.rssm_img_step(w, torch.zeros(2, sz.D, dtype=torch.int64), x["z"], x["a"], seed=0,
                                                     classes=4), TypeError, "h:"),
    ("str h", lambda w, sz, x: K.rssm_img_step(w, "h", x["z"], x["a"], seed=0, classes=4), TypeError, "h:"),
    ("rank-3 h", lambda w, sz, x: K.rssm_img_step(w, x["h"][None], x["z"], x["a"], seed=0, classes=4), ValueError, "h:"),
    ("z rows", lambda w, sz, x: K.rssm_img_step(w, x["h"], x["z"][:1], x["a"], seed=0, classes=4), ValueError, "z:"),
    ("a width", lambda w, sz, x: K.rssm_img_step(w, x["h"], x["z"], x["a"][:, :1], seed=0, classes=4), ValueError, "a:"),
    ("embed width", lambda w, sz, x: K.rssm_obs_step(w, x["h"], x["z"], x["a"], x["e"][:, :-1], seed=0, classes=4),
     ValueError, "embed:"),
    ("NaN h", lambda w, sz, x: K.rssm_img_step(w, _nan(x["h"]), x["z"], x["a"], seed=0, classes=4), ValueError, "h:"),
    ("NaN embed", lambda w, sz, x: K.rssm_obs_step(w, x["h"], x["z"], x["a"], _nan(x["e"]), seed=0, classes=4),
     ValueError, "embed:"),
    ("u outside [0, 1)", lambda w, sz, x: K.rssm_img_step(w, x["h"], x["z"], x["a"], u=np.full((2, sz.S), 1.0, np.float32),
                                                          classes=4), ValueError, "u:"),
    ("empty batch", lambda w, sz, x: K.rssm_img_step(w, x["h"][:0], x["z"][:0], x["a"][:0], seed=0, classes=4),
     ValueError, "batch:"),
    ("classes not dividing Z", lambda w, sz, x: K.rssm_img_step(w, x["h"], x["z"], x["a"], seed=0, classes=3),
     ValueError, "classes"),
    ("weights not a mapping", lambda w, sz, x: K.rssm_img_step([1], x["h"], x["z"], x["a"], seed=0), TypeError, "w:"),
    ("a weight's shape", lambda w, sz, x: K.rssm_img_step({**w, "gru.w": w["gru.w"][:-1]}, x["h"], x["z"], x["a"],
                                                          seed=0, classes=4), ValueError, "weights['gru.w']"),
    ("NaN weight", lambda w, sz, x: K.rssm_img_step({**w, "img_in.w": _nan(w["img_in.w"])}, x["h"], x["z"], x["a"],
                                                    seed=0, classes=4), ValueError, "weights['img_in.w']"),
    ("backend", lambda w, sz, x: K.rssm_img_step(w, x["h"], x["z"], x["a"], seed=0, classes=4, backend="gpu"),
     ValueError, "backend:"),
    ("precision", lambda w, sz, x: K.rssm_img_step(w, x["h"], x["z"], x["a"], seed=0, classes=4, precision="fp8"),
     ValueError, "precision:"),
    ("H = 0", lambda w, sz, x: K.rssm_imagine(w, x["h"], x["z"], H=0, seed=0, classes=4), ValueError, "H:"),
    ("H = 2.5", lambda w, sz, x: K.rssm_imagine(w, x["h"], x["z"], H=2.5, seed=0, classes=4), ValueError, "H:"),
    ("eps steps", lambda w, sz, x: K.rssm_imagine(w, x["h"], x["z"], H=3, eps=np.zeros((2, 2, sz.A), np.float32),
                                                  seed=0, classes=4), ValueError, "eps:"),
    ("huge H (imagine)", lambda w, sz, x: K.rssm_imagine(w, x["h"], x["z"], H=HUGE, seed=0, classes=4),
     ValueError, "H, B:"),
    ("s width", lambda w, sz, x: K.self_assess(w, x["h"], classes=4), ValueError, "s:"),
    ("NaN s", lambda w, sz, x: K.self_assess(w, _nan(x["s"]), classes=4), ValueError, "s:"),
    ("H < 0", lambda w, sz, x: K.self_regulate(w, x["h"], H=-1, seed=0, classes=4), ValueError, "H:"),
    ("beta NaN", lambda w, sz, x: K.self_regulate(w, x["h"], H=2, beta=math.nan, seed=0, classes=4), ValueError, "beta:"),
    ("huge H (regulate)", lambda w, sz, x: K.self_regulate(w, x["h"], H=HUGE * 10, seed=0, classes=4),
     ValueError, "H, B:"),
    ("empty batch (regulate)", lambda w, sz, x: K.self_regulate(w, x["h"][:0], H=2, seed=0, classes=4),
     ValueError, "batch:"),
]


@pytest.mark.parametrize("label, call, exc, start", RSSM_BAD, ids=[c[0] for c in RSSM_BAD])
def test_rssm_bad_input_names_the_argument(rssm, label, call, exc, start):
    w, sz, x = rssm
    with pytest.raises(exc) as err:
        call(w, sz, x)
    assert str(err.value).startswith(start), str(err.value)


def test_rssm_non_contiguous_and_float64_inputs_give_the_contiguous_float32_result(rssm):
    w, sz, x = rssm
    h_f = np.asfortranarray(x["h"])
    h64 = x["h"].astype(np.float64)
    wide = np.zeros((2, 2 * sz.D), np.float32)
    wide[:, ::2] = x["h"]  # a strided view of the same values
    base = K.rssm_img_step(w, x["h"], x["z"], x["a"], seed=3, classes=4)
    for h in (h_f, h64, wide[:, ::2], torch.from_numpy(x["h"]).t().contiguous().t()):
        got = K.rssm_img_step(w, h, x["z"], x["a"], seed=3, classes=4)
        for g, b in zip(got, base):
            np.testing.assert_array_equal(np.asarray(g), b)


@pytest.mark.parametrize("kwargs, start", [
    ({"preset": "XL"}, "preset:"),
    ({"preset": None, "D": 0, "Hd": 8}, "D:"),
    ({"preset": None, "D": 8}, "D, Hd:"),
    ({"preset": None, "D": HUGE, "Hd": HUGE}, "D, Hd, S, C, A, E, L, N:"),
    ({"preset": "XS", "S": 2.5}, "S:"),
])
def test_init_rssm_weights_bad_sizes(kwargs, start):
    preset = kwargs.pop("preset")
    with pytest.raises(ValueError) as err:
        K.init_rssm_weights(preset, **kwargs)
    assert str(err.value).startswith(start), str(err.value)


# ------------------------------------------------------------------------------- scoring

@pytest.fixture(scope="module")
def scoring():
    head = K.init_scoring_head(in_dim=16, hidden=(8,), seed=0)
    rng = np.random.default_rng(1)
    return head, rng.standard_normal((3, 8)).astype(np.float32), rng.standard_normal((3, 8)).astype(np.float32)


SCORE_BAD = [  # (label, call(head, task, traj), exception, start)
    ("int task", lambda hd, t, r: K.score_trajectories(t.astype(np.int64), r, hd), TypeError, "task_emb:"),
    ("list task", lambda hd, t, r: K.score_trajectories(t.tolist(), r, hd), TypeError, "task_emb:"),
    ("rank-1 task", lambda hd, t, r: K.score_trajectories(t[0], r, hd), ValueError, "task_emb:"),
    ("rows", lambda hd, t, r: K.score_trajectories(t[:2], r, hd), ValueError, "task_emb:"),
    ("widths vs head", lambda hd, t, r: K.score_trajectories(t[:, :4], r, hd), ValueError, "head['l0.w']"),
    ("NaN traj", lambda hd, t, r: K.score_trajectories(t, _nan(r), hd), ValueError, "traj_emb:"),
    ("head missing out", lambda hd, t, r: K.score_trajectories(t, r, {"l0.w": hd["l0.w"], "l0.b": hd["l0.b"]}),
     ValueError, "head:"),
    ("NaN head", lambda hd, t, r: K.score_trajectories(t, r, {**hd, "l0.w": hd["l0.w"] * math.nan}),
     ValueError, "head['l0.w']"),
    ("backend", lambda hd, t, r: K.score_trajectories(t, r, hd, backend="gpu"), ValueError, "backend:"),
    ("pool rank", lambda hd, t, r: K.mean_pool_l2norm(t, np.ones(3)), ValueError, "token_emb:"),
    ("pool mask shape", lambda hd, t, r: K.mean_pool_l2norm(t[None], np.ones((1, 2))), ValueError, "mask:"),
    ("pool mask type", lambda hd, t, r: K.mean_pool_l2norm(t[None], "mask"), TypeError, "mask:"),
    ("pool int", lambda hd, t, r: K.mean_pool_l2norm(t[None].astype(np.int32), np.ones((1, 3))), TypeError, "token_emb:"),
    ("pool NaN", lambda hd, t, r: K.mean_pool_l2norm(_nan(t)[None], np.ones((1, 3))), ValueError, "token_emb:"),
    ("pool NaN mask", lambda hd, t, r: K.mean_pool_l2norm(t[None], np.array([[1.0, np.nan, 1.0]])), ValueError, "mask:"),
]


@pytest.mark.parametrize("label, call, exc, start", SCORE_BAD, ids=[c[0] for c in SCORE_BAD])
def test_scoring_bad_input_names_the_argument(scoring, label, call, exc, start):
    with pytest.raises(exc) as err:
        call(*scoring)
    assert str(err.value).startswith(start), str(err.value)


def test_scoring_odd_layouts_and_empty_batches(scoring):
    head, task, traj = scoring
    base = K.score_trajectories(task, traj, head)
    np.testing.assert_allclose(K.score_trajectories(task, np.asfortranarray(traj), head), base, rtol=0, atol=1e-6)
    np.testing.assert_allclose(K.score_trajectories(task.astype(np.float64), traj, head), base, rtol=0, atol=1e-6)
    assert K.score_trajectories(task[:1], traj[:0], head).shape == (0,)
    tok = np.random.default_rng(2).standard_normal((2, 5, 8)).astype(np.float32)
    mask = np.array([[1, 1, 1, 0, 0], [0, 0, 0, 0, 0]])
    pooled = K.mean_pool_l2norm(tok, mask)
    np.testing.assert_allclose(K.mean_pool_l2norm(np.asfortranarray(tok), mask), pooled, rtol=0, atol=1e-6)
    assert np.all(pooled[1] == 0) and np.isfinite(pooled).all()  # an all-masked row is zeros, not NaN
    assert K.mean_pool_l2norm(tok[:0], mask[:0]).shape == (0, 8)


def test_init_scoring_head_bad_sizes():
    for kwargs, start in (({"in_dim": 0}, "in_dim:"), ({"hidden": (8, 0)}, "hidden:"),
                          ({"in_dim": HUGE, "hidden": (HUGE,)}, "in_dim, hidden:")):
        with pytest.raises(ValueError) as err:
            K.init_scoring_head(**kwargs)
        assert str(err.value).startswith(start), str(err.value)


# ------------------------------------------------------------------------------- the int8 encoder steps

def _deq_args(M: int = 4, N: int = 6) -> list[torch.Tensor]:
    return [torch.arange(M * N, dtype=torch.int32).reshape(M, N), torch.ones(M), torch.zeros(M), torch.ones(N),
            torch.zeros(N), torch.zeros(N)]


ENCODER_BAD = [  # (label, call(), exception, start)
    ("quantize_rows f64", lambda: K.quantize_rows(torch.randn(4, 8, dtype=torch.float64)), TypeError, "x:"),
    ("quantize_rows numpy", lambda: K.quantize_rows(np.zeros((4, 8), np.float32)), TypeError, "x:"),
    ("quantize_rows rank 1", lambda: K.quantize_rows(torch.randn(8)), ValueError, "x:"),
    ("quantize_rows NaN", lambda: K.quantize_rows(torch.full((2, 3), math.nan)), ValueError, "x:"),
    ("quantize_weight rank 1", lambda: K.quantize_weight(torch.randn(8)), ValueError, "w:"),
    ("quantize_weight str", lambda: K.quantize_weight("w"), TypeError, "w:"),
    ("quantize_weight int", lambda: K.quantize_weight(torch.ones(2, 3, dtype=torch.int32)), TypeError, "w:"),
    ("quantize_weight NaN", lambda: K.quantize_weight(torch.full((2, 3), math.nan)), ValueError, "w:"),
    ("dequantize acc float", lambda: K.dequantize_rows(*[_deq_args()[0].float(), *_deq_args()[1:]]), TypeError, "acc:"),
    ("dequantize scale rows", lambda: K.dequantize_rows(*[_deq_args()[0], torch.ones(3), *_deq_args()[2:]]),
     ValueError, "scale:"),
    ("dequantize NaN bias", lambda: K.dequantize_rows(*[*_deq_args()[:5], torch.full((6,), math.nan)]),
     ValueError, "bias:"),
    ("layernorm residual strided", lambda: K.dequantize_add_layernorm(*_deq_args(), torch.zeros(6, 4).t(), torch.ones(6),
                                                                       torch.zeros(6), 1e-5), ValueError, "residual:"),
    ("layernorm gamma", lambda: K.dequantize_add_layernorm(*_deq_args(), torch.zeros(4, 6), torch.ones(3), torch.zeros(6),
                                                           1e-5), ValueError, "gamma:"),
    ("layernorm eps", lambda: K.dequantize_add_layernorm(*_deq_args(), torch.zeros(4, 6), torch.ones(6), torch.zeros(6),
                                                         math.nan), ValueError, "eps:"),
    ("attention heads", lambda: K.attention(torch.randn(2, 5, 24), torch.tensor([5, 3]), 5), ValueError, "heads:"),
    ("attention heads str", lambda: K.attention(torch.randn(2, 5, 24), torch.tensor([5, 3]), "2"), TypeError, "heads:"),
    ("attention lengths 0", lambda: K.attention(torch.randn(2, 5, 24), torch.tensor([0, 3]), 2), ValueError, "lengths:"),
    ("attention lengths > T", lambda: K.attention(torch.randn(2, 5, 24), torch.tensor([9, 3]), 2), ValueError,
     "lengths:"),
    ("attention lengths int32", lambda: K.attention(torch.randn(2, 5, 24), torch.tensor([5, 3], dtype=torch.int32), 2),
     TypeError, "lengths:"),
    ("attention rank 2", lambda: K.attention(torch.randn(5, 24), torch.tensor([5]), 2), ValueError, "qkv:"),
    ("attention NaN", lambda: K.attention(torch.full((1, 2, 24), math.nan), torch.tensor([2]), 2), ValueError, "qkv:"),
]


@pytest.mark.parametrize("label, call, exc, start", ENCODER_BAD, ids=[c[0] for c in ENCODER_BAD])
def test_encoder_bad_input_names_the_argument(label, call, exc, start):
    with pytest.raises(exc) as err:
        call()
    assert str(err.value).startswith(start), str(err.value)


def test_encoder_odd_layouts_and_empty_batches():
    x = torch.randn(8, 4)
    q, s, z = K.quantize_rows(x.t())  # a transposed view: the result of its contiguous copy
    q2, s2, z2 = K.quantize_rows(x.t().contiguous())
    assert torch.equal(q, q2) and torch.equal(s, s2) and torch.equal(z, z2)
    assert [t.shape[0] for t in K.quantize_rows(torch.zeros(0, 8))] == [0, 0, 0]
    assert K.dequantize_rows(*_deq_args(0, 6)).shape == (0, 6)
    assert K.attention(torch.zeros(0, 5, 24), torch.zeros(0, dtype=torch.int64), 2).shape == (0, 5, 8)
    qkv = torch.randn(5, 2, 24).transpose(0, 1)  # non-contiguous
    lengths = torch.tensor([5, 3])
    torch.testing.assert_close(K.attention(qkv, lengths, 2), K.attention(qkv.contiguous(), lengths, 2))
    wq, ws, wc = K.quantize_weight(torch.randn(6, 4, dtype=torch.float64))
    assert wq.dtype == torch.int8 and wq.shape == (4, 6) and ws.shape == (6,)
