"""OpenAI-compatible HTTP backend (``http(s)://host:port/v1``): vLLM, llama.cpp servers, ollama."""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from metacog_fast.llm.budget import Budget
from metacog_fast.llm.grammar import choice_grammar
from metacog_fast.llm.http_client import JsonHttpClient, LLMHTTPError, RetryPolicy, resolve_timeouts
from metacog_fast.llm.params import SamplingParams
from metacog_fast.llm.protocol import LLM, ScoreResult, choices_from_texts
from metacog_fast.llm.types import Completion, Message

API_KEY_VARS = ("METACOG_LLM_API_KEY", "OPENAI_API_KEY")
CONSTRAINT_MODES = ("auto", "grammar", "guided_choice", "choose")
# GET /models "owned_by" of servers whose constrained-decoding field we know.
# Servers known not to return correct prompt logprobs for echo=True.
_NO_PROMPT_LOGPROBS = {
    "me": "llama-cpp-python's server misaligns echo logprobs (token i scored with the logits after token i, "
    "abetlen/llama-cpp-python#1983); use the embedded llama-cpp:// backend or a vLLM server",
    "llamacpp": "llama.cpp's server returns no prompt logprobs for echo=True (ggml-org/llama.cpp#27174); "
    "use the embedded llama-cpp:// backend or a vLLM server",
}
_OWNER_MODE = {"vllm": "guided_choice", "me": "grammar", "llamacpp": "grammar"}


@dataclass
class HttpConfig:
    """Settings of the OpenAI-compatible HTTP backend."""

    base_url: str
    """Server base URL including ``/v1``."""
    model: str | None = None
    """Model name sent with each request; ``None`` = the first model the server lists."""
    api_key: str | None = field(default=None, repr=False)
    """Bearer token; ``None`` = ``$METACOG_LLM_API_KEY``, then ``$OPENAI_API_KEY``, then none."""
    connect_timeout: float | None = None
    """Seconds to establish a connection (each attempt); None: ``$METACOG_LLM_CONNECT_TIMEOUT``, else 5."""
    read_timeout: float | None = None
    """Seconds to wait for the first byte of the answer and between its bytes; None:
    ``$METACOG_LLM_READ_TIMEOUT``, else 60. A read timeout is not retried (``LLMTimeoutError``)."""
    max_retries: int = 3
    """Retries on connection errors, connect timeouts, answers cut off, 5xx and 429."""
    backoff_initial: float = 0.25
    """Seconds before the first retry; doubles each retry."""
    backoff_max: float = 4.0
    """Longest single wait between retries."""
    extra_body: dict[str, Any] | None = None
    """Extra request fields sent with every generation request, e.g. for llama-cpp-python's server
    ``{"top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0}`` to sample like the embedded backend."""
    constrained: str = "auto"
    """How ``choices=`` is enforced: ``"grammar"`` (llama.cpp GBNF field), ``"guided_choice"`` (vLLM),
    ``"choose"`` (likelihood ranking via prompt logprobs), or ``"auto"`` (from the server's /models owner)."""
    max_concurrency: int = 8
    """Most requests ``generate_many`` / ``choose_many`` keep in flight at once."""
    seed: int = 0
    """Seeds the generator of per-call seeds for calls with ``seed=None``."""
    budget: Budget | None = None
    """Per-run call/token budget."""


def _api_key(explicit: str | None) -> str | None:
    if explicit:
        return explicit
    for var in API_KEY_VARS:
        v = os.environ.get(var)
        if v:
            return v
    return None


