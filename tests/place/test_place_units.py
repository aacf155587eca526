"""The live-byte bound's unit terms (#26, bound.py `unit_waste`): a bank-separated
sequence (count > 1 with a bank edge: policy.ring_units' pooled ring pieces) owns every
unit its extent touches against every live request, so it denies them whole units; only
a reserved range may share them. The tiny 8-layer batch-4 trial with ring_units had six
tiles over by that waste alone, and placement sent them to CP-SAT for minutes.

Soundness is checked against CP-SAT (cpsat.py, an exact model sharing no code with
bound.py or instance.py) on random tiny tiles with such sequences; over-counting
variants of the waste must be caught by that same check."""
import numpy as np
import pytest

from compiler.place import INFEASIBLE, PLACED, PlaceConfig, Problem, solve, validate
from compiler.place import bound
from compiler.place.cpsat import solve_cpsat
from compiler.place.instance import Instance
from compiler.place.phase import rejection_text
from place_cases import BASE, E, small_map
from test_place_bound import _unsound as unsound

M = small_map(r0_elems=2, r1_pairs=2)     # region 0: 2048 B (2 units), region 1: 4096 B (2 pairs)
R0 = M["region0_end"]


def _tile(size, start, end, region, count, stride, edges, code=512, profile=0, align=None):
    n = len(size)
    res = ([[BASE, BASE + code]] if code else []) + ([[M["memory_end"] - profile, M["memory_end"]]]
                                                     if profile else [])
    return Problem(**M, size=np.array(size), align=np.array(align or [16] * n),
                   start=np.array(start), end=np.array(end), region=np.array(region),
                   count=np.array(count), stride=np.array(stride),
                   bank_edges=np.array(edges, np.int64).reshape(-1, 2),
                   reserved=np.array(res, np.int64).reshape(-1, 2), names=[f"r{i}" for i in range(n)])


def _case(extra):
    """An interleaved sequence of 3 x 704 B (2,112 B: one pair and 64 B of the other, so it
    owns both pairs, all of region 1), a 1,536 B buffer (region 0's free bytes after 512 B
    of code) and `extra` bytes more, all live at once."""
    return _tile([704, 1536, extra], [0, 0, 0], [2, 2, 2], [1, 0, 0], [3, 1, 1], [704, 0, 0], [[0, 1]])


def test_a_sequence_owning_whole_pairs_is_proved_infeasible_with_its_deficit():
    """Live bytes 2,112 + 1,536 + 16 = 3,664 of 5,632 available: the plain bound passes.
    The sequence's two pairs leave only region 0's 1,536 B for the others: 16 B over."""
    p = _case(16)
    assert bound.prove(Instance(p)).kind == "live-units"
    sol = solve(p, PlaceConfig())
    assert sol.status == INFEASIBLE and sol.method == "bound-live-units"
    assert (sol.event, sol.live_bytes, sol.available_bytes, sol.deficit) == (0, 4096 + 1536 + 16, 5632, 16)
    assert solve_cpsat(p, time_limit_s=20, workers=1).status == INFEASIBLE
    assert rejection_text(3, sol).startswith("tile 3 infeasible: 5648 B live counting bank-separated "
                                             "sequences in whole units at event 0")
    # without the third buffer it fits exactly: no proof, and placement finds it
    q = _tile([704, 1536], [0, 0], [2, 2], [1, 0], [3, 1], [704, 0], [[0, 1]])
    assert bound.prove(Instance(q)) is None
    sol = solve(q, PlaceConfig())
    assert sol.status == PLACED and validate(q, sol.addr) == []


