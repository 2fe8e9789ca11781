"""The one CLI: every command answers ``--help`` from ``metacog``, every generated flag's default is
its dataclass default, a command line round-trips to the configuration it spells, every spelling
users typed before the move still parses, and bad values get an argparse error naming the flag."""
from __future__ import annotations

import argparse
import dataclasses
import typing
from typing import Any

import pytest

from metacog_fast.cli.commands import COMMANDS
from metacog_fast.cli.dataclass_args import ConfigError, Flags, config_from_args, field_default
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


def _specs() -> dict[str, tuple[Flags, ...]]:
    """{command: the Flags it is built from} (imported here, as main imports them when chosen)."""
    from metacog_fast.alfworld import cli as alfworld
    from metacog_fast.experience import cli as experience
    from metacog_fast.metaworld import cli as train
    from metacog_fast.scienceworld import cli as scienceworld
    from metacog_fast.town import cli as sim
    from metacog_fast.cli.executor import EXECUTOR_FLAGS, EXECUTOR_WORKERS_FLAGS
    from metacog_fast.alfworld.finetune.data import DataConfig
    from metacog_fast.alfworld.finetune.dpo import DPOTrainConfig
    from metacog_fast.alfworld.finetune.evaluate import EvalConfig
    from metacog_fast.finetune.export import ExportConfig
    from metacog_fast.alfworld.finetune.reflections import ReflectionDataConfig
    from metacog_fast.alfworld.finetune.scorer import ScorerFitConfig
    from metacog_fast.alfworld.finetune.sft import SFTConfig

    return {
        "run alfworld": (alfworld.RUN_FLAGS, alfworld.AGENT_FLAGS, EXECUTOR_FLAGS),
        "pretrain alfworld": (alfworld.PRETRAIN_FLAGS, alfworld.PRETRAIN_LLM_FLAGS, alfworld.AGENT_FLAGS, EXECUTOR_FLAGS),
        "run scienceworld": (scienceworld.run_flags(), EXECUTOR_FLAGS),
        "learn": (experience.protocol_flags(), experience.EXPERIENCE_FLAGS, EXECUTOR_WORKERS_FLAGS),
        "sim": (*sim.RUN_FLAGS, sim.FEATURE_FLAGS),
        "sim ablate": (*sim.RUN_FLAGS, sim.ABLATION_FLAGS, EXECUTOR_WORKERS_FLAGS),
        "train metaworld": (train.TRAIN_FLAGS, EXECUTOR_WORKERS_FLAGS),
        "adapt metaworld": (train.ADAPT_FLAGS, EXECUTOR_WORKERS_FLAGS),
        "train assess": (train.ASSESS_FLAGS,),
        "report scienceworld-swift": (scienceworld.swift_eval_flags(),),
        "finetune data": (Flags(DataConfig),),
        "finetune sft": (Flags(SFTConfig),),
        "finetune export": (Flags(ExportConfig),),
        "finetune eval": (Flags(EvalConfig),),
        "finetune reflections": (Flags(ReflectionDataConfig),),
        "finetune dpo": (Flags(DPOTrainConfig),),
        "finetune scorer": (Flags(ScorerFitConfig),),
    }


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


