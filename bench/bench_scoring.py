"""Trajectory scoring (docs/design.md §1.3) against sentence-transformers + a torch MLP, same run.

    pytest bench/bench_scoring.py --benchmark-json=bench/results/scoring.json

Anchor: sentence-transformers ``encode`` (fp32, default settings) on the chunk
texts and the task texts, then the torch reference MLP (concat materialised).
Fast path: MiniLMEncoder (bucketed, reduced precision, task cache) + the fused
``score_trajectories`` kernel. Every benchmark times its anchor in the same test
(best of a few runs, perf_counter) and stores ``ratio`` = anchor time / fast time
in ``extra_info``; the throughput benchmarks also store both AUROCs on the same
labelled ALFWorld chunks (head trained on other games' fp32 embeddings).
"""
from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from metacog_fast.kernels import score_trajectories
from metacog_fast.ops.scoring import naive as ref
from metacog_fast.metrics import auroc2
from metacog_fast.scoring import EncoderConfig, MiniLMEncoder, ScorerConfig, TrajectoryScorer, render_trajectory
from metacog_fast.scoring.datasets import build_chunk_dataset, default_alfworld_root, split_by_game
from metacog_fast.scoring.encoder import cpu_has_bf16

BATCH = 256
THREADS = 2


def _best(fn, repeat: int = 2) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


@pytest.fixture(scope="module")
def setup():
    try:
        root = default_alfworld_root()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    torch.set_num_threads(THREADS)
    examples = build_chunk_dataset(root, split="valid_seen", seed=0)
    train, test = split_by_game(examples, test_fraction=0.55, seed=0)
    test = test[:BATCH]
    enc32 = MiniLMEncoder(EncoderConfig(precision="fp32"))
    scorer = TrajectoryScorer(ScorerConfig(encoder=EncoderConfig(precision="fp32")), encoder=enc32)
    tasks = sorted({e.task for e in train})
    tmap = dict(zip(tasks, enc32.encode_reference(tasks)))
    scorer.fit_embeddings(np.stack([tmap[e.task] for e in train]),
                          enc32.encode_reference([render_trajectory(e.chunk, e.plan) for e in train]),
                          np.array([e.label for e in train], np.float32))
    head = {k: v.detach() for k, v in scorer.head.items()}
    return {"test": test, "enc32": enc32, "head": head,
            "texts": [render_trajectory(e.chunk, e.plan) for e in test],
            "tasks": [e.task for e in test], "labels": np.array([e.label for e in test], np.float32)}


def anchor_scores(st, head, traj_texts: list[str], task_texts: list[str]) -> np.ndarray:
    """The baseline: ST fp32 encode of the chunk and (unique) task texts + torch MLP."""
    traj = st.encode(traj_texts, convert_to_numpy=True, show_progress_bar=False)
    uniq = sorted(set(task_texts))
    temb = dict(zip(uniq, st.encode(uniq, convert_to_numpy=True, show_progress_bar=False)))
    task = np.stack([temb[t] for t in task_texts])
    with torch.no_grad():
        return ref.score_trajectories(torch.from_numpy(task), torch.from_numpy(traj), head).numpy()


def fast_scores(enc: MiniLMEncoder, head, traj_texts: list[str], task_texts: list[str]) -> np.ndarray:
    """The fast path: bucketed reduced-precision encode (no text cache), per-task M(I) cache, fused kernel."""
    traj = enc.encode(traj_texts, use_cache=False)
    uniq = {t: enc.encode_task(t) for t in dict.fromkeys(task_texts)}
    task = np.concatenate([uniq[t] for t in task_texts])
    return score_trajectories(task, traj, head, backend="auto")


PRECISIONS = ["int8", "fp32"] + (["bf16"] if cpu_has_bf16() else [])


