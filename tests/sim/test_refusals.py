"""Everything the machine refuses raises MachineFault naming tile, step and pc."""
import numpy as np
import pytest

from compiler import isa, sim
from compiler.sim import MachineFault

from .asm import CODE, R0_DATA, R0_DATA2, R1, R1_B, TABLE, Asm, put

M = K = N = 16


def _mm_program(a_addr=R0_DATA, b_addr=R1, out=R0_DATA2, tile=5, dtype="f16"):
    a = Asm()
    a.sync()                                   # the fault is in superstep 1 ...
    a.on(tile, isa.COPY, R1_B, R1_B + 64, 4, 1, 4, 4)   # ... at pc 2 on the faulting tile
    a.matmul(tile, a_addr, b_addr, out, M, K, N, dtype=dtype).sync()
    return a


def _fault(prog, streams=None, match=None):
    with pytest.raises(MachineFault, match=match) as e:
        sim.run(prog, streams or {})
    return e.value


def test_message_names_tile_step_pc():
    f = _fault(_mm_program(b_addr=R1 + 4).build(), match="not 16-byte aligned")
    assert (f.tile, f.step, f.pc) == (5, 1, 2)
    assert str(f).startswith("tile 5, superstep 1, pc 2: MATMUL operand b at 0x5c004")


def test_valid_baseline_runs():
    """The program every refusal below perturbs is one the machine runs, and it computes:
    tile 5's output is a @ b within f16 rounding of a float64 product (a kernel that did not
    run, read the wrong operand or wrote elsewhere leaves zeros or other values there)."""
    rng = np.random.default_rng(0)
    A = rng.standard_normal((M, K)).astype(np.float16)
    B = rng.standard_normal((K, N)).astype(np.float16)
    a = _mm_program()
    s = {"a": put([5], R0_DATA, A, a, "a"), "b": put([5], R1, B, a, "b")}
    nb = M * N * 2
    a.stream_out("o", nb, [(0, 5, R0_DATA2, nb, 1, nb, nb)])
    res = sim.run(a.build(), s)
    got = res.outputs["o"].view(np.float16).reshape(M, N).astype(np.float64)
    a64, b64 = A.astype(np.float64), B.astype(np.float64)
    assert np.all(np.abs(got - a64 @ b64) <= 2.0 ** -10 * (np.abs(a64) @ np.abs(b64)) + 2.0 ** -24)
    assert np.abs(got).max() > 1 and res.step_kind == ["idle", "compute"]


def test_interleaved_operand_in_region0():
    f = _fault(_mm_program(b_addr=R0_DATA2, out=R1).build(), match="interleaved")
    assert f.tile == 5


def test_bank_conflict():
    # region 1 units are element *pairs*: 16 KiB apart is still the same unit
    f = _fault(_mm_program(a_addr=R1 + 16384, b_addr=R1).build(), match="bank conflict")
    assert "unit 4" in str(f)
    sim.run(_mm_program(a_addr=R1_B - 512, b_addr=R1_B).build(), {})   # adjacent units: fine
    _fault(_mm_program(a_addr=R1_B - 256, b_addr=R1_B).build(), match="bank conflict")  # a straddles into b's unit


def test_out_of_range_and_straddling():
    a = Asm()
    _fault(_mm_program(a_addr=a.t.memory_end - 64, b_addr=R1).build(), match="out of range")
    _fault(_mm_program(a_addr=a.t.memory_base - 8).build(), match="out of range")
    _fault(_mm_program(a_addr=a.t.region0_end - 64, b_addr=R1_B).build(), match="straddles")


def test_invalid_opcode_and_dtype():
    a = Asm()
    a.raw(3, [99, 0, 0, 0, 0, 0, 0, 0]).sync()
    assert _fault(a.build(), match="invalid instruction").tile == 3
    _fault(_mm_program(dtype=None).build(), match="invalid dtype")
    a = Asm()
    a.on(0, isa.SYNC, dtype="f16")
    _fault(a.build(), match="dtype")


def test_code_outside_region0():
    a = Asm()
    a.code_addr[7] = R1
    f = _fault(a.build(), match="not entirely inside region 0")
    assert f.tile == 7 and f.step is None and f.phase == "load"
    a = Asm()
    a.code_addr[7] = a.t.region0_end - isa.INSTR_BYTES   # END fits; a longer program would not
    a.sync()
    _fault(a.build(), match="region 0")


def test_table_over_cap():
    a = Asm(table_cap=2 * isa.ENTRY_BYTES)
    a.exch(1, sends=[(2, R0_DATA, 4, 1, 4)] * 2)
    a.exch(2, recvs=[(1, R0_DATA, 4, 1, 4)] * 2)
    a.sync()
    sim.run(a.build(), {})                    # exactly at the cap: loads
    a.exch(1, sends=[(2, R0_DATA, 4, 1, 4)])
    a.exch(2, recvs=[(1, R0_DATA, 4, 1, 4)])
    a.sync()
    f = _fault(a.build(), match="exceeds the cap")
    assert f.tile == 1


