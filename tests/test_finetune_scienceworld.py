"""ScienceWorld Swift fine-tuning: the gold-path dataset holds, character for character, the prompt
the LLM Swift scores at decision time (and the tokens it scores), a build resumes, no dev or test
variation can be a source, the CLI flags, the dev agreement measurement, and a tiny SFT run on the
dataset whose export opens as ``finetuned:NAME`` and acts as the LLM Swift (on the tiny Llama of
``finetune_base``; on the shipped SmolLM2 under ``-m slow``)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("scienceworld")
from metacog_fast.scienceworld import env as swe  # noqa: E402

if swe.java_version() is None:
    pytest.skip("Java is not installed: " + swe.JAVA_HINT, allow_module_level=True)

from metacog_fast.scienceworld.runner import walk_gold  # noqa: E402
from metacog_fast.scienceworld.swift import (LLMSwift, RankerSwift, SwiftState, swift_option,  # noqa: E402
                                                     train_ranker)
from metacog_fast.cli.dataclass_args import parse  # noqa: E402
from metacog_fast.cli.main import build_parser, main  # noqa: E402
from metacog_fast.envs import make_env  # noqa: E402
from metacog_fast.alfworld.finetune.data import load_dataset  # noqa: E402
from metacog_fast.scienceworld.finetune_data import (SIMULATOR_STEP_LIMIT, ScienceWorldDataConfig,  # noqa: E402
                                                     build_scienceworld_dataset, check_source_variation, play_gold,
                                                     select_variations)

SHORT_TASKS = [20, 21]
"""lifespan-longest-lived and lifespan-shortest-lived: gold paths of 4-5 steps."""


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("swft") / "data"
    manifest = build_scienceworld_dataset(out, ScienceWorldDataConfig(tasks=SHORT_TASKS, max_variations=2))
    return out, manifest


@pytest.fixture(scope="module")
def llm():
    from metacog_fast.llm import open_llm

    m = open_llm(n_threads=1)
    yield m
    m.close()


class RecordingLLM:
    """The real LLM, with each ``choose`` call's prompt and options kept."""

    def __init__(self, llm):
        self.llm, self.calls = llm, []

    def choose(self, prompt, options):
        self.calls.append((prompt, list(options)))
        return self.llm.choose(prompt, options)


def test_manifest_counts_and_sources(dataset) -> None:
    out, m = dataset
    ex = load_dataset(out)
    assert m["examples"] == len(ex) > 0
    assert m["variations_played"] == 2 and len(m["variations"]) == 2  # one per task: round-robin
    assert {e["task_index"] for e in ex} == set(SHORT_TASKS)
    assert {e["source"] for e in ex} == {"scienceworld_gold"} and {e["split"] for e in ex} == {"train"}
    # every gold step with an executable form is an example (issue 50: not only the listed ones)
    assert m["gold_steps"] == m["examples"] + m["gold_steps_unmapped"]
    assert m["gold_steps_unmapped"] <= m["gold_steps_not_admissible"]
    assert sum(m["gold_step_rules"].values()) == m["gold_steps"]
    assert len({e["id"] for e in ex}) == len(ex)


def test_prompts_are_what_llm_swift_scores(dataset, llm) -> None:
    """For the same variation replayed, every example's prompt is the one LLMSwift sends to
    ``choose`` at that state, and the completion is the gold action's option."""
    out, _ = dataset
    ex = load_dataset(out)
    by_key = {(e["task_index"], e["variation"], e["step"]): e for e in ex}
    rec = RecordingLLM(llm)
    swift = LLMSwift(rec)
    checked = 0
    for task in SHORT_TASKS:
        env = make_env("scienceworld", task=task, split="train", step_limit=SIMULATOR_STEP_LIMIT)
        try:
            v = env.variations[0]
            states = walk_gold(env, v)
            gold_path = env.gold_path
        finally:
            env.close()
        mine = sorted((e for e in ex if e["task_index"] == task and e["variation"] == v), key=lambda e: e["step"])
        assert len(mine) == len(states)
        for e, g in zip(mine, states):
            assert by_key[(task, v, e["step"])] is e and gold_path[e["step"]] == e["gold"]
            assert g.gold == e["executable"] and g.gold in g.valid  # the gold step's executable form
            swift.propose(SwiftState(g.task, g.observation, g.last_action, g.valid, g.executed))
            prompt, options = rec.calls[-1]
            assert e["prompt"] == prompt
            assert e["completion"] == swift_option(g.gold)
            assert all(o == swift_option(o[1:]) for o in options)
            checked += 1
    assert checked == len(ex)


