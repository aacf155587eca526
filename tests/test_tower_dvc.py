"""Weights and input files are DVC dependencies of the model stage by content:
replacing the weights file at the same path (params unchanged) reruns the model
stage; an unchanged file lets DVC skip it."""
import numpy as np
import yaml

from compiler.models import vit
from test_dvc import ran, repo, sh  # noqa: F401 (fixture)
from test_tower import SIGLIP


def _write_weights(path, seed):
    c = vit.VitConfig(**SIGLIP)
    d = c.dims()
    shapes = vit.block_shapes(c.layers, d["width"], d["hidden"]) | vit.tower_shapes(d, c.classes)
    np.savez(path, **vit.seeded_weights(np.random.default_rng(seed), 0, 0, 0, shapes))


def test_replacing_weights_in_place_reruns_model(repo):  # noqa: F811
    p = yaml.safe_load((repo / "params.yaml").read_text())
    p["model"] = dict(SIGLIP, weights="w.npz", input="", seed=0, scope="tower")
    (repo / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    _write_weights(repo / "w.npz", 1)
    first = sh("dvc repro model", repo)
    assert "model" in ran(first.stdout + first.stderr)
    again = sh("dvc repro model", repo)
    assert "model" not in ran(again.stdout + again.stderr)
    _write_weights(repo / "w.npz", 2)                  # same path, same params, new content
    third = sh("dvc repro model", repo)
    assert "model" in ran(third.stdout + third.stderr)
