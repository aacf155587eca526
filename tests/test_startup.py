"""What a stage process imports before its phase (experiments/host_time/README.md, issue #26):
the config check of a stage that reads only artifacts imports neither ml_dtypes, numba,
compiler.exact nor scikit-image / scipy (the input photo is decoded by the config, inputs and
model stages only), yet still refuses a bad key; a file the keys name is checked where it
is read. numba's kernels load without its scipy.linalg probe (compiler/numba_probe.py).
Each check runs in a fresh interpreter: what is imported is the behaviour under test."""
import json
import subprocess
import sys

import pytest
import yaml

from helpers import REPO

HEAVY = ("ml_dtypes", "numba", "compiler.exact", "skimage", "scipy", "PIL")


def fresh(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def loaded_after(params: str, inputs: bool) -> dict:
    return fresh(f"""
import json, sys
from pipeline.config import load_params
from compiler.target import ConfigError
try:
    load_params({params!r}, inputs={inputs})
    err = None
except ConfigError as e:
    err = str(e)
print(json.dumps({{"loaded": [m for m in {HEAVY!r} if m in sys.modules], "error": err}}))""")


@pytest.fixture
def params(tmp_path):
    def write(**model):
        p = yaml.safe_load((REPO / "params.yaml").read_text())
        p["model"].update(model)
        f = tmp_path / "params.yaml"
        f.write_text(yaml.safe_dump(p, sort_keys=False))
        return str(f)
    return write


def test_a_stage_reading_artifacts_checks_the_config_without_the_heavy_imports(params):
    r = loaded_after(params(), inputs=False)
    assert r == {"loaded": [], "error": None}
    full = loaded_after(params(), inputs=True)        # the config and model stages: the photo decoded
    assert full["error"] is None and "skimage" in full["loaded"]


def test_a_bad_key_still_fails_every_stage_but_a_bad_file_only_where_it_is_read(params, tmp_path):
    assert "model.layers" in loaded_after(params(layers=-1), inputs=False)["error"]
    bad = tmp_path / "img.png"
    bad.write_bytes(b"not a png")
    p = params(input=str(bad))
    assert loaded_after(p, inputs=False)["error"] is None
    assert "model.input" in loaded_after(p, inputs=True)["error"]


def test_models_are_imported_when_built_or_checked():
    r = fresh("""
import json, sys
from compiler import models
before = [m for m in ("compiler.models.gemm", "compiler.models.vit", "ml_dtypes") if m in sys.modules]
models.check({"name": "gemm", "m": 64, "k": 64, "n": 64})
print(json.dumps({"before": before, "after": "compiler.models.gemm" in sys.modules,
                  "vit": "compiler.models.vit" in sys.modules, "names": list(models.MODELS)}))""")
    assert r["before"] == [] and r["after"] and not r["vit"]
    assert r["names"] == ["gemm", "mlp", "attention", "flash_attention", "vit"]


def test_kernels_load_without_the_scipy_linalg_probe():
    r = fresh("""
import json, sys
import numpy as np
from compiler import exact
x = exact.matmul_f32(np.ones((3, 4), np.float32), np.ones((4, 5), np.float32))
print(json.dumps({"sum": float(x.sum()), "linalg": "scipy.linalg" in sys.modules}))""")
    assert r == {"sum": 60.0, "linalg": False}
