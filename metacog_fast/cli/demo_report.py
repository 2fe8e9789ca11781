"""``runs/demo/report.html``: the demo's results as one self-contained page (no network, no
external files: figures are inline SVG, the town replay is the sim viewer inlined in an iframe's
``srcdoc``).

Sections, each present only for the parts that ran: the summary table (skipped and failed parts
with their reasons), the Meta-World competence curve (Σψ per step), the ALFWorld MUSE rollouts with
their M_sa scores and the choice made, the ScienceWorld trace (which system chose each action),
the town replay, and the environment checks. Every section is a ``<section id="...">`` so a test
can check that it rendered.
"""
from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Any

from metacog_fast.cli.io import write_text_atomic

_CSS = """
body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:70rem;color:#222;line-height:1.4}
h1{font-size:1.6rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.5rem 0;font-size:.9rem}td,th{border:1px solid #ddd;padding:.25rem .5rem;vertical-align:top}
th{background:#f3f3f3;text-align:left}.num{text-align:right}.skip{color:#a60}.err{color:#b00}
.chosen{background:#e6f4e6;font-weight:600}.note{color:#555;font-size:.85rem}
iframe{width:100%;height:38rem;border:1px solid #ccc}
"""


def _e(x: Any) -> str:
    return html.escape(str(x))


def _pct(x: Any) -> str:
    return "-" if x is None else f"{100 * float(x):.0f} %"


def svg_line(ys: list[float], width: int = 640, height: int = 200, label: str = "") -> str:
    """A small inline SVG line plot of ``ys`` against their index, with min/max on the y axis."""
    if not ys:
        return "<p class='note'>no data</p>"
    lo, hi = min(ys), max(ys)
    span = (hi - lo) or 1.0
    pad = 36
    n = max(1, len(ys) - 1)
    pts = " ".join(f"{pad + (width - 2 * pad) * i / n:.1f},{height - pad - (height - 2 * pad) * (y - lo) / span:.1f}"
                   for i, y in enumerate(ys))
    return (f"<svg width='{width}' height='{height}' role='img' "
            f"aria-label='{_e(label)}'><rect width='100%' height='100%' fill='white'/>"
            f"<line x1='{pad}' y1='{height - pad}' x2='{width - pad}' y2='{height - pad}' stroke='#888'/>"
            f"<line x1='{pad}' y1='{pad}' x2='{pad}' y2='{height - pad}' stroke='#888'/>"
            f"<polyline fill='none' stroke='#1565c0' stroke-width='2' points='{pts}'/>"
            f"<text x='2' y='{pad + 4}' font-size='11'>{hi:.2f}</text>"
            f"<text x='2' y='{height - pad}' font-size='11'>{lo:.2f}</text>"
            f"<text x='{width - pad}' y='{height - 8}' font-size='11' text-anchor='end'>step {len(ys)}</text>"
            f"<text x='{width / 2}' y='16' font-size='12' text-anchor='middle'>{_e(label)}</text></svg>")


def _summary(parts: dict[str, dict[str, Any]]) -> str:
    rows = []
    for name, r in parts.items():
        if "skipped" in r:
            rows.append(f"<tr><td>{_e(name)}</td><td colspan='4' class='skip'>skipped: {_e(r['skipped'])}</td></tr>")
        elif "error" in r:
            rows.append(f"<tr><td>{_e(name)}</td><td colspan='4' class='err'>failed: {_e(r['error'])}</td></tr>")
        else:
            m = r.get("model") or {}
            name_ = m.get("name") or r.get("actor") or r.get("weights") or r.get("backend") or ""
            kind = m.get("kind", "")
            kind_cell = f"<span class='skip'>{_e(kind)}</span>" if kind == "untrained" else _e(kind)
            note = m.get("note", "")
            rows.append(f"<tr><td>{_e(name)}</td><td class='num'>{_e(r.get('n_episodes', '-'))}</td>"
                        f"<td class='num'>{'n/a: untrained' if kind == 'untrained' else _pct(r.get('success_rate'))}</td>"
                        f"<td class='num'>{float(r.get('wall_seconds', 0)):.1f}</td><td>{kind_cell}</td>"
                        f"<td>{_e(name_)}<br><span class='note'>{_e(note)}</span></td>"
                        f"<td>{_e(r.get('summary', ''))}</td></tr>")
    return ("<section id='summary'><h2>Summary</h2><table><tr><th>part</th><th>episodes</th><th>success</th>"
            "<th>wall s</th><th>weights</th><th>model</th><th>what it showed</th></tr>" + "".join(rows)
            + "</table><p class='note'>weights: <b>scripted expert</b> = the environment's own solution (an "
            "install check); <b>shipped</b> = weights that come with the package; <b>trained in the demo</b> = "
            "fitted within this run; <b>base model</b> = the embedded LLM without fine-tuning; <b>untrained</b> = "
            "fresh weights, so the part shows a control loop, not a result.</p></section>")


