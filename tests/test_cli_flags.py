"""The one CLI: every command answers ``--help`` from ``metacog``, every flag tyro reads from a
configuration dataclass defaults to the dataclass default and shows its field docstring, a command
line round-trips to the configuration it spells, every spelling users typed before the move still
parses, and bad values get an error naming the flag."""
from __future__ import annotations

import argparse
import dataclasses
import re
import typing
from typing import Any

import pytest

from metacog_fast.cli.commands import COMMANDS
from metacog_fast.cli.dataclass_args import ConfigError, add_command, build, field_default, parse, view
from metacog_fast.cli.main import build_parser, main


def _leaf(words: list[str]) -> argparse.ArgumentParser:
    """The parser of ``metacog <words>`` (built as ``main`` builds it)."""
    p = build_parser(load=words[0])
    for w in words:
        sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
        p = sub.choices[w]
    return p


def _all_paths() -> list[list[str]]:
    """Every command path, down to sub-sub-commands (``finetune sft``, ``sim ablate``, ``memory show``)."""
    out: list[list[str]] = []

    def walk(p: argparse.ArgumentParser, path: list[str]) -> None:
        out.append(path)
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sp in a.choices.items():
                    walk(sp, path + [name])

    for word in dict.fromkeys(c.path[0] for c in COMMANDS):
        p = build_parser(load=word)
        sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
        walk(sub.choices[word], [word])
    return out


def _plain(text: str) -> str:
    """tyro's boxed output as one line of words (box borders and line breaks gone)."""
    return " ".join(re.sub("[\u2500-\u257f]", " ", text).split())


def _views(obj: Any) -> list[tuple[str, Any]]:
    """[(command field, view instance)] of a parsed command (its configurations)."""
    return [(f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj)
            if hasattr(type(getattr(obj, f.name)), "__tyro_base__")]


REQUIRED = {  # the words a command needs (its required flags), nothing else
    "run alfworld": "--agent react --out o",
    "pretrain alfworld": "--out o",
    "run scienceworld": "--out o",
    "learn": "alfworld",
    "sim": "",
    "sim ablate": "",
    "train metaworld": "",
    "adapt metaworld": "--checkpoint c",
    "train assess": "--checkpoint c --out o",
    "train learn": "",
    "train learn-all": "",
    "train learn-report": "",
    "train export": "s --out o",
    "train pack": "r --out o",
    "train unpack": "p --run-dir r",
    "report scienceworld-swift": "r --out o",
    "finetune data": "--out o",
    "finetune dagger": "--out o",
    "finetune step-labels": "--out o",
    "finetune step-assessor": "--train t --tune u --report r --out o",
    "finetune sft": "--data-dir d --out o",
    "finetune export": "--checkpoint c --out o",
    "finetune eval": "--out o",
    "finetune expert-eval": "--out o",
    "finetune reflections": "--out o",
    "finetune dpo": "--pairs-dir d --out o",
    "finetune scorer": "--episodes e --out o",
    "finetune swift-eval": "--out o",
    "finetune ship": "--adapter a --evaluation e --record r --reproduce x --description d",
    "experiment run": "n",
    "experiment show": "n",
    "serve": "start",
    "demo": "",
}
GIVEN = {("run alfworld", "agent"), ("adapt metaworld", "checkpoint"), ("train assess", "checkpoint"),
         ("train assess", "out"), ("train export", "source"), ("train export", "out"),
         ("train pack", "run_dir"), ("train pack", "out"), ("train unpack", "pack"), ("train unpack", "run_dir")}
"""(command, field) whose value ``REQUIRED`` gives (they are required flags)."""


# ------------------------------------------------------------------------------------------ reach

def test_every_command_answers_help_from_metacog(capsys):
    paths = _all_paths()
    names = {" ".join(p) for p in paths}
    # the commands that were reachable only through ``python -m ...`` before
    assert {"train assess", "train metaworld", "adapt metaworld", "sim ablate", "sim report", "memory import",
            "finetune dpo", "learn", "report scienceworld", "report scienceworld-swift"} <= names
    for path in paths:
        with pytest.raises(SystemExit) as exc:
            main([*path, "--help"])
        assert exc.value.code == 0, path
        out = capsys.readouterr().out
        assert out.startswith("usage: metacog " + " ".join(path)), (path, out[:200])


