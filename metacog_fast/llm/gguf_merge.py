"""Writing GGUF model files: a base model with LoRA deltas merged in, atomically.

Used by ``metacog finetune export`` (merged exports) and by :func:`merged_from_adapter`, which turns
a GGUF LoRA adapter that ships in the package into a merged Q8_0 model on first use: llama.cpp
decodes a merged Q8_0 file as fast as the Q4_1 base, but applies an adapter at every token
(``bench/bench_finetune.py``: merged 1.02x the base, adapter 0.84x), while the adapter is the form
small enough to ship. Needs the ``gguf`` package (numpy only).
"""
from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

MERGED_TYPES = ("q8_0", "f16", "q4_1", "f32")


def write_gguf_atomic(path: Path, fill: Callable[[Path], None]) -> None:
    """Write a GGUF through ``fill(tmp_path)`` into a temp file beside ``path``, fsync it, then
    rename it into place (a reader never sees half a file; concurrent writers each use their own
    temp file and the last rename wins with identical content)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would hide a shared cache from other users
    try:
        fill(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def copy_metadata(reader: Any, writer: Any, skip: tuple[str, ...]) -> None:
    """Every key/value of ``reader`` (a ``gguf.GGUFReader``) into ``writer`` except ``skip``."""
    from gguf import GGUFValueType

    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in skip:
            continue
        types = field.types
        if types[0] == GGUFValueType.ARRAY:
            writer.add_key_value(key, field.contents(), GGUFValueType.ARRAY, sub_type=types[-1])
        else:
            writer.add_key_value(key, field.contents(), types[0])


def write_merged(path: Path, base_reader: Any, updates: dict[str, np.ndarray], replace: dict[str, np.ndarray],
                 merged_type: str) -> None:
    """The base GGUF with ``updates`` added to (LoRA deltas ``[out, in]``, llama.cpp row order) or
    ``replace`` put in place of (full fine-tune) its matrices, every changed matrix quantised to
    ``merged_type``; unchanged tensors are copied byte for byte."""
    import gguf
    from gguf import GGMLQuantizationType as Q

    if merged_type not in MERGED_TYPES:
        raise ValueError(f"merged_type: expected one of {MERGED_TYPES}, got {merged_type!r}")
    qtype = {"q8_0": Q.Q8_0, "f16": Q.F16, "q4_1": Q.Q4_1, "f32": Q.F32}[merged_type]
    file_type = {"q8_0": gguf.LlamaFileType.MOSTLY_Q8_0, "f16": gguf.LlamaFileType.MOSTLY_F16,
                 "q4_1": gguf.LlamaFileType.MOSTLY_Q4_1, "f32": gguf.LlamaFileType.ALL_F32}[merged_type]
    known = {t.name for t in base_reader.tensors}
    unknown = sorted((set(updates) | set(replace)) - known)
    if unknown:
        raise ValueError(f"merged export: tensors {unknown[:5]} are not in the base model")

    def fill(tmp: Path) -> None:
        w = gguf.GGUFWriter(str(tmp), arch="llama")
        copy_metadata(base_reader, w, skip=("general.architecture", "general.file_type"))
        w.add_file_type(file_type)
        for t in base_reader.tensors:
            if t.name not in updates and t.name not in replace:
                w.add_tensor(t.name, t.data, raw_shape=t.data.shape, raw_dtype=t.tensor_type)
                continue
            if t.name in replace:
                dense = replace[t.name]
            else:
                dense = gguf.quants.dequantize(t.data, t.tensor_type) + updates[t.name]
            dense = np.ascontiguousarray(dense, np.float32)
            if dense.ndim == 1:  # norms stay float32
                w.add_tensor(t.name, dense)
            else:
                data = gguf.quants.quantize(dense, qtype)
                w.add_tensor(t.name, data, raw_shape=data.shape, raw_dtype=qtype)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()

    write_gguf_atomic(path, fill)


def adapter_deltas(adapter_path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """{base tensor name: ``alpha / r * B @ A`` ``[out, in]``} of a GGUF LoRA adapter (its ``B`` is
    already in llama.cpp's row order); errors name the file and what is wrong."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    try:
        reader = GGUFReader(str(adapter_path))
    except Exception as exc:  # gguf raises bare ValueErrors/struct errors on damaged files
        raise ValueError(f"{adapter_path}: not a readable GGUF LoRA adapter ({type(exc).__name__}: {exc})") from exc
    f = reader.fields
    kind = f.get("adapter.type")
    if kind is None or kind.contents() != "lora" or "adapter.lora.alpha" not in f:
        raise ValueError(f"{adapter_path}: not a GGUF LoRA adapter (adapter.type / adapter.lora.alpha missing)")
    alpha = float(f["adapter.lora.alpha"].contents())
    parts: dict[str, dict[str, np.ndarray]] = {}
    for t in reader.tensors:
        base, _, which = t.name.rpartition(".")
        if which not in ("lora_a", "lora_b"):
            raise ValueError(f"{adapter_path}: unexpected tensor {t.name!r} in a LoRA adapter")
        # GGUF shapes are ggml's (ne0 first); the numpy data is row-major [rows, cols].
        parts.setdefault(base, {})[which] = np.asarray(dequantize(t.data, t.tensor_type), np.float32)
    out: dict[str, np.ndarray] = {}
    for base, ab in sorted(parts.items()):
        if set(ab) != {"lora_a", "lora_b"}:
            raise ValueError(f"{adapter_path}: {base} has only {sorted(ab)}")
        a, b = ab["lora_a"], ab["lora_b"]  # A [r, in], B [out, r]
        if a.shape[0] != b.shape[1]:
            raise ValueError(f"{adapter_path}: {base}: ranks of A {a.shape} and B {b.shape} differ")
        out[base] = (alpha / a.shape[0]) * (b @ a)
    return out


@functools.lru_cache(maxsize=4)
def _reader(path: str, size: int, mtime_ns: int) -> Any:
    from gguf import GGUFReader

    return GGUFReader(path)


def cached_reader(path: str | os.PathLike[str]) -> Any:
    """A read-only ``gguf.GGUFReader`` of ``path``, kept per (path, size, mtime) so that a file written
    anew is read anew: parsing the 49 k tokens and merges of a SmolLM2-tokenizer GGUF's metadata takes
    seconds, and one process may merge, convert, export against or read the same base several times.
    Callers must not modify it."""
    path = str(Path(path).resolve())
    st = os.stat(path)
    return _reader(path, st.st_size, st.st_mtime_ns)


def merged_from_adapter(base_path: str | os.PathLike[str], adapter_path: str | os.PathLike[str],
                        out_path: str | os.PathLike[str], merged_type: str = "q8_0") -> Path:
    """Write ``base + adapter`` as one ``merged_type`` GGUF at ``out_path`` (atomic); returns it."""
    deltas = adapter_deltas(adapter_path)
    out = Path(out_path)
    write_merged(out, cached_reader(base_path), deltas, {}, merged_type)
    return out
