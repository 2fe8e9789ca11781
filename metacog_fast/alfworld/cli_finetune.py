"""``metacog finetune data|sft|export|eval|compare|reflections|dpo|scorer|swift-eval``: pre-deployment
fine-tuning of the ALFWorld actor (SFT), of the ScienceWorld Swift (SFT on gold paths,
``data --env scienceworld``, ``swift-eval``) and of the reflector (DPO).

Flags are generated from the configuration dataclasses of :mod:`metacog_fast.finetune`
(:mod:`metacog_fast.cli.dataclass_args`); folders to read and write are plain arguments.
"""
from __future__ import annotations

import argparse
import dataclasses
import json

from metacog_fast.cli.dataclass_args import ConfigError, Flags, add_config_flags, config_from_args, field_default

ENVS = ("alfworld", "scienceworld")
_SHARED_DATA_FIELDS = ("split", "workers")
"""Fields of both data configurations: one flag each, read by whichever ``--env`` is chosen."""


def _parse_tasks(text: str) -> list[int]:
    from metacog_fast.scienceworld.runner import parse_tasks

    return parse_tasks(text)


_TASK_RANGES: dict = {"parsers": {"tasks": _parse_tasks}, "shown": {"tasks": "0-29"}}


def _data_flags() -> tuple[Flags, Flags]:
    """(ALFWorld DataConfig flags, ScienceWorld-only flags) of ``metacog finetune data``."""
    from metacog_fast.alfworld.finetune.data import DataConfig
    from metacog_fast.scienceworld.finetune_data import ScienceWorldDataConfig

    # validate=False: which configuration is validated depends on --env (see _data)
    return (Flags(DataConfig, validate=False),
            Flags(ScienceWorldDataConfig, skip=_SHARED_DATA_FIELDS, validate=False, **_TASK_RANGES))


def _given(spec: Flags, a: argparse.Namespace, skip: tuple[str, ...] = ()) -> list[str]:
    """Flags of ``spec`` whose value differs from the dataclass default (those the user set)."""
    return [spec.flag(f.name) for f in spec.fields()
            if f.name not in skip and getattr(a, spec.dest(f.name)) != field_default(f)]


def _checked(cfg: object) -> object:
    """``cfg.validate()``, its ValueError turned into a ConfigError naming the flag."""
    try:
        return cfg.validate()  # type: ignore[attr-defined]
    except ValueError as e:
        name, _, rest = str(e).partition(":")
        raise ConfigError(f"--{name.replace('_', '-')} ({name}):{rest}" if rest else str(e)) from None


def _data(a: argparse.Namespace) -> int:
    from metacog_fast.alfworld.finetune.data import build_dataset
    from metacog_fast.scienceworld.finetune_data import build_scienceworld_dataset

    alf, sw = _data_flags()
    if a.env == "scienceworld":
        other = _given(alf, a, _SHARED_DATA_FIELDS) + (["--games-dir"] if a.games_dir is not None else [])
        if other:
            raise ConfigError(f"--env scienceworld: {', '.join(other)} belong to --env alfworld")
        cfg = _checked(dataclasses.replace(config_from_args(sw, a), split=a.split, workers=a.workers))
        manifest = build_scienceworld_dataset(a.out, cfg)
        print(json.dumps({k: v for k, v in manifest.items() if k != "variations"}))
        return 0
    other = _given(sw, a)
    if other:
        raise ConfigError(f"--env alfworld: {', '.join(other)} belong to --env scienceworld")
    manifest = build_dataset(a.out, _checked(config_from_args(alf, a)), a.games_dir)
    print(json.dumps({k: v for k, v in manifest.items() if k != "games"}))
    return 0


def _swift_eval(a: argparse.Namespace) -> int:
    from metacog_fast.scienceworld.finetune_eval import SwiftAgreementConfig, agreement_markdown, evaluate_swift_agreement

    summary = evaluate_swift_agreement(a.out, config_from_args(Flags(SwiftAgreementConfig, **_TASK_RANGES), a))
    print(agreement_markdown(summary))
    return 0


def _sft(a: argparse.Namespace) -> int:
    from metacog_fast.alfworld.finetune.sft import SFTConfig, train_sft

    facts = train_sft(a.data_dir[0] if len(a.data_dir) == 1 else a.data_dir, a.out, config_from_args(Flags(SFTConfig), a))
    print(json.dumps(facts))
    return 0


