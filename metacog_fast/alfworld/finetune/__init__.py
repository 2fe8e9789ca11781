"""Pre-deployment fine-tuning (MUSE Algorithm 3): SFT of the ALFWorld actor on expert and
successful episodes, exported to GGUF for the embedded llama.cpp backend. ``docs/finetune.md``.

Importing this package needs nothing beyond the core; training and export need the
``[finetune]`` extra (transformers, peft, trl, gguf).
"""
from metacog_fast.alfworld.finetune.data import DataConfig, build_dataset, load_dataset
from metacog_fast.alfworld.finetune.transcripts import LOSS_MODES, Transcript, actor_transcript

__all__ = ["DataConfig", "LOSS_MODES", "Transcript", "actor_transcript", "build_dataset", "load_dataset"]
