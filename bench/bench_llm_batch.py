"""Batched generation (issue 20) against today's one-at-a-time paths, in the same run.

    pytest bench/bench_llm_batch.py --benchmark-json=bench/results/llm_batch.json

1. ``test_town_llm_step``: 25 agents of the zombie scenario, memory on (so importance
   ratings), one decision per agent (reflection, planning, metacognition off, as
   bench_sim's LLM step). Batched: ``SimLLM(batched=True)`` (all decisions in one
   ``choose_many``, all ratings in one). Anchor: ``SimLLM(batched=False)`` (today's
   path: agents' calls one after another on the embedded model). Two steps each
   (step 2 reuses the agents' cached prompts); ratio of LLM seconds (decisions + ratings).
2. ``test_muse_step_five_rollouts``: one MUSE step on an ALFWorld-like prompt whose
   previous step is cached: 5 rollouts (temperature 0.5, 48 tokens) with
   ``generate_many`` vs today's ``complete(n=5)`` (sequential samples over one prefix).
3. ``test_decode_tokens_per_s_vs_batch``: greedy decode tokens/s of B distinct prompts
   for B = 1..32, with this CPU's limits measured in the same run: the weight-bandwidth
   bound (measured read bandwidth / bytes of weights read per decode step, x B) and the
   arithmetic bound (llama.cpp's prompt-evaluation rate in a 512-token ubatch, i.e. the
   same kernels fed with all the rows they can take). Plot: bench/results/llm_batch_decode_t<threads>.png.
4. KV-cache memory per sequence (recorded in test 3's extra_info).

X
"""
from __future__ import annotations

import os
import statistics
import time

import numpy as np
import pytest

from metacog_fast.town.generative import Features
from metacog_fast.llm import open_llm
from metacog_fast.llm.models import default_gguf
from metacog_fast.town import load_scenario
from metacog_fast.town.engine import SimConfig, Simulation
from metacog_fast.town.llm_adapter import SimLLM

THREADS = int(os.environ.get("METACOG_BENCH_LLM_THREADS", "1"))
RESULTS = os.path.join(os.path.dirname(__file__), "results")
N_AGENTS = 25
TOWN_STEPS = 2

from bench_llm import EPISODE, STEP  # noqa: E402  (the ALFWorld-like prompt of bench_llm)


def _encoder():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from metacog_fast.scoring.encoder import MiniLMEncoder

    return MiniLMEncoder()


def _town(tmp_path, name: str, llm: SimLLM, encoder) -> Simulation:
    sc = load_scenario("zombie", n_agents=N_AGENTS, seed=0)
    cfg = SimConfig(features=Features(memory=True, reflection=False, planning=False, metacognition=False))
    sim = Simulation(sc, llm, encoder, str(tmp_path / name), cfg)
    rng = np.random.default_rng(0)
    for a in sim.agents:
        a.mind.target = sim.places[int(rng.integers(len(sim.places)))]
    return sim


def test_town_llm_step(benchmark, tmp_path, torch_threads):
    torch_threads(THREADS)
    backend = open_llm(n_threads=THREADS, batch_n_seq_max=32, batch_n_ctx_seq=1024)
    enc = _encoder()
    fast, slow = SimLLM(backend, batched=True), SimLLM(backend, batched=False)
    sims = {"batched": _town(tmp_path, "batched", fast, enc), "one_at_a_time": _town(tmp_path, "seq", slow, enc)}
    per: dict[str, list[dict[str, float]]] = {k: [] for k in sims}

    def steps():
        for _ in range(TOWN_STEPS):
            for k, sim in sims.items():  # the same step of the same world, both paths
                sim.step()
                t = sim.timings[-1]
                per[k].append({"decisions_s": t.llm, "ratings_s": t.importance_llm, "llm_s": t.llm + t.importance_llm})

    benchmark.pedantic(steps, rounds=1, iterations=1)
    b, s = sims["batched"], sims["one_at_a_time"]
    same_actions = [a.action for a in b.agents] == [a.action for a in s.agents]
    info = {
        "threads": THREADS, "agents": N_AGENTS, "steps": TOWN_STEPS,
        "batched": per["batched"], "one_at_a_time": per["one_at_a_time"],
        "calls_by_purpose": fast.cost.as_dict()["by_purpose"], "batched_rounds": fast.rounds,
        "same_actions_both_paths": same_actions,
        "load_average_1min": round(os.getloadavg()[0], 2),
    }
    for i in range(TOWN_STEPS):
        info[f"speedup_step{i + 1}"] = per["one_at_a_time"][i]["llm_s"] / per["batched"][i]["llm_s"]
        info[f"speedup_decisions_step{i + 1}"] = per["one_at_a_time"][i]["decisions_s"] / per["batched"][i]["decisions_s"]
        info[f"speedup_ratings_step{i + 1}"] = per["one_at_a_time"][i]["ratings_s"] / per["batched"][i]["ratings_s"]
    info["speedup"] = sum(x["llm_s"] for x in per["one_at_a_time"]) / sum(x["llm_s"] for x in per["batched"])
    info["target"] = ">= 5"
    benchmark.extra_info.update(info)
    for sim in sims.values():
        sim.close()
    backend.close()


