"""Benchmarks run with pytest-benchmark:  pytest bench/ --benchmark-json=bench/results/<name>.json

Every result carries the machine facts (CPU model and flags, threads, versions,
the selected ISA path) so that numbers from different machines are never mixed
up. Each benchmark records its anchor ratio in ``benchmark.extra_info``.
"""
from __future__ import annotations

import os
import platform

import pytest


def _cpu_facts() -> dict:
    facts = {"machine": platform.machine(), "processor": platform.processor(), "nproc": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
        for line in text.splitlines():
            if line.startswith("model name"):
                facts["model"] = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = line.split(":", 1)[1].split()
                facts["simd_flags"] = sorted(f for f in flags if f.startswith(("avx", "fma", "sse4", "amx", "f16c")))
                break
    except OSError:
        pass
    return facts


def _versions() -> dict:
    out = {"python": platform.python_version()}
    for mod in ("torch", "numpy", "hnswlib", "llama_cpp", "sentence_transformers", "triton"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:
            out[mod] = None
    return out


def pytest_benchmark_update_machine_info(config, machine_info):
    import metacog_fast

    machine_info["metacog_cpu"] = _cpu_facts()
    machine_info["metacog_versions"] = _versions()
    machine_info["metacog_backends"] = metacog_fast.backends()
    machine_info["env"] = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "METACOG_ISA", "OPENBLAS_CORETYPE")}


@pytest.fixture
def torch_threads():
    """Set torch and OpenMP threads for one benchmark, restoring afterwards."""
    import torch

    import metacog_fast

    before = torch.get_num_threads()
    core = None
    try:
        core = metacog_fast.core()
        core_before = core.get_num_threads()
    except Exception:
        core_before = None

    def set_threads(n: int) -> None:
        torch.set_num_threads(n)
        if core is not None:
            core.set_num_threads(n)

    yield set_threads
    torch.set_num_threads(before)
    if core is not None and core_before is not None:
        core.set_num_threads(core_before)