def test_training_tokens_are_the_scored_tokens(dataset, smollm2_tokenizer) -> None:
    """The labelled tokens of an example are exactly the tokens llama.cpp scores for the gold
    option after the prompt, and the rest is the prompt as llama.cpp tokenises it."""
    pytest.importorskip("transformers")
    from llama_cpp import Llama

    from metacog_fast.finetune.base import base_gguf
    from metacog_fast.alfworld.finetune.sft import decision_labels

    out, _ = dataset
    tok = smollm2_tokenizer
    ll = Llama(model_path=base_gguf("smollm2"), vocab_only=True, verbose=False)
    try:
        for e in load_dataset(out):
            ids, labels = decision_labels(tok, e, "actions", 1024)
            p = list(ll.tokenize(e["prompt"].encode(), add_bos=True, special=True))
            c = list(ll.tokenize(e["completion"].encode(), add_bos=False, special=False))
            assert ids == p + c
            assert labels == [-100] * len(p) + c
    finally:
        ll.close()
    with pytest.raises(ValueError, match="loss: .*single decisions"):
        decision_labels(tok, e, "actions+observations", 1024)
    ids, labels = decision_labels(tok, e, "actions", 12)
    assert len(ids) == 12 and labels[-len(c):] == c  # the prompt is cut from the left


def test_resume_plays_only_new_variations(tmp_path, dataset) -> None:
    out, m = dataset
    first = sorted((out / "variations").glob("*.json"))
    stamps = {p.name: p.stat().st_mtime_ns for p in first}
    # a killed build: the played variations are kept, the dataset and manifest are not written yet
    (out / "dataset.jsonl").unlink()
    (out / "manifest.json").unlink()
    t0 = time.perf_counter()
    again = build_scienceworld_dataset(out, ScienceWorldDataConfig(tasks=SHORT_TASKS, max_variations=2, workers=2))
    assert {p.name: p.stat().st_mtime_ns for p in (out / "variations").glob("*.json")} == stamps
    assert again["dataset_sha256"] == m["dataset_sha256"] and again["examples"] == m["examples"]
    assert time.perf_counter() - t0 < 30  # nothing replayed: no JVM started
    with pytest.raises(ValueError, match="another configuration"):
        build_scienceworld_dataset(out, ScienceWorldDataConfig(tasks=SHORT_TASKS, max_variations=3))


def test_round_robin_budget() -> None:
    per_task = {"0": [0, 1, 2], "5": [10, 11], "7": [20]}
    assert select_variations(per_task, [0, 5, 7], None) == [(0, 0), (5, 10), (7, 20), (0, 1), (5, 11), (0, 2)]
    assert select_variations(per_task, [0, 5, 7], 4) == [(0, 0), (5, 10), (7, 20), (0, 1)]


@pytest.mark.parametrize("split", ["dev", "test"])
def test_dev_and_test_are_never_a_source(split) -> None:
    with pytest.raises(ValueError, match=f"split: ScienceWorld '{split}' variations are never a training source"):
        ScienceWorldDataConfig(split=split).validate()
    with pytest.raises(ValueError, match="split: expected one of"):
        ScienceWorldDataConfig(split="valid").validate()
    env = make_env("scienceworld", task=SHORT_TASKS[0], split=split, step_limit=100)
    try:
        with pytest.raises(ValueError, match=f"the environment plays '{split}' variations"):
            play_gold(env, env.variations[0], SHORT_TASKS[0])
        held_out = env.variations[0]
    finally:
        env.close()
    train = make_env("scienceworld", task=SHORT_TASKS[0], split="train", step_limit=100)
    try:
        with pytest.raises(ValueError, match=f"variation: {held_out} is not a train variation"):
            check_source_variation(train, held_out)
    finally:
        train.close()


def test_a_dev_record_in_the_folder_is_refused(tmp_path, dataset) -> None:
    out, _ = dataset
    copy = tmp_path / "data"
    subprocess.run(["cp", "-r", str(out), str(copy)], check=True)
    p = sorted((copy / "variations").glob("*.json"))[0]
    rec = json.loads(p.read_text())
    rec["split"] = "dev"
    p.write_text(json.dumps(rec))
    with pytest.raises(ValueError, match="records of split 'dev' found"):
        build_scienceworld_dataset(copy, ScienceWorldDataConfig(tasks=SHORT_TASKS, max_variations=2))


