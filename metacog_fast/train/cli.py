"""Command-line entry points the ``metacog`` CLI wires in:

    metacog train metaworld --profile cpu|smoke|paper [--agent muse|dreamer|both] [--run-dir DIR]
    metacog adapt metaworld --agent muse|dreamer --checkpoint RUN/pretrained [--run-dir DIR]
    metacog demo            (demo_part: a short MUSE-WM run on one novel task, decision rate)
    python -m metacog_fast.train.cli assess --checkpoint STEM --tasks novel|known|T1,T2 --out F.json
                            (run_assess: SA head on scripted-policy episodes, report.assess_on_scripted)

``run_train`` runs the whole protocol (pre-deployment + adaptation) for each agent, resuming
runs found in ``--run-dir``, then writes the report (JSON, CSV, Table 1, plots) to ``--out``.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from metacog_fast.train.config import AGENTS, SR_Z, profile


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=0, help="run seed (layouts, noise, initialisation)")
    parser.add_argument("--sr-z", choices=SR_Z, default="prior",
                        help="z_t for self-regulation: prior (Algorithm 1 as printed) or posterior")
    parser.add_argument("--backend", default="auto", help="acting kernel backend (auto, cpu, torch, ...)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``metacog train metaworld``."""
    parser.add_argument("--profile", choices=("cpu", "smoke", "paper"), default="cpu")
    parser.add_argument("--agent", choices=AGENTS + ("both",), default="both")
    parser.add_argument("--run-dir", default=None, help="run folder (default runs/metaworld/<profile>); resumed if present")
    parser.add_argument("--out", default=None, help="report folder (default results/metaworld/<profile>)")
    _common(parser)


def _cfg(args: argparse.Namespace, agent: str) -> Any:
    cfg = profile(args.profile, agent=agent, seed=args.seed, torch_threads=args.threads)
    cfg.act.sr_z = args.sr_z
    cfg.act.backend = args.backend
    return cfg


def run_train(args: argparse.Namespace) -> dict[str, Any]:
    """Pre-deployment + adaptation for the chosen agent(s), then the report. Returns the results."""
    from metacog_fast.train.report import write_report
    from metacog_fast.train.runner import ProtocolRunner

    run_root = Path(args.run_dir or f"runs/metaworld/{args.profile}")
    agents = AGENTS if args.agent == "both" else (args.agent,)
    runs = {}
    for agent in agents:
        cfg = _cfg(args, agent)
        rd = run_root / agent
        ProtocolRunner(cfg, rd, progress=not args.no_progress).run()
        runs["MUSE" if agent == "muse" else "Dreamer-v3"] = (rd, cfg)
    out = Path(args.out or f"results/metaworld/{args.profile}")
    results = write_report(runs, out)
    print((out / "table1.md").read_text())
    print(f"report written to {out}")
    return results


def add_adapt_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``metacog adapt metaworld``."""
    parser.add_argument("--agent", choices=AGENTS, default="muse")
    parser.add_argument("--checkpoint", required=True,
                        help="pre-trained checkpoint stem (e.g. runs/metaworld/cpu/muse/pretrained)")
    parser.add_argument("--profile", choices=("cpu", "smoke", "paper"), default=None,
                        help="profile for the adaptation settings (default: the checkpoint's)")
    parser.add_argument("--run-dir", default=None, help="run folder (default <checkpoint dir>/adapt_<agent>)")
    parser.add_argument("--out", default=None, help="report folder (default <run-dir>/report)")
    _common(parser)


def run_adapt(args: argparse.Namespace) -> dict[str, Any]:
    """Adaptation on the novel tasks from a pre-trained checkpoint, then the report."""
    from metacog_fast.train.checkpoint import read_config
    from metacog_fast.train.report import write_report
    from metacog_fast.train.runner import ProtocolRunner

    stem = Path(args.checkpoint)
    if stem.suffix in (".json", ".safetensors"):
        stem = stem.with_suffix("")
    saved, _ = read_config(stem)
    if args.profile is not None:
        args_profile = args.profile
    else:
        args_profile = saved.profile
    cfg = profile(args_profile, agent=args.agent, seed=args.seed, torch_threads=args.threads, model=saved.model)
    cfg.act.sr_z = args.sr_z
    cfg.act.backend = args.backend
    cfg.__post_init__()
    rd = Path(args.run_dir or stem.parent / f"adapt_{args.agent}")
    ProtocolRunner(cfg, rd, progress=not args.no_progress, pretrained=stem).run()
    out = Path(args.out or rd / "report")
    results = write_report({"MUSE" if args.agent == "muse" else "Dreamer-v3": (rd, cfg)}, out)
    print((out / "table1.md").read_text())
    return results


def add_assess_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``assess``: the SA head of a checkpoint on scripted-policy episodes."""
    parser.add_argument("--checkpoint", required=True, nargs="+",
                        help="MUSE checkpoint stem(s) (e.g. RUN/pretrained RUN/ckpt/latest), assessed on the same episodes")
    parser.add_argument("--names", nargs="+", default=None, help="a name per checkpoint (default: the stem's file name)")
    parser.add_argument("--tasks", default="novel",
                        help="novel (the profile's novel tasks, zero task embedding), known (MT10), or a comma list")
    parser.add_argument("--novel", action="store_true", help="zero task embedding for a comma list of --tasks")
    parser.add_argument("--episodes-per-task", type=int, default=20)
    parser.add_argument("--seed", type=int, default=12345, help="held-out layouts and noise")
    parser.add_argument("--backend", default="auto", help="acting kernel backend (auto, cpu, torch, ...)")
    parser.add_argument("--threads", type=int, default=1, help="torch and core threads")
    parser.add_argument("--out", required=True, help="result JSON")
    parser.add_argument("--roc", default=None, help="Type-2 ROC PNG, one curve per checkpoint with a defined AUROC2")


