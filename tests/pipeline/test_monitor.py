"""pipeline.monitor: host-memory.jsonl and host-time.json for a process tree."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from pipeline.monitor import HostMonitor, tree_rss_bytes  # noqa: E402

CHILD = "import sys, time; b = bytearray(200 * 1024 * 1024); print('ready', flush=True); time.sleep(30)"


def test_monitor_writes_both_files_and_counts_children(tmp_path):
    out = tmp_path / "metrics" / "stage"
    own_mib = tree_rss_bytes() / 2**20
    with HostMonitor(out, interval=0.05) as mon:
        child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout.readline().strip() == "ready"
            time.sleep(0.3)
        finally:
            child.kill()
            child.wait(10)
    lines = (out / "host-memory.jsonl").read_text().splitlines()
    samples = [json.loads(line) for line in lines]
    assert len(samples) >= 3
    assert all(set(s) == {"t", "rss_mib"} and s["rss_mib"] > 0 for s in samples)
    assert [s["t"] for s in samples] == sorted(s["t"] for s in samples)
    timing = json.loads((out / "host-time.json").read_text())
    assert set(timing) == {"elapsed_s", "peak_rss_mib"}
    assert timing["elapsed_s"] > 0.3 and timing["peak_rss_mib"] > 0
    assert mon.peak_rss_mib == pytest.approx(timing["peak_rss_mib"], abs=0.01)
    assert mon.elapsed_s == pytest.approx(timing["elapsed_s"], abs=0.001)
    # the child's 200 MiB were part of the sampled tree
    assert mon.peak_rss_mib > own_mib + 150
    assert not [p for p in out.iterdir() if p.name not in ("host-memory.jsonl", "host-time.json")]


def test_monitor_writes_on_exception(tmp_path):
    with pytest.raises(RuntimeError):
        with HostMonitor(tmp_path, interval=0.5):
            raise RuntimeError("stage failed")
    timing = json.loads((tmp_path / "host-time.json").read_text())
    assert timing["peak_rss_mib"] > 0
    assert len((tmp_path / "host-memory.jsonl").read_text().splitlines()) >= 2  # entry + exit samples
