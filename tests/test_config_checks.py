"""The config check stops bad input before any stage writes (issue #30 item 3): images are
decoded, a weights file's tensor names, shapes and dtypes are read from its headers and held
against the preset and depth (missing or extra blocks named), sizes are held against a
host-memory estimate, the seed's range is checked. Each case is one line naming the key,
exit 2, from `python -m pipeline.config validate` (what the issue ran) and from
`validate()` in-process; the good files of each kind pass."""
import zipfile

import numpy as np
import pytest

from compiler.models import precheck, vit_config, vit_weights
from compiler.target import ConfigError
from pipeline.config import compose, validate
from test_bad_input import one_line_error, run
from conftest import REPO

# the tiny SigLIP-like tower of tests/test_tower.py, 4 layers
TINY = dict(preset="custom", width=64, hidden=172, heads=2, image=56, patch=14, layers=4)


def overrides(**kw) -> list[str]:
    """The tiny tower with kw; with so400m=True, the default trial's So400m tower (as the issue ran it)."""
    base = {} if kw.pop("so400m", False) else TINY
    return ["model=vit", "target=tiny"] + [f"model.{k}={v}" for k, v in (base | kw).items()]


def cfg(**kw) -> dict:
    return compose(overrides(**kw))


def weights(path, layers=4, drop=None, extra=None, fmt="npz", dtype=None):
    c = vit_config.VitConfig(**(TINY | dict(layers=layers)))
    d = c.dims()
    shapes = vit_weights.block_shapes(layers, d["width"], d["hidden"]) | vit_weights.tower_shapes(d, c.classes)
    w = vit_weights.seeded_weights(3, 0, 0, 0, shapes).state_dict()
    if drop:
        w.pop(drop)
    w |= extra or {}
    if dtype:
        w = {k: v.astype(dtype) for k, v in w.items()}
    p = path / f"w{layers}{drop or ''}{dtype.__name__ if dtype else ''}{len(extra or ())}.{fmt}"
    if fmt == "npz":
        np.savez(p, **w)
    else:
        from safetensors.numpy import save_file
        save_file(w, str(p))
    return str(p)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from PIL import Image
    d = tmp_path_factory.mktemp("inputs")
    rng = np.random.default_rng(1)
    Image.fromarray(rng.integers(0, 256, (70, 60, 3), dtype=np.uint8)).save(d / "good.png")
    png = (d / "good.png").read_bytes()
    (d / "truncated.png").write_bytes(png[:len(png) // 2])
    (d / "corrupt.png").write_text("not an image\n")
    pix = rng.standard_normal((3, 56, 56)).astype(np.float32)
    np.savez(d / "hf.npz", pixel_values=pix[None], input_ids=np.arange(5))     # a Hugging Face processor's export
    np.savez(d / "export.npz", x=pix, labels=np.arange(3))                      # one float array of the right shape
    np.savez(d / "two.npz", a=pix, b=pix)                                       # ambiguous
    np.save(d / "wrong.npy", rng.standard_normal((3, 32, 32)).astype(np.float32))
    w4 = weights(d)
    raw = open(w4, "rb").read()
    (d / "w4-truncated.npz").write_bytes(raw[:len(raw) - 5000])
    st = weights(d, fmt="safetensors")
    raw = open(st, "rb").read()
    (d / "w4-truncated.safetensors").write_bytes(raw[:len(raw) - 100])
    return dict(dir=d, w4=w4, st=st, w3=weights(d, layers=3), nopos=weights(d, drop="pos_embed"),
                badshape=weights(d, layers=4, extra={"blocks.1.mlp.fc1.weight": np.zeros((8, 64), np.float32)},
                                 fmt="safetensors"),
                ints=weights(d, layers=4, dtype=np.int32))


# (overrides of TINY, what the one line must name); "{d}" is the files' directory, "{w4}" etc. a file
BAD = [
    (dict(input="{d}/missing.png"), ["model.input=", "missing.png", "no such file"]),
    (dict(input="{d}/truncated.png"), ["model.input=", "truncated.png", "unreadable image"]),
    (dict(input="{d}/corrupt.png"), ["model.input=", "corrupt.png", "unreadable image"]),
    (dict(input="{d}/two.npz"), ["model.input=", "two.npz", "a (3, 56, 56), b (3, 56, 56)"]),
    (dict(input="{d}/wrong.npy"), ["model.input=", "wrong.npy", "(3, 32, 32)"]),
    (dict(input="photo:nope"), ["photo:nope", "not a bundled photo"]),
    (dict(layers=3, weights="{w4}"), ["model.weights=", "blocks 0-3 (4 layers)", "model.layers=3", "block 3 unused"]),
    (dict(layers=5, weights="{w4}"), ["model.weights=", "model.layers=5", "block 4 missing"]),
    (dict(weights="{w3}"), ["model.weights=", "blocks 0-2 (3 layers)", "block 3 missing"]),
    (dict(weights="{nopos}"), ["model.weights=", "missing tensor pos_embed"]),
    (dict(weights="{badshape}"), ["model.weights=", "blocks.1.mlp.fc1.weight has shape (8, 64)"]),
    (dict(weights="{ints}"), ["model.weights=", "is int32, expected a float"]),
    (dict(weights="{d}/w4-truncated.npz"), ["model.weights=", "w4-truncated.npz"]),
    (dict(weights="{d}/w4-truncated.safetensors"), ["model.weights=", "w4-truncated.safetensors", "truncated"]),
    (dict(so400m=True, layers=100000), ["model.layers=100000", "host memory", "available"]),
    (dict(so400m=True, image=100000), ["model.image=100000", "host memory", "available"]),
    (dict(so400m=True, batch=100000), ["model.batch=100000", "host memory", "available"]),
    (dict(so400m=True, seed=-1), ["model.seed=-1"]),
]
GOOD = [dict(input="{d}/good.png"), dict(input="{d}/hf.npz"), dict(input="{d}/export.npz"),
        dict(input="photo:astronaut"), dict(weights="{w4}"), dict(weights="{st}"), dict(so400m=True, layers=27),
        dict(seed=2 ** 40)]


def fill(kw: dict, files: dict) -> dict:
    return {k: v.format(d=files["dir"], **files) if isinstance(v, str) else v for k, v in kw.items()}


def ident(kw: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in kw.items() if k != "so400m").replace("{", "").replace("}", "")


@pytest.mark.parametrize("kw, names", BAD, ids=[ident(kw) for kw, _ in BAD])
def test_bad_input_is_one_line_in_process(files, kw, names):
    with pytest.raises(ConfigError) as e:
        validate(cfg(**fill(kw, files)), "overrides")
    msg = str(e.value)
    assert "\n" not in msg
    for n in names:
        assert n in msg, (n, msg)


@pytest.mark.parametrize("kw", GOOD, ids=[ident(kw) for kw in GOOD])
def test_good_input_passes(files, kw):
    validate(cfg(**fill(kw, files)), "overrides")


@pytest.mark.parametrize("kw, names", [BAD[2], BAD[1], BAD[6], BAD[14], BAD[15], BAD[17]],
                         ids=["corrupt", "truncated", "extra-block", "layers", "image", "seed"])
def test_config_validate_cli(files, tmp_path, kw, names):
    """As the issue ran it: `python -m pipeline.config validate <overrides>`."""
    ovr = overrides(**fill(kw, files))
    one_line_error(run(REPO, "pipeline.config", "validate", *ovr), *names)


def test_memory_estimate_grows_with_the_sizes_and_counts_the_27_layer_tower_below_its_peak():
    small = sum(precheck.host_bytes(compose(["model=vit"])["model"])[1].values())
    deep = sum(precheck.host_bytes(compose(["model=vit", "model.layers=27"])["model"])[1].values())
    assert small < deep < 1.3 * 2 ** 30          # a lower estimate: the 27-layer stages peak at 1.3 GiB (docs/results.md)
    keys, parts = precheck.host_bytes(compose(["model=vit", "model.layers=100000"])["model"])
    assert "model.layers=100000" in keys and parts["parameters"] > 1.5e12     # 15.2 M FP8 bytes per layer
    for m in (["model=gemm", "model.m=1000000", "model.k=1000000"], ["model=mlp", "model.repeat=100000"],
              ["model=attention", "model.tokens=1000000"]):
        assert sum(precheck.host_bytes(compose(m)["model"])[1].values()) > 1e12, m


@pytest.mark.parametrize("model", [overrides(), overrides(layers=1, image=112, batch=2, input="[photo:rocket,photo:coins]"),
                                   ["model=gemm", "model.m=256", "model.k=512", "model.n=256"],
                                   ["model=mlp", "model.tokens=64", "model.width=256", "model.hidden=512", "model.repeat=3"],
                                   ["model=attention", "model.tokens=256"]],
                         ids=["tower", "tower-b2", "gemm", "mlp", "attention"])
def test_memory_estimate_is_below_what_the_phases_allocate(model):
    """Lower, so it refuses only what cannot run: the estimate against the peak of numpy's
    allocations (tracemalloc) while the model and reference phases run in-process."""
    import tracemalloc
    from compiler.phases import model_phase, reference_phase
    c = compose(model)
    est = sum(precheck.host_bytes(c["model"])[1].values())
    tracemalloc.start()
    try:
        reference_phase(model_phase(c))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert 0 < est <= peak, (est, peak)


def test_headers_only(files, monkeypatch):
    """The weights check reads headers, never the data: np.load and safetensors' loader are
    not called, and a file whose data bytes are garbage (intact headers) passes it."""
    import safetensors.numpy
    monkeypatch.setattr(np, "load", lambda *a, **k: pytest.fail("np.load called"))
    monkeypatch.setattr(safetensors.numpy, "load_file", lambda *a, **k: pytest.fail("load_file called"))
    precheck.check_weights(cfg(weights=files["w4"])["model"])
    precheck.check_weights(cfg(weights=files["st"])["model"])
    # the headers as numpy writes them, each member's data zeroed: still the same names and shapes
    src, dst = files["w4"], files["dir"] / "zeroed.npz"
    with zipfile.ZipFile(src) as a, zipfile.ZipFile(dst, "w") as b:
        for info in a.infolist():
            raw = a.read(info)
            head = 10 + int.from_bytes(raw[8:10], "little")
            b.writestr(info.filename, raw[:head] + bytes(len(raw) - head))
    assert precheck.npz_headers(str(dst)).keys() == precheck.npz_headers(src).keys()
