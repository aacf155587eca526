"""Compiled (numba) inner loops of the simulator: operand loads fused with their
widening to float32, f16 rounding fused with the store, and chunk moves.

Each replaces a numpy sequence that made 2-4 passes over the data with
temporaries (gather -> widening table lookup, f32 -> f16 cast -> scatter, record
gather -> scatter): bit for bit the same results, in one pass. fp8 widens through
the 256-entry table operands.py builds from the library cast; f16 by bit arithmetic
equal to numpy's cast on all 65536 inputs (tests/sim/test_jit.py). Rounding is
numpy's own f32 -> f16 conversion (npy_floatbits_to_halfbits: round to nearest
even, NaN keeps its top payload bits, never quieted), checked against astype over
every float32 (experiments/host_time/f16_exhaustive.py; tests/sim/test_jit.py
samples it). Both are written without branches so that LLVM vectorises them, and
indices are unsigned: numba then skips the negative-index wraparound that keeps
its loops from vectorising. All functions release the GIL (the kernels' worker
threads run them side by side on distinct tiles).

The file reads top-down: f16/fp8 loads and f16 stores by integer arithmetic; memory.move's
chunk moves between buffers (program load, host streams); the moves inside tile memory from
per-pair bases, which stage only what a write may touch (the exchange's and COPY's:
memory.move_pairs, memory.move_within); the read-back's block placement; warm (compile
everything beside loading); the same f16 loads and stores by the CPU's conversion
instructions (kernels.F16_CPU, checked by hw_f16_ok).
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from ..numba_probe import njit     # numba without its scipy.linalg probe

_JIT = dict(nogil=True, cache=True, boundscheck=False)
U = np.uint64


@njit(inline="always")
def _widen16(h):
    """f16 bits h (uint32) -> float32, as numpy's astype (npy_halfbits_to_floatbits: NaN
    payloads kept, never quieted), branch-free so that LLVM vectorises the loops."""
    sign = (h & np.uint32(0x8000)) << np.uint32(16)
    a = h & np.uint32(0x7FFF)
    normal = sign | ((a << np.uint32(13)) + np.uint32(0x38000000))     # exponent + 112
    special = sign | np.uint32(0x7F800000) | ((h & np.uint32(0x3FF)) << np.uint32(13))
    v = np.uint32(special if a >= np.uint32(0x7C00) else normal).view(np.float32)
    sub = np.float32(h & np.uint32(0x3FF)) * np.float32(2.0 ** -24)      # exact: m * 2**-24
    sub = -sub if sign else sub
    return sub if a < np.uint32(0x400) else v


@njit(**_JIT)
def load_f16(flat16, pos16, n, out):
    """out[i, j] = flat16[pos16[i] + j] widened: f16 operands (flat16: the tile memory as
    uint16, pos16: even byte positions / 2), out float32[len(pos16), n]."""
    for i in range(pos16.shape[0]):
        p = U(pos16[i])
        o = out[i]
        for j in range(U(n)):
            o[j] = _widen16(np.uint32(flat16[p + j]))


@njit(**_JIT)
def add_f16(flat16, p0, p1, st, k, n, out):
    """ADD's sum in float32: out[i, j] = src0[j] + src1[j] + src1[st + j] + ... (k partials
    at uint16 positions p1[i] + q*st[i]), added in that order -- the kernel's order, and
    numpy's `acc += partial` -- with no temporary per partial."""
    for i in range(p0.shape[0]):
        o = out[i]
        a = U(p0[i])
        for j in range(U(n)):
            o[j] = _widen16(np.uint32(flat16[a + j]))
        for q in range(U(k)):
            b = U(p1[i]) + q * U(st[i])
            for j in range(U(n)):
                o[j] += _widen16(np.uint32(flat16[b + j]))


@njit(**_JIT)
def widen16(h, out):
    """out[k] = float32 of f16 bits h[k] (1-D): the widening alone, for the tests."""
    for k in range(h.shape[0]):
        out[k] = _widen16(np.uint32(h[k]))