def test_unencodable_copy():
    for args, what in [((R1, R0_DATA, 6, 1, 8, 8), "row_bytes"),
                       ((R1, R0_DATA, 8, 2, 8, 10), "src_stride"),
                       ((R1 + 2, R0_DATA, 8, 1, 8, 8), "aligned")]:
        a = Asm()
        a.on(4, isa.COPY, *args).sync()
        f = _fault(a.build(), match="unencodable copy")
        assert what in str(f) and f.tile == 4


def test_exchange_mismatch_counts_and_bytes():
    a = Asm()
    a.exch(1, sends=[(2, R0_DATA, 64, 1, 0)])
    a.exch(2, recvs=[])
    a.sync()
    f = _fault(a.build(), match="exchange mismatch: tile 1 sends 1 entries to tile 2")
    assert f.tile == 1 and f.step == 0
    a = Asm()
    a.exch(1, sends=[(2, R0_DATA, 64, 2, 64)])
    a.exch(2, recvs=[(1, R0_DATA, 64, 1, 0)])
    a.sync()
    _fault(a.build(), match="carries 128 B .* expects 64 B")
    a = Asm()                                  # a receive from a tile that never sends
    a.exch(2, recvs=[(9, R0_DATA, 64, 1, 0)])
    a.sync()
    _fault(a.build(), match="tile 9 sends 0 entries to tile 2")


def test_exchange_and_compute_on_one_tile():
    a = Asm()
    a.exch(1, sends=[(1, R0_DATA, 64, 1, 0)], recvs=[(1, R1, 64, 1, 0)])
    a.on(1, isa.COPY, R1_B, R0_DATA, 4, 1, 4, 4).sync()
    _fault(a.build(), match="mixes EXCH and compute")


def test_deadlock():
    a = Asm()
    a.on(range(1, 64), isa.SYNC)   # tile 0 reaches END one superstep early
    f = _fault(a.build(), match="deadlock")
    assert f.tile == 0 and f.step == 0


def test_data_overwriting_code_is_caught():
    rng = np.random.default_rng(0)
    # 1. a host_in placed over tile 3's code: the machine fetches the data as code
    a = Asm()
    a.matmul(range(8), R0_DATA, R1, R0_DATA2, 8, 8, 8).sync()
    junk = rng.integers(0, 2**32, 64, dtype=np.uint32).view(np.uint8)
    s = {"w": put([3], CODE, junk, a, "w")}
    f = _fault(a.build(), s, match="invalid instruction")
    assert f.tile == 3 and f.pc == 0
    # 2. a kernel writing over the tile's own later instructions at run time
    a = Asm()
    a.on(2, isa.COPY, CODE + 2 * isa.INSTR_BYTES, R0_DATA, 32, 1, 32, 32)
    a.matmul(range(8), R0_DATA, R1, R0_DATA2, 8, 8, 8).sync()
    s = {"j": put([2], R0_DATA, junk[:32], a, "j")}
    f = _fault(a.build(), s, match="invalid instruction")
    assert (f.tile, f.step, f.pc) == (2, 0, 2)


def test_exchange_table_and_entries_checked():
    a = Asm()
    a.exch(1, sends=[(99, R0_DATA, 64, 1, 0)])
    a.sync()
    _fault(a.build(), match="names tile 99")
    a = Asm()
    a.exch(1, sends=[(2, a.t.memory_end - 32, 64, 1, 0)])
    a.exch(2, recvs=[(1, R0_DATA, 64, 1, 0)])
    a.sync()
    _fault(a.build(), match="out of range")
    a = Asm()
    a.on(1, isa.EXCH, TABLE + 2, 0, 1).sync()
    _fault(a.build(), match="not 4-byte aligned")


# ---- the newer kernels ---------------------------------------------------------------------
NEW_KERNELS = {   # op -> (args with every operand aligned, {operand: argument index})
    isa.GELU: ((R1, R0_DATA, 64), {"out": 0, "src": 1}),
    isa.LAYERNORM: ((R1, R0_DATA, R0_DATA2, R0_DATA2 + 256, 4, 16, isa.f32_bits(1e-5)),
                    {"out": 0, "src": 1, "gamma": 2, "beta": 3}),
    isa.SOFTMAX: ((R1, R0_DATA, 4, 16, isa.f32_bits(1.0)), {"out": 0, "src": 1}),
    isa.CAST: ((R1, R0_DATA, 64, isa.f32_bits(1.0)), {"out": 0, "src": 1}),
    isa.ONLINE_SOFTMAX: ((R1, R0_DATA, R0_DATA2, 4, 16, isa.f32_bits(1.0)), {"out": 0, "src": 1, "state": 2}),
    isa.ROWSCALE: ((R1, R0_DATA, R0_DATA2, R1_B, 4, 16), {"out": 0, "src0": 1, "vec": 2, "src1": 3}),
}
NEW_DT = {isa.CAST: dict(dtype="fp8", dtype2="f16"), isa.ROWSCALE: dict(flags=isa.F_ADD)}


