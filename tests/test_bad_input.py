"""Bad input is a one-line `error: ...` naming the culprit, a non-zero exit, and no
partial outputs: unknown config key, invalid override value, corrupt params.yaml,
missing upstream artifact, unwritable store path, unwritable output directory --
for the stage CLI (`python -m pipeline <phase>`, what dvc runs) and for the
in-process `python -m pipeline.trial`."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from test_dvc import copy_repo

PHASES = ["model", "plan", "expand", "place", "schedule", "lower", "run", "report"]


def run(d: Path, *args):
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    return subprocess.run([sys.executable, "-m", *args], cwd=d, env=env, capture_output=True, text=True)


def one_line_error(r, *names):
    assert r.returncode != 0, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for n in names:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def leftovers(d: Path, phase: str) -> list[str]:
    """Files a failed stage must not leave: its outputs and any temporary file."""
    found = [p for p in (d / "artifacts" / phase).glob("*")] if (d / "artifacts" / phase).exists() else []
    m = d / "metrics" / f"{phase}.json"
    found += [m] if m.exists() else []
    if (d / "metrics").is_dir():
        found += [p for p in (d / "metrics").rglob(".*") if p.is_file()]
    return [str(p.relative_to(d)) for p in found]


@pytest.fixture
def repo(tmp_path):
    return copy_repo(tmp_path / "t")


def edit(d: Path, fn) -> None:
    p = yaml.safe_load((d / "params.yaml").read_text())
    fn(p)
    (d / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))


@pytest.mark.parametrize("change, names", [
    (lambda p: p.update(bogus=1), ["'bogus'"]),                                    # unknown top-level key
    (lambda p: p["policy"].update(exchange_tabel_cap=1), ["exchange_tabel_cap"]),   # typo in a group
    (lambda p: p["executor"].update(nodes=3), ["nodes"]),
    (lambda p: p["policy"].update(exchange_table_cap=-1), ["policy.exchange_table_cap"]),   # invalid value
    (lambda p: p["executor"].update(workers="many"), ["executor.workers"]),
    (lambda p: p["executor"].update(kind="gpu"), ["executor.kind"]),
])
def test_bad_params_every_stage_fails_before_writing(repo, change, names):
    edit(repo, change)
    for phase in ("model", "plan"):
        one_line_error(run(repo, "pipeline", phase), *names)
        assert leftovers(repo, phase) == []


def test_invalid_model_value_names_the_key(repo):
    edit(repo, lambda p: p["model"].update(m=0))
    one_line_error(run(repo, "pipeline", "model"), "model.m")
    assert leftovers(repo, "model") == []


@pytest.mark.parametrize("text", ["model: [unclosed\n", "just a string\n", ""])
def test_corrupt_params_yaml(repo, text):
    (repo / "params.yaml").write_text(text)
    one_line_error(run(repo, "pipeline", "model"), "params.yaml")
    assert leftovers(repo, "model") == []


def test_missing_and_corrupt_upstream_artifact(repo):
    one_line_error(run(repo, "pipeline", "plan"), "artifacts/model/result.npz")
    assert leftovers(repo, "plan") == []
    (repo / "artifacts" / "model").mkdir(parents=True)
    (repo / "artifacts" / "model" / "result.npz").write_bytes(b"\x80\x04truncated")
    one_line_error(run(repo, "pipeline", "plan"), "artifacts/model/result.npz")
    assert leftovers(repo, "plan") == []


def test_unwritable_store_path(repo):
    edit(repo, lambda p: p.update(store="params.yaml/store"))    # under a regular file: never writable
    one_line_error(run(repo, "pipeline", "model"), "store", "params.yaml/store")
    assert leftovers(repo, "model") == []


def test_unwritable_output_leaves_nothing(repo):
    (repo / "metrics").write_text("a file where the metrics directory should be\n")
    one_line_error(run(repo, "pipeline", "model"), "metrics")
    assert leftovers(repo, "model") == []                         # result.npz was written, then removed
    assert not [p for p in (repo / "artifacts" / "model").glob(".*")]


def test_trial_entry_point_overrides(repo):
    out = repo / "trial-out"
    hydra_dirs = [f"hydra.run.dir={out}", f"hydra.sweep.dir={out}"]
    for ovr, names in [("model.bogus=3", ["'model.bogus'"]), ("bogus=1", ["'bogus'"]),
                       ("target=nope", ["target/nope"]), ("model.m=abc", ["model.m"]),
                       ("executor.workers=0", ["executor.workers"]),
                       ("store=params.yaml/x", ["params.yaml/x"])]:
        one_line_error(run(repo, "pipeline.trial", ovr, *hydra_dirs), *names)
        assert not out.exists(), ovr                              # no partial trial directory
