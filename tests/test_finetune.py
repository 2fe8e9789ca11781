"""Pre-deployment fine-tuning: datasets in the agents' own transcript form, a tiny SFT run that
lowers the loss, survives a kill and exports to GGUF that llama.cpp loads and generates from, and
the clear errors for missing data, damaged checkpoints and unknown model names.

The training tests run on ``finetune_base`` (tests/conftest.py): a random 2-layer Llama with the
real SmolLM2 tokenizer, and, under ``-m slow``, the shipped SmolLM2-135M itself."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from metacog_fast.alfworld.actions import ActionMapper
from metacog_fast.alfworld.agents import EpisodeContext, ReActAgent
from metacog_fast.alfworld.config import AgentConfig
from metacog_fast.alfworld.fewshot import load_examples
from metacog_fast.alfworld.protocol import DEFAULT_FEWSHOT
from metacog_fast.alfworld.finetune import DataConfig, actor_transcript, build_dataset, load_dataset
from metacog_fast.alfworld.finetune.data import select_walkthrough_games

pytest.importorskip("trl")
from metacog_fast.alfworld.finetune.sft import SFTConfig, build_rows, check_checkpoint, select_examples, token_labels, train_sft  # noqa: E402

TINY = dict(batch_size=2, micro_batch_size=2, save_steps=2, epochs=2.0, learning_rate=2e-3, max_examples=6)


def _layers(base: str) -> int:
    """Transformer blocks of a fine-tuning base."""
    if base == "smollm2":
        return 30
    return json.loads((Path(base) / "config.json").read_text())["num_hidden_layers"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("ft") / "data"
    manifest = build_dataset(out, DataConfig(max_games=6))
    return out, manifest


def _agent_prompts(intro: str, pairs, examples: int) -> list[str]:
    shots = load_examples(DEFAULT_FEWSHOT, max(examples, 1)) if examples else {}
    agent = ReActAgent(None, shots or {"x": []}, AgentConfig(examples=examples, map_actions="none"),
                       ActionMapper("none"))
    task_type = next(iter(shots)) if shots else "x"
    agent.begin(EpisodeContext("g", "Your task is to: x", task_type, intro, 0))
    prompts = []
    for a, o in pairs:
        prompts.append(agent.prompt())
        agent.observe(a, o)
    return prompts, (shots.get(task_type, [])[:examples] if shots else [])


def test_dataset_of_three_games_has_the_agents_exact_prompts(dataset):
    out, manifest = dataset
    ex = load_dataset(out)
    assert manifest["examples"] == len(ex) == 6 and manifest["by_source"] == {"alfworld_expert": 6}
    assert len(manifest["by_task_type"]) == 6 and manifest["walkthroughs_not_won"] == []
    assert len(manifest["dataset_sha256"]) == 64
    for e in ex[:3]:
        assert e["won"] and e["source"] == "alfworld_expert" and e["split"] == "train"
        for examples in (0, 2):
            prompts, shots = _agent_prompts(e["intro"], e["pairs"], examples)
            t = actor_transcript(e["intro"], e["pairs"], shots)
            assert len(t.action_spans) == len(e["pairs"]) == len(t.observation_spans)
            for k, (s, end) in enumerate(t.action_spans):
                assert t.text[:s] == prompts[k]  # the prompt the agent sends at step k, to the character
                assert t.text[s:end] == f" {e['pairs'][k][0]}\n"
            for k, (s, end) in enumerate(t.observation_spans):
                assert t.text[s:end] == e["pairs"][k][1] + "\n"


def test_dataset_resumes_and_refuses_another_config(dataset, tmp_path):
    out, manifest = dataset
    again = build_dataset(out, DataConfig(max_games=6, workers=2))  # every game already played
    assert again["dataset_sha256"] == manifest["dataset_sha256"]
    with pytest.raises(ValueError, match="another configuration"):
        build_dataset(out, DataConfig(max_games=5))
    with pytest.raises(ValueError, match="valid_unseen is held out"):
        DataConfig(split="valid_unseen").validate()
    games = select_walkthrough_games("train", 12)
    assert len(games) == 12 and len({g.parent.parent.name.split("-")[0] for g in games}) == 6


def test_skip_games_extends_an_earlier_dataset_with_disjoint_games():
    every = select_walkthrough_games("train", 12)
    assert select_walkthrough_games("train", 7, skip_games=5) == every[5:12]
    assert select_walkthrough_games("train", None, skip_games=5)[:7] == every[5:12]
    with pytest.raises(ValueError, match="skip_games"):
        DataConfig(skip_games=-1).validate()
    with pytest.raises(ValueError, match="skip_games: 100000 leaves none"):
        select_walkthrough_games("train", 3, skip_games=100_000)


def test_token_labels_cover_exactly_the_loss_spans(dataset, smollm2_tokenizer):
    tok = smollm2_tokenizer
    e = load_dataset(dataset[0])[0]
    t = actor_transcript(e["intro"], e["pairs"])
    for loss in ("actions", "actions+observations"):
        ids, labels = token_labels(tok, t.text, t.loss_spans(loss), 4096)
        assert ids == tok(t.text, add_special_tokens=False)["input_ids"]
        kept = tok.decode([i for i, lab in zip(ids, labels) if lab != -100])
        want = "".join(t.text[s:end] for s, end in t.loss_spans(loss))
        assert kept == want
    ids, labels = token_labels(tok, t.text, t.loss_spans("actions"), 20)
    assert len(ids) == len(labels) == 20


def test_rows_cut_at_max_length_are_counted(dataset, smollm2_tokenizer):
    """What max_length cuts off is counted, target tokens included, and the kept part is the head of
    the uncut row."""
    tok = smollm2_tokenizer
    ex = load_dataset(dataset[0])[:3]
    full_cut: dict[str, int] = {}
    full = build_rows(tok, ex, SFTConfig(max_length=4096), cut=full_cut)
    assert full_cut == {"rows": 0, "target_tokens": 0}
    short = min(len(r["input_ids"]) for r in full) - 1
    cut: dict[str, int] = {}
    rows = build_rows(tok, ex, SFTConfig(max_length=short), cut=cut)
    assert cut["rows"] == 3
    lost = sum(sum(1 for x in f["labels"][short:] if x != -100) for f in full)
    assert cut["target_tokens"] == lost
    for f, r in zip(full, rows):
        assert r["input_ids"] == f["input_ids"][:short] and r["labels"] == f["labels"][:short]


def test_selection_is_seeded_and_budgeted(dataset):
    ex = load_dataset(dataset[0])
    a = select_examples(ex, SFTConfig(seed=1, max_examples=4))
    assert [e["id"] for e in a] == [e["id"] for e in select_examples(ex, SFTConfig(seed=1, max_examples=4))]
    assert len(a) == 4
    with pytest.raises(ValueError, match="sources"):
        SFTConfig(sources=("web",)).validate()
    with pytest.raises(ValueError, match="batch_size"):
        SFTConfig(batch_size=6, micro_batch_size=4).validate()


def test_missing_dataset_and_unknown_base_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="metacog finetune data"):
        load_dataset(tmp_path / "nothing")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "dataset.jsonl").write_text("{not json\n")
    with pytest.raises(ValueError, match="line 1 is not JSON"):
        load_dataset(tmp_path / "bad")
    from metacog_fast.finetune.base import base_gguf

    with pytest.raises(ValueError, match="unknown model name 'gpt-9'"):
        base_gguf("gpt-9")


_TRAIN = """
import sys
from metacog_fast.alfworld.finetune.sft import SFTConfig, train_sft
train_sft(sys.argv[1], sys.argv[2], SFTConfig(**{tiny}), max_steps=6)
"""


@pytest.fixture(scope="module")
def trained(dataset, finetune_base, tmp_path_factory):
    """A tiny LoRA run killed (SIGKILL) after its first checkpoint, then resumed to the end."""
    run = tmp_path_factory.mktemp("ft") / "sft"
    tiny = {**TINY, "base": finetune_base}
    code = _TRAIN.format(tiny=repr(tiny))
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    proc = subprocess.Popen([sys.executable, "-c", code, str(dataset[0]), str(run)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ck = run / "checkpoints" / "checkpoint-2"
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None and not (ck / "trainer_state.json").exists():
        time.sleep(0.5)
    killed = proc.poll() is None
    if killed:
        proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert (ck / "trainer_state.json").exists(), "the first run wrote no checkpoint"
    facts = train_sft(dataset[0], run, SFTConfig(**tiny), max_steps=6)
    return run, facts, killed, dataset[0], tiny


@pytest.mark.starts_first(seconds=100)
def test_training_resumes_after_a_kill_and_lowers_the_loss(trained):
    run, facts, killed, data, tiny = trained
    assert killed, "the first run finished before it could be killed"
    assert facts["resumed_from"] and Path(facts["resumed_from"]).name.startswith("checkpoint-")
    assert facts["steps"] == 6 and (run / "final" / "adapter_model.safetensors").is_file()
    log = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in log if "loss" in r]
    assert losses[-1] < losses[0]
    assert any(r.get("tokens_per_second") for r in log)
    # the finished run is returned as is, and another configuration is refused
    assert train_sft(data, run, SFTConfig(**tiny), max_steps=6)["steps"] == 6
    with pytest.raises(ValueError, match="another configuration"):
        train_sft(data, run, SFTConfig(**{**tiny, "lora_r": 8}), max_steps=6)


def test_damaged_checkpoint_is_a_clear_error(trained, tmp_path):
    import shutil

    run = trained[0]
    ck = sorted((run / "checkpoints").glob("checkpoint-*"))[-1]
    bad = tmp_path / ck.name
    shutil.copytree(ck, bad)
    w = bad / "adapter_model.safetensors"
    w.write_bytes(w.read_bytes()[: 1000])
    with pytest.raises(ValueError, match="is damaged"):
        check_checkpoint(bad, "lora")
    (bad / "optimizer.pt").unlink()
    with pytest.raises(ValueError, match="optimizer.pt is missing"):
        check_checkpoint(bad, "lora")


@pytest.mark.parametrize("fmt", ["adapter", "merged"])
def test_export_loads_in_llama_cpp_and_generates(trained, tmp_path, monkeypatch, fmt):
    from metacog_fast.finetune.export import ExportConfig, export_gguf
    from metacog_fast.llm import open_llm

    run = trained[0]
    monkeypatch.setenv("METACOG_MODELS_HOME", str(tmp_path / "models"))
    model = export_gguf(run, tmp_path / "export", ExportConfig(format=fmt, name=f"tiny-{fmt}"))
    assert (tmp_path / "export" / model["file"]).is_file() and model["prompt"] == {"examples": 0}
    if fmt == "adapter":
        assert model["bytes"] < 16 * 2**20  # small enough to ship
    servings = ("merged", "adapter") if fmt == "adapter" else ("merged",)
    for serving in servings:
        monkeypatch.setenv("METACOG_ADAPTER_SERVING", serving)
        for uri in (f"llama-cpp://{tmp_path / 'export'}", f"finetuned:tiny-{fmt}"):
            llm = open_llm(uri, n_threads=1, n_ctx=512)
            try:
                out = llm.complete("You control a helper robot in a house.\n\n### Your turn\nYour task is to: "
                                   "put a pen in desk.\n>", max_tokens=8, temperature=0.0)
                assert out[0].completion_tokens > 0
                # an adapter is served merged (cached Q8_0) unless asked to stay an adapter
                assert (llm.lora_path is not None) == (fmt == "adapter" and serving == "adapter")
            finally:
                llm.close()
    if fmt == "adapter":
        assert len(list((tmp_path / "models" / ".merged").glob("*/model-q8_0.gguf"))) == 1


def test_adapter_merged_on_first_use_matches_the_merged_export(trained, tmp_path, monkeypatch):
    """The merge of a shipped GGUF adapter (float16 A, B) equals the merged export made from the
    float32 checkpoint up to float16 rounding: each value within one Q8_0 step of its block, and a
    margin for the case where rounding lands on opposite sides (both are within half a step of
    nearly the same number)."""
    import numpy as np
    from gguf import GGUFReader
    from gguf.quants import dequantize

    from metacog_fast.finetune.export import ExportConfig, export_gguf
    from metacog_fast.llm.models import resolve_model_folder

    run = trained[0]
    monkeypatch.setenv("METACOG_MODELS_HOME", str(tmp_path / "models"))
    monkeypatch.delenv("METACOG_ADAPTER_SERVING", raising=False)
    export_gguf(run, tmp_path / "a", ExportConfig(format="adapter"))
    export_gguf(run, tmp_path / "m", ExportConfig(format="merged"))
    files = resolve_model_folder(tmp_path / "a")
    assert files.lora_path is None and ".merged" in files.model_path
    assert resolve_model_folder(tmp_path / "a").model_path == files.model_path  # cached, not merged again
    got = {t.name: t for t in GGUFReader(files.model_path).tensors}
    want = {t.name: t for t in GGUFReader(str(tmp_path / "m" / "model-q8_0.gguf")).tensors}
    assert got.keys() == want.keys()
    changed = 0
    for name, w in want.items():
        g = got[name]
        assert g.tensor_type == w.tensor_type, name
        a, b = dequantize(g.data, g.tensor_type), dequantize(w.data, w.tensor_type)
        if a.ndim == 2:
            step = np.abs(b).reshape(b.shape[0], -1, 32).max(-1, keepdims=True) / 127
            assert (np.abs(a - b).reshape(step.shape[0], -1, 32) <= 1.5 * step + 1e-7).all(), name
            changed += int(".attn_" in name or ".ffn_" in name)
        else:
            np.testing.assert_array_equal(a, b)
    assert changed == _layers(trained[4]["base"]) * 7
    # a damaged adapter is refused with its name, not merged into garbage
    bad = tmp_path / "a" / "adapter.gguf"
    bad.write_bytes(bad.read_bytes()[:-4096] + bytes(4096))
    import shutil

    shutil.rmtree(tmp_path / "models" / ".merged")
    with pytest.raises(ValueError, match=r"sha256 differs|adapter\.gguf: sha256 .* records sha256"):
        resolve_model_folder(tmp_path / "a")


def test_an_exported_adapter_reads_back_and_continues_training(trained, tmp_path, monkeypatch):
    """read_adapter inverts the adapter export (float16 rounding only, Q/K rows un-permuted), and a
    run started from it with init_adapter begins where that run ended: its first loss is below the
    first loss of the run that trained the adapter. A rank that differs from the adapter's is refused."""
    import numpy as np
    from safetensors.numpy import load_file

    from metacog_fast.finetune.export import ExportConfig, export_gguf, read_adapter

    run, _facts, _killed, data, tiny = trained
    monkeypatch.setenv("METACOG_MODELS_HOME", str(tmp_path / "models"))
    export_gguf(run, tmp_path / "a", ExportConfig(format="adapter", name="tiny-continue"))
    pairs, alpha, r = read_adapter(str(tmp_path / "a"))
    assert (r, alpha) == (SFTConfig().lora_r, float(SFTConfig().lora_alpha))
    want = load_file(str(run / "final" / "adapter_model.safetensors"))
    assert len(pairs) * 2 == len(want) == _layers(tiny["base"]) * 7 * 2
    for key, value in want.items():
        module, half = key.removeprefix("base_model.model.").rsplit(".lora_", 1)
        got = pairs[module][0 if half.startswith("A") else 1]
        np.testing.assert_allclose(got, value, rtol=2e-3, atol=1e-6, err_msg=key)
    assert read_adapter("finetuned:tiny-continue")[0].keys() == pairs.keys()

    first = lambda folder: next(json.loads(x)["loss"] for x in (folder / "train_log.jsonl").read_text().splitlines()
                                if "loss" in json.loads(x))
    cont = tmp_path / "cont"
    train_sft(data, cont, SFTConfig(**tiny, init_adapter=str(tmp_path / "a")), max_steps=1)
    assert first(cont) < first(run)
    with pytest.raises(ValueError, match="init_adapter: .* has r 16"):
        train_sft(data, tmp_path / "r8", SFTConfig(**{**tiny, "lora_r": 8}, init_adapter=str(tmp_path / "a")),
                  max_steps=1)
    with pytest.raises(ValueError, match="init_adapter: only a LoRA run"):
        SFTConfig(method="full", init_adapter="finetuned:tiny-continue").validate()
    with pytest.raises(ValueError, match="init_adapter: unknown model name"):
        read_adapter("finetuned:nope")


