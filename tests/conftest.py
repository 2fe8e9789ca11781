"""Test-wide settings, applied before any test module imports triton or transformers."""
from __future__ import annotations

import os
import sys

# The benchmark anchors (bench/anchors/) are imported by the tests that compare against them.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

# Models come from installed packages, never from a hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _pin_xdist_worker() -> None:
    """Give each of n parallel pytest-xdist workers its own 1/n of the cores (when there are at least
    as many cores as workers), before torch or llama.cpp read the affinity mask.

    Everything in the package sizes its thread pools from ``os.sched_getaffinity`` (llama.cpp's
    default ``n_threads``, fine-tuning's torch threads, Ray's CPUs), and so do OpenMP and torch.
    Unpinned, two workers on two cores each start two-thread pools: four busy threads on two cores,
    and llama.cpp's spinning barriers make every decode wait for a descheduled thread. The same
    mask reaches the subprocesses a test starts. ``METACOG_TEST_PIN=0`` turns it off."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker.startswith("gw") and count.isdigit()) or os.environ.get("METACOG_TEST_PIN", "1") == "0":
        return
    n, i = int(count), int(worker[2:])
    try:
        cores = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return
    if n < 2 or len(cores) < n or i >= n:
        return
    share = set(cores[i::n])
    os.sched_setaffinity(0, share)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(len(share))


_pin_xdist_worker()


def _has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


# Without a GPU, Triton kernels run on the CPU interpreter (must be set before triton is imported).
if not _has_gpu():
    os.environ.setdefault("TRITON_INTERPRET", "1")


# ---- fine-tuning bases -------------------------------------------------------------------------
import pytest  # noqa: E402

TINY_LLAMA = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=2048, tie_word_embeddings=True)
"""The tiny base of the fast fine-tuning tests: a random 2-layer Llama (grouped-query attention, so
that Q and K are permuted with different head counts), ~3.2 M parameters, nearly all in the embedding."""


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    """The shipped SmolLM2's tokenizer as fine-tuning loads it (``load_tokenizer("smollm2")``: transformers
    parses the GGUF's 49 k tokens and merges, seconds), once per session. Do not modify it."""
    pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    from metacog_fast.finetune.base import load_tokenizer

    return load_tokenizer("smollm2")


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory, smollm2_tokenizer) -> str:
    """A transformers folder of a random tiny Llama with the REAL tokenizer of the shipped SmolLM2
    (vocabulary, merges, chat template), usable as ``SFTConfig.base``; its GGUF twin is made here."""
    pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from metacog_fast.finetune.base import hf_base_gguf

    folder = tmp_path_factory.mktemp("tiny_base") / "tiny-llama"
    tok = smollm2_tokenizer
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id, **TINY_LLAMA)
    LlamaForCausalLM(cfg).save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    hf_base_gguf(folder)
    return str(folder)


@pytest.fixture(scope="module", params=["tiny", pytest.param("smollm2", marks=pytest.mark.slow)])
def finetune_base(request) -> str:
    """The base of a training test: the tiny Llama (seconds), and the shipped SmolLM2-135M under
    ``-m slow`` (minutes per run on a 2-core CPU), with the same assertions."""
    return request.getfixturevalue("tiny_base") if request.param == "tiny" else "smollm2"



# ---- order ---------------------------------------------------------------------------------------
def pytest_collection_modifyitems(config, items):
    """Modules holding a test marked ``starts_first(seconds=...)`` (the longest tests, tens of seconds
    to minutes) run before the others, the longest first, each module kept whole (so that its
    module-scoped fixtures are made once): the xdist workers (scripts/test.sh) then end together
    instead of one starting a two-minute install at the end."""
    weight: dict[str, float] = {}
    for it in items:
        m = it.get_closest_marker("starts_first")
        if m is not None:
            weight[it.fspath.strpath] = max(weight.get(it.fspath.strpath, 0.0), float(m.kwargs.get("seconds", 1)))
    if weight:
        items.sort(key=lambda it: -weight.get(it.fspath.strpath, 0.0))  # stable: order within a module kept
