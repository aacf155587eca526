"""The trial as DVC stages, driven end to end in a temporary git repository: the
default trial validates, a second repro is a no-op, and changing only
policy.exchange_table_cap reruns expand and what follows, never model or plan.
Also the stage CLI: bad input is a one-line error with a non-zero exit, a
rejection exits 0 with status rejected."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from compiler.phases import PHASES
from conftest import REPO

SMALL = {"model": "gemm", "target": "tiny"}
COPY = ["compiler", "pipeline", "conf", "dvc.yaml", "params.yaml", "pyproject.toml", ".dvcignore"]


def sh(cmd, cwd, check=True):
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, shell=isinstance(cmd, str))
    if check and r.returncode:
        raise AssertionError(f"{cmd} exited {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


def copy_repo(dst: Path) -> Path:
    # __pycache__ goes along: numba caches its compiled kernels there, and a copy's stages find
    # them (copytree keeps the sources' mtimes, which numba's index checks) instead of compiling
    # them again: the reference and run stages of a tiny trial 17 s -> 2 s
    for name in COPY:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dst / name)
        else:
            shutil.copy(src, dst / name)
    (dst / ".gitignore").write_text("/artifacts/\n/.tessera-store/\n__pycache__/\n/metrics/host/\n")
    # the suite's trials are small: the copy's default trial is the 32x64x64 GEMM on the tiny target
    conf = dst / "conf" / "config.yaml"
    text = conf.read_text()
    for group, option in SMALL.items():
        text = re.sub(rf"(\n  - {group}: )\S+", rf"\g<1>{option}", text)
    conf.write_text(text)
    from pipeline.config import compose, dump
    (dst / "params.yaml").write_text(dump(compose([f"{g}={o}" for g, o in SMALL.items()])))
    return dst


def dvc_repo(dst: Path) -> Path:
    """copy_repo(dst) as a git + DVC repository (Hydra composition on), everything committed."""
    d = copy_repo(dst)
    sh("git init -q -b main && dvc init -q && dvc config hydra.enabled True && dvc config core.autostage true"
       " && git add -A && git commit -qm init", d)
    return d


@pytest.fixture
def repo(tmp_path):
    return dvc_repo(tmp_path / "trial")


def ran(out: str) -> set[str]:
    """Stages that ran, besides `inputs` (it runs every time: it links the model's files
    for DVC to hash by content, pipeline/inputs.py)."""
    return set(re.findall(r"Running stage '(\w+)'", out)) - {"inputs"}


def metrics(d: Path, name: str) -> dict:
    return json.loads((d / "metrics" / f"{name}.json").read_text())


def test_exp_run_validates_noop_rerun_and_fine_grained_params(repo):
    r = sh("dvc exp run", repo)
    assert ran(r.stdout + r.stderr) == {"config", "attention", "family", *PHASES}   # pipeline/attention.py, family.py
    assert metrics(repo, "trial")["status"] == "ok"
    run = metrics(repo, "run")["run"]
    assert run["validated"] and run["max_abs_error"] <= run["tolerance"] and run["cycles"] > 0 and run["ms"] > 0
    again = sh("dvc repro", repo)
    assert ran(again.stdout + again.stderr) == set()
    assert "Stage 'model' didn't change, skipping" in again.stdout
    sh("git add -A && git commit -qm trial", repo)
    cap = sh("dvc exp run -S policy.exchange_table_cap=65536", repo)
    out = cap.stdout + cap.stderr
    assert yaml.safe_load((repo / "params.yaml").read_text())["policy"]["exchange_table_cap"] == 65536
    assert {"expand", "lower"} <= ran(out)
    assert not ran(out) & {"model", "plan"}             # the config stage reran; its out did not change
    assert metrics(repo, "trial")["status"] == "ok"


def outputs(d: Path) -> dict:
    """sha256 of every file under artifacts/ and metrics/ (host timings aside: rewritten by design)."""
    import hashlib
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
            for top in ("artifacts", "metrics") for p in sorted((d / top).rglob("*"))
            if p.is_file() and "host" not in p.relative_to(d).parts}


def test_bad_values_under_dvc_keep_results_and_a_clean_clone_stays_clean(repo, tmp_path):
    """The committed trial: a value Tessera rejects fails in the config stage before DVC deletes
    any outs; a key DVC's composition rejects runs nothing; `dvc metrics show metrics/trial.json`
    is one readable row; in a fresh clone an experiment, then README's way back, leave `git
    status` clean (host timings are not tracked, every tracked output is byte-identical)."""
    sh("dvc repro", repo)
    sh("git add -A && git commit -qm trial", repo)
    before = outputs(repo)
    for ovr, name in [("model.m=0", "model.m=0"), ("+model.layerz=3", "model.layerz")]:
        r = sh(f"dvc exp run -S {ovr}", repo, check=False)
        assert r.returncode != 0 and "Running stage 'model'" not in r.stdout, r.stdout
        assert [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")] == \
            [ln for ln in r.stderr.splitlines() if name in ln and ln.startswith("error: ")] != []
        assert outputs(repo) == before, ovr                  # the previous results, byte for byte
        sh("git checkout params.yaml", repo)                 # README's recovery
    for ovr, name in [("model.layerz=3", "layerz"), ("target=nope", "target/nope")]:
        r = sh(f"dvc exp run -S {ovr}", repo, check=False)   # DVC's own Hydra composition refuses it
        assert r.returncode != 0 and name in r.stderr and "Running stage" not in r.stdout
    assert sh("git status --porcelain", repo).stdout == ""
    assert outputs(repo) == before
    st = sh("dvc status", repo).stdout   # only the inputs stage, which hashes the input files anew each time
    assert "up to date" in st or st.split() == ["inputs:", "always", "changed"], st

    show = sh("dvc metrics show metrics/trial.json", repo).stdout.splitlines()
    assert len(show) == 2, show                            # one header, one row
    head, row = show[0].split(), show[1].split()
    assert head[:1] == ["Path"] and {"status", "cycles", "cycles_per_layer", "ms", "max_abs_error",
                                     "tolerance", "min_free_bytes"} == set(head[1:]), head
    assert len(row) == len(head) and "ok" in row and "-" not in row

    # a fresh clone, whose DVC cache never held the committed outputs: an experiment there
    # computes every stage, and README's way back (issue #24: `dvc checkout` failed there)
    # recomputes the ones it changed; then every tracked output is byte-identical to the
    # commit's (`git status` clean; host timings are not tracked)
    way_back = "git checkout -- params.yaml dvc.lock metrics && dvc repro"
    assert way_back in (REPO / "README.md").read_text()
    fresh = tmp_path / "fresh"
    sh(f"git clone -q {repo} {fresh}", tmp_path)
    sh("dvc exp run -S policy.exchange_table_cap=65536", fresh)
    assert sh("git status --porcelain", fresh).stdout != ""
    assert sh("git checkout -- params.yaml dvc.lock metrics && dvc checkout", fresh, check=False).returncode != 0
    sh(way_back, fresh)
    assert sh("git status --porcelain", fresh).stdout == ""
    assert outputs(fresh) == before
    host = sh("dvc metrics show -R metrics/host", fresh).stdout
    assert "metrics/host/run.json" in host and "elapsed_s" in host


def stage(d: Path, phase: str, check=False):
    return sh([sys.executable, "-m", "pipeline", phase], d, check=check)


def test_stage_errors_are_one_line_and_nonzero(tmp_path):
    d = copy_repo(tmp_path / "t")
    p = yaml.safe_load((d / "params.yaml").read_text())
    p["model"]["bogus"] = 3
    (d / "params.yaml").write_text(yaml.safe_dump(p))
    r = stage(d, "model")
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "model.bogus" in r.stderr
    p["model"].pop("bogus")
    p["model"]["k"] = -64
    (d / "params.yaml").write_text(yaml.safe_dump(p))
    r = stage(d, "model")
    assert r.returncode == 2 and "model.k" in r.stderr and r.stderr.strip().count("\n") == 0
    (d / "params.yaml").write_text("model: [unclosed\n")
    r = stage(d, "plan")
    assert r.returncode == 2 and "params.yaml" in r.stderr
    p["model"]["k"] = 64
    (d / "params.yaml").write_text(yaml.safe_dump(p))
    r = stage(d, "plan")                                  # no model artifact yet
    assert r.returncode == 2 and "artifacts/model/result.npz" in r.stderr
    assert not (d / "artifacts" / "plan" / "result.npz").exists()


def test_rejection_is_data_exit_zero(tmp_path):
    d = copy_repo(tmp_path / "t")
    p = yaml.safe_load((d / "params.yaml").read_text())
    p["model"].update(m=2048, k=2048, n=2048)
    (d / "params.yaml").write_text(yaml.safe_dump(p))
    for phase in PHASES:
        assert stage(d, phase).returncode == 0, phase
    t = metrics(d, "trial")
    assert t["status"] == "rejected"
    assert t["rejected"]["phase"] == "plan" and t["rejected"]["deficit_bytes"] > 0
    assert metrics(d, "run")["run"]["validated"] is False


def committed(name: str) -> str:
    """The committed text of a tracked file (`git show HEAD:name`), never the workspace's:
    `dvc exp apply` or a failed `dvc exp run` rewrites params.yaml, dvc.lock and metrics/ in
    the workspace, which are then an experiment's, not the truth a test holds the code to.
    Outside a git checkout (an unpacked source tree) the file as it is."""
    r = subprocess.run(["git", "show", f"HEAD:{name}"], cwd=REPO, capture_output=True, text=True)
    return r.stdout if r.returncode == 0 else (REPO / name).read_text()


def test_params_yaml_is_the_composition_of_conf():
    from pipeline.config import compose
    assert yaml.safe_load(committed("params.yaml")) == compose()


def test_every_config_key_is_declared_by_a_stage():
    """A key no stage declares would not rerun anything when changed."""
    from dataclasses import fields

    from compiler.policy import Policy
    declared = {p for st in yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"].values()
                for p in st.get("params", [])}
    for f in fields(Policy):
        assert {"policy", f"policy.{f.name}"} & declared, f"policy.{f.name} is read but no stage declares it"
    assert {"model", "target"} <= declared


def test_the_stage_harness_reaches_every_stage_through_config(tmp_path):
    """Each harness file is a dep of `config` alone, every other stage depends on config's
    output, and that output changes with any harness file's bytes (so editing one reruns
    every stage, as a dep of each would)."""
    import shutil

    from pipeline.config import HARNESS, checked_text
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    assert set(HARNESS) <= set(stages["config"]["deps"])
    for name, st in stages.items():
        if name != "config":
            assert "artifacts/config/checked" in st["deps"], name
            assert not set(HARNESS) & set(st["deps"]), f"{name} lists harness files: drop them"
    root = tmp_path / "checkout"
    for p in HARNESS:
        (root / p).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / p, root / p)
    assert checked_text(root) == checked_text()
    for p in (HARNESS[0], HARNESS[-1]):
        before = checked_text(root)
        (root / p).write_bytes((root / p).read_bytes() + b"\n# edited\n")
        assert checked_text(root) != before, p
