"""MUSE (LLM) per-step cost split: the agent's own time (parse 5 rollouts, map their first
actions to admissible commands, M_sa on the 5 chunks, pick) vs the LLM's rollout generation and
the environment step, all measured in the same run on real ALFWorld states.

Target (issue 8): agent time <= 20 ms per step with 5 rollouts on CPU.

Setup: the embedded LLM plays ``STEPS`` real MUSE steps of one valid_train game (5 rollouts each,
the default rollout budget); every step's state (rollout texts, admissible list, history, plan)
is kept. Measured with 1 and 2 torch threads, for the encoder precisions ``auto`` (the default:
int8 on a CPU with VNNI and the compiled core) and ``bf16``:

* ``anchor``: the last state, encoder cache cleared except the admissible list and the task
  (the rollout texts are new text, as in a real step), the session-1 path: one encoder call per
  proposal that is not an exact match (``bench/anchors/muse_select_unbatched.py``) and MiniLM in bf16 through
  transformers' BertModel forward with torch SDPA attention; one anchor round runs before each
  measured round (interleaved, so both see the same load);
* ``fresh``: same state and cache state, the current path (``MuseAgent.select``: batched mapping,
  the encoder's forward at the given precision) -> ratio, and the largest score difference to the
  anchor and to an fp32 encoder on the same state;
* ``episode`` (1 thread, default precision): the kept steps replayed in order with the encoder cache as a real
  episode leaves it (cleared once per round) -> mean agent time per step and the hit rate of all
  encoder cache lookups (admissible lists, proposals, chunk texts).

Also recorded: the MiniLM FLOPs of the step's chunk texts, the bf16 GEMM rate of this core
measured in the same run, and so the compute floor of one step; the load average.

Run: pytest bench/bench_alfworld_agents.py --benchmark-json=bench/results/alfworld_agents.json
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from metacog_fast.alfworld.agents import EpisodeContext
from metacog_fast.alfworld.config import AgentConfig
from metacog_fast.alfworld.fewshot import load_examples, strip_intro
from metacog_fast.alfworld.memory import ReflectionMemory
from metacog_fast.alfworld.protocol import DEFAULT_FEWSHOT, make_agent, select_games

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo root: bench.anchors
from bench.anchors.muse_select_unbatched import select_unbatched  # noqa: E402

STEPS = 6
ROUNDS = 15
RUN1_SCORER = Path(__file__).resolve().parents[1] / "results" / "alfworld" / "run1" / "pretrain" / "scorer"
# MiniLM-L6-H384 multiply-adds per token: 6 layers x (4*384*384 attention projections + 2*384*1536 FFN).
MACS_PER_TOKEN = 6 * (4 * 384 * 384 + 2 * 384 * 1536)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    import torch

    from metacog_fast.envs import make_env
    from metacog_fast.llm import open_llm
    from metacog_fast.scoring import ScorerConfig, TrajectoryScorer

    torch.set_num_threads(1)
    load_before = os.getloadavg()[0]
    # The pre-deployment M_sa of the committed ALFWorld run (so that score differences between
    # precisions mean something); an untrained head where it is absent (same cost).
    scorer = (TrajectoryScorer.load(RUN1_SCORER) if (RUN1_SCORER / "head.safetensors").is_file()
              else TrajectoryScorer(ScorerConfig()))
    enc = scorer.encoder
    llm = open_llm(n_threads=1, n_ctx=4096)
    ac = AgentConfig(rollouts=5)
    mem = ReflectionMemory(tmp_path_factory.mktemp("mem") / "m.db", enc)
    agent = make_agent("muse", llm, load_examples(DEFAULT_FEWSHOT), ac, enc, mem, scorer)
    g = select_games("valid_train", 1)[0]
    env = make_env("alfworld", split="valid_train")
    obs, info = env.reset(game=g["gamefile"])
    task = info["task"] if info["task"].startswith("Your task") else f"Your task is to: {info['task']}"
    agent.begin(EpisodeContext(g["game"], task, info["task_type"], strip_intro(obs), 0))
    states, llm_times, env_times = [], [], []
    for _ in range(STEPS):
        prompt = agent.prompt()
        agent.step_seed += ac.rollouts
        t = time.perf_counter()
        outs = llm.complete(prompt, n=ac.rollouts, temperature=ac.rollout_temperature,
                            max_tokens=ac.rollout_max_tokens, seed=agent.step_seed)
        llm_times.append(time.perf_counter() - t)
        state = {"texts": [x.text for x in outs], "admissible": list(info["admissible"]), "prompt": prompt,
                 "executed": list(agent.executed)}
        states.append(state)
        d = agent.select(state["texts"], state["admissible"], prompt)
        t = time.perf_counter()
        o, _r, done, info = env.step(d.action)
        env_times.append(time.perf_counter() - t)
        agent.observe(d.action, o)
        if done or info.get("won"):
            break
    yield {"agent": agent, "states": states, "llm_s": statistics.median(llm_times),
           "env_s": statistics.median(env_times), "load_before": load_before}
    env.close()
    mem.close()
    llm.close()


def _use_encoder(agent, enc) -> None:
    """Point the agent's scorer and action mapper at ``enc`` (forgetting the mapper's admissible cache)."""
    agent.scorer.encoder = enc
    agent.mapper.encoder = enc
    agent.mapper._adm_key = None


def _restore(agent, state, fresh: bool) -> tuple:
    agent.executed = list(state["executed"])
    if fresh:
        enc = agent.scorer.encoder
        enc.cache.clear()
        enc.encode(list(state["admissible"]))
        enc.encode_task(agent.ctx.task)
    return (state["texts"], state["admissible"], state["prompt"]), {}


@pytest.fixture(scope="module")
def encoders(setup):
    """The encoders of the comparison, sharing one loaded model: the agent's default ("auto"), bf16,
    fp32 (the accuracy reference) and the anchor (bf16 through transformers' forward)."""
    from metacog_fast.scoring import EncoderConfig, MiniLMEncoder

    default = setup["agent"].scorer.encoder
    out = {"auto": default}
    for name, prec in (("bf16", "bf16"), ("fp32", "fp32"), ("anchor", "bf16")):
        out[name] = MiniLMEncoder(EncoderConfig(precision=prec), share=default)
    out["anchor"]._lean = False
    yield out
    _use_encoder(setup["agent"], default)


def _scores(agent, state, enc) -> list[float]:
    _use_encoder(agent, enc)
    d = agent.select(*_restore(agent, state, True)[0])
    return d.info["scores"]


def _anchor_round(agent, state, anchor_enc, times: list, scores: list) -> None:
    """One timed round of the session-1 path on ``state``: select_unbatched with bf16 MiniLM through
    transformers' BertModel forward (torch SDPA attention), from the same cache state."""
    _use_encoder(agent, anchor_enc)
    args, _ = _restore(agent, state, True)
    t = time.perf_counter()
    d = select_unbatched(agent, *args)
    times.append(time.perf_counter() - t)
    scores[:] = d.info["scores"]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("precision", ["auto", "bf16"])
def test_muse_agent_time_per_step(benchmark, setup, encoders, torch_threads, precision, threads):
    """Current path timed by pytest-benchmark; the anchor round runs in the setup of each round
    (interleaved, so both see the same load)."""
    torch_threads(threads)
    agent, state = setup["agent"], setup["states"][-1]
    enc = encoders[precision]
    fp32_scores = _scores(agent, state, encoders["fp32"])
    anchor_times: list[float] = []
    anchor_scores: list[float] = []
    _anchor_round(agent, state, encoders["anchor"], [], anchor_scores)  # warm-up of both paths
    _scores(agent, state, enc)

    def round_setup():
        _anchor_round(agent, state, encoders["anchor"], anchor_times, anchor_scores)
        _use_encoder(agent, enc)
        return _restore(agent, state, True)

    result = benchmark.pedantic(agent.select, setup=round_setup, rounds=ROUNDS, iterations=1)
    agent_s = benchmark.stats.stats.median
    anchor_s = statistics.median(anchor_times)
    assert len(result.info["scores"]) == 5
    # The step's chunk texts, their MiniLM FLOPs and this core's bf16 GEMM rate: the compute floor.
    from metacog_fast.scoring import render_trajectory

    size = agent.scorer.config.chunk_size
    chunks = []
    for r in result.info["rollouts"]:
        keep = max(0, size - len(r))
        chunks.append((agent.executed[-keep:] if keep else []) + [tuple(p) for p in r][:size])
    texts = list(dict.fromkeys(render_trajectory(c, agent.current_plan) for c in chunks))
    tokens = enc.token_lengths(texts)
    padded_tokens = int(len(tokens) * tokens.max())
    gflop = 2 * MACS_PER_TOKEN * int(tokens.sum()) / 1e9
    gemm = _bf16_gemm_gflops(int(tokens.sum()))
    scores = result.info["scores"]
    extra = {
        "agent_ms_per_step": 1000 * agent_s,
        "target_ms": 20.0,
        "encoder_precision": enc.precision,
        "anchor_ms_per_step": 1000 * anchor_s,
        "anchor": "select_unbatched + bf16 transformers BertModel forward (torch SDPA), interleaved rounds",
        "speedup_vs_anchor": anchor_s / agent_s,
        "max_score_diff_vs_anchor": float(np.abs(np.subtract(anchor_scores, scores)).max()),
        "max_score_diff_vs_fp32": float(np.abs(np.subtract(fp32_scores, scores)).max()),
        "anchor_max_score_diff_vs_fp32": float(np.abs(np.subtract(fp32_scores, anchor_scores)).max()),
        "same_choice_as_anchor": int(np.argmax(anchor_scores)) == result.info["chosen"],
        "same_choice_as_fp32": int(np.argmax(fp32_scores)) == result.info["chosen"],
        "proposals_mapped_by_encoder": result.info["mapped"].count("embed"),
        "llm_rollouts_ms_same_game": 1000 * setup["llm_s"],
        "env_step_ms_same_game": 1000 * setup["env_s"],
        "agent_over_llm": agent_s / setup["llm_s"],
        "agent_over_env": agent_s / setup["env_s"],
        "rollouts": len(scores),
        "unique_chunk_texts": len(texts),
        "chunk_tokens": [int(x) for x in tokens],
        "padded_tokens": padded_tokens,
        "minilm_gflop_per_step": gflop,
        "bf16_gemm_gflops_same_run": gemm,
        "bf16_compute_floor_ms": 1000 * gflop / gemm,
        "threads": threads,
        "scorer": "run1 pre-deployment head" if (RUN1_SCORER / "head.safetensors").is_file() else "untrained head",
        "encoder_cache": "cleared before each round (rollout texts uncached), admissible + task cached",
        "loadavg_1m_before": setup["load_before"],
        "loadavg_1m_after": os.getloadavg()[0],
    }
    benchmark.extra_info.update(extra)
    _use_encoder(agent, encoders["auto"])


def test_muse_agent_time_episode_replay(benchmark, setup, encoders, torch_threads):
    """The kept steps in order with the cache a real episode has (cleared once per round)."""
    torch_threads(1)
    agent, states = setup["agent"], setup["states"]
    enc = encoders["auto"]
    _use_encoder(agent, enc)
    counts = {"hits": 0, "misses": 0}

    def episode():
        enc.cache.clear()
        for st in states:
            agent.executed = list(st["executed"])
            h, m = enc.cache.hits, enc.cache.misses
            agent.select(st["texts"], st["admissible"], st["prompt"])
            counts["hits"] += enc.cache.hits - h
            counts["misses"] += enc.cache.misses - m

    episode()  # warm-up
    counts.update(hits=0, misses=0)
    benchmark.pedantic(episode, rounds=max(3, ROUNDS // 3), iterations=1)
    per_step = benchmark.stats.stats.median / len(states)
    benchmark.extra_info.update({
        "steps": len(states),
        "agent_ms_per_step_mean": 1000 * per_step,
        "target_ms": 20.0,
        "encoder_cache_hit_rate": counts["hits"] / max(1, counts["hits"] + counts["misses"]),
        "cache_lookups_note": "all encoder.encode lookups of the steps (admissible list, proposals, chunk texts)",
        "threads": 1,
        "encoder_precision": enc.precision,
        "loadavg_1m_after": os.getloadavg()[0],
    })


def _bf16_gemm_gflops(tokens: int) -> float:
    """Best-of-20 rate of a [tokens, 384] x [384, 1536] bf16 GEMM at the current torch threads
    (MiniLM's FFN shape): the peak the encoder's GEMMs could reach here."""
    import torch

    x = torch.randn(max(tokens, 16), 384, dtype=torch.bfloat16)
    w = torch.randn(1536, 384, dtype=torch.bfloat16)
    for _ in range(3):
        torch.nn.functional.linear(x, w)
    best = float("inf")
    for _ in range(20):
        t = time.perf_counter()
        torch.nn.functional.linear(x, w)
        best = min(best, time.perf_counter() - t)
    return 2 * x.shape[0] * 384 * 1536 / best / 1e9
