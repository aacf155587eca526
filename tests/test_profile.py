"""profile.html is self-contained and draws offline: no external resource at all,
and headless Chromium (Debian's `chromium`, installed by .ci/run) renders every plot
-- plotly's rendered `main-svg` elements are in the DOM after a virtual-time budget,
with network access disabled -- and a screenshot is not blank."""
import re
import shutil
import subprocess

import pytest

from compiler.phases import compile_trial
from compiler.report import plot_data
from helpers import cfg

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FIGURES = ["timeline", "ops", "tile-cycles", "tile-memory", "memory-map", "host"]
HOST = {p: {"elapsed_s": 0.1 * (i + 1), "peak_rss_mib": 50.0 + i}
        for i, p in enumerate(["model", "plan", "expand", "place", "schedule", "lower", "run"])}


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    from compiler.report import report
    from compiler.phases import target_of
    c = cfg()
    res = compile_trial(c)
    rep = report(*(res[p] for p in ["model", "plan", "expand", "place", "schedule", "run"]), target_of(c), host=HOST)
    path = tmp_path_factory.mktemp("profile") / "profile.html"
    path.write_text(rep.html)
    return path, rep, res


def test_self_contained(page):
    path, rep, _ = page
    html = path.read_text()
    ext = re.search(r"""<(script|link|img|iframe)\b[^>]*\b(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert not ext, f"external resource referenced: {ext.group(0)}"
    assert html.count("<script") >= len(FIGURES)     # plotly.js inlined once, one script per figure
    for fid in FIGURES:
        assert f'id="{fid}"' in html, fid
    assert "<table id='headline'>" in html and ">ok<" in html


def test_plot_data_for_dvc_plots(page):
    _, rep, res = page
    steps = rep.plots["supersteps.csv"].splitlines()
    assert steps[0] == "superstep,kind,cycles" and len(steps) == 1 + len(res["run"].cycles_per_step)
    tiles = rep.plots["tiles.csv"].splitlines()
    assert tiles[0] == "tile,cycles,peak_bytes" and len(tiles) == 1 + res["run"].tile_cycles.shape[1]
    assert sum(int(r.split(",")[2]) for r in steps[1:]) == res["run"].cycles
    empty = plot_data(None, None)                       # a rejected trial still has (empty) tables
    assert empty["supersteps.csv"] == "superstep,kind,cycles\n"
    assert empty["ops.csv"] == "op,name,kind,matmul,vector,exchange,sync,total\n"
    ops = rep.plots["ops.csv"].splitlines()
    assert len(ops) == 1 + len(res["model"].graph.ops)
    assert sum(int(r.split(",")[-1]) for r in ops[1:]) == res["run"].cycles_per_layer


def test_ops_breakdown_of_a_repeat():
    """A 2-layer ViT: one layer's cycles split over its ops and kinds sum to the
    layer's measured cycles; matmuls carry matmul cycles, the rest none; the page
    shows iterations and one iteration's supersteps, not every superstep."""
    from compiler.report import report
    from compiler.phases import target_of
    c = cfg(**dict(name="vit", preset="custom", width=32, hidden=64, heads=2, tokens=16, layers=2))
    c["model"].pop("m"), c["model"].pop("k"), c["model"].pop("n"), c["model"].pop("dtype")
    res = compile_trial(c)
    rep = report(*(res[p] for p in ["model", "plan", "expand", "place", "schedule", "run"]), target_of(c))
    rows = [r.split(",") for r in rep.plots["ops.csv"].splitlines()[1:]]
    g = res["model"].graph
    assert [r[1] for r in rows] == [op.outputs[0] for op in g.ops]
    cyc = {r[1]: list(map(int, r[3:])) for r in rows}
    assert sum(v[-1] for v in cyc.values()) == res["run"].cycles_per_layer
    for r in rows:
        mm, vec, ex, sync, total = map(int, r[3:])
        assert mm + vec + ex + sync == total
        assert (mm > 0) == (r[2] == "matmul"), r
    assert sum(v[3] for v in cyc.values()) == len(res["schedule"].kinds) * target_of(c).sync_cycles
    assert 'id="iterations"' in rep.html and "id='ops-table'" in rep.html
    S = len(res["schedule"].kinds)
    assert rep.html.count(" compute\"") + rep.html.count(" exchange\"") <= S    # one iteration's bars


def chromium(tmp_path, *args):
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--disable-dev-shm-usage", "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
           f"--user-data-dir={tmp_path / 'chromium-profile'}", "--virtual-time-budget=8000", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs Debian's chromium)")
def test_renders_offline_in_headless_chromium(page, tmp_path):
    path, _, _ = page
    r = chromium(tmp_path, "--dump-dom", path.as_uri())   # any network access goes to a dead proxy
    dom = r.stdout
    assert "<html" in dom, r.stderr[-2000:]
    # one plotly graph per figure: each rendered div holds its main-svg layers
    for fid in FIGURES:
        m = re.search(rf'<div id="{fid}"[^>]*class="[^"]*js-plotly-plot[^"]*"', dom)
        assert m, f"plot {fid} did not draw"
    assert dom.count('class="main-svg"') >= 2 * len(FIGURES)
    assert dom.count('class="heatmaplayer mlayer"') >= 2 or dom.count("heatmaplayer") >= 2

    shot = tmp_path / "shot.png"
    chromium(tmp_path, "--hide-scrollbars", "--window-size=1200,1600", f"--screenshot={shot}", path.as_uri())
    # a blank 1200x1600 page compresses to a few KB; drawn plots and text do not
    assert shot.exists() and shot.stat().st_size > 40_000, "screenshot is (almost) blank"


def test_tower_timeline_is_per_iteration_with_before_and_after():
    """A tower's run is steps before the Repeat body, the body count times, steps after:
    one bar per iteration plus one for before and one for after, then the last iteration's
    supersteps alone."""
    from types import SimpleNamespace

    from compiler.report.profile import _timeline
    cyc = [5, 6] + [1, 2, 3] + [1, 2, 4] + [2, 2, 3] + [7]
    run = SimpleNamespace(cycles_per_step=cyc, step_kind=["compute", "exchange", "compute"] * 4, cycles=sum(cyc),
                          ms=0.0)
    figs = {fid: f for fid, _, f in _timeline(run, SimpleNamespace(count=3), (2, 5))}
    bars = figs["iterations"].data[0]
    assert list(bars.x) == ["before", "1", "2", "3", "after"] and list(bars.y) == [11, 6, 7, 7, 7]
    assert list(figs["timeline"].data[0].x) == [2, 2, 3]
