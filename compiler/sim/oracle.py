"""An independent cycle oracle: every superstep's cycles re-derived from the lowered
program and the machine table of docs/architecture.md §2, sharing no code with the cost model.

    step_cycles(program) -> int64[executed supersteps]      (sync included)
    host_cycles(program) -> int                             (host in + out)

It reads only the Program: instruction words decoded from the code bytes with the
encoding constants of compiler/isa.py, exchange entries from the encoded table bytes,
the REPEAT relocation table, the host stream descriptors, and the raw figures of the
target dict the program carries (the YAML). It imports neither target.py's cost
functions nor expand's analysis nor the simulator's kernels, and executes nothing: a
wrong cost anywhere in those shows up as a disagreement (tests/sim/test_oracle.py).

The machine, as docs/architecture.md §2 states it:
- a superstep is every tile running to its SYNC; it lasts as long as its slowest tile,
  plus one sync (`sync_cycles`). A tile's time is the sum of its kernels, or, if it
  takes part in the step's exchange (EXCH), the whole exchange phase;
- an exchange phase: each tile sends at most, and receives at most,
  `exchange_bytes_per_cycle`, whatever its neighbours do; the phase lasts as long as
  its busiest sender or receiver plus `exchange_phase_cycles`;
- a MATMUL costs what PopLibs estimates for the AMP vertex Poplar would run for it
  (poplinCycleEstimators.cpp ConvPartial1x1Out -> PerformanceEstimation.hpp
  getConvPartial1x1SupervisorCycleEstimate; read again for this file, see mm_cycles): the
  type is the slower operand's (`amp_macs_per_cycle`); k in groups of `amp_in_group`, n in
  groups of `amp_out_group` (= the conv units; ragged groups pay whole); the m rows split
  over the `workers` as ConvUtil.cpp's partitionConvPartialByWorker does (worker w: rows
  floor(w m / W) .. floor((w+1) m / W)); each pass costs W x its slowest worker (or
  W x its fastest + 14), a worker's time by its rows (core loop of in x out / rate cycles
  a row); passes load weights (out_group x in_group x element bytes at
  `amp_weight_load_bytes_per_cycle`); the first k group zeroes the partials; supervisor
  loop overheads per k and n group; half/float activations accumulate f32 partials and
  pay a separate f32 -> f16 cast (ConvPlan.cpp estimateCastCycles, with the 64-bit
  `vector_bytes_per_cycle`); FP8 x FP8 runs the QUARTER vertex (half partials, no cast);
  flagged F_F32_OUT (a k-split's f32 partials) it pays no cast: a reduction follows;
- an ADD of two f16 sources costs what popops estimates for BinaryOp1D ADD (per worker 26 +
  3 cycles per 4-half vector of its ceil(n/W) elements, x W, + 11); of one or three and more
  sources, its strided reduction (getCyclesEstimateForStridedReduce: per worker 15 + per vector
  of 4 outputs 13 + sources, x W), or with three or more, poplin's ReduceAdd where cheaper
  (getReduceCycleEstimate: 32 + per 8-output loop 3 x sources + 8, x W); with dtype2 f32
  (f32 partials to f16) the cheaper of ReduceAdd<half, float> (32 + per 4-output loop
  3 x sources + 6, x W) and the float-partials strided reduction (per 2 outputs 10 + sources);
- a BIAS costs popops' BroadcastVectorInner1D ADD estimate (vectorInnerMultiVertexAddCycles
  + its preamble; see bias_cycles);
- GELU, SOFTMAX, ONLINE_SOFTMAX, LAYERNORM, ROWSCALE and CAST cost the sum of the popops /
  popnn vertex estimates their PopLibs counterparts run (see vector_cycles and _cast): popnn's
  GELU non-linearity; softmax = scale (none at a scale word of 1.0), row max, subtract, exp,
  row sum, reciprocal, multiply (F_SM_DEFER: neither of the last two);
  the online softmax adds the f32 state updates (a row reduction with fewer rows than workers
  runs in popops' two stages: each row cut for the idle workers, then the pieces reduced);
  layer norm = two row reductions, the f32 statistics, whitening, gamma and beta; ROWSCALE a
  multiply by row (+ an ADD; with F_RECIP the f32 reciprocal of the rows first); CAST popops'
  Cast1D. A single row's per-row value is a scalar broadcast, its gamma / beta element-wise;
  an f32 per-row value (ROWSCALE's vector, the online max, LayerNorm's mean and invStdDev) is
  cast to f16 (Cast1D) before the f16 vertex that applies it;
- a MERGE (split-key attention's merge of s partial states of r rows x c) costs the popops
  vertices a Poplar program would run for it (see merge_cycles): max, subtract, exp,
  multiply and sum of the f32 statistics (halving trees of BinaryOp1D for the two
  reductions over the splits, a copy broadcasting the max), c to f16, a by-row multiply
  of the s x r rows, the reduction of the s partial outputs (as ADD's), 1/L applied as ROWSCALE;
- a COPY costs `kernel_overhead_cycles` plus its bytes at `copy_bytes_per_cycle` (Poplar's
  own copy: assumed);
- REPEAT costs nothing: its body runs `count` times (relocation moves addresses; the
  oracle re-derives an iteration's costs only if a relocated word is one a cost reads);
- a MATMUL flagged F_SEG_B reads b in segments, each a range of its columns (F_SEG_K: of
  its rows) at its own address (isa.py): the vertex reads its weights through one
  pointer per (conv group, in-channel group, out-channel group), so each segment pays
  for its own whole groups (the oracle counts them from the segment table; the machine
  admits only whole groups but in the last segment, so this is the unsegmented figure);
  with F_SEG_2D the segments are rectangles (addr, r0, c0, rows, cols): out-channel groups
  counted along the rectangles at row 0, in-channel groups along those at column 0;
- a MATMUL or CAST flagged F_SCALE_TABLE reads its scale from an f32 of its own tile's
  table instead of the instruction word: no cost of its own, but the address, in every
  iteration the relocation table gives it, must lie in that table (checked here);
- host streams move at `host_bytes_per_cycle`, in and out each rounded up; a HOST
  superstep (stepped rows moved inside the run) too, the bytes of every tile's HOST of
  that superstep summed (one host link for the chip), on each tile taking part.
"""
from __future__ import annotations

