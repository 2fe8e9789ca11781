"""vLLM backend (``vllm://<model>``) for GPU machines; ``pip install metacog_fast[gpu]``.

Same protocol as the embedded backend: ``n`` is native (one prefill shared by
the samples), automatic prefix caching serves the steps of an episode,
``choices=`` uses vLLM's structured-output choice, and ``choose`` reads prompt
logprobs of ``prompt tokens + option tokens`` (all options in one batch, the
shared prompt prefix computed once by the prefix cache).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from metacog_fast.llm.budget import Budget
from metacog_fast.llm.params import SamplingParams
from metacog_fast.llm.protocol import LLM, ScoreResult, choices_from_texts
from metacog_fast.llm.types import Completion, Message

INSTALL_HINT = "the vllm:// backend needs vLLM: pip install 'metacog_fast[gpu]' on a machine with a CUDA GPU"


@dataclass
class VLLMConfig:
    """Settings of the vLLM backend."""

    model: str
    """Hugging Face model name or local path."""
    gpu_memory_utilization: float = 0.85
    """Fraction of GPU memory vLLM may take."""
    max_model_len: int | None = None
    """Context window; ``None`` = the model's own."""
    tensor_parallel_size: int = 1
    """GPUs to shard the model over."""
    enable_prefix_caching: bool = True
    """Reuse KV blocks of shared prompt prefixes (episode steps, ``choose`` options)."""
    engine_args: dict[str, Any] = field(default_factory=dict)
    """Further keyword arguments for ``vllm.LLM``."""
    seed: int = 0
    """Engine seed, and seed of the generator of per-call seeds for calls with ``seed=None``."""
    budget: Budget | None = None
    """Per-run call/token budget."""


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc
    return vllm


def _choice_params(choices: list[str]) -> dict[str, Any]:
    """SamplingParams keyword for "exactly one of ``choices``" across vLLM versions."""
    try:
        from vllm.sampling_params import StructuredOutputsParams  # vLLM >= 0.11

        return {"structured_outputs": StructuredOutputsParams(choice=choices)}
    except ImportError:
        from vllm.sampling_params import GuidedDecodingParams  # vLLM 0.6 - 0.10

        return {"guided_decoding": GuidedDecodingParams(choice=choices)}


