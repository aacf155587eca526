"""The exchange's move (memory.move_pairs) against a byte-by-byte reference: every chunk
read before any is written, writes in the plan's order (the later wins), whichever chunks
it stages (only those whose source some destination may touch) and on one or two threads;
and an exchange mixing staged and straight chunks on the simulator."""
import numpy as np
import pytest

from compiler import sim
from compiler.sim import memory

from .asm import R0_DATA, R1, Asm, put

T, TB = 8, 16384          # tiles of 32 stage-mark granules (jit.GRAIN)


def _reference(flat, sb, soff, db, doff, c, length, order):
    want = flat.copy()
    data = [flat[sb[c[k]] + soff[k]:sb[c[k]] + soff[k] + length[k]].copy() for k in range(len(c))]
    for k in order:
        want[db[c[k]] + doff[k]:db[c[k]] + doff[k] + length[k]] = data[k]
    return want


def _case(rng, overlap: bool):
    """Random pairs between T tiles; with `overlap`, sources and destinations share tiles'
    bytes (and destinations each other's), else every tile's sources lie in its lower half and its
    destinations in the upper half."""
    n = 40
    s_tile, d_tile = rng.integers(0, T, n), rng.integers(0, T, n)
    hi = TB // 2
    s_at = rng.integers(0, TB - 512, n) if overlap else rng.integers(0, hi - 512, n)
    d_at = rng.integers(0, TB - 512, n) if overlap else rng.integers(hi, TB - 512, n)
    sb, db = s_tile * TB + s_at, d_tile * TB + d_at
    per = rng.integers(1, 5, n)                                  # chunks per pair
    c = np.repeat(np.arange(n), per)
    length = rng.integers(1, 100, len(c))
    soff = rng.integers(0, 512 - 100, len(c))
    doff = rng.integers(0, 512 - 100, len(c))
    ext = np.full(n, 512)
    perm = rng.permutation(len(c))
    lo = d_tile[c[perm]] < T // 2
    order = np.concatenate([perm[lo], perm[~lo]])
    i32 = lambda a: np.asarray(a, np.int32)
    return (sb, ext, db, ext, i32(c), i32(soff), i32(doff), i32(length), i32(order), int(lo.sum()))


@pytest.mark.parametrize("two_threads", [False, True])
@pytest.mark.parametrize("overlap", [False, True])
def test_move_pairs_equals_reads_then_ordered_writes(monkeypatch, two_threads, overlap):
    if two_threads:
        monkeypatch.setattr(memory, "PARALLEL_BYTES", 0)
    rng = np.random.default_rng(7 + overlap)
    staged_any = False
    for rep in range(300):          # past 255 moves: the marks' epochs wrap
        sb, s_ext, db, d_ext, c, soff, doff, length, order, n_lo = _case(rng, overlap)
        flat = rng.integers(0, 256, T * TB, dtype=np.uint8)
        want = _reference(flat, sb, soff, db, doff, c, length, order)
        staged = memory.move_pairs(flat, T, TB, sb, s_ext, db, d_ext, c, soff, doff, length, order, n_lo)
        assert np.array_equal(flat, want), rep
        staged_any |= staged > 0
        if not overlap:
            assert staged == 0          # disjoint on every tile: every chunk moves straight
        assert staged <= int(length.sum())
    assert staged_any == overlap
    memory.drop_stage()


def test_exchange_stages_only_what_a_write_may_touch():
    """Tile 0 sends row 0 of its block to tile 1 and receives tile 1's row into its row 1;
    tile 1 sends that row from where tile 0's row lands (a swap through one buffer: staged);
    tiles 2 and 3 move between disjoint buffers (straight), two receive rows of tile 3
    overlap (the later entry's row wins): all as one bulk-synchronous step."""
    a = Asm()
    x0 = np.arange(256, dtype=np.uint8)
    x1 = (np.arange(256) * 3 % 256).astype(np.uint8)
    x2 = (np.arange(256) * 5 % 256).astype(np.uint8)
    s = {"x0": put([0], R0_DATA, x0, a, "x0"), "x1": put([1], R0_DATA, x1, a, "x1"),
         "x2": put([2], R0_DATA, x2, a, "x2")}
    a.exch(0, sends=[(1, R0_DATA, 128, 1, 0)], recvs=[(1, R0_DATA + 128, 128, 1, 0)])
    a.exch(1, sends=[(0, R0_DATA, 128, 1, 0)], recvs=[(0, R0_DATA, 128, 1, 0)])
    a.exch(2, sends=[(3, R0_DATA, 64, 2, 128), (3, R0_DATA + 64, 64, 1, 0)])
    a.exch(3, recvs=[(2, R1, 64, 2, 64), (2, R1 + 32, 64, 1, 0)])
    a.sync()
    a.stream_out("o", 512, [(0, 0, R0_DATA, 256, 1, 256, 256), (256, 1, R0_DATA, 128, 1, 128, 128),
                            (384, 3, R1, 128, 1, 128, 128)])
    out = sim.run(a.build(), s).outputs["o"]
    assert np.array_equal(out[:128], x0[:128])           # tile 0's row 0: sent, not overwritten
    assert np.array_equal(out[128:256], x1[:128])        # tile 0's row 1: tile 1's row 0 as it was
    assert np.array_equal(out[256:384], x0[:128])        # tile 1's row 0: tile 0's row 0
    want3 = np.concatenate([x2[:64], x2[128:192]])
    want3[32:96] = x2[64:128]                            # the later receive entry wins
    assert np.array_equal(out[384:512], want3)
