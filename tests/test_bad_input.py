"""Bad input is a one-line `error: ...` naming the culprit, exit 2, and costs nothing: every
key and value is checked before any output is touched, so the previous outputs of the stage
stay byte for byte (unknown key, invalid value, truncated or corrupt params.yaml, a missing
weights file); a missing upstream artifact, an unwritable store or output directory leave no
half-written set. For the stage CLI (`python -m pipeline config|<phase>`, what dvc runs) and
the in-process `python -m pipeline.trial` (single runs and --multirun, the flag either side)."""
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from compiler.phases import PHASES  # the stages in order
from test_dvc import copy_repo


def run(d: Path, *args):
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    return subprocess.run([sys.executable, "-m", *args], cwd=d, env=env, capture_output=True, text=True)


def one_line_error(r, *names):
    assert r.returncode == 2, (r.returncode, r.stderr)
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


def outputs(d: Path) -> dict:
    """sha256 of every file under artifacts/ and metrics/ (host timings aside: rewritten by design)."""
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
            for top in ("artifacts", "metrics") for p in sorted((d / top).rglob("*"))
            if p.is_file() and "host" not in p.relative_to(d).parts}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A copy with the model and plan stages run once: the previous results to keep."""
    d = copy_repo(tmp_path_factory.mktemp("bad") / "t")
    for phase in ("config", "model", "plan"):
        r = run(d, "pipeline", phase)
        assert r.returncode == 0, r.stderr
    return d


@pytest.fixture
def repo(tmp_path):
    return copy_repo(tmp_path / "t")


def edit(d: Path, fn) -> None:
    p = yaml.safe_load((d / "params.yaml").read_text())
    fn(p)
    (d / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))


def vit(**kw):
    """params.yaml's model group as `-S model=vit` composes it, with kw set."""
    from pipeline.config import compose
    return lambda p: p.update(model=compose(["model=vit"])["model"] | kw)


BAD = [   # (change to params.yaml, what the one line must name)
    (lambda p: p.update(bogus=1), ["'bogus'"]),                                    # unknown top-level key
    (lambda p: p["policy"].update(exchange_tabel_cap=1), ["exchange_tabel_cap"]),   # typo in a group
    (lambda p: p["executor"].update(nodes=3), ["nodes"]),
    (lambda p: p["model"].update(layerz=3), ["model.layerz"]),                    # -S +model.layerz=3
    (lambda p: p["policy"].update(exchange_table_cap=-1), ["policy.exchange_table_cap"]),   # invalid value
    (lambda p: p["executor"].update(workers="many"), ["executor.workers"]),
    (lambda p: p["executor"].update(kind="gpu"), ["executor.kind"]),
    (lambda p: p["model"].update(m=0), ["model.m"]),
    (lambda p: p["model"].update(name="nope"), ["model.name"]),
    (vit(layers=-1), ["model.layers"]),                                            # -S model.layers=-1
    (vit(weights="/nonexistent.npz"), ["model.weights", "/nonexistent.npz"]),
    (lambda p: p.pop("policy"), ["'policy'"]),                                     # truncated params.yaml
]


@pytest.mark.parametrize("change, names", BAD)
def test_bad_params_fail_before_touching_outputs(built, change, names):
    good = (built / "params.yaml").read_text()
    before = outputs(built)
    try:
        edit(built, change)
        for phase in ("config", "model"):
            one_line_error(run(built, "pipeline", phase), *names)
        assert outputs(built) == before            # the previous results, byte for byte
    finally:
        (built / "params.yaml").write_text(good)


@pytest.mark.parametrize("text", ["model: [unclosed\n", "just a string\n", "", "model:\n  name: gemm\n  m: 3"])
def test_corrupt_params_yaml(built, text):
    good = (built / "params.yaml").read_text()
    before = outputs(built)
    try:
        (built / "params.yaml").write_text(text)
        for phase in ("config", "model"):
            one_line_error(run(built, "pipeline", phase), "params.yaml")
        assert outputs(built) == before
    finally:
        (built / "params.yaml").write_text(good)


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


TRIAL_BAD = [   # (overrides, what the one line must name)
    (["model.bogus=3"], ["'model.bogus'"]), (["bogus=1"], ["'bogus'"]),
    (["model.layerz=3"], ["'model.layerz'"]), (["target=nope"], ["target/nope"]),
    (["model.layers=-1"], ["model.layers"]), (["model.weights=/nonexistent.npz"], ["model.weights"]),
    (["model=gemm", "model.m=abc"], ["model.m"]), (["executor.workers=0"], ["executor.workers"]),
    (["model=gemm", "target=tiny", "store=params.yaml/x"], ["params.yaml/x"]),
    (["model=gemm", "model.m=32,64"], ["--multirun"]),                     # a sweep without --multirun
    (["model=gemm", "target=tiny", "model.m=32,0", "--multirun"], ["model.m=0"]),   # every point checked
    (["--multirun", "model=gemm", "target=tiny", "model.m=32,64", "model.k=-1"], ["model.k"]),
    (["model=gemm", "target=tiny", "--multirun", "model.m=32,64", "store=params.yaml/x"], ["params.yaml/x"]),
]


@pytest.mark.parametrize("ovr, names", TRIAL_BAD)
def test_trial_entry_point_overrides(repo, ovr, names):
    one_line_error(run(repo, "pipeline.trial", *ovr), *names)
    assert not (repo / "artifacts").exists(), ovr        # no partial trial directory, no empty artifacts/trials
