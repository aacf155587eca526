"""No output in README.md or docs/results.md is stale or of unknown origin (issue #30 items
1 and 2): every table and output block carries a marker (experiments/readme_check/outputs.py),
the cheap ones (the in-process GEMM trial and its multirun table, the config check's error
lines) are rerun here and must print what the docs show; the expensive ones name the command,
date and commit they were measured at. README stays a guide: at most 250 lines. The checker
itself must fail on a stale line and on an unmarked table (so this test can fail)."""
import json
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "experiments" / "readme_check"))
import outputs as O  # noqa: E402

sys.path.pop(0)


def test_readme_is_short():
    n = len((REPO / "README.md").read_text().splitlines())
    assert n <= 250, n


def test_every_output_is_marked_and_the_checked_ones_are_as_shown():
    problems = O.check()
    assert not problems, "\n".join(problems)


def test_the_headline_is_the_committed_trial():
    """README's `dvc metrics show metrics/trial.json` block shows the committed metrics/trial.json
    (the default trial's, which dvc.lock pins): every column, at the digits DVC prints."""
    block = next(o for o in O.outputs((REPO / "README.md").read_text())
                 if o["marker"] and "dvc metrics show metrics/trial.json" in (o["marker"].group("mcmd") or ""))
    head, row = (ln.split() for ln in block["lines"][:2])
    assert head[0] == "Path" and row[0] == "metrics/trial.json" and len(head) == len(row), block["lines"]
    committed = json.loads((REPO / "metrics" / "trial.json").read_text())
    assert sorted(head[1:]) == sorted(committed), (head, sorted(committed))
    for key, shown in zip(head[1:], row[1:]):
        value = committed[key]
        if isinstance(value, str):
            assert shown == value, key
        else:          # DVC prints 5 decimals; integers whole
            assert float(shown) == pytest.approx(value, rel=1e-4, abs=1e-5), (key, shown, value)


def test_measured_markers_name_a_date_a_commit_and_a_command():
    for f in O.FILES:
        for out in O.outputs((REPO / f).read_text()):
            m = out["marker"]
            if m and m.group("when"):
                assert m.group("mcmd").strip() and m.group("when")[:4] == "2026", (f, out["line"], m.group(0))


def test_the_checker_catches_a_stale_line_and_a_missing_marker(tmp_path, monkeypatch):
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- checked -->\n```\n$ echo hello\nhello\n```\n\n| a |\n|---|\n| 1 |\n")
    monkeypatch.setattr(O, "REPO", tmp_path)
    problems = O.check(["doc.md"], runner=lambda cmd, cwd: "hello\n")
    assert problems == ["doc.md:7: table without a marker (checked / measured / reference)"]
    doc.write_text("<!-- checked -->\n```\n$ echo hello\nhello, stale\n```\n")
    problems = O.check(["doc.md"], runner=lambda cmd, cwd: "hello\n")
    assert len(problems) == 1 and "did not print 'hello, stale'" in problems[0]


@pytest.mark.parametrize("shown, got, ok", [
    ("| x | host s |\n|---|---|\n| 1 | 0.6 |", "| x | host s |\n|---|---|\n| 1 | 21.3 |", True),
    ("| x | host s |\n|---|---|\n| 2 | 0.6 |", "| x | host s |\n|---|---|\n| 1 | 21.3 |", False),
    ("profile: artifacts/trials/20261201-161035/p.html", "profile: /r/artifacts/trials/20270101-000000/p.html", True),
    ("more than the 21.8 GiB available", "more than the 3.1 GiB available", True),
])
def test_only_what_differs_on_every_run_is_ignored(shown, got, ok):
    assert (O.in_order(O.normalise(shown), O.normalise(got, "/r")) is None) == ok
