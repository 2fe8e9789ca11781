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
    plain = MiniLMEncoder(EncoderConfig(precision="fp32", cache_size=0), st_model=encoder.st)
    plain._lines = False  # what a tokenizer failing the self-check gets
    assert plain._token_ids(texts) == want


def test_encoding_uses_the_same_ids(encoder):
    """Embeddings through the cached ids equal sentence-transformers' (fp32 path)."""
    import numpy as np

    np.testing.assert_allclose(encoder.encode(EDGE, use_cache=False), encoder.encode_reference(EDGE), atol=2e-6)
