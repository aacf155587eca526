"""F_SEG_B: a MATMUL whose b is given in segments, each a range of b's columns at its own
address (a ring piece read where it lives, compiler/expand/ring.py). Differential against
numpy and against the same MATMUL on a contiguous b (f16 row-major and fp8 micro-panels
with a partial last panel), a segment address relocated per REPEAT iteration, the cost
equal to the unsegmented MATMUL's (and the oracle's, which counts the groups from the
table itself), and the machine's refusals per segment."""
import ml_dtypes
import numpy as np
import pytest

from compiler import exact, isa, sim  # exact: MATMUL sums exactly, rounds once (tests/test_exact.py)
from compiler.sim import MachineFault, oracle

from .asm import R0_DATA, R0_DATA2, R1, TINY, Asm, get, put

FP8 = ml_dtypes.float8_e4m3fn
W = [0, 5]
m = 8


def _blocks(B, widths, P, along_k=False):
    """B's column (or row) ranges as standalone b operands (bytes), each in b's order."""
    out, c = [], 0
    for w in widths:
        blk = np.ascontiguousarray(B[c:c + w] if along_k else B[:, c:c + w])
        out.append((isa.panel_order(blk, P) if P else blk).view(np.uint8).reshape(-1))
        c += w
    return out


def build(dtype="f16", k=32, widths=(16, 16, 8), addrs=None, table=None, a_addr=R0_DATA, flags=0,
          contiguous=False, seed=0, n=None):
    """MATMUL a [m, k] f16 x b [k, sum(widths)] (dtype) -> out, b in segments at `addrs`
    (default: region 1, 4 KiB apart, in reverse column order), or contiguous. With
    `n` (and flags F_SEG_K) the segments are row ranges of b [sum(widths), n]."""
    along_k = n is not None
    k, n = (sum(widths), n) if along_k else (k, sum(widths))
    A, B, P, fl, asm, s = operands(dtype, k, n, a_addr, flags, seed)
    if contiguous:
        contiguous_b(asm, s, B, P, dtype, a_addr, fl & ~isa.F_SEG_K)
    else:
        addrs = addrs or [R1 + 0x1000 * (len(widths) - i) for i in range(len(widths))]
        for i, (blk, at) in enumerate(zip(_blocks(B, widths, P, along_k), addrs)):
            s[f"b{i}"] = put(W, at, blk, asm, f"b{i}")
        for t in W:
            words = [len(widths)] + [x for at, w in zip(addrs, widths) for x in (at, w)] if table is None else table
            tab = asm.table_words(t, words)
            asm.matmul(t, a_addr, tab, R0_DATA2, m, k, n, dtype=dtype, dtype2="f16", flags=fl | isa.F_SEG_B)
    return finish(asm, s, A, B)


def operands(dtype, k, n, a_addr, flags, seed):
    """a [m, k] f16 (placed at a_addr on the tiles W) and b [k, n] of `dtype`; b's panel
    height P and the flags with F_PANEL_B where b is read as panels."""
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((m, k)).astype(np.float16)
    B = (rng.standard_normal((k, n)) * 0.5).astype(np.float16 if dtype == "f16" else FP8)
    P = TINY.amp_panel_elems.get(dtype, 0)
    asm = Asm()
    return A, B, P, flags | (isa.F_PANEL_B if P else 0), asm, {"a": put(W, a_addr, A, asm, "a")}


def contiguous_b(asm, s, B, P, dtype, a_addr, fl):
    """The reference MATMUL: b whole at R1."""
    s["b"] = put(W, R1, isa.panel_order(B, P) if P else B, asm, "b")
    asm.matmul(W, a_addr, R1, R0_DATA2, m, *B.shape, dtype=dtype, dtype2="f16", flags=fl)


