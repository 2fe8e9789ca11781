"""MUSE's batched step (``MuseAgent.select`` / ``ActionMapper.map_many``) computes what the
per-rollout anchor (``bench/anchors/muse_select_unbatched.py`` / ``map``) computes: same mapped
actions, same chunks, same choice, scores within 1e-3 (bf16 encoder rounding can depend on the batch composition; measured
difference 0 on real ALFWorld steps). Real MiniLM encoder and scorer; no LLM."""
from __future__ import annotations

import numpy as np
import pytest

from bench.anchors.muse_select_unbatched import select_unbatched
from metacog_fast.alfworld.actions import ActionMapper
from metacog_fast.alfworld.agents import EpisodeContext, MuseAgent
from metacog_fast.alfworld.config import AgentConfig
from metacog_fast.alfworld.fewshot import load_examples
from metacog_fast.alfworld.protocol import DEFAULT_FEWSHOT

SCORE_TOL = 1e-3

ADMISSIBLE = ["go to countertop 1", "go to desk 1", "go to drawer 1", "go to shelf 1", "go to sidetable 1",
              "inventory", "look", "examine desk 1", "take mug 1 from desk 1", "take alarmclock 4 from desk 1"]
EXECUTED = [("go to desk 1", "You arrive at desk 1. On the desk 1, you see a alarmclock 4, and a mug 1."),
            ("examine desk 1", "On the desk 1, you see a alarmclock 4, and a mug 1.")]
# Rollouts as the LLM writes them after "> ": an exact admissible command, paraphrases that need the
# encoder (two identical), a think line before the action, a one-line rollout.
ROLLOUTS = [
    " take alarmclock 4 from desk 1\nYou pick up the alarmclock 4 from the desk 1.\n> go to sidetable 1\n"
    "You arrive at sidetable 1. On the sidetable 1, you see nothing.\n> put alarmclock 4 in/on sidetable 1\nYou put",
    " pick up the mug from the desk\nYou pick up the mug 1 from the desk 1.\n> go to shelf 1\nYou arrive at shelf 1.",
    " pick up the mug from the desk\nYou pick up the mug 1 from the desk 1.\n> go to shelf 1\nYou arrive at shelf 1.",
    " think: I need to find the alarm clock first.\n> walk over to the drawer\nYou arrive at drawer 1. The drawer 1 is "
    "closed.",
    " check what I carry",
]


@pytest.fixture(scope="module")
def scorer():
    from metacog_fast.scoring import ScorerConfig, TrajectoryScorer

    return TrajectoryScorer(ScorerConfig(seed=3))


def make_muse(scorer, select="highest"):
    agent = MuseAgent(None, load_examples(DEFAULT_FEWSHOT), AgentConfig(rollouts=5),
                      ActionMapper("embed", encoder=scorer.encoder), None, scorer, select)
    agent.ctx = EpisodeContext("g", "Your task is to: put an alarmclock on the sidetable.", "pick_and_place_simple",
                               "", 0)
    agent.current_plan = "1. find the alarmclock. 2. take it. 3. put it on the sidetable."
    agent.executed = list(EXECUTED)
    return agent


def test_map_many_equals_map(scorer):
    mapper = ActionMapper("embed", encoder=scorer.encoder)
    props = ["Go to desk 1.", "pick up the mug from the desk", "walk over to the drawer", "pick up the mug from the desk",
             "", "> look"]
    scorer.encoder.cache.clear()
    many = mapper.map_many(props, ADMISSIBLE)
    one = [mapper.map(p, ADMISSIBLE) for p in props]
    assert [(m.action, m.proposed, m.how) for m in many] == [(m.action, m.proposed, m.how) for m in one]
    assert [m.how for m in many] == ["exact", "embed", "embed", "embed", "embed", "exact"]
    assert many[1].action == "take mug 1 from desk 1" and many[2].action == "go to drawer 1"
    assert all(m.seconds >= 0.0 for m in many)
    # A new admissible list is re-embedded, not served from the previous one.
    other = ["go to drawer 1", "go to shelf 1"]
    assert mapper.map_many(["walk over to the shelf"], other)[0].action == "go to shelf 1"
    assert mapper.map_many(["walk over to the drawer"], ADMISSIBLE)[0].action == "go to drawer 1"
    with pytest.raises(TypeError, match="proposed"):
        mapper.map_many("go to desk 1", ADMISSIBLE)
    raw = ActionMapper("none").map_many(["fly away", "look."], ADMISSIBLE)
    assert [(m.action, m.how) for m in raw] == [("fly away", "raw"), ("look", "raw")]
    assert [m.how for m in mapper.map_many(["fly away"], None)] == ["raw"]


