"""The CLI on the field's CSV format: columns by header name, MiniMalloc's
inclusive `end`, the `offset` column, one-line errors (exit 2), exit 1 when not
placed, and `validate PROBLEM SOLUTION` on solve's own output."""
import json

import numpy as np
import pytest

from compiler.place import validate
from compiler.place.__main__ import main
from compiler.place.dump import load, save

from place_cases import guillotine_rects, random_problem

# Two buffers live together at time 1 in [lower, upper) terms, never in [start, end] terms
# read as exclusive: a capacity of 10 fits both only if both are 10 B apart in time.
HALF_OPEN = "id,lower,upper,size\na,0,2,6\nb,1,3,6\nc,3,5,10\n"


def _w(tmp_path, name, text):
    f = tmp_path / name
    f.write_text(text)
    return str(f)


def _err(capsys):
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    return err


def test_header_names_any_order(tmp_path, capsys):
    a = _w(tmp_path, "a.csv", HALF_OPEN)
    b = _w(tmp_path, "b.csv", "size,upper,buffer,lower\n6,2,a,0\n6,3,b,1\n10,5,c,3\n")
    pa, _ = load(a, 12)
    pb, _ = load(b, 12)
    for f in ("size", "start", "end", "align"):
        assert np.array_equal(getattr(pa, f), getattr(pb, f)), f
    assert pb.names == ["a", "b", "c"]
    assert main(["solve", b, "--capacity", "12"]) == 0
    assert "placed" in capsys.readouterr().out


def test_inclusive_end(tmp_path, capsys):
    # start,end [0,1] and [1,2] overlap at 1: 6 + 6 > 10 is infeasible; as lower,upper they do not
    inc = _w(tmp_path, "inc.csv", "buffer,start,end,size\na,0,1,6\nb,1,2,6\n")
    exc = _w(tmp_path, "exc.csv", "id,lower,upper,size\na,0,1,6\nb,1,2,6\n")
    p, _ = load(inc, 10)
    assert list(p.end) == [2, 3]
    assert main(["solve", exc, "--capacity", "10"]) == 0
    assert main(["solve", inc, "--capacity", "10"]) == 1
    assert "infeasible" in capsys.readouterr().out
    # a placement MiniMalloc rejects (both at 0, overlapping at time 1) is rejected here too
    sol = _w(tmp_path, "sol.csv", "buffer,start,end,size,offset\na,0,1,6,0\nb,1,2,6,0\n")
    assert main(["validate", sol, "--capacity", "10"]) == 1
    assert "INVALID" in capsys.readouterr().out


def test_offset_column_is_a_placement_not_an_alignment(tmp_path, capsys):
    # MiniMalloc's own output: id,lower,upper,size,offset (offset 312320 is no power of two)
    f = _w(tmp_path, "mm.csv", "id,lower,upper,size,offset\n0,0,2,312320,0\n1,1,3,4,312320\n")
    p, extras = load(f, 1 << 20)
    assert list(p.align) == [1, 1] and extras["addr"] == [0, 312320]
    assert main(["validate", f, "--capacity", str(1 << 20)]) == 0
    assert main(["solve", f, "--capacity", str(1 << 20)]) == 0


def test_capacity_from_file_name(tmp_path, capsys):
    f = _w(tmp_path, "A.12.csv", HALF_OPEN)
    assert main(["solve", f]) == 0
    out = tmp_path / "out"
    assert main(["solve", f, "--out", str(out)]) == 0
    assert (out / "A.solution.12.csv").exists()


@pytest.mark.parametrize("text,needle", [
    ("id,lower,upper,size\n# a comment\n", ":1: header but no buffers"),
    ("# only a comment\n", ":1: empty CSV"),
    ("", ":1: empty CSV"),
    ("id\n0\n", ":1: one field"),
    ("id;lower;upper;size\n0;0;2;4\n", ":1: one field; fields must be separated by ',' (found ';')"),
    ("id,lower,upper,size\na,0,2,-4\n", ":2: buffer a: size -4 must be positive"),
    ("id,lower,upper,size\na,0,2\n", ":2: 3 fields, expected 4"),
    ("id,lower,upper,size\na,0,x,4\n", ":2: column 'upper/end': 'x' is not an integer"),
    ("id,lower,upper,size\na,2,2,4\n", ":2: buffer a: lifetime [2, 2) is empty"),
    ("id,lower,upper,size,alignment\na,0,2,4,3\n", ":2: buffer a: alignment 3 is not a power"),
    ("id,lower,upper,size\na,0,2,4\na,1,2,4\n", ":3: buffer 'a' repeats line 2"),
    ("id,lower,end,size\na,0,2,4\n", ":1: mixed lifetime columns"),
    ("id,lower,upper,bytes\na,0,2,4\n", ":1: unknown column 'bytes'"),
])
def test_malformed_csv_one_line_exit_2(tmp_path, capsys, text, needle):
    f = _w(tmp_path, "bad.csv", text)
    assert main(["solve", f, "--capacity", "64", "--out", str(tmp_path / "o")]) == 2
    err = _err(capsys)
    assert f"bad.csv{needle}" in err
    assert not (tmp_path / "o").exists()


def test_comment_lines_are_skipped(tmp_path, capsys):
    f = _w(tmp_path, "c.csv", "# dumped by X\n" + HALF_OPEN.replace("\nb,", "\n# b follows\nb,"))
    p, _ = load(f, 12)
    assert len(p) == 3