@njit(**_JIT)
def load_fp8(flat, pos, n, table, out):
    """out[i, j] = table[flat[pos[i] + j]]."""
    for i in range(pos.shape[0]):
        p = U(pos[i])
        o = out[i]
        for j in range(U(n)):
            o[j] = table[flat[p + j]]


@njit(**_JIT)
def load_panels(flat, pos, R, C, P, es, table, out):
    """b operands stored in AMP micro-panel order (isa.panel_order: rows [r0, r0+h),
    h = P or R mod P, stored transposed as [C, h] row-major, panel after panel),
    widened into row-major out[i, R, C]. es: element bytes (1: fp8 through the
    256-entry table; 2: f16, table unused). Written in output order: one tile's b is a few KiB, so
    the strided reads stay in cache while the writes stream."""
    for i in range(pos.shape[0]):
        p = U(pos[i])
        o = out[i]
        for r in range(U(R)):
            q = r % U(P)
            r0 = r - q
            h = min(U(P), U(R) - r0)
            row = o[r]
            e = r0 * U(C) + q                      # storage index of (r, 0); + c*h per column
            if es == 1:
                for c in range(U(C)):
                    row[c] = table[flat[p + e + c * h]]
            else:
                for c in range(U(C)):
                    k = p + U(2) * (e + c * h)
                    row[c] = _widen16(np.uint32(flat[k]) | (np.uint32(flat[k + U(1)]) << np.uint32(8)))


@njit(inline="always")
def _half(f):
    """numpy's float32 -> float16 bits (npy_floatbits_to_halfbits) of float32 bits f,
    branch-free: every case computed, the right one selected."""
    sign = (f >> np.uint32(16)) & np.uint32(0x8000)
    a = f & np.uint32(0x7FFFFFFF)
    # f16 normal range [2**-14, 65520): rebias the exponent, round the 13 dropped bits to even
    b = a - np.uint32(0x38000000)
    normal = (b + np.uint32(0x0FFF) + ((a >> np.uint32(13)) & np.uint32(1))) >> np.uint32(13)
    # below 2**-14: m * 2**(e-150) * 2**24 rounded to an integer, half to even (0 past 24 shifts)
    e = a >> np.uint32(23)
    m = (a & np.uint32(0x7FFFFF)) | np.uint32(0x800000)
    s = np.uint32(126) - np.minimum(e, np.uint32(126))          # >= 14 wherever it is used
    s = np.maximum(np.minimum(s, np.uint32(31)), np.uint32(1))   # keeps every shift defined
    qt = m >> s
    rem = m & ((np.uint32(1) << s) - np.uint32(1))
    half = np.uint32(1) << (s - np.uint32(1))
    up = (rem > half) | ((rem == half) & ((qt & np.uint32(1)) == np.uint32(1)))
    sub = qt + np.uint32(up)
    sub = sub if e >= np.uint32(102) else np.uint32(0)           # < 2**-25: 0 (and f32 subnormals)
    nanv = np.uint32(0x7C00) + np.maximum((a & np.uint32(0x7FFFFF)) >> np.uint32(13), np.uint32(1))
    h = normal if a >= np.uint32(0x38800000) else sub
    h = np.uint32(0x7C00) if a >= np.uint32(0x477FF000) else h    # rounds to 65536 or more: inf
    h = nanv if a > np.uint32(0x7F800000) else h
    return np.uint16(sign | h)


@njit(**_JIT)
def store_f16(flat16, pos16, x, scale):
    """flat16[pos16[i] + j] = f16 bits of x[i, j] * scale[i] (scale: float32[n], or empty
    for none); the product is float32, as numpy's `x *= scale` gives."""
    use = scale.shape[0] > 0
    for i in range(pos16.shape[0]):
        p = U(pos16[i])
        row = x[i]
        if use:
            s = scale[i]
            v = np.empty(row.shape[0], np.float32)
            for j in range(v.shape[0]):
                v[j] = row[j] * s
            row = v
        bits = row.view(np.uint32)
        for j in range(U(bits.shape[0])):
            flat16[p + j] = _half(bits[j])