def _export(a: argparse.Namespace) -> int:
    from metacog_fast.finetune.export import ExportConfig, export_gguf

    facts = export_gguf(a.checkpoint, a.out, config_from_args(Flags(ExportConfig), a))
    print(json.dumps(facts))
    return 0


def _eval(a: argparse.Namespace) -> int:
    from metacog_fast.alfworld.finetune.evaluate import EvalConfig, evaluate

    facts = evaluate(a.out, config_from_args(Flags(EvalConfig), a))
    print(json.dumps(facts))
    return 0


def _compare(a: argparse.Namespace) -> int:
    from metacog_fast.alfworld.finetune.evaluate import compare

    print(json.dumps(compare(a.a, a.b)))
    return 0


def _reflections(a: argparse.Namespace) -> int:
    from metacog_fast.alfworld.finetune.reflections import ReflectionDataConfig, collect

    print(json.dumps(collect(a.out, config_from_args(Flags(ReflectionDataConfig), a))))
    return 0


def _dagger(a: argparse.Namespace) -> int:
    from metacog_fast.alfworld.finetune.dagger import DaggerConfig, collect_dagger, folder_config

    cfg = folder_config(a.out) if a.resume else config_from_args(Flags(DaggerConfig), a)
    print(json.dumps(collect_dagger(a.out, cfg)))
    return 0


def _expert_eval(a: argparse.Namespace) -> int:
    from metacog_fast.alfworld.finetune.evaluate import ExpertEvalConfig, evaluate_expert

    print(json.dumps(evaluate_expert(a.out, config_from_args(Flags(ExpertEvalConfig), a))))
    return 0


def _dpo(a: argparse.Namespace) -> int:
    from metacog_fast.alfworld.finetune.dpo import DPOTrainConfig, train_dpo

    print(json.dumps(train_dpo(a.pairs_dir, a.out, config_from_args(Flags(DPOTrainConfig), a)), default=str))
    return 0


def _reflections_compare(a: argparse.Namespace) -> int:
    from metacog_fast.alfworld.finetune.reflections import compare_reflectors

    print(json.dumps(compare_reflectors(a.a, a.b), indent=1))
    return 0


def _scorer(a: argparse.Namespace) -> int:
    from metacog_fast.alfworld.finetune.scorer import ScorerFitConfig, fit_scorer, load_episodes

    rep = fit_scorer(load_episodes(a.episodes), a.out, config_from_args(Flags(ScorerFitConfig), a))
    cv = rep.get("crossval", {})
    print(json.dumps({"trained_on": rep["trained_on"], "chunk_auroc2": cv.get("chunk_auroc2_text"),
                      "episode_auroc2": cv.get("episode_auroc2_text")}))
    return 0