def test_sft_selects_scienceworld_source(dataset) -> None:
    pytest.importorskip("trl")
    from metacog_fast.alfworld.finetune.sft import SFTConfig, select_examples

    out, _ = dataset
    ex = load_dataset(out)
    with pytest.raises(ValueError, match=r"holds \['scienceworld_gold'\] \(e.g. --sources scienceworld_gold\)"):
        select_examples(ex, SFTConfig())
    assert len(select_examples(ex, SFTConfig(sources=("scienceworld_gold",)))) == len(ex)
    with pytest.raises(ValueError, match="sources: expected some of"):
        SFTConfig(sources=("scienceworld_dev",)).validate()


def test_cli_flags(tmp_path, capsys) -> None:
    p = build_parser(load="finetune")
    a = parse(p.parse_args(["finetune", "data", "--env", "scienceworld", "--out", "x", "--tasks", "0,3,5-7",
                            "--max-variations", "9", "--workers", "2"]))
    assert (a.env, a.sw.tasks, a.sw.max_variations, a.config.workers, a.config.split) == (
        "scienceworld", [0, 3, 5, 6, 7], 9, 2, "train")
    assert parse(p.parse_args(["finetune", "data", "--out", "x"])).env == "alfworld"
    w = parse(p.parse_args(["finetune", "swift-eval", "--out", "x", "--llms", "base,llama-cpp:///m",
                            "--steps-per-task", "2"])).config
    assert (w.llms, w.steps_per_task, w.prefilters, w.k) == (("base", "llama-cpp:///m"), 2, ("lexical", "ranker"), 8)
    for argv, msg in (
        (["--env", "scienceworld", "--split", "dev"], "--split (split): ScienceWorld 'dev' variations are never"),
        (["--env", "scienceworld", "--split", "test"], "--split (split): ScienceWorld 'test' variations are never"),
        (["--env", "scienceworld", "--max-games", "3"], "--max-games belong to --env alfworld"),
        (["--max-variations", "3"], "--max-variations belong to --env scienceworld"),
    ):
        assert main(["finetune", "data", "--out", str(tmp_path / "d"), *argv]) == 2
        assert msg in capsys.readouterr().err
    assert not (tmp_path / "d").exists()
    with pytest.raises(SystemExit):
        parse(p.parse_args(["finetune", "data", "--env", "scienceworld", "--out", "x", "--tasks", "0-40"]))


def test_top1_agreement_on_dev_gold(llm) -> None:
    from metacog_fast.scienceworld.swift_eval import dev_gold, top1_agreement

    steps = dev_gold([SHORT_TASKS[0]], variations=1, steps_per_task=3)
    assert len(steps) == 3 and all(name == "lifespan-longest-lived" for name, _, _ in steps)
    env = make_env("scienceworld", task=SHORT_TASKS[0], split="dev", step_limit=100)
    try:
        assert {v for _, v, _ in steps} <= set(env.variations)
    finally:
        env.close()
    gold = [ex for _, _, ex in steps]
    ranker, _ = train_ranker(gold, epochs=30)  # fitted on the very steps: it must agree on them
    res = top1_agreement(gold, {"ranker": RankerSwift(ranker), "llm": LLMSwift(llm, 4, RankerSwift(ranker))})
    assert res["ranker"]["hits"] == [p == g.gold for p, g in zip(res["ranker"]["proposals"], gold)]
    assert res["ranker"]["top1"]["successes"] == sum(res["ranker"]["hits"]) == 3
    assert res["llm"]["gold_in_options"]["rate"] == 1.0  # the ranker's top-4 holds its own top-1
    assert 0.0 <= res["llm"]["top1"]["low"] <= res["llm"]["top1"]["rate"] <= res["llm"]["top1"]["high"] <= 1.0


