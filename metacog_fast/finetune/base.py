"""The base model of fine-tuning: the shipped SmolLM2 (a GGUF), a GGUF file, or a transformers
Llama folder of your own.

A GGUF base is read by transformers (it dequantises to float32). A transformers folder is trained
from as it is, and its GGUF twin (:func:`hf_base_gguf`, written once into the folder and rewritten
when the folder's files change) is what an export is written against and what llama.cpp serves an
adapter over (``docs/finetune.md``, "Another base model").
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from metacog_fast._extras import require
from metacog_fast._integrity import sha256_file

BASE_MODELS = ("smollm2",)
"""Named bases; anything else must be a path to a GGUF file or to a transformers model folder."""

HF_BASE_GGUF = "metacog-base-f32.gguf"
"""The GGUF twin of a transformers base folder, written into that folder by :func:`hf_base_gguf`."""
HF_BASE_RECORD = "metacog-base.json"
"""Beside it: the sha256 of the folder's files it was converted from and of the GGUF itself."""
_HF_SOURCES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def is_hf_folder(base: str) -> bool:
    """Whether ``base`` names a transformers model folder (a directory holding ``config.json``)."""
    return base not in BASE_MODELS and (Path(base).expanduser() / "config.json").is_file()


def base_gguf(base: str) -> str:
    """Absolute path of the base model's GGUF: a name of :data:`BASE_MODELS`, a ``.gguf`` path, or
    the GGUF twin of a transformers folder (:func:`hf_base_gguf`)."""
    from metacog_fast.llm.models import check_gguf, default_gguf

    if base == "smollm2":
        return default_gguf()
    if is_hf_folder(base):
        return str(hf_base_gguf(base))
    if Path(base).expanduser().is_dir():
        raise ValueError(f"base: {base} is a folder without config.json; expected a transformers model folder "
                         f"(save_pretrained), a .gguf file, or one of {BASE_MODELS}")
    if base.endswith(".gguf") or os.path.sep in base:
        return check_gguf(base)
    raise ValueError(f"base: unknown model name {base!r}; expected one of {BASE_MODELS}, a path to a .gguf file "
                     "or a transformers model folder")


def _folder_sources(folder: Path) -> dict[str, str]:
    """{file name: sha256} of the files of a transformers folder that a conversion reads."""
    names = [n for n in _HF_SOURCES if (folder / n).is_file()]
    names += sorted(p.name for p in folder.glob("*.safetensors"))
    if not any(n.endswith(".safetensors") for n in names):
        raise FileNotFoundError(f"base: {folder} holds no *.safetensors weights (save_pretrained writes them)")
    return {n: sha256_file(folder / n) for n in names}


def hf_base_gguf(folder: str | Path) -> Path:
    """The GGUF twin of the transformers Llama folder ``folder`` (float32, tokenizer metadata of the
    shipped SmolLM2, whose tokenizer the folder must have): ``folder/metacog-base-f32.gguf``, converted
    by :func:`metacog_fast.finetune.convert.gguf_from_hf` when missing, when the folder's weights,
    config or tokenizer changed since, or when the file no longer matches its recorded sha256."""
    from metacog_fast.runs.records import write_json_atomic

    root = Path(folder).expanduser().resolve()
    out, record = root / HF_BASE_GGUF, root / HF_BASE_RECORD
    sources = _folder_sources(root)
    if out.is_file() and record.is_file():
        try:
            rec = json.loads(record.read_text())
        except ValueError:
            rec = {}
        if rec.get("sources") == sources and rec.get("sha256") == sha256_file(out):
            return out
    from metacog_fast.finetune.convert import gguf_from_hf

    try:
        info = gguf_from_hf(root, out)
    except PermissionError as exc:
        raise PermissionError(f"base: cannot write the GGUF twin of {root} into it ({exc}); convert it elsewhere with "
                              "metacog_fast.finetune.convert.gguf_from_hf and pass that .gguf as the base") from exc
    write_json_atomic(record, {"sources": sources, "sha256": info["sha256"], "file": HF_BASE_GGUF})
    return out


def load_tokenizer(base: str) -> Any:
    """The base's tokenizer (transformers), with a pad token (the EOS when it has none)."""
    from transformers import AutoTokenizer

    if is_hf_folder(base):
        tok = AutoTokenizer.from_pretrained(str(Path(base).expanduser()))
    else:
        require("gguf", "finetune", "fine-tuning (metacog finetune)")  # transformers reads GGUF through it
        path = Path(base_gguf(base))
        tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(base: str, dtype: Any = None) -> Any:
    """The base model as a transformers causal LM (float32 unless ``dtype``)."""
    import torch
    from transformers import AutoModelForCausalLM

    if is_hf_folder(base):
        from transformers import AutoConfig

        from metacog_fast.finetune.convert import check_llama_config

        folder = Path(base).expanduser()
        check_llama_config(folder, AutoConfig.from_pretrained(str(folder)))
        return AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype or torch.float32)
    require("gguf", "finetune", "fine-tuning (metacog finetune)")  # transformers reads GGUF through it
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

