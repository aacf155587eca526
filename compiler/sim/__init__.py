"""The tile simulator: the only "hardware" (docs/architecture.md §4).

    run(program, streams) -> SimResult      raises MachineFault when the machine refuses

It sees only the lowered Program (compiler.lower.program) and the host streams
(name -> 1-D uint8 bytes). Tile memory is bytes; tensors exist only at their
placed addresses; every tile fetches its instructions from its own memory.

  memory.py    tile memory, flat positions, chunked gather/scatter movers
  load.py      loading code/tables/profile areas; host in/out streams
  decode.py    word 0 (op | dtype << 8 | dtype2 << 16 | flags << 24) rules per opcode
  kernels.py   the kernels, batched across tiles: worker slices, operand rules, loads and
               stores, the dispatch (Kernels), its opcodes in two mixins:
  matmul_kernels.py  MATMUL / ADD / COPY (segments.py: MATMUL's b in segments, F_SEG_B, or rectangles, F_SEG_2D)
  vector_kernels.py  GELU / BIAS / LAYERNORM / SOFTMAX / CAST / ONLINE_SOFTMAX / ROWSCALE
  merge_kernel.py    MERGE (split-key attention's merge of partial states)
  operands.py  grouping of identical instances, operand widening, f16 rounding, scratch
  fmath.py     the f32 arithmetic of the vector kernels (erf, GELU, layernorm, softmax, fp8)
  exchange.py  the exchange phase: table decoding, matching, BSP transfer
  repeat.py    REPEAT: loop state, relocation of fetched code and exchange-table words
  run.py       fetch/decode, supersteps, sync, cycles, profile samples
  jit.py       compiled (numba) inner loops: operand loads fused with widening, f16
               rounding fused with the store, chunk moves
  oracle.py    an independent cycle oracle: per-step cycles from the program and docs/architecture.md §2 alone
  bench.py     synthetic full-size programs: python -m compiler.sim.bench [target] [rounds]
               and python -m compiler.sim.bench [target] repeat [iters]

Host speed (no byte depends on it): a group of identical kernels is split into
slices run on worker threads (kernels.WORKERS, the host's cores; numpy releases the
GIL), BLAS runs single-threaded inside the simulator (threadpoolctl: thousands of
small per-tile products), an exchange's matching and chunking is planned once per
distinct EXCH set and reused while the table words agree but for their (relocated)
addresses (exchange.PlanCache), and the per-element work outside BLAS runs in
compiled loops (jit.py: an operand's gather and widening, a result's f16 rounding
and scatter, each one pass; byte moves through one kept staging buffer), checked
bit for bit against the numpy code they replace (tests/sim/test_jit.py).

Decisions the machine takes where isa.py is silent (the lowering must match):
  * instruction word 0 is validated per opcode (decode.RULES): any dtype, dtype2
    or flag bit an opcode does not define is an invalid instruction. SYNC, END,
    EXCH, COPY, REPEAT, HOST: all zero. ADD: dtype 0 or f16, no flags. GELU (F_ERF),
    LAYERNORM (F_LN_STATS | F_LN_HALF), SOFTMAX (F_SM_DEFER), ONLINE_SOFTMAX (F_FIRST),
    ROWSCALE (F_RECIP | F_ADD): dtype 0 or f16, dtype2 0.
  * MATMUL: dtype (b) f16, fp8 (e4m3fn) or f32; dtype2 (a) 0 = same, f16, fp8,
    f32; f16/fp8 mix freely, f32 only with f32. Flag F_TRANSPOSE_B reads b as
    [n, k]; F_PANEL_B reads b in AMP micro-panel order (isa.panel_order, height
    target.amp_panel_elems[b's dtype]). A b dtype listed there (fp8) is read only
    that way: without F_PANEL_B, or with F_TRANSPOSE_B too, the MATMUL is refused;
    F_PANEL_B on an unlisted dtype is refused. Host input streams named in
    Program.in_panels are rearranged by the host into that order before the
    descriptors copy them. Out is always f16: the products' exact sum rounded once to f32
    (compiler/exact.py matmul_f32: an order-free definition of the AMP's f32 accumulation,
    so no host's BLAS changes a bit), times scale in f32, rounded once to f16.
    Cost matmul_cycles(m, k, n, dtype_b, dtype_a): PopLibs' ConvPartial1x1Out estimate
    (compiler/costs/amp.py), the machine splitting the m rows over its workers as
    partitionConvPartialByWorker does (worker w: rows wm/W .. (w+1)m/W, floored).
  * Vector kernels compute in f32 (fmath.py; exp is fmath.exp, f32 operations only, not
    numpy's per-CPU variants) and round once to f16; sizes
    (nelem, rows, cols) must be > 0. GELU tanh form is evaluated as
    x / (1 + exp(-2u)) (= 0.5 x (1 + tanh u), without the cancellation for
    u << 0); erf form as 0.5 x erfc(-x/sqrt2) with a rational erfc (relative error
    < 1.2e-7; GELU(-inf) is NaN in both forms). LAYERNORM: two-pass mean and
    biased variance, rstd = 1/sqrt(var + eps). SOFTMAX: exp(s - rowmax) / rowsum
    over the first `valid` columns (word 6; 0 = all, > cols is refused), +0 in
    the others, which are not read; cost softmax_cycles(rows, cols, scale != 1.0)
    whatever `valid` is (no scale multiply at a scale word of 1.0) (a row of only -inf gives NaN; NaN/inf inputs propagate).
    With F_SM_DEFER: out = f16(exp(s - rowmax)) (no division) and word 7's f32[rows] =
    numpy's float32 sum of each row's f16 outputs (as ONLINE_SOFTMAX sums its l); cost
    softmax_cycles(..., deferred): no reciprocal, no by-row multiply.
  * CAST: (dtype, dtype2) must be (fp8, f16) or (f16, fp8). f16 -> fp8 divides by
    scale in f32 and rounds to nearest even, saturating: |x| > 448 (inf included)
    becomes +-448, NaN stays NaN. fp8 -> f16 multiplies in f32, rounds once.
  * F_SEG_B (MATMUL): the b word, as fetched, is the address of a segment table in the
    tile's own table blob (4-byte aligned, inside it: word 0 nseg >= 1, then nseg
    (addr, len) pairs, every word inside the blob); the segments are b's column ranges
    in order (with F_SEG_K its row ranges), their lengths sum to n (k), every one but
    the last whole AMP output-channel groups (F_SEG_K: input-channel groups and, with
    F_PANEL_B, micro-panels); each segment is checked as a b operand of its own (range,
    16-byte alignment, interleaved region, bank separation from a). A REPEAT may
    relocate a segment's addr word (read through the loop's relocation, as EXCH table
    words are). F_SEG_K without F_SEG_B, or F_SEG_B with F_TRANSPOSE_B, is refused. Cost:
    the unsegmented MATMUL's (segments.py, compiler/costs/amp.py).
    With F_SEG_2D too the entries are rectangles (addr, r0, c0, rows, cols): each edge on
    a whole in-channel group (and micro-panel with F_PANEL_B) or out-channel group, or at
    k (n); together they tile b exactly (a group block covered twice is refused); each a
    b operand of its own as above. F_SEG_2D without F_SEG_B, or with F_SEG_K or
    F_TRANSPOSE_B, is refused. Cost: the unsegmented MATMUL's.
  * F_SCALE_TABLE (MATMUL, CAST): the scale word, as fetched (relocated in a REPEAT
    body), is the address of the f32 scale; it must be 4-byte aligned and lie in
    the tile's own table blob [table_addr, table_addr + its length), else refused
    (scales.py). Reading it costs nothing extra.
  * ONLINE_SOFTMAX: state = m at state, l at state + 4*rows, c at state + 8*rows
    (f32). A running max of -inf (no finite score yet) enters the exponents as 0,
    so fully masked rows give out 0, c 0 (l stays 0) instead of NaN. With
    F_FIRST the stored state is not read and c = 0. If out overlaps state, the
    state is written last.
  * ROWSCALE: vec is f32[rows]; F_RECIP uses 1/vec (f32 division); without F_ADD
    src1 is neither read nor checked. out = src0*v + src1, rounded once.
  * MERGE: parts f16[splits, rows, cols], stats f32[2, splits, rows] (m, then l);
    c_j = exp(m_j - max m), out = (sum_j c_j parts_j) * (1 / sum_j c_j l_j), f32
    sums in split order, rounded once (merge_kernel.py); cost merge_cycles.
  * REPEAT: count in [1, 2**31), body >= 1 instructions inside region 0, ending
    with SYNC, holding no END; a REPEAT inside it (a nested loop, itself the first
    instruction of a superstep, its body inside the enclosing body, which it may end
    with its own last SYNC) is pushed on a stack of running loops. Every
    running tile must fetch REPEAT as the first instruction of the same
    superstep with the same count and the same number of SYNCs in its body (the
    stored body is decoded once, at REPEAT; the tiles' agreement is re-checked
    at every iteration end); a mismatch is a fault naming the tile that differs
    from the majority ("REPEAT mismatch ... (deadlock)"). REPEAT itself costs 0
    cycles and counts as one executed instruction; its body starts in the same
    superstep. The relocation table (nreloc entries, 4-byte aligned, in range)
    is read once, at REPEAT. An entry's word address must be 4-byte aligned and
    lie in the tile's loaded exchange table or be an argument word (words 1..7)
    of an instruction of the body; anything else, or a word listed twice, is
    refused. Iterations count from 0; a relocated word reads as
    (stored + i * stride) mod 2**32 (negative strides as two's complement; a
    word listed by several running loops: the sum of their terms) in
    instruction fetches and EXCH table reads during the loop only; memory is
    never changed, and after the loop the stored values are read again. A
    superstep's exchange uses the relocation of the iteration it belongs to.
    Supersteps inside the loop are counted (and profiled) dynamically.
  * HOST: the rows it names (of Program.step_in for dir 0, step_out for dir 1)
    must exist and name the executing tile; each moves at host_off + delta
    (delta as a signed 32-bit word), checked like the host descriptors moved
    before and after the run; a panel stream is never stepped. A tile with a
    HOST runs no kernel and no EXCH in that superstep; the superstep ("host")
    costs host_cycles of the bytes every tile's HOSTs moved in it (one link for
    the chip), on each tile taking part.
  * MATMUL m, k, n and ADD nelem must be > 0; ADD nsrc1 may be 0 (out = src0);
    with nsrc1 > 1 the ADD stride (bytes) must keep every partial 8-byte aligned.
    A COPY of 0 bytes is a no-op (it still costs the kernel overhead).
  * COPY row_bytes and both strides must be multiples of COPY_WORD even for one
    row (write 0 or row_bytes as the stride of a single row).
  * EXCH table_addr is 4-byte aligned and holds nsend send entries followed by
    nrecv receive entries. A tile may issue several EXCH in one superstep: their
    entries are matched in program order. Exchange entries are only range
    checked (no alignment / region rule). Rows of one receive may overlap: the
    later row wins. A superstep may hold EXCH on some tiles and kernels on
    others (never both on one tile): the exchange happens after the compute.
  * Cycles: a tile's sample is its kernels' cycles, or the whole exchange-phase
    cost if it issued EXCH (0 if idle); step cycles = max over tiles + sync.
    A superstep is counted when any tile executes anything before its SYNC/END
    (a final END-only step is not a superstep). Samples past profile_bytes are
    not written; tile_cycles for those steps come from the machine's counters
    (SimResult.profiled_steps says how many were read back).
  * host_cycles = ceil(in bytes / host_bytes_per_cycle) + ceil(out bytes / ...).
  * Program.tiles must equal the target's tiles.
"""
from .fault import MachineFault
from .run import SimResult, run

__all__ = ["MachineFault", "SimResult", "run"]
