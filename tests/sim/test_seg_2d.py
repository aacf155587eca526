"""F_SEG_B | F_SEG_2D: a MATMUL whose b is given as rectangles (whole in-group x out-group
blocks, each at its own address: a ring piece cut in group x panel units, read where it
lives, compiler/expand/ring2d.py). Differential against numpy and against the same MATMUL
on a contiguous b (f16 row-major; fp8 micro-panels with a partial last panel and a ragged
last column group), the cost equal to the unsegmented MATMUL's and the oracle's (which
counts the groups from the table), a rectangle address relocated per REPEAT iteration, a
wrong address caught as a wrong answer, and the machine's refusals."""
import numpy as np
import pytest

from compiler import exact, isa, sim
from compiler.sim import MachineFault, oracle

from .asm import R0_DATA, R0_DATA2, R1, TINY, Asm, get, put
from .test_seg_b import W, contiguous_b, finish, m, operands, relocated


def build(dtype, k, n, rects, order=None, table=None, flags=0, contiguous=False, a_addr=R0_DATA, seed=0):
    """a [m, k] f16 x b [k, n] (dtype), b as rectangles (r0, c0, rows, cols), stored in
    region 1 in `order` (default reverse), 4 KiB apart; `table` overrides the words."""
    A, B, P, fl, asm, s = operands(dtype, k, n, a_addr, flags, seed)
    addrs = None
    if contiguous:
        contiguous_b(asm, s, B, P, dtype, a_addr, fl)
    else:
        order = order or list(range(len(rects)))[::-1]
        addrs = [R1 + 0x1000 * (1 + order.index(i)) for i in range(len(rects))]
        for i, ((r0, c0, rl, cl), at) in enumerate(zip(rects, addrs)):
            blk = np.ascontiguousarray(B[r0:r0 + rl, c0:c0 + cl])
            s[f"b{i}"] = put(W, at, (isa.panel_order(blk, P) if P else blk).view(np.uint8).reshape(-1), asm, f"b{i}")
        words = table or [len(rects)] + [x for at, r in zip(addrs, rects) for x in (at, *r)]
        for t in W:
            tab = asm.table_words(t, words)
            asm.matmul(t, a_addr, tab, R0_DATA2, m, k, n, dtype=dtype, dtype2="f16",
                       flags=fl | isa.F_SEG_B | isa.F_SEG_2D)
    return (*finish(asm, s, A, B), addrs)


CASES = [  # (dtype, k, n, rectangles): a piece of 2-D units is a column strip, a partial one, ...
    ("f16", 48, 40, [(0, 0, 32, 16), (32, 0, 16, 16), (0, 16, 48, 16), (0, 32, 16, 8), (16, 32, 32, 8)]),
    ("fp8", 80, 40, [(0, 0, 64, 16), (64, 0, 16, 16), (0, 16, 32, 24), (32, 16, 48, 24)]),
    ("fp8", 96, 32, [(0, 0, 96, 16), (0, 16, 64, 16), (64, 16, 32, 16)]),
]


@pytest.mark.parametrize("dtype,k,n,rects", CASES)
def test_rectangles_equal_numpy_and_the_contiguous_b(dtype, k, n, rects):
    prog, s, (A, B), _ = build(dtype, k, n, rects)
    res = sim.run(prog, s)
    out = get(res, "out", np.float16, (len(W), m, n))
    want = exact.matmul_f32(A.astype(np.float32), B.astype(np.float32)).astype(np.float16)
    assert np.array_equal(out, np.broadcast_to(want, out.shape))
    pc, sc, _, _ = build(dtype, k, n, rects, contiguous=True)
    plain = sim.run(pc, sc)
    assert np.array_equal(plain.outputs["out"], res.outputs["out"])
    assert np.array_equal(plain.step_cycles, res.step_cycles)            # group blocks cost what one b does
    assert np.array_equal(oracle.step_cycles(prog), res.step_cycles)
    # the recount: the unsegmented AMP figure of (m, k, n) and the sync, nothing per rectangle
    assert list(res.step_cycles) == [TINY.matmul_cycles(m, k, n, dtype, "f16") + TINY.sync_cycles]


def test_a_rectangle_at_the_wrong_address_gives_a_wrong_answer():
    """Two equal-shaped rectangles' addresses swapped in the table: the machine accepts
    it, the answer is wrong (what read-back catches in a compiled program)."""
    dtype, k, n, rects = "f16", 32, 32, [(0, 0, 32, 16), (0, 16, 32, 16)]
    prog, s, _, addrs = build(dtype, k, n, rects)
    good = get(sim.run(prog, s), "out", np.float16, (len(W), m, n))
    bad_prog, _, _, _ = build(dtype, k, n, rects, table=[2, addrs[1], 0, 0, 32, 16, addrs[0], 0, 16, 32, 16])
    bad = get(sim.run(bad_prog, s), "out", np.float16, (len(W), m, n))
    assert not np.array_equal(good, bad)


def test_relocated_rectangle_reads_member_i():
    """REPEAT 3: rectangle 0 (rows 0..16 of 32 columns) is a sequence of 3 members; its
    addr word is relocated, so iteration i reads member i; rectangle 1 stays."""
    k, n, L = 48, 32, 3
    rng = np.random.default_rng(3)
    seq = rng.standard_normal((L, 16, n)).astype(np.float16)
    B1 = rng.standard_normal((k - 16, n)).astype(np.float16)
    relocated(seq, B1, lambda S0, S1: [2, S0, 0, 0, 16, n, S1, 16, 0, k - 16, n], isa.F_SEG_B | isa.F_SEG_2D, axis=0)


TWO = [(0, 0, 32, 16), (0, 16, 32, 16)]


@pytest.mark.parametrize("kw,match", [
    (dict(rects=[(0, 0, 32, 16), (0, 16, 16, 16), (8, 16, 24, 16)]), "not whole channel-group blocks"),
    (dict(rects=[(0, 0, 32, 12), (0, 12, 32, 20)]), "not whole channel-group blocks"),
    (dict(rects=[(0, 0, 32, 32), (0, 16, 32, 16)]), "hold 1536 elements"),
    (dict(rects=[(0, 0, 32, 16), (0, 0, 32, 16)]), "overlap"),
    (dict(rects=TWO, table=[0]), "holds 0 rectangles"),
    (dict(rects=[(0, 0, 32, 16), (0, 16, 32, 32)]), "outside b"),
    (dict(rects=TWO, flags=isa.F_SEG_K), "F_SEG_2D with F_SEG_K"),
    (dict(rects=TWO, a_addr=R1 + 0x3000), "bank conflict"),
])
def test_the_machine_refuses(kw, match):
    prog, s, _, _ = build("f16", 32, 32, **kw)
    with pytest.raises(MachineFault, match=match) as e:
        sim.run(prog, s)
    assert e.value.tile == W[0]


def test_flag_alone_is_refused():
    asm = Asm()
    asm.matmul(W, R0_DATA, R1, R0_DATA2, m, 32, 16, flags=isa.F_SEG_2D).sync()
    with pytest.raises(MachineFault, match="F_SEG_2D without F_SEG_B"):
        sim.run(asm.build(), {})
