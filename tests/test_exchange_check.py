"""The exchange check (compiler/exchange_check.py): every exchange's destination bytes
against its source's, every iteration. Its byte walk against a brute-force expansion of
both sides' rows (sharing no code with it); on a compiled tower: quiet on the clean run,
every transfer of every iteration counted, a stale or dropped received row caught in the
iteration planted and named, and a wrong statement of a move caught (it can fail)."""
import dataclasses
import sys

import numpy as np
import pytest

from conftest import REPO
from helpers import target_cfg

from compiler.exchange_check import ExchangeCheck, compare_moves

sys.path.insert(0, str(REPO / "experiments" / "planted"))
import plants  # noqa: E402


def _brute(flat, tb, base, shift, src, saddr, srb, srows, sstride, dst, daddr, drb, drows, dstride):
    """Each side's bytes listed one by one, in row order; how many differ."""
    out = []
    for j in range(len(src)):
        s = [src[j] * tb + saddr[j] + shift[j] - base + r * sstride[j] + c
             for r in range(srows[j]) for c in range(srb[j])]
        d = [dst[j] * tb + daddr[j] - base + r * dstride[j] + c for r in range(drows[j]) for c in range(drb[j])]
        out.append(sum(int(flat[a] != flat[b]) for a, b in zip(s, d)))
    return out


