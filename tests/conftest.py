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


def _has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


# Without a GPU, Triton kernels run on the CPU interpreter (must be set before triton is imported).
if not _has_gpu():
    os.environ.setdefault("TRITON_INTERPRET", "1")
