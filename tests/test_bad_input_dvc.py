"""Issue #30 item 3 as the issue ran it, under DVC: `dvc exp run -S model.input=corrupt.png`
(a truncated or missing image, `model.layers=100000`, `model.image=100000`, `model.seed=-1`,
`model.layers=3` with a 4-layer weights file) fails in the `config` stage with one
`error: ...` line naming the key, before DVC deletes any other stage's outputs: every
previous output stays byte for byte (artifacts/model/result.npz, metrics/model.json
included). A file replaced at the same path (no param changes, so `config` is skipped) is
caught by the `inputs` stage, which runs every time, before the model stage."""
import numpy as np
import pytest
import yaml

from test_config_checks import TINY, weights
from test_dvc import dvc_repo, outputs, sh

VIT = "-S model=vit " + " ".join(f"-S model.{k}={v}" for k, v in TINY.items())


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    from PIL import Image
    d = dvc_repo(tmp_path_factory.mktemp("baddvc") / "trial")
    sh("dvc repro", d)
    sh("git add -A && git commit -qm trial", d)
    rng = np.random.default_rng(2)
    Image.fromarray(rng.integers(0, 256, (60, 60, 3), dtype=np.uint8)).save(d / "good.png")
    png = (d / "good.png").read_bytes()
    (d / "truncated.png").write_bytes(png[:len(png) // 2])
    (d / "corrupt.png").write_text("not an image\n")
    (d / "w").mkdir()
    weights(d / "w")                                  # w/w40.npz: the tiny tower's 4 layers
    return d


CASES = [   # (-S overrides, what the one error line names)
    ("-S model=vit -S model.input=corrupt.png", "model.input=corrupt.png: unreadable image"),
    ("-S model=vit -S model.input=truncated.png", "model.input=truncated.png: unreadable image"),
    ("-S model=vit -S model.input=missing.png", "model.input=missing.png: no such file"),
    ("-S model=vit -S model.layers=100000", "model.layers=100000"),
    ("-S model=vit -S model.image=100000", "model.image=100000"),
    ("-S model=vit -S model.seed=-1", "model.seed=-1"),
    (f"{VIT} -S model.layers=3 -S model.weights=w/w40.npz", "would leave block 3 unused"),
]


@pytest.mark.parametrize("ovr, names", CASES, ids=[n.split(":")[0].split(" ")[0] for _, n in CASES])
def test_exp_run_stops_at_config_and_keeps_every_output(repo, ovr, names):
    before = outputs(repo)
    assert "artifacts/model/result.npz" in before and "metrics/model.json" in before
    try:
        r = sh(f"dvc exp run {ovr}", repo, check=False)
        assert r.returncode != 0
        assert "Running stage 'config'" in r.stdout and "Running stage 'model'" not in r.stdout, r.stdout
        errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
        assert len(errors) == 1 and names in errors[0], r.stderr
        assert outputs(repo) == before                       # nothing deleted, nothing rewritten
    finally:
        sh("git checkout params.yaml", repo)


def test_a_file_replaced_at_the_same_path_stops_at_the_inputs_stage(repo):
    """params.yaml unchanged, the file behind model.input replaced by a corrupt one: `config`
    would be skipped by DVC, `inputs` (always run, before `model`) refuses it."""
    good = (repo / "params.yaml").read_text()
    p = yaml.safe_load(good)
    from pipeline.config import compose
    p["model"] = compose(["model=vit"] + [f"model.{k}={v}" for k, v in TINY.items()])["model"] | {"input": "img.png"}
    try:
        (repo / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
        (repo / "img.png").write_bytes((repo / "good.png").read_bytes())
        assert sh("python -m pipeline.inputs", repo, check=False).returncode == 0
        (repo / "img.png").write_bytes((repo / "truncated.png").read_bytes())
        r = sh("python -m pipeline.inputs", repo, check=False)
        assert r.returncode == 2 and r.stderr.startswith("error: model.input=img.png: unreadable image"), r.stderr
    finally:
        (repo / "params.yaml").write_text(good)
        (repo / "img.png").unlink()
