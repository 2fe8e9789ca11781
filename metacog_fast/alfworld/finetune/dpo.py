"""DPO of the reflection LLM on the pairs of :mod:`metacog_fast.alfworld.finetune.reflections` (trl's
``DPOTrainer``, LoRA over the shipped SmolLM2 or another base, ``DPOTrainConfig.base``; the frozen base is the reference model, so no
second copy is held).

The prompt is the reflection conversation rendered with the model's chat template, exactly as
``LLM.chat`` sends it; chosen and rejected are the two reflections. The run folder has the layout
of an SFT run (``config.json``, ``checkpoints/``, ``final/``, ``train_log.jsonl``, ``facts.json``),
resumes after a kill, and exports with ``metacog finetune export`` like any LoRA run.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from metacog_fast._extras import require
from metacog_fast.alfworld.store import read_json, write_json_atomic
from metacog_fast.finetune.base import PRECISIONS, resolve_precision, sha256_file



SPEED_ONLY = ("threads", "gradient_checkpointing", "precompute_ref")
"""DPOTrainConfig fields that change speed, not the result: a run resumes whatever they are."""


@dataclass
class DPOTrainConfig:
    """One DPO run of the reflector."""

    base: str = "smollm2"
    """Base model: "smollm2" (the shipped GGUF), a path to a GGUF file of a Llama model, or a
    transformers Llama folder with SmolLM2's tokenizer (as ``SFTConfig.base``)."""
    beta: float = 0.1
    """DPO temperature: how far the policy may move from the reference."""
    epochs: float = 2.0
    """Passes over the pairs."""
    learning_rate: float = 5e-5
    """Peak learning rate (cosine decay after a 10 % warm-up)."""
    lora_r: int = 16
    """LoRA rank."""
    lora_alpha: int = 32
    """LoRA scale numerator."""
    batch_size: int = 8
    """Pairs per optimiser step."""
    micro_batch_size: int = 4
    """Pairs per forward pass."""
    max_length: int = 768
    """Tokens of prompt + reflection; longer prompts are cut from the left (the trajectory's start)."""
    precision: str = "auto"
    """"bf16" (autocast), "fp32", or "auto": bf16 on a CUDA GPU or a CPU with AVX512-BF16/AMX-BF16, else fp32."""
    save_steps: int = 25
    """Optimiser steps between checkpoints."""
    seed: int = 0
    """Seed of the order and the LoRA initialisation."""
    threads: int | None = None
    """torch threads (None: every core of this process)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (trl's default): less memory, and about 13 % more
    time per step on a 2-core CPU, where a 135M model's activations fit easily. Speed only: a run
    resumes whatever this is."""
    precompute_ref: bool = True
    """Compute the frozen reference's log-probs of every pair once, before the first step, instead of
    in every step (the same loss up to rounding; epochs after the first skip the reference's forward pass).
    Speed only, like ``gradient_checkpointing``."""

    def validate(self) -> "DPOTrainConfig":
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision: expected one of {PRECISIONS}, got {self.precision!r}")
        for name in ("lora_r", "lora_alpha", "batch_size", "micro_batch_size", "max_length", "save_steps"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}: expected a positive int, got {v!r}")
        if self.batch_size % self.micro_batch_size:
            raise ValueError(f"batch_size: expected a multiple of micro_batch_size ({self.micro_batch_size})")
        if not (self.beta > 0 and self.epochs > 0 and self.learning_rate > 0):
            raise ValueError("beta, epochs and learning_rate: expected > 0")
        return self


def load_pairs(folder: str | Path) -> list[dict[str, Any]]:
    """The pairs of a collection folder; clear errors when missing, damaged or empty."""
    root = Path(folder)
    path = root / "pairs.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"pairs: {path} not found; collect them with `metacog finetune reflections --out {root}`")
    manifest = root / "manifest.json"
    if manifest.is_file():
        want = read_json(manifest).get("pairs_sha256")
        if want and want != sha256_file(path):
            raise ValueError(f"pairs: {path} does not match the sha256 in {manifest}; collect again")
    pairs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not pairs:
        raise ValueError(f"pairs: {path} holds no preference pair (no game had both a reflection followed by "
                         "success and one followed by failure); collect more games or reflections")
    for i, p in enumerate(pairs):
        if not {"messages", "chosen", "rejected"} <= p.keys():
            raise ValueError(f"pairs: line {i + 1} of {path} lacks messages/chosen/rejected")
    return pairs


def dpo_rows(tokenizer: Any, pairs: list[dict[str, Any]]) -> list[dict[str, str]]:
    """trl's prompt / chosen / rejected strings; the prompt is the chat-templated conversation."""
    rows = []
    for p in pairs:
        prompt = tokenizer.apply_chat_template(p["messages"], tokenize=False, add_generation_prompt=True)
        end = tokenizer.eos_token or ""
        rows.append({"prompt": prompt, "chosen": p["chosen"] + end, "rejected": p["rejected"] + end})
    return rows