def _muse_wm(r: dict[str, Any]) -> str:
    psis = [float(x) for x in r.get("psi_sums", [])]
    d = r.get("dreamer") or {}
    rows = "".join(
        f"<tr><td>{name}</td><td class='num'>{_e(x.get('steps'))}</td>"
        f"<td class='num'>{float(x.get('decisions_per_second') or 0):.0f}</td><td>{'yes' if x.get('success') else 'no'}</td>"
        f"<td>{how}</td></tr>"
        for name, x, how in (("MUSE-WM", r, "self-regulates the RSSM state for H=10 steps on every decision"),
                             ("Dreamer-v3", d, "acts with the actor alone")) if x)
    return (f"<section id='muse_wm'><h2>MUSE-WM beside Dreamer-v3 on Meta-World</h2>"
            f"<p>{_e(r.get('task'))} (novel: task embedding zeroed), same weights and seed; weights: "
            f"{_e(r.get('weights', 'unknown'))}; {_e(r.get('backend'))} backend.</p>"
            f"<table><tr><th>agent</th><th>steps</th><th>decisions/s</th><th>success</th><th></th></tr>{rows}</table>"
            + svg_line(psis, label="MUSE-WM's Σψ (self-assessed competence) per step") + "</section>")


def _alfworld_muse(r: dict[str, Any]) -> str:
    out = [f"<section id='alfworld_muse'><h2>ALFWorld: one MUSE episode</h2><p>{_e(r.get('task'))}<br>"
           f"<span class='note'>actor: {_e(r.get('actor', '?'))}<br>plan: {_e(r.get('plan', ''))}<br>"
           f"scorer: {_e(r.get('scorer', ''))}</span></p><p class='note'>Each step the actor samples rollouts (the "
           f"next few actions); M_sa is the scorer's probability that the episode succeeds if it goes on that way, "
           f"and MUSE executes the first action of the highest. Only the ranking within a step matters: the "
           f"scorer's values are small for action sequences unlike its training ones.</p>"]
    for t, s in enumerate(r.get("steps", []), 1):
        out.append(f"<table><tr><th colspan='2'>step {t}: chose <code>{_e(s['action'])}</code></th></tr>")
        for i, (roll, score) in enumerate(zip(s["rollouts"], s["scores"])):
            cls = " class='chosen'" if i == s["chosen"] else ""
            text = " | ".join(a for a, _ in roll)
            out.append(f"<tr{cls}><td class='num'>M_sa {float(score):.3g}</td><td>{_e(text)}</td></tr>")
        out.append(f"<tr><td colspan='2' class='note'>{_e(s['observation'][:300])}</td></tr></table>")
    out.append(f"<p>outcome: {'won' if r.get('success_rate') else 'not won'} in {len(r.get('steps', []))} steps</p></section>")
    return "".join(out)


