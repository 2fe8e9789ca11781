"""The int8 MiniLM encoder's fused element-wise steps (W8A8); see :mod:`.api`."""
from metacog_fast.ops.encoder.api import (
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
