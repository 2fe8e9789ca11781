"""Dreamer-v3 training speed: our update against the reference DreamerV3's, same run, same sizes.

    bash bench/memory_locked.sh .venv/bin/python -m pytest bench/bench_dreamer_train.py \
        --benchmark-json=bench/results/dreamer_train.json

Anchor: :class:`bench.anchors.dreamerv3_reference.ReferenceDreamer` (a plain re-implementation
of NM512/dreamerv3-torch's update step, fp32 eager, its ``configs.yaml`` sizes for vector
observations: RSSM deter = hidden = 512, 32 x 32 latents, encoder and decoder 5 x 1024, heads 2 x 512,
255-bin two-hot reward and critic). Ours: :class:`metacog_fast.metaworld.models.dreamer.Dreamer` at the same
sizes (preset "S", ``obs_mlp_layers=5``, ``obs_mlp_units=1024``, ``E=1024``), Dreamer-v3 (SA loss off)
in float32 and in bfloat16, and MUSE (SA loss on) in bfloat16; also ours on the readable RSSM
functions (``*_naive_ops``: the fp32 one is the update as it was before this benchmark). Both sides: batch 16 x 64 rows,
imagination from all 1024 posterior states, horizon 15, 59-d observations, 4-d actions.

One update = one world-model step + one actor step + one critic step (with the slow critic). The
sides alternate within each round (anchor, then every variant of ours), so a change of machine load
hits all of them alike. ``extra_info``: per side the median seconds per update and its world-model /
actor-critic split, updates_per_s, and ``ratio_vs_anchor`` = anchor seconds / ours (> 1: ours faster),
computed per round and summarised by the median; the fastest update of each side and their ratio
(``ratio_of_min``: the least disturbed figure when other jobs share the cores); parameter counts;
threads and load average.
"""
from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
from typing import Callable

import torch

import metacog_fast.metaworld.models.dreamer as dreamer_module
from metacog_fast.metaworld.models.dreamer import Dreamer, DreamerConfig
from metacog_fast.ops.rssm import naive

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo root: bench.anchors
from bench.anchors.dreamerv3_reference import ReferenceConfig, ReferenceDreamer  # noqa: E402

B, T, O, A, H = 16, 64, 59, 4, 15
ROUNDS = int(os.environ.get("METACOG_BENCH_DREAMER_ROUNDS", "3"))
THREADS = int(os.environ.get("METACOG_BENCH_DREAMER_THREADS", "1"))
"""Torch threads of both sides. 1 by default: on the shared 2-core machine every parallel op of a
2-thread run waited ~7 ms at its barrier whenever another job held a core (measured: LayerNorm
[1024, 1536] 7.9 ms on 2 threads against 0.6 ms on 1, load 4.5), which swamped the comparison."""
TARGET_RATIO = 1.5

OURS = {
    "dreamer_fp32": dict(muse=False, precision="float32"),
    "dreamer_bf16": dict(muse=False, precision="bfloat16"),
    "muse_bf16": dict(muse=True, precision="bfloat16"),
}
NAIVE_OPS = ("dreamer_fp32_naive_ops", "dreamer_bf16_naive_ops")
"""Ours on the readable RSSM functions of ops/rssm/naive.py instead of the fused train ops: the
fp32 one is the training step as it was before this benchmark (what the fused ops and bf16 bought)."""
VARIANTS = os.environ.get("METACOG_BENCH_DREAMER_VARIANTS", "")
"""A comma-separated subset of our sides to time (empty: all). On a CPU without native bf16 (AVX2
only) a bf16 update is emulated and takes minutes, so the whole benchmark outlasts a session:
``METACOG_BENCH_DREAMER_VARIANTS=dreamer_fp32,dreamer_fp32_naive_ops`` times the fp32 sides."""
if VARIANTS:
    _keep = {v.strip() for v in VARIANTS.split(",") if v.strip()}
    if _keep - set(OURS) - set(NAIVE_OPS):
        raise ValueError(f"METACOG_BENCH_DREAMER_VARIANTS: unknown {sorted(_keep - set(OURS) - set(NAIVE_OPS))}, "
                         f"expected some of {sorted(OURS) + list(NAIVE_OPS)}")
    OURS = {k: v for k, v in OURS.items() if k in _keep}
    NAIVE_OPS = tuple(n for n in NAIVE_OPS if n in _keep)


@contextlib.contextmanager
def _naive_ops():
    saved = dreamer_module.fused
    dreamer_module.fused = naive
    try:
        yield
    finally:
        dreamer_module.fused = saved