@njit(**_JIT)
def f16_bits(x, out):
    """out[k] = f16 bits of x[k] (1-D float32): the rounding alone, for the tests."""
    bits = x.view(np.uint32)
    for k in range(U(bits.shape[0])):
        out[k] = _half(bits[k])


@njit(**_JIT)
def split_ok(dp, length, split):
    """True if no chunk's destination straddles position `split` (so the chunks below it
    and those at or above it write disjoint bytes and may be moved on two threads)."""
    for i in range(dp.shape[0]):
        if U(dp[i]) < U(split) and U(dp[i]) + U(length[i]) > U(split):
            return False
    return True


@njit(**_JIT)
def scatter_part(dst, dp, length, order, off, buf, lo, hi):
    """dst[dp[i]:+length[i]] = buf[off[k]:+length[i]] for i = order[k], in `order` (so the
    later chunk still wins where two overlap), for the chunks whose destination starts in
    [lo, hi): memory.move's writes, straight from the source buf (off = sp[order])."""
    for k in range(order.shape[0]):
        i = order[k]
        d = U(dp[i])
        if d >= U(lo) and d < U(hi):
            o = U(off[k])
            for b in range(U(length[i])):
                dst[d + b] = buf[o + b]



# ---- moves inside tile memory: chunk positions from per-pair bases (exchange.Plan; COPY) --
# A chunk k of pair c[k] moves src[sb[c[k]] + soff[k]:+length[k]] -> dst[db[c[k]] + doff[k]:+length[k]];
# positions are made here, chunk by chunk, instead of as arrays per move.
GRAIN = 9           # stage_mask: 512-byte granules (replaying a 27-layer run's exchanges:
#                     faster than 64 B ones, whose 15 MB of marks miss the cache, and than 4 KiB
#                     ones, which stage 12 % of the bytes)


@njit(**_JIT)
def hot_tiles(T, tile_bytes, sb, s_ext, db, d_ext, hot):
    """hot[t] = 1 where tile t's send extents and receive extents (at flat positions sb, db:
    tile t holds [t * tile_bytes, (t + 1) * tile_bytes)) may share a byte: their
    hulls ([lowest start, highest end) on the tile) intersect. Returns how many tiles are
    hot; 0 means no destination byte is a source byte (every chunk lies in its entry's
    extent, and an entry's extent in its own tile), so nothing needs staging."""
    s_lo = np.full(T, np.int64(1) << 62)
    s_hi = np.zeros(T, np.int64)
    d_lo = np.full(T, np.int64(1) << 62)
    d_hi = np.zeros(T, np.int64)
    for i in range(sb.shape[0]):
        if s_ext[i] > 0:
            t = sb[i] // tile_bytes
            s_lo[t] = min(s_lo[t], sb[i])
            s_hi[t] = max(s_hi[t], sb[i] + s_ext[i])
    for i in range(db.shape[0]):
        if d_ext[i] > 0:
            t = db[i] // tile_bytes
            d_lo[t] = min(d_lo[t], db[i])
            d_hi[t] = max(d_hi[t], db[i] + d_ext[i])
    n = 0
    for t in range(T):
        h = 1 if s_lo[t] < d_hi[t] and d_lo[t] < s_hi[t] else 0
        hot[t] = h
        n += h
    return n