def test_top_level_help_lists_every_command_without_importing_them():
    import subprocess
    import sys

    code = ("import sys; from metacog_fast.cli.main import build_parser; h = build_parser().format_help(); "
            "from metacog_fast.cli.commands import top_level; print(all(w in h for w in top_level())); "
            "print(sorted(m for m in sys.modules if m.startswith('metacog_fast.') and m.split('.')[1] in "
            "('agents', 'sim', 'train', 'finetune', 'runs')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["True", "[]"]


# --------------------------------------------------------------------------------------- defaults

def test_every_generated_flag_defaults_to_its_dataclass_default():
    checked = 0
    for command, specs in _specs().items():
        actions = {s: a for a in _leaf(command.split())._actions for s in a.option_strings}
        for spec in specs:
            for f in spec.fields():
                if f.name in spec.positional:
                    continue
                action = actions[spec.flag(f.name)]
                expected = field_default(f)
                if expected is dataclasses.MISSING or f.name in spec.required:
                    assert action.required, (command, f.name)
                else:
                    assert action.default == expected, (command, f.name, action.default, expected)
                    assert not action.required
                for alias in spec.aliases.get(f.name, ()):
                    assert actions[alias] is action, (command, alias)
                checked += 1
    assert checked > 150


def test_help_text_is_the_field_docstring_and_shows_the_default(capsys):
    with pytest.raises(SystemExit):
        main(["run", "alfworld", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "Environment steps per episode (docs/design.md: 50). Think lines do not count as steps. (default 50)" in out
    assert "--test-episodes TEST_EPISODES, --episodes TEST_EPISODES" in out
    assert "--agent {react,reflexion,muse,muse-lowest,muse-random,fcrf}" in out and "(required)" in out


# -------------------------------------------------------------------------------------- round trip

def _words(spec: Flags, obj: Any) -> list[str]:
    """The command line that spells ``obj`` (every field of ``spec``)."""
    hints = typing.get_type_hints(spec.cls)
    pos: list[str] = []
    out: list[str] = []
    for f in spec.fields():
        v = getattr(obj, f.name)
        if hints[f.name] in (bool, bool | None):  # bool | None: None is spelled by leaving the flag out
            if v is not None:
                out.append(spec.flag(f.name) if v else "--no-" + spec.flag(f.name)[2:])
            continue
        if f.name in spec.nargs:
            out += [spec.flag(f.name), *map(str, v)] if v is not None else []
            continue
        text = "none" if v is None else ",".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)
        (pos if f.name in spec.positional else out).extend([text] if f.name in spec.positional else [spec.flag(f.name), text])
    return pos + out


def _built(command: str, a: argparse.Namespace) -> tuple[Any, ...]:
    """The configs a command builds from its namespace (as its ``func`` does)."""
    from metacog_fast.alfworld import cli as alfworld

    specs = _specs()[command]
    if command == "run alfworld":
        return (alfworld.run_config(a), *(config_from_args(s, a) for s in specs[1:]))
    if command == "pretrain alfworld":
        return (config_from_args(specs[0], a), alfworld._pretrain_run(a), *(config_from_args(s, a) for s in specs[2:]))
    return tuple(config_from_args(s, a) for s in specs)


def test_a_parsed_command_line_round_trips_to_its_configs():
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
    cases: dict[str, tuple[Any, ...]] = {
        "run alfworld": (AWRun(agent="fcrf", tasks=3, test_episodes=2, adapt_episodes=0, n_ctx=4096, llm="http://h:1/v1",
                               data="d", incremental_steps=7, agent_config=agent), agent,
                         ExecutorConfig(executor="ray://head:10001", max_retries=0, cpus_per_task=2.0, progress=False)),
        "pretrain alfworld": (PretrainConfig(tasks=2, episodes=1, expert_positives=False, epochs=4, train_only=True),
                              AWRun(agent="reflexion", llm="x", n_threads=2, n_ctx=2048, workers=2),
                              AWAgent(examples=0), ExecutorConfig(executor="process")),
        "run scienceworld": (SWRun(configs=["srm", "full"], tasks=[0, 3, 5], budget_factor=0.0, swift="llm-ranker",
                                   memory_embed="minilm", warmup_per_task=0), ExecutorConfig()),
        "learn": (ProtocolConfig(env="scienceworld", games=["boil:0", "melt:1"], baseline=False, llm_uri="http://x/v1",
                                 n_threads=2, iterations=2, memory_in="m.json", out="o"),
                  ExperienceConfig(show_strategic=False, action_shortlist=0, action_grounding="embed", loop_breaking=False,
                                   retire_failure_rate=0.5), ExecutorConfig(workers=2, executor="ray")),
        "sim": (RunOptions(scenario="party", agents=4, step_budget=1.5, judge=False), SimLLMOptions(llm_threads=2),
                GenAgent(progress_every=2, reflect_threshold=10.0), Features(metacognition=False, planning=False)),
        "sim ablate": (RunOptions(steps=3), SimLLMOptions(llm="http://x/v1"), GenAgent(),
                       AblationOptions(configs=("all", "none"), runs=1), ExecutorConfig(workers=None, executor="process")),
        "train metaworld": (TrainJob(profile="smoke", agent="muse", seed=3, sr_z="posterior", threads=2),
                            ExecutorConfig(executor="process", workers=2, progress=False)),
        "adapt metaworld": (AdaptJob(checkpoint="r/pretrained", agent="dreamer", profile=None, out="o"), ExecutorConfig()),
        "train assess": (AssessConfig(checkpoint=("a", "b.safetensors"), names=("x", "y"), out="o.json", novel=True,
                                      tasks="reach-v3,push-v3", roc="r.png"),),
        "finetune sft": (SFTConfig(epochs=2.0, learning_rate=5e-4, sources=("alfworld_expert",), max_examples=None),),
    }
    specs = _specs()
    for command, objs in cases.items():
        argv = [w for s, o in zip(specs[command], objs) for w in _words(s, o)]
        if command.startswith(("run", "pretrain")):
            argv += ["--out", "o"]
        if command == "finetune sft":
            argv += ["--data-dir", "d", "--out", "o"]
        assert _built(command, _leaf(command.split()).parse_args(argv)) == objs, command


def test_defaults_on_the_command_line_are_the_dataclass_defaults():
    from metacog_fast.alfworld.config import AgentConfig, RunConfig
    from metacog_fast.experience.config import ExperienceConfig
    from metacog_fast.experience.protocols import ProtocolConfig
    from metacog_fast.scienceworld.runner import RunConfig as SWRun
    from metacog_fast.alfworld import cli as alfworld
    from metacog_fast.experience import cli as experience
    from metacog_fast.scienceworld import cli as scienceworld

    a = _leaf(["run", "alfworld"]).parse_args(["--agent", "react", "--out", "o"])
    assert alfworld.run_config(a) == RunConfig(agent="react", agent_config=AgentConfig())
    s = _leaf(["run", "scienceworld"]).parse_args(["--out", "o"])
    assert config_from_args(scienceworld.run_flags(), s) == SWRun()
    e = _leaf(["learn"]).parse_args(["alfworld"])
    assert config_from_args(experience.protocol_flags(), e) == ProtocolConfig()
    assert config_from_args(experience.EXPERIENCE_FLAGS, e) == ExperienceConfig()


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
        have = {s for a in _leaf(command.split())._actions for s in a.option_strings}
        missing = set(flags.split()) - have
        assert not missing, (command, sorted(missing))


def test_the_background_finetune_pipeline_command_lines_parse_to_their_configs():
    from metacog_fast.alfworld.finetune.evaluate import EvalConfig
    from metacog_fast.finetune.export import ExportConfig
    from metacog_fast.alfworld.finetune.reflections import ReflectionDataConfig
    from metacog_fast.alfworld.finetune.sft import SFTConfig

    a = _leaf(["finetune", "sft"]).parse_args("--data-dir D --out O --epochs 2 --learning-rate 5e-4".split())
    assert (a.data_dir, a.out) == (["D"], "O")
    assert config_from_args(Flags(SFTConfig), a) == SFTConfig(epochs=2.0, learning_rate=5e-4)
    a = _leaf(["finetune", "sft"]).parse_args("--data-dir D1 D2 --out O".split())  # the union of two datasets
    assert a.data_dir == ["D1", "D2"]
    from metacog_fast.alfworld.finetune.dagger import DaggerConfig
    from metacog_fast.alfworld.finetune.evaluate import ExpertEvalConfig

    a = _leaf(["finetune", "dagger"]).parse_args("--out O --actor finetuned:alfworld-search --max-games 60 --beta 0.3".split())
    assert config_from_args(Flags(DaggerConfig), a) == DaggerConfig(actor="finetuned:alfworld-search", max_games=60, beta=0.3)
    a = _leaf(["finetune", "expert-eval"]).parse_args("--out O --tasks 12".split())
    assert config_from_args(Flags(ExpertEvalConfig), a) == ExpertEvalConfig(tasks=12)
    a = _leaf(["finetune", "export"]).parse_args("--checkpoint C --out O --name alfworld-full".split())
    assert a.checkpoint == "C" and config_from_args(Flags(ExportConfig), a) == ExportConfig(name="alfworld-full")
    a = _leaf(["finetune", "eval"]).parse_args("--llm finetuned:alfworld-full --out O --tasks 60 --workers 2".split())
    assert config_from_args(Flags(EvalConfig), a) == EvalConfig(llm="finetuned:alfworld-full", tasks=60, workers=2)
    a = _leaf(["finetune", "eval"]).parse_args("--llm finetuned:alfworld --out O --tasks 60 --map-actions embed".split())
    assert config_from_args(Flags(EvalConfig), a).map_actions == "embed"
    a = _leaf(["finetune", "reflections"]).parse_args("--out O --actor finetuned:alfworld-full --games 60".split())
    assert config_from_args(Flags(ReflectionDataConfig), a) == ReflectionDataConfig(actor="finetuned:alfworld-full", games=60)
    a = _leaf(["finetune", "compare"]).parse_args(["A", "B"])
    assert (a.a, a.b) == ("A", "B")


def test_old_spellings_reach_the_same_fields():
    from metacog_fast.alfworld import cli as alfworld
    from metacog_fast.experience import cli as experience
    from metacog_fast.metaworld import cli as train
    from metacog_fast.scienceworld import cli as scienceworld
    from metacog_fast.town import cli as sim
    from metacog_fast.cli.executor import EXECUTOR_WORKERS_FLAGS

    a = _leaf(["learn"]).parse_args(
        "alfworld --episode-actions 30 --subtask-actions 9 --grounding embed --shortlist 0 --no-subtask-commands "
        "--hide-strategic --no-loop-breaking --threads 2 --llm http://x/v1 --no-baseline".split())
    exp = config_from_args(experience.EXPERIENCE_FLAGS, a)
    assert (exp.episode_action_cap, exp.subtask_action_cap, exp.action_grounding, exp.action_shortlist) == (30, 9, "embed", 0)
    assert (exp.subtask_as_command, exp.show_strategic, exp.loop_breaking) == (False, False, False)
    pc = config_from_args(experience.protocol_flags(), a)
    assert (pc.n_threads, pc.llm_uri, pc.baseline) == (2, "http://x/v1", False)
    s = _leaf(["run", "scienceworld"]).parse_args("--config srm --warmup 1 --tasks 0-2,7 --out o".split())
    sw = config_from_args(scienceworld.run_flags(), s)
    assert (sw.configs, sw.warmup_per_task, sw.tasks) == (["srm"], 1, [0, 1, 2, 7])
    r = _leaf(["run", "alfworld"]).parse_args("--agent react --episodes 3 --out o".split())
    assert alfworld.run_config(r).test_episodes == 3
    p = _leaf(["pretrain", "alfworld"]).parse_args("--no-expert-positives --train-only --out o".split())
    pc2 = config_from_args(alfworld.PRETRAIN_FLAGS, p)
    assert (pc2.expert_positives, pc2.train_only) == (False, True)
    for argv, want in (("--out o", False), ("--expert-positives --out o", True)):  # off unless asked for
        pc3 = config_from_args(alfworld.PRETRAIN_FLAGS, _leaf(["pretrain", "alfworld"]).parse_args(argv.split()))
        assert pc3.expert_positives is want
    t = _leaf(["train", "metaworld"]).parse_args("--no-progress --sr-z posterior --threads 2 --profile smoke".split())
    job = config_from_args(train.TRAIN_FLAGS, t)
    assert (job.sr_z, job.threads, job.profile) == ("posterior", 2, "smoke")
    assert config_from_args(EXECUTOR_WORKERS_FLAGS, t).progress is False
    m = _leaf(["sim"]).parse_args("--no-judge --no-memory --llm-threads 2 --progress-every 3".split())
    assert config_from_args(sim.RUN_FLAGS[0], m).judge is False and config_from_args(sim.FEATURE_FLAGS, m).memory is False
    s2 = _leaf(["train", "assess"]).parse_args("--checkpoint A B --names a b --out o".split())
    assert config_from_args(train.ASSESS_FLAGS, s2).checkpoint == ("A", "B")


# ------------------------------------------------------------------------------------- bad values

@pytest.mark.parametrize("argv, flag, words", [
    (["run", "alfworld", "--agent", "nope", "--out", "o"], "--agent", "expected one of react, reflexion"),
    (["run", "alfworld", "--agent", "react", "--out", "o", "--max-steps", "abc"], "--max-steps", "expected an integer"),
    (["run", "alfworld", "--agent", "react", "--out", "o", "--map-actions", "guess"], "--map-actions", "expected one of embed, choose, none"),
    (["run", "alfworld", "--agent", "react"], "--out", "required"),
    (["run", "scienceworld", "--out", "o", "--tasks", "0-40"], "--tasks", "0..29"),
    (["run", "scienceworld", "--out", "o", "--budget-factor", "x"], "--budget-factor", "expected a number"),
    (["learn", "chess"], "env", "expected one of alfworld, scienceworld"),
    (["train", "metaworld", "--profile", "huge"], "--profile", "expected one of cpu, smoke, paper"),
    (["adapt", "metaworld", "--checkpoint", "c", "--profile", "huge"], "--profile", "expected one of cpu, smoke, paper"),
    (["train", "assess", "--out", "o"], "--checkpoint", "required"),
    (["finetune", "sft", "--data-dir", "d", "--out", "o", "--epochs", "two"], "--epochs", "expected a number"),
    (["sim", "--agents", "many"], "--agents", "expected an integer"),
])
def test_a_bad_value_is_an_argparse_error_naming_the_flag(argv, flag, words, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert flag in err and words in err, err


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


# ------------------------------------------------------------------------------------ the generator

@dataclasses.dataclass
class _Toy:
    """A dataclass with every kind of field the generator handles."""

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

    def validate(self) -> "_Toy":
        if self.count < 0:
            raise ValueError(f"count: expected >= 0, got {self.count}")
        return self


def _toy_parser(spec: Flags) -> argparse.ArgumentParser:
    from metacog_fast.cli.dataclass_args import add_config_flags

    p = argparse.ArgumentParser(prog="toy", exit_on_error=False)
    add_config_flags(p, spec)
    return p


def test_generator_types_defaults_help_and_errors(capsys):
    spec = Flags(_Toy, aliases={"count": ("-n",)}, negations={"on": ("--off",)})
    p = _toy_parser(spec)
    assert config_from_args(spec, p.parse_args(["--name", "x"])) == _Toy(name="x")
    got = config_from_args(spec, p.parse_args("--name x --mode slow -n 5 --rate 0.5 --tags c --ids 4,5 --no-on".split()))
    assert got == _Toy("x", "slow", 5, 0.5, ("c",), [4, 5], False)
    assert config_from_args(spec, p.parse_args("--name x --rate none --off".split())) == _Toy("x", on=False)
    text = " ".join(p.format_help().split())
    assert "An int, 50% of the time. (default 3)" in text and "--mode {fast,slow}" in text
    assert "Required: no default. (required)" in text and "(default a,b)" in text and "(default none)" in text
    with pytest.raises(argparse.ArgumentError, match="expected a number, got 'fast'"):
        p.parse_args("--name x --rate fast".split())
    with pytest.raises(ConfigError, match="--count"):
        config_from_args(spec, p.parse_args("--name x --count -1".split()))
    with pytest.raises(TypeError, match="not a field"):
        _toy_parser(Flags(_Toy, aliases={"cnt": ("-c",)}))


def test_generator_prefix_skip_only_positional_and_nargs():
    spec = Flags(_Toy, prefix="toy_", skip=("ids",), positional=("name",), nargs={"tags": "+"})
    p = _toy_parser(spec)
    a = p.parse_args("x --toy-tags p q --toy-count 0".split())
    assert config_from_args(spec, a) == _Toy("x", count=0, tags=("p", "q"))
    assert not hasattr(a, "toy_ids")
    only = Flags(_Toy, only=("name", "on"))
    b = _toy_parser(only).parse_args(["--name", "y"])
    assert not hasattr(b, "count") and config_from_args(only, b) == _Toy("y")


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
    from metacog_fast.cli.main import build_parser

    p = build_parser("sim")
    a = p.parse_args(["sim", "--agents", "3", "--steps", "6", "--progress-every", "3", "ablate", "--runs", "2"])
    assert (a.agents, a.steps, a.progress_every, a.runs, a.out) == (3, 6, 3, 2, "results/sim")
    a = p.parse_args(["sim", "--agents", "3", "ablate", "--agents", "4"])  # the later one wins
    assert a.agents == 4
    a = p.parse_args(["sim", "ablate", "--agents", "3"])
    assert (a.agents, a.progress_every) == (3, 4)