def test_every_command_with_a_configuration_is_read_by_tyro():
    """Every command whose flags come from dataclasses names them in ``REQUIRED``, and reads them by tyro."""
    with_target = {" ".join(p) for p in _all_paths() if _leaf(p).get_default("cli_target") is not None}
    assert with_target == set(REQUIRED)


def test_top_level_help_lists_every_command_without_importing_them():
    import subprocess
    import sys

    code = ("import sys; from metacog_fast.cli.main import build_parser; h = build_parser().format_help(); "
            "from metacog_fast.cli.commands import top_level; print(all(w in h for w in top_level())); "
            "print(sorted(m for m in sys.modules if m.startswith('metacog_fast.') and m.split('.')[1] in "
            "('agents', 'sim', 'train', 'finetune', 'runs', 'alfworld', 'scienceworld', 'metaworld', 'town', "
            "'experience')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["True", "[]"]


# --------------------------------------------------------------------------------------- defaults

def test_every_flag_defaults_to_its_dataclass_default():
    checked = 0
    for command, argv in REQUIRED.items():
        leaf = _leaf(command.split())
        a = leaf.parse_args(argv.split())
        cmd = parse(a)
        for _, obj in _views(cmd):
            view_cls = type(obj)
            base = view_cls.__tyro_base__
            for f in dataclasses.fields(base):
                flag = view_cls.__cli_flags__.get(f.name)
                if flag is None or dataclasses.is_dataclass(getattr(obj, f.name)):
                    continue
                if f.name not in view_cls.__cli_positional__:
                    assert flag in leaf.cli_spellings, (command, flag)
                if (command, f.name) in GIVEN or field_default(f) is dataclasses.MISSING:
                    continue
                assert getattr(obj, f.name) == field_default(f), (command, f.name, getattr(obj, f.name))
                checked += 1
    assert checked > 150


def test_a_required_flag_left_out_is_an_error_naming_it(capsys):
    for command, argv, flag in (("run alfworld", "--out o", "--agent"), ("adapt metaworld", "", "--checkpoint"),
                                ("train assess", "--out o", "--checkpoint"), ("finetune sft", "--out o", "--data-dir")):
        with pytest.raises(SystemExit) as exc:
            parse(_leaf(command.split()).parse_args(argv.split()))
        assert exc.value.code == 2
        err = _plain(capsys.readouterr().err)
        assert flag in err and "required" in err.lower(), (command, err)


def test_help_text_is_the_field_docstring_and_shows_the_default(capsys):
    with pytest.raises(SystemExit):
        main(["run", "alfworld", "--help"])
    out = _plain(capsys.readouterr().out)
    assert "Environment steps per episode (docs/design.md: 50). Think lines do not count as steps. (default: 50)" in out
    assert "--episodes INT, --test-episodes INT" in out
    assert "--agent {react,reflexion,muse,muse-lowest,muse-random,fcrf}" in out and "(required)" in out


# -------------------------------------------------------------------------------------- round trip

def _words(view_cls: type, obj: Any) -> list[str]:
    """The command line that spells ``obj`` (every field of ``view_cls`` that has a flag)."""
    hints = typing.get_type_hints(view_cls.__tyro_base__)
    pos: list[str] = []
    out: list[str] = []
    for f in dataclasses.fields(view_cls.__tyro_base__):
        v = getattr(obj, f.name)
        if dataclasses.is_dataclass(v):  # a nested configuration: its own flags, flat beside these
            out += _words(typing.get_type_hints(view_cls)[f.name], v)
            continue
        if f.name not in view_cls.__cli_flags__:
            continue
        flag = view_cls.__cli_flags__[f.name]
        if hints[f.name] in (bool, bool | None):  # bool | None: None is spelled by leaving the flag out
            if v is not None:
                out.append(flag if v else "--no-" + flag[2:])
            continue
        if f.name in view_cls.__cli_spaced__:
            out += [flag, *map(str, v)] if v is not None else []
            continue
        text = "none" if v is None else ",".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)
        if f.name in view_cls.__cli_positional__:
            pos.append(text)
        else:
            out += [flag, text]
    return pos + out