def test_muse_step_five_rollouts(benchmark):
    backend = open_llm(n_threads=THREADS, n_ctx=2048, batch_n_seq_max=8, batch_n_ctx_seq=2048)
    kw = dict(temperature=0.5, max_tokens=48)
    anchor: list[float] = []
    texts: dict[str, list[str]] = {}
    seed = [100]

    def setup():
        seed[0] += 5
        backend.llama.reset()
        backend.engine.reset()
        backend.complete(EPISODE, max_tokens=8)  # the previous step, cached on both paths
        backend.generate_many([EPISODE], max_tokens=8)
        t0 = time.perf_counter()
        seq = backend.complete(EPISODE + STEP, n=5, seed=seed[0], **kw)
        anchor.append(time.perf_counter() - t0)
        texts["sequential"] = [c.text for c in seq]

    def run():
        out = backend.generate_many([EPISODE + STEP] * 5, seed=seed[0], **kw)
        texts["batched"] = [c.text for c in out]
        return out

    benchmark.pedantic(run, setup=setup, rounds=3, iterations=1)
    ours = benchmark.stats.stats.median
    base = statistics.median(anchor)
    benchmark.extra_info.update(
        threads=THREADS, prompt_tokens=len(backend._prompt_tokens(EPISODE + STEP)), rollouts=5,
        batched_s=ours, sequential_s=base, speedup=base / ours, target=">= 2",
        same_texts_as_sequential=texts["batched"] == texts["sequential"],
    )
    backend.close()


def _read_bandwidth_gbs(nbytes: int = 1 << 29, repeats: int = 5) -> float:
    """Memory read bandwidth of this machine (GB/s): best of a few full reductions of a large array."""
    a = np.ones(nbytes // 8, dtype=np.float64)
    best = 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        a.sum()
        best = max(best, nbytes / (time.perf_counter() - t0) / 1e9)
    return best


def _weight_bytes() -> int:
    from gguf import GGUFReader

    return int(sum(int(t.n_bytes) for t in GGUFReader(default_gguf()).tensors))


BATCHES = [1, 2, 4, 8, 16, 32]
DECODE_TOKENS = 32


def test_decode_tokens_per_s_vs_batch(benchmark):
    backend = open_llm(n_threads=THREADS, batch_n_seq_max=32, batch_n_ctx_seq=1024)
    prompts = [f"Story {i}: Once upon a time, in a town called Number{i}," for i in range(max(BATCHES))]
    rates: dict[int, float] = {}

    def sweep():
        for b in BATCHES:
            backend.engine.reset()
            out = backend.generate_many(prompts[:b], max_tokens=DECODE_TOKENS)
            toks = sum(c.completion_tokens for c in out)
            rates[b] = toks / max(c.decode_seconds for c in out)

    benchmark.pedantic(sweep, rounds=1, iterations=1, warmup_rounds=1)
    # limits, same run
    bw = _read_bandwidth_gbs()
    wbytes = _weight_bytes()
    long_prompt = " ".join(f"word{i}" for i in range(300))
    toks = backend._prompt_tokens(long_prompt)[:512]
    backend.llama.reset()
    t0 = time.perf_counter()
    backend.llama.eval(toks)  # one ubatch: the kernels with as many rows as they take
    prefill_tps = len(toks) / (time.perf_counter() - t0)
    bw_bound = {b: b * bw * 1e9 / wbytes for b in BATCHES}
    e = backend.engine
    per_token = e.kv_bytes_per_token()
    backend.engine.reset()
    backend.generate_many([EPISODE], max_tokens=4)
    sid = next(iter(e.slots))
    kv = {
        "kv_bytes_per_token": per_token,
        "kv_bytes_per_sequence_of_512_tokens": 512 * per_token,
        "kv_bytes_measured_state_of_one_sequence": e.state_bytes(sid),
        "tokens_of_that_sequence": len(e.slots[sid]),
        "batch_context_kv_bytes_default": 32 * 2048 * per_token,
    }
    benchmark.extra_info.update(
        threads=THREADS, decode_tokens=DECODE_TOKENS, tokens_per_s={str(b): r for b, r in rates.items()},
        speedup_vs_batch1={str(b): r / rates[1] for b, r in rates.items()},
        read_bandwidth_gbs=bw, weight_bytes=wbytes, weight_bandwidth_bound_tokens_per_s={str(b): v for b, v in bw_bound.items()},
        arithmetic_bound_tokens_per_s=prefill_tps, **kv,
    )
    _plot(rates, bw_bound, prefill_tps, bw, wbytes)
    backend.close()


def _plot(rates, bw_bound, prefill_tps, bw, wbytes) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bs = sorted(rates)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.plot(bs, [rates[b] for b in bs], "o-", label="batched decode (measured)")
    ax.plot(bs, [bw_bound[b] for b in bs], "--", label=f"weight bandwidth bound ({bw:.0f} GB/s / {wbytes / 1e6:.0f} MB per step x B)")
    ax.axhline(prefill_tps, color="gray", linestyle=":", label=f"arithmetic bound (512-token ubatch: {prefill_tps:.0f} tok/s)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(bs, [str(b) for b in bs])
    ax.set_xlabel("sequences decoded together (B)")
    ax.set_ylabel("generated tokens / s")
    ax.set_title(f"SmolLM2-135M Q4_1, llama.cpp CPU, {THREADS} threads")
    ax.legend(fontsize=7)
    fig.tight_layout()
    os.makedirs(RESULTS, exist_ok=True)
    fig.savefig(os.path.join(RESULTS, f"llm_batch_decode_t{THREADS}.png"), dpi=120)
    plt.close(fig)


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__, "-q"])
