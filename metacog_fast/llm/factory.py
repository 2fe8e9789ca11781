"""``open_llm``: turn a backend URI plus options into a backend."""
from __future__ import annotations

import dataclasses
from typing import Any

from metacog_fast.llm.protocol import LLM
from metacog_fast.llm.uri import parse_uri, resolve_uri


def _build(cls: type, options: dict[str, Any], uri: str, **fixed: Any) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(options) - names)
    if unknown:
        raise TypeError(f"open_llm({uri!r}): unknown option(s) {unknown}; {cls.__name__} accepts {sorted(names - set(fixed))}")
    return cls(**fixed, **options)


def open_llm(uri: str | None = None, **options: Any) -> LLM:
    """Open an LLM backend.

    ``uri``: ``llama-cpp://`` (embedded SmolLM2-135M-Instruct, the default),
    ``llama-cpp:///abs/path/model.gguf``, ``llama-cpp:///abs/path/finetuned-folder``,
    ``finetuned:<name>`` (a model of ``metacog finetune export``), ``vllm://<model>`` or
    ``http(s)://host:port/v1``; ``None`` reads ``$METACOG_LLM``, then the default.
    ``options`` are the fields of the backend's config dataclass
    (:class:`LlamaCppConfig`, :class:`VLLMConfig`, :class:`HttpConfig`), e.g.
    ``n_ctx``, ``n_threads``, ``seed``, ``budget``, ``timeout``.
    """
    raw = resolve_uri(uri)
    u = parse_uri(raw)
    if u.scheme in ("llama-cpp", "finetuned"):
        import os

        from metacog_fast.llm.llama_cpp_backend import LlamaCppConfig, LlamaCppLLM
        from metacog_fast.llm.models import resolve_model_folder, resolve_named_model

        path = u.target or None
        if "model_path" in options and path is not None:
            raise TypeError(f"open_llm({raw!r}): give the GGUF path either in the URI or as model_path, not both")
        fixed: dict[str, Any] = {} if "model_path" in options else {"model_path": path}
        files = None
        if u.scheme == "finetuned":
            files = resolve_named_model(u.target)
        elif path is not None and os.path.isdir(path):
            files = resolve_model_folder(path)
        if files is not None:
            if "lora_path" in options:
                raise TypeError(f"open_llm({raw!r}): the model folder names its adapter; do not pass lora_path")
            fixed = {"model_path": files.model_path, "lora_path": files.lora_path}
        return LlamaCppLLM(_build(LlamaCppConfig, options, raw, **fixed))
    if u.scheme == "vllm":
        from metacog_fast.llm.vllm_backend import VLLMConfig, VLLMLLM

        return VLLMLLM(_build(VLLMConfig, options, raw, model=u.target))
    from metacog_fast.llm.http_backend import HttpConfig, HttpLLM

    return HttpLLM(_build(HttpConfig, options, raw, base_url=u.target))
