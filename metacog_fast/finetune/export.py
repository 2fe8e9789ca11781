"""Export a fine-tuned actor to GGUF for the embedded llama.cpp backend.

Two formats (``ExportConfig.format``; decode speeds measured in ``bench/bench_finetune.py``):

* ``"adapter"`` (LoRA runs): a GGUF LoRA adapter that llama.cpp applies on top of the unchanged
  base file at load time. The base weights stay exactly the ones the adapter was trained on (the
  shipped Q4_1, dequantised by transformers), and the file is small enough to ship (r 16: ~10 MB).
* ``"merged"``: one full model file, the weights merged (``W + alpha/r * B A`` for LoRA, or the
  trained weights of a full fine-tune) and quantised to ``merged_type``. Re-quantising to the
  base's Q4_1 would round most of a LoRA update away, hence Q8_0 by default.

The output folder holds ``model.json`` (format, files, base, sha256, training summary, prompt
settings) beside the GGUF file; ``metacog_fast.llm`` opens it by path (``llama-cpp:///folder``) or,
once installed under a name, as ``finetuned:<name>``.

llama.cpp stores the Q and K projections of Llama models with their rotary halves interleaved
(the permutation of llama.cpp's HF converter); transformers undoes it when it reads a GGUF, so
the trained Q/K matrices (or their LoRA ``B``) are permuted back here.
"""
from __future__ import annotations

import datetime as _dt
import json
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from metacog_fast.runs.records import read_json, write_json_atomic
from metacog_fast.finetune.base import sha256_file
from metacog_fast.llm.gguf_merge import MERGED_TYPES, cached_reader, write_gguf_atomic, write_merged

FORMATS = ("adapter", "merged")

_LAYER = re.compile(r"model\.layers\.(\d+)\.(self_attn|mlp)\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)")
_GGUF_LINEAR = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
                "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}
_GGUF_OTHER = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
               "lm_head.weight": "output.weight"}
_GGUF_NORMS = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}


@dataclass
class ExportConfig:
    """How a trained checkpoint becomes a GGUF model."""

    format: str = "merged"
    """"merged" (one model file; Q8_0 decodes as fast as the Q4_1 base) or "adapter" (a ~10 MB GGUF
    LoRA adapter over the unchanged base, small enough to ship, ~16 % slower to decode)."""
    merged_type: str = "q8_0"
    """Weight type of a merged export: q8_0, f16, q4_1 or f32."""
    which: str = "final"
    """"final" (the run's final/ folder) or "latest" (its newest checkpoint, e.g. of a run still going)."""
    name: str | None = None
    """Also install the export under this name, so that ``finetuned:<name>`` opens it."""

    def validate(self) -> "ExportConfig":
        if self.format not in FORMATS:
            raise ValueError(f"format: expected one of {FORMATS}, got {self.format!r}")
        if self.merged_type not in MERGED_TYPES:
            raise ValueError(f"merged_type: expected one of {MERGED_TYPES}, got {self.merged_type!r}")
        if self.which not in ("final", "latest"):
            raise ValueError(f"which: expected 'final' or 'latest', got {self.which!r}")
        if self.name is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", self.name):
            raise ValueError(f"name: expected letters, digits, '_', '.', '-' (got {self.name!r})")
        return self


def permute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """``[out, ...]`` rows of a Q (``n_head`` = heads) or K (``n_head`` = KV heads) projection from
    transformers' order to llama.cpp's (pairs of rotary halves interleaved per head)."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def gguf_name(hf_name: str) -> str | None:
    """llama.cpp's tensor name for a transformers Llama parameter name (None: not a model tensor)."""
    if hf_name in _GGUF_OTHER:
        return _GGUF_OTHER[hf_name]
    m = _LAYER.match(hf_name)
    if m:
        return f"blk.{m[1]}.{_GGUF_LINEAR[m[3]]}.weight"
    m = re.match(r"model\.layers\.(\d+)\.(input_layernorm|post_attention_layernorm)\.weight$", hf_name)
    if m:
        return f"blk.{m[1]}.{_GGUF_NORMS[m[2]]}.weight"
    return None


