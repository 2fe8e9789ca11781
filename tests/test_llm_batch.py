"""Batched generation and scoring (``generate_many`` / ``choose_many``) on the embedded
SmolLM2-135M against the single-sequence path, nothing mocked.

The reference is a *cold* single-sequence call (``llama.reset()`` first): the
single path's own prefix cache changes which llama.cpp kernel evaluates a row, so
its warm results are not its cold ones either (see docs/llm.md).
"""
from __future__ import annotations

import pytest

from metacog_fast.llm import Budget, BudgetExhausted, open_llm
from metacog_fast.llm.protocol import LLM

SHORT = ["Once upon a time", "The capital of France is", "def fibonacci(n):", "List three colors:\n1."]
MEDIUM = ["Q: What is 2+2?\nA:" * 5, "In a small village " * 30]  # ~60 and ~120 tokens
LONG = ["Story: " + "the cat sat on the mat and " * 75]  # ~530 tokens: two chunks of the single path
PROMPTS = SHORT + MEDIUM + LONG


@pytest.fixture(scope="module")
def llm():
    backend = open_llm(n_threads=1, n_ctx=1024, batch_n_seq_max=8, batch_n_ctx_seq=1024)
    yield backend
    backend.close()


def cold_complete(llm, prompt, **kw):
    llm.llama.reset()
    return llm.complete(prompt, **kw)


def cold_choose(llm, prompt, options):
    llm.llama.reset()
    return llm.choose(prompt, options)


@pytest.fixture(scope="module")
def greedy_ref(llm):
    return {p: cold_complete(llm, p, max_tokens=24)[0] for p in PROMPTS}


@pytest.mark.parametrize("subset", [[0], [6], [6, 0], [1, 2, 3], list(range(7)), [6, 5, 4, 3, 2, 1, 0]])
def test_greedy_texts_equal_the_single_sequence_path(llm, greedy_ref, subset):
    prompts = [PROMPTS[i] for i in subset]
    out = llm.generate_many(prompts, max_tokens=24)
    assert len(out) == len(prompts)
    for p, c in zip(prompts, out):
        ref = greedy_ref[p]
        assert c.text == ref.text
        assert c.completion_tokens == ref.completion_tokens and c.finish_reason == ref.finish_reason
        assert c.prompt_tokens == ref.prompt_tokens


def test_next_step_prompts_reuse_their_cached_prefix(llm, greedy_ref):
    llm.generate_many(PROMPTS, max_tokens=4)
    nxt = [p + " and then" for p in PROMPTS]
    out = llm.generate_many(nxt, max_tokens=16)
    for p, c in zip(nxt, out):
        assert c.cached_tokens > 0
        assert c.text == cold_complete(llm, p, max_tokens=16)[0].text
    assert out[-1].cached_tokens >= 400  # the long prompt's first chunk is kept


def test_samples_are_seeded_per_sequence_and_equal_the_n_samples_of_complete(llm):
    p = SHORT[1]
    ref = [c.text for c in cold_complete(llm, p, n=4, temperature=0.9, seed=7, max_tokens=20)]
    alone = [c.text for c in llm.generate_many([p] * 4, temperature=0.9, seed=7, max_tokens=20)]
    mixed = llm.generate_many([MEDIUM[1], p, p, p, p, SHORT[0]], temperature=[0.0, 0.9, 0.9, 0.9, 0.9, 1.2],
                              seed=[1, 7, 8, 9, 10, 3], max_tokens=20)
    assert alone == ref
    assert [c.text for c in mixed[1:5]] == ref
    assert len(set(ref)) > 1  # the seeds differ, so do the samples


def test_stop_strings_and_limits_end_one_sequence_alone(llm):
    out = llm.generate_many(["Count: 1, 2, 3,", "Count: 1, 2, 3,", SHORT[0]], max_tokens=[30, 3, 12],
                            stop=[[", 6"], None, None])
    assert ", 6" not in out[0].text and out[0].finish_reason == "stop" and out[0].text.startswith(" 4, 5")
    assert out[1].completion_tokens == 3 and out[1].finish_reason == "length"
    assert out[2].text == cold_complete(llm, SHORT[0], max_tokens=12)[0].text


OPTION_SETS = [
    [f" {i}" for i in range(1, 11)],  # ratings: " 1" .. " 10" share their first token
    [" A", " B", " C"],
    [" go to fridge 1", " go to fridge 2", " go", " open drawer 1", " look"],
]


