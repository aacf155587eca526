"""`portfolio` (or another flag, --flag) on and off, per case: status, wall seconds, this process's and its
children's (the workers') CPU seconds, and the work (nodes x size + FOLD_WORK per
request folded: search.py) at which the answer was found - the single process's
total, the portfolio's per worker (winner marked). Work is deterministic, so it
compares the two modes apart from the machine's load; wall and CPU do not.

    .venv/bin/python experiments/placement_corpus/portfolio_work.py CASE.json... [--limit 60]
        [--flag time_mirror]     # that flag off and on instead (the portfolio on)
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import compiler.place.search as S  # noqa: E402
import compiler.place.skyline_jit as SJ  # noqa: E402
from compiler.place import PLACED, PlaceConfig, portfolio, solve, validate  # noqa: E402
from compiler.place.__main__ import CLI_DEFAULTS  # noqa: E402
from compiler.place.dump import load  # noqa: E402


def _cpu(who):
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--limit", type=float, default=60.0)
    ap.add_argument("--flag", default="portfolio", help="the flag turned off and on")
    a = ap.parse_args(argv)
    SJ.warm()
    loop0, works = S._RoundRobin.loop, []

    def loop(self, hook=None):
        r = loop0(self, hook)
        works.append(self.work)
        return r
    S._RoundRobin.loop = loop
    for f in a.cases:
        p, _ = load(f)
        for pf in (False, True):
            works.clear()
            portfolio.LAST.clear()
            c0, s0, t = _cpu(resource.RUSAGE_CHILDREN), _cpu(resource.RUSAGE_SELF), time.perf_counter()
            cfg = PlaceConfig.from_dict({**CLI_DEFAULTS, "time_limit_s": a.limit, a.flag: pf})
            sol = solve(p, cfg)
            wall = time.perf_counter() - t
            assert sol.status != PLACED or not validate(p, sol.addr), f"{f}: INVALID"
            last = portfolio.LAST or None
            w = (f"work {works[-1] / 1e6:.1f} M" if not cfg.portfolio and works else
                 "work " + ", ".join(f"w{i}{'*' if i == last['winner'] else ''} {v / 1e6:.1f} M"
                                     for i, v in sorted(last["work"].items())) if last else "")
            print(f"{Path(f).name} {a.flag}={int(pf)}: {sol.status} {wall:.1f} s wall, cpu self "
                  f"{_cpu(resource.RUSAGE_SELF) - s0:.1f} s children "
                  f"{_cpu(resource.RUSAGE_CHILDREN) - c0:.1f} s, {w}; load {os.getloadavg()[0]:.1f}",
                  flush=True)


if __name__ == "__main__":
    main()
