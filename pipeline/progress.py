"""Progress reporting for long work.

``Progress(total, label, unit="items")`` is a context manager with ``update(n=1, cached=False)``:

* when stderr is a TTY: a tqdm bar with rate and ETA;
* otherwise (logs, CI, DVC): a line on stderr at most every ``interval`` seconds, e.g.
  ``expand: 12/40 candidates, 3.1/s, ETA 9s``, plus a final line
  ``expand: 40/40 candidates in 12.9s, 3.1/s (4 cached)``.

The interval defaults to 10 s (``TESSERA_PROGRESS_INTERVAL`` overrides it). ``enabled=False``
silences it; ``total=None`` is allowed (no ETA). Generic: nothing from ``compiler/``.
"""
from __future__ import annotations

import os
import sys
import time
from typing import TextIO

__all__ = ["Progress"]


def _fmt_duration(s: float) -> str:
    if s < 60:
        return f"{s:.0f}s" if s >= 10 else f"{s:.1f}s"
    m, s = divmod(int(round(s)), 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


def _fmt_rate(r: float) -> str:
    return f"{r:.0f}/s" if r >= 100 else f"{r:.1f}/s" if r >= 1 else f"{r:.2f}/s"


class Progress:
    def __init__(self, total: int | None, label: str = "", *, unit: str = "items",
                 interval: float | None = None, stream: TextIO | None = None,
                 enabled: bool = True, tty: bool | None = None):
        self.total = total
        self.label = label or "progress"
        self.unit = unit
        if interval is None:
            interval = float(os.environ.get("TESSERA_PROGRESS_INTERVAL", "10"))
        self.interval = interval
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        if tty is None:
            try:
                tty = self.stream.isatty()
            except Exception:
                tty = False
        self.tty = tty
        self.n = 0
        self.cached = 0
        self._bar = None
        self._t0 = 0.0
        self._last = 0.0

    def __enter__(self) -> "Progress":
        self._t0 = self._last = time.monotonic()
        if self.enabled and self.tty:
            from tqdm import tqdm

            self._bar = tqdm(total=self.total, desc=self.label, unit=f" {self.unit}",
                             file=self.stream, dynamic_ncols=True, leave=True)
        return self

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self._t0

    def update(self, n: int = 1, *, cached: bool = False) -> None:
        self.n += n
        if cached:
            self.cached += n
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(n)
            if cached:
                self._bar.set_postfix_str(f"{self.cached} cached", refresh=False)
            return
        now = time.monotonic()
        if now - self._last >= self.interval and (self.total is None or self.n < self.total):
            self._last = now
            self._write(self._line(now, final=False))

    def _line(self, now: float, final: bool) -> str:
        dt = max(now - self._t0, 1e-9)
        computed = self.n - self.cached
        rate = computed / dt
        tot = f"/{self.total}" if self.total is not None else ""
        if final:
            s = f"{self.label}: {self.n}{tot} {self.unit} in {_fmt_duration(dt)}, {_fmt_rate(rate)}"
        else:
            s = f"{self.label}: {self.n}{tot} {self.unit}, {_fmt_rate(rate)}"
            if self.total is not None and rate > 0:
                s += f", ETA {_fmt_duration((self.total - self.n) / rate)}"
        if self.cached:
            s += f" ({self.cached} cached)"
        return s

    def _write(self, line: str) -> None:
        try:
            self.stream.write(line + "\n")
            self.stream.flush()
        except Exception:
            pass

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self.enabled:
            self._write(self._line(time.monotonic(), final=True))
        self.enabled = False

    def __exit__(self, *exc) -> None:
        self.close()
