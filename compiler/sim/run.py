"""The bulk-synchronous execution loop: fetch, decode, execute, sync.

Every tile fetches its instructions from its own memory at code_addr +
pc*INSTR_BYTES, so bytes that overwrote code run as whatever they decode to.
A superstep runs in *rounds*: in round r each still-running tile executes its
r-th instruction of the step; the instructions of a round are fetched with one
gather and the kernels among them executed batched by shape (kernels.Kernels).
Tiles never touch each other's memory outside an exchange, so running a round
across tiles at once preserves every tile's own program order.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np
from threadpoolctl import threadpool_limits

from .. import isa
from ..lower.program import Program
from ..target import Target
from . import decode, jit, repeat
from .exchange import PlanCache, exchange
from .fault import MachineFault, first_fault
from .kernels import KERNELS, Kernels
from .load import host_cycles, host_in, host_out, host_step, load, out_buffers
from .memory import I64, Memory, drop_stage, gather, scatter


@dataclass
class SimResult:
    outputs: dict                       # out stream name -> uint8 bytes (filled by host_out)
    step_kind: list                     # per superstep: 'compute' | 'exchange' | 'idle'
    step_cycles: np.ndarray             # int64[steps], max over tiles + sync
    tile_cycles: np.ndarray             # int64[steps, tiles], read back from profile samples
    exchange_bytes: np.ndarray          # int64[steps], total bytes sent in the step
    total_cycles: int                   # cropped runtime: supersteps only
    host_cycles: int                    # host in + out at target.host_bytes_per_cycle
    instructions: int                   # instructions executed, all tiles (incl. SYNC/END)
    profiled_steps: int = 0             # steps whose tile_cycles came from profile samples;
    #                                     later steps (profile area full) from the machine counters
    host_bytes: dict = field(default_factory=dict)   # {'in': bytes, 'out': bytes}


def _hex(x) -> str:
    return hex(int(x))


class Machine:
    def __init__(self, program: Program):
        self.p = program
        self.t = Target.from_dict(dict(program.target), where="program.target")
        if len(program.code_addr) != self.t.tiles:
            raise ValueError(f"program has {len(program.code_addr)} tiles, its target {self.t.tiles}")
        self.m = Memory(self.t)
        self.k = Kernels(self.m, self.t)
        self.T = self.t.tiles
        self.code_addr = np.asarray(program.code_addr, I64)
        self.profile_addr = np.asarray(program.profile_addr, I64)
        self.profile_cap = int(program.profile_bytes) // isa.PROFILE_SAMPLE_BYTES
        self.code_len = np.diff(np.asarray(program.code_off, I64))
        self.table_addr = np.asarray(program.table_addr, I64)
        self.table_len = np.diff(np.asarray(program.table_off, I64))
        self.k.tables = (self.table_addr, self.table_len)   # F_SCALE_TABLE scales live there
        self.instructions = 0
        self.loop = repeat.Nest()                # the REPEATs being executed, outermost first
        self.k.loop = self.loop                  # F_SEG_B segment words are relocated too
        self.plans = PlanCache()                 # exchange plans reused across Repeat iterations

    # ---- one superstep ---------------------------------------------------------
    def fetch(self, step, tiles, pc):
        m = self.m
        addr = self.code_addr[tiles] + pc * isa.INSTR_BYTES
        first_fault((addr < m.base) | (addr + isa.INSTR_BYTES > m.r0),
                    lambda i: f"instruction fetch at {_hex(addr[i])} is outside region 0 "
                              f"[{_hex(m.base)}, {_hex(m.r0)})", tiles, step, pc)
        w = m.read_words(tiles, addr, isa.INSTR_WORDS)
        if self.loop:
            w = self.loop.fix_fetch(tiles, pc, w)
        op = decode.check(w[:, 0], tiles, step, pc)[0]
        return op, w

    def superstep(self, step, pc, running):
        """Run every running tile to its next SYNC or END. Returns (ended mask,
        executed-anything, per-tile compute cycles, exchange rows, kernel mask)."""
        T = self.T
        active = running.copy()
        at_end = np.zeros(T, bool)
        cycles = np.zeros(T, I64)
        did_kernel = np.zeros(T, bool)
        exch = []          # (tile, pc, table_addr, nsend, nrecv) arrays per round
        host = []          # (tile, pc, dir, first, rows, delta) arrays per round
        anything = False
        first_round = True
        while active.any():
            tiles = np.flatnonzero(active)
            tpc = pc[tiles]
            op, w = self.fetch(step, tiles, tpc)
            self.instructions += len(tiles)
            rep = op == isa.REPEAT
            if rep.any():
                self.begin_repeat(step, first_round, tiles, tpc, op, w)
                pc[tiles] += 1       # every tile is at REPEAT: go on with the body, same superstep
                anything = True      # (still its first round: a nested REPEAT may open the body)
                continue
            first_round = False
            end = op == isa.END
            if self.loop:
                first_fault(end, lambda i: "END inside a REPEAT body", tiles, step, tpc)
            at_end[tiles[end]] = True
            active[tiles[end | (op == isa.SYNC)]] = False
            anything |= bool((~end).any())
            pc[tiles[~end]] += 1          # END leaves pc on END: the tile stays finished
            if self.loop:
                first_fault((pc[tiles] == self.loop.top.end[tiles]) & (op != isa.SYNC),
                            lambda i: "REPEAT body does not end with SYNC", tiles, step, tpc)
            e = op == isa.EXCH
            if e.any():
                exch.append((tiles[e], tpc[e], w[e, 1], w[e, 2], w[e, 3]))
            h = op == isa.HOST
            if h.any():
                host.append((tiles[h], tpc[h], *(w[h, j] for j in range(1, 5))))
            for kop in KERNELS:
                k = op == kop
                if k.any():
                    cycles[tiles[k]] += self.k.run(kop, step, tiles[k], tpc[k], w[k])
                    did_kernel[tiles[k]] = True
        return at_end, anything, cycles, exch, did_kernel, host

    # ---- REPEAT ---------------------------------------------------------------------
    def begin_repeat(self, step, first_round, tiles, pc, op, w):
        """Some tile fetched REPEAT: every running tile must have, as the first
        instruction of this superstep, with equal counts (repeat.start checks the rest)."""
        rep = op == isa.REPEAT
        first_fault(rep & (not first_round), lambda i: "REPEAT must be the first instruction of a superstep",
                    tiles, step, pc)
        alive = np.flatnonzero(~self.ended)
        if len(alive) != len(tiles):
            e = int(np.flatnonzero(self.ended)[0])
            raise MachineFault(f"REPEAT mismatch across tiles (deadlock): tile {e} has ended while tile "
                               f"{tiles[np.flatnonzero(rep)[0]]} issues REPEAT", tile=e, step=step)
        major = rep.sum() * 2 >= len(rep)
        name = lambda o: isa.OP_NAMES.get(int(o), str(o))
        other = "REPEAT" if major else name(repeat.mode(op[~rep]))
        repeat.mismatch(rep != major, tiles, step, pc,
                        lambda i: f"tile {tiles[i]} issues {name(op[i])} where the other tiles issue {other}")
        if self.loop:        # a nested loop: its body (as fetched, relocated) inside the enclosing one
            end, outer = pc + 1 + w[:, 2], self.loop.top.end[tiles]
            first_fault(end > outer, lambda i: f"nested REPEAT's body [pc {pc[i] + 1}, {end[i]}) runs past "
                                               f"the enclosing body's end (pc {outer[i]})", tiles, step, pc)
        self.loop.loops.append(repeat.start(self, step, tiles, pc, w))

    def end_of_step(self, step, pc):
        """After a superstep inside a REPEAT: either every tile finished the
        iteration (stopped at the body's final SYNC) or none did. An inner loop's
        last iteration may end its enclosing loop's iteration at the same SYNC."""
        while self.loop and self._iteration_ended(step, pc):
            pass

    def _iteration_ended(self, step, pc) -> bool:
        lp = self.loop.top
        done = pc == lp.end
        if not done.any():
            return False
        if not done.all():
            major = done.sum() * 2 >= len(done)
            odd = np.flatnonzero(done != major)
            i = int(odd[0])
            raise MachineFault(
                f"REPEAT mismatch across tiles (deadlock): tile {i} "
                f"{'ended' if done[i] else 'did not end'} iteration {lp.i} at this SYNC while tile "
                f"{int(np.flatnonzero(done == major)[0])} {'ended' if major else 'did not'} "
                f"(different SYNC counts per iteration)", tile=i, step=step, pc=pc[i] - 1)
        lp.i += 1
        if lp.i < lp.count:
            pc[:] = lp.start
            return False
        self.loop.loops.pop()
        return True

    # ---- the program -------------------------------------------------------------
    def run(self, streams: dict, on_step=None) -> SimResult:
        """on_step(step, memory), if given, is called after every superstep: the host's
        read-only view (a tensor dump); execution never depends on it."""
        t, T, p = self.t, self.T, self.p
        load(self.m, p)
        nin = host_in(self.m, p, streams)
        self.outs = out_buffers(p)          # HOST steps write into these as they run
        pc = np.zeros(T, I64)
        running = np.ones(T, bool)
        self.ended = ~running
        kinds, step_cyc, tile_cyc, xbytes = [], [], [], []
        step = 0
        while True:
            at_end, anything, cycles, exch, did_kernel, host = self.superstep(step, pc, running)
            ended, waiting = at_end & running, running & ~at_end
            if ended.any() and waiting.any():
                e, s = np.flatnonzero(ended), np.flatnonzero(waiting)
                raise MachineFault(f"deadlock: {len(e)} tile(s) reached END (first: tile {e[0]}) while "
                                   f"{len(s)} wait at SYNC (first: tile {s[0]})",
                                   tile=e[0], step=step, pc=pc[e[0]])
            if not anything:        # every tile went straight to END: no superstep
                break
            kind = "idle"
            xb = 0
            if exch:
                xt, xpc, xa, xs, xr = (np.concatenate(c) for c in zip(*exch))
                both = did_kernel[xt]
                first_fault(both, lambda i: "superstep mixes EXCH and compute kernels on one tile",
                            xt, step, xpc)
                res = exchange(self.m, step, xt, xpc, xa, xs, xr,
                               fix=self.loop.fix_table if self.loop else None, cache=self.plans)
                phase = t.exchange_cycles(res.send_bytes, res.recv_bytes)
                cycles[np.unique(xt)] = phase
                kind, xb = "exchange", res.total
            elif did_kernel.any():
                kind = "compute"
            if host:
                ht, hpc, *ins = (np.concatenate(c) for c in zip(*host))
                xt = np.concatenate([c[0] for c in exch]) if exch else ht[:0]
                first_fault(did_kernel[ht] | np.isin(ht, xt),
                            lambda i: "superstep mixes HOST with compute kernels or EXCH on one tile", ht, step, hpc)
                # the host link is the chip's: every tile taking part waits for all its bytes
                bi, bo = host_step(self.m, p, streams, self.outs, (ht, hpc, *ins), step)
                cycles[np.unique(ht)] = host_cycles(t, bi, bo)
                kind = "host" if kind == "idle" else kind
            self.write_profile(step, cycles)
            kinds.append(kind)
            tile_cyc.append(cycles)
            step_cyc.append(int(cycles.max(initial=0)) + t.sync_cycles)
            xbytes.append(xb)
            if on_step is not None:
                on_step(step, self.m)
            step += 1
            running &= ~at_end
            self.ended = ~running
            if self.loop:
                self.end_of_step(step - 1, pc)
            if not running.any():
                break
        outputs, nout = host_out(self.m, p, self.outs)      # (host_cycles: before and after the run)
        tc = np.array(tile_cyc, I64).reshape(len(kinds), T)
        n_prof = min(len(kinds), self.profile_cap)
        tc[:n_prof] = self.read_profile(n_prof)
        sc = np.array(step_cyc, I64)
        return SimResult(outputs=outputs, step_kind=kinds, step_cycles=sc, tile_cycles=tc,
                         exchange_bytes=np.array(xbytes, I64), total_cycles=int(sc.sum()),
                         host_cycles=host_cycles(t, nin, nout), instructions=self.instructions,
                         profiled_steps=n_prof, host_bytes={"in": nin, "out": nout})

    # ---- profile samples -----------------------------------------------------------
    def write_profile(self, step, cycles):
        """The machine stores each tile's cycles of this step as a uint32 sample in
        the tile's own memory: whatever else lives there is overwritten."""
        if step < self.profile_cap:
            tiles = np.arange(self.T)
            sample = np.minimum(cycles, 2**32 - 1).astype("<u4")
            scatter(self.m.flat, self.m.pos(tiles, self.profile_addr + 4 * step), sample.view(np.uint8).reshape(-1, 4))

    def read_profile(self, nsteps):
        tiles = np.repeat(np.arange(self.T)[None, :], nsteps, 0).reshape(-1)
        addr = (self.profile_addr[None, :] + 4 * np.arange(nsteps)[:, None]).reshape(-1)
        b = gather(self.m.flat, self.m.pos(tiles, addr), 4)
        return b.view("<u4").astype(I64).reshape(nsteps, self.T)


_WARMING: list = []


def run(program: Program, streams: dict, on_step=None) -> SimResult:
    """Execute a lowered program on the simulated machine (see compiler/sim/__init__).
    on_step(step, memory), if given, is the host's read-only view after every superstep.

    BLAS runs single-threaded here: the kernels' matmuls are thousands of small
    per-tile products, for which OpenBLAS's threads cost far more than they gain
    (25x slower on a loaded 2-core machine, where its spinning threads wait for each
    other). Per-matrix results do not depend on the thread count."""
    if not _WARMING:          # once per process: the kernels compile beside loading (jit.warm)
        _WARMING.append(threading.Thread(target=jit.warm, name="sim-jit-warm", daemon=True))
        _WARMING[0].start()
    with threadpool_limits(1, user_api="blas"):
        mach = Machine(program)
        try:
            return mach.run(streams, on_step)
        finally:
            mach.k.close()
            drop_stage()
