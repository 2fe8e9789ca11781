"""A transformers Llama model folder as a GGUF base model, so that a model of your own can be
fine-tuned, exported and served like the shipped SmolLM2 (``docs/finetune.md``, "Another base model").

An export needs its base as a GGUF file: an adapter export is written against the base's tensor
shapes and head counts, and llama.cpp serves the adapter over that file (checked by the sha256 that
``model.json`` records). :func:`gguf_from_hf` writes that file from a folder of ``save_pretrained``
(``config.json``, safetensors weights, tokenizer files); a folder given as ``SFTConfig.base`` is
converted by it once (:func:`metacog_fast.finetune.base.hf_base_gguf`).

* The architecture must be a plain Llama (``LlamaForCausalLM``: SiLU MLP, no biases, default RoPE,
  ``head_dim == hidden_size / num_attention_heads``), which llama.cpp's ``llama`` arch and
  transformers' GGUF reader both understand; anything else is refused, naming the field.
* Q and K rows are permuted into llama.cpp's order (as llama.cpp's own converter does; transformers
  undoes it when it reads the file back).
* The tokenizer metadata (vocabulary, merges, pre-tokenizer, special ids, chat template) is copied
  from a GGUF that has the same tokenizer (``tokenizer_from``, the shipped SmolLM2 by default), after
  checking that the folder's tokenizer has exactly that vocabulary and those merges. A model with
  another tokenizer is refused; convert it with llama.cpp's ``convert_hf_to_gguf.py`` instead, whose
  output is a valid ``base`` as it is.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from metacog_fast._extras import require
from metacog_fast.llm.gguf_merge import cached_reader

BASE_TYPES = ("f32", "f16", "q8_0")
"""Weight types of a converted base. f32 (default) keeps the weights exactly as trained from;
f16 and q8_0 make a smaller file (1-D norms always stay f32)."""


def _refuse(folder: Path, what: str) -> ValueError:
    return ValueError(f"hf_folder: {folder}: {what}; only plain Llama models (LlamaForCausalLM) convert")


def check_llama_config(folder: Path, cfg: Any) -> None:
    """ValueError naming ``folder`` and the field when ``cfg`` (a transformers config) is not a plain
    Llama that llama.cpp's ``llama`` architecture runs as transformers does."""
    if getattr(cfg, "model_type", None) != "llama":
        raise _refuse(folder, f"model_type is {getattr(cfg, 'model_type', None)!r}, expected 'llama'")
    if getattr(cfg, "hidden_act", "silu") != "silu":
        raise _refuse(folder, f"hidden_act is {cfg.hidden_act!r}, expected 'silu'")
    for name in ("attention_bias", "mlp_bias"):
        if getattr(cfg, name, False):
            raise _refuse(folder, f"{name} is true, expected false")
    rope = getattr(cfg, "rope_parameters", None) or {}
    if rope.get("rope_type", "default") != "default":
        raise _refuse(folder, f"rope_type is {rope.get('rope_type')!r}, expected 'default' (no RoPE scaling)")
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    if head_dim * cfg.num_attention_heads != cfg.hidden_size:
        raise _refuse(folder, f"head_dim {head_dim} x {cfg.num_attention_heads} heads != hidden_size {cfg.hidden_size}")


def _merges(tokenizer: Any) -> list[str]:
    """The BPE merges of a fast tokenizer as ``"a b"`` strings (llama.cpp's form)."""
    model = json.loads(tokenizer.backend_tokenizer.to_str())["model"]
    if model.get("type") != "BPE":
        raise ValueError(f"tokenizer: a {model.get('type')} tokenizer; expected a byte-level BPE tokenizer")
    return [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]


def check_same_tokenizer(folder: Path, tokenizer: Any, reader: Any, source: str) -> None:
    """ValueError unless ``tokenizer`` (the folder's, transformers) has the vocabulary, in the same
    id order, and the merges of the GGUF read by ``reader`` (named ``source`` in the message)."""
    f = reader.fields
    if "tokenizer.ggml.tokens" not in f:
        raise ValueError(f"tokenizer_from: {source} holds no tokenizer (tokenizer.ggml.tokens missing)")
    want = list(f["tokenizer.ggml.tokens"].contents())
    got = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    if got != want:
        diff = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        raise ValueError(f"tokenizer: {folder} has another vocabulary than {source} ({len(got)} vs {len(want)} "
                         f"tokens, first difference at id {diff}); convert it with llama.cpp's convert_hf_to_gguf.py, "
                         "whose GGUF is a valid base as it is")
    want_merges = list(f["tokenizer.ggml.merges"].contents()) if "tokenizer.ggml.merges" in f else []
    if _merges(tokenizer) != want_merges:
        raise ValueError(f"tokenizer: {folder} has the vocabulary of {source} but other BPE merges; convert it "
                         "with llama.cpp's convert_hf_to_gguf.py")


