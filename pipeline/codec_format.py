"""The Tessera data format's vocabulary, shared by the writer (pipeline/codec.py) and the
reader (pipeline/codec_read.py): its name and schema, the one error type, the allowlist of
result dataclasses, and the dtypes a file may hold. The format itself is described in
pipeline/codec.py."""
from __future__ import annotations

import dataclasses
import functools
import importlib
import re
from typing import Any

import numpy as np

FORMAT = "tessera-data"
SCHEMA = 1
DOC = "data.json"
_ML_DTYPES = ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
              "float8_e4m3b11fnuz", "float8_e3m4", "float8_e4m3", "float8_e8m0fnu", "float4_e2m1fn",
              "float6_e2m3fn", "float6_e3m2fn", "int4", "uint4", "int2", "uint2")
_DTYPE_RE = re.compile(r"^[<>|=][biufc]\d{1,2}$")   # plain numeric numpy dtypes ('<i8', '|b1', ...)
_MEMBER_RE = re.compile(r"^(0|[1-9]\d{0,8})\.npy$")


class CodecError(ValueError):
    """A value that cannot be stored, or bytes that are not a Tessera data file (one line)."""


def is_pickle(data: bytes | memoryview) -> bool:
    """Starts like a pickle of protocol 2 or later (PROTO opcode 0x80, then the version)."""
    return len(data) >= 2 and data[0] == 0x80 and 2 <= data[1] <= 5


# --------------------------------------------------------------------------------------------
# Allowed dataclasses
# --------------------------------------------------------------------------------------------

_types: dict[str, type] | None = None
_names: dict[type, str] | None = None


@functools.lru_cache(maxsize=None)
def _allowed(name: Any) -> type | None:
    """The class of one RESULT_TYPES name, its module imported now (a stage decodes the
    types its inputs hold, not every phase's: the simulator's and the report's modules
    are ~1 s of imports); None if the name is not on the list."""
    from compiler.result import RESULT_TYPES
    if not isinstance(name, str) or name not in RESULT_TYPES:
        return None
    mod, _, qual = name.rpartition(".")
    cls = getattr(importlib.import_module(mod), qual)
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"compiler.result.RESULT_TYPES: {name} is not a dataclass")
    return cls


def _allowlist() -> tuple[dict[str, type], dict[type, str]]:
    """name -> class for the compiler's result dataclasses (resolved from our own list)."""
    global _types, _names
    if _types is None:
        from compiler.result import RESULT_TYPES
        _types = {name: _allowed(name) for name in RESULT_TYPES}
        _names = {c: n for n, c in _types.items()}
    return _types, _names  # type: ignore[return-value]


# --------------------------------------------------------------------------------------------
# dtypes
# --------------------------------------------------------------------------------------------

def _dtype_name(dt: np.dtype, where: str) -> tuple[str, np.dtype | None]:
    """(name recorded in the file, dtype the raw data is stored as or None if stored as is)."""
    if dt.type.__module__ == "ml_dtypes":
        if dt.name not in _ML_DTYPES:
            raise CodecError(f"cannot store {where}: dtype {dt.name} is not one the codec knows")
        return dt.name, np.dtype(f"u{dt.itemsize}")
    if dt.hasobject or not _DTYPE_RE.match(dt.str):
        raise CodecError(f"cannot store {where}: dtype {dt} (only plain numeric and ml_dtypes arrays)")
    return dt.str, None


def _dtype(name: Any) -> np.dtype:
    """A dtype named in a file: a plain numeric numpy dtype or an ml_dtypes type, nothing else."""
    if isinstance(name, str) and name in _ML_DTYPES:
        import ml_dtypes
        t = getattr(ml_dtypes, name, None)
        if t is not None:
            return np.dtype(t)
    if isinstance(name, str) and _DTYPE_RE.match(name):
        return np.dtype(name)
    raise CodecError(f"unknown dtype {name!r}")


def _narrow(a: np.ndarray) -> np.dtype | None:
    """The smallest integer type holding ``a``'s values, or None if that saves nothing. Only
    the type: dump converts one array at a time as it writes it, so an artifact of many
    large int64 columns (expand's tile graphs) is never held twice in memory."""
    if a.dtype.kind not in "iu" or a.dtype.itemsize == 1 or a.size == 0:
        return None
    t = np.promote_types(np.min_scalar_type(int(a.min())), np.min_scalar_type(int(a.max())))
    return t if t.itemsize < a.dtype.itemsize else None
