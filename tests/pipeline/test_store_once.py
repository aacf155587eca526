"""Store.once (pipeline/keylock.py): a key is computed by one caller while the others that
need it wait and read it back, a dead holder's lock dies with it, and a failed computation
leaves the key to the next caller."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from pipeline.store import LOCK_SUFFIX, SUFFIX, Store  # noqa: E402

KEY = "ab" + "7" * 62


def _race(store: Store, n: int, fn) -> list:
    """n threads call store.once(KEY, fn) together; their (value, computed) answers."""
    start, out = threading.Barrier(n), [None] * n

    def one(i):
        start.wait()
        out[i] = store.once(KEY, fn)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def test_racing_callers_compute_once(tmp_path):
    s, calls = Store(tmp_path / "s"), []

    def slow():
        calls.append(1)
        time.sleep(0.3)             # the others find the key missing meanwhile, and wait
        return {"v": 42}
    out = _race(s, 4, slow)
    assert calls == [1], "computed more than once"
    assert sorted(c for _, c in out) == [False, False, False, True]
    assert all(v == {"v": 42} for v, _ in out)
    assert not list((tmp_path / "s").rglob("*" + LOCK_SUFFIX))      # the holder removed its lock
    assert s.once(KEY, lambda: 0) == ({"v": 42}, False)


def test_a_failed_computation_leaves_the_key_to_the_next_caller(tmp_path):
    s = Store(tmp_path / "s")

    def boom():
        raise RuntimeError("bug")
    with pytest.raises(RuntimeError):
        s.once(KEY, boom)
    assert s.once(KEY, lambda: 7) == (7, True)


HOLDER = """
import sys, time
sys.path.insert(0, {repo!r})
from pipeline.store import Store
Store({root!r}).once({key!r}, lambda: time.sleep(600))
"""


def test_a_killed_holder_releases_the_key(tmp_path):
    root = str(tmp_path / "s")
    s = Store(root)
    lock = Path(s.path(KEY).removesuffix(SUFFIX) + LOCK_SUFFIX)
    proc = subprocess.Popen([sys.executable, "-c", HOLDER.format(repo=str(REPO), root=root, key=KEY)])
    try:
        deadline = time.monotonic() + 60
        while not (lock.exists() and f"pid {proc.pid}" in lock.read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, "the holder never took the lock"
            time.sleep(0.05)
        waiter = []
        t = threading.Thread(target=lambda: waiter.append(s.once(KEY, lambda: "mine")))
        t.start()
        time.sleep(0.3)
        assert t.is_alive() and not waiter, "a caller did not wait for the live holder"
        os.kill(proc.pid, signal.SIGKILL)       # as a worker's OOM kill: no cleanup runs
        t.join(30)
        assert waiter == [("mine", True)]
    finally:
        proc.kill()
        proc.wait()


def test_a_filesystem_without_locks_computes_unlocked(tmp_path, monkeypatch, caplog):
    import errno
    import fcntl

    def refuse(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")
    monkeypatch.setattr(fcntl, "flock", refuse)
    assert Store(tmp_path / "s").once(KEY, lambda: 5) == (5, True)
    assert "refuses file locks" in caplog.text