def test_unknown_finetuned_name_lists_what_is_known(tmp_path, monkeypatch):
    from metacog_fast.llm import open_llm

    monkeypatch.setenv("METACOG_MODELS_HOME", str(tmp_path))
    with pytest.raises(ValueError, match="finetuned:nope: unknown model name"):
        open_llm("finetuned:nope")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "model.json").write_text("{}")
    with pytest.raises(ValueError, match="malformed model.json"):
        open_llm("finetuned:broken")


@pytest.mark.slow
def test_permutation_matches_llama_cpp_layout():
    """transformers un-permutes Q/K when it reads the GGUF; our export must redo it exactly. Slow (the
    real model); the fast suite checks the same permutation through llama.cpp's logits on the tiny base
    (test_finetune_base.py)."""
    import numpy as np
    from gguf import GGUFReader
    from gguf.quants import dequantize

    from metacog_fast.finetune.base import load_model
    from metacog_fast.finetune.export import permute_qk
    from metacog_fast.llm.models import default_gguf

    r = GGUFReader(default_gguf())
    t = {x.name: x for x in r.tensors}
    m = load_model("smollm2")
    sd = m.state_dict()
    for hf, gg, heads in (("model.layers.3.self_attn.q_proj.weight", "blk.3.attn_q.weight", 9),
                          ("model.layers.3.self_attn.k_proj.weight", "blk.3.attn_k.weight", 3)):
        want = dequantize(t[gg].data, t[gg].tensor_type)
        np.testing.assert_array_equal(permute_qk(sd[hf].numpy(), heads), want)