def checkpoint_state(stem: str | Path) -> dict[str, Any]:
    """What a checkpoint holds: its phase, updates and, for a runner checkpoint written during or
    after adaptation, the novel task whose adaptation its weights carry (each novel task restarts
    from the pre-trained weights, so a ``latest`` checkpoint holds only the last task's)."""
    from metacog_fast.train.checkpoint import read_config

    cfg, doc = read_config(stem)
    meta = doc.get("meta", {})
    out: dict[str, Any] = {"checkpoint": str(stem), "agent": cfg.agent, "profile": cfg.profile,
                           "phase": meta.get("phase") or ("pretrained" if "pretrain_replay" in meta else None),
                           "updates": meta.get("updates")}
    ad = meta.get("adapt")
    if ad is not None and meta.get("phase") in ("adapt", "done"):
        ti, ep = int(ad["task_index"]), int(ad["episode"])
        if ep == 0 and ti > 0:
            ti, ep = ti - 1, cfg.adapt_episodes
        if ep > 0:
            out["adapted_task"] = cfg.novel_tasks[ti]
            out["adapted_episodes"] = ep
            out["adapted_updates"] = ep * cfg.adapt_updates_per_episode
    return out


def run_assess(args: argparse.Namespace) -> dict[str, Any]:
    """The SA head of each ``--checkpoint`` on the same scripted episodes of ``--tasks`` (same seed:
    same layouts and actions); writes ``--out`` = {"checkpoints": {name: result}} and ``--roc``."""
    from metacog_fast.train.checkpoint import atomic_write_json, read_config
    from metacog_fast.metrics import plot_type2_roc_curves
    from metacog_fast.train.report import assess_on_scripted
    from metacog_fast.train.runner import set_threads

    set_threads(args.threads)
    stems = [Path(c).with_suffix("") if Path(c).suffix in (".json", ".safetensors") else Path(c) for c in args.checkpoint]
    names = args.names or [s.name for s in stems]
    if len(names) != len(stems) or len(set(names)) != len(names):
        raise ValueError(f"--names: expected {len(stems)} distinct names (one per --checkpoint), got {names}")
    cfgs = [read_config(s)[0] for s in stems]
    for s, c in zip(stems, cfgs):
        if not c.model.muse:
            raise ValueError(f"--checkpoint: {s} is a {c.agent} checkpoint without a trained SA head")
    cfg = cfgs[0]
    if args.tasks == "novel":
        tasks, novel = tuple(cfg.novel_tasks), True
    elif args.tasks == "known":
        tasks, novel = tuple(cfg.train_tasks), False
    else:
        tasks, novel = tuple(t.strip() for t in args.tasks.split(",") if t.strip()), args.novel
        if not tasks:
            raise ValueError(f"--tasks: expected novel, known or a comma list, got {args.tasks!r}")
    results: dict[str, Any] = {}
    curves = {}
    for name, stem in zip(names, stems):
        t0 = time.perf_counter()
        res = assess_on_scripted(stem, tasks, episodes_per_task=args.episodes_per_task, seed=args.seed,
                                 backend=args.backend, novel=novel, keep_signal=True)
        signal = res.pop("_signal")
        if res["auroc2"] == res["auroc2"]:  # not NaN
            curves[name] = signal
        res["wall_seconds"] = time.perf_counter() - t0
        res["checkpoint_state"] = checkpoint_state(stem)
        results[name] = res
        print(f"{name}: {len(tasks)} tasks x {args.episodes_per_task} episodes ({res['successful_episodes']} successful): "
              f"metacognitive accuracy {res['metacognitive_accuracy']:.3f} (always-failure "
              f"{res['always_failure_accuracy']:.3f}), AUROC2 {res['auroc2']:.3f}")
    doc = {"checkpoints": results, "tasks": list(tasks), "novel": novel, "seed": args.seed,
           "episodes_per_task": args.episodes_per_task, "threads": args.threads}
    atomic_write_json(args.out, doc)
    if args.roc and curves:
        plot_type2_roc_curves(curves, args.roc, title=f"Type-2 ROC, {'novel' if novel else 'known'} tasks (scripted)")
    return doc


