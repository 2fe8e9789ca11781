"""Token log-probabilities of generated text (``logprobs=True``) on the embedded llama.cpp backend:
each path (single-sequence ``complete``, batched ``generate_many``) against llama.cpp's own scoring of
the same text (``choose``), and the validation of the option."""
from __future__ import annotations

import math

import pytest

from metacog_fast.llm.llama_session import text_logprobs

PROMPTS = [
    "You are in the middle of a room. You see a fridge 1, a countertop 1 and a sinkbasin 1.\n"
    "Your task is to: put a clean apple in fridge.\n> go to",
    "### Your turn\nYou are in a kitchen. Your task is to: heat some egg and put it in diningtable.\n"
    "> go to fridge 1\nThe fridge 1 is closed.\n>",
]
TOL = 1e-3
"""Generation decodes one row at a time, scoring the option tokens in one ubatch: both small
ubatches (llama_batch.GEMM_ROWS), so the same kernel; float32 logits, float64 log-softmax."""


@pytest.fixture(scope="module")
def llm():
    from metacog_fast.llm import open_llm

    m = open_llm("llama-cpp://", n_threads=1)
    yield m
    m.close()


def _retokenizes(llm, prompt: str, text: str, n: int) -> bool:
    """Whether ``text`` tokenized on its own has the ``n`` tokens it was generated as (``choose`` scores
    the option's own tokenization)."""
    return len(llm.session.tokenize(text, bos=False, special=False)) == n


def _check_against_choose(llm, prompt: str, c) -> bool:
    assert c.token_logprobs is not None and len(c.token_ends) == len(c.token_logprobs)
    assert list(c.token_ends) == sorted(c.token_ends) and (not c.token_ends or c.token_ends[-1] >= len(c.text))
    assert all(lp <= 0.0 and math.isfinite(lp) for lp in c.token_logprobs)
    if not c.text or not _retokenizes(llm, prompt, c.text, len(c.token_logprobs)):
        return False
    ref = llm.choose(prompt, [c.text]).logprobs[0]
    assert sum(c.token_logprobs) == pytest.approx(ref, abs=TOL)
    return True


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_complete_logprobs_equal_llama_cpp_scoring(llm, temperature):
    checked = 0
    for prompt in PROMPTS:
        for c in llm.complete(prompt, n=2, temperature=temperature, max_tokens=16, stop=["\n"], seed=11,
                              logprobs=True):
            checked += _check_against_choose(llm, prompt, c)
    assert checked >= 3  # most texts re-tokenize as generated; the comparison is not vacuous


def test_generate_many_logprobs_equal_llama_cpp_scoring(llm):
    prompts = [PROMPTS[0]] * 3 + [PROMPTS[1]] * 2
    outs = llm.generate_many(prompts, temperature=[0.0, 0.7, 0.7, 0.0, 0.7], max_tokens=16, stop=["\n"], seed=5,
                             logprobs=True)
    assert sum(_check_against_choose(llm, p, c) for p, c in zip(prompts, outs)) >= 4
    # the greedy sequence's log-probabilities are the single path's, whichever path decoded it
    single = llm.complete(PROMPTS[0], temperature=0.0, max_tokens=16, stop=["\n"], logprobs=True)[0]
    assert outs[0].text == single.text
    assert outs[0].token_logprobs == pytest.approx(single.token_logprobs, abs=TOL)


def test_logprobs_off_by_default_and_validated(llm):
    assert llm.complete(PROMPTS[0], max_tokens=4)[0].token_logprobs is None
    assert llm.generate_many([PROMPTS[0]], max_tokens=4)[0].token_logprobs is None
    with pytest.raises(ValueError, match="logprobs: expected a bool"):
        llm.complete(PROMPTS[0], max_tokens=4, logprobs=1)
    with pytest.raises(ValueError, match="logprobs: not available with choices"):
        llm.complete(PROMPTS[0], choices=["a", "b"], logprobs=True)


def test_logprobs_refused_by_a_backend_without_them():
    from metacog_fast.llm.http_backend import HttpLLM

    assert HttpLLM.supports_logprobs is False
    llm = HttpLLM.__new__(HttpLLM)  # the check runs before any request: no server is needed
    llm._rng = __import__("random").Random(0)
    with pytest.raises(ValueError, match="logprobs: the HttpLLM backend does not return"):
        llm._params(1, 0.0, 1.0, 4, None, 0, True)


def test_text_logprobs_keeps_the_tokens_of_the_text():
    # tokens "go", " to", " x\n", "> " with decoded ends 2, 5, 8, 10; the stop "\n" at offset 7
    assert text_logprobs([-1.0, -2.0, -3.0, -4.0], [2, 5, 8, 10], 7) == ((-1.0, -2.0, -3.0), (2, 5, 8))
    # a stop token on its own is left out
    assert text_logprobs([-1.0, -2.0, -3.0], [2, 5, 6], 5) == ((-1.0, -2.0), (2, 5))
    assert text_logprobs([-1.0, -2.0], [2, 5], None) == ((-1.0, -2.0), (2, 5))
