"""Fine-tuning throughput and the decode speed of exported models, each against its anchor.

    pytest bench/bench_finetune.py --benchmark-json=bench/results/finetune.json

Training (tokens/s of SFT steps on the same 16 real ALFWorld transcripts, 2 threads):
anchor = LoRA in float32 with the LM head over every position (plain transformers + peft);
variants: bf16 autocast (AVX512-BF16), the LM head only where the loss is taken (trl's fused
head, our default), and full fine-tuning. ``extra_info["ratio"]`` = variant tokens/s / anchor's.

Decode (llama.cpp, 2 threads, greedy, 64 tokens after an actor prompt): anchor = the shipped
base GGUF; the LoRA adapter export and the merged Q8_0 export, ``ratio`` = their tokens/s / base's.
"""
from __future__ import annotations

import pytest

pytest.importorskip("trl")

from metacog_fast.alfworld.finetune import DataConfig, build_dataset, load_dataset  # noqa: E402
from metacog_fast.alfworld.finetune.sft import SFTConfig, build_rows, make_trainer, select_examples  # noqa: E402

THREADS = 2
STEPS = 3
ROWS = 16
PROMPT = ("You control a helper robot in a house. Type one command per line after \">\" to finish the task.\n\n"
          "### Your turn\nYou are in the middle of a room. Looking quickly around you, you see a cabinet 1, "
          "a countertop 1, a fridge 1, a microwave 1, and a sinkbasin 1.\nYour task is to: put a cool apple in "
          "countertop.\n>")


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    from metacog_fast.finetune.base import load_tokenizer

    data = tmp_path_factory.mktemp("bench_ft") / "data"
    build_dataset(data, DataConfig(max_games=ROWS))
    tok = load_tokenizer("smollm2")
    return tok, build_rows(tok, select_examples(load_dataset(data), SFTConfig()), SFTConfig())


ANCHOR: dict[str, float] = {}
CONFIGS = [
    ("lora-fp32-all (anchor)", dict(method="lora", precision="fp32", logits="all")),
    ("lora-bf16-all", dict(method="lora", precision="bf16", logits="all")),
    ("lora-fp32-loss", dict(method="lora", precision="fp32", logits="loss-positions")),
    ("lora-bf16-loss (default)", dict(method="lora", precision="bf16", logits="loss-positions")),
    ("full-bf16-loss", dict(method="full", precision="bf16", logits="loss-positions", learning_rate=2e-5)),
    ("full-fp32-all", dict(method="full", precision="fp32", logits="all", learning_rate=2e-5)),
]


@pytest.mark.parametrize("name,opts", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_sft_tokens_per_second(benchmark, rows, tmp_path, name, opts):
    """Median tokens/s over the steps after the first (which pays allocation and warm-up)."""
    import json
    import statistics

    from metacog_fast.finetune.base import load_model

    tok, data = rows
    cfg = SFTConfig(batch_size=4, micro_batch_size=4, save_steps=10_000, threads=THREADS, **opts)
    trainer = make_trainer(load_model("smollm2"), tok, data, cfg, tmp_path, max_steps=STEPS + 1)
    benchmark.pedantic(trainer.train, rounds=1, iterations=1)
    log = [json.loads(x) for x in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    rates = [r["tokens_per_second"] for r in log if r.get("tokens_per_second") and "loss" in r]
    rate = statistics.median(rates)
    if name.endswith("(anchor)"):
        ANCHOR["rate"] = rate
    benchmark.extra_info.update({"tokens_per_second": rate, "steps_timed": len(rates), "threads": THREADS,
                                 "config": opts, "ratio": rate / ANCHOR["rate"] if "rate" in ANCHOR else None})


@pytest.fixture(scope="module")
def exports(rows, tmp_path_factory):
    """Adapter and merged exports of a 2-step LoRA run (decode cost does not depend on training)."""
    from metacog_fast.finetune.export import ExportConfig, export_gguf
    from metacog_fast.alfworld.finetune.sft import train_sft

    root = tmp_path_factory.mktemp("bench_export")
    data = root / "data"
    build_dataset(data, DataConfig(max_games=4))
    run = root / "sft"
    train_sft(data, run, SFTConfig(batch_size=2, micro_batch_size=2, save_steps=100, threads=THREADS), max_steps=2)
    out = {}
    for fmt in ("adapter", "merged"):
        out[fmt] = export_gguf(run, root / fmt, ExportConfig(format=fmt))
        out[fmt]["dir"] = str(root / fmt)
    return out


DECODE: dict[str, float] = {}


@pytest.mark.parametrize("which", ["base (anchor)", "adapter", "merged"])
def test_decode_tokens_per_second(benchmark, exports, which):
    from metacog_fast.llm import open_llm

    uri = "llama-cpp://" if which.startswith("base") else f"llama-cpp://{exports[which]['dir']}"
    llm = open_llm(uri, n_threads=THREADS, n_ctx=1024)
    try:
        llm.complete(PROMPT, max_tokens=8, temperature=0.0)

        def run():
            best = 0.0
            for seed in range(3):
                c = llm.complete(PROMPT, max_tokens=64, temperature=0.7, seed=seed, stop=[])[0]
                best = max(best, c.completion_tokens / c.decode_seconds)
            return best

        rate = benchmark.pedantic(run, rounds=1, iterations=1)
    finally:
        llm.close()
    if which.startswith("base"):
        DECODE["base"] = rate
    benchmark.extra_info.update({"decode_tokens_per_second": rate, "threads": THREADS,
                                 "file_bytes": exports[which]["bytes"] if which in exports else None,
                                 "ratio": rate / DECODE["base"] if "base" in DECODE else None})
