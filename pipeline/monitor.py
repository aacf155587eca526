"""Host monitor: RSS of this process tree over time, elapsed time and peak RSS.

    with HostMonitor(out_dir) as mon:
        run_stage()
    mon.elapsed_s, mon.peak_rss_mib

While active, a daemon thread samples every ``interval`` seconds the summed RSS of the current
process and all its descendants (psutil, recursive -- Dask worker processes included) and
appends one JSON object per line to ``out_dir/host-memory.jsonl``::

    {"t": 0.503, "rss_mib": 181.4}

(``t`` in seconds since entry). On exit -- normal or by exception -- a last sample is taken and
``out_dir/host-time.json`` = ``{"elapsed_s": ..., "peak_rss_mib": ...}`` is written atomically
(temp file + rename). Both feed the metrics. Generic: nothing from ``compiler/``.
"""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import psutil

__all__ = ["HostMonitor", "tree_rss_bytes"]

MEMORY_FILE = "host-memory.jsonl"
TIME_FILE = "host-time.json"
_MIB = 1024.0 * 1024.0


def tree_rss_bytes(proc: psutil.Process | None = None) -> int:
    """RSS of ``proc`` (default: this process) plus all its descendants, in bytes."""
    proc = proc or psutil.Process()
    total = 0
    try:
        total += proc.memory_info().rss
        children = proc.children(recursive=True)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return total
    for c in children:
        try:
            total += c.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return total


class HostMonitor:
    def __init__(self, out_dir: str | os.PathLike, interval: float = 0.5):
        self.out_dir = Path(out_dir)
        self.interval = float(interval)
        self.elapsed_s: float | None = None
        self.peak_rss_mib: float = 0.0
        self.samples = 0
        self._proc = psutil.Process()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._f = None
        self._t0 = 0.0

    @property
    def memory_path(self) -> Path:
        return self.out_dir / MEMORY_FILE

    @property
    def time_path(self) -> Path:
        return self.out_dir / TIME_FILE

    def _sample(self) -> None:
        rss = tree_rss_bytes(self._proc) / _MIB
        t = time.perf_counter() - self._t0
        with self._lock:
            if self._f is None:
                return
            self.peak_rss_mib = max(self.peak_rss_mib, rss)
            self.samples += 1
            self._f.write(json.dumps({"t": round(t, 3), "rss_mib": round(rss, 2)}) + "\n")
            self._f.flush()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._sample()
            except Exception:  # never let monitoring break the stage
                pass

    def __enter__(self) -> "HostMonitor":
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._f = open(self.memory_path, "w")
        self._t0 = time.perf_counter()
        self._sample()
        self._thread = threading.Thread(target=self._run, name="tessera-host-monitor", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, 4 * self.interval))
        try:
            self._sample()
        except Exception:
            pass
        self.elapsed_s = time.perf_counter() - self._t0
        with self._lock:
            if self._f is not None:
                self._f.close()
                self._f = None
        data = {"elapsed_s": round(self.elapsed_s, 3), "peak_rss_mib": round(self.peak_rss_mib, 2)}
        tmp = self.time_path.with_name(f".{TIME_FILE}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, self.time_path)
