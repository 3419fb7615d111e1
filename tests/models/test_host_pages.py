"""models/host_pages: which arrays are views of a mapped file, handing their pages back, and what stays
resident - the mechanism behind 'each weight held once' for weights read from the weight cache."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from orion.models import host_pages
from orion.native.safetensors import SafetensorsFile, write_safetensors


@pytest.fixture
def mapped(tmp_path):
    path = str(tmp_path / "w.safetensors")
    write_safetensors(path, {"a": np.arange(1 << 18, dtype=np.float16), "b": np.ones((64, 64), np.float16)})
    f = SafetensorsFile(path)
    return {n: f.get(n) for n in f.names}


def test_views_of_one_file_map_once_and_owned_arrays_not_at_all(mapped):
    owned = {"c": np.zeros(10, np.float16), "d": mapped["a"].copy()}
    maps = host_pages.file_maps([*mapped.values(), *owned.values(), 3.0])
    assert len(maps) == 1
    assert host_pages.map_of(mapped["b"][1:3]) is maps[0]                 # a view of a view
    assert all(host_pages.map_of(a) is None for a in owned.values())
    assert host_pages.release(owned.values()) == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="resident bytes come from /proc/self/smaps")
def test_released_pages_leave_the_process_and_read_back_unchanged(mapped):
    a = mapped["a"]
    want = a.astype(np.float32).sum()                                      # touches every page
    (m,) = host_pages.file_maps(mapped.values())
    assert host_pages.resident_bytes(m) >= a.nbytes
    assert host_pages.release(mapped.values()) == len(m)
    assert host_pages.resident_bytes(m) < a.nbytes // 8
    assert a.astype(np.float32).sum() == want                              # read again from the page cache
    assert host_pages.resident_bytes(m) >= a.nbytes