def test_missing_capacity_and_bad_json(tmp_path, capsys):
    assert main(["solve", _w(tmp_path, "x.csv", HALF_OPEN)]) == 2
    assert "capacity" in _err(capsys)
    assert main(["solve", _w(tmp_path, "e.json", "")]) == 2
    assert "e.json:1: empty file" in _err(capsys)
    assert main(["solve", _w(tmp_path, "j.json", '{"a":\n nope}')]) == 2
    assert "j.json:2: not valid JSON" in _err(capsys)


def _guillotine(seed, n, cap=4096, horizon=64):
    """Zero-slack instance (greedy first fit fails on it)."""
    rects = guillotine_rects(seed, n, cap, horizon)
    return "id,lower,upper,size\n" + "".join(f"r{i},{t0},{t1},{a1 - a0}\n"
                                             for i, (t0, t1, a0, a1) in enumerate(rects))


def test_unknown_exits_1(tmp_path, capsys):
    f = _w(tmp_path, "z.4096.csv", _guillotine(2, 80))
    rc = main(["solve", f, "--set", "search=false", "--set", "canonical=false"])
    assert rc == 1 and "unknown" in capsys.readouterr().out
    assert main(["solve", f]) == 0      # the default finds it


def test_validate_solve_output_csv_and_json(tmp_path, capsys):
    f = _w(tmp_path, "z.4096.csv", _guillotine(2, 30))
    out = tmp_path / "sol.csv"
    assert main(["solve", f, "--out", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("id,lower,upper,size,offset\n")
    assert main(["validate", f, str(out)]) == 0
    assert "valid" in capsys.readouterr().out
    # overlapping: every buffer at offset 0
    lines = text.splitlines()
    bad = "\n".join([lines[0]] + [ln.rsplit(",", 1)[0] + ",0" for ln in lines[1:]]) + "\n"
    badf = _w(tmp_path, "bad.4096.csv", bad)
    assert main(["validate", f, badf]) == 1
    assert "INVALID" in capsys.readouterr().out
    # a solution for a different problem is bad input, not a verdict
    other = _w(tmp_path, "o.4096.csv", bad.replace("r0,", "q0,"))
    assert main(["validate", f, other]) == 2
    assert "no buffer 'r0'" in _err(capsys)
    # JSON: solve's own output validates alone and against its problem
    save(tmp_path / "p.json", random_problem(1, n=8, fill=0.3))
    assert main(["solve", str(tmp_path / "p.json"), "--out", str(tmp_path / "o")]) == 0
    sj = tmp_path / "o" / "p.solution.json"
    assert json.loads(sj.read_text())["solution"]["status"] == "placed"
    assert main(["validate", str(sj)]) == 0
    assert main(["validate", str(tmp_path / "p.json"), str(sj)]) == 0
    d = json.loads(sj.read_text())
    d["addr"] = [d["memory"]["memory_base"]] * len(d["addr"])
    sj.write_text(json.dumps(d))
    assert main(["validate", str(tmp_path / "p.json"), str(sj)]) == 1


def test_help_documents_formats_and_limits(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for s in ("time_limit_s", "canonical_node_budget", "start,end", "inclusive", "offset",
              "Exit status"):
        assert s in out, s


def test_solution_matches_validator(tmp_path):
    f = _w(tmp_path, "z.4096.csv", _guillotine(3, 25))
    out = tmp_path / "s.csv"
    assert main(["solve", f, "--out", str(out)]) == 0
    p, x = load(out, 4096)
    assert validate(p, x["addr"]) == []


def test_each_command_has_its_own_help(capsys):
    # `solve --help` used to print the top-level help (one positional `cmd`)
    for cmd, own, other in (("solve", "--out", "--witness"), ("validate", "--witness", "--out"),
                            ("bench", "--cpsat", "--out")):
        with pytest.raises(SystemExit) as e:
            main([cmd, "--help"])
        out = capsys.readouterr().out
        assert e.value.code == 0
        assert out.startswith(f"usage: python -m compiler.place {cmd} "), out[:80]
        assert own in out and other not in out and "--capacity" in out, cmd


def test_readme_commands_for_csv(tmp_path, capsys):
    # README: `solve X.csv --capacity B --out X.solution.csv`, then `validate PROBLEM SOLUTION`
    x = _w(tmp_path, "x.csv", HALF_OPEN)
    sol = str(tmp_path / "x.solution.csv")
    assert main(["solve", x, "--capacity", "12", "--out", sol]) == 0
    capsys.readouterr()
    # without the arena there is nothing to check containment against: one line saying what to pass
    assert main(["validate", x, sol]) == 2
    err = _err(capsys)
    assert "x.csv" in err and "--capacity B" in err and "x.<B>.csv" in err, err
    assert main(["validate", x, sol, "--capacity", "12"]) == 0
    assert "valid" in capsys.readouterr().out
    # the arena is really checked: the same placement in a smaller arena is rejected
    assert main(["validate", x, sol, "--capacity", "11"]) == 1
    assert "INVALID" in capsys.readouterr().out


def test_small_problem_never_loads_the_kernels(tmp_path):
    # start-up: a problem the greedy orders place must not import numba (~0.4 s) nor load
    # or compile the kernels (0.5 s cached, ~15 s on a clean checkout); a fresh interpreter
    import subprocess
    import sys
    x = _w(tmp_path, "x.12.csv", HALF_OPEN)
    code = ("import sys; from compiler.place.__main__ import main; rc = main(['solve', %r]); "
            "print(rc, 'numba' in sys.modules, 'compiler.place.skyline_jit' in sys.modules)" % x)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip().splitlines()[-1] == "0 False False", r.stdout + r.stderr