def test_a_parsed_command_line_round_trips_to_its_configs(tmp_path, monkeypatch):
    # the paths the flags name exist (they are checked before a command runs): a data folder with
    # the split's folder, a memory file
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d" / "json_2.1.1" / "valid_train").mkdir(parents=True)
    (tmp_path / "d" / "json_2.1.1" / "valid_seen").mkdir(parents=True)
    (tmp_path / "m.json").write_text("{}")
    from metacog_fast.alfworld.config import AgentConfig as AWAgent, PretrainConfig, RunConfig as AWRun
    from metacog_fast.experience.config import ExperienceConfig
    from metacog_fast.experience.protocols import ProtocolConfig
    from metacog_fast.town.generative import AgentConfig as GenAgent, Features
    from metacog_fast.scienceworld.runner import RunConfig as SWRun
    from metacog_fast.alfworld.finetune.sft import SFTConfig
    from metacog_fast.runs.config import ExecutorConfig
    from metacog_fast.town.jobs import AblationOptions, SimLLMOptions
    from metacog_fast.town.runner import RunOptions
    from metacog_fast.metaworld.train.assess import AssessConfig
    from metacog_fast.metaworld.train.jobs import AdaptJob, TrainJob

    agent = AWAgent(max_steps=7, map_actions="choose", rollout_temperature=0.25, seed=3)
    cases: dict[str, dict[str, Any]] = {  # {command: {field of its command dataclass: configuration}}
        "run alfworld": {"run": AWRun(agent="fcrf", tasks=3, test_episodes=2, adapt_episodes=0, n_ctx=4096,
                                      llm="http://h:1/v1", data="d", incremental_steps=7, agent_config=agent),
                         "executor": ExecutorConfig(executor="ray://head:10001", max_retries=0, cpus_per_task=2.0,
                                                    progress=False)},
        "pretrain alfworld": {"pretrain": PretrainConfig(tasks=2, episodes=1, expert_positives=False, epochs=4,
                                                         train_only=True),
                              "run": AWRun(agent="reflexion", llm="http://x/v1", n_threads=2, n_ctx=2048, workers=2,
                                           agent_config=AWAgent(examples=0)),
                              "executor": ExecutorConfig(executor="process")},
        "run scienceworld": {"run": SWRun(configs=["srm", "full"], tasks=[0, 3, 5], budget_factor=0.0, swift="llm-ranker",
                                          memory_embed="minilm", warmup_per_task=0), "executor": ExecutorConfig()},
        "learn": {"run": ProtocolConfig(env="scienceworld", games=["boil:0", "melt:1"], baseline=False,
                                        llm_uri="http://x/v1", n_threads=2, iterations=2, memory_in="m.json", out="o"),
                  "experience": ExperienceConfig(show_strategic=False, action_shortlist=0, action_grounding="embed",
                                                 loop_breaking=False, retire_failure_rate=0.5),
                  "executor": ExecutorConfig(workers=2, executor="ray")},
        "sim": {"run": RunOptions(scenario="party", agents=4, step_budget=1.5, judge=False),
                "llm": SimLLMOptions(llm_threads=2), "agent": GenAgent(progress_every=2, reflect_threshold=10.0),
                "features": Features(metacognition=False, planning=False)},
        "sim ablate": {"run": RunOptions(steps=3), "llm": SimLLMOptions(llm="http://x/v1"), "agent": GenAgent(),
                       "ablation": AblationOptions(configs=("all", "none"), runs=1),
                       "executor": ExecutorConfig(workers=None, executor="process")},
        "train metaworld": {"job": TrainJob(profile="smoke", agent="muse", seed=3, sr_z="posterior", threads=2),
                            "executor": ExecutorConfig(executor="process", workers=2, progress=False)},
        "adapt metaworld": {"job": AdaptJob(checkpoint="r/pretrained", agent="dreamer", profile=None, out="o"),
                            "executor": ExecutorConfig()},
        "train assess": {"assess": AssessConfig(checkpoint=("a", "b.safetensors"), names=("x", "y"), out="o.json",
                                                novel=True, tasks="reach-v3,push-v3", roc="r.png")},
        "finetune sft": {"config": SFTConfig(epochs=2.0, learning_rate=5e-4, sources=("alfworld_expert",),
                                             max_examples=None)},
    }
    for command, objs in cases.items():
        leaf = _leaf(command.split())
        target = leaf.get_default("cli_target")
        hints = typing.get_type_hints(target)
        argv = [w for name, obj in objs.items() for w in _words(hints[name], obj)]
        if command.startswith(("run", "pretrain")):
            argv += ["--out", "o"]
        if command == "finetune sft":
            argv += ["--data-dir", "d", "--out", "o"]
        a = leaf.parse_args(argv)
        if command == "pretrain alfworld":
            from metacog_fast.alfworld.cli import pretrain_configs

            pc, run = pretrain_configs(a)
            assert (pc, run, build(parse(a).executor)) == tuple(objs.values()), command
            continue
        cmd = parse(a)
        assert {name: build(getattr(cmd, name)) for name in objs} == objs, command


