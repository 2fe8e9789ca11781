"""The fine-tuning floor shared by the families: the base model read from GGUF by transformers
(:mod:`metacog_fast.finetune.base`) and LoRA adapters to and from GGUF (:mod:`metacog_fast.finetune.export`).
What is trained on which data lives with each family (``metacog_fast.alfworld.finetune``,
``metacog_fast.scienceworld.finetune_data``). Training and export need the ``[finetune]`` extra.
"""
