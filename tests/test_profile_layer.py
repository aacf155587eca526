"""The profile's "one layer" is one layer (issue #30 item 7): on a tower, whose patch
embedding and head run once outside the Repeat, the op breakdown sums to
run.cycles_per_layer (the last iteration's steps, as measured), the ops outside the body
(patch embedding, pool head) get no cycles and are not drawn, and the title says which cycles it shows; the heat maps'
axes say how tiles are laid out."""
import re

import pytest

from compiler.phases import compile_trial, target_of
from compiler.report import report
from helpers import target_cfg

TOWER = dict(name="vit", preset="custom", width=64, hidden=172, heads=2, image=56, patch=14, layers=2, gelu="erf")


@pytest.fixture(scope="module")
def tower():
    c = dict(model=TOWER, target=target_cfg("tiny"), policy={})
    res = compile_trial(c)
    rep = report(*(res[p] for p in ["model", "plan", "expand", "place", "schedule", "run"]), target_of(c))
    return res, rep


def test_one_layer_is_the_repeat_body(tower):
    res, rep = tower
    run, g = res["run"], res["model"].graph
    assert run.cycles > 2 * run.cycles_per_layer            # the tower's steps outside the body count too
    rows = [r.split(",") for r in rep.plots["ops.csv"].splitlines()[1:]]
    assert sum(int(r[-1]) for r in rows) == run.cycles_per_layer
    first, stop = g.body()
    assert first > 0 and stop < len(g.ops)
    once = [r for r in rows if r[1].startswith(("patches", "pool.")) or r[1] == "embedding"]
    assert len(once) == 2 + 16 and all(int(r[-1]) == 0 for r in once)     # run once, outside the layer
    assert any(int(r[-1]) > 0 for r in rows if first <= int(r[0]) < stop)
    # the body's cycles, recomputed from the run's steps of the last iteration
    tg = res["place"].tilegraph
    b0, b1 = tg.body_steps()
    last = run.cycles_per_step[b0 + (tg.count - 1) * (b1 - b0):b0 + tg.count * (b1 - b0)]
    assert sum(last) == run.cycles_per_layer


def test_titles_and_axes_say_what_they_show(tower):
    res, rep = tower
    html = rep.html
    m = re.search(r"One layer's cycles by op and kind \(([\d,]+) cycles: the last of 2 Repeat iterations", html)
    assert m and int(m.group(1).replace(",", "")) == res["run"].cycles_per_layer
    assert "tile mod width" not in html and "tile / width" not in html
    assert "column (tile mod 8)" in html and "tile = 8 × row + column" in html       # 64 tiles: 8 to a row
    table = html[html.index("<table id='ops-table'>"):]
    table = table[:table.index("</table>")]
    assert "patches" not in table and "pool." not in table and "embedding" not in table   # run once: not drawn