def finish(asm, s, A, B):
    """SYNC, each tile's output streamed out; (program, stream inputs, (A, B))."""
    n = B.shape[1]
    asm.sync()
    asm.stream_out("out", len(W) * m * n * 2, [(i * m * n * 2, t, R0_DATA2, m * n * 2, 1, m * n * 2, m * n * 2)
                                               for i, t in enumerate(W)])
    return asm.build(), s, (A, B)


@pytest.mark.parametrize("dtype,k,widths", [("f16", 32, (16, 16, 8)), ("f16", 24, (32, 6)),
                                            ("fp8", 48, (16, 8)), ("fp8", 64, (16, 32, 16))])
def test_segments_equal_numpy_and_the_contiguous_b(dtype, k, widths):
    prog, s, (A, B) = build(dtype, k, widths)
    res = sim.run(prog, s)
    n = sum(widths)
    _check(prog, s, res, A, B, dict(dtype=dtype, k=k, widths=widths))


@pytest.mark.parametrize("dtype,n,rows", [("f16", 24, (16, 32, 8)), ("fp8", 16, (32, 64, 16)), ("fp8", 40, (64, 32))])
def test_row_segments_equal_numpy_and_the_contiguous_b(dtype, n, rows):
    """F_SEG_K: b's rows in ranges (a ring piece cut along k); fp8 in whole panels."""
    prog, s, (A, B) = build(dtype, widths=rows, n=n, flags=isa.F_SEG_K)
    _check(prog, s, sim.run(prog, s), A, B, dict(dtype=dtype, widths=rows, n=n, flags=isa.F_SEG_K))


def _check(prog, s, res, A, B, kw):
    n = B.shape[1]
    out = get(res, "out", np.float16, (len(W), m, n))
    want = exact.matmul_f32(A.astype(np.float32), B.astype(np.float32)).astype(np.float16)
    assert np.array_equal(out, np.broadcast_to(want, out.shape))
    pc, sc, _ = build(**kw, contiguous=True)
    plain = sim.run(pc, sc)
    assert np.array_equal(plain.outputs["out"], res.outputs["out"])
    assert np.array_equal(plain.step_cycles, res.step_cycles)              # pieces cost what one block does
    assert np.array_equal(oracle.step_cycles(prog), res.step_cycles)


def test_a_segment_at_the_wrong_piece_gives_a_wrong_answer():
    """Two segment addresses swapped (each reads the other's piece): same widths, so the
    machine accepts it, and the answer is wrong: what read-back must catch."""
    prog, s, (A, B) = build("f16", 32, (16, 16), addrs=[R1 + 0x2000, R1 + 0x1000])
    good = get(sim.run(prog, s), "out", np.float16, (len(W), m, 32))
    bad_prog, _, _ = build("f16", 32, (16, 16), addrs=[R1 + 0x2000, R1 + 0x1000],
                           table=[2, R1 + 0x1000, 16, R1 + 0x2000, 16])
    bad = get(sim.run(bad_prog, s), "out", np.float16, (len(W), m, 32))
    assert not np.array_equal(good, bad)


def test_relocated_segment_reads_member_i():
    """REPEAT 3: segment 0 (16 columns) is a sequence of 3 members at a stride; its
    addr word in the segment table is relocated, so iteration i reads member i (and
    writes out_i); segment 1 stays."""
    k, w0, w1, L = 32, 16, 16, 3
    rng = np.random.default_rng(3)
    seq = rng.standard_normal((L, k, w0)).astype(np.float16)
    B1 = rng.standard_normal((k, w1)).astype(np.float16)
    relocated(seq, B1, lambda S0, S1: [2, S0, w0, S1, w1], isa.F_SEG_B, axis=1)