def test_defaults_on_the_command_line_are_the_dataclass_defaults():
    from metacog_fast.alfworld.config import AgentConfig, RunConfig
    from metacog_fast.experience.config import ExperienceConfig
    from metacog_fast.experience.protocols import ProtocolConfig
    from metacog_fast.scienceworld.runner import RunConfig as SWRun
    from metacog_fast.alfworld import cli as alfworld
    from metacog_fast.experience import cli as experience

    a = _leaf(["run", "alfworld"]).parse_args(["--agent", "react", "--out", "o"])
    assert alfworld.run_config(a) == RunConfig(agent="react", agent_config=AgentConfig())
    s = _leaf(["run", "scienceworld"]).parse_args(["--out", "o"])
    assert build(parse(s).run) == SWRun()
    e = _leaf(["learn"]).parse_args(["alfworld"])
    cfg, exp, _, protocol = experience.learn_configs(e)
    assert cfg == dataclasses.replace(ProtocolConfig(), split="valid_seen") and protocol == "continuous"
    assert build(parse(e).run) == ProtocolConfig() and exp == ExperienceConfig()


# ----------------------------------------------------------------------------------- old spellings

LEGACY_FLAGS = {  # every flag of every command before the move (and of ``python -m metacog_fast.metaworld.train.cli assess``)
    "adapt metaworld": "--agent --backend --checkpoint --no-progress --out --profile --run-dir --seed --sr-z --threads",
    "finetune data": "--data --episode-runs --episode-splits --games-dir --max-games --out --split --workers",
    "finetune dpo": "--base --batch-size --beta --epochs --learning-rate --lora-alpha --lora-r --max-length "
                    "--micro-batch-size --out --pairs-dir --precision --save-steps --seed --threads",
    "finetune eval": "--episodes --examples --llm --map-actions --max-steps --n-threads --out --seed --split --tasks --workers",
    "finetune export": "--checkpoint --format --merged-type --name --out --which",
    "finetune reflections": "--actor --examples --games --max-steps --n-threads --out --reflections --reflector --seed "
                            "--split --temperature",
    "finetune sft": "--base --batch-size --data-dir --device --epochs --examples --learning-rate --logits --lora-alpha "
                    "--lora-r --loss --max-examples --max-length --max-tokens --method --micro-batch-size --out "
                    "--precision --save-steps --seed --sources --threads",
    "info": "--deep --json",
    "learn": "--embedder --episode-actions --games --grounding --hide-strategic --iterations --llm --memory-in "
             "--no-baseline --no-loop-breaking --no-subtask-commands --out --protocol --shortlist --split "
             "--subtask-actions --threads",
    "pretrain alfworld": "--data --episodes --epochs --examples --fewshot --llm --map-actions --max-steps --n-ctx "
                         "--n-threads --no-expert-positives --out --rollout-max-tokens --rollouts --seed --split "
                         "--tasks --train-only --workers",
    "report alfworld": "--out",
    "report scienceworld": "--all-episodes --out",
    "run alfworld": "--adapt-episodes --agent --data --episodes --examples --fewshot --llm --map-actions --max-steps "
                    "--n-ctx --n-threads --out --rollout-max-tokens --rollouts --scorer --seed --split --tasks "
                    "--test-episodes --workers",
    "run scienceworld": "--budget-factor --config --llm --max-steps --memory-embed --n-threads --out --swift --tasks "
                        "--train-variations --variations --warmup --workers",
    "sim": "--agents --llm --llm-threads --max-llm-calls --no-judge --no-memory --no-metacognition --no-planning "
           "--no-reflection --out --progress-every --scenario --seed --step-budget --steps --world",
    "sim ablate": "--agents --configs --llm --llm-threads --max-llm-calls --no-judge --out --progress-every --runs "
                  "--scenario --seed --step-budget --steps --world",
    "train metaworld": "--agent --backend --no-progress --out --profile --run-dir --seed --sr-z --threads",
    "train assess": "--backend --checkpoint --episodes-per-task --names --novel --out --roc --seed --tasks --threads",
    "report scienceworld-swift": "--max-steps --out --tasks",  # was python -m metacog_fast.scienceworld.swift_eval
}