@pytest.mark.parametrize("precision", PRECISIONS)
def test_throughput_batch256(benchmark, setup, torch_threads, precision):
    torch_threads(THREADS)
    base, head, texts, tasks, y = setup["enc32"], setup["head"], setup["texts"], setup["tasks"], setup["labels"]
    enc = MiniLMEncoder(EncoderConfig(precision=precision, cache_size=0), share=base)
    for t in dict.fromkeys(tasks):
        enc.encode_task(t)  # M(I) per task is cached by design: warm it, as an agent would be
    fast_scores(enc, head, texts[:16], tasks[:16])  # warm-up
    p_fast = benchmark.pedantic(fast_scores, args=(enc, head, texts, tasks), rounds=2, iterations=1)
    p_anchor = anchor_scores(base.st, head, texts, tasks)
    t_anchor = _best(lambda: anchor_scores(base.st, head, texts, tasks), repeat=2)
    t_fast = benchmark.stats.stats.min
    a_anchor, a_fast = auroc2(p_anchor, y), auroc2(p_fast, y)
    benchmark.extra_info.update({
        "precision": enc.precision, "batch": len(texts), "threads": THREADS,
        "anchor": "sentence-transformers encode fp32 + torch MLP",
        "anchor_s": t_anchor, "fast_s": t_fast, "ratio": t_anchor / t_fast,
        "chunks_per_s_fast": len(texts) / t_fast, "chunks_per_s_anchor": len(texts) / t_anchor,
        "auroc_anchor": a_anchor, "auroc_fast": a_fast, "auroc_diff": a_fast - a_anchor,
        "mean_tokens": float(enc.token_lengths(texts).mean()),
    })


def test_latency_5_rollouts(benchmark, setup, torch_threads):
    """One MUSE step: score 5 rollouts of one task (task embedding cached, rollout texts new)."""
    torch_threads(THREADS)
    base, head, test = setup["enc32"], setup["head"], setup["test"]
    ex = test[:5]
    texts = [render_trajectory(e.chunk, ex[0].plan) for e in ex]
    task = ex[0].task
    enc = MiniLMEncoder(EncoderConfig(precision="auto", cache_size=0), share=base)
    enc.encode_task(task)
    fast_scores(enc, head, texts, [task] * 5)
    benchmark.pedantic(fast_scores, args=(enc, head, texts, [task] * 5), rounds=10, iterations=1)
    t_anchor = _best(lambda: anchor_scores(base.st, head, texts, [task] * 5), repeat=5)
    t_fast = benchmark.stats.stats.min
    benchmark.extra_info.update({"precision": enc.precision, "rollouts": 5, "threads": THREADS,
                                 "anchor_s": t_anchor, "fast_s": t_fast, "ratio": t_anchor / t_fast})


def test_cached_task_embedding(benchmark, setup, torch_threads):
    """M(I) from the per-task cache against ST encoding the task text again."""
    torch_threads(THREADS)
    base = setup["enc32"]
    st = base.st
    task = setup["tasks"][0]
    enc = MiniLMEncoder(EncoderConfig(precision="auto"), share=base)
    enc.encode_task(task)
    benchmark.pedantic(enc.encode_task, args=(task,), rounds=200, iterations=10)
    t_anchor = _best(lambda: st.encode([task], convert_to_numpy=True, show_progress_bar=False), repeat=5)
    benchmark.extra_info.update({"anchor_s": t_anchor, "fast_s": benchmark.stats.stats.min,
                                 "ratio": t_anchor / benchmark.stats.stats.min})


@pytest.mark.parametrize("B", [5, 256])
def test_fused_head(benchmark, setup, torch_threads, B):
    """The fused concat+MLP+sigmoid kernel (cpu, broadcast task row) against the torch reference."""
    torch_threads(THREADS)
    head = setup["head"]
    g = torch.Generator().manual_seed(0)
    task = torch.nn.functional.normalize(torch.randn(1, 384, generator=g), dim=-1)
    traj = torch.nn.functional.normalize(torch.randn(B, 384, generator=g), dim=-1)
    task_np, traj_np = task.numpy(), traj.numpy()
    head_np = {k: v.numpy() for k, v in head.items()}
    benchmark.pedantic(score_trajectories, args=(task_np, traj_np, head_np, "cpu"), rounds=100, iterations=5,
                       warmup_rounds=2)

    def anchor():
        with torch.no_grad():
            ref.score_trajectories(task, traj, head)

    anchor()
    n = 200 if B == 5 else 50
    t_anchor = _best(lambda: [anchor() for _ in range(n)], repeat=3) / n
    benchmark.extra_info.update({"batch": B, "anchor": "torch reference (eager)", "anchor_s": t_anchor,
                                 "fast_s": benchmark.stats.stats.min, "ratio": t_anchor / benchmark.stats.stats.min})