@pytest.mark.parametrize("op", sorted(NEW_KERNELS), ids=lambda o: isa.OP_NAMES[o])
def test_new_kernels_misaligned_operands(op):
    args, where = NEW_KERNELS[op]
    a = Asm()
    a.on(6, op, *args, **NEW_DT.get(op, {})).sync()
    sim.run(a.build(), {})                                    # aligned: runs
    for nm, j in where.items():
        bad = list(args)
        bad[j] += 4
        a = Asm()
        a.on(6, op, *bad, **NEW_DT.get(op, {})).sync()
        f = _fault(a.build(), match=f"{isa.OP_NAMES[op]} operand {nm} at .* is not 8-byte aligned")
        assert (f.tile, f.pc) == (6, 0)


def test_new_kernels_sizes_and_ranges():
    a = Asm()
    a.on(2, isa.GELU, R1, R0_DATA, 0).sync()
    _fault(a.build(), match="GELU nelem = 0 is not a valid size")
    a = Asm()
    a.on(2, isa.SOFTMAX, R1, a.t.memory_end - 64, 4, 16, isa.f32_bits(1.0)).sync()
    _fault(a.build(), match="SOFTMAX operand src .* out of range")
    a = Asm()                 # F_SM_DEFER's sums are f32[rows]: 4 * rows bytes (unflagged: word 7 unread)
    a.on(2, isa.SOFTMAX, R1, R0_DATA, 4, 16, isa.f32_bits(1.0), 0, a.t.memory_end - 12, flags=isa.F_SM_DEFER).sync()
    _fault(a.build(), match="SOFTMAX operand sums .* out of range")
    a = Asm()
    a.on(2, isa.SOFTMAX, R1, R0_DATA, 4, 16, isa.f32_bits(1.0), 0, a.t.memory_end - 12).sync()
    sim.run(a.build(), {})
    a = Asm()                 # the state is f32[3, rows]: 12 * rows bytes
    a.on(2, isa.ONLINE_SOFTMAX, R1, R0_DATA, a.t.memory_end - 11 * 4, 4, 16, isa.f32_bits(1.0)).sync()
    _fault(a.build(), match="operand state .* out of range")


@pytest.mark.parametrize("op,kw,match", [
    (isa.GELU, dict(flags=2), "GELU has unknown flag bits 0x2"),
    (isa.GELU, dict(dtype2="f16"), "GELU has invalid dtype2"),
    (isa.GELU, dict(dtype="fp8"), "GELU has invalid dtype code 2"),
    (isa.SOFTMAX, dict(flags=2), "SOFTMAX has unknown flag bits 0x2"),     # 1: F_SM_DEFER (policy.deferred_norm)
    (isa.ONLINE_SOFTMAX, dict(flags=isa.F_FIRST | 4), "unknown flag bits 0x4"),
    (isa.ROWSCALE, dict(flags=8), "unknown flag bits 0x8"),
    (isa.CAST, dict(dtype="f16", dtype2="f16"), "CAST from f16 to itself"),
    (isa.CAST, dict(dtype="f32", dtype2="f16"), "CAST has invalid dtype code 3"),
    (isa.CAST, dict(dtype="fp8"), "CAST has invalid dtype2 code 0"),
])
def test_unknown_flags_and_dtypes(op, kw, match):
    args, _ = NEW_KERNELS[op]
    a = Asm()
    a.on(4, op, *args, **kw).sync()
    f = _fault(a.build(), match=match)
    assert f.tile == 4


def test_word0_flags_on_old_opcodes():
    for op, args, kw in [(isa.SYNC, (), dict(flags=1)), (isa.ADD, (R1, R1, R1, 0, 8, 0), dict(flags=1)),
                         (isa.COPY, (R1, R0_DATA, 4, 1, 4, 4), dict(dtype2="f16")),
                         (isa.EXCH, (TABLE, 0, 0), dict(flags=128))]:
        a = Asm()
        a.on(3, op, *args, **kw).sync()
        _fault(a.build(), match="invalid instruction word 0")
    _fault(_mm_f32_mixed(), match="mixes f32 with f16")
    a = Asm()
    a.matmul(5, R0_DATA, R1, R0_DATA2, M, K, N, flags=0x20).sync()  # 1-0x10, 0x40, 0x80: TRANSPOSE_B, PANEL_B, SEG_B, SEG_K, SEG_2D, F32_OUT, SCALE_TABLE
    _fault(a.build(), match="MATMUL has unknown flag bits 0x20")


def _mm_f32_mixed():
    a = Asm()
    a.matmul(5, R0_DATA, R1, R0_DATA2, M, K, N, dtype="f32", dtype2="f16").sync()
    return a.build()


def test_mixed_matmul_operand_sizes():
    """a of dtype2, b of dtype: an fp8 b of k*n bytes fits where an f16 one would not."""
    a = Asm()
    end = a.t.memory_end
    a.matmul(5, R0_DATA, end - K * N, R0_DATA2, M, K, N, dtype="fp8", dtype2="f16", flags=isa.F_PANEL_B).sync()
    sim.run(a.build(), {})
    a = Asm()
    a.matmul(5, R0_DATA, end - K * N, R0_DATA2, M, K, N, dtype="f16", dtype2="fp8").sync()
    _fault(a.build(), match="MATMUL operand b .* out of range")