def test_byte_walk_matches_brute_force():
    rng = np.random.default_rng(0)
    T, tb, base = 4, 4096, 256
    for trial in range(30):
        flat = rng.integers(0, 4, T * tb, dtype=np.uint8)        # few values: many equal bytes
        n = 6
        total = rng.choice([12, 24, 36, 48], n)
        srb = np.array([rng.choice([d for d in (1, 2, 3, 4, 6, 12) if t % d == 0]) for t in total])
        drb = np.array([rng.choice([d for d in (1, 2, 3, 4, 6, 12) if t % d == 0]) for t in total])
        srows, drows = total // srb, total // drb
        sstride, dstride = srb + rng.integers(0, 5, n), drb + rng.integers(0, 5, n)
        src, dst = rng.integers(0, T, n), rng.integers(0, T, n)
        saddr, daddr = base + rng.integers(0, 1000, n), base + rng.integers(2000, 3000, n)
        shift = rng.integers(0, 3, n) * 64
        if trial % 2:                                          # make some transfers exact copies
            for j in range(0, n, 2):
                for r in range(drows[j]):
                    for c in range(drb[j]):
                        q = r * drb[j] + c
                        sp = src[j] * tb + saddr[j] + shift[j] - base + (q // srb[j]) * sstride[j] + q % srb[j]
                        flat[dst[j] * tb + daddr[j] - base + r * dstride[j] + c] = flat[sp]
        args = [np.asarray(a, np.int64) for a in (shift, src, saddr, srb, srows, sstride, dst, daddr, drb, drows, dstride)]
        out = np.zeros(n, np.int64)
        compare_moves(flat, tb, base, *args, out)
        assert out.tolist() == _brute(flat, tb, base, *args), trial
        if trial % 2:
            assert (out[::2] == 0).all()


def test_byte_walk_counts_long_runs():
    """Rows of hundreds of bytes, about half of them differing: runs past the 255 bytes
    that compare_moves counts in one uint8 (a count that wrapped would differ here)."""
    rng = np.random.default_rng(1)
    T, tb, n = 3, 8192, 5
    for trial in range(6):
        flat = rng.integers(0, 2, T * tb, dtype=np.uint8)
        total = rng.choice([600, 1200, 1530], n)
        srb = np.array([rng.choice([d for d in (300, 510, 600, 1200, 1530) if t % d == 0]) for t in total])
        drb = np.array([rng.choice([d for d in (255, 300, 600, 1200, 1530) if t % d == 0]) for t in total])
        srows, drows = total // srb, total // drb
        sstride, dstride = srb + rng.integers(0, 9, n), drb + rng.integers(0, 9, n)
        src, dst = rng.integers(0, T, n), rng.integers(0, T, n)
        saddr, daddr = rng.integers(0, 2000, n), rng.integers(3000, 4000, n)
        args = [np.asarray(a, np.int64) for a in (np.zeros(n), src, saddr, srb, srows, sstride, dst, daddr, drb,
                                                  drows, dstride)]
        out = np.zeros(n, np.int64)
        compare_moves(flat, tb, 0, *args, out)
        want = _brute(flat, tb, 0, *args)
        assert out.tolist() == want and max(want) > 255, trial


@pytest.fixture(scope="module")
def trial():
    return plants.trial(target_cfg("tiny"), False, check="rows")


def test_clean_run_is_quiet_and_counts_every_transfer(trial):
    m = trial["run"].metrics()
    mv, (b0, b1) = trial["lower"].moves, trial["lower"].body
    count = trial["model"].graph.repeat.count
    body = (mv["step"] - 1 >= b0) & (mv["step"] - 1 < b1)
    assert m["exchanges_failed"] == 0 and "first_failed_exchange" not in m, m
    assert m["exchanges_checked"] == int((~body).sum() + count * body.sum()) > 0, m


@pytest.mark.parametrize("name", ["stale exchange (156 B of one tile's received rows)", "exchange drops a row",
                                  "exchange swaps two rows"])
def test_planted_movement_faults_are_caught_by_the_exchange_check(trial, name):
    o = plants.outcome(trial, plants.BY_NAME[name], 1)
    assert o["caught"] and "exchange" in o["by"], o
    f = o["exchange"]
    assert f["iteration"] == 1 and f["bytes_wrong"] > 0 and f["tile"] >= 0, f
    if name.startswith("stale"):
        assert 0 < f["bytes_wrong"] <= plants.STALE_BYTES and f["buffer"].endswith(".a"), f


def test_a_wrong_statement_of_a_move_fails(trial):
    """The check can fail: one transfer stated as landing 2 bytes off where it lands."""
    from compiler.phases import target_of
    from compiler.run import run
    lo = trial["lower"]
    mv = dict(lo.moves)
    j = int(np.argmax(mv["d_rows"] * mv["d_row_bytes"]))
    mv["daddr"] = mv["daddr"].copy()
    mv["daddr"][j] += 2
    res = run(dataclasses.replace(lo, moves=mv), trial["model"], target_of(trial["cfg"]), "rows", ref=trial["reference"])
    m = res.metrics()
    assert not res.validated and m["exchanges_failed"] > 0, m
    assert m["first_failed_exchange"]["step"] == int(mv["step"][j]), m


def test_off_switch(trial):
    from compiler.phases import target_of
    from compiler.run import run
    res = run(trial["lower"], trial["model"], target_of(trial["cfg"]), "rows", ref=trial["reference"],
              check_exchanges=False)
    assert res.validated and "exchanges_checked" not in res.metrics()


def test_unequal_byte_counts_are_bad_input():
    mv = {k: np.array([1]) for k in ("step", "src", "saddr", "dst", "daddr", "s_rows", "s_stride", "d_rows",
                                     "d_stride", "reloc", "name")}
    mv |= {"s_row_bytes": np.array([4]), "d_row_bytes": np.array([2])}
    with pytest.raises(ValueError, match="transfer 0 .*different byte counts"):
        ExchangeCheck(mv, 4096, 0)


# ---- check=rows' column stripes (readback_views.Views.cols) ---------------------------

@pytest.fixture(scope="module")
def wide():
    """A 2-layer tower of 64 tokens (more rows than readback_views.ROW_STRIDE)."""
    return plants.trial(target_cfg("tiny"), False, model=dict(plants.TOWER, image=112, layers=2), check="rows")


@pytest.mark.parametrize("stripes", [False, True])
def test_column_stripes_catch_a_kernel_fault_in_rows_the_sample_skips(wide, stripes, monkeypatch):
    """A kernel skipping a quarter of k on one tile (its operand intact in memory, so the
    exchange check is quiet) in its first row only, the row sample confined to each output's
    last row: the row-sampled check alone misses it op by op; the column stripes (every row
    of a few columns) fail that op in the iteration planted, naming the view."""
    from compiler import readback, readback_views
    monkeypatch.setattr(readback, "COLUMN_STRIPES", stripes)
    monkeypatch.setattr(readback_views.Views, "sample", staticmethod(lambda m, i: np.array([m - 1])))
    clean = plants.outcome(wide, plants.Kind("clean", "device", lambda r, layer: plants.Plant()), 1)
    assert not clean["by"], clean
    one_row = plants.Kind("kernel k-group, one row", "device", lambda r, layer: plants.kernel_skips_k_group(r, layer, 1))
    o = plants.outcome(wide, one_row, 1)
    assert "exchange" not in o["by"], o
    if stripes:
        assert "op read-back" in o["by"] and o["view"] == "columns" and o["iteration"] == 1, o
    else:
        assert "op read-back" not in o["by"], o
