"""Injected faults must be caught: an allocator bug that overlaps two live buffers
shows up as a wrong answer on the simulator (and in the independent validator);
programs the machine cannot run are refused."""
import dataclasses

import numpy as np
import pytest

from compiler.lower import lower
from compiler.phases import compile_trial, model_phase, reference_phase, target_of
from compiler.place import validate
from compiler.place.phase import support_problem_of
from compiler.run import run
from compiler.sim import MachineFault
from helpers import cfg

CFG = cfg(m=40, k=128, n=72, dtype="fp8", policy={"grid": "2x2x4"})


@pytest.fixture(scope="module")
def trial():
    return compile_trial(CFG)


def run_model(lo, t=None):
    m = model_phase(CFG)
    return run(lo, m, t or target_of(CFG), ref=reference_phase(m))


def _rows(tg, name, tile):
    return np.flatnonzero((tg.req["tile"] == tile) & (np.asarray(tg.names)[tg.req["name"]] == name))


def _relower(trial, addr, cap=81920):
    pl = dataclasses.replace(trial["place"], placement=dataclasses.replace(trial["place"].placement, addr=addr))
    return pl, lower(pl, trial["schedule"], target_of(CFG), cap)


def test_overlapping_live_buffers_fail_validation(trial):
    assert trial["run"].validated
    tg = trial["place"].tilegraph
    addr = trial["place"].placement.addr.copy()
    (p,), (recv,) = _rows(tg, "C.p", 0), _rows(tg, "C.recv", 0)
    assert tg.req["start"][recv] < tg.req["end"][p]          # both live in superstep 3
    addr[recv] = addr[p]                                      # the allocator "bug"
    pl, lo = _relower(trial, addr)
    res = run_model(lo)
    assert not res.validated and res.max_abs_error > res.tolerance
    problem, rows = support_problem_of(pl, 0, target_of(CFG))
    errors = validate(problem, addr[rows])
    assert any("overlap" in e for e in errors), errors


def test_machine_refuses_over_cap_table(trial):
    _, lo = _relower(trial, trial["place"].placement.addr, cap=16)
    with pytest.raises(MachineFault, match="cap"):
        run_model(lo)


def test_machine_refuses_misaligned_operand(trial):
    tg = trial["place"].tilegraph
    addr = trial["place"].placement.addr.copy()
    (b,) = np.concatenate([_rows(tg, n, 0) for n in ("C.b", "weights.resident")])   # gathered or stationary
    addr[b] += 4                                              # MATMUL b needs 16-byte alignment
    _, lo = _relower(trial, addr)
    with pytest.raises(MachineFault, match="align"):
        run_model(lo)


def test_machine_refuses_code_outside_region0(trial):
    t = target_of(CFG)
    sup = dataclasses.replace(trial["place"].placement.support,
                              code_addr=np.full(t.tiles, t.region0_end, np.int64))
    pl = dataclasses.replace(trial["place"], placement=dataclasses.replace(trial["place"].placement, support=sup))
    lo = lower(pl, trial["schedule"], t, 81920)
    with pytest.raises(MachineFault, match="region 0"):
        run_model(lo, t)