class VLLMLLM(LLM):
    """An in-process ``vllm.LLM``."""

    def __init__(self, config: VLLMConfig) -> None:
        super().__init__(budget=config.budget, seed=config.seed)
        vllm = _import_vllm()
        self.config = config
        self.uri = f"vllm://{config.model}"
        self._vllm = vllm
        kwargs: dict[str, Any] = dict(
            model=config.model,
            gpu_memory_utilization=config.gpu_memory_utilization,
            tensor_parallel_size=config.tensor_parallel_size,
            enable_prefix_caching=config.enable_prefix_caching,
            seed=config.seed,
        )
        if config.max_model_len is not None:
            kwargs["max_model_len"] = config.max_model_len
        kwargs.update(config.engine_args)
        self.engine = vllm.LLM(**kwargs)
        self.tokenizer = self.engine.get_tokenizer()

    def _sp(self, params: SamplingParams, **extra: Any) -> Any:
        return self._vllm.SamplingParams(
            n=params.n,
            temperature=params.temperature,
            top_p=params.top_p,
            max_tokens=params.max_tokens,
            stop=list(params.stop) or None,
            seed=params.seed,
            **extra,
        )

    @staticmethod
    def _to_completions(req: Any, seconds: float) -> list[Completion]:
        prefill = decode = None
        m = getattr(req, "metrics", None)
        try:
            if m is not None and m.first_token_time and m.first_scheduled_time:
                prefill = m.first_token_time - m.first_scheduled_time
                decode = m.last_token_time - m.first_token_time
        except (AttributeError, TypeError):
            prefill = decode = None
        cached = getattr(req, "num_cached_tokens", None)
        return [
            Completion(
                text=o.text,
                prompt_tokens=len(req.prompt_token_ids or []),
                completion_tokens=len(o.token_ids),
                seconds=seconds,
                finish_reason="length" if o.finish_reason == "length" else "stop",
                prefill_seconds=prefill,
                decode_seconds=decode,
                cached_tokens=cached,
            )
            for o in req.outputs
        ]

    def _generate(self, prompt: str, params: SamplingParams) -> list[Completion]:
        t0 = time.perf_counter()
        req = self.engine.generate([prompt], self._sp(params), use_tqdm=False)[0]
        return self._to_completions(req, time.perf_counter() - t0)

    def _generate_chat(self, messages: list[Message], params: SamplingParams) -> list[Completion]:
        t0 = time.perf_counter()
        req = self.engine.chat(messages, self._sp(params), use_tqdm=False)[0]
        return self._to_completions(req, time.perf_counter() - t0)

    def _generate_many(self, prompts: list[str], params: list[SamplingParams]) -> list[Completion]:
        """All prompts in one ``engine.generate`` (vLLM takes one SamplingParams per prompt)."""
        t0 = time.perf_counter()
        reqs = self.engine.generate(list(prompts), [self._sp(p) for p in params], use_tqdm=False)
        dt = time.perf_counter() - t0
        return [self._to_completions(r, dt)[0] for r in reqs]

    def _score_many(self, prompts: list[str], options: list[list[str]]) -> list[ScoreResult]:
        """Every prompt + option of every prompt in one ``engine.generate`` with prompt logprobs."""
        ptoks = [list(self.tokenizer.encode(p)) for p in prompts]
        otoks = []
        for i, opts in enumerate(options):
            ts = [list(self.tokenizer.encode(o, add_special_tokens=False)) for o in opts]
            for j, t in enumerate(ts):
                if not t:
                    raise ValueError(f"options[{i}][{j}]: tokenizes to no tokens: {opts[j]!r}")
            otoks.append(ts)
        sp = self._vllm.SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
        flat = [{"prompt_token_ids": p + t} for p, ts in zip(ptoks, otoks) for t in ts]
        reqs = iter(self.engine.generate(flat, sp, use_tqdm=False))
        out = []
        for p, ts in zip(ptoks, otoks):
            lps = []
            for t in ts:
                plp = next(reqs).prompt_logprobs
                lps.append(sum(float(plp[len(p) + j][tok].logprob) for j, tok in enumerate(t)))
            out.append(ScoreResult(lps, len(p), sum(len(t) for t in ts)))
        return out

    def _chat_prompt_for_scoring(self, messages: list[Message]) -> str:
        return str(self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))

    def _score(self, prompt: str, options: list[str]) -> ScoreResult:
        ptoks = list(self.tokenizer.encode(prompt))
        otoks = [list(self.tokenizer.encode(o, add_special_tokens=False)) for o in options]
        for i, t in enumerate(otoks):
            if not t:
                raise ValueError(f"options[{i}]: tokenizes to no tokens: {options[i]!r}")
        sp = self._vllm.SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
        reqs = self.engine.generate([{"prompt_token_ids": ptoks + t} for t in otoks], sp, use_tqdm=False)
        out = []
        for t, req in zip(otoks, reqs):
            plp = req.prompt_logprobs
            total = 0.0
            for j, tok in enumerate(t):
                total += float(plp[len(ptoks) + j][tok].logprob)
            out.append(total)
        return ScoreResult(out, len(ptoks), sum(len(t) for t in otoks))

    def _constrained(
        self, prompt: str | None, messages: list[Message] | None, choices: list[str], params: SamplingParams
    ) -> list[Completion] | None:
        need = max(len(c.encode("utf-8")) for c in choices) + 1
        p = SamplingParams(params.n, params.temperature, params.top_p, max(params.max_tokens, need), (), params.seed)
        sp = self._sp(p, **_choice_params(choices))
        t0 = time.perf_counter()
        if prompt is not None:
            req = self.engine.generate([prompt], sp, use_tqdm=False)[0]
        else:
            req = self.engine.chat(messages, sp, use_tqdm=False)[0]
        return choices_from_texts(self._to_completions(req, time.perf_counter() - t0), choices, "guided_choice")