@njit(**_JIT)
def stage_mask(sb, soff, db, doff, c, length, hot, tile_bytes, marks, epoch, mask):
    """mask[k] = 1 for chunk k whose source may share a byte with some chunk's destination
    (checked on hot tiles only, at 2**GRAIN-byte granules: coarse, a 1 only costs a staging copy).
    marks: uint8[flat size >> GRAIN + 1], entries equal to `epoch` are this exchange's marks
    (the caller clears them when the epoch wraps). Returns the staged bytes."""
    e = np.uint8(epoch)
    for k in range(c.shape[0]):
        p = c[k]
        L = length[k]
        if L > 0 and hot[db[p] // tile_bytes]:
            d = db[p] + doff[k]
            for g in range(d >> GRAIN, ((d + L - 1) >> GRAIN) + 1):
                marks[g] = e
    total = 0
    for k in range(c.shape[0]):
        p = c[k]
        L = length[k]
        m = 0
        if L > 0 and hot[sb[p] // tile_bytes]:
            s = sb[p] + soff[k]
            for g in range(s >> GRAIN, ((s + L - 1) >> GRAIN) + 1):
                if marks[g] == e:
                    m = 1
                    break
        mask[k] = m
        total += m * L
    return total


@njit(**_JIT)
def stage_gather(src, sb, soff, c, length, order, mask, off, buf, k0, k1):
    """Stage the masked chunks among order[k0:k1] (off[k]: chunk order[k]'s place in buf)."""
    for k in range(k0, k1):
        i = order[k]
        if mask[i]:
            s, o = U(sb[c[i]] + soff[i]), U(off[k])
            for b in range(U(length[i])):
                buf[o + b] = src[s + b]


@njit(**_JIT)
def stage_offsets(length, order, mask, off):
    """off[k] = where chunk order[k] sits in the staging buffer if masked (the masked lengths before it)."""
    o = U(0)
    for k in range(order.shape[0]):
        off[k] = o
        if mask[order[k]]:
            o += U(length[order[k]])


@njit(**_JIT)
def pairs_scatter(dst, db, doff, c, length, order, src, sb, soff, mask, off, buf):
    """The writes of chunks order[0], order[1], ... in that order (the later wins where two
    overlap): from the staging buffer where masked, else straight from the source."""
    for k in range(order.shape[0]):
        i = order[k]
        L = U(length[i])
        d = U(db[c[i]] + doff[i])
        if mask.shape[0] and mask[i]:
            o = U(off[k])
            for b in range(L):
                dst[d + b] = buf[o + b]
        else:
            s = U(sb[c[i]] + soff[i])
            for b in range(L):
                dst[d + b] = src[s + b]



@njit(**_JIT)
def place_blocks(out, blocks, r0, c0):
    """out[r0[i] + a, c0[i] + b] = blocks[i, a, b] (the read-back's placement of an op
    output's blocks in its tensor; where blocks overlap, the later wins, as numpy's
    fancy-indexed assignment gives)."""
    for i in range(blocks.shape[0]):
        for a in range(blocks.shape[1]):
            row = out[r0[i] + a]
            src = blocks[i, a]
            for b in range(blocks.shape[2]):
                row[c0[i] + b] = src[b]


def warm() -> None:
    """Compile (or load from numba's on-disk cache) every signature the simulator calls,
    with empty operands (no loop runs), roughly in the order a run first needs them. A
    fresh checkout has no cache: compiling takes ~3 s of one core, which sim.run overlaps
    with loading the program and the host streams by calling this on a second thread.
    A signature missing here is only compiled where first called, as before."""
    u8, u16, f32 = np.zeros(0, np.uint8), np.zeros(0, np.uint16), np.zeros(0, np.float32)
    i32, i64 = np.zeros(0, np.int32), np.zeros(0, np.int64)
    f32x2, f32x3 = np.zeros((0, 1), np.float32), np.zeros((0, 1, 1), np.float32)
    for ln in (i64, i32):                       # chunk lengths and orders: int64, or int32
        split_ok(i64, ln, 0)
        scatter_part(u8, i64, ln, ln, i64, u8, 0, 0)
    place_blocks(f32x2, f32x3, i64, i64)       # the read-back's (compiler/readback.py)
    u8t = np.zeros(0, np.uint8)                 # the exchange's moves (memory.move_pairs)
    hot_tiles(0, 1, i64, i32, i64, i32, u8t)
    stage_mask(i64, i32, i64, i32, i32, i32, u8t, 1, u8t, 1, u8t)
    stage_offsets(i32, i32, u8t, i64)
    stage_gather(u8, i64, i32, i32, i32, i32, u8t, i64, u8, 0, 0)
    pairs_scatter(u8, i64, i32, i32, i32, i32, u8, i64, i32, u8t, i64, u8)
    load_panels(u8, i64, 1, 1, 1, 1, f32, f32x3)
    warm_kernels()


# ---- f16 conversions by the CPU's own instructions --------------------------------------
# x86 F16C (vcvtph2ps / vcvtps2ph) and ARMv8 convert f16 <-> f32 in one instruction per
# vector, round to nearest even, exactly as numpy's integer code does but for NaNs: the
# CPU quiets a signalling NaN (sets the top payload bit), numpy keeps the payload as it
# is. So each loop converts with the CPU and notes whether a NaN went through (a float
# compare, which keeps the loop vectorised: numba widens uint32 arithmetic to 64-bit
# lanes, which is what slows _widen16 / _half above), then, only if one did, gives
# those elements numpy's bits. Equal to numpy's casts on all 65536 f16 and 2**32
# float32 inputs (hw_f16_ok checks every f16 and numpy's case boundaries before the
# kernels use them; experiments/host_time/f16_exhaustive.py all 2**32); 5-9x faster
# than _widen16 / _half, which remain the fallback.

@intrinsic
def _cpu_h2f(typingctx, h):
    def codegen(context, builder, signature, args):
        return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())
    return types.float32(types.uint16), codegen


@intrinsic
def _cpu_f2h(typingctx, x):
    def codegen(context, builder, signature, args):
        return builder.bitcast(builder.fptrunc(args[0], ir.HalfType()), ir.IntType(16))
    return types.uint16(types.float32), codegen


@njit(inline="always")
def _nan16(h):
    """numpy's float32 for f16 NaN bits h: sign, all-ones exponent, the payload shifted."""
    h32 = np.uint32(h)
    return np.uint32(((h32 & np.uint32(0x8000)) << np.uint32(16)) | np.uint32(0x7F800000)
                     | ((h32 & np.uint32(0x3FF)) << np.uint32(13))).view(np.float32)


@njit(inline="always")
def _widen_row_hw(src, p, n, o):
    """o[j] = f16 src[p + j] widened, j < n (numpy's bits)."""
    nan = False
    for j in range(U(n)):
        v = _cpu_h2f(src[p + j])
        nan |= v != v
        o[j] = v
    if nan:
        for j in range(U(n)):
            if o[j] != o[j]:
                o[j] = _nan16(src[p + j])


@njit(inline="always")
def _half_row_hw(x, s, use, dst, p):
    """dst[p + j] = numpy's f16 bits of x[j] (times s if use: a float32 product)."""
    nan = False
    for j in range(U(x.shape[0])):
        v = x[j] * s if use else x[j]
        nan |= v != v
        dst[p + j] = _cpu_f2h(v)
    if nan:
        for j in range(U(x.shape[0])):
            v = x[j] * s if use else x[j]
            if v != v:
                a = np.float32(v).view(np.uint32)
                m = (a & np.uint32(0x7FFFFF)) >> np.uint32(13)
                dst[p + j] = np.uint16(((a >> np.uint32(16)) & np.uint32(0x8000))
                                       | (np.uint32(0x7C00) + max(m, np.uint32(1))))


@njit(**_JIT)
def load_f16_hw(flat16, pos16, n, out):
    """load_f16 by the CPU's conversion."""
    for i in range(pos16.shape[0]):
        _widen_row_hw(flat16, U(pos16[i]), n, out[i])


@njit(**_JIT)
def add_f16_hw(flat16, p0, p1, st, k, n, out):
    """add_f16 by the CPU's conversion: the same f32 sums in the same order. Each
    partial is widened into `row` first (numpy's bits, NaNs included), then added."""
    row = np.empty(n, np.float32)
    for i in range(p0.shape[0]):
        o = out[i]
        _widen_row_hw(flat16, U(p0[i]), n, o)
        for q in range(U(k)):
            _widen_row_hw(flat16, U(p1[i]) + q * U(st[i]), n, row)
            for j in range(U(n)):
                o[j] += row[j]


@njit(**_JIT)
def store_f16_hw(flat16, pos16, x, scale):
    """store_f16 by the CPU's conversion; the scaling fused (x[i, j] * scale[i], a float32
    product, as numpy's), no temporary row."""
    use = scale.shape[0] > 0
    for i in range(pos16.shape[0]):
        _half_row_hw(x[i], scale[i] if use else np.float32(1), use, flat16, U(pos16[i]))


_HW_OK: list = []


def _target_converts_f16() -> bool:
    """Whether numba's target CPU converts f16 itself. On x86 only with F16C: without it
    (NUMBA_CPU_NAME=generic, or a CPU before Ivy Bridge) LLVM lowers the conversion to a
    runtime-library call numba does not link, and the first call crashes the process
    instead of failing to compile (issue #24), so the check below must not even run."""
    import platform
    if platform.machine().lower() not in ("x86_64", "amd64", "i386", "i686"):
        return True
    import numba
    from llvmlite import binding
    name = numba.config.CPU_NAME
    if name and name != "host":
        return "+f16c" in (numba.config.CPU_FEATURES or "")
    return "+f16c" in binding.get_host_cpu_features().flatten()


def hw_f16_ok() -> bool:
    """Whether the CPU-conversion loops give numpy's bits here: every f16 widened, and
    float32 rounding at each boundary of numpy's cases (both signs), checked once per
    process against astype. False (the arithmetic loops then serve) if they do not or
    do not compile."""
    if not _HW_OK and not _target_converts_f16():
        _HW_OK.append(False)
    if not _HW_OK:
        try:
            h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
            w = np.empty((1, h.size), np.float32)
            load_f16_hw(h, np.zeros(1, np.int64), h.size, w)
            ok = bool(np.array_equal(w[0].view(np.uint32), h.view(np.float16).astype(np.float32).view(np.uint32)))
            b = np.concatenate([np.arange(a, a + 0x3000, dtype=np.uint32) for a in (
                0, 0x32FFE800, 0x387FE800, 0x477FE800, 0x7F7FE800, 0x7FBFF800, 0x7FFFD000)]
                + [np.arange(0x33000000, 0x38800000, 4099, dtype=np.uint32)])
            b = np.concatenate([b, b | np.uint32(0x80000000)])
            got = np.empty(b.size, np.uint16)
            store_f16_hw(got, np.zeros(1, np.int64), b.view(np.float32)[None], np.zeros(0, np.float32))
            with np.errstate(all="ignore"):
                ok = ok and bool(np.array_equal(got, b.view(np.float32).astype(np.float16).view(np.uint16)))
        except Exception:          # no f16 conversion this LLVM can lower: keep the arithmetic loops
            ok = False
        _HW_OK.append(ok)
    return _HW_OK[0]


def warm_kernels() -> None:
    """warm's part for the kernels' f16 loops: the CPU-conversion ones (compiled by their
    check) if they pass it, else the arithmetic ones."""
    u16, f32x2, i64 = np.zeros(0, np.uint16), np.zeros((0, 1), np.float32), np.zeros(0, np.int64)
    if hw_f16_ok():
        add_f16_hw(u16, i64, i64, i64, 0, 0, f32x2)
    else:
        load_f16(u16, i64, 0, f32x2)
        store_f16(u16, i64, f32x2, np.zeros(0, np.float32))
        add_f16(u16, i64, i64, i64, 0, 0, f32x2)