def _resolve_weights(run_dir: Path, which: str) -> Path:
    if which == "final":
        final = run_dir / "final"
        if not final.is_dir():
            raise FileNotFoundError(f"checkpoint: {final} not found (the run has not finished); "
                                    "export --which latest for its newest checkpoint")
        return final
    from transformers.trainer_utils import get_last_checkpoint

    ck = get_last_checkpoint(str(run_dir / "checkpoints")) if (run_dir / "checkpoints").is_dir() else None
    if ck is None:
        raise FileNotFoundError(f"checkpoint: no checkpoint under {run_dir / 'checkpoints'}")
    return Path(ck)


def _load_safetensors(path: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    try:
        return {k: v.astype(np.float32) for k, v in load_file(str(path)).items()}
    except Exception as exc:
        raise ValueError(f"checkpoint: {path} is not a readable safetensors file ({type(exc).__name__}: {exc})") from exc


def _lora_pairs(weights: Path) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], float, int]:
    """{gguf tensor name: (A [r, in], B [out, r])}, alpha, r of a peft adapter folder."""
    cfg_path = weights / "adapter_config.json"
    if not cfg_path.is_file():
        raise ValueError(f"checkpoint: {weights} holds no LoRA adapter (adapter_config.json missing)")
    cfg = json.loads(cfg_path.read_text())
    tensors = _load_safetensors(weights / "adapter_model.safetensors")
    pairs: dict[str, list[Any]] = {}
    for k, v in tensors.items():
        m = re.search(r"(model\.layers\.\d+\.(?:self_attn|mlp)\.\w+_proj)\.lora_([AB])\.weight$", k)
        if not m:
            raise ValueError(f"checkpoint: unexpected adapter tensor {k!r} in {weights}")
        name = gguf_name(m[1])
        pairs.setdefault(name, [None, None])["AB".index(m[2])] = v
    out = {}
    for name, (a, b) in pairs.items():
        if a is None or b is None:
            raise ValueError(f"checkpoint: {name} has only one of lora_A / lora_B in {weights}")
        out[name] = (a, b)
    return out, float(cfg["lora_alpha"]), int(cfg["r"])


def _heads(reader: Any) -> tuple[int, int]:
    f = reader.fields
    return int(f["llama.attention.head_count"].contents()), int(f["llama.attention.head_count_kv"].contents())


def _permute_for(name: str, w: np.ndarray, heads: tuple[int, int], inverse: bool = False) -> np.ndarray:
    """Q/K rows of llama.cpp tensor ``name`` into llama.cpp's order (``inverse``: back to transformers')."""
    f = unpermute_qk if inverse else permute_qk
    if name.endswith(".attn_q.weight"):
        return f(w, heads[0])
    if name.endswith(".attn_k.weight"):
        return f(w, heads[1])
    return w


