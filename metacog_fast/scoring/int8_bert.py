"""MiniLM's BertModel forward with int8 GEMMs (W8A8): ``EncoderConfig(precision="int8")``.

Every ``nn.Linear`` of the 6 layers (Q/K/V fused, attention output, FFN in, FFN out) runs as an
int8 x int8 -> int32 GEMM (``torch._int_mm``: oneDNN, AVX512-VNNI where the CPU has it); weights
are quantised once per output channel (symmetric), activations per token (asymmetric, the whole
int8 range). Between two GEMMs the activations stay float32 and every element-wise step (dequantise,
bias, GELU, residual + LayerNorm, quantise, attention with a float32 softmax) is one pass of the
kernels in :mod:`metacog_fast.ops.encoder` (unchecked fast path). Embeddings and their LayerNorm are float32 torch.

Without int8 dot products (no VNNI / AMX-INT8: an AVX2-only CPU) oneDNN's ``torch._int_mm`` is
25-40x slower than an fp32 GEMM, so there the GEMM runs as fp32 matmuls over slices of at most
1,024 along K: every partial sum is an integer of magnitude <= 1024 * 128 * 128 = 2**24, which fp32
holds exactly, so the int32 result is bit-identical to ``torch._int_mm``'s (``gemm="fp32-exact"``).

Accuracy against the fp32 model on 300 ALFWorld MUSE chunk texts: mean cosine of the pooled
embeddings 0.9991 (bf16: 0.99996), see docs/scoring.md. Speed: the GEMMs are ~2x bf16's on an
AVX512-VNNI core (bench/bench_alfworld_agents.py).
"""
from __future__ import annotations

import torch

from metacog_fast.ops import encoder as enc
from metacog_fast.ops.encoder.api import TABLE


GEMMS = ("auto", "int_mm", "fp32-exact")
# fp32 holds every integer up to 2**24 exactly; |a| <= 128 and |w| <= 128, so K <= 1024 keeps each
# partial sum exact.
_EXACT_K = 1024


class ExactFloatGemm:
    """``a [M, K] int8 @ w [K, N] int8 -> [M, N] int32`` computed exactly by fp32 matmuls over K
    slices of <= 1,024 (see the module docstring); ``w`` converted once."""

    def __init__(self, w: torch.Tensor) -> None:
        if w.dtype != torch.int8 or w.dim() != 2:
            raise ValueError(f"w: expected a [K, N] int8 tensor, got {w.dtype} {list(w.shape)}")
        self.bounds = [(s, min(s + _EXACT_K, w.shape[0])) for s in range(0, w.shape[0], _EXACT_K)]
        self.parts = [w[s:e].float().contiguous() for s, e in self.bounds]

    def __call__(self, a: torch.Tensor) -> torch.Tensor:
        out = None
        for (s, e), w in zip(self.bounds, self.parts):
            p = torch.mm(a[:, s:e].float(), w).to(torch.int32)
            out = p if out is None else out.add_(p)
        return out


class IntMmGemm:
    """``a [M, K] int8 @ w [K, N] int8 -> [M, N] int32`` through ``torch._int_mm`` (oneDNN)."""

    def __init__(self, w: torch.Tensor) -> None:
        self.w = w

    def __call__(self, a: torch.Tensor) -> torch.Tensor:
        return torch._int_mm(a, self.w)


def resolve_gemm(gemm: str) -> str:
    """"auto" -> "int_mm" on a CPU with int8 dot products, else "fp32-exact" (same int32 results)."""
    if gemm not in GEMMS:
        raise ValueError(f"gemm: expected one of {GEMMS}, got {gemm!r}")
    if gemm != "auto":
        return gemm
    from metacog_fast.scoring.encoder import cpu_has_vnni

    return "int_mm" if cpu_has_vnni() else "fp32-exact"


