"""Model files that do not match their manifest are refused before anything reads them (issue 55,
defects 3 and 5): a damaged, truncated or replaced LoRA adapter under both serving modes (merged with
a cached merge already present, and llama.cpp applying the adapter), a damaged cached merge, a
scorer head with zeros written inside, a Dreamer checkpoint read for acting. The verification
cache (metacog_fast._integrity) still catches damage written in place.

Damage to a Dreamer checkpoint read for training is refused by
tests/test_muse_wm_model.py::test_checkpoint_errors_are_clear and
tests/test_metaworld_learn.py::test_versioned_checkpoint_survives_a_kill_between_its_two_writes.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
import warnings
from pathlib import Path

import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("gguf")

from metacog_fast.llm.models import SHIPPED_MODELS, default_gguf, resolve_model_folder  # noqa: E402

ADAPTER = SHIPPED_MODELS / "alfworld"
OTHER_ADAPTER = SHIPPED_MODELS / "reflector-dpo2" / "adapter.gguf"  # same size, another valid adapter
SCORER = SHIPPED_MODELS / "alfworld" / "scorer"


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def E(path: object) -> str:
    """``path`` as a regex that matches it literally."""
    return re.escape(str(path))


@pytest.fixture(scope="module")
def merged_home(tmp_path_factory):
    """A models home whose .merged cache already holds the shipped actor's merge (merged once here)."""
    home = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("METACOG_MODELS_HOME", str(home))
        mp.setenv("METACOG_ADAPTER_SERVING", "merged")
        files = resolve_model_folder(ADAPTER)
    assert Path(files.model_path).is_relative_to(home / ".merged") and files.lora_path is None
    return home