@pytest.mark.slow
def test_build_resumes_after_kill(tmp_path) -> None:
    out = tmp_path / "data"
    code = ("from metacog_fast.scienceworld.finetune_data import *; "
            f"build_scienceworld_dataset({str(out)!r}, ScienceWorldDataConfig(tasks={SHORT_TASKS}, max_variations=6))")
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and len(list((out / "variations").glob("*.json"))) < 2:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    kept = {p.name: p.stat().st_mtime_ns for p in (out / "variations").glob("*.json")}
    assert 2 <= len(kept) < 6 and not (out / "manifest.json").exists()
    m = build_scienceworld_dataset(out, ScienceWorldDataConfig(tasks=SHORT_TASKS, max_variations=6))
    assert m["variations_played"] == 6
    assert all((out / "variations" / n).stat().st_mtime_ns == t for n, t in kept.items())
    fresh = build_scienceworld_dataset(tmp_path / "fresh", ScienceWorldDataConfig(tasks=SHORT_TASKS, max_variations=6))
    assert fresh["dataset_sha256"] == m["dataset_sha256"]


@pytest.mark.starts_first(seconds=60)
def test_tiny_sft_exports_a_swift_that_opens_by_name(tmp_path, dataset, finetune_base, monkeypatch) -> None:
    pytest.importorskip("trl")
    from metacog_fast.finetune.export import ExportConfig, export_gguf
    from metacog_fast.alfworld.finetune.sft import SFTConfig, train_sft
    from metacog_fast.llm import open_llm

    out, _ = dataset
    cfg = SFTConfig(base=finetune_base, sources=("scienceworld_gold",), epochs=3.0, batch_size=4, micro_batch_size=4, learning_rate=2e-3,
                    save_steps=2, threads=1)
    facts = train_sft(out, tmp_path / "sft", cfg)
    log = [json.loads(x) for x in (tmp_path / "sft" / "train_log.jsonl").read_text().splitlines()]
    losses = [x["loss"] for x in log if "loss" in x]
    assert facts["examples"] == len(load_dataset(out)) and losses[-1] < losses[0]
    monkeypatch.setenv("METACOG_MODELS_HOME", str(tmp_path / "models"))
    model = export_gguf(tmp_path / "sft", tmp_path / "model", ExportConfig(name="sw-test"))
    assert model["prompt"]["swift"] == "scienceworld"
    ex = load_dataset(out)[0]
    m = open_llm("finetuned:sw-test", n_threads=1)
    try:
        opts = [ex["completion"], " look around", " wait"]
        assert m.choose(ex["prompt"], opts).index in range(3)
    finally:
        m.close()


def test_swift_eval_folder_resumes_and_refuses_a_replaced_model(tmp_path) -> None:
    from metacog_fast.scienceworld.swift_eval import dev_gold
    from metacog_fast.scienceworld.finetune_eval import (SwiftAgreementConfig, evaluate_swift_agreement,
                                                         model_sha256, proposer_name)

    gold = [ex for _, _, ex in dev_gold([SHORT_TASKS[1]], variations=1, steps_per_task=2)]
    model, _ = train_ranker(gold, epochs=10)
    model.save(str(tmp_path / "ranker.npz"))
    cfg = SwiftAgreementConfig(llms=("base",), prefilters=("ranker",), k=3, ranker=str(tmp_path / "ranker.npz"),
                               tasks=[SHORT_TASKS[1]], steps_per_task=2)
    out = tmp_path / "eval"
    s = evaluate_swift_agreement(out, cfg)
    name = proposer_name("base", "ranker", 3)
    assert s["steps"] == 2 and set(s["proposers"]) == {"ranker", name}
    assert s["proposers"][name]["gold_in_options"]["n"] == 2 and s["model_sha256"]["base"] == model_sha256("base")
    f = out / "proposals" / f"{name}.json"
    stamp = f.stat().st_mtime_ns
    assert evaluate_swift_agreement(out, cfg)["proposers"] == s["proposers"] and f.stat().st_mtime_ns == stamp
    rec = json.loads(f.read_text())
    rec["model_sha256"] = "0" * 64
    f.write_text(json.dumps(rec))
    with pytest.raises(ValueError, match="measured with model sha256 0{64}"):
        evaluate_swift_agreement(out, cfg)
    with pytest.raises(ValueError, match="other steps or another ranker"):
        evaluate_swift_agreement(out, SwiftAgreementConfig(**{**cfg.__dict__, "steps_per_task": 3}))
    with pytest.raises(FileNotFoundError, match="ranker: no ranker file"):
        evaluate_swift_agreement(tmp_path / "e2", SwiftAgreementConfig(ranker=str(tmp_path / "none.npz")))