def test_ship_model_records_the_adapters_own_evaluation(trained, tmp_path, monkeypatch):
    """`metacog finetune ship` copies an adapter export into a models root with the evaluation read
    from that adapter's own `finetune eval` record; the shipped name then loads by name. It refuses
    an evaluation of another model, a merged export and a --paired file that does not exist."""
    import hashlib

    from metacog_fast.alfworld.finetune.evaluate import EvalConfig, evaluate
    from metacog_fast.finetune.export import ExportConfig, export_gguf
    from metacog_fast.llm.models import resolve_model_folder

    run = trained[0]
    monkeypatch.setenv("METACOG_MODELS_HOME", str(tmp_path / "home"))
    export_gguf(run, tmp_path / "a", ExportConfig(format="adapter"))
    export_gguf(run, tmp_path / "m", ExportConfig(format="merged"))
    ev = evaluate(tmp_path / "eval", EvalConfig(llm=f"llama-cpp://{tmp_path / 'a'}", tasks=1, max_steps=2, workers=1))
    evaluate(tmp_path / "eval_m", EvalConfig(llm=f"llama-cpp://{tmp_path / 'm'}", tasks=1, max_steps=2,
                                                     workers=1))
    (tmp_path / "cmp.json").write_text("{}")

    def ship(adapter, evaluation, paired="cmp.json"):
        return subprocess.run([sys.executable, "-m", "metacog_fast", "finetune", "ship", "--adapter", str(tmp_path / adapter),
                               "--evaluation", str(tmp_path / evaluation), "--record", "results/x",
                               "--paired", f"vs_base={tmp_path / paired}", "--reproduce", "bash x.sh",
                               "--description", "a tiny actor", "--name", "tiny-shipped",
                               "--init-adapter", "finetuned:none", "--models-root", str(tmp_path / "root")],
                              capture_output=True, text=True)

    out = ship("a", "eval")
    assert out.returncode == 0, out.stderr
    shipped = tmp_path / "root" / "tiny-shipped"
    info = json.loads((shipped / "model.json").read_text())
    assert info["evaluation"]["success"] == ev["success"] and info["evaluation"]["games"] == 1
    assert info["evaluation"]["paired"] == {"vs_base": str(tmp_path / "cmp.json")}
    assert info["reproduce"] == ["bash x.sh"] and info["training"]["init_adapter"] == "finetuned:none"
    digest = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()
    assert digest(shipped / info["file"]) == digest(tmp_path / "a" / info["file"])
    assert not list(shipped.glob(".*.tmp"))
    assert resolve_model_folder(shipped).model_path.endswith("model-q8_0.gguf")  # served merged, as evaluated

    for args, why in [(("a", "eval_m"), "--evaluation: .* evaluated"), (("m", "eval_m"), "--adapter: .* expected an"),
                      (("a", "eval", "nope.json"), "--paired: expected NAME=PATH")]:
        out = ship(*args)
        assert out.returncode != 0 and re.search(why, out.stderr), (args, out.stderr)