@pytest.mark.parametrize("options", OPTION_SETS, ids=["ratings", "letters", "mixed"])
def test_choose_many_equals_choose_bit_for_bit(llm, options):
    prompts = PROMPTS[:6] + [f"Rate memory {i}: Agent{i} saw a zombie near the mill.\nRating:" for i in range(4)]
    ref = [cold_choose(llm, p, options) for p in prompts]
    got = llm.choose_many(prompts, options)  # 10 prompts > batch_n_seq_max (8): scored in groups
    assert [g.logprobs for g in got] == [r.logprobs for r in ref]
    assert [g.index for g in got] == [r.index for r in ref]
    again = llm.choose_many(prompts[::-1], options)[::-1]  # other companions, warm cache
    assert [g.logprobs for g in again] == [r.logprobs for r in ref]


def test_choose_many_with_one_option_list_per_prompt(llm):
    opts = [[" yes", " no"], [" A", " B", " C"], [" 1", " 10"]]
    got = llm.choose_many(SHORT[:3], opts)
    rec = llm.history[-1]
    assert rec.kind == "choose_many" and rec.n == 7
    assert [g.logprobs for g in got] == [cold_choose(llm, p, o).logprobs for p, o in zip(SHORT[:3], opts)]


def test_the_unbatched_loop_is_the_base_class_default(greedy_ref):
    seq = open_llm(n_threads=1, n_ctx=1024, batched=False)
    try:
        assert type(seq)._generate_many is not LLM._generate_many  # native, but switched off:
        out = seq.generate_many(SHORT, max_tokens=24)
        assert [c.text for c in out] == [greedy_ref[p].text for p in SHORT]
        assert seq._engine is None  # no batch context was made
        ch = seq.choose_many(SHORT, [" yes", " no"])
        assert len(ch) == len(SHORT)
    finally:
        seq.close()


def test_bad_input_fails_before_any_work(llm):
    before = llm.usage.calls
    with pytest.raises(ValueError, match="prompts: expected at least one prompt"):
        llm.generate_many([])
    with pytest.raises(ValueError, match="prompts: expected a list of strings"):
        llm.generate_many("a single string")
    with pytest.raises(ValueError, match=r"prompts\[1\]: expected a non-empty string"):
        llm.generate_many(["ok", ""])
    with pytest.raises(ValueError, match="temperature: expected one value or a list of 2"):
        llm.generate_many(["a", "b"], temperature=[0.0])
    with pytest.raises(ValueError, match=r"prompts\[1\]: temperature: expected a finite float >= 0"):
        llm.generate_many(["a", "b"], temperature=[0.0, -1.0])
    with pytest.raises(ValueError, match="exceed the batch context's 8 sequences"):
        llm.generate_many([f"prompt {i}" for i in range(9)])
    with pytest.raises(ValueError, match=r"prompts\[0\]: \d+ tokens .* do not fit a sequence of the batch context"):
        llm.generate_many(["word " * 1100])
    with pytest.raises(ValueError, match="options: expected 2 option lists"):
        llm.choose_many(["a", "b"], [[" x"]])
    with pytest.raises(ValueError, match=r"options\[1\]\[0\]|options\[1\]: expected a non-empty list"):
        llm.choose_many(["a", "b"], [[" x"], []])
    assert llm.usage.calls == before


def test_batched_calls_count_once_against_the_budget():
    backend = open_llm(n_threads=1, n_ctx=256, budget=Budget(max_calls=1), batch_n_seq_max=4, batch_n_ctx_seq=256)
    try:
        out = backend.generate_many(SHORT, max_tokens=2)
        assert len(out) == 4 and backend.usage.calls == 1
        assert backend.usage.completion_tokens == sum(c.completion_tokens for c in out)
        with pytest.raises(BudgetExhausted):
            backend.choose_many(SHORT, [" a", " b"])
    finally:
        backend.close()


def test_kv_memory_per_sequence_is_reported(llm):
    e = llm.engine
    per_token = e.kv_bytes_per_token()
    assert per_token == 30 * 2 * 3 * 64 * 2  # SmolLM2-135M: 30 layers, 3 KV heads of 64, f16 K and V
    llm.generate_many([MEDIUM[1]], max_tokens=4)
    sid = next(s for s, t in e.slots.items() if len(t) >= 120)
    n = len(e.slots[sid])
    assert e.state_bytes(sid) >= n * per_token