def test_every_old_flag_spelling_still_exists():
    for command, flags in LEGACY_FLAGS.items():
        have = _leaf(command.split()).get_default("cli_target") and _leaf(command.split()).cli_spellings
        have = set(have or ()) | {s for a in _leaf(command.split())._actions for s in a.option_strings}
        missing = set(flags.split()) - have
        assert not missing, (command, sorted(missing))


def test_the_background_finetune_pipeline_command_lines_parse_to_their_configs():
    from metacog_fast.alfworld.finetune.evaluate import EvalConfig
    from metacog_fast.finetune.export import ExportConfig
    from metacog_fast.alfworld.finetune.reflections import ReflectionDataConfig
    from metacog_fast.alfworld.finetune.sft import SFTConfig

    def cmd(words: str, argv: str) -> Any:
        return parse(_leaf(words.split()).parse_args(argv.split()))

    c = cmd("finetune sft", "--data-dir D --out O --epochs 2 --learning-rate 5e-4")
    assert (c.data_dir, c.out) == (("D",), "O")
    assert build(c.config) == SFTConfig(epochs=2.0, learning_rate=5e-4)
    assert cmd("finetune sft", "--data-dir D1 D2 --out O").data_dir == ("D1", "D2")  # the union of two datasets
    from metacog_fast.alfworld.finetune.dagger import DaggerConfig
    from metacog_fast.alfworld.finetune.evaluate import ExpertEvalConfig

    c = cmd("finetune dagger", "--out O --actor finetuned:alfworld-search --max-games 60 --beta 0.3")
    assert build(c.config) == DaggerConfig(actor="finetuned:alfworld-search", max_games=60, beta=0.3)
    assert build(cmd("finetune expert-eval", "--out O --tasks 12").config) == ExpertEvalConfig(tasks=12)
    c = cmd("finetune export", "--checkpoint C --out O --name alfworld-full")
    assert c.checkpoint == "C" and build(c.config) == ExportConfig(name="alfworld-full")
    c = cmd("finetune eval", "--llm finetuned:alfworld-full --out O --tasks 60 --workers 2")
    assert build(c.config) == EvalConfig(llm="finetuned:alfworld-full", tasks=60, workers=2)
    c = cmd("finetune eval", "--llm finetuned:alfworld --out O --tasks 60 --map-actions embed")
    assert build(c.config).map_actions == "embed"
    c = cmd("finetune reflections", "--out O --actor finetuned:alfworld-full --games 60")
    assert build(c.config) == ReflectionDataConfig(actor="finetuned:alfworld-full", games=60)
    a = _leaf(["finetune", "compare"]).parse_args(["A", "B"])
    assert (a.a, a.b) == ("A", "B")


