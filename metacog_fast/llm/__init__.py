"""The LLM layer: one protocol over embedded llama.cpp, vLLM and OpenAI-compatible servers.

>>> from metacog_fast.llm import open_llm
>>> llm = open_llm()                       # SmolLM2-135M-Instruct, embedded
>>> llm.complete("The capital of France is", max_tokens=8)[0].text
>>> llm.choose("Go to the", [" kitchen", " garden"]).index

See docs/llm.md.
"""
from __future__ import annotations

from metacog_fast.llm.budget import Budget, BudgetExhausted, Usage
from metacog_fast.llm.factory import open_llm
from metacog_fast.llm.http_client import LLMConnectionError, LLMHTTPError, LLMTimeoutError
from metacog_fast.llm.protocol import LLM
from metacog_fast.llm.types import CallRecord, Choice, Completion, Message
from metacog_fast.llm.uri import DEFAULT_URI, ENV_VAR, SCHEMES

__all__ = [
    "open_llm",
    "LLM",
    "Completion",
    "Choice",
    "CallRecord",
    "Message",
    "Budget",
    "BudgetExhausted",
    "Usage",
    "LLMConnectionError",
    "LLMTimeoutError",
    "LLMHTTPError",
    "DEFAULT_URI",
    "ENV_VAR",
    "SCHEMES",
]
