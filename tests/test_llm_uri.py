"""Backend selection: URIs, resolution order, and the clear errors for bad settings."""
from __future__ import annotations

import importlib.util

import pytest

from metacog_fast.llm import Budget, open_llm
from metacog_fast.llm.grammar import choice_grammar, gbnf_literal
from metacog_fast.llm.models import default_gguf
from metacog_fast.llm.uri import DEFAULT_URI, SCHEMES, parse_uri, resolve_uri


def test_resolution_order(monkeypatch):
    monkeypatch.delenv("METACOG_LLM", raising=False)
    assert resolve_uri(None) == DEFAULT_URI == "llama-cpp://"
    monkeypatch.setenv("METACOG_LLM", "http://10.0.0.1:8000/v1")
    assert resolve_uri(None) == "http://10.0.0.1:8000/v1"
    assert resolve_uri("vllm://m") == "vllm://m"


def test_parse_uri():
    assert parse_uri("llama-cpp://").target == ""
    assert parse_uri("llama-cpp:///abs/m.gguf").target == "/abs/m.gguf"
    assert parse_uri("vllm://Qwen/Qwen2.5-7B-Instruct").target == "Qwen/Qwen2.5-7B-Instruct"
    u = parse_uri("https://api.example.com:8443/v1/")
    assert u.scheme == "https" and u.target == "https://api.example.com:8443/v1"


@pytest.mark.parametrize("uri", ["ollama://llama3", "ftp://x", "gpt-4", ""])
def test_unknown_scheme_lists_the_supported_ones(uri):
    with pytest.raises(ValueError) as err:
        open_llm(uri)
    msg = str(err.value)
    assert repr(uri) in msg
    assert all(s in msg for s in SCHEMES)


def test_unknown_scheme_from_the_environment(monkeypatch):
    monkeypatch.setenv("METACOG_LLM", "bogus://x")
    with pytest.raises(ValueError, match="bogus"):
        open_llm()


def test_environment_selects_the_backend(monkeypatch):
    monkeypatch.setenv("METACOG_LLM", f"llama-cpp://{default_gguf()}")
    llm = open_llm(n_threads=1, n_ctx=256, budget=Budget(max_calls=1))
    try:
        assert llm.model_path == default_gguf()
        assert llm.complete("Hi", max_tokens=1)[0].completion_tokens == 1
    finally:
        llm.close()
    llm.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        llm.complete("Hi", max_tokens=1)
    with pytest.raises(RuntimeError, match="closed"):
        llm.choose("Hi", [" a", " b"])


def test_missing_gguf_names_the_path(tmp_path):
    missing = tmp_path / "nope" / "model.gguf"
    with pytest.raises(FileNotFoundError, match=str(missing)):
        open_llm(f"llama-cpp://{missing}")
    with pytest.raises(FileNotFoundError, match=str(missing)):
        open_llm(model_path=str(missing))


def test_not_a_gguf_file(tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"PK\x03\x04 not a model")
    with pytest.raises(ValueError, match="not a GGUF file"):
        open_llm(f"llama-cpp://{bad}")


def test_bad_backend_options():
    with pytest.raises(TypeError, match="unknown option"):
        open_llm("llama-cpp://", threads=2)
    with pytest.raises(ValueError, match="n_threads"):
        open_llm("llama-cpp://", n_threads=0)
    with pytest.raises(ValueError, match="n_ctx"):
        open_llm("llama-cpp://", n_ctx=-5)
    with pytest.raises(ValueError, match="max_calls"):
        Budget(max_calls=-1)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_vllm_without_vllm_says_how_to_install():
    with pytest.raises(ImportError, match=r"pip install 'metacog_fast\[gpu\]'"):
        open_llm("vllm://Qwen/Qwen2.5-0.5B-Instruct")
    with pytest.raises(ValueError, match="vllm://<model>"):
        open_llm("vllm://")


def test_gbnf_escaping():
    assert gbnf_literal('a "b"\\c\nd\x01') == '"a \\"b\\"\\\\c\\nd\\x01"'
    assert choice_grammar(["x", "y"]) == 'root ::= "x" | "y"\n'


def test_is_embedded_follows_the_scheme_and_the_environment(monkeypatch):
    """Thread counts and context sizes go to in-process llama.cpp models only, whatever their spelling."""
    from metacog_fast.llm.uri import is_embedded

    monkeypatch.delenv("METACOG_LLM", raising=False)
    assert is_embedded(None) and is_embedded("llama-cpp://") and is_embedded("llama-cpp:///m.gguf")
    assert is_embedded("finetuned:alfworld") and is_embedded("finetuned://reflector-dpo2")
    assert not is_embedded("http://127.0.0.1:8000/v1") and not is_embedded("vllm://some/model")
    monkeypatch.setenv("METACOG_LLM", "http://127.0.0.1:8000/v1")
    assert not is_embedded(None)
    with pytest.raises(ValueError, match="scheme"):
        is_embedded("bogus")