def unpermute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """The inverse of :func:`permute_qk`: rows in llama.cpp's order back to transformers'."""
    return (w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


_HF_LINEAR = {g: hf for hf, g in _GGUF_LINEAR.items()}


def _hf_module(gguf_tensor: str) -> str:
    """transformers' module name of a llama.cpp linear weight name (``blk.3.attn_q.weight``)."""
    m = re.fullmatch(r"blk\.(\d+)\.(\w+)\.weight", gguf_tensor)
    if not m or m[2] not in _HF_LINEAR:
        raise ValueError(f"init_adapter: tensor {gguf_tensor!r} is not a Llama linear layer")
    proj = _HF_LINEAR[m[2]]
    return f"model.layers.{m[1]}.{'self_attn' if proj in ('q_proj', 'k_proj', 'v_proj', 'o_proj') else 'mlp'}.{proj}"


def adapter_file(source: str) -> tuple[Path, str]:
    """The GGUF LoRA adapter file and its base (``smollm2`` or a GGUF path) of ``source``:
    ``finetuned:NAME``, a model folder written by ``export --format adapter``, or the ``.gguf`` itself."""
    from metacog_fast.llm.models import list_named_models

    if source.startswith("finetuned:"):
        found = list_named_models()
        name = source.split(":", 1)[1]
        if name not in found:
            raise ValueError(f"init_adapter: unknown model name {source!r}; known: {', '.join(sorted(found)) or 'none'}")
        path = found[name]
    else:
        path = Path(source)
    base = "smollm2"
    if path.is_dir():
        meta = path / "model.json"
        if not meta.is_file():
            raise FileNotFoundError(f"init_adapter: {path} is not a fine-tuned model folder (model.json missing)")
        info = json.loads(meta.read_text())
        if info.get("format") != "adapter":
            raise ValueError(f"init_adapter: {path} holds a {info.get('format')!r} model; a LoRA adapter "
                             "(export --format adapter) is needed to continue its training")
        base, path = info.get("base") or "smollm2", path / info["file"]
    if not path.is_file():
        raise FileNotFoundError(f"init_adapter: {path} not found")
    return path, base


def read_adapter(source: str) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], float, int]:
    """{transformers module name: (A [r, in], B [out, r]) float32}, alpha, r of a GGUF LoRA adapter
    (see :func:`adapter_file`), Q/K rows back in transformers' order: the inverse of :func:`write_adapter`."""
    import gguf

    from metacog_fast.llm.models import default_gguf

    from metacog_fast.llm.models import verify_model_file

    path, base = adapter_file(source)
    try:  # the model.json beside the adapter (size, sha256) before its tensors are read
        verify_model_file(path)
    except ValueError as exc:
        raise ValueError(f"init_adapter: {exc}") from None
    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as exc:
        raise ValueError(f"init_adapter: {path} is not a readable GGUF file ({type(exc).__name__}: {exc})") from exc
    field = reader.fields.get(gguf.Keys.Adapter.LORA_ALPHA)
    if field is None:
        raise ValueError(f"init_adapter: {path} is not a LoRA adapter (no {gguf.Keys.Adapter.LORA_ALPHA})")
    alpha = float(field.contents())
    heads = _heads(cached_reader(default_gguf() if base == "smollm2" else base))
    halves: dict[str, list[Any]] = {}
    for t in reader.tensors:
        m = re.fullmatch(r"(.+\.weight)\.lora_([ab])", t.name)
        if not m:
            raise ValueError(f"init_adapter: unexpected tensor {t.name!r} in {path}")
        halves.setdefault(m[1], [None, None])["ab".index(m[2])] = np.array(t.data, dtype=np.float32)
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    ranks = set()
    for name, (a, b) in halves.items():
        if a is None or b is None:
            raise ValueError(f"init_adapter: {name} has only one of lora_a / lora_b in {path}")
        out[_hf_module(name)] = (a, _permute_for(name, b, heads, inverse=True))
        ranks.add(a.shape[0])
    if len(ranks) != 1:
        raise ValueError(f"init_adapter: {path} mixes LoRA ranks {sorted(ranks)}")
    return out, alpha, ranks.pop()


def write_adapter(path: Path, pairs: dict[str, tuple[np.ndarray, np.ndarray]], alpha: float,
                  base_reader: Any) -> None:
    """A GGUF LoRA adapter (``<tensor>.lora_a`` [r, in], ``<tensor>.lora_b`` [out, r], float16)."""
    import gguf

    heads = _heads(base_reader)
    base_shapes = {t.name: tuple(int(x) for x in t.shape) for t in base_reader.tensors}

    def fill(tmp: Path) -> None:
        w = gguf.GGUFWriter(str(tmp), arch="llama")
        w.add_type(gguf.GGUFType.ADAPTER)
        w.add_string(gguf.Keys.Adapter.TYPE, "lora")
        w.add_float32(gguf.Keys.Adapter.LORA_ALPHA, alpha)
        for name in sorted(pairs):
            a, b = pairs[name]
            if name not in base_shapes:
                raise ValueError(f"adapter tensor {name} has no counterpart in the base model")
            if base_shapes[name] != (a.shape[1], b.shape[0]):
                raise ValueError(f"adapter tensor {name}: shapes A {a.shape}, B {b.shape} do not fit the base "
                                 f"weight (ne {base_shapes[name]})")
            w.add_tensor(f"{name}.lora_a", np.ascontiguousarray(a, np.float16))
            w.add_tensor(f"{name}.lora_b", np.ascontiguousarray(_permute_for(name, b, heads), np.float16))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()

    write_gguf_atomic(path, fill)


