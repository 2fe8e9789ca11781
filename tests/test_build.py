"""The build report, backend selection and the shared dense primitive."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import metacog_fast
from metacog_fast._backend import BackendUnavailable, resolve_backend


def test_backends_report_has_every_section():
    info = metacog_fast.backends()
    assert set(info) >= {"core", "cpu", "cuda", "triton", "torch"}
    cpu = info["cpu"]
    assert cpu is not None, "the compiled core is missing"
    assert cpu["isa_compiled"] == ["generic", "avx2", "avx512", "avx512_bf16"]
    assert "generic" in cpu["isa_supported"]
    assert cpu["isa_selected"] in cpu["isa_supported"]
    # the best supported path is the one selected by default
    assert cpu["isa_selected"] == cpu["isa_supported"][-1]
    assert cpu["openmp_threads"] >= 1
    assert info["triton"]["importable"] in (True, False)


def test_selected_isa_matches_cpu_flags():
    flags = open("/proc/cpuinfo").read()
    supported = metacog_fast.backends()["cpu"]["isa_supported"]
    assert ("avx2" in supported) == (" avx2" in flags and " fma" in flags)
    assert ("avx512_bf16" in supported) == (" avx512_bf16" in flags and "avx512f" in flags)


def test_cuda_request_without_cuda_build_fails_loudly():
    if metacog_fast.backends()["cuda"] is not None:
        pytest.skip("this build has CUDA")
    with pytest.raises(BackendUnavailable, match="METACOG_BACKEND=cuda"):
        resolve_backend("cuda")


def test_unknown_backend_is_a_value_error():
    with pytest.raises(ValueError, match="backend"):
        resolve_backend("tpu")


def test_auto_picks_cpu_for_host_inputs():
    assert resolve_backend("auto", on_gpu=False) == "cpu"
    assert resolve_backend("auto", on_gpu=False, has=("torch",)) == "torch"


def test_triton_without_gpu_needs_interpreter(monkeypatch):
    from metacog_fast import _backend

    st = _backend._triton_status()
    if not st["importable"] or _backend._torch_cuda_available():
        pytest.skip("needs triton importable and no GPU")
    _backend._triton_status.cache_clear()
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    try:
        with pytest.raises(BackendUnavailable, match="TRITON_INTERPRET"):
            resolve_backend("triton")
    finally:
        _backend._triton_status.cache_clear()


def test_import_works_without_compiled_core():
    code = textwrap.dedent(
        """
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "metacog_fast._core":
                    raise ImportError("blocked for the test")
                return None
        sys.meta_path.insert(0, Block())
        import metacog_fast
        from metacog_fast._backend import BackendUnavailable, resolve_backend
        info = metacog_fast.backends()
        assert info["core"] is None and info["cpu"] is None, info
        assert resolve_backend("auto") == "torch"
        try:
            resolve_backend("cpu")
        except BackendUnavailable as e:
            assert "not built" in str(e)
        else:
            raise SystemExit("cpu backend did not fail")
        print("ok")
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "METACOG_CORE_PATH"}  # that path would load a core anyway
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("ok")


@pytest.fixture
def restore_isa():
    core = metacog_fast.core()
    before = core.selected_isa()
    yield core
    core.set_isa(before)


@pytest.mark.parametrize("B", [1, 3, 63, 257])
@pytest.mark.parametrize("out_in", [(1, 1), (5, 17), (37, 53), (256, 1056)])
def test_linear_matches_numpy_on_every_isa(restore_isa, B, out_in):
    core = restore_isa
    out, inp = out_in
    rng = np.random.default_rng(B * 1000 + out)
    W = rng.standard_normal((out, inp), dtype=np.float32)
    b = rng.standard_normal(out, dtype=np.float32)
    x = rng.standard_normal((B, inp), dtype=np.float32)
    ref = x.astype(np.float64) @ W.T.astype(np.float64) + b
    for isa in metacog_fast.backends()["cpu"]["isa_supported"]:
        core.set_isa(isa)
        y = core.linear(W, b, x)
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4 * np.sqrt(inp), err_msg=isa)
        y0 = core.linear(W, None, x)
        np.testing.assert_allclose(y0, ref - b, rtol=1e-4, atol=1e-4 * np.sqrt(inp), err_msg=isa)


def test_linear_rejects_bad_buffers():
    core = metacog_fast.core()
    W = np.ones((4, 3), np.float32)
    with pytest.raises(ValueError, match="W: expected dtype float32"):
        core.linear(W.astype(np.float64), None, np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match="x: axis 1 must have size 3"):
        core.linear(W, None, np.ones((2, 4), np.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        core.linear(np.ones((3, 4), np.float32).T, None, np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match="bias: axis 0 must have size 4"):
        core.linear(W, np.ones(5, np.float32), np.ones((2, 3), np.float32))


def test_set_isa_rejects_unknown_names():
    core = metacog_fast.core()
    with pytest.raises(ValueError, match="unknown ISA"):
        core.set_isa("neon")


def _stub_names() -> tuple[set[str], dict[str, set[str]]]:
    """Module-level functions, public classes and annotated attributes of metacog_fast/_core.pyi, and
    the methods/attributes of each class."""
    import ast
    from pathlib import Path

    tree = ast.parse((Path(metacog_fast.__file__).parent / "_core.pyi").read_text())
    names: set[str] = set()
    members: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.ClassDef):
            if not node.name.startswith("_"):
                names.add(node.name)
            members[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)} | {
                n.target.id for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    return names, members


def test_core_stub_names_exactly_what_the_module_exports():
    core = metacog_fast.core()
    names, members = _stub_names()
    exported = {n for n in dir(core) if not n.startswith("_")}
    if core.build_info()["cuda"] is None:
        names.discard("rssm_cuda")  # only in METACOG_BACKEND=cuda builds
    assert exported == names, f"in the module only: {exported - names}; in the stub only: {names - exported}"
    public = {n for n in dir(core.RssmCpu) if not n.startswith("_")}
    assert public == members["RssmCpu"] - {"__init__"}
    if "rssm_cuda" in exported:
        assert {n for n in dir(core.rssm_cuda) if not n.startswith("_")} == members["_RssmCuda"]