def _sw_agent(r: dict[str, Any]) -> str:
    acts, srcs = r.get("actions", []), r.get("sources", [])
    rows = "".join(f"<tr><td class='num'>{i}</td><td>{_e(a)}</td><td>{_e(srcs[i - 1] if i - 1 < len(srcs) else '')}</td></tr>"
                   for i, a in enumerate(acts, 1))
    notes = "".join(f"<li>{_e(n)}</li>" for n in r.get("notes", []))
    mech = ", ".join(f"{_e(k)} {_e(v)}" for k, v in (r.get("mechanisms") or {}).items())
    return (f"<section id='sw_agent'><h2>ScienceWorld: the dual-process agent</h2><p>{_e(r.get('task'))} "
            f"(variation {_e(r.get('variation'))}, {_e(r.get('config'))}): score {_e(r.get('score'))}, "
            f"won {bool(r.get('won'))}</p><table><tr><th>step</th><th>action</th><th>chosen by</th></tr>{rows}</table>"
            f"<p class='note'>Sage plans and Critic diagnoses:</p><ul>{notes}</ul><p class='note'>{mech}</p></section>")


def _sim(r: dict[str, Any]) -> str:
    viewer = r.get("viewer")
    frame = "<p class='note'>no viewer file</p>"
    if viewer and os.path.isfile(viewer):
        frame = f"<iframe title='town replay' srcdoc=\"{html.escape(Path(viewer).read_text(), quote=True)}\"></iframe>"
    keys = ", ".join(f"{_e(k)} {_e(r[k])}" for k in ("survival_rate", "attendance_rate", "llm_cost") if k in r)
    rows = "".join(f"<tr><td class='num'>{_e(e.get('step'))}</td><td>{_e(e.get('agent'))}</td><td>{_e(e.get('kind'))}</td>"
                   f"<td>{_e(str(e.get('text', ''))[:240])}</td></tr>" for e in r.get("timeline", []))
    table = (f"<table><tr><th>step</th><th>agent</th><th>kind</th><th>what happened</th></tr>{rows}</table>"
             if rows else "")
    return (f"<section id='sim'><h2>Town: generative agents with metacognition</h2><p class='note'>{keys}</p>"
            f"<p class='note'>progress = the agent's rating of its progress toward its goal (1-10); meta = a "
            f"metacognitive question it asked itself and its answer; plan = where it decided to go.</p>{table}{frame}</section>")


def _envs(parts: dict[str, dict[str, Any]]) -> str:
    rows = []
    for name in ("metaworld", "alfworld", "scienceworld"):
        r = parts.get(name)
        if not r or "episodes" not in r:
            continue
        for ep in r["episodes"]:
            rows.append(f"<tr><td>{_e(name)}</td><td>{_e(ep.get('task'))}</td><td>{'yes' if ep.get('success') else 'no'}</td>"
                        f"<td class='num'>{_e(ep.get('steps'))}</td></tr>")
    if not rows:
        return ""
    return ("<section id='envs'><h2>Environment checks (scripted experts)</h2><table><tr><th>env</th><th>task</th>"
            "<th>solved</th><th>steps</th></tr>" + "".join(rows) + "</table></section>")


SECTIONS = {"muse_wm": _muse_wm, "alfworld_muse": _alfworld_muse, "sw_agent": _sw_agent, "sim": _sim}


def render(report: dict[str, Any]) -> str:
    """The page for a demo report (the dict ``metacog demo`` writes as JSON)."""
    parts = report.get("parts", {})
    body = [f"<h1>metacog demo</h1><p class='note'>metacog_fast {_e(report.get('metacog_fast'))}, "
            f"{_e(report.get('created'))}, seed {_e(report.get('seed'))}, "
            f"{float(report.get('wall_seconds', 0)):.0f} s</p>", _summary(parts)]
    for name, fn in SECTIONS.items():
        r = parts.get(name)
        if r and "skipped" not in r and "error" not in r:
            body.append(fn(r))
    body.append(_envs(parts))
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>metacog demo</title>"
            f"<style>{_CSS}</style></head><body>{''.join(body)}</body></html>")


def write_report(report: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write :func:`render` of ``report`` to ``path`` atomically; returns the path."""
    return write_text_atomic(path, render(report))
