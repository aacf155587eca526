"""Multi-op models compiled through every phase on the tiny target and validated on
the simulator against the numpy reference; cycles measured = cycles predicted."""
import numpy as np
import pytest

from compiler.phases import compile_trial
from compiler.target import ConfigError
from helpers import target_cfg

MODELS = {
    "mlp-tanh": dict(name="mlp", tokens=24, width=32, hidden=64),
    "mlp-erf-f16": dict(name="mlp", tokens=10, width=16, hidden=48, gelu="erf", weight_dtype="f16"),
    "mlp-repeat3": dict(name="mlp", tokens=8, width=16, hidden=32, repeat=3),
    "mlp-b2-repeat3": dict(name="mlp", tokens=12, batch=2, width=16, hidden=32, repeat=3, weight_dtype="f16"),
    "attention": dict(name="attention", tokens=16, heads=2, head_dim=16),
    "attention-odd-tokens": dict(name="attention", tokens=15, heads=2, head_dim=16),
    "flash-attention": dict(name="flash_attention", tokens=15, heads=2, head_dim=16, block=4),
    "vit-2-layers": dict(name="vit", preset="custom", width=32, hidden=64, heads=2, tokens=16, layers=2),
    "vit-odd-tokens": dict(name="vit", preset="custom", width=32, hidden=64, heads=4, tokens=13, layers=1),
    "vit-fp8-activations": dict(name="vit", preset="custom", width=32, hidden=64, heads=2, tokens=15, layers=2,
                                fp8_activations=True),
}


def trial(model, policy=None):
    return compile_trial(dict(model=model, target=target_cfg("tiny"), policy=policy or {}))


@pytest.mark.parametrize("name", list(MODELS))
def test_model_validates(name):
    r = trial(MODELS[name])
    assert r["report"].summary["status"] == "ok", (r["report"].summary, r["run"].metrics())
    tg = r["place"].tilegraph
    assert r["run"].cycles_per_step == [int(c) for c in tg.analysis["step_cycles"]] * tg.count
    assert r["run"].cycles == tg.analysis["cycles"]


def _timm_file(tmp_path, drop=None, bad=None):
    from compiler.models.vit_weights import seeded_weights
    w = seeded_weights(np.random.default_rng(1), 1, 32, 64).state_dict()
    if drop:
        w.pop(drop)
    if bad:
        w[bad] = np.zeros((3, 3))
    p = tmp_path / "w.npz"
    np.savez(p, **{k: v.astype(np.float32) for k, v in w.items()})
    return str(p)


def test_vit_imports_timm_weights(tmp_path):
    m = dict(MODELS["vit-2-layers"], layers=1, weights=_timm_file(tmp_path))
    assert trial(m)["run"].validated


@pytest.mark.parametrize("drop,bad,match", [("blocks.0.mlp.fc1.weight", None, "missing tensor blocks.0.mlp.fc1.weight"),
                                            (None, "blocks.0.attn.proj.weight", "blocks.0.attn.proj.weight has shape")])
def test_bad_weight_file_names_the_tensor(tmp_path, drop, bad, match):
    m = dict(MODELS["vit-2-layers"], layers=1, weights=_timm_file(tmp_path, drop, bad))
    with pytest.raises(ConfigError, match=match):
        trial(m)
