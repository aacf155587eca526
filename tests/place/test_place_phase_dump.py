"""policy.place.dump: the place phase hands back its tile problems as files the
CLI reads (exact JSON, and the CSV relaxation for other allocators)."""
import pytest

from compiler.phases import PHASES, run_phase
from compiler.place import PlaceConfig, validate
from compiler.place.__main__ import main
from compiler.place.dump import load
from helpers import cfg


def _place(dump, **policy):
    c = cfg(m=32, k=64, n=64, policy={"place": {"dump": dump}, **policy})
    res = {}
    for name in ("model", "plan", "expand", "place"):
        res[name] = run_phase(name, res, c)
    return res["place"]


def test_dump_all_and_none(tmp_path, capsys):
    pl = _place("all")
    assert pl.placement is not None and pl.dumps
    names = [n for n, _ in pl.dumps]
    assert any(n.endswith(".json") for n in names) and any(n.endswith(".csv") for n in names)
    for n, text in pl.dumps:
        (tmp_path / n).write_text(text)
    js = sorted(tmp_path.glob("*.json"))
    for f in js:                                   # the dumped placement is the phase's, valid
        p, extras = load(f)
        assert validate(p, extras["addr"]) == []
    assert main(["validate", *map(str, js)]) == 0
    assert main(["solve", *map(str, sorted(tmp_path.glob("*.csv")))]) == 0
    assert _place("none").dumps == []
    assert _place("failing").dumps == []           # every tile placed: nothing to report


def test_dump_failing_on_rejection(tmp_path):
    # a node budget of 0 search nodes and no greedy order: every tile fails
    off = dict(greedy_online=False, order_lifetime=False, order_alignment=False,
               order_end_first=False, search=False, canonical=False, cpsat_fallback=False)
    c = cfg(m=32, k=64, n=64, policy={"place": {"dump": "failing", **off}})
    res = {}
    for name in ("model", "plan", "expand", "place"):
        res[name] = run_phase(name, res, c)
    pl = res["place"]
    assert pl.rejection is not None and pl.dumps
    f = tmp_path / pl.dumps[0][0]
    f.write_text(pl.dumps[0][1])
    p, extras = load(f)
    assert "addr" not in extras and len(p) > 0


def test_bad_dump_mode():
    with pytest.raises(ValueError, match="'dump'"):
        PlaceConfig.from_dict({"dump": "some"})
