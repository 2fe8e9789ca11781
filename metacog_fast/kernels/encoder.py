"""The ``encoder`` op under its earlier import path ``metacog_fast.kernels.encoder``.

Its home is ``metacog_fast/ops/encoder/`` (API and dispatch table in ``api.py``, the torch
reference in ``naive.py``, the backend glue beside them); this module re-exports its public
names so that code written against the earlier layout keeps working."""
from metacog_fast.ops.encoder import (  # noqa: F401 - re-exported
    attention,
    dequantize_add_layernorm,
    dequantize_gelu_quantize,
    dequantize_rows,
    quantize_rows,
    quantize_weight,
)

__all__ = [
    "attention", "dequantize_add_layernorm", "dequantize_gelu_quantize", "dequantize_rows", "quantize_rows",
    "quantize_weight",
]
