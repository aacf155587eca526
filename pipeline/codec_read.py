"""Decoding Tessera data files (the format: pipeline/codec.py): ``load``, ``loads`` and the
lazily read ``FileArray``. Nothing read can run code: dataclasses come from the allowlist,
arrays are read with ``allow_pickle=False``, and anything malformed is one CodecError line."""
from __future__ import annotations

import base64
import dataclasses
import io
import json
import math
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from .codec_format import DOC, FORMAT, SCHEMA, CodecError, _MEMBER_RE, _allowed, _dtype, is_pickle


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
