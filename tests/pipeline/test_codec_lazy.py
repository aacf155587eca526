"""pipeline.codec.load(path, lazy_bytes=N): large arrays read from the file when used
(FileArray), equal to what an eager load gives, member by member; small, narrowed or
object members are read as before; a corrupt member is still refused in one line."""
from __future__ import annotations

import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from pipeline import codec  # noqa: E402
from pipeline.codec import CodecError, FileArray  # noqa: E402


def _value():
    rng = np.random.default_rng(7)
    fp8 = rng.standard_normal((3, 40, 24)).astype(np.float32).astype(ml_dtypes.float8_e4m3fn)
    return {"w": fp8, "x": rng.standard_normal((50, 30)).astype(np.float16),
            "small": np.arange(5, dtype=np.float32), "ints": np.arange(4000, dtype=np.int64),
            "nested": [rng.standard_normal((4, 64))]}


def test_lazy_members_equal_eager(tmp_path):
    p = tmp_path / "r.npz"
    p.write_bytes(codec.dumps(_value()))
    eager, lazy = codec.load(p), codec.load(p, lazy_bytes=1000)
    assert isinstance(lazy["w"], FileArray) and isinstance(lazy["x"], FileArray)
    assert isinstance(lazy["nested"][0], FileArray)
    assert not isinstance(lazy["small"], FileArray)          # under lazy_bytes
    assert not isinstance(lazy["ints"], FileArray)           # narrowed on disk: widened now
    for k in ("w", "x"):
        e, f = eager[k], lazy[k]
        assert (f.dtype, f.shape, f.ndim, len(f)) == (e.dtype, e.shape, e.ndim, len(e))
        assert np.asarray(f).tobytes() == e.tobytes()
        assert np.ascontiguousarray(f).view(np.uint8).tobytes() == e.view(np.uint8).tobytes()
        for i in (0, 1, -1):
            assert f[i].dtype == e.dtype and f[i].tobytes() == e[i].tobytes()
        with pytest.raises(IndexError):
            f[len(e)]
    assert np.array_equal(lazy["nested"][0], eager["nested"][0])
    assert np.array_equal(lazy["ints"], eager["ints"])


def test_lazy_corrupt_member_is_one_line(tmp_path):
    p = tmp_path / "r.npz"
    blob = bytearray(codec.dumps(_value()))
    i = blob.index(b"\x93NUMPY")
    blob[i:i + 6] = b"XXXXXX"                                 # the first member's npy magic
    p.write_bytes(bytes(blob))
    with pytest.raises(CodecError) as e:
        codec.load(p, lazy_bytes=1000)
    assert "\n" not in str(e.value)