def _data(seed: int = 0) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The same sequences in the anchor's and in our batch layout."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(B, T, O, generator=g)
    prev_action = torch.rand(B, T, A, generator=g) * 2 - 1
    prev_action[:, 0] = 0
    reward = torch.rand(B, T, generator=g)
    is_first = torch.zeros(B, T)
    is_first[:, 0] = 1
    anchor = {"obs": obs, "action": prev_action, "reward": reward, "is_first": is_first, "is_terminal": torch.zeros(B, T)}
    labels = (torch.rand(B, T, 5, generator=g) > 0.5).float()
    ours = {"obs": obs, "prev_action": prev_action, "reward": reward, "cont": torch.ones(B, T), "labels": labels}
    return anchor, ours


def _ours(**kw) -> Dreamer:
    return Dreamer(DreamerConfig(obs_dim=O, action_dim=A, preset="S", obs_mlp_layers=5, obs_mlp_units=1024, E=1024,
                                 horizon=H, **kw))


def _timed(wm: Callable[[], object], ac: Callable[[object], object]) -> tuple[float, float]:
    """(world-model seconds, actor-critic seconds) of one update."""
    t0 = time.perf_counter()
    out = wm()
    t1 = time.perf_counter()
    ac(out)
    return t1 - t0, time.perf_counter() - t1


def _anchor_update(model: ReferenceDreamer, data) -> tuple[float, float]:
    return _timed(lambda: model.train_world_model(data)[0], model.train_actor_critic)


def _our_update(model: Dreamer, batch) -> tuple[float, float]:
    return _timed(lambda: model.train_world_model(batch)[:2], lambda hz: model.train_actor_critic(*hz))


def _with_naive_ops(model: Dreamer, batch) -> tuple[float, float]:
    with _naive_ops():
        return _our_update(model, batch)


def test_dreamer_update_vs_reference(benchmark, torch_threads):
    torch_threads(THREADS)
    torch.manual_seed(0)
    anchor_data, our_batch = _data()
    anchor = ReferenceDreamer(ReferenceConfig(obs_dim=O, action_dim=A, horizon=H))
    ours = {name: _ours(**kw) for name, kw in OURS.items()}
    ours |= {name: _ours(muse=False, precision="float32" if "fp32" in name else "bfloat16") for name in NAIVE_OPS}
    print(f"[bench_dreamer_train] sides: anchor, {', '.join(ours)}; {ROUNDS} rounds", flush=True)
    sides: dict[str, Callable[[], tuple[float, float]]] = {"anchor": lambda: _anchor_update(anchor, anchor_data)}
    for name, m in ours.items():
        sides[name] = (lambda m=m: _our_update(m, our_batch))
    for name in NAIVE_OPS:
        sides[name] = (lambda m=ours[name]: _with_naive_ops(m, our_batch))
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in sides}

    def run() -> None:
        for fn in sides.values():  # warm-up: allocator, oneDNN primitives, Adam state
            fn()
        for r in range(ROUNDS):
            for name, fn in sides.items():
                torch.manual_seed(1000 + r)
                times[name].append(fn())
                print(f"[bench_dreamer_train] round {r} {name}: {sum(times[name][-1]):.2f} s", flush=True)

    load_before = os.getloadavg()[0]
    benchmark.pedantic(run, rounds=1, iterations=1)
    total = {k: [wm + ac for wm, ac in v] for k, v in times.items()}
    info: dict[str, object] = {
        "batch": B, "rows": T, "imagination_starts": B * T, "horizon": H, "rounds": ROUNDS, "variants": VARIANTS or "all",
        "torch_threads": torch.get_num_threads(), "loadavg_1min_before": load_before,
        "loadavg_1min_after": os.getloadavg()[0], "target_ratio": TARGET_RATIO,
        "params": {"anchor": sum(p.numel() for p in anchor.parameters())}
        | {k: sum(p.numel() for p in m.parameters()) for k, m in ours.items()},
    }
    for name, v in times.items():
        info[name] = {
            "s_per_update": statistics.median(total[name]), "updates_per_s": 1.0 / statistics.median(total[name]),
            "s_per_update_min": min(total[name]),
            "world_model_s": statistics.median(wm for wm, _ in v), "actor_critic_s": statistics.median(ac for _, ac in v),
            "all_s": total[name],
        }
        if name != "anchor":
            per_round = [a / o for a, o in zip(total["anchor"], total[name])]
            info[name]["ratio_vs_anchor"] = statistics.median(per_round)
            info[name]["ratio_per_round"] = per_round
            info[name]["ratio_of_min"] = min(total["anchor"]) / min(total[name])
            info[name]["world_model_ratio"] = info["anchor"]["world_model_s"] / info[name]["world_model_s"]
            info[name]["actor_critic_ratio"] = info["anchor"]["actor_critic_s"] / info[name]["actor_critic_s"]
    benchmark.extra_info.update(info)
    for name in ours:
        assert info[name]["s_per_update"] > 0
