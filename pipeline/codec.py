"""Data-only serialisation of phase results and store entries: nothing read can run code.

    blob = dumps(result)          # bytes: a zip (an .npz numpy reads with allow_pickle=False)
    result = loads(blob)          # or load(path); CodecError (one line) if it is not ours
    result = load(path, lazy_bytes=1 << 20)   # arrays of >= 1 MiB as FileArray: read when used

Sections below, in order: the allowlist of dataclasses; dtypes; encoding (``dump``);
decoding (``FileArray``, ``load``).

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
import functools
import importlib
import io
import json
import math
import re
import zipfile
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

__all__ = ["CodecError", "dump", "dumps", "loads", "load", "FORMAT", "SCHEMA", "is_pickle"]

FORMAT = "tessera-data"
SCHEMA = 1
DOC = "data.json"
_EPOCH = (1980, 1, 1, 0, 0, 0)          # zip's earliest date: fixed, so the bytes are too
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
        types = {}
        for name in RESULT_TYPES:
            mod, _, qual = name.rpartition(".")
            cls = getattr(importlib.import_module(mod), qual)
            if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
                raise TypeError(f"compiler.result.RESULT_TYPES: {name} is not a dataclass")
            types[name] = cls
        _types, _names = types, {c: n for n, c in types.items()}
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


# --------------------------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------------------------

def _reject_constant(c: str):
    raise CodecError(f"data.json holds {c}")


class FileArray:
    """An array member of a data file read from the file when used, not when loaded
    (``load(path, lazy_bytes=N)``): ``a[i]`` reads the i-th sub-array alone,
    ``np.asarray(a)`` the whole array. The run stage keeps 27 layers of weights
    (~390 MB) this way: the host streams read each once and the read-back one layer's
    members at a time, so they never sit in memory beside the simulated tiles. Its header
    and extent are checked at load; its bytes are not CRC-checked as an eager load's are
    (DVC's content hash guards the artifact)."""

    def __init__(self, path: str, offset: int, shape: tuple, raw: np.dtype, dtype: np.dtype):
        self.path, self.offset, self.shape, self._raw, self.dtype = path, offset, shape, raw, dtype
        self.ndim = len(shape)

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self._raw.itemsize

    def _read(self, offset: int, shape: tuple) -> np.ndarray:
        a = np.fromfile(self.path, self._raw, math.prod(shape), offset=offset)
        return a.reshape(shape).view(self.dtype)

    def __getitem__(self, i):
        if isinstance(i, (int, np.integer)) and self.ndim:
            n = self.shape[0]
            i = int(i) + n if i < 0 else int(i)
            if not 0 <= i < n:
                raise IndexError(f"index {i} out of range for {n}")
            sub = self.shape[1:]
            return self._read(self.offset + i * math.prod(sub) * self._raw.itemsize, sub)
        return np.asarray(self)[i]

    def __array__(self, dtype=None, copy=None):
        a = self._read(self.offset, self.shape)
        return a if dtype is None else a.astype(dtype)


def _member_offset(zf: zipfile.ZipFile, zi: zipfile.ZipInfo) -> int:
    """Where a stored (uncompressed) member's bytes start in the file: after its local header."""
    f = zf.fp
    f.seek(zi.header_offset)
    head = f.read(30)
    if len(head) != 30 or head[:4] != b"PK\x03\x04":
        raise CodecError(f"member {zi.filename}: bad local header")
    return zi.header_offset + 30 + int.from_bytes(head[26:28], "little") + int.from_bytes(head[28:30], "little")


class _Decoder:
    def __init__(self, zf: zipfile.ZipFile, n_arrays: int, table: Any, lazy_bytes: int | None = None):
        self.zf = zf
        self.n = n_arrays
        self.table = [self.row(r) for r in _list(table, "types")]
        self.lazy_bytes = lazy_bytes

    def dec(self, j: Any) -> Any:
        if type(j) is list:
            return [self.dec(x) for x in j]
        if type(j) is dict:
            if j:
                tag = next(iter(j))
                if tag.startswith("$"):
                    return self.tagged(tag, j)
            return {k: self.dec(v) for k, v in j.items()}
        return j

    def tagged(self, tag: str, j: dict) -> Any:
        v = j[tag]
        if tag == "$tuple":
            return tuple(self.dec(_list(v, tag)))
        if tag == "$dict":
            out = {}
            for kv in _list(v, tag):
                if type(kv) is not list or len(kv) != 2:
                    raise CodecError("malformed $dict entry")
                out[self.dec(kv[0])] = self.dec(kv[1])
            return out
        if tag == "$set":
            return {self.dec(x) for x in _list(v, tag)}
        if tag == "$frozenset":
            return frozenset(self.dec(x) for x in _list(v, tag))
        if tag == "$float":
            if v not in ("nan", "inf", "-inf"):
                raise CodecError(f"malformed $float {v!r}")
            return float(v)
        if tag == "$bytes":
            return base64.b64decode(_str(v, tag), validate=True)
        if tag == "$scalar":
            dt = _dtype(v)
            raw = bytes.fromhex(_str(j.get("hex"), "$scalar hex"))
            if len(raw) != dt.itemsize:
                raise CodecError(f"malformed $scalar of {v}")
            return np.frombuffer(raw, dt)[0]
        if tag == "$array":
            if type(v) is not int or not 0 <= v < self.n:
                raise CodecError(f"array reference {v!r} out of range")
            if self.lazy_bytes is not None and "as" not in j:
                a = self.file_array(f"{v}.npy", _dtype(j["view"]) if "view" in j else None)
                if a is not None:
                    return a
            a = self.array(f"{v}.npy")
            if "view" in j:
                dt = _dtype(j["view"])
                if dt.itemsize != a.dtype.itemsize or a.dtype.kind != "u":
                    raise CodecError(f"member {v}.npy: cannot view {a.dtype} as {dt}")
                a = a.view(dt)
            elif "as" in j:
                a = a.astype(_dtype(j["as"]))
            return a
        if tag == "$dc":
            if type(v) is not int or not 0 <= v < len(self.table):
                raise CodecError(f"type reference {v!r} out of range")
            return self.dataclass(self.table[v], _list(j.get("v"), "$dc values"))
        raise CodecError(f"unknown tag {tag}")

    def array(self, name: str) -> np.ndarray:
        try:
            with self.zf.open(name) as f:
                return np.lib.format.read_array(f, allow_pickle=False)
        except ValueError as e:     # e.g. "Object arrays cannot be loaded when allow_pickle=False"
            raise CodecError(f"member {name}: {_line(e)}") from None

    def file_array(self, name: str, view: np.dtype | None) -> FileArray | None:
        """A FileArray for a member of at least lazy_bytes (None: read it now)."""
        zi = self.zf.getinfo(name)
        if zi.file_size < self.lazy_bytes or not isinstance(getattr(self.zf, "filename", None), str):
            return None
        with self.zf.open(name) as f:
            try:
                version = np.lib.format.read_magic(f)
                if version not in ((1, 0), (2, 0)):
                    return None
                header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                    np.lib.format.read_array_header_2_0
                shape, fortran, raw = header(f)
            except ValueError as e:
                raise CodecError(f"member {name}: {_line(e)}") from None
            start = f.tell()
        if fortran or raw.hasobject or not shape:
            return None
        if view is not None and (view.itemsize != raw.itemsize or raw.kind != "u"):
            raise CodecError(f"member {name}: cannot view {raw} as {view}")
        if start + math.prod(shape) * raw.itemsize > zi.file_size:
            raise CodecError(f"member {name}: truncated")
        return FileArray(self.zf.filename, _member_offset(self.zf, zi) + start, tuple(shape), raw,
                         view if view is not None else raw)

    @staticmethod
    def row(r: Any) -> tuple:
        """A type-table row [name, [field names]] checked against the allowlist: (class, names, defaults)."""
        if type(r) is not list or len(r) != 2 or type(r[1]) is not list:
            raise CodecError("malformed type table")
        name, names = r
        cls = _allowed(name) if isinstance(name, str) else None
        if cls is None:
            raise CodecError(f"type {name!r} is not one Tessera reads (compiler.result.RESULT_TYPES)")
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise CodecError(f"{name}: unknown field {unknown[0]!r}")
        if len(set(names)) != len(names):
            raise CodecError(f"{name}: repeated field")
        missing = []                       # fields the file lacks take their defaults
        for fname, f in known.items():
            if fname in names:
                continue
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise CodecError(f"{name}: field {fname!r} missing")
            missing.append(f)
        return cls, names, missing

    def dataclass(self, row: tuple, values: list) -> Any:
        cls, names, missing = row
        if len(values) != len(names):
            raise CodecError(f"{cls.__qualname__}: {len(values)} values for {len(names)} fields")
        obj = cls.__new__(cls)
        for fname, v in zip(names, values):
            object.__setattr__(obj, fname, self.dec(v))
        for f in missing:
            object.__setattr__(obj, f.name, f.default if f.default is not dataclasses.MISSING else f.default_factory())
        return obj


def _list(v: Any, tag: str) -> list:
    if type(v) is not list:
        raise CodecError(f"malformed {tag}")
    return v


def _str(v: Any, tag: str) -> str:
    if type(v) is not str:
        raise CodecError(f"malformed {tag}")
    return v


def _line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def _read(zf: zipfile.ZipFile, lazy_bytes: int | None = None) -> Any:
    infos = zf.infolist()
    if not infos or infos[0].filename != DOC:
        raise CodecError(f"not a Tessera data file (no {DOC})")
    n = len(infos) - 1
    for i, zi in enumerate(infos[1:]):
        if zi.filename != f"{i}.npy" or not _MEMBER_RE.match(zi.filename):
            raise CodecError(f"unexpected member {zi.filename!r}")
    for zi in infos:
        if zi.compress_type != zipfile.ZIP_STORED:
            raise CodecError(f"member {zi.filename} is compressed (never written so)")
    try:
        doc = json.loads(zf.read(DOC), parse_constant=_reject_constant)
    except UnicodeDecodeError as e:
        raise CodecError(f"{DOC} is not UTF-8 ({_line(e)})") from None
    except json.JSONDecodeError as e:
        raise CodecError(f"{DOC} is not valid JSON ({_line(e)})") from None
    if type(doc) is not dict or doc.get("format") != FORMAT:
        got = doc.get("format") if type(doc) is dict else type(doc).__name__
        raise CodecError(f"not a Tessera data file (format {got!r}, expected {FORMAT!r})")
    schema = doc.get("schema")
    if type(schema) is not int:
        raise CodecError(f"schema version {schema!r} is not an integer")
    if schema > SCHEMA:
        raise CodecError(f"schema version {schema} is newer than this Tessera reads ({SCHEMA}): update Tessera")
    if schema != SCHEMA:
        raise CodecError(f"schema version {schema} is older than this Tessera reads ({SCHEMA}): recompute it")
    if "value" not in doc:
        raise CodecError(f"{DOC} has no value")
    return _Decoder(zf, n, doc.get("types", []), lazy_bytes).dec(doc["value"])


def _decode(src: Any, head: bytes, lazy_bytes: int | None = None) -> Any:
    if is_pickle(head):
        raise CodecError("is a pickle (refused: loading a pickle can run code)")
    try:
        with zipfile.ZipFile(src) as zf:
            return _read(zf, lazy_bytes)
    except CodecError:
        raise
    except zipfile.BadZipFile as e:
        raise CodecError(f"not a Tessera data file, or truncated or corrupt ({_line(e)})") from None
    except RecursionError:
        raise CodecError("nested too deeply") from None
    except Exception as e:   # anything else a malformed file provokes: still one line, nothing run
        raise CodecError(f"undecodable ({type(e).__name__}: {_line(e)})") from None


def loads(data: bytes | memoryview) -> Any:
    """The value in ``data`` (from :func:`dumps`); CodecError (one line) if it is not one."""
    return _decode(io.BytesIO(data), bytes(data[:2]))


def load(path: str | Path, lazy_bytes: int | None = None) -> Any:
    """The value in the file at ``path``; CodecError (one line, without the path) if it is not one.
    FileNotFoundError passes through. With ``lazy_bytes``, arrays of at least that many bytes
    (stored as they are, not narrowed) are FileArrays: read from the file when used (the
    file must not change meanwhile: artifacts are replaced atomically, never rewritten)."""
    if lazy_bytes is not None:
        with open(path, "rb") as f:
            head = f.read(2)
        return _decode(str(path), head, lazy_bytes)   # zipfile opens the path: FileArrays name it
    with open(path, "rb") as f:
        head = f.read(2)
        f.seek(0)
        return _decode(f, head)
