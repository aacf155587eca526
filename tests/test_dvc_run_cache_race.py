"""DVC's run cache races between two experiments that reproduce the same stage at once (seen
in CI: one of two queued experiments failed). `StageCache.save` writes a `.<random>.tmp` into
the stage's run-cache directory and renames it; `StageCache._load`, which a concurrent
experiment calls before running that stage, lists the directory and sorts the names by
`os.path.getmtime`, so a `.tmp` renamed in between raises FileNotFoundError and the
experiment fails. Our stages cannot prevent it; docs/architecture.md ("Checks first") tells
users what to do, and tests/test_safe_artifacts.py re-queues an experiment that failed this
way only. This test pins the race on the installed DVC: when it fails, DVC has fixed it and
the note and the re-queue can go."""
import os
from types import SimpleNamespace

import pytest
from dvc.stage import cache as run_cache


def test_a_tmp_entry_that_vanishes_fails_the_load(tmp_path, monkeypatch):
    sc = run_cache.StageCache.__new__(run_cache.StageCache)
    sc.cache_dir = str(tmp_path)
    key = "ab" + "0" * 62
    monkeypatch.setattr(run_cache, "_get_stage_hash", lambda stage: key)
    d = tmp_path / key[:2] / key
    d.mkdir(parents=True)
    (d / "entry").write_text("cmd: x\n")
    real = os.listdir
    # what a concurrent save leaves for an instant: a temporary name, gone by the time it is stat'ed
    monkeypatch.setattr(run_cache.os, "listdir", lambda p: real(p) + [".f00.tmp"])
    with pytest.raises(FileNotFoundError, match=r"\.f00\.tmp"):
        sc._load(SimpleNamespace())