def test_old_spellings_reach_the_same_fields():
    from metacog_fast.alfworld import cli as alfworld
    from metacog_fast.experience import cli as experience

    a = _leaf(["learn"]).parse_args(
        "alfworld --episode-actions 30 --subtask-actions 9 --grounding embed --shortlist 0 --no-subtask-commands "
        "--hide-strategic --no-loop-breaking --threads 2 --llm http://x/v1 --no-baseline".split())
    pc, exp, _, _ = experience.learn_configs(a)
    assert (exp.episode_action_cap, exp.subtask_action_cap, exp.action_grounding, exp.action_shortlist) == (30, 9, "embed", 0)
    assert (exp.subtask_as_command, exp.show_strategic, exp.loop_breaking) == (False, False, False)
    assert (pc.n_threads, pc.llm_uri, pc.baseline) == (2, "http://x/v1", False)
    s = _leaf(["run", "scienceworld"]).parse_args("--config srm --warmup 1 --tasks 0-2,7 --out o".split())
    sw = build(parse(s).run)
    assert (sw.configs, sw.warmup_per_task, sw.tasks) == (["srm"], 1, [0, 1, 2, 7])
    r = _leaf(["run", "alfworld"]).parse_args("--agent react --episodes 3 --out o".split())
    assert alfworld.run_config(r).test_episodes == 3
    p = _leaf(["pretrain", "alfworld"]).parse_args("--no-expert-positives --train-only --out o".split())
    pc2, _ = alfworld.pretrain_configs(p)
    assert (pc2.expert_positives, pc2.train_only) == (False, True)
    for argv, want in (("--out o", False), ("--expert-positives --out o", True)):  # off unless asked for
        pc3, _ = alfworld.pretrain_configs(_leaf(["pretrain", "alfworld"]).parse_args(argv.split()))
        assert pc3.expert_positives is want
    t = parse(_leaf(["train", "metaworld"]).parse_args("--no-progress --sr-z posterior --threads 2 --profile smoke".split()))
    job = build(t.job)
    assert (job.sr_z, job.threads, job.profile) == ("posterior", 2, "smoke")
    assert build(t.executor).progress is False
    m = parse(_leaf(["sim"]).parse_args("--no-judge --no-memory --llm-threads 2 --progress-every 3".split()))
    assert build(m.run).judge is False and build(m.features).memory is False
    s2 = parse(_leaf(["train", "assess"]).parse_args("--checkpoint A B --names a b --out o".split()))
    assert build(s2.assess).checkpoint == ("A", "B")
    d = _leaf(["demo"]).parse_args("--envs metaworld --alfworld-games 2 --metaworld-steps 20 --no-progress".split())
    from metacog_fast.cli import demo

    o = demo.options(d)
    assert (o.parts, o.alfworld_games, o.metaworld_steps, o.no_progress) == ("metaworld", 2, 20, True)


# ------------------------------------------------------------------------------------- bad values