def _damage(path: Path, how: str) -> None:
    """Damage ``path`` in place: 64 kB of 0xff in the middle, the second half cut off, or the file
    rewritten with another valid adapter of the same size."""
    if how == "middle":
        with open(path, "r+b") as f:
            f.seek(path.stat().st_size // 2)
            f.write(b"\xff" * 65536)
    elif how == "truncated":
        os.truncate(path, path.stat().st_size // 2)
    elif how == "replaced":
        shutil.copyfile(OTHER_ADAPTER, path)
    else:  # pragma: no cover
        raise AssertionError(how)


@pytest.mark.parametrize("serving", ["merged", "adapter"])
@pytest.mark.parametrize("how", ["middle", "truncated", "replaced"])
def test_damaged_adapter_is_refused_before_llama_cpp_loads_it(merged_home, tmp_path, monkeypatch, serving, how):
    """Merged serving: the cache (keyed by model.json's sha256) already holds this adapter's merge,
    which used to be served whatever the adapter file had become. Adapter serving: llama.cpp used to
    load the damaged adapter (and could crash at the first decode). Both now raise, naming the file
    and the model.json, before any llama.cpp call."""
    from metacog_fast.llm import open_llm

    monkeypatch.setenv("METACOG_MODELS_HOME", str(merged_home))
    monkeypatch.setenv("METACOG_ADAPTER_SERVING", serving)
    folder = tmp_path / "actor"
    shutil.copytree(ADAPTER, folder)
    before = resolve_model_folder(folder)  # the intact copy loads (merged: from the existing cache)
    assert (before.lora_path is None) == (serving == "merged")
    cached = sorted((merged_home / ".merged").iterdir())
    _damage(folder / "adapter.gguf", how)
    want = rf"{E(folder / 'adapter.gguf')}: .*{E(folder / 'model.json')} records .*export the model again"
    with pytest.raises(ValueError, match=want):
        resolve_model_folder(folder)
    with pytest.raises(ValueError, match=want):
        open_llm(f"llama-cpp://{folder}", n_ctx=256)
    assert sorted((merged_home / ".merged").iterdir()) == cached  # nothing merged from the damaged file


def test_adapter_given_as_a_file_is_checked_against_the_model_json_beside_it(tmp_path):
    """LlamaCppConfig(lora_path=...) without the folder: the model.json beside the adapter still applies."""
    from metacog_fast.llm.llama_cpp_backend import LlamaCppConfig, LlamaCppLLM

    folder = tmp_path / "actor"
    shutil.copytree(ADAPTER, folder)
    _damage(folder / "adapter.gguf", "middle")
    want = rf"{E(folder / 'adapter.gguf')}: sha256 .* {E(folder / 'model.json')} records"
    with pytest.raises(ValueError, match=want):
        LlamaCppLLM(LlamaCppConfig(model_path=default_gguf(), lora_path=str(folder / "adapter.gguf"), n_ctx=256))


def _merged_folder(tmp_path: Path) -> tuple[Path, Path]:
    """A merged model folder over a copy of the default GGUF, its model.json recording size and sha256."""
    folder = tmp_path / "merged"
    folder.mkdir()
    gguf = folder / "model.gguf"
    shutil.copyfile(default_gguf(), gguf)
    info = {"format": "merged", "file": "model.gguf", "sha256": sha256_file(gguf), "bytes": gguf.stat().st_size}
    (folder / "model.json").write_text(json.dumps(info))
    return folder, gguf


def test_damaged_merged_model_folder_is_refused(tmp_path):
    """A merged model folder (model.json format 'merged'): its GGUF is checked the same way, by
    folder and by file path."""
    from metacog_fast.llm.llama_cpp_backend import LlamaCppConfig, LlamaCppLLM

    folder, gguf = _merged_folder(tmp_path)
    assert resolve_model_folder(folder).model_path == str(gguf)
    with open(gguf, "r+b") as f:
        f.seek(gguf.stat().st_size // 2)
        f.write(b"\x00" * 65536)
    with pytest.raises(ValueError, match=rf"{E(gguf)}: sha256 .*{E(folder / 'model.json')} records"):
        resolve_model_folder(folder)
    with pytest.raises(ValueError, match=rf"{E(gguf)}: sha256 .*{E(folder / 'model.json')} records"):
        LlamaCppLLM(LlamaCppConfig(model_path=str(gguf), n_ctx=256))


def test_damaged_cached_merge_is_merged_again(merged_home, tmp_path, monkeypatch):
    """The cached merge itself is checked against the model.json written beside it; a damaged one is
    merged again (a RuntimeWarning names it), never served."""
    home = tmp_path / "home"
    shutil.copytree(merged_home / ".merged", home / ".merged")
    monkeypatch.setenv("METACOG_MODELS_HOME", str(home))
    monkeypatch.setenv("METACOG_ADAPTER_SERVING", "merged")
    (cache,) = (home / ".merged").iterdir()
    merged, manifest = cache / "model-q8_0.gguf", json.loads((cache / "model.json").read_text())
    assert manifest["adapter_sha256"] == json.loads((ADAPTER / "model.json").read_text())["sha256"]
    with open(merged, "r+b") as f:
        f.seek(merged.stat().st_size // 2)
        f.write(b"\x00" * 65536)
    with pytest.warns(RuntimeWarning, match=rf"cached merge not usable, merging again: {E(merged)}: sha256"):
        files = resolve_model_folder(ADAPTER)
    assert files.model_path == str(merged) and sha256_file(merged) == manifest["sha256"]


def test_verification_cache_still_catches_damage_written_in_place(tmp_path, monkeypatch):
    """A verified digest is remembered by (path, dev, inode, size, mtime, ctime); a write in place
    with the mtime set back changes the ctime, so it is still caught. A file changed moments before
    it was hashed is not remembered at all."""
    from metacog_fast import _integrity

    monkeypatch.setenv("METACOG_MODELS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("METACOG_ADAPTER_SERVING", "adapter")
    folder = tmp_path / "actor"
    shutil.copytree(ADAPTER, folder)
    adapter = folder / "adapter.gguf"
    monkeypatch.setattr(_integrity, "RACY_SECONDS", 3600.0)  # the copy counts as just written
    resolve_model_folder(folder)
    assert not (tmp_path / "home" / ".verified").exists() or not any(
        json.loads(p.read_text())["path"] == str(adapter) for p in (tmp_path / "home" / ".verified").iterdir())

    monkeypatch.setattr(_integrity, "RACY_SECONDS", 0.05)
    time.sleep(0.1)  # the copy is now older than the racy window
    resolve_model_folder(folder)
    sidecars = [json.loads(p.read_text()) for p in (tmp_path / "home" / ".verified").iterdir()]
    (entry,) = [s for s in sidecars if s["path"] == str(adapter)]
    assert entry["sha256"] == json.loads((folder / "model.json").read_text())["sha256"]

    st = adapter.stat()
    _damage(adapter, "middle")
    os.utime(adapter, ns=(st.st_atime_ns, st.st_mtime_ns))  # hide the write from the mtime
    assert adapter.stat().st_mtime_ns == st.st_mtime_ns and adapter.stat().st_size == st.st_size
    with pytest.raises(ValueError, match=rf"{E(adapter)}: sha256 .* records"):
        resolve_model_folder(folder)
    _integrity._MEMO.clear()  # a new process: only the sidecar is left
    with pytest.raises(ValueError, match=rf"{E(adapter)}: sha256 .* records"):
        resolve_model_folder(folder)

    shutil.copyfile(ADAPTER / "adapter.gguf", tmp_path / "intact")
    os.replace(tmp_path / "intact", adapter)  # a replaced file (new inode) is hashed again
    resolve_model_folder(folder)


def test_model_json_without_digest_loads_with_a_warning(tmp_path, monkeypatch):
    """A hand-written model.json that records neither sha256 nor bytes: nothing to check against,
    so the model loads with a RuntimeWarning that says so."""
    monkeypatch.setenv("METACOG_MODELS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("METACOG_ADAPTER_SERVING", "adapter")
    folder = tmp_path / "actor"
    shutil.copytree(ADAPTER, folder)
    info = json.loads((folder / "model.json").read_text())
    del info["sha256"], info["bytes"]
    (folder / "model.json").write_text(json.dumps(info))
    with pytest.warns(RuntimeWarning, match="records no sha256 or bytes"):
        assert resolve_model_folder(folder).lora_path == str((folder / "adapter.gguf").resolve())


# --- scorer heads ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def encoder():
    from metacog_fast.scoring import MiniLMEncoder

    return MiniLMEncoder()


def test_scorer_head_with_zeros_inside_is_refused(encoder, tmp_path):
    """64 kB of zeros inside head.safetensors leave a valid safetensors file with finite weights;
    the size and sha256 config.json records catch it."""
    from metacog_fast.scoring import TrajectoryScorer

    folder = tmp_path / "scorer"
    shutil.copytree(SCORER, folder)
    head = folder / "head.safetensors"
    TrajectoryScorer.load(folder, encoder=encoder)  # the intact copy loads without a warning
    with open(head, "r+b") as f:
        f.seek(head.stat().st_size // 2)
        f.write(b"\x00" * 65536)
    with pytest.raises(ValueError, match=rf"{E(head)}: sha256 .* {E(folder / 'config.json')} records sha256"):
        TrajectoryScorer.load(folder, encoder=encoder)


def test_scorer_saved_records_its_digest_and_old_folders_warn(encoder, tmp_path):
    """save() records the head's size and sha256; a folder saved before that loads with a warning
    until record_head_digest adds them."""
    from metacog_fast.scoring import TrajectoryScorer
    from metacog_fast.scoring.scorer import record_head_digest

    scorer = TrajectoryScorer(encoder=encoder)
    folder = scorer.save(tmp_path / "s", include_replay=False)
    meta = json.loads((folder / "config.json").read_text())
    assert meta["files"]["head.safetensors"]["bytes"] == (folder / "head.safetensors").stat().st_size
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        TrajectoryScorer.load(folder, encoder=encoder)
    del meta["files"]
    (folder / "config.json").write_text(json.dumps(meta))
    with pytest.warns(RuntimeWarning, match="records no size and sha256 .*record_head_digest"):
        TrajectoryScorer.load(folder, encoder=encoder)
    record_head_digest(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        TrajectoryScorer.load(folder, encoder=encoder)


# --- Dreamer checkpoints read for acting ---------------------------------------------------------

def test_acting_checkpoint_with_zeros_inside_is_refused(tmp_path):
    """load_acting_weights (what MuseWMAgent acts from) used to read the tensor file without the
    digest its JSON records; it now checks it, and reads the file the JSON names."""
    from metacog_fast.metaworld.models.dreamer import Dreamer
    from metacog_fast.metaworld.muse_wm import load_acting_weights
    from metacog_fast.metaworld.train import checkpoint as ck
    from metacog_fast.metaworld.train.config import profile

    cfg = profile("smoke")
    stem = tmp_path / "ckpt" / "latest"
    ck.save_checkpoint(stem, Dreamer(cfg.model), cfg, versioned=True)
    assert load_acting_weights(stem).weights  # reads latest.1.safetensors, the file the JSON names
    st = stem.parent / "latest.1.safetensors"
    with open(st, "r+b") as f:
        f.seek(st.stat().st_size // 2)
        f.write(b"\x00" * 4096)
    with pytest.raises(ValueError, match=rf"{E(st)} does not match the digest in its JSON .*sha256"):
        load_acting_weights(stem)
    os.truncate(st, 100)
    with pytest.raises(ValueError, match=rf"{E(st)} does not match the digest in its JSON .*100 bytes"):
        load_acting_weights(stem)


def test_server_refuses_a_damaged_model_folder_gguf_before_starting(tmp_path, monkeypatch):
    """``metacog serve --gguf`` checks a model folder's GGUF against its model.json before it starts
    llama.cpp's server (no process is started for a damaged file)."""
    from metacog_fast.llm import serve

    folder, gguf = _merged_folder(tmp_path)
    os.truncate(gguf, gguf.stat().st_size - 4096)
    started = []
    monkeypatch.setattr(serve.subprocess, "Popen", lambda *a, **k: started.append(a))
    with pytest.raises(serve.ServeError, match=rf"^--gguf: .*{E(gguf)}"):
        serve.start(port=18731, gguf=str(gguf))
    assert started == []


def test_continuing_training_from_a_damaged_adapter_is_refused(tmp_path):
    """``init_adapter`` (continue training from a model folder) reads the adapter only after its
    model.json's size and sha256 agree."""
    from metacog_fast.finetune.export import read_adapter

    folder = tmp_path / "alfworld"
    shutil.copytree(ADAPTER, folder)
    assert read_adapter(str(folder))[2] > 0  # the intact copy reads back
    _damage(folder / "adapter.gguf", "middle")
    with pytest.raises(ValueError, match=rf"^init_adapter: {E(folder / 'adapter.gguf')}: sha256"):
        read_adapter(str(folder))
