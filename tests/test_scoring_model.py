"""MiniLM encoder fast path and TrajectoryScorer on real ALFWorld chunks.

The fast paths are checked against sentence-transformers' fp32 ``encode`` (the
anchor): embeddings, caches, and AUROC within 0.01 on the same data.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from metacog_fast.metrics import auroc2
from metacog_fast.scoring import EncoderConfig, MiniLMEncoder, ScorerConfig, TrajectoryScorer, render_trajectory
from metacog_fast.scoring.datasets import build_chunk_dataset, default_alfworld_root, split_by_game
from metacog_fast.scoring.encoder import cpu_has_bf16

AUROC_TOL = 0.01


@pytest.fixture(scope="module")
def enc32() -> MiniLMEncoder:
    return MiniLMEncoder(EncoderConfig(precision="fp32"))


@pytest.fixture(scope="module")
def data():
    try:
        root = default_alfworld_root()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    examples = build_chunk_dataset(root, split="valid_seen", max_games=80, seed=0)
    return split_by_game(examples, test_fraction=0.35, seed=0)


def _texts(examples):
    return [render_trajectory(e.chunk, e.plan) for e in examples]


@pytest.fixture(scope="module")
def reference(enc32, data):
    """sentence-transformers fp32 embeddings of train and test, and a head trained on them."""
    train, test = data
    emb = {}
    for name, ex in (("train", train), ("test", test)):
        tasks = sorted({e.task for e in ex})
        tmap = dict(zip(tasks, enc32.encode_reference(tasks)))
        emb[name] = (np.stack([tmap[e.task] for e in ex]), enc32.encode_reference(_texts(ex)),
                     np.array([e.label for e in ex], np.float32))
    scorer = TrajectoryScorer(ScorerConfig(encoder=EncoderConfig(precision="fp32")), encoder=enc32)
    scorer.fit_embeddings(*emb["train"])
    return scorer, emb


def test_fp32_fast_path_matches_sentence_transformers(enc32, data):
    texts = _texts(data[1][:40])
    np.testing.assert_allclose(enc32.encode(texts, use_cache=False), enc32.encode_reference(texts), atol=1e-5, rtol=0)


def test_cache_equals_uncached_and_lru_eviction(enc32):
    enc = MiniLMEncoder(EncoderConfig(precision="fp32", cache_size=3), share=enc32)
    texts = ["> go to desk 1\nYou arrive at desk 1.", "> look", "> take pen 1 from desk 1", "> inventory"]
    first = enc.encode(texts[:3])
    assert len(enc.cache) == 3 and enc.cache.misses == 3
    again = enc.encode(texts[:3])
    assert enc.cache.hits == 3
    np.testing.assert_array_equal(first, again)
    np.testing.assert_allclose(again, enc.encode(texts[:3], use_cache=False), atol=1e-5, rtol=0)
    enc.encode(texts[:1])  # refresh texts[0]; texts[1] is now the least recent
    enc.encode(texts[3:])
    assert len(enc.cache) == 3
    assert texts[1] not in enc.cache and texts[0] in enc.cache and texts[3] in enc.cache
    # duplicates within one call are embedded once and returned for every position
    dup = enc.encode([texts[1], texts[1]])
    np.testing.assert_array_equal(dup[0], dup[1])
    # M(I) per task: its own cache, same numbers as encode
    t = enc.encode_task("put a clean bowl in cabinet.")
    assert t.shape == (1, 384) and "put a clean bowl in cabinet." in enc.task_cache
    np.testing.assert_allclose(t[0], enc.encode(["put a clean bowl in cabinet."], use_cache=False)[0], atol=1e-6)


def test_encoder_bad_input(enc32):
    with pytest.raises(ValueError, match=r"texts\[1\]: empty text"):
        enc32.encode(["ok", "  "])
    with pytest.raises(TypeError, match="single str"):
        enc32.encode("just a string")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"texts\[0\]"):
        enc32.encode([3])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="task"):
        enc32.encode_task("")
    with pytest.raises(ValueError, match="precision"):
        MiniLMEncoder(EncoderConfig(precision="int4"), share=enc32)
    assert enc32.encode([]).shape == (0, 384)


FAST_PRECISIONS = ["int8"] + (["bf16"] if cpu_has_bf16() else [])


@pytest.mark.parametrize("precision", FAST_PRECISIONS)
def test_fast_path_keeps_auroc(enc32, data, reference, precision):
    """Same head, same held-out chunks: AUROC of the fast encoder within 0.01 of fp32 ST."""
    scorer, emb = reference
    test = data[1]
    fast = MiniLMEncoder(EncoderConfig(precision=precision), share=enc32)
    task_fast = np.concatenate([fast.encode_task(e.task) for e in test])
    traj_fast = fast.encode(_texts(test))
    y = emb["test"][2]
    a_ref = auroc2(scorer.score_embeddings(emb["test"][0], emb["test"][1]), y)
    a_fast = auroc2(scorer.score_embeddings(task_fast, traj_fast), y)
    assert a_ref > 0.7
    assert abs(a_fast - a_ref) <= AUROC_TOL, (precision, a_ref, a_fast)
    cos = (traj_fast * emb["test"][1]).sum(1)
    assert cos.mean() > 0.97


def test_training_lowers_loss_and_separates_held_out_games(reference):
    scorer, emb = reference
    fresh = TrajectoryScorer(scorer.config, encoder=scorer.encoder)
    loss0 = fresh.loss(*emb["test"])
    hist = fresh.fit_embeddings(*emb["train"], epochs=20)
    assert hist[-1] < 0.7 * hist[0]
    assert fresh.loss(*emb["test"]) < loss0
    p = fresh.score_embeddings(emb["test"][0], emb["test"][1])
    assert auroc2(p, emb["test"][2]) > 0.75
    assert 0.0 < p.min() and p.max() < 1.0


def test_score_end_to_end_and_backends(reference, data):
    scorer, _ = reference
    ex = [e for e in data[1] if e.game == data[1][0].game]
    chunks = [e.chunk for e in ex]
    p = scorer.score(ex[0].task, ex[0].plan, chunks)
    assert p.shape == (len(chunks),) and p.dtype == np.float32
    t = scorer.encoder.encode_task(ex[0].task)
    x = scorer.encoder.encode([render_trajectory(c, ex[0].plan) for c in chunks])
    head = {k: v.detach() for k, v in scorer.head.items()}
    from metacog_fast.kernels import score_trajectories

    for be in ("torch", "cpu"):
        np.testing.assert_allclose(p, score_trajectories(t, x, head, backend=be), atol=1e-5)
    assert scorer.score(ex[0].task, ex[0].plan, []).shape == (0,)
    with pytest.raises(ValueError, match="task"):
        scorer.score("", ex[0].plan, chunks)
    with pytest.raises(ValueError, match="empty chunk"):
        scorer.score(ex[0].task, ex[0].plan, [[]])


def test_fit_incremental_mixes_replay(reference, data):
    scorer, emb = reference
    s = TrajectoryScorer(ScorerConfig(encoder=EncoderConfig(precision="fp32"), incremental_steps=5, batch_size=16),
                         encoder=scorer.encoder)
    s.fit_embeddings(*emb["train"], epochs=2)
    n_pre = s.replay.size(0)
    before = {k: v.detach().clone() for k, v in s.head.items()}
    losses = s.fit_incremental(data[1][:12])
    assert len(losses) == 5 and all(np.isfinite(losses))
    assert s.replay.size(0) == n_pre and s.replay.size(1) == 12
    assert any(not torch.equal(before[k], s.head[k]) for k in before)
    with pytest.raises(ValueError, match="examples"):
        s.fit_incremental([])


def test_save_load_round_trip(reference, data, tmp_path):
    scorer, emb = reference
    folder = scorer.save(tmp_path / "msa")
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "head.safetensors"]  # no temp files left
    loaded = TrajectoryScorer.load(folder, encoder=scorer.encoder)
    assert loaded.config == scorer.config
    for k in scorer.head:
        torch.testing.assert_close(loaded.head[k], scorer.head[k].detach(), atol=0, rtol=0)
    np.testing.assert_array_equal(loaded.replay.arrays()[1], scorer.replay.arrays()[1])
    ex = data[1][0]
    np.testing.assert_array_equal(loaded.score(ex.task, ex.plan, [ex.chunk]), scorer.score(ex.task, ex.plan, [ex.chunk]))


def test_load_bad_files(reference, tmp_path):
    scorer, _ = reference
    with pytest.raises(FileNotFoundError, match="config.json"):
        TrajectoryScorer.load(tmp_path / "nothing", encoder=scorer.encoder)
    folder = scorer.save(tmp_path / "a", include_replay=False)
    (folder / "config.json").write_text("{broken")
    with pytest.raises(ValueError, match="not valid JSON"):
        TrajectoryScorer.load(folder, encoder=scorer.encoder)
    folder = scorer.save(tmp_path / "b", include_replay=False)
    meta = json.loads((folder / "config.json").read_text())
    meta["config"]["colour"] = "red"
    (folder / "config.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="unknown fields"):
        TrajectoryScorer.load(folder, encoder=scorer.encoder)
    from safetensors.numpy import save_file

    from metacog_fast.scoring.scorer import record_head_digest

    folder = scorer.save(tmp_path / "c", include_replay=False)
    bad = {k: v.detach().numpy().copy() for k, v in scorer.head.items()}
    bad["l1.w"][0, 0] = np.nan
    save_file(bad, str(folder / "head.safetensors"))
    with pytest.raises(ValueError, match="config.json records .* bytes and sha256"):  # another file than saved
        TrajectoryScorer.load(folder, encoder=scorer.encoder)
    record_head_digest(folder)  # certified as it is: the checks of the content still apply
    with pytest.raises(ValueError, match="NaN"):
        TrajectoryScorer.load(folder, encoder=scorer.encoder)
    (folder / "head.safetensors").write_bytes(b"garbage")
    record_head_digest(folder)
    with pytest.raises(ValueError, match="safetensors"):
        TrajectoryScorer.load(folder, encoder=scorer.encoder)
