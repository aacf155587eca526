"""Every entry point answers --help: what it does, its arguments and an example, exit 0, and
nothing run or written. A two-point `pipeline.trial --multirun` (the flag after the overrides,
as Hydra users write it) prints one table of its trials and writes it beside them. README and
dvc.yaml point to nothing outside the repository."""
import re

import pytest

from compiler.phases import PHASES
from conftest import REPO
from test_bad_input import run
from test_dvc import copy_repo

STAGES = ["config", *PHASES]


def files(d):
    return sorted(str(p.relative_to(d)) for p in d.rglob("*") if "__pycache__" not in p.parts)


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return copy_repo(tmp_path_factory.mktemp("help") / "t")


@pytest.mark.parametrize("args, says", [
    (["pipeline", "--help"], ["usage: python -m pipeline <stage>", "example", *STAGES]),
    (["pipeline", "-h"], ["usage: python -m pipeline <stage>"]),
    (["pipeline.config", "--help"], ["write", "check", "validate", "examples"]),
    (["pipeline.trial", "--help"], ["--multirun", "artifacts/trials/", "trials.md", "output.npz", "Examples", "model: "]),
    (["pipeline.trial", "model=gemm", "--help"], ["--multirun"]),
    (["compiler.place", "--help"], ["usage"]),
    (["pipeline.attention", "--help"], ["usage", "model.attention=auto"]),
    (["pipeline.family", "--help"], ["usage", "policy.pipeline_groups=auto"]),
])
def test_help_exits_0_and_writes_nothing(repo, args, says):
    before = files(repo)
    r = run(repo, *args)
    assert r.returncode == 0, r.stderr
    for s in says:
        assert s in r.stdout, (s, r.stdout)
    assert files(repo) == before


def test_every_stage_help(repo, capsys, monkeypatch):
    """In-process (one interpreter for all stages): each stage's help names what it reads and
    writes and gives an example; the stage itself never starts."""
    import pipeline.__main__ as cli
    import pipeline.stages
    monkeypatch.setattr(pipeline.stages, "run_stage", lambda *a, **k: pytest.fail("a stage ran"))
    for st in STAGES:
        assert cli.main([st, "--help"]) == 0
        out = capsys.readouterr().out
        for s in (f"usage: python -m pipeline {st}", "reads:", "writes:", "example", f"dvc repro {st}"):
            assert s in out, (st, s, out)
    assert cli.main([]) == 2                    # no stage: the usage on stderr, exit 2
    assert "usage" in capsys.readouterr().err


def test_multirun_flag_after_overrides_prints_a_table(repo):
    sweep = repo / "sweep"
    r = run(repo, "pipeline.trial", "model=gemm", "target=tiny", "--multirun", "model.m=32,64",
            f"hydra.sweep.dir={sweep}")
    assert r.returncode == 0, r.stderr
    table = [ln for ln in r.stdout.splitlines() if ln.startswith("|")]
    assert len(table) == 4, r.stdout                      # header, rule, two trials
    assert "status" in table[0] and "cycles" in table[0]
    assert "model.m=32" in table[2] and "model.m=64" in table[3] and "| ok |" in table[2]
    assert (sweep / "trials.md").read_text().splitlines() == table
    assert r.stdout.count("status=ok cycles=") == 2           # one line per trial, no `None`
    assert "None" not in r.stdout and "Rejection(" not in r.stdout
    assert r.stderr.count("expand: ") == 2                     # each fan-out reported once per trial


OUTSIDE = [r"\.\./", r"DESIGN", r"/work/", r"shared/"]


@pytest.mark.parametrize("name", ["README.md", "dvc.yaml", "docs/architecture.md", "docs/results.md", "docs/cluster.md"])
def test_docs_point_inside_the_repository(name):
    text = (REPO / name).read_text()
    for pat in OUTSIDE:
        hits = [ln for ln in text.splitlines() if re.search(pat, ln) and "file:///shared" not in ln]
        assert not hits, (name, pat, hits)
    # every repository path README names in backticks exists
    for path in re.findall(r"`((?:compiler|pipeline|conf|tests|experiments|docs|\.ci)/[\w./-]*)`", text):
        assert (REPO / path.rstrip("/")).exists() or "<" in path or "*" in path, (name, path)


def test_readme_config_table_matches_params_yaml():
    """Each `key` of README's Config table with its `default`: the default trial's value (a
    group's default is its name/kind), composed from conf/ (test_dvc holds the committed
    params.yaml equal to it; the workspace's may be an applied experiment's)."""
    import yaml
    from pipeline.config import compose
    params = compose()
    text = (REPO / "README.md").read_text()
    table = text[text.index("## Config"):text.index("## Metrics")]
    checked = 0
    for row in re.findall(r"^\| (`[^|]*`) \| ([^|]*) \|", table, re.M):
        keys = re.findall(r"`([\w.*]+)`", row[0])
        vals = re.findall(r"`([^`]*)`", row[1])
        if len(keys) != len(vals) or any("*" in k for k in keys):
            continue
        for k, v in zip(keys, vals):
            node = params
            for part in k.split("."):
                node = node[part]
            if isinstance(node, dict):
                node = node.get("name", node.get("kind"))
            assert node == yaml.safe_load(v if v != '""' else "''"), (k, v, node)
            checked += 1
    assert checked >= 25, checked


def test_readme_commands_are_listed_for_the_fresh_clone_check():
    """experiments/readme_check/run.py (run by hand: minutes) finds README's commands; the cheap
    part here: they parse, the entry points they name exist, and the stages' help is reachable."""
    import importlib.util
    import sys
    sys.path.insert(0, str(REPO / "experiments" / "readme_check"))
    try:
        import run as check
    finally:
        sys.path.pop(0)
    cmds = check.commands((REPO / "README.md").read_text())
    assert any(c.startswith("dvc exp run --temp") for c in cmds)
    assert "dvc metrics show metrics/trial.json" in cmds
    for mod in {m for c in cmds for m in re.findall(r"python -m ([\w.]+)", c)}:
        assert importlib.util.find_spec(mod) is not None, mod
