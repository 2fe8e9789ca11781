"""The encoder's line-cached tokenisation (``MiniLMEncoder._token_ids``) gives exactly the
tokenizer's own ids: on real chunk texts, edge cases (empty lines, trailing newline, CRLF, accents,
punctuation, a text past the 256-piece truncation), with a warm cache, after the cache overflows,
and on the plain path."""
from __future__ import annotations

import pytest

from metacog_fast.scoring import EncoderConfig, MiniLMEncoder, render_trajectory
from metacog_fast.scoring import encoder as E
from metacog_fast.scoring.datasets import build_chunk_dataset, default_alfworld_root

EDGE = [
    "> look",
    "> go to desk 1\n\nYou arrive at desk 1.\n",
    "\nleading newline, then text",
    "crlf line\r\nnext line\r\n",
    "Café, naïve — résumé: (tabs)\tand  double  spaces!",
    "\n".join(f"> take apple {i} from fridge 1\nYou pick up the apple {i}." for i in range(80)),  # > 256 pieces
    "no newline at all, just one long sentence with numbers 1 2 3 and symbols #$%&",
]


@pytest.fixture(scope="module")
def encoder() -> MiniLMEncoder:
    return MiniLMEncoder(EncoderConfig(precision="fp32", cache_size=0))


@pytest.fixture(scope="module")
def texts() -> list[str]:
    out = list(EDGE)
    try:
        root = default_alfworld_root()
    except FileNotFoundError:
        return out
    out += [render_trajectory(e.chunk, e.plan) for e in build_chunk_dataset(root, split="valid_seen", max_games=20, seed=1)]
    return out


def _plain(enc: MiniLMEncoder, texts: list[str]) -> list[list[int]]:
    return enc.tokenizer(texts, truncation=True, max_length=enc.max_length, return_attention_mask=False,
                         return_token_type_ids=False)["input_ids"]


def test_line_cache_equals_the_tokenizer(encoder, texts):
    want = _plain(encoder, texts)
    assert encoder._token_ids(texts) == want  # cold cache
    assert encoder._token_ids(texts) == want  # warm cache
    assert isinstance(encoder._lines, dict) and len(encoder._lines) > 0
    assert max(len(x) for x in want) == encoder.max_length  # the truncation case is covered


def test_line_cache_overflow_and_plain_path(encoder, texts, monkeypatch):
    want = _plain(encoder, texts)
    monkeypatch.setattr(E, "LINE_CACHE_SIZE", 8)
    assert encoder._token_ids(texts) == want
    plain = MiniLMEncoder(EncoderConfig(precision="fp32", cache_size=0), share=encoder)
    plain._lines = False  # what a tokenizer failing the self-check gets
    assert plain._token_ids(texts) == want


def test_encoding_uses_the_same_ids(encoder):
    """Embeddings through the cached ids equal sentence-transformers' (fp32 path)."""
    import numpy as np

    np.testing.assert_allclose(encoder.encode(EDGE, use_cache=False), encoder.encode_reference(EDGE), atol=2e-6)


def test_the_encoder_loads_without_sentence_transformers_and_matches_it(tmp_path) -> None:
    """The fast path loads the transformer and tokenizer with transformers alone (sentence-transformers
    costs ~2.6 s of imports per process); sentence-transformers is imported for encode_reference only,
    and the tokenizer and truncation length are the ones it would have used."""
    import subprocess
    import sys

    code = ("import sys, numpy as np\n"
            "from metacog_fast.scoring import EncoderConfig, MiniLMEncoder\n"
            "enc = MiniLMEncoder(EncoderConfig(precision='fp32', cache_size=0))\n"
            "fast = enc.encode(['go to desk 1', 'You arrive at desk 1.'])\n"
            "assert 'sentence_transformers' not in sys.modules\n"
            "ref = enc.encode_reference(['go to desk 1', 'You arrive at desk 1.'])\n"
            "assert 'sentence_transformers' in sys.modules\n"
            "assert enc.max_length == enc.st.max_seq_length == 256, (enc.max_length, enc.st.max_seq_length)\n"
            "assert enc.tokenizer('a b').input_ids == enc.st.tokenizer('a b').input_ids\n"
            "print(float(np.abs(fast - ref).max()))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert float(out.stdout.strip().splitlines()[-1]) < 2e-6


def test_share_and_model_path_are_checked(encoder: MiniLMEncoder, tmp_path) -> None:
    shared = MiniLMEncoder(EncoderConfig(precision="fp32", cache_size=0), share=encoder)
    assert shared.base is encoder.base and shared.tokenizer is encoder.tokenizer
    assert shared.max_length == encoder.max_length
    with pytest.raises(TypeError, match="share: expected a MiniLMEncoder"):
        MiniLMEncoder(EncoderConfig(precision="fp32"), share=object())
    with pytest.raises(ValueError, match="share/st_model"):
        MiniLMEncoder(EncoderConfig(precision="fp32"), share=encoder, st_model=object())
    with pytest.raises(ValueError, match="model_path: .* is not a sentence-transformers folder"):
        MiniLMEncoder(EncoderConfig(precision="fp32", model_path=str(tmp_path)))
    import json
    import shutil

    folder = tmp_path / "cls"
    shutil.copytree(encoder.model_path, folder)
    pooling = json.loads((folder / "1_Pooling" / "config.json").read_text())
    pooling.update(pooling_mode_cls_token=True, pooling_mode_mean_tokens=False)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    with pytest.raises(ValueError, match="mean Pooling"):
        MiniLMEncoder(EncoderConfig(precision="fp32", model_path=str(folder)))
