"""pipeline.stages.write_tracked: a metrics file rewritten with other bytes of the same size in
the same second is still seen as modified by `git status`, even when git trusts the index's stat
data (issue #24: after failed `dvc exp run`s metrics were invisible to git until touched)."""
import os
import subprocess
import time

from pipeline import stages


def git(*args, cwd):
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def test_same_size_rewrite_in_the_same_second_is_seen(tmp_path, monkeypatch):
    monkeypatch.setattr(stages, "REPO", tmp_path)
    git("init", "-q", cwd=tmp_path)
    # only mtime seconds and size count (no inode: DVC's delete-then-write may reuse it anyway)
    git("config", "core.checkStat", "minimal", cwd=tmp_path)
    while time.time() % 1 > 0.3:          # the whole sequence within one second
        time.sleep(0.05)
    path = tmp_path / "metrics" / "run.json"
    stages.write_tracked(path, b'{"tolerance": 0.012186}\n')
    now = time.time_ns()
    os.utime(path, ns=(now, now))
    git("add", "-A", cwd=tmp_path)
    index = tmp_path / ".git" / "index"
    os.utime(index, ns=(now + 2 * 10**9, now + 2 * 10**9))     # an index written later: entries trusted
    assert git("status", "--porcelain", cwd=tmp_path) == "A  metrics/run.json\n"
    stages.write_tracked(path, b'{"tolerance": 0.013859}\n')   # same size, same second
    assert git("status", "--porcelain", cwd=tmp_path) == "AM metrics/run.json\n"
    assert path.stat().st_mtime_ns // 10**9 > index.stat().st_mtime_ns // 10**9


def test_unchanged_bytes_are_not_rewritten(tmp_path, monkeypatch):
    monkeypatch.setattr(stages, "REPO", tmp_path)
    path = tmp_path / "m.json"
    stages.write_tracked(path, b"{}\n")
    ino, mtime = path.stat().st_ino, path.stat().st_mtime_ns
    stages.write_tracked(path, b"{}\n")
    assert (path.stat().st_ino, path.stat().st_mtime_ns) == (ino, mtime)
