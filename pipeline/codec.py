"""Data-only serialisation of phase results and store entries: nothing read can run code.

    blob = dumps(result)          # bytes: a zip (an .npz numpy reads with allow_pickle=False)
    result = loads(blob)          # or load(path); CodecError (one line) if it is not ours
    result = load(path, lazy_bytes=1 << 20)   # arrays of >= 1 MiB as FileArray: read when used

Here: encoding (``dump``). The format's vocabulary (allowlist, dtypes, CodecError) is in
pipeline/codec_format.py, decoding (``FileArray``, ``load``) in pipeline/codec_read.py;
both are re-exported here.

A file is an uncompressed zip: ``data.json`` (``{"format": "tessera-data", "schema": 1,
"value": ...}``) then one ``<n>.npy`` member per numpy array, read with
``np.lib.format.read_array(..., allow_pickle=False)``. The value is walked recursively:

* ``None``, ``bool``, ``int``, ``float``, ``str`` are JSON (non-finite floats as
  ``{"$float": "nan"}``); lists are JSON arrays; dicts whose keys are all ``str`` (none
  starting with ``$``) are JSON objects, in insertion order; every other form is an object
  whose first key is a ``$`` tag: ``$tuple``, ``$dict`` (``[[k, v], ...]``), ``$set``,
  ``$frozenset`` (sorted by their JSON, so the bytes do not depend on hash order),
  ``$bytes`` (base64), ``$scalar`` (numpy scalar: dtype and raw bytes), ``$array``,
  ``$dc`` (a dataclass).
* Arrays: integer arrays are stored in the smallest integer type that holds their values and
  widened back on load (tile graphs are millions of int64 rows of small numbers: 3-4x
  smaller files); ml_dtypes types (float8_e4m3fn, ...) as raw unsigned integers plus the
  dtype's name. Object arrays cannot be stored. Every occurrence is stored (no sharing by
  identity): the bytes are a function of the value alone, so a result read back from the store
  encodes exactly like a freshly computed one.
* Dataclasses: ``{"$dc": 3, "v": [...]}``, the field values in the order of row 3 of the file's
  type table ``"types": [["compiler.plan.Candidate", ["strategy", "cycles", ...]], ...]`` (names
  written once per file, not per object). Only the types named in
  ``compiler.result.RESULT_TYPES`` are written or read: a name in a file is looked up in that
  allowlist, never imported; the object is made with ``cls.__new__`` and its fields set
  (no ``__init__``/``__post_init__``, as pickle does). A field missing from the file takes its
  default; an unknown field is an error.

Deterministic: the same value gives the same bytes (members in encounter order, fixed zip
timestamps and attributes; ``np.savez`` stamps the current time, so the zip is written here).
A pickle, a truncated file, another format, a newer schema or a member that would need pickle
raises ``CodecError`` with a one-line reason; the caller names the file.
"""
from __future__ import annotations

import base64
import dataclasses
import io
import json
import math
import zipfile
from typing import Any, BinaryIO

import numpy as np

from .codec_format import (DOC, FORMAT, SCHEMA, CodecError, _allowed, _allowlist, _dtype_name,  # noqa: F401
                           _narrow, is_pickle)
from .codec_read import FileArray, load, loads  # noqa: F401

__all__ = ["CodecError", "dump", "dumps", "loads", "load", "FORMAT", "SCHEMA", "is_pickle", "FileArray"]

_EPOCH = (1980, 1, 1, 0, 0, 0)          # zip's earliest date: fixed, so the bytes are too


# --------------------------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------------------------

def _json(doc: Any) -> str:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


