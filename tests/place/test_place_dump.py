"""Dump format, CSV reader and the `python -m compiler.place` CLI."""
import json

import numpy as np
import pytest

from compiler.place import PLACED, solve, validate
from compiler.place.__main__ import main
from compiler.place.dump import DumpError, from_dict, load, read_csv, save
from place_cases import random_problem


def test_roundtrip(tmp_path):
    p = random_problem(3, n=9)
    save(tmp_path / "a.json", p, tile=5, witness=[1] * 9)
    q, extra = load(tmp_path / "a.json")
    assert extra["tile"] == 5 and extra["witness"] == [1] * 9
    for f in ("size", "align", "start", "end", "region", "count", "stride", "bank_edges", "reserved"):
        assert np.array_equal(getattr(p, f), getattr(q, f)), f
    assert q.names == p.names


def test_repeated_names_roundtrip(tmp_path):
    """A tile may hold two requests of one tensor (a phase dump of the ring-units tiles had
    qkv.xw.a four times, each with its own bank edges): the dump names repeats `~k`, so it
    loads back with every edge on the same requests (#26: `load` refused it before)."""
    p = random_problem(5, n=6)
    p.names = ["x", "y", "x", "z", "x", "y"]
    p.bank_edges = np.array([[0, 1], [2, 3], [4, 5]])
    save(tmp_path / "r.json", p)
    q, _ = load(tmp_path / "r.json")
    assert q.names == ["x", "y", "x~1", "z", "x~2", "y~1"]
    assert np.array_equal(q.bank_edges, p.bank_edges)


def _dump():
    return {"memory": {"memory_base": 0, "region0_end": 4096, "memory_end": 8192,
                       "element_bytes": 1024},
            "requests": [{"name": "a", "size": 512, "align": 64, "start": 0, "end": 2},
                         {"name": "b", "size": 512, "align": 64, "start": 1, "end": 3,
                          "region": "interleaved"}],
            "bank_edges": [["a", "b"]]}


@pytest.mark.parametrize("patch,needle", [
    (lambda d: d["requests"][1].update(size=-8), "request b: size -8"),
    (lambda d: d["requests"][0].update(align=24), "request a: alignment 24 is not a power of two"),
    (lambda d: d["requests"][1].update(end=1), "request b: lifetime [1, 1) is empty"),
    (lambda d: d.update(bank_edges=[["a", "zz"]]), "names unknown request 'zz'"),
    (lambda d: d["requests"][0].update(region="fast"), "request a: unknown region class"),
    (lambda d: d["requests"][0].update(size="big"), "request a: 'size' must be an integer"),
    (lambda d: d.pop("memory"), "missing 'memory'"),
])
def test_bad_dump_is_one_line(patch, needle):
    d = _dump()
    patch(d)
    with pytest.raises(DumpError) as ei:
        from_dict(d, "t.json")
    assert needle in str(ei.value) and "\n" not in str(ei.value) and "t.json" in str(ei.value)


def test_good_dump_solves():
    p, _ = from_dict(_dump())
    sol = solve(p)
    assert sol.status == PLACED and validate(p, sol.addr) == []
    assert sol.addr[1] >= 4096   # interleaved: region 1


def test_csv_reader():
    p = read_csv("id,lower,upper,size\n0,0,4,10\n1,2,6,20\n2,4,8,5,4\n".replace(",5,4", ",5"), 30)
    assert list(p.size) == [10, 20, 5] and list(p.end) == [4, 6, 8] and p.memory_end == 30
    sol = solve(p)
    assert sol.status == PLACED and validate(p, sol.addr) == []
    q = read_csv("0,0,4,10,8\n1,0,4,10,8\n", 24)
    assert list(q.align) == [8, 8] and solve(q).status == "infeasible"  # 10+pad+10 > 24
    with pytest.raises(DumpError, match="capacity"):
        read_csv("0,0,1,1\n", None)
    with pytest.raises(DumpError, match="csv:1: buffer 7"):
        read_csv("7,3,3,10\n", 100)


def test_cli_solve_validate_bench(tmp_path, capsys):
    (tmp_path / "cases").mkdir()
    for k in range(3):
        save(tmp_path / "cases" / f"c{k}.json", random_problem(k, n=8, fill=0.3))
    assert main(["solve", str(tmp_path / "cases"), "--out", str(tmp_path / "out")]) == 1  # c0 infeasible
    out = capsys.readouterr().out
    assert out.count("c0.json:") == 1 and "nodes=" in out
    sols = sorted((tmp_path / "out").glob("*.solution.json"))
    assert len(sols) == 3
    assert main(["bench", str(tmp_path / "cases"), "--set", "search=false"]) == 0
    assert "| cases | placed |" in capsys.readouterr().out
    # validate a stored placement that is wrong
    d = json.loads((tmp_path / "cases" / "c0.json").read_text())
    d["addr"] = [d["memory"]["memory_base"]] * len(d["requests"])
    (tmp_path / "bad.json").write_text(json.dumps(d))
    assert main(["validate", str(tmp_path / "bad.json")]) == 1
    assert "INVALID" in capsys.readouterr().out


def test_cli_bad_input_writes_nothing(tmp_path, capsys):
    d = _dump()
    d["requests"][0]["size"] = -1
    (tmp_path / "x.json").write_text(json.dumps(d))
    (tmp_path / "y.json").write_text("{not json")
    for f in ("x.json", "y.json"):
        rc = main(["solve", str(tmp_path / f), "--out", str(tmp_path / "out")])
        err = capsys.readouterr().err
        assert rc == 2 and err.count("\n") == 1 and f in err
    assert not (tmp_path / "out").exists()
    assert main(["solve", str(tmp_path / "x.json"), "--set", "nope=1"]) == 2
    assert "nope" in capsys.readouterr().err