def gguf_from_hf(hf_folder: str | Path, out: str | Path, weight_type: str = "f32",
                 tokenizer_from: str = "smollm2") -> dict[str, Any]:
    """Write the Llama model of ``hf_folder`` (transformers' ``save_pretrained`` layout) as a GGUF
    base model at ``out`` (atomic). ``tokenizer_from``: ``"smollm2"`` or a GGUF path whose tokenizer
    the folder's must equal. Returns ``{file, sha256, bytes, weight_type, layers, hidden, vocab}``."""
    require("gguf", "finetune", "converting a base model (metacog_fast.finetune.convert)")
    import gguf
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from metacog_fast.finetune.base import base_gguf, sha256_file
    from metacog_fast.finetune.export import gguf_name, permute_qk
    from metacog_fast.llm.gguf_merge import copy_metadata, write_gguf_atomic

    if weight_type not in BASE_TYPES:
        raise ValueError(f"weight_type: expected one of {BASE_TYPES}, got {weight_type!r}")
    folder = Path(hf_folder)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"hf_folder: {folder} is not a transformers model folder (config.json missing)")
    out = Path(out)
    if out.suffix != ".gguf":
        raise ValueError(f"out: expected a path ending in .gguf, got {str(out)!r}")
    cfg = AutoConfig.from_pretrained(str(folder))
    check_llama_config(folder, cfg)
    tok_reader = cached_reader(base_gguf(tokenizer_from))
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    check_same_tokenizer(folder, tokenizer, tok_reader, tokenizer_from)
    n_vocab = len(tok_reader.fields["tokenizer.ggml.tokens"].contents())
    if cfg.vocab_size != n_vocab:
        raise ValueError(f"hf_folder: {folder}: vocab_size {cfg.vocab_size} differs from the tokenizer's "
                         f"{n_vocab} tokens (llama.cpp needs one embedding row per token)")
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    heads = (cfg.num_attention_heads, cfg.num_key_value_heads or cfg.num_attention_heads)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    tied = bool(getattr(cfg, "tie_word_embeddings", False))
    Q = gguf.GGMLQuantizationType
    qtype = {"f32": Q.F32, "f16": Q.F16, "q8_0": Q.Q8_0}[weight_type]
    file_type = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
                 "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[weight_type]
    tensors: list[tuple[str, np.ndarray]] = []
    for hf_name, value in model.state_dict().items():
        if tied and hf_name == "lm_head.weight":
            continue  # llama.cpp ties output to token_embd when output.weight is absent
        name = gguf_name(hf_name)
        if name is None:
            if hf_name.endswith("rotary_emb.inv_freq"):
                continue
            raise _refuse(folder, f"tensor {hf_name!r} has no llama.cpp counterpart")
        w = value.detach().numpy().astype(np.float32)
        if name.endswith(".attn_q.weight"):
            w = permute_qk(w, heads[0])
        elif name.endswith(".attn_k.weight"):
            w = permute_qk(w, heads[1])
        if w.ndim == 2 and weight_type == "q8_0" and w.shape[1] % 32:
            raise ValueError(f"weight_type: q8_0 needs rows of a multiple of 32 values; {hf_name} has {w.shape[1]} "
                             "(use f16 or f32)")
        tensors.append((name, np.ascontiguousarray(w)))

    def fill(tmp: Path) -> None:
        w = gguf.GGUFWriter(str(tmp), arch="llama")
        w.add_name(folder.resolve().name)
        w.add_context_length(int(cfg.max_position_embeddings))
        w.add_embedding_length(int(cfg.hidden_size))
        w.add_block_count(int(cfg.num_hidden_layers))
        w.add_feed_forward_length(int(cfg.intermediate_size))
        w.add_head_count(heads[0])
        w.add_head_count_kv(heads[1])
        w.add_rope_freq_base(float((getattr(cfg, "rope_parameters", None) or {}).get("rope_theta", 10000.0)))
        w.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))
        w.add_vocab_size(n_vocab)
        w.add_rope_dimension_count(int(head_dim))
        w.add_file_type(file_type)
        copy_metadata(tok_reader, w, skip=tuple(k for k in tok_reader.fields if not k.startswith("tokenizer.")))
        for name, arr in tensors:
            if arr.ndim == 1 or qtype == Q.F32:
                w.add_tensor(name, arr)
            else:
                data = gguf.quants.quantize(arr, qtype)
                w.add_tensor(name, data, raw_shape=data.shape, raw_dtype=qtype)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()

    write_gguf_atomic(out, fill)
    return {"file": str(out.resolve()), "sha256": sha256_file(out), "bytes": out.stat().st_size,
            "weight_type": weight_type, "layers": int(cfg.num_hidden_layers), "hidden": int(cfg.hidden_size),
            "vocab": n_vocab}