def demo_part(task: str = "coffee-button-v3", steps: int = 100, checkpoint: str | None = None,
              sr_z: str = "prior", backend: str = "auto", seed: int = 0, threads: int = 1) -> dict[str, Any]:
    """A short MUSE-WM episode on one novel task (task embedding zeroed), self-regulating at every
    step. Uses ``checkpoint`` when given, else fresh XS weights. Returns decisions/s (acting only,
    env time excluded, the first decision — weight preparation — excluded), success, mean psi sum,
    and the backend used. ``threads``: torch and core threads during the demo (1 = batch-1 best)."""
    import numpy as np

    from metacog_fast.train.runner import set_threads

    set_threads(threads)

    from metacog_fast.agents.muse_wm import MuseWMAgent
    from metacog_fast.models.dreamer import Dreamer, DreamerConfig
    from metacog_fast.train.config import ActConfig
    from metacog_fast.train.rollout import make_metaworld

    act = ActConfig(sr_z=sr_z, backend=backend)
    if checkpoint:
        agent = MuseWMAgent.from_checkpoint(checkpoint, act=act, seed=seed)
    else:
        w, enc = Dreamer(DreamerConfig(seed=seed)).acting_weights()
        agent = MuseWMAgent(w, enc, act, seed=seed)
    env = make_metaworld(task, seed, steps, novel=True)
    obs, _ = env.reset()
    agent.reset()
    act_s, psis, success = 0.0, [], False
    for i in range(steps):
        t0 = time.perf_counter()
        a = agent.act(obs)
        if i:  # the first call prepares (validates, packs) the weights
            act_s += time.perf_counter() - t0
        psis.append(float(agent.psi.sum()))
        obs, _, done, info = env.step(a)
        success |= bool(info["success"])
        if done:
            break
    env.close()
    from metacog_fast.ops.rssm import resolved_backend  # for the report

    be = resolved_backend(agent.w, agent.h, backend)
    res = {"task": task, "steps": len(psis), "decisions_per_second": (len(psis) - 1) / act_s if act_s else float("nan"), "success": success,
           "mean_psi_sum": float(np.mean(psis)), "psi_sums": psis, "backend": be, "sr_z": sr_z,
           "weights": f"checkpoint {checkpoint}" if checkpoint else "fresh XS weights (untrained)"}
    print(f"MUSE-WM on {task}: {res['decisions_per_second']:.0f} decisions/s ({be} backend, H=10), "
          f"success={success}, mean sum(psi)={res['mean_psi_sum']:.2f}")
    return res


def main(argv: list[str] | None = None) -> None:
    """Stand-alone entry: ``python -m metacog_fast.train.cli train|adapt|demo|assess ...``."""
    p = argparse.ArgumentParser(prog="python -m metacog_fast.train.cli")
    sub = p.add_subparsers(dest="cmd", required=True)
    add_train_arguments(sub.add_parser("train"))
    add_adapt_arguments(sub.add_parser("adapt"))
    d = sub.add_parser("demo")
    d.add_argument("--task", default="coffee-button-v3")
    d.add_argument("--steps", type=int, default=100)
    d.add_argument("--checkpoint", default=None)
    add_assess_arguments(sub.add_parser("assess"))
    args = p.parse_args(argv)
    if args.cmd == "train":
        run_train(args)
    elif args.cmd == "adapt":
        run_adapt(args)
    elif args.cmd == "assess":
        run_assess(args)
    else:
        demo_part(args.task, args.steps, args.checkpoint)


if __name__ == "__main__":
    main()
