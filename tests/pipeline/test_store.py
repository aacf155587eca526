"""pipeline.store: round trip, verification, atomic writes, keys, digests."""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import pipeline.store as store_mod  # noqa: E402
from pipeline import codec  # noqa: E402
from pipeline.store import HEADER_SIZE, MISSING, Store, StoreError, digest, task_key  # noqa: E402


def entry_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def test_round_trip_local(tmp_path):
    s = Store(tmp_path / "store")
    value = {"a": np.arange(12, dtype=np.int32).reshape(3, 4), "b": [1, "x", None], "t": (1.5, b"\0")}
    k = "k" + "0" * 63
    assert s.get(k) is MISSING and k not in s
    s.put(k, value)
    assert k in s
    got = s.get(k)
    np.testing.assert_array_equal(got["a"], value["a"])
    assert got["b"] == value["b"] and got["t"] == value["t"]
    # a stored None is a value, not a miss
    s.put("none-key", None)
    assert s.get("none-key") is None and "none-key" in s
    assert s.keys() == sorted([k, "none-key"])
    # file:// URL sees the same entries
    assert Store(f"file://{tmp_path / 'store'}").get("none-key") is None
    # only complete entries are present: no temp files left behind
    assert not [p for p in entry_files(tmp_path / "store") if p.name.startswith(".tmp-")]


def test_memory_url():
    url = f"memory://tessera-test-{uuid.uuid4().hex}"
    s = Store(url)
    s.put("abc123", np.ones(5))
    np.testing.assert_array_equal(s.get("abc123"), np.ones(5))
    assert "abc123" in s and "abd" not in s
    assert s.keys() == ["abc123"]
    calls = []
    assert s.cached("zz9", lambda: calls.append(1) or 42) == 42
    assert s.cached("zz9", lambda: calls.append(1) or 43) == 42
    assert calls == [1]
    # corruption is detected on a remote filesystem too
    path = s.path("abc123")
    data = s.fs.cat_file(path)
    s.fs.pipe_file(path, data[:-3])
    assert s.get("abc123") is MISSING
    assert not s.fs.exists(path)


@pytest.mark.parametrize("damage", ["flip", "truncate", "truncate-header", "magic", "empty"])
def test_corrupt_entry_detected_deleted_and_recomputed(tmp_path, caplog, damage):
    s = Store(tmp_path)
    key = task_key("t", [], [], {"damage": damage})
    s.put(key, list(range(1000)))
    path = Path(s.path(key))
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[HEADER_SIZE + 100] ^= 0x01
    elif damage == "truncate":
        data = data[: len(data) - 10]
    elif damage == "truncate-header":
        data = data[: HEADER_SIZE - 5]
    elif damage == "magic":
        data[0:8] = b"XXXXXXXX"
    else:
        data = b""
    path.write_bytes(bytes(data))
    calls = []
    with caplog.at_level(logging.WARNING, logger="pipeline.store"):
        assert s.get(key) is MISSING
    assert any(key in r.getMessage() and "corrupt" in r.getMessage() for r in caplog.records)
    assert not path.exists()  # deleted, never trusted
    v = s.cached(key, lambda: calls.append(1) or list(range(1000)))
    assert v == list(range(1000)) and calls == [1]
    assert s.get(key) == list(range(1000))


def test_contains_detects_truncation_cheaply(tmp_path):
    s = Store(tmp_path)
    s.put("abc", b"x" * 1000)
    p = Path(s.path("abc"))
    p.write_bytes(p.read_bytes()[:-1])
    assert "abc" not in s


def test_code_is_refused_before_anything_is_written(tmp_path):
    """Only data is stored: a function or an arbitrary object fails (CodecError, naming it)
    before any byte reaches the store."""
    s = Store(tmp_path / "st")
    s.put("key1", "old value")
    before = entry_files(tmp_path / "st")
    for bad in ([os.urandom(4 << 20), lambda x: x], {"obj": Path("x")}):
        with pytest.raises(codec.CodecError, match="cannot store value"):
            s.put("key1", bad)
    assert entry_files(tmp_path / "st") == before
    assert s.get("key1") == "old value"


class WriteFails(Exception):
    pass