class Int8Bert:
    """Callable ``(ids [B, T] int64, mask [B, T]) -> token states [B, T, hidden] float32``.

    ``mask`` must be a prefix mask (1 for the first ``lengths[b]`` tokens, then 0), as a
    tokenizer's right padding gives. ``backend``: "auto" (compiled core when built), "cpu", "torch".
    ``gemm``: how the int8 GEMMs run, :data:`GEMMS` ("auto": ``torch._int_mm`` with VNNI, else the
    exact fp32 form; both give the same int32 results)."""

    def __init__(self, model: torch.nn.Module, backend: str = "auto", gemm: str = "auto") -> None:
        cfg = model.config
        if getattr(cfg, "position_embedding_type", "absolute") != "absolute":
            raise ValueError("model: the int8 forward supports absolute position embeddings only")
        if backend not in ("auto", "cpu", "torch"):
            raise ValueError(f"backend: expected 'auto', 'cpu' or 'torch', got {backend!r}")
        # Resolved once ("cpu" raises when the core is not built; "auto" takes it if built). Every
        # step then takes the kernels' unchecked path: its tensors come from this forward's GEMMs.
        self.backend = TABLE.resolve(backend)
        self.gemm = resolve_gemm(gemm)
        self._gemm_cls = IntMmGemm if self.gemm == "int_mm" else ExactFloatGemm
        emb = model.embeddings
        self.word = emb.word_embeddings.weight.detach().float()
        self.type0 = emb.token_type_embeddings.weight[0].detach().float()
        self.pos = emb.position_embeddings.weight.detach().float()
        self.ln0 = (emb.LayerNorm.weight.detach().float(), emb.LayerNorm.bias.detach().float(), float(emb.LayerNorm.eps))
        self.heads = int(cfg.num_attention_heads)
        self.hidden = int(cfg.hidden_size)
        self.layers = []
        for layer in model.encoder.layer:
            sa = layer.attention.self
            qkv_w = torch.cat([sa.query.weight, sa.key.weight, sa.value.weight])
            qkv_b = torch.cat([sa.query.bias, sa.key.bias, sa.value.bias])
            ln1, ln2 = layer.attention.output.LayerNorm, layer.output.LayerNorm
            self.layers.append({
                "qkv": self._linear(qkv_w, qkv_b),
                "o": self._linear(layer.attention.output.dense.weight, layer.attention.output.dense.bias),
                "ln1": self._ln(ln1),
                "ffn_in": self._linear(layer.intermediate.dense.weight, layer.intermediate.dense.bias),
                "ffn_out": self._linear(layer.output.dense.weight, layer.output.dense.bias),
                "ln2": self._ln(ln2),
            })

    def _linear(self, w: torch.Tensor, b: torch.Tensor) -> tuple:
        """(GEMM by Wq^T int8 [K, N], w_scale [N], w_colsum [N], bias [N]), quantised once."""
        wq_t, w_scale, w_colsum = enc.quantize_weight(w)
        return self._gemm_cls(wq_t), w_scale.contiguous(), w_colsum.contiguous(), b.detach().float().contiguous()

    @staticmethod
    def _ln(ln: torch.nn.LayerNorm) -> tuple:
        return ln.weight.detach().float().contiguous(), ln.bias.detach().float().contiguous(), float(ln.eps)

    # -- the element-wise steps: metacog_fast.ops.encoder, unchecked --------------------------------
    # A quantised activation is (q, scale, zero): q the int8 input of the next GEMM.
    def _quantize(self, x: torch.Tensor):
        return enc.quantize_rows(x, self.backend, check=False)

    def _dequantize(self, acc, quant, lin):
        _, s, z = quant
        _, ws, cs, b = lin
        return enc.dequantize_rows(acc, s, z, ws, cs, b, False, self.backend, check=False)

    def _dequantize_gelu_quantize(self, acc, quant, lin):
        _, s, z = quant
        _, ws, cs, b = lin
        return enc.dequantize_gelu_quantize(acc, s, z, ws, cs, b, self.backend, check=False)

    def _dequantize_add_layernorm(self, acc, quant, lin, x, ln):
        _, s, z = quant
        _, ws, cs, b = lin
        gamma, beta, eps = ln
        return enc.dequantize_add_layernorm(acc, s, z, ws, cs, b, x, gamma, beta, eps, self.backend, check=False)

    def _attention(self, qkv: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return enc.attention(qkv, lengths, self.heads, self.backend, check=False)

    # -- forward ----------------------------------------------------------------------------------
    def __call__(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if ids.dim() != 2 or tuple(mask.shape) != tuple(ids.shape):
            raise ValueError(f"ids/mask: expected two [B, T] tensors of one shape, got {list(ids.shape)} and "
                             f"{list(mask.shape)}")
        B, T = ids.shape
        if T > self.pos.shape[0]:
            raise ValueError(f"ids: {T} tokens exceed the model's {self.pos.shape[0]} positions")
        lengths = mask.to(torch.int64).sum(dim=1).contiguous()
        prefix = torch.arange(T)[None, :] < lengths[:, None]
        if not bool((prefix == mask.bool()).all()) or bool((lengths < 1).any()):
            raise ValueError("mask: expected a right-padded prefix mask with at least one real token per row")
        with torch.inference_mode():
            x = self.word[ids] + self.type0
            x = torch.nn.functional.layer_norm(x + self.pos[:T], (self.hidden,), *self.ln0)
            x = x.reshape(B * T, self.hidden).contiguous()
            quant = self._quantize(x)
            for L in self.layers:
                qkv = self._dequantize(L["qkv"][0](quant[0]), quant, L["qkv"])
                a = self._attention(qkv.view(B, T, -1), lengths).view(B * T, self.hidden)
                qa = self._quantize(a)
                quant = self._dequantize_add_layernorm(L["o"][0](qa[0]), qa, L["o"], x, L["ln1"])
                qh = self._dequantize_gelu_quantize(L["ffn_in"][0](quant[0]), quant, L["ffn_in"])
                quant = self._dequantize_add_layernorm(L["ffn_out"][0](qh[0]), qh, L["ffn_out"], x,
                                                       L["ln2"])
            return x.view(B, T, self.hidden)
