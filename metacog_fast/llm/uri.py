"""Backend URIs: which backend a setting names, and the resolution order."""
from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit

ENV_VAR = "METACOG_LLM"
DEFAULT_URI = "llama-cpp://"
SCHEMES = ("llama-cpp", "vllm", "http", "https", "finetuned")


@dataclass(frozen=True)
class BackendURI:
    """A parsed backend setting."""

    scheme: str
    """One of :data:`SCHEMES`."""
    target: str
    """GGUF path (``""`` = default model), vLLM model name, or the HTTP base URL."""
    raw: str
    """The setting as given."""


def resolve_uri(uri: str | None) -> str:
    """Explicit argument, else ``$METACOG_LLM``, else ``llama-cpp://``."""
    if uri is not None:
        return uri
    env = os.environ.get(ENV_VAR, "").strip()
    return env or DEFAULT_URI


EMBEDDED_SCHEMES = ("llama-cpp", "finetuned")
"""Schemes served by the in-process llama.cpp backend (they take ``n_threads``, ``n_ctx``, ...)."""


def is_embedded(uri: str | None) -> bool:
    """Whether ``uri`` (None: ``$METACOG_LLM``, else the default) is served in-process by llama.cpp,
    so that thread counts and context sizes apply to it; False for vLLM and HTTP servers."""
    return parse_uri(resolve_uri(uri)).scheme in EMBEDDED_SCHEMES


def parse_uri(uri: str) -> BackendURI:
    """Split a backend URI; ValueError naming it for an unknown scheme or a malformed one.

    ``llama-cpp://`` (default model), ``llama-cpp:///abs/path/model.gguf``,
    ``vllm://<model name or path>``, ``http(s)://host:port/v1``, ``finetuned:<name>`` (or
    ``finetuned://<name>``: a model exported by ``metacog finetune export --name``).
    """
    if isinstance(uri, str) and uri.lower().startswith("finetuned:"):
        name = uri.split(":", 1)[1].lstrip("/")
        if not name:
            raise ValueError(f"LLM backend URI {uri!r}: expected finetuned:<name>")
        return BackendURI("finetuned", name, uri)
    if not isinstance(uri, str) or "://" not in uri:
        raise ValueError(f"LLM backend URI {uri!r}: expected '<scheme>://...' with scheme one of {', '.join(SCHEMES)}")
    scheme, rest = uri.split("://", 1)
    scheme = scheme.lower()
    if scheme not in SCHEMES:
        raise ValueError(f"LLM backend URI {uri!r}: unknown scheme {scheme!r}; supported schemes: {', '.join(SCHEMES)}")
    if scheme == "llama-cpp":
        return BackendURI(scheme, rest, uri)
    if scheme == "vllm":
        if not rest:
            raise ValueError(f"LLM backend URI {uri!r}: expected vllm://<model>, e.g. vllm://Qwen/Qwen2.5-7B-Instruct")
        return BackendURI(scheme, rest, uri)
    parts = urlsplit(uri)
    if not parts.hostname:
        raise ValueError(f"LLM backend URI {uri!r}: expected {scheme}://host:port/v1")
    try:
        parts.port  # noqa: B018 - validates the port
    except ValueError as exc:
        raise ValueError(f"LLM backend URI {uri!r}: bad port ({exc})") from exc
    return BackendURI(scheme, uri.rstrip("/"), uri)
