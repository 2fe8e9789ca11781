"""LLM calls and step latency per scenario and module set of ``metacog sim ablate`` runs, from their
summaries: ``REPORT/costs.md``.

Reads ``OUT/<scenario>/config.json`` and ``OUT/<scenario>/<config>_run<i>/summary.json``.
"""
from __future__ import annotations

import glob
import json
import os
import statistics as st
from pathlib import Path

from metacog_fast._atomic import atomic_open


def _ms(xs: list[float]) -> str:
    return f"{st.fmean(xs):.2f} ± {st.pstdev(xs):.2f}"


def costs_table(out: str | os.PathLike, judge: str) -> str:
    """The markdown table (one row per scenario x module set, mean ± std over runs)."""
    md = [f"Agents: the embedded SmolLM2-135M-Instruct; judge: {judge}. Mean ± std over runs; "
          "latency = simulated wall time / steps.", "",
          "| scenario | config | runs | LLM calls / run | step latency (s) | LLM thinking (s / step) | "
          "outside the LLM (ms / step) |",
          "|---|---|---|---|---|---|---|"]
    for sc in sorted(glob.glob(f"{out}/*/config.json")):
        runs: dict[str, list[dict]] = {}
        for p in sorted(glob.glob(sc.replace("config.json", "*_run*/summary.json"))):
            runs.setdefault(p.split("/")[-2].rsplit("_run", 1)[0], []).append(json.loads(Path(p).read_text()))
        for c, rs in runs.items():
            t = [x["metrics"].get("timing_ms", {}) for x in rs]
            md.append(f"| {rs[0]['scenario']} | {c} | {len(rs)} | {_ms([x['metrics']['llm_cost']['calls'] for x in rs])} | "
                      f"{_ms([x['sim_seconds'] / max(1, x['steps']) for x in rs])} | "
                      f"{_ms([x.get('llm', 0) / 1000 for x in t])} | {_ms([x.get('outside_llm', 0) for x in t])} |")
    return "\n".join(md) + "\n"


def write_costs(out: str, report: str, judge: str = "") -> str:
    """Write ``report/costs.md`` for the runs under ``out`` (atomically); ``judge`` empty = the agents'
    own embedded model. Returns what it wrote."""
    judge = judge if judge and judge.lower() != "none" else "llama-cpp:// (embedded SmolLM2-135M-Instruct)"
    with atomic_open(Path(report) / "costs.md") as f:
        f.write(costs_table(out, judge))
    return f"{report}/costs.md"
