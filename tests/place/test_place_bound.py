"""The live-byte bound's region terms (#26): a standard request with no legal start in
region 0's free windows can only sit in region 1 (nothing straddles region0_end), so
the live bytes of such requests and the interleaved ones are bounded by region 1.

Soundness is checked against CP-SAT (cpsat.py: an exact model sharing no code with
bound.py or instance.py) on random tiny tiles whose sizes straddle the free region 0;
an over-counting variant of the bound must be caught by that same check."""
import numpy as np
import pytest

from compiler.place import INFEASIBLE, PLACED, PlaceConfig, Problem, solve
from compiler.place import bound
from compiler.place.cpsat import solve_cpsat
from compiler.place.instance import Instance
from compiler.place.phase import rejection_text
from place_cases import BASE, E, small_map

M = small_map(r0_elems=2, r1_pairs=1)     # region 0: 2048 B, region 1: 2048 B


def _tile(size, start, end, region=None, align=None, code=512, **kw):
    n = len(size)
    return Problem(**M, size=np.array(size), align=np.array(align or [16] * n),
                   start=np.array(start), end=np.array(end),
                   region=np.array(region or [0] * n),
                   reserved=np.array([[BASE, BASE + code]] if code else [], np.int64).reshape(-1, 2),
                   names=[f"r{i}" for i in range(n)], **kw)


def test_region1_only_buffers_are_proved_infeasible_with_their_deficit():
    """Two 1600 B buffers live at events 1..2: region 0 keeps 1536 B free after 512 B
    of code, so both need region 1 (2048 B). All 3584 free bytes would hold them (the
    overall bound passes); before the region-1 term this was search exhaustion with
    deficit 0."""
    p = _tile([1600, 1600, 400], [0, 1, 0], [3, 3, 1])
    sol = solve(p, PlaceConfig())
    assert sol.status == INFEASIBLE and sol.method == "bound-live-region1"
    assert (sol.event, sol.live_bytes, sol.available_bytes, sol.deficit) == (1, 3200, 2048, 1152)
    assert solve_cpsat(p, time_limit_s=20).status == INFEASIBLE
    assert rejection_text(7, sol) == ("tile 7 infeasible: 3200 B live that only region 1 can hold at "
                                      "event 1, 2048 B available in region 1 (deficit 1152 B)")
    # the same buffers one byte smaller than the free region 0: one fits there, so no proof
    q = _tile([1536, 1600, 400], [0, 1, 0], [3, 3, 1])
    assert bound.prove(Instance(q)) is None and solve(q, PlaceConfig()).status == PLACED


def test_alignment_and_region0_only_requests():
    """`confined` reads the static domain: 1520 B aligned to 1024 has no start in
    [BASE+512, BASE+2048) (BASE is 1024-aligned: the one aligned start, BASE+1024,
    leaves 1024 B), so it is region-1-only; a standard request too large for a
    reserved-shortened region 1 is region-0-only, counted with code."""
    q = _tile([1520, 1000], [0, 0], [2, 2], align=[1024, 16], code=512)
    only0, only1 = bound.confined(Instance(q))
    assert only1.tolist() == [True, False] and only0.tolist() == [False, False]
    r0 = Problem(**M, size=np.array([1800, 600]), align=np.array([16, 16]), start=np.array([0, 0]),
                 end=np.array([2, 2]), region=np.array([0, 2]),
                 reserved=np.array([[M["region0_end"], M["region0_end"] + 512]]))
    only0, only1 = bound.confined(Instance(r0))
    assert only0.tolist() == [True, True] and not only1.any()
    proof = bound.prove(Instance(r0))
    assert proof.kind == "live-region0" and proof.deficit == 1800 + 600 - 2048


def _random_tile(seed):
    """3-5 requests whose sizes straddle the free region 0 (some exactly at a window's
    edge), some interleaved, alignments 1..1024, random code size."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 6))
    code = int(rng.choice([0, 256, 512, 768]))
    free0 = 2 * E - code
    size = rng.integers(free0 - 300, free0 + 300, n)
    size = np.where(rng.random(n) < 0.2, free0, size)                  # exactly fits
    size = np.where(rng.random(n) < 0.4, rng.integers(64, 700, n), size)
    start = rng.integers(0, 4, n)
    end = start + rng.integers(1, 3, n)
    region = np.where(rng.random(n) < 0.2, 1, 0)
    align = 2 ** rng.integers(0, 11, n)
    return _tile(size.tolist(), start.tolist(), end.tolist(), region.tolist(), align.tolist(), code)


@pytest.fixture(scope="module")
def reference():
    cases = [_random_tile(s) for s in range(120)]
    return [(p, solve_cpsat(p, time_limit_s=20, workers=1).status) for p in cases]


def _unsound(reference, prove, counted=lambda kind: kind.startswith("live-region")):
    """Cases a bound calls infeasible that CP-SAT places (must be none), and the number
    of proofs of the kinds `counted` accepts seen (region proofs: so the check is not
    vacuous)."""
    wrong, region = [], 0
    for k, (p, ref) in enumerate(reference):
        proof = prove(Instance(p))
        if proof is not None and counted(proof.kind):
            region += 1
        if proof is not None and ref == PLACED:
            wrong.append(k)
    return wrong, region


def test_bound_is_sound_against_cpsat(reference):
    wrong, region = _unsound(reference, bound.prove)
    assert wrong == [] and region >= 10, (wrong, region)
    seen = {ref for _, ref in reference}
    assert seen == {PLACED, INFEASIBLE}


@pytest.mark.parametrize("fault", ["aligned-span", "at-capacity"])
def test_an_overcounting_bound_is_caught(reference, monkeypatch, fault):
    """Injected faults: counting a request as region-1-only when its extent plus
    alignment slack (expand's screen span) exceeds the free region 0, or when it
    merely equals it. Both reject placeable tiles, which the soundness check sees."""
    def confined(inst):
        p = inst.p
        free0 = max((b - a for a, b in inst.windows[0]), default=0)
        ext = p.extent + (p.align - 1 if fault == "aligned-span" else 0)
        big = ext >= free0 if fault == "at-capacity" else ext > free0
        return p.region == 2, (p.region == 1) | ((p.region == 0) & big)
    monkeypatch.setattr(bound, "confined", confined)
    wrong, _ = _unsound(reference, bound.prove)
    assert wrong, fault
