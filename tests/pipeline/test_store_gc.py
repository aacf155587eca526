"""pipeline/store_gc.py: least recently used entries go first (a read is a use), down to the
size asked; a dry run removes nothing; stale temporary files and unheld locks go, a held lock
stays; a removed entry is simply recomputed."""
from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from pipeline import keylock, store_gc  # noqa: E402
from pipeline.store import _TMP_PREFIX, LOCK_SUFFIX, MISSING, SUFFIX, Store  # noqa: E402


def _filled(root: Path) -> tuple[Store, list[str], int]:
    """Five entries of ~10 KB, written an hour apart (k0 oldest)."""
    s, keys, now = Store(root), [f"k{i}" + "0" * 40 for i in range(5)], time.time()
    for i, k in enumerate(keys):
        s.put(k, np.full(10_000, i, np.uint8))
        os.utime(s.path(k), (now - 3600 * (5 - i),) * 2)
    return s, keys, os.path.getsize(s.path(keys[0]))


def test_least_recently_used_go_first(tmp_path):
    s, keys, size = _filled(tmp_path / "s")
    assert s.get(keys[0]) is not MISSING               # read now: k0 is the most recent use
    r = store_gc.gc(s, 3 * size, dry_run=True)
    assert (r["removed"], r["freed"]) == (2, 2 * size) and all(k in s for k in keys)    # `in` is no use
    r = store_gc.gc(s, 3 * size)
    assert (r["entries"], r["removed"]) == (5, 2)
    assert [k in s for k in keys] == [True, False, False, True, True]
    assert s.once(keys[1], lambda: "again") == ("again", True)     # recomputed when next needed
    assert store_gc.gc(s, 0)["removed"] == 4 and s.keys() == []


def test_leftovers_go_but_a_held_lock_stays(tmp_path):
    s, keys, _ = _filled(tmp_path / "s")
    old_tmp = Path(s.root) / keys[0][:2] / f"{_TMP_PREFIX}{keys[0]}-dead"
    new_tmp = Path(s.root) / keys[0][:2] / f"{_TMP_PREFIX}{keys[0]}-live"
    for p in (old_tmp, new_tmp):
        p.write_bytes(b"partial")
    os.utime(old_tmp, (time.time() - 2 * store_gc.STALE_TMP_S,) * 2)
    unheld = Path(s.path(keys[1]).removesuffix(SUFFIX) + LOCK_SUFFIX)
    unheld.write_text("host pid 1")                    # its holder died: the kernel dropped the lock
    held_path = s.path(keys[2]).removesuffix(SUFFIX) + LOCK_SUFFIX
    inside, leave = threading.Event(), threading.Event()

    def holder():
        with keylock.locked(held_path, keys[2]):
            inside.set()
            leave.wait(30)
    t = threading.Thread(target=holder)
    t.start()
    try:
        assert inside.wait(30)
        r = store_gc.gc(s, 10 ** 9)
        assert r["removed"] == 0 and r["leftovers"] == 2
        assert not old_tmp.exists() and new_tmp.exists() and not unheld.exists() and Path(held_path).exists()
    finally:
        leave.set()
        t.join(30)


def test_the_command_says_what_it_holds_and_refuses_other_stores(tmp_path, capsys):
    s, keys, size = _filled(tmp_path / "s")
    assert store_gc.main(["--store", str(tmp_path / "s")]) == 0
    assert "5 entries" in capsys.readouterr().out
    assert store_gc.main(["--store", str(tmp_path / "s"), "--max-gb", str(2 * size / 1e9)]) == 0
    assert "removed the 3 least recently used" in capsys.readouterr().out
    assert store_gc.main(["--store", "s3://bucket/store", "--max-gb", "1"]) == 2
    assert "local path only" in capsys.readouterr().err