@pytest.mark.parametrize("select", ["highest", "lowest"])
def test_batched_select_equals_unbatched(scorer, select):
    agent = make_muse(scorer, select)
    enc = scorer.encoder
    enc.cache.clear()
    a = select_unbatched(agent, ROLLOUTS, ADMISSIBLE)
    enc.cache.clear()
    b = agent.select(ROLLOUTS, ADMISSIBLE)
    assert b.info["rollouts"] == a.info["rollouts"]
    assert b.info["mapped"] == a.info["mapped"] == ["exact", "embed", "embed", "embed", "embed"]
    assert [r[0][0] for r in b.info["rollouts"]] == ["take alarmclock 4 from desk 1", "take mug 1 from desk 1",
                                                     "take mug 1 from desk 1", "go to drawer 1", "inventory"]
    np.testing.assert_allclose(b.info["scores"], a.info["scores"], atol=SCORE_TOL, rtol=0)
    assert (b.action, b.proposed, b.how, b.info["chosen"]) == (a.action, a.proposed, a.how, a.info["chosen"])
    # The scores are M_sa of the chunks built from the executed history and the mapped rollouts.
    chunks = [EXECUTED[-1:] + [tuple(p) for p in b.info["rollouts"][0]]]
    chunks += [EXECUTED[-(4 - len(r)):] + [tuple(p) for p in r] for r in b.info["rollouts"][1:]]
    direct = scorer.score(agent.ctx.task, agent.current_plan, chunks)
    np.testing.assert_allclose(b.info["scores"], direct, atol=SCORE_TOL, rtol=0)
    # The second time the same rollouts come, every chunk text is an LRU hit and the scores are
    # exactly the same.
    misses = enc.cache.misses
    c = agent.select(ROLLOUTS, ADMISSIBLE)
    assert enc.cache.misses == misses
    assert c.info["scores"] == b.info["scores"]


# -- the encoder's lean forward (MuseAgent's chunks are encoded through it) ---------------------
CHUNKS = [
    "> go to desk 1\nYou arrive at desk 1. On the desk 1, you see a alarmclock 4, and a mug 1.\n"
    "> take alarmclock 4 from desk 1\nYou pick up the alarmclock 4 from the desk 1.\n> go to sidetable 1\n"
    "You arrive at sidetable 1. On the sidetable 1, you see nothing.\n> put alarmclock 4 in/on sidetable 1\n"
    "Plan: 1. find the alarmclock. 2. take it. 3. put it on the sidetable.",
    "> examine desk 1\nOn the desk 1, you see a alarmclock 4.\n> inventory\nYou are not carrying anything.\n"
    "Plan: 1. find the alarmclock.",
    "> look",
]


@pytest.fixture(scope="module")
def encoders(scorer):
    """The transformers forward, the lean forward with SDPA and with the matmul attention, all bf16."""
    from metacog_fast.scoring import EncoderConfig, MiniLMEncoder

    base = scorer.encoder
    hf = MiniLMEncoder(EncoderConfig(precision="bf16", attention="sdpa"), share=base)
    hf._lean = False
    return {"hf": hf,
            "sdpa": MiniLMEncoder(EncoderConfig(precision="bf16", attention="sdpa"), share=base),
            "matmul": MiniLMEncoder(EncoderConfig(precision="bf16", attention="matmul"), share=base)}


def test_lean_forward_matches_transformers(encoders):
    from metacog_fast.scoring.encoder import cpu_has_bf16

    if not cpu_has_bf16():
        pytest.skip("bf16 encoder path needs AVX512-BF16")
    hf = encoders["hf"].encode(CHUNKS, use_cache=False)  # padded batch of 3 lengths
    sdpa = encoders["sdpa"].encode(CHUNKS, use_cache=False)
    assert encoders["sdpa"]._lean not in (None, False)  # the lean path did run
    np.testing.assert_allclose(sdpa, hf, atol=1e-6, rtol=0)
    mm = encoders["matmul"].encode(CHUNKS, use_cache=False)
    ref = encoders["hf"].encode_reference(CHUNKS)  # fp32 sentence-transformers
    # bf16 rounding of the attention only: as close to fp32 as transformers' bf16 path.
    assert np.abs(mm - hf).max() < 5e-3
    cos_mm, cos_hf = (mm * ref).sum(1), (hf * ref).sum(1)
    assert cos_mm.min() > 0.9995 and cos_hf.min() > 0.9995
    # One text alone (no padding, no mask) equals its row of the padded batch to bf16 rounding.
    for i, t in enumerate(CHUNKS):
        np.testing.assert_allclose(encoders["matmul"].encode([t], use_cache=False)[0], mm[i], atol=5e-3, rtol=0)


def test_attention_option_validated():
    from metacog_fast.scoring import EncoderConfig, MiniLMEncoder

    with pytest.raises(ValueError, match="attention"):
        MiniLMEncoder(EncoderConfig(attention="flash"))
    int8 = MiniLMEncoder(EncoderConfig(precision="int8"))
    int8.encode(["> look"], use_cache=False)
    from metacog_fast.scoring.int8_bert import Int8Bert

    assert isinstance(int8._lean, Int8Bert)  # int8 runs its own forward and attention
