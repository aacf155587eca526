"""`python -m pipeline.trial` as README and --help give it (issue #30 items 4 and 6):
`--cfg job` prints every key (Hydra's flag values are not overrides); a trial writes its
outputs (the embedding, device and reference) beside summary.json and profile.html and no
empty log; an exporter's .npz (Hugging Face's `pixel_values`, or the one float array of the
input's shape among others) is an input. No module of pipeline/ imports one that imports
it back."""
import ast
import json

import numpy as np
import pytest
import yaml

from conftest import REPO
from pipeline.trial import table
from test_bad_input import one_line_error, run
from test_dvc import copy_repo

TOWER = ["model=vit", "target=tiny", "model.preset=custom", "model.width=64", "model.hidden=172", "model.heads=2",
         "model.image=56", "model.patch=14", "model.layers=2"]


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return copy_repo(tmp_path_factory.mktemp("trialcli") / "t")


@pytest.mark.parametrize("args", [["--cfg", "job"], ["--cfg", "job", "model.m=48"], ["-c", "job"],
                                  ["model=gemm", "--cfg", "job", "--resolve"]])
def test_cfg_job_prints_every_key(repo, args):
    r = run(repo, "pipeline.trial", *args)
    assert r.returncode == 0, r.stderr
    cfg = yaml.safe_load(r.stdout)
    assert set(cfg) >= {"model", "target", "policy", "executor", "store"}
    if "model.m=48" in args:
        assert cfg["model"]["m"] == 48
    assert not (repo / "artifacts").exists()


def test_cfg_job_still_checks_the_overrides(repo):
    one_line_error(run(repo, "pipeline.trial", "--cfg", "job", "model.layerz=3"), "model.layerz")


def test_trial_writes_its_outputs_and_an_exporters_npz_is_an_input(repo, tmp_path):
    pix = np.random.default_rng(0).uniform(-1, 1, (1, 3, 56, 56)).astype(np.float32)
    np.savez(tmp_path / "hf.npz", pixel_values=pix, input_ids=np.arange(4))
    out = tmp_path / "trial"
    r = run(repo, "pipeline.trial", *TOWER, f"model.input={tmp_path / 'hf.npz'}", f"hydra.run.dir={out}")
    assert r.returncode == 0, r.stderr
    assert f"outputs: {out / 'output.npz'}" in r.stdout
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == \
        ["host", "output.npz", "profile.html", "summary.json"]            # no empty trial.log
    with np.load(out / "output.npz", allow_pickle=False) as z:
        assert {"embedding", "features", "reference/embedding", "reference/features"} <= set(z.files)
        emb, ref = z["embedding"], z["reference/embedding"]
    assert emb.shape == (1, 64) and np.isfinite(emb).all()
    s = json.loads((out / "summary.json").read_text())
    assert s["status"] == "ok" and np.abs(emb - ref).max() <= s["run"]["tolerance"]
    head, _, row = table([("tower", s)]).splitlines()   # a multirun's row shows the tower's images/s and latency
    cells = dict(zip(head.split(" | "), row.split(" | ")))
    assert s["run"]["images_per_s"] > 0 and cells["images/s"] == f"{s['run']['images_per_s']:.3g}"
    assert s["run"]["latency_ms"] > 0 and cells["latency ms"] == f"{s['run']['latency_ms']:.3g}"


def _imports(path) -> set[str]:
    mods = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = "pipeline" if node.level == 1 else (node.module or "").split(".")[0]
            name = f"pipeline.{node.module}" if node.level == 1 and node.module else (node.module or "")
            if node.level == 1 and not node.module:
                mods |= {f"pipeline.{a.name}" for a in node.names}
            elif base == "pipeline":
                mods.add(name)
        elif isinstance(node, ast.Import):
            mods |= {a.name for a in node.names if a.name.startswith("pipeline")}
    return mods


def test_no_import_loop_in_pipeline():
    """pipeline.config <-> pipeline.trial was one (config's `validate` CLI imported trial's
    override check): no module imports, at any depth, one that imports it back."""
    graph = {f"pipeline.{p.stem}": _imports(p) for p in (REPO / "pipeline").glob("*.py")}

    def reach(m, seen):
        for n in graph.get(m, ()):
            if n not in seen:
                seen.add(n)
                reach(n, seen)
        return seen

    loops = [m for m in graph if m in reach(m, set())]
    assert not loops, loops
