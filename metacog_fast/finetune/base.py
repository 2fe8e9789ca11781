"""The base model of fine-tuning: a GGUF file read by transformers (it dequantises to float32)."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from metacog_fast._extras import require

BASE_MODELS = ("smollm2",)
"""Named bases; anything else must be a path to a GGUF file."""


def base_gguf(base: str) -> str:
    """Absolute path of the base model's GGUF: a name of :data:`BASE_MODELS` or a ``.gguf`` path."""
    from metacog_fast.llm.models import check_gguf, default_gguf

    if base == "smollm2":
        return default_gguf()
    if base.endswith(".gguf") or os.path.sep in base:
        return check_gguf(base)
    raise ValueError(f"base: unknown model name {base!r}; expected one of {BASE_MODELS} or a path to a .gguf file")


def load_tokenizer(base: str) -> Any:
    require("gguf", "finetune", "fine-tuning (metacog finetune)")  # transformers reads GGUF through it
    from transformers import AutoTokenizer

    path = Path(base_gguf(base))
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(base: str, dtype: Any = None) -> Any:
    """The base model as a transformers causal LM (float32 unless ``dtype``)."""
    import torch

    require("gguf", "finetune", "fine-tuning (metacog finetune)")  # transformers reads GGUF through it
    from transformers import AutoModelForCausalLM

    path = Path(base_gguf(base))
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                 dtype=dtype or torch.float32)
    # transformers dequantises every GGUF tensor to dense float weights but still marks the model as
    # "quantized with GGUF", which its Trainer refuses to train; the weights are plain tensors.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    return model


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes (read in 1 MiB blocks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


PRECISIONS = ("auto", "bf16", "fp32")
"""Training precisions: ``"bf16"`` autocast, ``"fp32"``, or ``"auto"`` (:func:`resolve_precision`)."""


def resolve_precision(precision: str, on_cuda: bool) -> str:
    """``"bf16"`` or ``"fp32"`` for a run asking ``precision``. ``"auto"`` is bf16 on a CUDA GPU or on a
    CPU with native bf16 dot products (AVX512-BF16 / AMX-BF16), else fp32: on an AVX2-only CPU, bf16
    autocast ran a tiny LoRA step in 230 s (~4 tokens/s), about 6x slower than fp32 (2026-12-07)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision: expected one of {PRECISIONS}, got {precision!r}")
    if precision != "auto":
        return precision
    from metacog_fast.scoring.encoder import cpu_has_bf16

    return "bf16" if on_cuda or cpu_has_bf16() else "fp32"