@pytest.mark.parametrize("argv, flag, words", [
    (["run", "alfworld", "--agent", "nope", "--out", "o"], "--agent", "Expected one of ('react', 'reflexion'"),
    (["run", "alfworld", "--agent", "react", "--out", "o", "--max-steps", "abc"], "--max-steps", "'abc'"),
    (["run", "alfworld", "--agent", "react", "--out", "o", "--map-actions", "guess"], "--map-actions",
     "Expected one of ('embed', 'choose', 'none')"),
    (["run", "alfworld", "--agent", "react"], "--out", "required"),
    (["run", "scienceworld", "--out", "o", "--tasks", "0-40"], "--tasks", "0..29"),
    (["run", "scienceworld", "--out", "o", "--budget-factor", "x"], "--budget-factor", "'x'"),
    (["learn", "chess"], "env", "Expected one of ('alfworld', 'scienceworld')"),
    (["train", "metaworld", "--profile", "huge"], "--profile", "Expected one of ('cpu', 'smoke', 'paper')"),
    (["adapt", "metaworld", "--checkpoint", "c", "--profile", "huge"], "--profile", "expected one of cpu, smoke, paper"),
    (["train", "assess", "--out", "o"], "--checkpoint", "required"),
    (["finetune", "sft", "--data-dir", "d", "--out", "o", "--epochs", "two"], "--epochs", "'two'"),
    (["sim", "--agents", "many"], "--agents", "expected an integer"),
    (["demo", "--metaworld-tasks", "0"], "--metaworld-tasks", "expected an integer >= 1"),
])
def test_a_bad_value_is_an_error_naming_the_flag(argv, flag, words, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = _plain(capsys.readouterr().err)
    assert flag in err and words in err, err
    assert not list(tmp_path.iterdir())  # nothing ran


@pytest.mark.parametrize("argv, flag", [
    (["run", "alfworld", "--agent", "muse", "--out", "o"], "--scorer"),  # MUSE needs a pre-deployment scorer
    (["run", "alfworld", "--agent", "react", "--out", "o", "--n-ctx", "100"], "--n-ctx"),
    (["run", "alfworld", "--agent", "react", "--out", "o", "--executor", "cluster"], "--executor"),
    (["run", "scienceworld", "--out", "o", "--config", "best"], "--configs"),
    (["run", "scienceworld", "--out", "o", "--variations", "0"], "--variations"),
    (["learn", "alfworld", "--games", "5-2"], "--games"),
    (["learn", "alfworld", "--iterations", "0"], "--iterations"),
    (["learn", "alfworld", "--grounding", "choice", "--shortlist", "-1"], "--action-shortlist"),
    (["train", "assess", "--checkpoint", "a", "--names", "x", "y", "--out", "o"], "--names"),
    (["sim", "ablate", "--configs", "all,most"], "--configs"),
    (["finetune", "sft", "--data-dir", "d", "--out", "o", "--method", "magic"], "--method"),
])
def test_a_value_the_config_rejects_is_an_error_naming_the_flag(argv, flag, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2  # rejected while the configuration is built: nothing ran, nothing written
    err = capsys.readouterr().err
    assert flag in err and "error" in err, err
    assert not list(tmp_path.iterdir())


# ------------------------------------------------------------------------------------ the adapter

@dataclasses.dataclass
class _Toy:
    """A dataclass with every kind of field the adapter handles."""

    name: str
    """Required: no default."""
    mode: typing.Literal["fast", "slow"] = "fast"
    """A Literal: its values are the choices."""
    count: int = 3
    """An int, 50% of the time."""
    rate: float | None = None
    """Optional: the word none gives None."""
    tags: tuple[str, ...] = ("a", "b")
    """Comma-separated."""
    ids: list[int] = dataclasses.field(default_factory=lambda: [1])
    """Comma-separated ints."""
    on: bool = True
    """A switch."""
    pick: bool | None = None
    """A switch that may be left unset."""

    def validate(self) -> "_Toy":
        if self.count < 0:
            raise ValueError(f"count: expected >= 0, got {self.count}")
        return self


def _toy(toy_view: type, argv: str) -> Any:
    """The view instance ``argv`` spells, through an argparse parser as ``metacog`` builds one."""
    command = dataclasses.make_dataclass("ToyCommand", [("toy", toy_view)])
    p = argparse.ArgumentParser(prog="toy")
    add_command(p, command)
    return parse(p.parse_args(argv.split())).toy


def test_adapter_types_defaults_help_and_errors(capsys):
    toy = view(_Toy, aliases={"count": ("-n",)}, negations={"on": ("--off",)})
    assert build(_toy(toy, "--name x")) == _Toy(name="x")
    got = build(_toy(toy, "--name x --mode slow -n 5 --rate 0.5 --tags c --ids 4,5 --no-on --pick"))
    assert got == _Toy("x", "slow", 5, 0.5, ("c",), [4, 5], False, True)
    assert build(_toy(toy, "--name x --rate none --off --no-pick")) == _Toy("x", on=False, pick=False)
    with pytest.raises(SystemExit) as exc:
        _toy(toy, "--help")
    assert exc.value.code == 0
    text = _plain(capsys.readouterr().out)
    assert "An int, 50% of the time. (default: 3)" in text and "--mode {fast,slow}" in text
    assert "Required: no default. (required)" in text and "(default: a,b)" in text and "(default: none)" in text
    with pytest.raises(SystemExit):
        _toy(toy, "--name x --rate fast")
    assert "expected a number, got 'fast'" in _plain(capsys.readouterr().err)
    with pytest.raises(ConfigError, match="--count"):
        build(_toy(toy, "--name x --count -1"))
    with pytest.raises(TypeError, match="not a field"):
        view(_Toy, aliases={"cnt": ("-c",)})


def test_adapter_names_skip_only_positional_and_spaced():
    toy = view(_Toy, names={"tags": "toy_tags", "count": "toy_count"}, skip=("ids",), positional=("name",),
               spaced=("tags",))
    assert build(_toy(toy, "x --toy-tags p q --toy-count 0")) == _Toy("x", count=0, tags=("p", "q"))
    with pytest.raises(SystemExit):
        _toy(toy, "x --ids 3")  # skipped: no flag
    only = view(_Toy, only=("name", "on"))
    assert build(_toy(only, "--name y")) == _Toy("y")


# ------------------------------------------------------------------------------------- a real run
def test_a_tiny_sim_ablation_runs_from_the_command_line_with_its_flags(tmp_path, capsys):
    """``metacog sim ablate`` end to end on the embedded model: the flags reach the run folder's snapshot."""
    import json

    out = tmp_path / "abl"
    rc = main(["sim", "ablate", "--agents", "2", "--steps", "1", "--runs", "1", "--configs", "none", "--no-judge",
               "--retrieve-k", "3", "--executor", "inline", "--out", str(out)])
    assert rc == 0
    snap = json.loads((out / "config.json").read_text())["config"]
    assert (snap["opts"]["agents"], snap["opts"]["steps"], snap["opts"]["judge"]) == (2, 1, False)
    assert snap["agent_config"]["retrieve_k"] == 3
    doc = json.loads((out / "ablation.json").read_text())
    assert list(doc["table"]) == ["none"] and (doc["agents"], doc["steps"], doc["runs"]) == (2, 1, 1)
    assert "| none | none | 1 |" in capsys.readouterr().out


def test_smoke_train_then_adapt_from_the_command_line(tmp_path, capsys):
    """``metacog train metaworld --profile smoke`` and ``metacog adapt metaworld`` from its checkpoint,
    through the harness; a second ``train`` resumes the finished run and reports the same results."""
    pytest.importorskip("metaworld")
    import json

    run, out = tmp_path / "run", tmp_path / "report"
    argv = ["train", "metaworld", "--profile", "smoke", "--agent", "muse", "--seed", "2", "--executor", "inline",
            "--run-dir", str(run), "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    snap = json.loads((run / "muse" / "config.json").read_text())["config"]
    assert (snap["profile"], snap["agent"], snap["seed"]) == ("smoke", "muse", 2)
    first = json.loads((out / "results.json").read_text())
    assert main(argv[:-3] + ["--out", str(tmp_path / "again"), "--no-progress"]) == 0
    assert json.loads((tmp_path / "again" / "results.json").read_text()) == first
    assert main(["adapt", "metaworld", "--checkpoint", str(run / "muse" / "pretrained"), "--sr-z", "posterior",
                 "--seed", "2", "--no-progress"]) == 0
    adapted = json.loads((run / "muse" / "adapt_muse" / "config.json").read_text())["config"]
    assert adapted["act"]["sr_z"] == "posterior" and adapted["profile"] == "smoke"
    assert (run / "muse" / "adapt_muse" / "report" / "table1.md").is_file()
    assert "MUSE" in capsys.readouterr().out


def test_flags_before_a_subcommand_are_kept():
    """``metacog sim --agents 3 ablate`` ran the scenario's 5 agents: argparse let the subcommand's
    defaults overwrite the flags given before it."""
    p = build_parser("sim")

    def ablate(argv: str) -> Any:
        return parse(p.parse_args(argv.split()))

    c = ablate("sim --agents 3 --steps 6 --progress-every 3 ablate --runs 2")
    assert (c.run.agents, c.run.steps, c.agent.progress_every, c.ablation.runs, c.out) == (3, 6, 3, 2, "results/sim")
    assert ablate("sim --agents 3 ablate --agents 4").run.agents == 4  # the later one wins
    c = ablate("sim ablate --agents 3")
    assert (c.run.agents, c.agent.progress_every) == (3, 4)
    assert ablate("sim --no-memory ablate").run.agents is None  # a flag of sim alone does not reach ablate
