"""Another base model for fine-tuning: a transformers Llama folder (``SFTConfig.base``) and its GGUF
twin (``finetune.base.hf_base_gguf`` / ``finetune.convert.gguf_from_hf``). The twin holds the same
weights as the folder (transformers reads them back exactly), llama.cpp computes the same logits and
tokens as transformers, the twin is rewritten when the folder changes or the file is damaged, and
what cannot be converted is refused with the field or file that is wrong."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("gguf")

from metacog_fast.finetune.base import HF_BASE_GGUF, base_gguf, load_model, load_tokenizer  # noqa: E402
from metacog_fast.finetune.convert import gguf_from_hf  # noqa: E402

TEXT = "You are in the middle of a room. Looking quickly around you, you see a desk 1 and a drawer 2."


def test_twin_holds_the_folders_weights_and_llama_cpp_computes_the_same_logits(tiny_base):
    import torch
    from llama_cpp import Llama

    twin = base_gguf(tiny_base)
    assert Path(twin) == Path(tiny_base).resolve() / HF_BASE_GGUF
    hf, back = load_model(tiny_base), load_model(twin)  # the folder, and transformers reading the GGUF
    sd, sd_back = hf.state_dict(), back.state_dict()
    for name, value in sd.items():  # Q/K permuted into llama.cpp's order and back, bit for bit
        assert torch.equal(value, sd_back[name]), name
    tok = load_tokenizer(tiny_base)
    ids = tok(TEXT, add_special_tokens=False)["input_ids"]
    assert load_tokenizer(twin)(TEXT, add_special_tokens=False)["input_ids"] == ids
    with torch.no_grad():
        want = hf(torch.tensor([ids])).logits[0].numpy()
    llm = Llama(model_path=twin, n_ctx=256, n_threads=1, logits_all=True, verbose=False)
    try:
        assert llm.tokenize(TEXT.encode(), add_bos=False, special=True) == ids  # the real SmolLM2 tokenizer
        llm.eval(ids)
        got = np.asarray(llm.scores[: len(ids)])
    finally:
        llm.close()
    assert np.abs(got - want).max() < 1e-3 * np.abs(want).max() + 1e-4
    assert (got.argmax(-1) == want.argmax(-1)).mean() > 0.9


def test_twin_is_reused_and_rewritten_when_the_folder_or_the_file_changes(tiny_base, tmp_path):
    import torch
    from transformers import LlamaForCausalLM

    folder = tmp_path / "mine"
    shutil.copytree(tiny_base, folder)
    twin = Path(base_gguf(str(folder)))
    stamp = twin.stat().st_mtime_ns
    assert Path(base_gguf(str(folder))).stat().st_mtime_ns == stamp  # unchanged folder: not converted again
    record = json.loads((folder / "metacog-base.json").read_text())
    torch.manual_seed(1)
    model = LlamaForCausalLM.from_pretrained(str(folder))
    with torch.no_grad():
        model.model.norm.weight.mul_(2.0)
    model.save_pretrained(str(folder))  # the user trained their model further
    base_gguf(str(folder))
    again = json.loads((folder / "metacog-base.json").read_text())
    assert again["sha256"] != record["sha256"] and again["sources"] != record["sources"]
    data = bytearray(twin.read_bytes())
    data[-1000:] = bytes(1000)  # damaged twin: noticed by its sha256 and written anew
    twin.write_bytes(bytes(data))
    base_gguf(str(folder))
    assert json.loads((folder / "metacog-base.json").read_text())["sha256"] == again["sha256"]
    from metacog_fast.finetune.base import sha256_file

    assert sha256_file(twin) == again["sha256"]


def test_what_cannot_be_converted_is_refused_by_name(tiny_base, tmp_path):
    from transformers import LlamaConfig

    with pytest.raises(ValueError, match="weight_type: expected one of"):
        gguf_from_hf(tiny_base, tmp_path / "x.gguf", weight_type="q2_k")
    with pytest.raises(ValueError, match="out: expected a path ending in .gguf"):
        gguf_from_hf(tiny_base, tmp_path / "x.bin")
    with pytest.raises(FileNotFoundError, match="config.json missing"):
        gguf_from_hf(tmp_path, tmp_path / "x.gguf")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="base: .*empty is a folder without config.json"):
        base_gguf(str(tmp_path / "empty"))
    biased = tmp_path / "biased"
    shutil.copytree(tiny_base, biased)
    cfg = LlamaConfig.from_pretrained(str(biased))
    cfg.attention_bias = True
    cfg.save_pretrained(str(biased))
    with pytest.raises(ValueError, match="attention_bias is true"):
        gguf_from_hf(biased, tmp_path / "x.gguf")
    with pytest.raises(ValueError, match="attention_bias is true"):
        load_model(str(biased))  # refused before training, not after
    other = tmp_path / "other_tok"
    shutil.copytree(tiny_base, other, ignore=shutil.ignore_patterns("metacog-base*"))
    tok = load_tokenizer(str(other))
    tok.add_tokens(["<tool_call_xyz>"])
    tok.save_pretrained(str(other))
    with pytest.raises(ValueError, match="tokenizer: .* has another vocabulary than smollm2"):
        base_gguf(str(other))
    assert not (other / HF_BASE_GGUF).exists() and not (tmp_path / "x.gguf").exists()
