"""The declarations cffi reads are the C header's (python/gen_cdef.py)."""

import importlib.util
import shutil
from pathlib import Path

import pytest

GEN = Path(__file__).resolve().parents[1] / "gen_cdef.py"


@pytest.mark.skipif(shutil.which("cpp") is None, reason="needs cpp to read the header")
def test_cdef_is_the_headers():
    spec = importlib.util.spec_from_file_location("gen_cdef", GEN)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert gen.OUT.read_text() == gen.generate(), "run python3 python/gen_cdef.py: _cdef.h is stale"
