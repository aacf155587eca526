"""Content-addressed task-result store.

A task result is stored under a key that hashes everything the result depends on::

    key = task_key("place.tile", code=["compiler.place", "compiler/place/cost.py"],
                   inputs=[digest(program), digest(target)], config={"cap": 65536})
    store = Store(".tessera-store")            # or "file:///...", "s3://...", "memory://x"
    plan = store.cached(key, lambda: place(program, target))

* ``task_key(task, code, inputs, config)`` -- sha256 over the task name, the *code version*
  (sha256 of the bytes of the source files given as paths, module objects or module names;
  a package hashes every ``*.py`` file below it), the input digests and the canonical JSON of
  the config keys the task reads. Changing any of them changes the key; nothing else does
  (file locations are not hashed, so the same checkout elsewhere, or a cluster worker, agrees).
* ``digest(obj)`` -- a stable sha256 of numpy arrays, bytes, str, numbers, containers
  (dict order does not matter), dataclasses, and as a last resort the pickle of the object.
* ``Store(url)`` -- any fsspec URL or a plain path. Entries live at ``<root>/<k[:2]>/<k>.tsr``.
  Each entry is a 52-byte header (magic ``TSRSTORE``, format version, codec, payload length,
  sha256 of the payload) followed by the payload: the value in the data-only format of
  ``pipeline/codec.py`` (JSON and .npy members in a zip; nothing in it can run code). Writes
  go to a temporary name in the same directory and are renamed into place (``os.replace``
  locally, ``fs.mv`` elsewhere), so a reader never sees a partial entry, even if the writer is
  killed, and two trials writing the same key concurrently leave one whole entry.
* Reads verify magic, length and sha256: a corrupt or truncated entry is logged
  (``logging.warning`` naming the key), deleted, and reported as ``MISSING`` -- it is
  recomputed, never trusted. An entry whose envelope is intact but which is not ours -- a
  pickle, another format version, a payload the codec refuses -- did not come from a torn
  write: someone wrote it. ``get`` refuses it with a one-line ``StoreError`` naming the entry
  and leaves it for inspection; nothing in it runs.
* ``once(key, fn)`` (and ``cached``): on a local store one caller at a time computes a key
  (an flock beside the entry, pipeline/keylock.py); the others wait and read it back.
* Entries are never removed but by ``python -m pipeline.store_gc`` (least recently used
  first: a read touches an entry's mtime).
* The store is probed at construction; an unwritable location raises
  ``StoreError: cannot write to store <path>: <reason>`` (one line).

The default location used by the stages is ``<repo>/.tessera-store`` (``Store.default()``),
overridable with the ``TESSERA_STORE`` environment variable.

This module is generic: it imports nothing from ``compiler/`` (the codec looks up dataclass
names in ``compiler.result.RESULT_TYPES``, its allowlist, when it first meets one).
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import io
import json
import logging
import math
import os
import pickle  # digest() of otherwise unhashable objects: dumps only, nothing is ever unpickled
import re
import struct
import sys
import types
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable

import cloudpickle

from . import codec, keylock

__all__ = ["Store", "StoreError", "MISSING", "task_key", "digest", "code_version"]

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parent.parent

MAGIC = b"TSRSTORE"
FORMAT_VERSION = 2          # 1: cloudpickle payloads (never read any more; keys changed with the version)
CODEC_DATA = 1              # pipeline/codec.py
_HEADER = struct.Struct(">8sHHQ32s")  # magic, version, codec, payload length, sha256(payload)
HEADER_SIZE = _HEADER.size  # 52
SUFFIX = ".tsr"
LOCK_SUFFIX = ".lock"     # beside an entry while a caller computes it (Store.once)
_TMP_PREFIX = ".tmp-"
_KEY_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{2,200}$")


class StoreError(Exception):
    """The store cannot be used (e.g. its location is not writable)."""


class _Missing:
    __slots__ = ()
    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self):
        return (_Missing, ())


MISSING: Any = _Missing()
"""Returned by :meth:`Store.get` when there is no valid entry (a stored ``None`` is a value)."""


# --------------------------------------------------------------------------------------------
# Keys
# --------------------------------------------------------------------------------------------

_file_digest_cache: dict[tuple[str, int, int], str] = {}


def _file_sha256(path: Path) -> str:
    st = path.stat()
    ck = (str(path), st.st_mtime_ns, st.st_size)
    hit = _file_digest_cache.get(ck)
    if hit is None:
        hit = hashlib.sha256(path.read_bytes()).hexdigest()
        _file_digest_cache[ck] = hit
    return hit


def _resolve_source(entry: Any) -> Path:
    """A source file or package directory for a module object, module name or path."""
    if isinstance(entry, types.ModuleType):
        f = getattr(entry, "__file__", None)
        if not f:
            raise ValueError(f"code: module {entry.__name__!r} has no source file")
        p = Path(f)
        if p.name == "__init__.py":  # a package: hash the whole package
            return p.parent
        if p.suffix in (".pyc", ".pyo"):
            src = importlib.util.source_from_cache(str(p)) if "__pycache__" in p.parts else None
            p = Path(src) if src else p
        return p
    if isinstance(entry, os.PathLike) or (isinstance(entry, str) and (os.sep in entry or entry.endswith(".py"))):
        p = Path(entry)
        if not p.exists() and not p.is_absolute() and (REPO_ROOT / p).exists():
            p = REPO_ROOT / p
        if not p.exists():
            raise ValueError(f"code: source file {str(entry)!r} does not exist")
        return p
    if isinstance(entry, str):
        mod = sys.modules.get(entry)
        if mod is not None and getattr(mod, "__file__", None):
            return _resolve_source(mod)
        try:
            spec = importlib.util.find_spec(entry)
        except (ImportError, ValueError) as e:
            raise ValueError(f"code: cannot resolve module {entry!r}: {e}") from None
        if spec is None or not spec.origin or spec.origin in ("built-in", "frozen"):
            raise ValueError(f"code: cannot resolve module {entry!r} to a source file")
        p = Path(spec.origin)
        return p.parent if p.name == "__init__.py" else p
    raise TypeError(f"code: expected a path, module name or module, got {type(entry).__name__}")


def code_version(code: Iterable[Any]) -> str:
    """sha256 over the source bytes of the given files / modules / packages (order-free)."""
    digests = []
    for entry in code:
        p = _resolve_source(entry)
        if p.is_dir():
            for f in sorted(p.rglob("*.py")):
                if "__pycache__" in f.parts:
                    continue
                rel = f.relative_to(p).as_posix()
                digests.append(hashlib.sha256(rel.encode() + b"\0" + _file_sha256(f).encode()).hexdigest())
        else:
            digests.append(_file_sha256(p))
    h = hashlib.sha256(b"tessera-code-v1")
    for d in sorted(set(digests)):
        h.update(d.encode())
    return h.hexdigest()


def _json_default(o: Any) -> Any:
    if isinstance(o, (set, frozenset)):
        return sorted(o, key=lambda x: json.dumps(x, sort_keys=True, default=_json_default))
    if isinstance(o, os.PathLike):
        return os.fspath(o)
    if isinstance(o, bytes):
        return {"__bytes__": o.hex()}
    if hasattr(o, "tolist") and type(o).__module__ == "numpy":  # numpy scalar / array
        return o.tolist()
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return dataclasses.asdict(o)
    if hasattr(o, "items"):  # Mapping-like (e.g. an OmegaConf DictConfig)
        return dict(o.items())
    raise TypeError(f"config value of type {type(o).__name__} is not JSON-serialisable: {o!r}")


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=True, default=_json_default)


def task_key(task: str, code: list[Any], inputs: list[str], config: dict) -> str:
    """The store key of a task: sha256 hex of (task, code version, input digests, config).

    ``code``: source file paths, module names or module objects the task's result depends on.
    ``inputs``: digests of the task's inputs (see :func:`digest`), order significant.
    ``config``: only the config keys the task reads (canonical JSON, key order irrelevant).
    """
    payload = {
        "format": FORMAT_VERSION,
        "schema": codec.SCHEMA,
        "task": str(task),
        "code": code_version(code),
        "inputs": [str(i) for i in inputs],
        "config": json.loads(canonical_json(config if config is not None else {})),
    }
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


# --------------------------------------------------------------------------------------------
# Digests
# --------------------------------------------------------------------------------------------

def _feed(h: "hashlib._Hash", obj: Any) -> None:
    if obj is None:
        h.update(b"N")
    elif obj is True or obj is False:
        h.update(b"T" if obj else b"F")
    elif type(obj) is int:
        s = str(obj).encode()
        h.update(b"i%d:" % len(s) + s)
    elif type(obj) is float:
        s = (repr(obj) if math.isnan(obj) else obj.hex()).encode()
        h.update(b"f%d:" % len(s) + s)
    elif isinstance(obj, str):
        b = obj.encode("utf-8", "surrogatepass")
        h.update(b"s%d:" % len(b) + b)
    elif isinstance(obj, (bytes, bytearray, memoryview)):
        b = memoryview(obj).cast("B")
        h.update(b"b%d:" % b.nbytes)
        h.update(b)
    elif type(obj).__module__ == "numpy" and hasattr(obj, "dtype") and hasattr(obj, "shape"):
        import numpy as np

        a = np.asarray(obj)
        if a.dtype.hasobject:
            h.update(b"O")
            _feed(h, a.shape)
            _feed(h, a.ravel().tolist())
        else:
            a = np.ascontiguousarray(a)
            meta = f"a{a.dtype.str}{a.dtype.descr if a.dtype.fields else ''}{a.shape}:".encode()
            h.update(meta)
            h.update(a.reshape(-1).view(np.uint8).data if a.size else b"")   # any dtype (ml_dtypes too)
    elif isinstance(obj, (list, tuple)):
        h.update(b"%c%d:" % (b"l" if isinstance(obj, list) else b"t", len(obj)))
        for x in obj:
            _feed(h, x)
    elif isinstance(obj, dict):
        h.update(b"d%d:" % len(obj))
        for kd, vd in sorted((digest(k), digest(v)) for k, v in obj.items()):
            h.update(kd.encode() + vd.encode())
    elif isinstance(obj, (set, frozenset)):
        h.update(b"S%d:" % len(obj))
        for d in sorted(digest(x) for x in obj):
            h.update(d.encode())
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        name = f"{type(obj).__module__}.{type(obj).__qualname__}"
        h.update(b"D")
        _feed(h, name)
        _feed(h, {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)})
    else:
        try:
            b = pickle.dumps(obj, protocol=4)
        except Exception:
            b = cloudpickle.dumps(obj, protocol=4)
        h.update(b"P%d:" % len(b) + b)


def digest(obj: Any) -> str:
    """A stable sha256 hex digest of ``obj`` (numpy arrays, bytes, containers, picklables).

    Equal values give equal digests across processes and runs (dict/set order is ignored;
    array dtype and shape are included). Arbitrary objects fall back to their pickle, which is
    stable for the same library versions.
    """
    h = hashlib.sha256(b"tessera-digest-v1")
    _feed(h, obj)
    return h.hexdigest()


# --------------------------------------------------------------------------------------------
# The store
# --------------------------------------------------------------------------------------------

def _reason(e: BaseException) -> str:
    r = getattr(e, "strerror", None) or str(e) or type(e).__name__
    return " ".join(str(r).split())


class Store:
    """A content-addressed result store at a local path or any fsspec URL."""

    def __init__(self, url: str | os.PathLike):
        self.url = os.fspath(url)
        # a plain path or file:// URL is used with os calls alone: importing fsspec costs every
        # stage process ~40 ms of start-up, so it is imported for other URLs only
        self._local = "://" not in self.url or self.url.startswith("file://")
        if self._local:
            self.root = os.path.abspath(self.url.removeprefix("file://")).rstrip("/") or "/"
            self._fs = None
        else:
            import fsspec
            self._fs, root = fsspec.core.url_to_fs(self.url)
            self.root = root.rstrip("/") or "/"
        self._probe()

    @property
    def fs(self):
        if self._fs is None:
            from fsspec.implementations.local import LocalFileSystem
            self._fs = LocalFileSystem()
        return self._fs

    @classmethod
    def default(cls) -> "Store":
        """``$TESSERA_STORE`` or ``<repo>/.tessera-store``."""
        return cls(os.environ.get("TESSERA_STORE") or str(REPO_ROOT / ".tessera-store"))

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    def __reduce__(self):
        return (Store, (self.url,))

    # -- layout --------------------------------------------------------------------------
    def path(self, key: str) -> str:
        if not isinstance(key, str) or not _KEY_RE.match(key):
            raise ValueError(f"store key {key!r} must match {_KEY_RE.pattern}")
        return f"{self.root}/{key[:2]}/{key}{SUFFIX}"

    def _probe(self) -> None:
        probe = f"{self.root}/{_TMP_PREFIX}probe-{uuid.uuid4().hex}"
        try:
            if self._local:
                os.makedirs(self.root, exist_ok=True)
                with open(probe, "wb") as f:
                    f.write(b"probe")
                os.unlink(probe)
            else:
                self.fs.makedirs(self.root, exist_ok=True)
                self.fs.pipe_file(probe, b"probe")
                self.fs.rm_file(probe)
        except Exception as e:
            raise StoreError(f"cannot write to store {self.url}: {_reason(e)}") from None

    # -- write ---------------------------------------------------------------------------
    def put(self, key: str, value: Any) -> None:
        """Encode ``value`` (data only, pipeline/codec.py) and write it atomically under ``key``."""
        final = self.path(key)
        buf = io.BytesIO()
        codec.dump(value, buf)          # fails (CodecError) before anything is written
        payload = buf.getbuffer()
        header = _HEADER.pack(MAGIC, FORMAT_VERSION, CODEC_DATA, len(payload), hashlib.sha256(payload).digest())
        tmp = f"{final.rsplit('/', 1)[0]}/{_TMP_PREFIX}{key}-{uuid.uuid4().hex}"
        if self._local:
            os.makedirs(os.path.dirname(final), exist_ok=True)
            try:
                with open(tmp, "wb") as f:
                    f.write(header)
                    f.write(payload)
                os.replace(tmp, final)
            except BaseException:
                try:
                    os.unlink(tmp)
                except FileNotFoundError:
                    pass
                raise
        else:
            try:
                self.fs.makedirs(final.rsplit("/", 1)[0], exist_ok=True)
                self.fs.pipe_file(tmp, header + bytes(payload))
                self.fs.mv(tmp, final)
            except BaseException:
                try:
                    self.fs.rm_file(tmp)
                except Exception:
                    pass
                raise

    # -- read ----------------------------------------------------------------------------
    def _read(self, path: str) -> tuple[bytes | None, int | None]:
        """The entry's bytes (None if absent) and, locally, the inode they were read from."""
        try:
            if self._local:
                with open(path, "rb") as f:
                    return f.read(), os.fstat(f.fileno()).st_ino
            return self.fs.cat_file(path), None
        except (FileNotFoundError, NotADirectoryError):
            return None, None

    def _discard(self, key: str, why: str, inode: int | None = None) -> None:
        if inode is not None:   # another trial sharing the store may have replaced it meanwhile
            try:
                if os.stat(self.path(key)).st_ino != inode:
                    return
            except FileNotFoundError:
                return
        log.warning("store: entry %s is corrupt (%s); deleted, it will be recomputed", key, why)
        try:
            self.delete(key)
        except Exception as e:  # pragma: no cover - best effort
            log.warning("store: could not delete corrupt entry %s: %s", key, _reason(e))

    def _refuse(self, path: str, why: str) -> None:
        raise StoreError(f"store entry {path}: {why}; nothing in it was run -- this Tessera did not "
                         f"write it: check who can write to {self.url}, then delete it")

    def get(self, key: str) -> Any:
        """The value stored under ``key``, or ``MISSING`` (absent, or corrupt/truncated: deleted).

        Raises StoreError (one line) for an entry that is intact but not ours (a pickle, another
        format version, a payload the codec refuses): that was written on purpose by someone."""
        path = self.path(key)
        data, inode = self._read(path)
        if data is None:
            return MISSING
        if codec.is_pickle(data):
            self._refuse(path, "is a pickle (refused: loading a pickle can run code)")
        if len(data) < HEADER_SIZE:
            self._discard(key, f"truncated header ({len(data)} bytes)", inode)
            return MISSING
        magic, ver, kind, n, sha = _HEADER.unpack_from(data)
        if magic != MAGIC:
            self._discard(key, "bad magic", inode)
            return MISSING
        if len(data) - HEADER_SIZE != n:
            self._discard(key, f"payload length {len(data) - HEADER_SIZE} != {n}", inode)
            return MISSING
        payload = memoryview(data)[HEADER_SIZE:]
        if hashlib.sha256(payload).digest() != sha:
            self._discard(key, "sha256 mismatch", inode)
            return MISSING
        if ver != FORMAT_VERSION or kind != CODEC_DATA:
            self._refuse(path, f"format version {ver}, codec {kind} (refused: this Tessera reads "
                               f"{FORMAT_VERSION}, {CODEC_DATA})")
        try:
            v = codec.loads(payload)
        except codec.CodecError as e:
            self._refuse(path, f"not a data entry: {e}")
        if self._local:             # its mtime is its last use: pipeline/store_gc.py drops the least recent
            with contextlib.suppress(OSError):
                os.utime(path)
        return v

    def cached(self, key: str, fn: Callable[[], Any]) -> Any:
        """``get(key)``, or compute ``fn()``, ``put`` it, and return it (``once``)."""
        return self.once(key, fn)[0]

    def once(self, key: str, fn: Callable[[], Any]) -> tuple[Any, bool]:
        """(the value under ``key``, whether ``fn`` computed it here). On a local store, one
        caller at a time computes a key (pipeline/keylock.py): a caller that finds the key
        being computed waits and reads it back instead of computing it too; a dead holder's
        lock is gone with it. Other fsspec stores have no such lock: two callers may both
        compute it (the later put replaces an equal entry)."""
        v = self.get(key)
        if v is not MISSING:
            return v, False
        if not self._local:
            v = fn()
            self.put(key, v)
            return v, True
        with keylock.locked(self.path(key).removesuffix(SUFFIX) + LOCK_SUFFIX, key):
            v = self.get(key)           # put by the holder this caller waited for
            if v is not MISSING:
                return v, False
            v = fn()
            self.put(key, v)
        return v, True

    def __contains__(self, key: str) -> bool:
        """Cheap check: an entry exists and its size agrees with its header (no sha256)."""
        path = self.path(key)
        try:
            if self._local:
                with open(path, "rb") as f:
                    head = f.read(HEADER_SIZE)
                    size = os.fstat(f.fileno()).st_size
            else:
                size = self.fs.size(path)
                head = self.fs.cat_file(path, start=0, end=HEADER_SIZE)
        except (FileNotFoundError, NotADirectoryError):
            return False
        if len(head) < HEADER_SIZE:
            return False
        magic, ver, _codec, n, _sha = _HEADER.unpack_from(head)
        return magic == MAGIC and ver == FORMAT_VERSION and size == HEADER_SIZE + n

    def delete(self, key: str) -> None:
        path = self.path(key)
        try:
            if self._local:
                os.unlink(path)
            else:
                self.fs.rm_file(path)
        except FileNotFoundError:
            pass

    def keys(self) -> list[str]:
        """All entry keys (unverified), sorted."""
        out = []
        try:
            paths = self.fs.glob(f"{self.root}/*/*{SUFFIX}")
        except FileNotFoundError:
            return out
        for p in paths:
            name = p.rsplit("/", 1)[-1]
            if not name.startswith(_TMP_PREFIX):
                out.append(name[: -len(SUFFIX)])
        return sorted(out)
