"""run.latency_ms and run.images_per_s (issue #27): a tower's first image in to last output out
(the input images over the host link, the program, the outputs back; resident weights not
counted) and images per second with batches back to back, recomputed here by hand from the
graph's tensor sizes and the target's host link; absent for a graph that is not a tower."""
import math

from compiler.phases import compile_trial
from helpers import target_cfg

TOWER = dict(name="vit", preset="custom", scope="tower", width=64, hidden=172, heads=2, image=56, patch=14,
             layers=1, pool="map")


def test_tower_latency_and_images_per_s_by_hand():
    for batch in (1, 2):
        r = compile_trial(dict(model=dict(TOWER, batch=batch), target=target_cfg("tiny"), policy={}))
        run, g, t = r["run"], r["model"].graph, target_cfg("tiny")
        assert run.validated
        nbytes = {k: sum(math.prod(x.shape) * (2 if x.dtype == "f16" else 4 if x.dtype == "f32" else 1)
                         for x in g.tensors.values() if x.kind == k) for k in ("input", "output")}
        assert nbytes["input"] >= batch * 16 * 3 * 14 * 14 * 2        # B images of 4 x 4 patches, f16
        link = t["host_bytes_per_cycle"]
        total = run.cycles + -(-nbytes["input"] // link) + -(-nbytes["output"] // link)
        m = run.metrics()
        assert m["latency_ms"] == round(total / t["clock_hz"] * 1e3, 6)
        assert m["images_per_s"] == round(batch * t["clock_hz"] / total, 3)
        assert m["latency_ms"] > m["ms"]


def test_not_a_tower_has_no_throughput():
    r = compile_trial(dict(model=dict(name="gemm", m=32, k=64, n=64), target=target_cfg("tiny"), policy={}))
    assert "images_per_s" not in r["run"].metrics() and "latency_ms" not in r["run"].metrics()