def train_dpo(pairs_dir: str | Path | list[str | Path], out_dir: str | Path, cfg: DPOTrainConfig,
              max_steps: int = -1) -> dict[str, Any]:
    """Train (or resume) a DPO run on the pairs in ``pairs_dir`` (one collection folder, or several
    whose pairs are joined in the given order); returns the run's facts."""
    require("peft", "finetune", "metacog finetune dpo")
    require("trl", "finetune", "metacog finetune dpo")
    import torch
    import transformers
    from datasets import Dataset
    from peft import LoraConfig
    from transformers.trainer_utils import get_last_checkpoint
    from trl import DPOConfig, DPOTrainer

    from metacog_fast.finetune.base import base_gguf, load_model, load_tokenizer
    from metacog_fast.alfworld.finetune.sft import _trainer_class, check_checkpoint, score_loss_positions_only

    cfg.validate()
    base_gguf(cfg.base)  # an unknown base, or a folder that cannot be exported, fails before any work
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dirs = [pairs_dir] if isinstance(pairs_dir, (str, Path)) else list(pairs_dir)
    if not dirs:
        raise ValueError("pairs_dir: expected at least one collection folder")
    pairs = [p for d in dirs for p in load_pairs(d)]
    shas = [sha256_file(Path(d) / "pairs.jsonl") for d in dirs]
    sha = shas[0] if len(shas) == 1 else hashlib.sha256("".join(shas).encode()).hexdigest()
    # "sft"-shaped fields so that `metacog finetune export` treats the run as any LoRA run
    resolved = [str(Path(d).resolve()) for d in dirs]
    conf = {"dpo": asdict(cfg), "sft": {"base": cfg.base, "method": "lora", "examples": 0},
            "pairs_dir": resolved[0] if len(resolved) == 1 else resolved, "dataset_sha256": sha,
            "pairs": len(pairs), "max_steps": max_steps}
    if (out / "config.json").exists():
        old = read_json(out / "config.json")
        strip = lambda d: {k: v for k, v in d.items() if k not in SPEED_ONLY}  # noqa: E731
        if strip(old.get("dpo", {})) != strip(conf["dpo"]) or old.get("dataset_sha256") != sha:
            raise ValueError(f"{out}: the folder holds a run of another configuration or pair set; "
                             "use another --out, or the same options to resume")
    write_json_atomic(out / "config.json", conf)
    if (out / "facts.json").exists() and (out / "final").is_dir():
        return read_json(out / "facts.json")
    last = get_last_checkpoint(str(out / "checkpoints")) if (out / "checkpoints").is_dir() else None
    if last is not None:
        check_checkpoint(Path(last), "lora")
    transformers.set_seed(cfg.seed)
    torch.set_num_threads(cfg.threads or len(os.sched_getaffinity(0)))
    t0 = time.perf_counter()
    tokenizer = load_tokenizer(cfg.base)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    rows = dpo_rows(tokenizer, pairs)
    model = load_model(cfg.base)
    steps_per_epoch = max(1, -(-len(rows) // cfg.batch_size))
    args = DPOConfig(
        output_dir=str(out / "checkpoints"), per_device_train_batch_size=cfg.micro_batch_size,
        gradient_accumulation_steps=cfg.batch_size // cfg.micro_batch_size, num_train_epochs=cfg.epochs,
        max_steps=max_steps, learning_rate=cfg.learning_rate, lr_scheduler_type="cosine",
        warmup_steps=max(1, int(0.1 * steps_per_epoch * cfg.epochs)), logging_steps=1, beta=cfg.beta,
        save_strategy="steps", save_steps=cfg.save_steps, save_total_limit=3, seed=cfg.seed, data_seed=cfg.seed,
        bf16=resolve_precision(cfg.precision, torch.cuda.is_available()) == "bf16", use_cpu=not torch.cuda.is_available(), report_to="none",
        max_length=cfg.max_length, truncation_mode="keep_end", dataloader_num_workers=0,
        disable_tqdm=False, save_only_model=False, gradient_checkpointing=cfg.gradient_checkpointing,
        precompute_ref_log_probs=cfg.precompute_ref,
    )
    peft_config = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=0.0,
                             target_modules="all-linear", task_type="CAUSAL_LM")
    score_loss_positions_only()  # the head over the chosen / rejected tokens only, on a CPU too
    trainer = DPOTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                         peft_config=peft_config, callbacks=[_trainer_class()[1](out / "train_log.jsonl")])
    t_train = time.perf_counter()
    result = trainer.train(resume_from_checkpoint=last)
    train_s = time.perf_counter() - t_train
    trainer.save_model(str(out / "final"))
    tokenizer.save_pretrained(str(out / "final"))
    log = [json.loads(x) for x in (out / "train_log.jsonl").read_text().splitlines() if x.strip()]
    acc = [r["rewards/accuracies"] for r in log if "rewards/accuracies" in r]
    facts = {"pairs": len(rows), "games": len({p["game"] for p in pairs}), "steps": trainer.state.global_step,
             "epochs": trainer.state.epoch, "resumed_from": last, "final_train_loss": result.training_loss,
             "reward_accuracy_last": acc[-1] if acc else None, "train_seconds_this_call": train_s,
             "wall_seconds_this_call": time.perf_counter() - t0, "config": conf}
    write_json_atomic(out / "facts.json", facts)
    return facts