class HttpLLM(LLM):
    """Talks to ``/v1/completions`` and ``/v1/chat/completions``.

    Servers that ignore ``n`` (llama-cpp-python's) are asked again for the
    missing samples (seed + i). ``choose`` needs prompt logprobs
    (``echo`` + ``logprobs``: vLLM, llama-cpp-python's server with logits_all).
    """

    def __init__(self, config: HttpConfig) -> None:
        super().__init__(budget=config.budget, seed=config.seed)
        if config.constrained not in CONSTRAINT_MODES:
            raise ValueError(f"constrained: expected one of {CONSTRAINT_MODES}, got {config.constrained!r}")
        if isinstance(config.max_concurrency, bool) or not isinstance(config.max_concurrency, int) or config.max_concurrency < 1:
            raise ValueError(f"max_concurrency: expected an int >= 1, got {config.max_concurrency!r}")
        if config.extra_body is not None and not isinstance(config.extra_body, dict):
            raise ValueError(f"extra_body: expected a dict or None, got {type(config.extra_body).__name__}")
        connect_timeout, read_timeout = resolve_timeouts(config.connect_timeout, config.read_timeout)
        self.config = config
        self.uri = config.base_url
        self.client = JsonHttpClient(
            config.base_url,
            api_key=_api_key(config.api_key),
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            retry=RetryPolicy(
                max_retries=config.max_retries, backoff_initial=config.backoff_initial, backoff_max=config.backoff_max
            ),
        )
        self._model = config.model
        self._owner: str | None = None

    # ------------------------------------------------------------- server facts
    def _discover(self) -> None:
        data = self.client.request("GET", "/models")
        try:
            first = data["data"][0]
            self._model = self._model or str(first["id"])
            self._owner = str(first.get("owned_by", ""))
        except (KeyError, IndexError, TypeError) as exc:
            raise LLMHTTPError(f"LLM server {self.client.base_url}/models: unexpected answer {str(data)[:200]}") from exc

    @property
    def model(self) -> str:
        """The model name sent with requests (asked from the server when not configured)."""
        if self._model is None:
            self._discover()
        assert self._model is not None
        return self._model

    def constraint_mode(self) -> str:
        """The resolved ``constrained`` setting."""
        if self.config.constrained != "auto":
            return self.config.constrained
        if self._owner is None:
            self._discover()
        return _OWNER_MODE.get(self._owner or "", "choose")

    # ------------------------------------------------------------- requests
    def _payload(self, params: SamplingParams, n: int, seed: int) -> dict[str, Any]:
        p: dict[str, Any] = {
            "model": self.model,
            "n": n,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_tokens,
            "seed": seed,
        }
        if params.stop:
            p["stop"] = list(params.stop)
        if self.config.extra_body:
            p.update(self.config.extra_body)
        return p

    def _sample(self, path: str, body: dict[str, Any], params: SamplingParams, chat: bool) -> list[Completion]:
        out: list[Completion] = []
        assert params.seed is not None
        while len(out) < params.n:
            want = params.n - len(out)
            req = dict(body, **self._payload(params, want, (params.seed + len(out)) % (2**32 - 1)))
            t0 = time.perf_counter()
            data = self.client.request("POST", path, req)
            dt = time.perf_counter() - t0
            got = self._parse(data, path, chat, dt)
            if not got:
                raise LLMHTTPError(f"LLM server {self.client.base_url}{path} returned no choices: {str(data)[:200]}")
            out.extend(got[:want])
        return out

    def _parse(self, data: Any, path: str, chat: bool, seconds: float) -> list[Completion]:
        try:
            choices = data["choices"]
            usage = data.get("usage") or {}
            prompt_tokens = int(usage.get("prompt_tokens", 0))
            total_completion = usage.get("completion_tokens")
            timings = data.get("timings") or {}
            prefill = timings.get("prompt_ms")
            decode = timings.get("predicted_ms")
            cached = timings.get("cache_n")
            if total_completion is not None and len(choices) > 1:
                self._unattributed_tokens += int(total_completion)
            out = []
            for c in choices:
                text = c["message"]["content"] if chat else c["text"]
                finish = c.get("finish_reason") or "stop"
                out.append(
                    Completion(
                        text=text or "",
                        prompt_tokens=prompt_tokens,
                        completion_tokens=int(total_completion) if total_completion is not None and len(choices) == 1 else None,
                        seconds=seconds,
                        finish_reason="length" if finish == "length" else "stop",
                        prefill_seconds=prefill / 1000.0 if prefill is not None else None,
                        decode_seconds=decode / 1000.0 if decode is not None else None,
                        cached_tokens=int(cached) if cached is not None else None,
                    )
                )
            return out
        except (KeyError, TypeError, ValueError) as exc:
            raise LLMHTTPError(
                f"LLM server {self.client.base_url}{path}: malformed answer ({type(exc).__name__}: {exc}): {str(data)[:200]}"
            ) from exc

    # ------------------------------------------------------------- hooks
    def _generate(self, prompt: str, params: SamplingParams) -> list[Completion]:
        return self._sample("/completions", {"prompt": prompt}, params, chat=False)

    def _generate_chat(self, messages: list[Message], params: SamplingParams) -> list[Completion]:
        return self._sample("/chat/completions", {"messages": messages}, params, chat=True)

    def _concurrently(self, fn: Any, args: list[Any], need_owner: bool = False) -> list[Any]:
        """``fn`` over ``args`` with at most ``max_concurrency`` requests in flight; results in order."""
        if self._model is None or (need_owner and self._owner is None and self.config.constrained == "auto"):
            self._discover()  # once, before the threads start
        workers = min(self.config.max_concurrency, len(args))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="llm-http") as pool:
            return list(pool.map(fn, args))

    def _generate_many(self, prompts: list[str], params: list[SamplingParams]) -> list[Completion]:
        return self._concurrently(lambda a: self._generate(a[0], a[1])[0], list(zip(prompts, params)))

    def _score_many(self, prompts: list[str], options: list[list[str]]) -> list[ScoreResult]:
        return self._concurrently(lambda a: self._score(a[0], a[1]), list(zip(prompts, options)), need_owner=True)

    def _score(self, prompt: str, options: list[str]) -> ScoreResult:
        """Prompt logprobs of ``prompt + option`` (``echo`` with OpenAI semantics, e.g. vLLM's server):
        the server tokenizes the joined text, so a token straddling the boundary counts towards the option."""
        if self._owner is None and self.config.constrained == "auto":
            self._discover()
        reason = _NO_PROMPT_LOGPROBS.get(self._owner or "")
        if reason is not None:
            raise LLMHTTPError(f"choose() over {self.client.base_url}: {reason}")
        out: list[float] = []
        prompt_tokens = 0
        option_tokens = 0
        start = len(prompt)
        for opt in options:
            body = {"model": self.model, "prompt": prompt + opt, "max_tokens": 1, "temperature": 0.0, "echo": True, "logprobs": 1}
            data = self.client.request("POST", "/completions", body)
            try:
                lp = data["choices"][0]["logprobs"]
                offsets = lp["text_offset"]
                values = lp["token_logprobs"]
                tokens = lp["tokens"]
            except (KeyError, IndexError, TypeError) as exc:
                raise LLMHTTPError(
                    f"LLM server {self.client.base_url}/completions returned no prompt logprobs for echo=True; "
                    "choose() needs a server that reports them (vLLM; llama-cpp-python's server with logits_all)"
                ) from exc
            end = start + len(opt)
            total = 0.0
            count = 0
            for i, (off, val) in enumerate(zip(offsets, values)):
                tok_end = offsets[i + 1] if i + 1 < len(offsets) else off + len(tokens[i])
                if tok_end > start and off < end:
                    if val is None:
                        raise LLMHTTPError(f"LLM server {self.client.base_url}: no logprob for option token {tokens[i]!r}")
                    total += float(val)
                    count += 1
            if count == 0:
                raise LLMHTTPError(f"LLM server {self.client.base_url}: could not locate option {opt!r} in the echoed tokens")
            out.append(total)
            option_tokens += count
            prompt_tokens = max(prompt_tokens, int((data.get("usage") or {}).get("prompt_tokens", 0)) - count)
        return ScoreResult(out, prompt_tokens, option_tokens)

    def _constrained(
        self, prompt: str | None, messages: list[Message] | None, choices: list[str], params: SamplingParams
    ) -> list[Completion] | None:
        mode = self.constraint_mode()
        if mode == "choose":
            return None
        extra: dict[str, Any]
        if mode == "grammar":
            extra = {"grammar": choice_grammar(choices)}
        else:
            # vLLM < 0.11 reads guided_choice, later versions structured_outputs; each ignores the other.
            extra = {"guided_choice": choices, "structured_outputs": {"choice": choices}}
        need = max(len(c.encode("utf-8")) for c in choices) + 1
        p = SamplingParams(params.n, params.temperature, params.top_p, max(params.max_tokens, need), (), params.seed)
        if prompt is not None:
            out = self._sample("/completions", {"prompt": prompt, **extra}, p, chat=False)
        else:
            out = self._sample("/chat/completions", {"messages": messages, **extra}, p, chat=True)
        tagged = choices_from_texts(out, choices, mode)
        if tagged is None and prompt is None:
            raise LLMHTTPError(
                f"LLM server {self.client.base_url} ignored the {mode} constraint (returned {out[0].text!r}); "
                "chat(choices=) cannot fall back to choose() without the chat template"
            )
        return tagged  # None: the server ignored the field; the caller falls back to choose