def attach(p: argparse.ArgumentParser) -> None:
    """Fills ``metacog finetune`` (:mod:`metacog_fast.cli.commands`)."""
    sub = p.add_subparsers(dest="finetune_cmd", required=True,
                           metavar="{data,dagger,sft,export,eval,expert-eval,compare,reflections,dpo,reflections-compare,scorer,swift-eval}")
    d = sub.add_parser("data", help="play expert walkthroughs (and add our agents' wins) into an SFT dataset; "
                                    "--env scienceworld: gold paths of train variations for the Swift")
    d.add_argument("--out", required=True, help="dataset folder (resumed when it exists)")
    d.add_argument("--env", choices=ENVS, default="alfworld",
                   help="alfworld: the actor's walkthrough transcripts; scienceworld: one example per gold step, "
                        "the LLM Swift's prompt and the gold option (default alfworld)")
    d.add_argument("--games-dir", default=None,
                   help="folder of played walkthroughs, shareable between datasets (default OUT/games; alfworld)")
    for spec in _data_flags():
        add_config_flags(d, spec)
    d.set_defaults(func=_data)
    from metacog_fast.alfworld.finetune.dagger import DaggerConfig
    from metacog_fast.alfworld.finetune.sft import SFTConfig

    g = sub.add_parser("dagger", help="the actor plays, the hand-coded expert labels every state it reaches "
                                      "(DAgger): an SFT dataset with the loss on the expert's commands (resumable)")
    g.add_argument("--out", required=True, help="collection folder (resumed when it exists)")
    g.add_argument("--resume", action="store_true",
                   help="take the configuration from OUT/config.json and ignore the other flags (a collection "
                        "unpacked from committed records: its dataset.jsonl and manifest are rebuilt, its actor is "
                        "opened only if games are missing)")
    add_config_flags(g, Flags(DaggerConfig))
    g.set_defaults(func=_dagger)
    s = sub.add_parser("sft", help="LoRA / full SFT of the actor on a dataset (resumable)")
    s.add_argument("--data-dir", required=True, nargs="+",
                   help="dataset folder(s) written by `metacog finetune data` or `metacog finetune dagger` "
                        "(several: their union)")
    s.add_argument("--out", required=True, help="training folder (checkpoints, log; resumed when it exists)")
    add_config_flags(s, Flags(SFTConfig))
    s.set_defaults(func=_sft)
    from metacog_fast.alfworld.finetune.evaluate import EvalConfig
    from metacog_fast.finetune.export import ExportConfig

    e = sub.add_parser("export", help="export a trained checkpoint to GGUF for the embedded llama.cpp backend")
    e.add_argument("--checkpoint", required=True, help="training folder (its final or latest checkpoint)")
    e.add_argument("--out", required=True, help="model folder: model.json + the GGUF file")
    add_config_flags(e, Flags(ExportConfig))
    e.set_defaults(func=_export)
    v = sub.add_parser("eval", help="an actor as a ReAct agent on ALFWorld games: success with Wilson intervals")
    v.add_argument("--out", required=True, help="evaluation folder (resumed when it exists)")
    add_config_flags(v, Flags(EvalConfig))
    v.set_defaults(func=_eval)
    from metacog_fast.alfworld.finetune.evaluate import ExpertEvalConfig

    x = sub.add_parser("expert-eval", help="ALFWorld's hand-coded expert on the evaluation games: "
                                           "the imitation ceiling, with Wilson intervals")
    x.add_argument("--out", required=True, help="output folder (summary.json, summary.md, episodes.jsonl)")
    add_config_flags(x, Flags(ExpertEvalConfig))
    x.set_defaults(func=_expert_eval)
    c = sub.add_parser("compare", help="game-paired comparison of two evaluation folders (McNemar, bootstrap)")
    c.add_argument("a", help="evaluation folder A")
    c.add_argument("b", help="evaluation folder B")
    c.set_defaults(func=_compare)
    from metacog_fast.alfworld.finetune.dpo import DPOTrainConfig
    from metacog_fast.alfworld.finetune.reflections import ReflectionDataConfig

    r = sub.add_parser("reflections", help="sample reflections on failed attempts and play the next attempt "
                                           "after each: DPO pairs and reflection quality (resumable)")
    r.add_argument("--out", required=True, help="collection folder (resumed when it exists)")
    add_config_flags(r, Flags(ReflectionDataConfig))
    r.set_defaults(func=_reflections)
    o = sub.add_parser("dpo", help="DPO of the reflector (LoRA) on collected pairs (resumable)")
    o.add_argument("--pairs-dir", required=True, nargs="+",
                   help="collection folder(s) written by `metacog finetune reflections` (several: their pairs joined)")
    o.add_argument("--out", required=True, help="training folder (checkpoints, log; resumed when it exists)")
    add_config_flags(o, Flags(DPOTrainConfig))
    o.set_defaults(func=_dpo)
    q = sub.add_parser("reflections-compare",
                       help="reflection quality of two reflectors on the same games (game-paired bootstrap)")
    q.add_argument("a", help="reflection collection A (e.g. with the DPO reflector)")
    q.add_argument("b", help="reflection collection B (e.g. with the base reflector), same actor and games")
    q.set_defaults(func=_reflections_compare)
    from metacog_fast.alfworld.finetune.scorer import ScorerFitConfig

    m = sub.add_parser("scorer", help="the actor's self-assessment scorer M_sa from its own recorded episodes, "
                                      "with a cross-validated AUROC2 on held-out games")
    m.add_argument("--episodes", nargs="+", required=True,
                   help="evaluation folders holding episode records (e.g. results/finetune/eval_rr1200_final_60)")
    m.add_argument("--out", required=True, help="scorer folder (head.safetensors, config.json, scorer.json)")
    add_config_flags(m, Flags(ScorerFitConfig))
    m.set_defaults(func=_scorer)
    from metacog_fast.scienceworld.finetune_eval import SwiftAgreementConfig

    w = sub.add_parser("swift-eval", help="ScienceWorld Swift agreement: top-1 agreement with the expert on held-out "
                                          "dev gold steps of the ranker and of LLMs as the LLM Swift (Wilson intervals)")
    w.add_argument("--out", required=True, help="evaluation folder (resumed when it exists): agreement.json")
    add_config_flags(w, Flags(SwiftAgreementConfig, **_TASK_RANGES))
    w.set_defaults(func=_swift_eval)
