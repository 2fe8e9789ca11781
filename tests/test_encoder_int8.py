"""The int8 MiniLM encoder (W8A8, ``EncoderConfig(precision="int8")``): the whole forward against the
fp32 model (its kernels against their reference: tests/ops/encoder/test_encoder_kernels.py).

Tolerances: cosine of the pooled embeddings to fp32 > 0.99 (mean > 0.997); the compiled and the
reference int8 forward: token-state cosine > 0.99 (mean > 0.998), one flipped code apart at most.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import metacog_fast

CORE = metacog_fast.core() if metacog_fast.core_built() else None

TEXTS = [
    "> go to countertop 1\nYou arrive at countertop 1. On the countertop 1, you see a bowl 1, a bread 2, a "
    "butterknife 3, a cup 1, a fork 2, and a mug 2.\n> take mug 2 from countertop 1\nYou pick up the mug 2 from the "
    "countertop 1.\nPlan: 1. find a mug. 2. heat it with the microwave. 3. put it in the cabinet.",
    "> open drawer 3\nYou open the drawer 3. The drawer 3 is open. In it, you see nothing.",
    "> look",
    "Your task is to: put a clean lettuce in diningtable.",
]


@pytest.fixture(scope="module")
def encoders():
    from metacog_fast.scoring import EncoderConfig, MiniLMEncoder

    fp32 = MiniLMEncoder(EncoderConfig(precision="fp32", cache_size=0))
    int8 = MiniLMEncoder(EncoderConfig(precision="int8", cache_size=0), share=fp32)
    return fp32, int8


def test_int8_encoder_close_to_fp32(encoders):
    fp32, int8 = encoders
    a, b = fp32.encode(TEXTS), int8.encode(TEXTS)
    cos = (a * b).sum(1)
    # Measured: 0.9992, 0.9992, 0.9955 (the 5-token "> look"), 0.9989.
    assert cos.min() > 0.99 and cos.mean() > 0.997, cos


def test_int8_forward_cpu_equals_torch_reference(encoders):
    from metacog_fast.scoring.int8_bert import Int8Bert

    if CORE is None:
        pytest.skip("compiled core not built")
    fp32, _ = encoders
    tok = fp32.tokenizer(TEXTS, padding=True, return_tensors="pt")
    model = fp32.base
    x_cpu = Int8Bert(model, backend="cpu")(tok["input_ids"], tok["attention_mask"])
    x_ref = Int8Bert(model, backend="torch")(tok["input_ids"], tok["attention_mask"])
    m = tok["attention_mask"].bool()
    # A flipped rounding of one code moves a token state by one quantisation step, so the two paths
    # agree to about the int8 error itself (measured: min 0.994, mean 0.999; each to fp32: min 0.994).
    cos = torch.nn.functional.cosine_similarity(x_cpu[m], x_ref[m], dim=-1)
    assert float(cos.min()) > 0.99 and float(cos.mean()) > 0.998
    with torch.inference_mode():
        x32 = model(input_ids=tok["input_ids"], attention_mask=tok["attention_mask"]).last_hidden_state
    for x in (x_cpu, x_ref):
        assert float(torch.nn.functional.cosine_similarity(x[m], x32[m], dim=-1).min()) > 0.99


def test_int8_rows_do_not_depend_on_the_batch(encoders):
    """Per-token activation scales: a text alone gives its row of the padded batch."""
    _, int8 = encoders
    batch = int8.encode(TEXTS, use_cache=False)
    for i, t in enumerate(TEXTS):
        np.testing.assert_allclose(int8.encode([t], use_cache=False)[0], batch[i], atol=1e-5, rtol=0)


def test_int8_forward_rejects_bad_masks(encoders):
    from metacog_fast.scoring.int8_bert import Int8Bert

    fp32, _ = encoders
    model = Int8Bert(fp32.base, backend="torch")
    ids = torch.randint(1000, 2000, (2, 5))
    with pytest.raises(ValueError, match="prefix mask"):
        model(ids, torch.tensor([[1, 0, 1, 1, 0], [1, 1, 1, 1, 1]]))
    with pytest.raises(ValueError, match="prefix mask"):
        model(ids, torch.zeros(2, 5, dtype=torch.int64))
    with pytest.raises(ValueError, match="ids/mask"):
        model(ids, torch.ones(2, 4, dtype=torch.int64))
    with pytest.raises(ValueError, match="backend"):
        Int8Bert(fp32.base, backend="cuda")


def test_auto_precision_rule(monkeypatch):
    from metacog_fast.scoring import encoder as E

    monkeypatch.setattr(E, "cpu_has_vnni", lambda: True)
    monkeypatch.setattr(E, "cpu_has_bf16", lambda: True)
    assert E.auto_cpu_precision() == ("int8" if CORE is not None else "bf16")
    monkeypatch.setattr(E, "cpu_has_vnni", lambda: False)
    assert E.auto_cpu_precision() == "bf16"
    monkeypatch.setattr(E, "cpu_has_bf16", lambda: False)
    assert E.auto_cpu_precision() == "fp32"  # int8 and bf16 are emulated there: many times slower


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (17, 384, 33), (5, 1024, 7), (9, 1025, 3), (13, 1536, 65), (3, 2100, 5)])
def test_exact_float_gemm_equals_int_mm(m, k, n):
    """The fp32-exact GEMM (CPUs without int8 dot products) is bit-identical to ``torch._int_mm``,
    at the extremes of the codes too (every partial sum at its largest magnitude)."""
    from metacog_fast.scoring.int8_bert import ExactFloatGemm

    g = torch.Generator().manual_seed(m * 1000 + k)
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=g)
    w = torch.randint(-127, 128, (k, n), dtype=torch.int8, generator=g)

    def int_mm(a, w):  # torch._int_mm wants M > 16 and K, N multiples of 8: pad with zeros
        mp, kp, np_ = max(17, m), -(-k // 8) * 8, -(-n // 8) * 8
        ap = torch.zeros(mp, kp, dtype=torch.int8)
        wp = torch.zeros(kp, np_, dtype=torch.int8)
        ap[:m, :k], wp[:k, :n] = a, w
        return torch._int_mm(ap, wp)[:m, :n]

    for x, y in ((a, w), (torch.full_like(a, -128), torch.full_like(w, -127)), (torch.full_like(a, 127), torch.full_like(w, 127))):
        out = ExactFloatGemm(y)(x)
        assert out.dtype == torch.int32 and out.shape == (m, n)
        assert torch.equal(out, int_mm(x, y))
        assert torch.equal(out, x.long().mm(y.long()).to(torch.int32))


def test_int8_forward_same_with_either_gemm(encoders):
    from metacog_fast.scoring.int8_bert import Int8Bert

    fp32, _ = encoders
    tok = fp32.tokenizer(TEXTS[:2], padding=True, return_tensors="pt")
    model = fp32.base
    a = Int8Bert(model, backend="torch", gemm="int_mm")(tok["input_ids"], tok["attention_mask"])
    b = Int8Bert(model, backend="torch", gemm="fp32-exact")(tok["input_ids"], tok["attention_mask"])
    torch.testing.assert_close(a, b, atol=0, rtol=0)
    with pytest.raises(ValueError, match="gemm"):
        Int8Bert(model, gemm="int4")