class _Encoder:
    def __init__(self):
        self.arrays: list[np.ndarray] = []
        self.classes: dict[str, int] = {}      # dataclass name -> its row in the type table
        self.table: list[list] = []            # [name, [field names]]: written once per file

    def enc(self, o: Any, where: str) -> Any:
        t = type(o)
        if o is None or t is bool or t is str or t is int:
            return o
        if t is float:
            return o if math.isfinite(o) else {"$float": repr(o)}
        if t is list:
            return [self.enc(x, f"{where}[{i}]") for i, x in enumerate(o)]
        if t is tuple:
            return {"$tuple": [self.enc(x, f"{where}[{i}]") for i, x in enumerate(o)]}
        if t is dict:
            if all(type(k) is str and not k.startswith("$") for k in o):
                return {k: self.enc(v, f"{where}[{k!r}]") for k, v in o.items()}
            return {"$dict": [[self.enc(k, f"{where} key"), self.enc(v, f"{where}[{k!r}]")] for k, v in o.items()]}
        if t is set or t is frozenset:
            n = len(self.arrays)
            items = sorted(_json(self.enc(x, f"{where} member")) for x in o)
            if len(self.arrays) != n:
                raise CodecError(f"cannot store {where}: a set holding arrays")
            return {"$set" if t is set else "$frozenset": [json.loads(s) for s in items]}
        if t is bytes:
            return {"$bytes": base64.b64encode(o).decode()}
        if t is np.ndarray:
            name, raw = _dtype_name(o.dtype, where)
            doc = {"$array": len(self.arrays)}
            if raw is not None:
                a, doc["view"] = (o if o.flags.c_contiguous else o.copy(order="C")).view(raw), name
            else:
                a, t = o, _narrow(o)
                if t is not None:
                    a, doc["as"] = (o, t), name      # converted when written
            self.arrays.append(a)
            return doc
        if isinstance(o, np.generic):
            name, _ = _dtype_name(o.dtype, where)
            return {"$scalar": name, "hex": o.tobytes().hex()}
        if dataclasses.is_dataclass(o) and not isinstance(o, type):
            name = f"{t.__module__}.{t.__qualname__}"
            name = name if _allowed(name) is t else None      # by its own name, on the list
            if name is None:
                raise CodecError(f"cannot store {where}: {t.__module__}.{t.__qualname__} is not in "
                                 f"compiler.result.RESULT_TYPES")
            fields = dataclasses.fields(o)
            extra = set(getattr(o, "__dict__", {})) - {f.name for f in fields}
            if extra:
                raise CodecError(f"cannot store {where}: {name} has attributes that are not fields: "
                                 f"{', '.join(sorted(extra))}")
            idx = self.classes.get(name)
            if idx is None:
                idx = self.classes[name] = len(self.table)
                self.table.append([name, [f.name for f in fields]])
            return {"$dc": idx, "v": [self.enc(getattr(o, f.name), f"{where}.{f.name}") for f in fields]}
        raise CodecError(f"cannot store {where}: type {t.__module__}.{t.__qualname__} "
                         f"(only data: numbers, str, bytes, containers, numpy arrays, result dataclasses)")


def _zipinfo(name: str) -> zipfile.ZipInfo:
    zi = zipfile.ZipInfo(name, date_time=_EPOCH)
    zi.compress_type = zipfile.ZIP_STORED
    zi.create_system = 3                   # unix, whatever the host: the bytes do not vary
    zi.external_attr = 0o644 << 16
    return zi


def dump(value: Any, f: BinaryIO) -> None:
    """Write the data-only encoding of ``value`` to the seekable binary file ``f`` (from its
    start); CodecError naming what cannot be stored, raised before anything is written."""
    enc = _Encoder()
    val = enc.enc(value, "value")
    doc = {"format": FORMAT, "schema": SCHEMA, "types": enc.table, "value": val}
    with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        zf.writestr(_zipinfo(DOC), _json(doc).encode())
        for i, a in enumerate(enc.arrays):
            enc.arrays[i] = None                                      # nothing kept once written
            a = a[0].astype(a[1]) if type(a) is tuple else a          # narrowed (_narrow), one at a time
            a = a if a.flags.c_contiguous else a.copy(order="C")     # (ascontiguousarray makes 0-d 1-d)
            with zf.open(_zipinfo(f"{i}.npy"), "w", force_zip64=a.nbytes > 1 << 30) as m:
                # the .npy header, then the array's memory as is (no per-chunk copies)
                np.lib.format.write_array_header_1_0(m, {"descr": np.lib.format.dtype_to_descr(a.dtype),
                                                         "fortran_order": False, "shape": a.shape})
                if a.nbytes:
                    m.write(memoryview(a.reshape(-1).view(np.uint8)))


def dumps(value: Any) -> bytes:
    """The data-only encoding of ``value`` (deterministic bytes); CodecError naming what cannot be stored."""
    buf = io.BytesIO()
    dump(value, buf)
    return buf.getvalue()
