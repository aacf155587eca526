"""Load time of profile.html pages in headless Chromium:
`python experiments/host_time/profile_load.py PAGE.html [PAGE.html ...] [--runs 5]`.

Each page is copied with one script appended that, at the load event (every inline plotly
script has run and drawn by then), writes performance.now() -- milliseconds since
navigation start -- and the number of drawn plots into the title; `chromium --headless
--dump-dom` prints the DOM after the load event and the title is read back. Network cut
(dead proxy), no virtual time (it would fake performance.now()). Prints per page: size,
plotly.js's share of it, drawn plots, load ms of each run and the median."""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

PROBE = ("<script>window.addEventListener('load',()=>{document.title='LOADMS='+performance.now().toFixed(0)"
         "+' PLOTS='+document.querySelectorAll('.js-plotly-plot').length;});</script>")


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    raise SystemExit("error: no chromium on PATH (apt-get install chromium)")


def load_ms(page: Path, work: Path) -> tuple[float, int]:
    probe = work / page.name
    probe.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync",
           "--disable-background-networking", "--disable-component-update", "--disable-dev-shm-usage",
           "--proxy-server=127.0.0.1:9", f"--user-data-dir={work / 'profile'}", "--dump-dom", probe.as_uri()]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout
    m = re.search(r"LOADMS=(\d+) PLOTS=(\d+)", out)
    if not m:
        raise RuntimeError(f"{page}: no load time in the dumped DOM")
    return float(m.group(1)), int(m.group(2))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pages", nargs="+")
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args(argv)
    pages = [Path(p) for p in a.pages]
    load = [os.getloadavg()[0]]
    runs = {p: [] for p in pages}
    with tempfile.TemporaryDirectory(prefix="profile_load-") as d:
        for _ in range(a.runs):            # pages in turn, so a changing load hits them alike
            for p in pages:
                runs[p].append(load_ms(p, Path(d)))
    load.append(os.getloadavg()[0])
    print(f"load average {load[0]:.1f} -> {load[1]:.1f}")
    print("| page | MB | plotly.js inlined, MB | plots | load ms per run | median ms |\n|---|---:|---:|---:|---|---:|")
    for p in pages:
        text = p.read_text()
        js = re.search(r"<script[^>]*>\s*(/\*\*\s*\* plotly\.js.*?)</script>", text, re.S)
        print(f"| {p} | {len(text.encode()) / 1e6:.2f} | {len(js.group(1).encode()) / 1e6 if js else 0:.2f} | "
              f"{runs[p][0][1]} | {', '.join(f'{ms:.0f}' for ms, _ in runs[p])} | "
              f"{statistics.median(ms for ms, _ in runs[p]):.0f} |")


if __name__ == "__main__":
    main()
