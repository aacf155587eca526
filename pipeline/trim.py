"""Return freed heap memory to the kernel while a stage runs (glibc malloc_trim).

    with Trimmer():           # every TESSERA_MALLOC_TRIM_S seconds (0.5)
        run_stage()

Why. glibc keeps memory a thread frees in that thread's arena (and, for blocks under its
mmap threshold, which rises to 32 MiB as large blocks are freed, in the heap) for reuse;
it gives it back only from the top of a heap. The expand stage's two worker threads each
build and drop tile graphs of ~190 MiB of int64 columns at 27 layers (10 MiB per column),
and the run stage drops ~400 MB of host streams and per-op temporaries: at 27 layers the
kernel's high-water mark of the expand stage was 2.0-2.3 GiB while tracemalloc counted at
most 1.43 GiB live (2026-12-02, experiments/host_time/README.md). `malloc_trim(0)` releases
the free pages of every arena (madvise), so freed memory stops counting as resident.

A daemon thread calls it every `period` seconds (~9 ms a call at 27 layers' expand). It only
releases pages of free blocks: no byte of any result changes; but memory handed back costs a
page fault when reused, so trimming often costs CPU: 27 layers' expand stage (one rerun each,
load ~3) VmHWM / CPU s: off 2,044-2,323 MiB / 25-31 s, every 1.0 s 1,764 / 37, 0.5 s 1,630 / 35,
0.2 s 1,519-1,574 / 30-46. Not glibc (no malloc_trim): nothing. TESSERA_MALLOC_TRIM_S sets the
period (default 0.5; 0 turns it off). Generic: nothing from ``compiler/``.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading

__all__ = ["Trimmer", "period_from_env"]

ENV = "TESSERA_MALLOC_TRIM_S"
DEFAULT_S = 0.5            # measured (above): under 2 GiB with margin at less CPU than 0.2


def _malloc_trim():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return fn


def period_from_env() -> float:
    v = os.environ.get(ENV, "")
    try:
        return max(0.0, float(v)) if v.strip() else DEFAULT_S
    except ValueError:
        raise ValueError(f"{ENV}={v!r}: not a number of seconds (0 turns trimming off)") from None


class Trimmer:
    """While active, malloc_trim(0) every `period` s on a daemon thread (and once on exit)."""

    def __init__(self, period: float | None = None):
        self.period = period_from_env() if period is None else float(period)
        self.trims = 0
        self._fn = _malloc_trim() if self.period > 0 else None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self._fn(0)
            self.trims += 1

    def __enter__(self) -> "Trimmer":
        if self._fn is not None:
            self._thread = threading.Thread(target=self._run, name="tessera-malloc-trim", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._fn(0)           # before the outputs are written: the codec's buffers come next
            self.trims += 1