def test_ship_model_ships_a_reflector_with_its_compare_record(trained, tmp_path):
    """--role reflector takes a reflections-compare result whose side A reflected with this very
    adapter (by content) and records both sides' quality and the paired difference; a compare of
    another adapter is refused."""
    from metacog_fast.finetune.export import ExportConfig, export_gguf

    model = export_gguf(trained[0], tmp_path / "a", ExportConfig(format="adapter"))
    quality = {"next_attempts": {"rate": 0.25, "low": 0.1, "high": 0.5, "successes": 2, "n": 8}}
    cmp = {"actor": "finetuned:alfworld", "reflector_b": None, "games": 2, "quality_a": quality,
           "quality_b": {"next_attempts": None}, "paired": {"diff": 0.25, "p_value": 0.5, "n": 2},
           "identity_a": {"reflector": {"adapter_sha256": model["sha256"]}}, "identity_b": {"reflector": {"sha256": "b"}}}
    (tmp_path / "cmp.json").write_text(json.dumps(cmp))
    cmp["identity_a"]["reflector"]["adapter_sha256"] = "0" * 64
    (tmp_path / "cmp_other.json").write_text(json.dumps(cmp))

    def ship(evaluation):
        return subprocess.run([sys.executable, "-m", "metacog_fast", "finetune", "ship", "--adapter", str(tmp_path / "a"), "--role", "reflector",
                               "--evaluation", str(tmp_path / evaluation), "--record", "results/y",
                               "--reproduce", "bash y.sh", "--description", "a tiny reflector", "--name", "tiny-refl",
                               "--models-root", str(tmp_path / "root")], capture_output=True, text=True)

    out = ship("cmp.json")
    assert out.returncode == 0, out.stderr
    info = json.loads((tmp_path / "root" / "tiny-refl" / "model.json").read_text())
    assert info["role"] == "reflector" and info["evaluation"]["quality"] == quality
    assert info["evaluation"]["paired_vs_b"]["diff"] == 0.25 and info["evaluation"]["games"] == 2
    out = ship("cmp_other.json")
    assert out.returncode != 0 and re.search("--evaluation: side A of .* not this adapter", out.stderr), out.stderr