import numpy as np

from .. import isa
from .oracle_kernels import COST_WORDS, ENTRY_COST_WORDS, SCALE_WORD, _Figures, amp_type, kernel_cycles


class Oracle:
    def __init__(self, program):
        p = program
        self.p, self.f = p, _Figures(dict(p.target))
        self.T = T = len(p.code_addr)
        code_off = np.asarray(p.code_off, np.int64)
        self.words = np.frombuffer(np.ascontiguousarray(p.code, np.uint8).tobytes(), "<u4").astype(np.int64)
        self.words = self.words.reshape(-1, isa.INSTR_WORDS)
        n = np.diff(code_off) // isa.INSTR_BYTES
        self.tile = np.repeat(np.arange(T), n)
        self.pc = np.arange(len(self.tile)) - np.repeat(code_off[:-1] // isa.INSTR_BYTES, n)
        op = self.words[:, 0] & 0xFF
        self.op = op
        # static superstep of each instruction (a REPEAT body counted once)
        sync = (op == isa.SYNC).astype(np.int64)
        before = np.cumsum(sync) - sync
        first = np.repeat(np.cumsum(np.r_[0, n[:-1]]), n)
        self.step = before - before[first]          # SYNCs before it on its own tile
        nsync = np.bincount(self.tile, sync, T).astype(np.int64)
        if len(set(nsync.tolist())) > 1:
            raise ValueError(f"tiles disagree on the number of supersteps: {sorted(set(nsync.tolist()))}")
        self.nsync = int(nsync[0]) if T else 0
        tab = np.ascontiguousarray(p.table, np.uint8).tobytes()
        self.table = np.frombuffer(tab[:len(tab) // 4 * 4], "<u4").astype(np.int64)
        self.table_off = np.asarray(p.table_off, np.int64)
        self.table_addr = np.asarray(p.table_addr, np.int64)
        self.code_addr = np.asarray(p.code_addr, np.int64)

    def table_index(self, tile, addr):
        """Global table-word index of absolute address `addr` on `tile`."""
        off = self.table_off[tile] + (addr - self.table_addr[tile])
        if np.any(off % 4) or np.any(addr < self.table_addr[tile]) or \
                np.any(addr - self.table_addr[tile] >= np.diff(self.table_off)[tile]):
            raise ValueError("a table address lies outside its tile's exchange table")
        return off // 4

    # ---- one evaluation of the whole program's static supersteps ----------------
    def costs(self, words, table):
        """Per static superstep and tile: (cycles int64[S, T]). Uses `words`
        (instruction words) and `table` (table words) as given (relocated or not)."""
        T, S, f = self.T, self.nsync + 1, self.f
        op = words[:, 0] & 0xFF
        tile, step = self.tile, self.step
        comp = np.zeros((S, T), np.int64)
        kern = ~np.isin(op, (isa.END, isa.SYNC, isa.EXCH, isa.REPEAT, isa.HOST))
        seg = self.seg_groups(words, table)
        np.add.at(comp, (step[kern], tile[kern]), kernel_cycles(op[kern], words[kern], f, seg[kern]))
        ex = np.flatnonzero(op == isa.EXCH)
        send = np.zeros((S, T), np.int64)
        recv = np.zeros((S, T), np.int64)
        took = np.zeros((S, T), bool)
        took[step[ex], tile[ex]] = True
        if len(ex):
            ns, nr = words[ex, 2], words[ex, 3]
            ne = ns + nr
            base = self.table_index(tile[ex], words[ex, 1])
            inst = np.repeat(np.arange(len(ex)), ne)
            j = np.arange(len(inst)) - np.repeat(np.cumsum(ne) - ne, ne)
            at = base[inst] + j * isa.ENTRY_WORDS
            nbytes = table[at + 2] * table[at + 3]
            is_send = j < ns[inst]
            np.add.at(send, (step[ex][inst][is_send], tile[ex][inst][is_send]), nbytes[is_send])
            np.add.at(recv, (step[ex][inst][~is_send], tile[ex][inst][~is_send]), nbytes[~is_send])
        worst = np.maximum(send.max(1, initial=0), recv.max(1, initial=0))
        phase = f.exchange_phase_cycles + -(-worst // f.exchange_bytes_per_cycle)
        cyc = np.where(took, phase[:, None], comp)
        h = np.flatnonzero(op == isa.HOST)
        if len(h):
            link = np.zeros((S, 2), np.int64)            # bytes in, out per superstep
            for dr, tab in ((0, self.p.step_in), (1, self.p.step_out)):
                k = h[words[h, 1] == dr]
                size = np.r_[0, np.cumsum(np.asarray(tab["row_bytes"], np.int64) * np.asarray(tab["rows"], np.int64))]
                np.add.at(link[:, dr], step[k], size[words[k, 2] + words[k, 3]] - size[words[k, 2]])
            hc = -(-link // f.host_bytes_per_cycle)
            cyc[step[h], tile[h]] = hc[step[h]].sum(1)
        return cyc

    def seg_groups(self, words, table) -> np.ndarray:
        """Per instruction [n, 2], a MATMUL flagged F_SEG_B: the AMP output-channel groups
        of its segments (column ranges), or with F_SEG_K its input-channel groups (row
        ranges), each segment counted whole (0 elsewhere), read from its segment table in
        its tile's table (word 0 nseg, then addr and length per segment); the segments
        must hold the MATMUL's n (k)."""
        out = np.zeros((len(words), 2), np.int64)
        op, fl = words[:, 0] & 0xFF, words[:, 0] >> 24
        i = np.flatnonzero((op == isa.MATMUL) & ((fl & isa.F_SEG_B) != 0))
        if not len(i):
            return out
        rect = (fl[i] & isa.F_SEG_2D) != 0
        if rect.any():
            out[i[rect]] = self._rect_groups(words[i[rect]], self.tile[i[rect]], table)
            i = i[~rect]
            if not len(i):
                return out
        rows = (fl[i] & isa.F_SEG_K) != 0
        base = self.table_index(self.tile[i], words[i, 2])
        nseg = table[base]
        whole = np.where(rows, words[i, 5], words[i, 6])                # k or n
        if (nseg < 1).any() or (nseg > whole).any():
            raise ValueError("a segmented MATMUL's table holds no segments, or more than its k or n")
        inst = np.repeat(np.arange(len(i)), nseg)
        j = np.arange(len(inst)) - np.repeat(np.cumsum(nseg) - nseg, nseg)
        length = table[base[inst] + 1 + j * isa.SEG_WORDS + 1]
        if not np.array_equal(np.bincount(inst, length, len(i)).astype(np.int64), whole):
            raise ValueError("a segmented MATMUL's segments do not hold its k or n")
        dt, da = amp_type(words[i])
        rate = lambda c: np.vectorize(lambda x: self.f.amp_macs_per_cycle[isa.DTYPE_NAMES[int(x)]])(c)
        code = np.where(rate(da) < rate(dt), da, dt)
        fig = lambda key: np.vectorize(lambda x: getattr(self.f, key)[isa.DTYPE_NAMES[int(x)]])(code)
        g = np.where(rows, fig("amp_in_group"), fig("amp_out_group"))
        out[i, rows.astype(np.int64)] = np.bincount(inst, -(-length // g[inst]), len(i)).astype(np.int64)
        return out

    def _rect_groups(self, words, tiles, table) -> np.ndarray:
        """[n, 2] out- and in-channel groups of F_SEG_2D MATMULs (isa.py): each rectangle's
        own whole groups, columns counted along the rectangles at row 0, rows along those at
        column 0 (the rectangles tile b; the machine checks that)."""
        base = self.table_index(tiles, words[:, 2])
        nseg = table[base]
        if (nseg < 1).any():
            raise ValueError("a segmented MATMUL's table holds no rectangles")
        inst = np.repeat(np.arange(len(words)), nseg)
        j = np.arange(len(inst)) - np.repeat(np.cumsum(nseg) - nseg, nseg)
        e = base[inst] + 1 + j * isa.SEG2_WORDS
        r0, c0, rl, cl = (table[e + x] for x in (1, 2, 3, 4))
        dt, da = amp_type(words)
        rate = lambda c: np.vectorize(lambda x: self.f.amp_macs_per_cycle[isa.DTYPE_NAMES[int(x)]])(c)
        code = np.where(rate(da) < rate(dt), da, dt)
        fig = lambda key: np.vectorize(lambda x: getattr(self.f, key)[isa.DTYPE_NAMES[int(x)]])(code)[inst]
        og, ig = fig("amp_out_group"), fig("amp_in_group")
        n = len(words)
        cols = np.bincount(inst, np.where(r0 == 0, cl, 0), n).astype(np.int64)
        rows = np.bincount(inst, np.where(c0 == 0, rl, 0), n).astype(np.int64)
        if not (np.array_equal(cols, words[:, 6]) and np.array_equal(rows, words[:, 5])):
            raise ValueError("a segmented MATMUL's rectangles do not span its k and n")
        return np.stack([np.bincount(inst, np.where(r0 == 0, -(-cl // og), 0), n),
                         np.bincount(inst, np.where(c0 == 0, -(-rl // ig), 0), n)], 1).astype(np.int64)

    def check_scales(self, corners):
        """F_SCALE_TABLE words address an f32 of their tile's table in every iteration
        (relocation is linear in each loop's iteration: the corners of the iteration
        box, given as code-word offsets, bound it)."""
        for op, wd in SCALE_WORD.items():
            i = np.flatnonzero((self.op == op) & ((self.words[:, 0] >> 24 & isa.F_SCALE_TABLE) != 0))
            for off in corners if len(i) else ():
                self.table_index(self.tile[i], self.words[i, wd] + off[i, wd])

    def loops(self):
        """The REPEATs as (first static superstep, static supersteps of the body, count,
        code strides, table strides, costly), outermost first where two start together.
        Every tile must issue the same REPEATs at the same supersteps."""
        op = self.op
        rep = np.flatnonzero(op == isa.REPEAT)
        if not len(rep):
            return []
        per = np.bincount(self.tile[rep], minlength=self.T)
        if (per != per[0]).any():
            raise ValueError("REPEAT must start the same superstep on every tile")
        rep = rep.reshape(self.T, -1) if self.T else rep.reshape(0, 0)     # rows: tiles, in program order
        out = []
        for j in range(rep.shape[1]):
            r = rep[:, j]
            if len(set(self.step[r].tolist())) != 1 or len(set(self.words[r, 1].tolist())) != 1:
                raise ValueError("REPEAT must start the same superstep on every tile, with one count")
            in_body = np.zeros(len(op), bool)
            for x, nb in zip(r, self.words[r, 2]):
                in_body[x + 1:x + 1 + nb] = True
            nbody = int(self.words[r[0], 2])
            B = int((op[r[0] + 1:r[0] + 1 + nbody] == isa.SYNC).sum())
            code_s, tab_s, costly = self.relocations(r, in_body)
            out.append((int(self.step[r[0]]), B, int(self.words[r[0], 1]), code_s, tab_s, costly))
        return sorted(out, key=lambda L: (L[0], -L[1]))

    def step_cycles(self) -> np.ndarray:
        f, op, words = self.f, self.op, self.words
        base = self.costs(words, self.table).max(1) + f.sync_cycles
        S = self.nsync + 1
        # the segment after the last SYNC is a superstep only if a tile does something there
        last = (self.step == self.nsync) & (op != isa.END)
        nsteps = S if last.any() else S - 1
        loops = self.loops()
        corners = [np.zeros_like(words)]
        for (_, _, count, code_s, _, _) in loops:
            corners += [c + (count - 1) * code_s for c in corners]
        self.check_scales(corners)
        costly = [k for k, L in enumerate(loops) if L[5]]
        memo = {}

        def cycles(it: dict) -> np.ndarray:
            """Per static superstep, under the iterations `it` (loop index -> i) of the
            loops whose relocation moves a word some cost reads."""
            key = tuple(it.get(k, 0) for k in costly)
            if not any(key):
                return base
            if key not in memo:
                w, t = words, self.table
                for k, i in zip(costly, key):
                    w, t = w + i * loops[k][3], t + i * loops[k][4]
                memo[key] = self.costs(w & 0xFFFFFFFF, t & 0xFFFFFFFF).max(1) + f.sync_cycles
            return memo[key]

        out = []

        def run(lo, hi, depth, it):
            """Execute static supersteps [lo, hi), entering the loops from `depth` on
            (a loop nested in loop k follows it in `loops` and lies in its range)."""
            s = lo
            for k in range(depth, len(loops)):
                r, B, count = loops[k][:3]
                if r < s or r + B > hi:
                    continue
                out.append(cycles(it)[s:r])
                for i in range(count):
                    run(r, r + B, k + 1, {**it, k: i})
                s = r + B
            out.append(cycles(it)[s:hi])

        run(0, nsteps, 0, {})
        return np.concatenate(out)

    def relocations(self, rep, in_body):
        """Strides (code, table) of one loop's relocated words, and whether any is a
        word a cost reads (else relocation moves addresses only)."""
        code_s = np.zeros_like(self.words)
        tab_s = np.zeros_like(self.table)
        rep = rep[self.words[rep, 4] > 0]
        n = self.words[rep, 4]
        if not len(rep):
            return code_s, tab_s, False
        # the relocation entries of every tile: (tile, word address, stride)
        tile = np.repeat(self.tile[rep], n)
        j = np.arange(len(tile)) - np.repeat(np.cumsum(n) - n, n)
        at = np.repeat(self.table_index(self.tile[rep], self.words[rep, 3]), n) + j * isa.RELOC_WORDS
        waddr, stride = self.table[at], self.table[at + 1]
        c0 = self.code_addr[tile]
        first = np.searchsorted(self.tile, np.arange(self.T))            # each tile's first instruction
        ncode = np.bincount(self.tile, minlength=self.T)[tile]
        in_code = (waddr >= c0) & (waddr < c0 + ncode * isa.INSTR_BYTES)
        g = first[tile[in_code]] + (waddr[in_code] - c0[in_code]) // isa.INSTR_BYTES
        word = (waddr[in_code] - c0[in_code]) % isa.INSTR_BYTES // 4
        code_s[g, word] = stride[in_code]
        cost_word = np.zeros((max(isa.OP_NAMES) + 1, isa.INSTR_WORDS), bool)
        for op, ws in COST_WORDS.items():
            cost_word[op, list(ws)] = True
        costly = bool(cost_word[self.op[g], word].any())
        tg = self.table_index(tile[~in_code], waddr[~in_code])
        tab_s[tg] = stride[~in_code]
        # the table words the body's exchanges read as peer, row bytes or rows
        ex = np.flatnonzero((self.op == isa.EXCH) & in_body)
        ne = self.words[ex, 2] + self.words[ex, 3]
        base = np.repeat(self.table_index(self.tile[ex], self.words[ex, 1]), ne)
        k = np.arange(len(base)) - np.repeat(np.cumsum(ne) - ne, ne)
        read = (base + k * isa.ENTRY_WORDS)[:, None] + np.array(ENTRY_COST_WORDS)
        costly |= bool(np.isin(tg, read).any())
        return code_s, tab_s, costly


def step_cycles(program) -> np.ndarray:
    """Cycles of every executed superstep (sync included), in execution order."""
    return Oracle(program).step_cycles()


def host_cycles(program) -> int:
    f = dict(program.target)
    nbytes = [int((np.asarray(h["row_bytes"], np.int64) * np.asarray(h["rows"], np.int64)).sum())
              for h in (program.host_in, program.host_out)]
    return sum(-(-b // f["host_bytes_per_cycle"]) for b in nbytes)