def relocated(seq, B1, words, flags, axis):
    """REPEAT L = len(seq): b = seq[i] beside B1 (along `axis`), seq a sequence at a stride
    whose segment-table addr word (the first entry's, from words(S0, S1)) the loop
    relocates; every iteration's output against numpy, the cycles against the oracle."""
    L, k, n = len(seq), *np.concatenate([seq[0], B1], axis).shape
    A = np.random.default_rng(4).standard_normal((m, k)).astype(np.float16)
    stride, S0, S1 = seq[0].size * 2, R1 + 0x4000, R1 + 0x1000
    SO = m * n * 2
    asm = Asm()
    s = {"a": put(W, R0_DATA, A, asm, "a"), "s0": put(W, S0, seq, asm, "s0"), "s1": put(W, S1, B1, asm, "s1")}
    for t in range(asm.T):
        if t not in W:
            asm.on(t, isa.REPEAT, L, 1, 0, 0)
            continue
        p = asm.pc(t)
        asm.on(t, isa.REPEAT, L, 2, 0, 0)
        tab = asm.table_words(t, words(S0, S1))
        rt = asm.reloc_table(t, [(tab + 4, stride), (asm.code_word(t, p + 1, 3), SO)])
        asm.matmul(t, R0_DATA, tab, R0_DATA2, m, k, n, flags=flags)
        asm.code[t][p] = isa.instr(isa.REPEAT, L, 2, rt, 2)
    asm.sync()
    asm.stream_out("out", len(W) * L * SO, [(i * L * SO, t, R0_DATA2, L * SO, 1, L * SO, L * SO)
                                            for i, t in enumerate(W)])
    prog = asm.build()
    res = sim.run(prog, s)
    out = get(res, "out", np.float16, (len(W), L, m, n))
    for i in range(L):
        B = np.concatenate([seq[i], B1], axis).astype(np.float32)
        want = exact.matmul_f32(A.astype(np.float32), B).astype(np.float16)
        assert np.array_equal(out[:, i], np.broadcast_to(want, out[:, i].shape)), i
    assert np.array_equal(oracle.step_cycles(prog), res.step_cycles)


@pytest.mark.parametrize("kw,match", [
    (dict(addrs=[R1 + 0x1008, R1 + 0x2000]), "not 16-byte aligned"),
    (dict(addrs=[R0_DATA + 0x800, R1 + 0x2000]), "needs interleaved"),
    (dict(addrs=[R1 + 0x1000, R1 + 0x2000], a_addr=R1 + 0x3000), "bank conflict"),
    (dict(widths=(12, 20)), "not whole output-channel groups"),
    (dict(widths=(16, 16), table=[2, R1 + 0x2000, 16, R1 + 0x1000, 8]), "hold 24 columns"),
    (dict(widths=(16, 16), table=[0]), "holds 0 segments"),
    (dict(flags=isa.F_TRANSPOSE_B), "both segmented"),
    (dict(widths=(8, 24), n=16, flags=isa.F_SEG_K), "not whole input-channel groups"),
])
def test_the_machine_refuses(kw, match):
    widths = kw.pop("widths", (16, 16))
    prog, s, _ = build("f16", 32, widths, **kw)
    with pytest.raises(MachineFault, match=match) as e:
        sim.run(prog, s)
    assert e.value.tile == W[0]


def test_a_table_outside_the_blob_is_refused_by_machine_and_oracle():
    prog, s, _ = build("f16", 32, (16, 16))
    code = prog.code.view("<u4").reshape(-1, isa.INSTR_WORDS).copy()
    mm = (code[:, 0] & 0xFF) == isa.MATMUL
    code[mm, 2] = R0_DATA                       # a data address, not the table blob
    prog.code = code.view(np.uint8).reshape(-1)
    with pytest.raises(MachineFault, match="not an aligned word of the tile's table blob"):
        sim.run(prog, s)
    with pytest.raises(ValueError, match="outside its tile's exchange table"):
        oracle.step_cycles(prog)


def test_rows_flag_alone_is_refused():
    asm = Asm()
    asm.matmul(W, R0_DATA, R1, R0_DATA2, m, 32, 16, flags=isa.F_SEG_K).sync()
    with pytest.raises(MachineFault, match="F_SEG_K without F_SEG_B"):
        sim.run(asm.build(), {})
