"""``metacog_fast.kernels`` is the one public door to the ops: each name of its ``__all__`` imports
and is the very object ``metacog_fast.ops.<op>`` defines; the earlier per-op module paths are
gone; importing the door is cheap (no torch, numpy or op until a name is used)."""
from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import metacog_fast.kernels as kernels

OPS = ("rssm", "scoring", "encoder", "memory")


def test_every_public_name_is_the_op_object():
    assert kernels.__all__ == sorted(kernels.__all__)
    assert len(kernels.__all__) == len(set(kernels.__all__)) > 0
    owners = {}
    for name in kernels.__all__:
        homes = [op for op in OPS if name in importlib.import_module(f"metacog_fast.ops.{op}").__all__]
        assert len(homes) == 1, (name, homes)
        owners[name] = homes[0]
        got = getattr(kernels, name)
        assert got is getattr(importlib.import_module(f"metacog_fast.ops.{homes[0]}"), name), name
        # the `from ... import` form goes through the same table
        ns: dict = {}
        exec(f"from metacog_fast.kernels import {name}", ns)
        assert ns[name] is got
    assert set(owners.values()) == set(OPS)
    assert sorted(dir(kernels)) == kernels.__all__


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="metacog_fast.kernels.*no_such_kernel"):
        kernels.no_such_kernel  # noqa: B018
    with pytest.raises(ImportError):
        exec("from metacog_fast.kernels import no_such_kernel", {})


def test_the_earlier_module_paths_are_gone():
    """No per-op modules beside the lazy table (checked on disk: an editable install's import map
    can outlive a deleted file until the next reinstall)."""
    here = Path(kernels.__file__).parent
    assert sorted(p.name for p in here.glob("*.py")) == ["__init__.py"]
    assert not [p for p in here.iterdir() if p.is_dir() and p.name != "__pycache__"]


def test_import_is_cheap():
    """Today: ``import metacog_fast.kernels`` adds only itself to what ``import metacog_fast`` loads,
    and neither imports torch, numpy or triton."""
    code = ("import sys, json; heavy = ('torch', 'numpy', 'triton'); import metacog_fast; "
            "base = set(sys.modules); import metacog_fast.kernels; "
            "print(json.dumps({'added': sorted(set(sys.modules) - base), "
            "'heavy': sorted(m for m in sys.modules if m.split('.')[0] in heavy)}))")
    out = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert out == {"added": ["metacog_fast.kernels"], "heavy": []}
