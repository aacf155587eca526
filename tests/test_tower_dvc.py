"""Weights and input files are DVC dependencies of the model stage by content:
replacing the weights file at the same path (params unchanged) reruns the model
stage; an unchanged file lets DVC skip it."""
import numpy as np
import yaml

from compiler.models import vit_config, vit_weights
from test_dvc import ran, repo, sh  # noqa: F401 (fixture)
from test_tower import SIGLIP


def _write_weights(path, seed):
    c = vit_config.VitConfig(**SIGLIP)
    d = c.dims()
    shapes = vit_weights.block_shapes(c.layers, d["width"], d["hidden"]) | vit_weights.tower_shapes(d, c.classes)
    np.savez(path, **vit_weights.seeded_weights(np.random.default_rng(seed), 0, 0, 0, shapes).state_dict())


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


def test_bad_image_is_one_line_error_without_outputs(tmp_path):
    """The stage CLI (what dvc runs): a truncated PNG, a wrong-shaped pixel array, a
    checkpoint missing pos_embed: `error: ...` naming the file or tensor, exit 2, and
    none of the model stage's outputs left behind."""
    from test_bad_input import leftovers, one_line_error, run
    from test_dvc import copy_repo
    d = copy_repo(tmp_path / "t")
    (d / "trunc.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 20)
    np.save(d / "bad.npy", np.zeros((3, 50, 50), np.float32))
    _write_weights(d / "w.npz", 1)
    w = dict(np.load(d / "w.npz"))
    w.pop("pos_embed")
    np.savez(d / "nopos.npz", **w)
    for over, name in (({"input": "trunc.png"}, "trunc.png"), ({"input": "bad.npy"}, "bad.npy"),
                       ({"weights": "nopos.npz"}, "pos_embed")):
        p = yaml.safe_load((d / "params.yaml").read_text())
        p["model"] = {**SIGLIP, "scope": "tower", "weights": "", "input": "", "seed": 0, **over}
        (d / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
        r = run(d, "pipeline", "model")
        assert r.returncode == 2
        one_line_error(r, name)
        assert leftovers(d, "model") == []