def test_atomic_write_no_partial_entry(tmp_path, monkeypatch):
    """A writer that dies mid-write (here: the payload write raises) leaves no entry."""
    s = Store(tmp_path / "st")
    s.put("key1", "old value")
    before = entry_files(tmp_path / "st")
    real_open = open

    class Half:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.f.close()

        def write(self, b):
            if len(b) > 1 << 20:
                self.f.write(bytes(b)[: len(b) // 2])
                raise WriteFails("disk full mid-payload")
            return self.f.write(b)

    monkeypatch.setattr("builtins.open", lambda p, m="r", *a, **k: Half(real_open(p, m, *a, **k))
                        if "w" in m and ".tmp-" in str(p) else real_open(p, m, *a, **k))
    for key in ("key1", "key2"):
        with pytest.raises(WriteFails):
            s.put(key, [os.urandom(4 << 20)])
    monkeypatch.undo()
    assert entry_files(tmp_path / "st") == before  # no temp or partial file visible
    assert s.get("key1") == "old value"
    assert "key2" not in s and s.get("key2") is MISSING


def test_atomic_write_remote_fs(monkeypatch):
    s = Store(f"memory://tessera-test-{uuid.uuid4().hex}")

    def mv(*a, **k):
        raise WriteFails("rename failed")
    monkeypatch.setattr(s.fs, "mv", mv)
    with pytest.raises(WriteFails):
        s.put("key2", [b"x" * 1000])
    assert s.keys() == [] and s.fs.find(s.root) == []


def test_unwritable_path(tmp_path):
    f = tmp_path / "a-file"
    f.write_text("not a directory")
    with pytest.raises(StoreError) as ei:
        Store(f / "store")
    msg = str(ei.value)
    assert msg.startswith(f"cannot write to store {f / 'store'}: ")
    assert "\n" not in msg and len(msg.split(": ", 1)[1]) > 0


def test_unwritable_path_one_line_cli(tmp_path):
    f = tmp_path / "a-file"
    f.write_text("x")
    code = "import sys; sys.path.insert(0, sys.argv[1]); from pipeline.store import Store; Store(sys.argv[2])"
    r = subprocess.run([sys.executable, "-c", code, str(REPO), str(f / "s")], capture_output=True, text=True)
    assert r.returncode != 0
    assert r.stderr.strip().splitlines()[-1].startswith(f"pipeline.store.StoreError: cannot write to store {f / 's'}: ")


def test_bad_key_rejected(tmp_path):
    s = Store(tmp_path)
    for bad in ["", "../etc", "a/b", ".hidden", "x"]:
        with pytest.raises(ValueError):
            s.put(bad, 1)


def test_task_key_components(tmp_path):
    src = tmp_path / "mod_a.py"
    src.write_text("X = 1\n")
    base = dict(task="place", code=[str(src)], inputs=["d1", "d2"], config={"a": 1, "b": [1, 2]})
    k0 = task_key(**base)
    assert len(k0) == 64 and k0 == task_key(**base)
    assert task_key(**{**base, "config": {"b": [1, 2], "a": 1}}) == k0  # key order irrelevant
    assert task_key(**{**base, "task": "expand"}) != k0
    assert task_key(**{**base, "inputs": ["d2", "d1"]}) != k0
    assert task_key(**{**base, "config": {"a": 2, "b": [1, 2]}}) != k0
    src.write_text("X = 2\n")
    assert task_key(**base) != k0  # code change -> new key
    src.write_text("X = 1\n")
    assert task_key(**base) == k0


def test_code_version_module_forms_agree():
    by_name = store_mod.code_version(["pipeline.store"])
    by_module = store_mod.code_version([store_mod])
    by_path = store_mod.code_version([store_mod.__file__])
    assert by_name == by_module == by_path
    # a package hashes all of its modules
    assert store_mod.code_version(["pipeline"]) != by_name
    with pytest.raises(ValueError):
        store_mod.code_version(["no_such_module_xyz"])


def test_digest_stability():
    a = np.arange(6, dtype=np.float32)
    assert digest(a) == digest(a.copy())
    assert digest(a) != digest(a.astype(np.float64))
    assert digest(a) != digest(a.reshape(2, 3))
    assert digest(a[::2]) == digest(np.ascontiguousarray(a[::2]))
    assert digest({"x": 1, "y": [1, 2]}) == digest({"y": [1, 2], "x": 1})
    assert digest(b"abc") != digest("abc")
    assert digest((1, 2)) != digest([1, 2])
    assert digest(1) != digest(1.0) != digest(True)
    # same digest in another interpreter with another hash seed
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import numpy as np; from pipeline.store import digest; "
            "print(digest({'s': {'p', 'q', 'r'}, 'a': np.arange(6, dtype=np.float32), 'b': b'abc'}))")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code, str(REPO)], capture_output=True, text=True, env=env,
                         check=True).stdout.strip()
    assert out == digest({"b": b"abc", "a": a, "s": {"r", "q", "p"}})


def _hammer(root: str, seed: int, rounds: int) -> list[str]:
    """Put and get the same keys as another process; return what went wrong."""
    bad = []

    class Collect(logging.Handler):
        def emit(self, record):
            bad.append(record.getMessage())     # e.g. "store: entry ... is corrupt"
    logging.getLogger("pipeline.store").addHandler(Collect(logging.WARNING))
    s = Store(root)
    rng = np.random.default_rng(seed)
    for _ in range(rounds):
        k = f"key{rng.integers(8)}"
        want = {"k": k, "a": np.full(50_000 + int(k[-1]) * 1000, int(k[-1]), np.int64)}
        if rng.random() < 0.5:
            s.put(k, want)
        else:
            got = s.get(k)
            if got is not MISSING and (got["k"] != k or not np.array_equal(got["a"], want["a"])):
                bad.append(k)
    return bad


def test_concurrent_writers_of_the_same_keys(tmp_path, caplog):
    """Two processes writing and reading the same keys: every read is whole (never corrupt,
    never another key's value), every key ends present, no temporary file is left."""
    import concurrent.futures as cf
    import multiprocessing as mp
    root = str(tmp_path / "shared")
    Store(root)
    with cf.ProcessPoolExecutor(2, mp_context=mp.get_context("spawn")) as pool:
        outs = list(pool.map(_hammer, [root, root], [1, 2], [150, 150]))
    assert outs == [[], []]
    s = Store(root)
    with caplog.at_level(logging.WARNING, logger="pipeline.store"):
        assert all(s.get(k) is not MISSING for k in s.keys())
    assert not caplog.records and len(s.keys()) == 8
    assert [p.name for p in entry_files(tmp_path / "shared") if not p.name.endswith(".tsr")] == []