def test_a_reservation_may_share_the_sequence_units():
    """A 300 B reservation at the top of region 1 (the profile samples) fits in the pair the
    sequence barely enters: 2,112 + 300 <= 4,096. So the sequence's waste is 300 B less, and
    a tile over by the plain padding (2,112 + 1,984 + 1,536 = 5,632 > 5,332 available) but not
    by the reservation-aware one (exactly 5,332) is placeable; 16 B more is not."""
    p = _tile([704, 1536, 16], [0, 0, 0], [2, 2, 2], [1, 0, 0], [3, 1, 1], [704, 0, 0], [[0, 1]],
              code=512, profile=300)
    w0, w1 = bound.unit_waste(Instance(p))
    assert w1.tolist() == [4096 - 2112 - 300, 0, 0]
    assert bound.prove(Instance(p)).deficit == 16
    q = _tile([704, 1536], [0, 0], [2, 2], [1, 0], [3, 1], [704, 0], [[0, 1]], code=512, profile=300)
    assert bound.prove(Instance(q)) is None
    assert solve_cpsat(q, time_limit_s=20, workers=1).status == PLACED


def _random_tile(seed):
    """A bank-separated sequence (interleaved or standard, 2-4 members) with an edge to one
    other request, 2-4 more requests, code in region 0 and sometimes a reservation at the
    top of region 1; sizes near whole units so the waste decides."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 6))
    count = [int(rng.integers(2, 5))] + [1] * (n - 1)
    unit = 2 * E if rng.random() < 0.6 else E
    ext = int(rng.integers(unit // 2, 2 * unit + 200))
    seq_size = max(16, ext // count[0] // 16 * 16)
    size = [seq_size] + rng.integers(100, 1600, n - 1).tolist()
    stride = [seq_size] + [0] * (n - 1)
    start = rng.integers(0, 3, n)
    end = start + rng.integers(1, 4, n)
    start[0], end[0] = 0, 6                  # the sequence lives throughout, as ring pieces do
    region = [1 if unit == 2 * E and rng.random() < 0.7 else 0] + \
        np.where(rng.random(n - 1) < 0.2, 1, 0).tolist()
    code = int(rng.choice([0, 256, 512]))
    profile = int(rng.choice([0, 0, 200, 600]))
    return _tile(size, start.tolist(), end.tolist(), region, count, stride,
                 [[0, int(rng.integers(1, n))]], code, profile)


@pytest.fixture(scope="module")
def reference():
    cases = [_random_tile(s) for s in range(150)]
    out = []
    for p in cases:
        s = solve_cpsat(p, time_limit_s=20, workers=1)
        assert s.status != PLACED or validate(p, s.addr) == []         # the model agrees with the validator
        out.append((p, s.status))
    return out


def _unsound(reference, prove):
    """Cases a bound calls infeasible that CP-SAT places (must be none), and the number of
    unit proofs seen."""
    return unsound(reference, prove, counted=lambda kind: kind.endswith("-units"))


def test_unit_bound_is_sound_against_cpsat(reference):
    wrong, units = _unsound(reference, bound.prove)
    assert wrong == [] and units >= 8, (wrong, units)
    assert {ref for _, ref in reference} == {PLACED, INFEASIBLE}


@pytest.mark.parametrize("fault", ["reserved-ignored", "pair-in-region0"])
def test_an_overcounting_unit_bound_is_caught(reference, monkeypatch, fault):
    """Injected faults: the waste not reduced by the reservations that may share the
    sequence's units; a sequence that may sit in region 0 counted in region 1's pairs
    (its elements are half as large there). Both reject placeable tiles."""
    real = bound.unit_waste

    def unit_waste(inst):
        w0, w1 = real(inst)
        p = inst.p
        owns = (p.count > 1) & np.isin(np.arange(len(p)), p.bank_edges.ravel())
        x = p.extent
        if fault == "reserved-ignored":
            pad = lambda u: np.where(owns, -(-x // u) * u - x, 0)
            return pad(E), pad(2 * E)
        return np.maximum(w0, w1), w1
    monkeypatch.setattr(bound, "unit_waste", unit_waste)
    wrong, _ = _unsound(reference, bound.prove)
    assert wrong, fault