def export_gguf(run_dir: str | Path, out_dir: str | Path, cfg: ExportConfig) -> dict[str, Any]:
    """Export the training run in ``run_dir`` to ``out_dir`` (model.json + GGUF); returns model.json."""
    from metacog_fast.finetune.base import base_gguf, is_hf_folder

    cfg.validate()
    run = Path(run_dir)
    if not (run / "config.json").is_file():
        raise FileNotFoundError(f"checkpoint: {run} is not a training folder (config.json missing)")
    conf = read_json(run / "config.json")
    sft = conf["sft"]
    weights = _resolve_weights(run, cfg.which)
    base_path = base_gguf(sft["base"])
    reader = cached_reader(base_path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if cfg.format == "adapter":
        if sft["method"] != "lora":
            raise ValueError("format: 'adapter' needs a LoRA run; a full fine-tune exports with --format merged")
        pairs, alpha, r = _lora_pairs(weights)
        file = out / "adapter.gguf"
        write_adapter(file, pairs, alpha, reader)
    else:
        heads = _heads(reader)
        updates: dict[str, np.ndarray] = {}
        replace: dict[str, np.ndarray] = {}
        if sft["method"] == "lora":
            pairs, alpha, r = _lora_pairs(weights)
            for name, (a, b) in pairs.items():
                updates[name] = _permute_for(name, (alpha / r) * (b @ a), heads)
        else:
            st = weights / "model.safetensors"
            for k, v in _load_safetensors(st).items():
                name = gguf_name(k)
                if name is None:
                    raise ValueError(f"checkpoint: unexpected tensor {k!r} in {st}")
                if name == "output.weight" and "output.weight" not in {t.name for t in reader.tensors}:
                    continue  # tied to token_embd
                replace[name] = _permute_for(name, v, heads)
        file = out / f"model-{cfg.merged_type}.gguf"
        write_merged(file, reader, updates, replace, cfg.merged_type)
    facts_path = run / "facts.json"
    model = {
        "format": cfg.format, "file": file.name, "sha256": sha256_file(file), "bytes": file.stat().st_size,
        # a transformers-folder base is served through its GGUF twin, which llama.cpp reads
        "base": (base_path if is_hf_folder(sft["base"]) else sft["base"]) if cfg.format == "adapter" else None,
        "base_sha256": sha256_file(Path(base_path)) if cfg.format == "adapter" else None,
        "merged_type": cfg.merged_type if cfg.format == "merged" else None,
        "prompt": {"examples": sft["examples"]},
        "training": {"run": str(run.resolve()), "weights": str(weights.resolve()), "sft": sft,
                     "dataset_sha256": conf.get("dataset_sha256"),
                     "facts": read_json(facts_path) if facts_path.is_file() and cfg.which == "final" else None},
        "export": asdict(cfg),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    if "scienceworld_gold" in sft.get("sources", ()):
        # the ScienceWorld Swift's prompt (agents.scienceworld.swift.swift_prompt), not the ALFWorld actor's
        model["prompt"]["swift"] = "scienceworld"
    if model["training"]["facts"]:
        model["training"]["facts"].pop("config", None)
    write_json_atomic(out / "model.json", model)
    if cfg.name:
        from metacog_fast.llm.models import user_models_dir

        dest = user_models_dir() / cfg.name
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(out, dest)
        model["installed"] = str(dest)
    return model
