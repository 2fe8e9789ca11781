"""``metacog finetune data|sft|export|eval|compare|reflections|dpo|scorer|swift-eval``: pre-deployment
fine-tuning of the ALFWorld actor (SFT), of the ScienceWorld Swift (SFT on gold paths,
``data --env scienceworld``, ``swift-eval``) and of the reflector (DPO).

Each sub-command's command line is a dataclass read by tyro (:mod:`metacog_fast.cli.dataclass_args`):
a view of its configuration dataclass and the folders it reads and writes.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import json
from typing import Annotated, Any, Literal, Optional

import tyro

from metacog_fast._registry import resolve
from metacog_fast.cli import checks
from metacog_fast.cli.dataclass_args import ConfigError, add_command, build, field_default, parse, view

ENVS = ("alfworld", "scienceworld")
SCIENCEWORLD: dict[str, str] = {
    "parse_tasks": "metacog_fast.scienceworld.runner:parse_tasks",
    "ScienceWorldDataConfig": "metacog_fast.scienceworld.finetune_data:ScienceWorldDataConfig",
    "build_scienceworld_dataset": "metacog_fast.scienceworld.finetune_data:build_scienceworld_dataset",
    "SwiftAgreementConfig": "metacog_fast.scienceworld.finetune_eval:SwiftAgreementConfig",
    "evaluate_swift_agreement": "metacog_fast.scienceworld.finetune_eval:evaluate_swift_agreement",
    "agreement_markdown": "metacog_fast.scienceworld.finetune_eval:agreement_markdown",
}
"""The ScienceWorld Swift's sub-commands live in this command too (``data --env scienceworld``,
``swift-eval``); their pieces are ``"module:name"`` strings resolved when used, so that one family
does not import another."""
_SHARED_DATA_FIELDS = ("split", "workers")
"""Fields of both data configurations: one flag each, read by whichever ``--env`` is chosen."""


def _scienceworld(name: str) -> Any:
    """The object named ``name`` in :data:`SCIENCEWORLD`."""
    return resolve(SCIENCEWORLD[name])


def _parse_tasks(text: str) -> list[int]:
    return _scienceworld("parse_tasks")(text)


_TASK_RANGES: dict = {"parsers": {"tasks": _parse_tasks}, "shown": {"tasks": "0-29"}}


_FIELD_CHECKS = {"llm": checks.llm_uri, "actor": checks.llm_uri, "reflector": checks.llm_uri,
                 "n_threads": checks.positive_int}
"""Checks of the fields these names have in every ``finetune`` configuration, run before any work."""


def _command(doc: str, config: type, folders: list[tuple[str, Any, Any, str]], **view_kw: Any) -> type:
    """The command line of one ``finetune`` sub-command: ``config``'s flags (a view) and its folders,
    ``[(field, type, default or dataclasses.MISSING, help)]``."""
    names = {f.name for f in dataclasses.fields(config)}
    view_kw.setdefault("checks", {k: fn for k, fn in _FIELD_CHECKS.items() if k in names})
    fields: list[tuple[str, Any, Any]] = [("config", view(config, **view_kw), dataclasses.field())]
    for name, tp, default, help_text in folders:
        tp = Annotated[tp, tyro.conf.arg(help=help_text)]
        fields.append((name, tp, dataclasses.field(kw_only=True) if default is dataclasses.MISSING
                       else dataclasses.field(default=default, kw_only=True)))
    return dataclasses.make_dataclass(f"{config.__name__}Command", fields, namespace={"__doc__": doc})


_OUT = ("out", str, dataclasses.MISSING, "output folder (resumed when it exists)")


def _data_command() -> type:
    """``metacog finetune data``: the ALFWorld DataConfig and the ScienceWorld-only fields, by ``--env``."""
    from metacog_fast.alfworld.finetune.data import DataConfig

    ScienceWorldDataConfig = _scienceworld("ScienceWorldDataConfig")
    # validate=False: which configuration is validated depends on --env (see _data)
    sw = view(ScienceWorldDataConfig, skip=_SHARED_DATA_FIELDS, validate=False, **_TASK_RANGES)
    fields = [("config", view(DataConfig, validate=False), dataclasses.field()), ("sw", sw, dataclasses.field()),
              ("out", Annotated[str, tyro.conf.arg(help="dataset folder (resumed when it exists)")],
               dataclasses.field(kw_only=True)),
              ("env", Annotated[Literal["alfworld", "scienceworld"], tyro.conf.arg(
                  help="alfworld: the actor's walkthrough transcripts; scienceworld: one example per gold step, "
                       "the LLM Swift's prompt and the gold option")], dataclasses.field(default="alfworld", kw_only=True)),
              ("games_dir", Annotated[Optional[str], tyro.conf.arg(
                  help="folder of played walkthroughs, shareable between datasets (None: OUT/games; alfworld)")],
               dataclasses.field(default=None, kw_only=True))]
    return dataclasses.make_dataclass("DataCommand", fields, namespace={
        "__doc__": "Play expert walkthroughs (and add our agents' wins) into an SFT dataset; "
                   "--env scienceworld: gold paths of train variations for the Swift."})


def _given(obj: Any, skip: tuple[str, ...] = ()) -> list[str]:
    """Flags of a view instance whose value differs from the dataclass default (those the user set)."""
    flags = type(obj).__cli_flags__
    return [flags[f.name] for f in dataclasses.fields(type(obj).__tyro_base__)
            if f.name in flags and f.name not in skip and getattr(obj, f.name) != field_default(f)]


def _checked(cfg: object) -> object:
    """``cfg.validate()``, its ValueError turned into a ConfigError naming the flag."""
    try:
        return cfg.validate()  # type: ignore[attr-defined]
    except ValueError as e:
        name, _, rest = str(e).partition(":")
        raise ConfigError(f"--{name.replace('_', '-')} ({name}):{rest}" if rest else str(e)) from None


def _data(a: argparse.Namespace) -> int:
    from metacog_fast.alfworld.finetune.data import build_dataset

    build_scienceworld_dataset = _scienceworld("build_scienceworld_dataset")
    cmd = parse(a)
    alf, sw = cmd.config, cmd.sw
    if cmd.env == "scienceworld":
        other = _given(alf, _SHARED_DATA_FIELDS) + (["--games-dir"] if cmd.games_dir is not None else [])
        if other:
            raise ConfigError(f"--env scienceworld: {', '.join(other)} belong to --env alfworld")
        cfg = _checked(dataclasses.replace(build(sw), split=alf.split, workers=alf.workers))
        manifest = build_scienceworld_dataset(cmd.out, cfg)
        print(json.dumps({k: v for k, v in manifest.items() if k != "variations"}))
        return 0
    other = _given(sw)
    if other:
        raise ConfigError(f"--env alfworld: {', '.join(other)} belong to --env scienceworld")
    manifest = build_dataset(cmd.out, _checked(build(alf)), cmd.games_dir)
    print(json.dumps({k: v for k, v in manifest.items() if k != "games"}))
    return 0


def _swift_eval(a: argparse.Namespace) -> int:
    cmd = parse(a)
    report = _scienceworld("evaluate_swift_agreement")(cmd.out, build(cmd.config))
    print(_scienceworld("agreement_markdown")(report))
    return 0


def _sft(a: argparse.Namespace) -> int:
    from metacog_fast.alfworld.finetune.sft import train_sft

    cmd = parse(a)
    data = list(cmd.data_dir)
    facts = train_sft(data[0] if len(data) == 1 else data, cmd.out, build(cmd.config))
    print(json.dumps(facts))
    return 0


def _export(a: argparse.Namespace) -> int:
    from metacog_fast.finetune.export import export_gguf

    cmd = parse(a)
    print(json.dumps(export_gguf(cmd.checkpoint, cmd.out, build(cmd.config))))
    return 0


def _eval(a: argparse.Namespace) -> int:
    from metacog_fast.alfworld.finetune.evaluate import evaluate

    cmd = parse(a)
    print(json.dumps(evaluate(cmd.out, build(cmd.config))))
    return 0


def _compare(a: argparse.Namespace) -> int:
    from metacog_fast.alfworld.finetune.evaluate import compare

    print(json.dumps(compare(a.a, a.b)))
    return 0


def _reflections(a: argparse.Namespace) -> int:
    from metacog_fast.alfworld.finetune.reflections import collect

    cmd = parse(a)
    print(json.dumps(collect(cmd.out, build(cmd.config))))
    return 0


def _dagger(a: argparse.Namespace) -> int:
    from metacog_fast.alfworld.finetune.dagger import collect_dagger, folder_config

    cmd = parse(a)
    cfg = folder_config(cmd.out) if cmd.resume else build(cmd.config)
    print(json.dumps(collect_dagger(cmd.out, cfg)))
    return 0


def _step_labels(a: argparse.Namespace) -> int:
    from metacog_fast.alfworld.finetune.step_labels import collect_step_labels, folder_config

    cmd = parse(a)
    cfg = folder_config(cmd.out) if cmd.resume else build(cmd.config)
    print(json.dumps(collect_step_labels(cmd.out, cfg)))
    return 0


def _step_assessor(a: argparse.Namespace) -> int:
    from metacog_fast.alfworld.finetune.step_assessor import run_step_assessor

    cmd = parse(a)
    res = run_step_assessor(list(cmd.train), list(cmd.tune), list(cmd.report), cmd.out, build(cmd.config),
                            episode_scorer=cmd.episode_scorer or None)
    comp = res["assessor"]["comparisons"]
    print(json.dumps({"margin": res["margin"], "best_trivial": res["assessor"]["best_trivial"],
                      "verdicts": {k: v["verdict"] for k, v in comp.items()},
                      "contested_agreement": {k: res["ranking"]["contested"].get(k, {}).get("rate")
                                              for k in ("greedy", "assessor", "assessor_margin")}}))
    return 0


def _expert_eval(a: argparse.Namespace) -> int:
    from metacog_fast.alfworld.finetune.evaluate import evaluate_expert

    cmd = parse(a)
    print(json.dumps(evaluate_expert(cmd.out, build(cmd.config))))
    return 0


def _dpo(a: argparse.Namespace) -> int:
    from metacog_fast.alfworld.finetune.dpo import train_dpo

    cmd = parse(a)
    print(json.dumps(train_dpo(list(cmd.pairs_dir), cmd.out, build(cmd.config)), default=str))
    return 0


def _reflections_compare(a: argparse.Namespace) -> int:
    from metacog_fast.alfworld.finetune.reflections import compare_reflectors

    print(json.dumps(compare_reflectors(a.a, a.b), indent=1))
    return 0


def _scorer(a: argparse.Namespace) -> int:
    from metacog_fast.alfworld.finetune.scorer import fit_scorer, load_episodes

    cmd = parse(a)
    rep = fit_scorer(load_episodes(list(cmd.episodes)), cmd.out, build(cmd.config))
    cv = rep.get("crossval", {})
    print(json.dumps({"trained_on": rep["trained_on"], "chunk_auroc2": cv.get("chunk_auroc2_text"),
                      "episode_auroc2": cv.get("episode_auroc2_text")}))
    return 0


_MISSING = dataclasses.MISSING


@functools.lru_cache(maxsize=1)
def _commands() -> dict[str, tuple[str, Any, Any]]:
    """{sub-command: (help line, command dataclass or None for plain arguments, func)}; built once per
    process (the command classes are made here, and the parser cache keys on them). Read only."""
    from metacog_fast.alfworld.finetune.dagger import DaggerConfig
    from metacog_fast.alfworld.finetune.dpo import DPOTrainConfig
    from metacog_fast.alfworld.finetune.evaluate import EvalConfig, ExpertEvalConfig
    from metacog_fast.alfworld.finetune.reflections import ReflectionDataConfig
    from metacog_fast.alfworld.finetune.scorer import ScorerFitConfig
    from metacog_fast.alfworld.finetune.sft import SFTConfig
    from metacog_fast.alfworld.finetune.step_assessor import StepAssessorConfig
    from metacog_fast.alfworld.finetune.step_labels import StepLabelConfig
    from metacog_fast.finetune.export import ExportConfig

    SwiftAgreementConfig = _scienceworld("SwiftAgreementConfig")

    def cmd(help_line: str, config: type, folders: list, **kw: Any) -> tuple[str, type]:
        return help_line, _command(help_line, config, folders, **kw)

    return {
        "data": ("play expert walkthroughs (and add our agents' wins) into an SFT dataset; --env scienceworld: "
                 "gold paths of train variations for the Swift", _data_command(), _data),
        "dagger": (*cmd("the actor plays, the hand-coded expert labels every state it reaches (DAgger): an SFT dataset "
                        "with the loss on the expert's commands (resumable)", DaggerConfig,
                        [("out", str, _MISSING, "collection folder (resumed when it exists)"),
                         ("resume", bool, False, "take the configuration from OUT/config.json and ignore the other "
                          "flags (a collection unpacked from committed records: its dataset.jsonl and manifest are "
                          "rebuilt, its actor is opened only if games are missing)")]), _dagger),
        "step-labels": (*cmd("the actor plays on policy; at every state the hand-coded expert's command, the actor's "
                             "greedy and sampled candidates and their log-likelihoods (resumable)", StepLabelConfig,
                             [("out", str, _MISSING, "collection folder (resumed when it exists)"),
                              ("resume", bool, False, "take the configuration from OUT/config.json and ignore the "
                               "other flags")]), _step_labels),
        "step-assessor": (*cmd("a step-level M_sa trained on the expert's labels (train games), measured against "
                               "trivial predictors and as a candidate picker on held-out games", StepAssessorConfig,
                               [("train", tuple[str, ...], _MISSING, "DAgger or step-label collection folders of "
                                 "train games"),
                                ("tune", tuple[str, ...], _MISSING, "step-label collection folders the margin is "
                                 "chosen on (valid_seen)"),
                                ("report", tuple[str, ...], _MISSING, "step-label collection folders measured "
                                 "(valid_train)"),
                                ("out", str, _MISSING, "output folder (step_assessor.json, summary.md, scorer/)"),
                                ("episode_scorer", str, "", "a scorer folder trained on episode outcomes, measured "
                                 "beside it (optional)")]), _step_assessor),
        "sft": (*cmd("LoRA / full SFT of the actor on a dataset (resumable)", SFTConfig,
                     [("data_dir", tuple[str, ...], _MISSING, "dataset folder(s) written by `metacog finetune data` "
                       "or `metacog finetune dagger` (several: their union)"),
                      ("out", str, _MISSING, "training folder (checkpoints, log; resumed when it exists)")]), _sft),
        "export": (*cmd("export a trained checkpoint to GGUF for the embedded llama.cpp backend", ExportConfig,
                        [("checkpoint", str, _MISSING, "training folder (its final or latest checkpoint)"),
                         ("out", str, _MISSING, "model folder: model.json + the GGUF file")]), _export),
        "eval": (*cmd("an actor as a ReAct agent on ALFWorld games: success with Wilson intervals", EvalConfig,
                      [("out", str, _MISSING, "evaluation folder (resumed when it exists)")]), _eval),
        "expert-eval": (*cmd("ALFWorld's hand-coded expert on the evaluation games: the imitation ceiling, with "
                             "Wilson intervals", ExpertEvalConfig,
                             [("out", str, _MISSING, "output folder (summary.json, summary.md, episodes.jsonl)")]),
                        _expert_eval),
        "compare": ("game-paired comparison of two evaluation folders (McNemar, bootstrap)", None, _compare),
        "reflections": (*cmd("sample reflections on failed attempts and play the next attempt after each: DPO pairs "
                             "and reflection quality (resumable)", ReflectionDataConfig,
                             [("out", str, _MISSING, "collection folder (resumed when it exists)")]), _reflections),
        "dpo": (*cmd("DPO of the reflector (LoRA) on collected pairs (resumable)", DPOTrainConfig,
                     [("pairs_dir", tuple[str, ...], _MISSING, "collection folder(s) written by `metacog finetune "
                       "reflections` (several: their pairs joined)"),
                      ("out", str, _MISSING, "training folder (checkpoints, log; resumed when it exists)")]), _dpo),
        "reflections-compare": ("reflection quality of two reflectors on the same games (game-paired bootstrap)",
                                None, _reflections_compare),
        "scorer": (*cmd("the actor's self-assessment scorer M_sa from its own recorded episodes, with a "
                        "cross-validated AUROC2 on held-out games", ScorerFitConfig,
                        [("episodes", tuple[str, ...], _MISSING, "evaluation folders holding episode records "
                          "(e.g. results/finetune/eval_rr1200_final_60)"),
                         ("out", str, _MISSING, "scorer folder (head.safetensors, config.json, scorer.json)")]),
                   _scorer),
        "swift-eval": (*cmd("ScienceWorld Swift agreement: top-1 agreement with the expert on held-out dev gold "
                            "steps of the ranker and of LLMs as the LLM Swift (Wilson intervals)", SwiftAgreementConfig,
                            [("out", str, _MISSING, "evaluation folder (resumed when it exists): agreement.json")],
                            **_TASK_RANGES), _swift_eval),
        "ship": _ship_entry(),
    }


def _ship_entry() -> tuple[str, Any, Any]:
    from metacog_fast.alfworld.finetune import ship

    return ship.HELP, ship.SHIP_VIEW, ship.run


def attach(p: argparse.ArgumentParser) -> None:
    """Fills ``metacog finetune`` (:mod:`metacog_fast.cli.commands`)."""
    commands = _commands()
    sub = p.add_subparsers(dest="finetune_cmd", required=True, metavar="{" + ",".join(commands) + "}")
    for name, (help_line, command, func) in commands.items():
        if command is None:  # two folders to compare: plain positional arguments
            c = sub.add_parser(name, help=help_line, description=help_line)
            c.add_argument("a", help="folder A")
            c.add_argument("b", help="folder B (same games)")
        else:
            c = sub.add_parser(name, help=help_line, add_help=False)
            add_command(c, command)
        c.set_defaults(func=func)
