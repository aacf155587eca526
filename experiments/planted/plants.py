"""Planted bugs, and which check catches each (issue #23): the library behind
experiments/planted/planted.py (the table) and tests/test_planted.py (its fast subset).

A plant changes only what the machine receives or does -- the lowered program's bytes,
the host streams, tile memory between two supersteps (run's `inject` hook, the way a
wrong kernel or exchange would leave it) -- or, for the model-definition kinds, the graph
builder (compiler/models, monkeypatched while the trial is built: the reference then
agrees with the device, and only a check written from timm's definition can see it).
Never the reference, nor the data the read-back holds the device to.

Every location is read from the compiled trial's own tables (tile graph requests, kernel
and transfer rows, relocation entries), chosen deterministically (lowest step, tile,
address), and planted in Repeat iteration `layer` only where the bug allows that; the
program-wide kinds (a relocation stride, overlapping buffers) act from iteration 1 on.

    outcome(trial, kind, layer) -> {"caught": bool, "by": [...], "op", "iteration", "tile", ...}

The checks a run reports: `op read-back` (ops_failed > 0, compiler/readback.py), `end to
end` (max_abs_error > tolerance), `layer output`, `model` (the timm-model check: the run's
`failed` line names "model:"), `fp8 accuracy` (the device against the FP16-activation twin
beyond policy.fp8_budget_*), `machine` (the simulator refused the program: MachineFault)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

import numpy as np

from compiler import isa
from compiler.lower import lower
from compiler.phases import compile_trial, policy_of, target_of
from compiler.run import run
from compiler.sim import MachineFault
from model_plants import (attention_scale, clipping_scale, gelu_tanh, layernorm_eps, map_latent,  # noqa: E402
                          missing_pos_embed, qk_swapped)

STALE_BYTES = 156        # issue #23: an exchange that left 156 B of the previous layer on one tile


# ---- the trial's tables -------------------------------------------------------------

def names(r) -> np.ndarray:
    tg = r["place"].tilegraph
    return np.asarray(tg.names)[tg.req["name"]]


def executed(r, s: int, layer: int) -> int:
    """Executed superstep (run's `inject` numbering, 0-based) of static step s (the tile
    graph's, 1-based) in Repeat iteration `layer` (steps outside the body run once)."""
    b0, b1 = r["lower"].body
    count = r["model"].graph.repeat.count if r["model"].graph.repeat else 1
    if s - 1 < b0:
        return s - 1
    if s - 1 < b1:
        return s - 1 + layer * (b1 - b0)
    return s - 1 + (count - 1) * (b1 - b0)


def in_body(r, s: int) -> bool:
    b0, b1 = r["lower"].body
    return b0 <= s - 1 < b1


def written_rows(r, s: int, suffix: str = ""):
    """Every destination row of the exchange in static step s (into requests whose name
    ends with `suffix`): (tile, address, bytes), sorted by tile then address."""
    tg, addr = r["place"].tilegraph, r["place"].placement.addr
    x, nm = tg.xfer, names(r)
    out = []
    for j in np.flatnonzero((x["step"] == s) & np.char.endswith(nm[x["dreq"]].astype(str), suffix)):
        base = int(addr[x["dreq"][j]] + x["doff"][j])
        for k in range(int(x["d_rows"][j])):
            out.append((int(x["dst"][j]), base + k * int(x["d_stride"][j]), int(x["d_row_bytes"][j])))
    return sorted(out)


def exchange_steps(r, suffix: str = "") -> list[int]:
    """Body exchange steps (after the first superstep) writing into a request named *suffix."""
    x, nm = r["place"].tilegraph.xfer, names(r)
    hit = np.char.endswith(nm[x["dreq"]].astype(str), suffix)
    return sorted(int(s) for s in np.unique(x["step"][hit]) if in_body(r, int(s)) and s > 1)


def _bytes(mem, tile, a, n):
    return mem.flat[mem.pos(tile, a) + np.arange(n)]


# ---- device plants: (lower result, host streams, inject hook) -----------------------

@dataclass
class Plant:
    lower: object = None                     # a changed lowered program (None: the trial's)
    streams: dict | None = None              # host streams replaced
    inject: Callable | None = None           # inject(step, memory) after every superstep
    note: str = ""


def _exchange_rows_left(r, layer: int, pick) -> Plant:
    """Rows an exchange writes, some left as they were before it (the first body exchange
    into a matmul's received activation operand, `.a`, whose chosen rows change in this
    iteration): `pick(rows) -> [(tile, addr, n)]`."""
    state = {"done": False}
    steps = exchange_steps(r, ".a")
    before = {}

    def inject(step, mem):
        if state["done"]:
            return
        for s in steps:
            e = executed(r, s, layer)
            if step == e - 1:                                     # just before the exchange
                before[s] = [(t, a, n, _bytes(mem, t, a, n).copy()) for t, a, n in written_rows(r, s, ".a")]
            elif step == e and s in before:
                changed = [(t, a, n, old) for t, a, n, old in before.pop(s)
                           if not np.array_equal(_bytes(mem, t, a, n), old)]
                chosen = pick(changed)
                if chosen:
                    for t, a, n, old in chosen:
                        mem.flat[mem.pos(t, a) + np.arange(n)] = old
                    state["done"] = True
                    state["where"] = (s, chosen[0][0])
                    return
    return Plant(inject=inject)


def stale_exchange(r, layer):
    """STALE_BYTES of one tile's received rows keep the bytes they held before the exchange."""
    def pick(rows):
        if not rows:
            return []
        t = rows[0][0]
        out, left = [], STALE_BYTES
        for tt, a, n, old in rows:
            if tt == t and left > 0:
                k = min(n, left)
                out.append((tt, a, k, old[:k]))
                left -= k
        return out
    return _exchange_rows_left(r, layer, pick)


def dropped_row(r, layer):
    """One destination row of one transfer not written (the previous bytes stay)."""
    return _exchange_rows_left(r, layer, lambda rows: rows[:1])


def swapped_rows(r, layer):
    """Two rows of one tile's received block written in each other's place."""
    state = {"done": False}
    steps = exchange_steps(r)

    def inject(step, mem):
        if state["done"]:
            return
        for s in steps:
            if step != executed(r, s, layer):
                continue
            rows = written_rows(r, s)
            for i, (t, a, n) in enumerate(rows):
                for t2, a2, n2 in rows[i + 1:i + 9]:
                    if (t2, n2) == (t, n):
                        x, y = _bytes(mem, t, a, n).copy(), _bytes(mem, t2, a2, n2).copy()
                        if not np.array_equal(x, y):
                            mem.flat[mem.pos(t, a) + np.arange(n)] = y
                            mem.flat[mem.pos(t2, a2) + np.arange(n)] = x
                            state["done"] = True
                            return
    return Plant(inject=inject)


def read_in_step(r, step: int, tile: int, req: int) -> bool:
    """Does a kernel of static step `step` on `tile` read request `req` (an input operand:
    MATMUL's a and b, the others' operands after their output)? Then a fault planted in it
    after the superstep comes too late to matter."""
    k = r["place"].tilegraph.kern
    sel = (k["step"] == step) & (k["tile"] == tile)
    mm = k["op"][sel] == isa.MATMUL
    ins = [np.where(mm, k["r0"][sel], -1), k["r1"][sel], np.where(mm, -1, k["r2"][sel]), np.where(mm, -1, k["r3"][sel])]
    return bool(np.isin(req, np.concatenate(ins)))


def _matmul_kernels(r):
    """MATMUL kernel rows in the Repeat body whose `a` operand is a received copy (.a), the
    most rows first, then the largest blocks (the most likely to hold real rows, not only the
    masked padding row; then by step, tile)."""
    tg = r["place"].tilegraph
    k, nm = tg.kern, names(r)
    rows = [j for j in np.flatnonzero(k["op"] == isa.MATMUL)
            if in_body(r, int(k["step"][j])) and nm[k["r0"][j]].endswith(".a") and k["i1"][j] >= 4]
    return sorted(rows, key=lambda j: (-int(k["i0"][j]), -int(k["i0"][j] * k["i2"][j]), int(k["step"][j]),
                                       int(k["tile"][j])))


def _k_group_target(r, layer):
    """The k-group plants' target: the largest body matmul's rows m, k, element bytes, tile,
    A's address, the quarter of k skipped (g terms from k/2) and the executed superstep."""
    tg, addr = r["place"].tilegraph, r["place"].placement.addr
    k = tg.kern
    j = _matmul_kernels(r)[0]
    m, kk = int(k["i0"][j]), int(k["i1"][j])
    eb = 1 if (int(k["dtype"][j]) >> 8) & 0xFF == isa.DTYPES["fp8"] else 2
    t, a0 = int(k["tile"][j]), int(addr[k["r0"][j]] + k["o0"][j])
    g = max(1, kk // 4)
    e = executed(r, int(k["step"][j]), layer) - 1
    return m, kk, eb, t, a0, g, e


def skipped_k_group(r, layer):
    """One tile's matmul skips a quarter of its k terms: a[:, k0:k0 + k/4] reads as zero
    when the kernel runs (written in the operand right before its superstep)."""
    m, kk, eb, t, a0, g, e = _k_group_target(r, layer)

    def inject(step, mem):
        if step == e:
            for row in range(m):
                mem.flat[mem.pos(t, a0 + (row * kk + kk // 2) * eb) + np.arange(g * eb)] = 0
    return Plant(inject=inject, note=f"tile {t}, {g} of {kk} k")


def kernel_skips_k_group(r, layer, rows: int | None = None):
    """The same quarter of k skipped, as the kernel would skip it: the operand reads as zero
    only while the kernel runs -- zeroed after the host's checks of the superstep before it
    (run's inject `after_checks`: the exchange check has compared the received copy, intact),
    its bytes put back after the kernel's superstep. Only a check of the op's output can see it.
    `rows`: in the kernel's first `rows` rows only (tests: a fault a row sample can miss)."""
    m, kk, eb, t, a0, g, e = _k_group_target(r, layer)
    pos = lambda mem: (mem.pos(t, a0 + (np.arange(min(m, rows or m))[:, None] * kk + kk // 2) * eb)
                       + np.arange(g * eb)).ravel()
    kept = {}

    def inject(step, mem):
        if step == e:
            kept["old"] = mem.flat[pos(mem)].copy()
            mem.flat[pos(mem)] = 0
        elif step == e + 1 and "old" in kept:
            mem.flat[pos(mem)] = kept.pop("old")
    inject.after_checks = True
    return Plant(inject=inject, note=f"tile {t}, {g} of {kk} k")


def tile_skips_superstep(r, layer):
    """One tile does not run a compute superstep (its matmul and whatever else it computes
    there): after it, the tile's memory is as it was before it."""
    k = r["place"].tilegraph.kern
    j = _matmul_kernels(r)[0]
    t = int(k["tile"][j])
    e = executed(r, int(k["step"][j]), layer)
    keep = {}

    def inject(step, mem):
        if step == e - 1:
            keep["old"] = mem.mem[t].copy()
        elif step == e:
            mem.mem[t] = keep["old"]
    return Plant(inject=inject)


def _op_rows(r, op_name):
    g, d = r["model"].graph, r["lower"].dump
    n = next(i for i, op in enumerate(g.ops) if op.outputs[0] == op_name)
    return n, np.flatnonzero(d["op"] == n)


def _placed_write(r, layer, candidates, value: Callable, col=3):
    """After the superstep completing an op in iteration `layer`, its column `col` (every
    block holding it) is rewritten: value(old f16 values) -> new ones. The op: the first of
    `candidates` whose blocks no kernel reads in the superstep completing it (a value a
    kernel consumed within that superstep cannot be changed after it)."""
    d, req = r["lower"].dump, r["place"].tilegraph.dump["req"]     # lower's dump rows are the tile graph's
    for op_name in candidates:
        _, rows = _op_rows(r, op_name)
        rows = rows[(d["c0"][rows] <= col) & (col < d["c0"][rows] + d["cols"][rows])]
        if not any(read_in_step(r, int(d["step"][i]), int(d["tile"][i]), int(req[i])) for i in rows):
            break
    else:
        raise LookupError(f"none of {candidates} is read after the superstep completing it")
    e = executed(r, int(d["step"][rows[0]]), layer)
    pos_of = lambda mem, i: (mem.pos(d["tile"][i], d["addr"][i] + (np.arange(d["rows"][i]) * d["cols"][i] + col
                                                                    - d["c0"][i]) * d["ebytes"][i]))

    def inject(step, mem):
        if step == e:
            for i in rows:
                p = pos_of(mem, i)[:, None] + np.arange(2)
                old = mem.flat[p].copy().view(np.float16).ravel()
                mem.flat[p] = np.asarray(value(old), np.float16).view(np.uint8).reshape(p.shape)
    return Plant(inject=inject)


def zeroed_output_column(r, layer):
    """A kernel leaves an output column unwritten: column 3 of an op's output zeroed (the
    first op of the body, matmuls first, whose output no kernel reads in its superstep)."""
    g = r["model"].graph
    first, stop = g.body()
    body = sorted(g.ops[first:stop], key=lambda op: op.kind != "matmul")
    return _placed_write(r, layer, [op.outputs[0] for op in body], np.zeros_like)


def nan_in_output(r, layer):
    """A NaN written into one element of an op's output (fc1's bias op, or the first
    candidate read after its superstep), as a kernel bug or a corrupted word leaves it."""
    def one_nan(old):
        new = old.copy()
        new[min(1, len(new) - 1)] = np.nan
        return new
    return _placed_write(r, layer, ["fc1", "gelu", "qkv", "proj", "fc2"], one_nan, col=5)


def _member_stream(r, name, layer, change):
    a = np.array(r["model"].data[name])
    change(a[layer])
    return Plant(streams={name: a})


def wrong_weight_byte(r, layer):
    """One byte of fc1's weight member for this layer, as the host sends it (it lands on
    the tile holding that element): the element's lowest exponent bit flipped."""
    def flip(w):
        b = w.view(np.uint8).reshape(-1)
        if w.dtype.itemsize == 1:                 # e4m3: s eeee mmm, 0x08 the lowest exponent bit
            b[b.size // 3] ^= 0x08
        else:                                     # f16, little-endian: the high byte's 0x04
            b[2 * (b.size // 6) + 1] ^= 0x04
    return _member_stream(r, "mlp.fc1.weight", layer, flip)


def nan_in_weight(r, layer):
    """fc2's bias member for this layer carries one NaN (f16) in what the host sends."""
    def put(b):
        b.reshape(-1)[3] = np.nan
    return _member_stream(r, "mlp.fc2.bias", layer, put)


def dropped_bias(r, layer):
    return _member_stream(r, "attn.proj.bias", layer, lambda b: b.fill(0))


def zeroed_k_rows(r, layer):
    """2 of fc2's k-rows zeroed in the weight the host sends (32 of So400m's 4304, scaled)."""
    def zero(w):
        w[10:12] = 0
    return _member_stream(r, "mlp.fc2.weight", layer, zero)


def relocations(r, kind="member"):
    """Every Repeat relocation entry of `kind` (member: a sequence member's address;
    scale: a per-layer scale's table address): (offset of its stride word in
    program.table, tile, the op reading the relocated member or scale, the relocated
    word's address)."""
    prog, tg, addr, g = r["lower"].program, r["place"].tilegraph, r["place"].placement.addr, r["model"].graph
    nm = names(r)
    reader = {}
    for op in g.ops:
        for x in op.inputs:
            reader.setdefault(x, op.outputs[0])
    k, out = tg.kern, []
    for t in range(prog.tiles):
        code = prog.tile_code(t).view("<u4").reshape(-1, isa.INSTR_WORDS)
        rp = np.flatnonzero(code[:, 0] == isa.REPEAT)         # after a tower's patch embedding's code
        if not len(rp):
            continue
        table, rp = prog.tile_table(t), code[rp[0]]
        base = int(rp[3]) - int(prog.table_addr[t])
        ent = table[base:base + int(rp[4]) * isa.RELOC_BYTES].view("<u4").reshape(-1, 2)
        kern = iter(np.flatnonzero((k["reloc"] != 0) & (k["tile"] == t)))     # code entries follow, in kern order
        scaled = iter(np.flatnonzero((k["sseq"] != 0) & (k["tile"] == t)))    # then the scale words, likewise
        seqs = np.flatnonzero((tg.req["tile"] == t) & (tg.req["count"] > 1))
        for e, (word, stride) in enumerate(ent):
            at = int(prog.table_off[t]) + base + e * isa.RELOC_BYTES + 4
            in_code = prog.code_addr[t] <= word < prog.code_addr[t] + code.nbytes
            if in_code and (word - prog.code_addr[t]) % isa.INSTR_BYTES != 8:   # a scale word
                j = next(scaled)
                if kind == "scale":
                    out_req = k["r2"][j] if k["op"][j] == isa.MATMUL else k["r0"][j]
                    out.append((at, t, nm[out_req].removesuffix(".p"), int(word)))
                continue
            if kind != "member":
                continue
            if in_code:                                                        # a MATMUL's b operand
                name = nm[k["r2"][next(kern)]].removesuffix(".p")
            else:                                                              # an exchange source
                w = int(word) - int(prog.table_addr[t])
                src = int(table[w:w + 4].view("<u4")[0])
                ext = addr[seqs] + tg.req["count"][seqs] * tg.req["stride"][seqs]
                hreq = seqs[(addr[seqs] <= src) & (src < ext)][0]
                home = nm[hreq].removesuffix(".home")
                if home in reader:
                    name = reader[home]
                else:                        # a pooled request (weights.ring): the op whose operand it feeds
                    x = tg.xfer
                    at_src = (x["src"] == t) & (x["sreq"] == hreq) & (addr[hreq] + x["soff"] == src)
                    name = nm[x["dreq"][np.flatnonzero(at_src)[0]]].removesuffix(".b")
            out.append((at, t, name, int(word)))
    return out


def _table_changed(r, change) -> Plant:
    prog = r["lower"].program
    table = prog.table.copy()
    change(table)
    return Plant(lower=dataclasses.replace(r["lower"], program=dataclasses.replace(prog, table=table)))


def relocation_stride_zero(r, layer):
    """One tile's relocation entry for a weight member with stride 0: from iteration 1 on
    that tile reads layer 0's member (a program-wide bug: `layer` does not apply)."""
    ent = relocations(r)
    at, tile, op, _ = next((e for e in ent if e[2].endswith(".xw")), ent[0])

    def zero(table):
        table[at:at + 4] = 0
    return _table_changed(r, zero)


def scale_from_wrong_layer(r, layer):
    """One tile's per-layer FP8 scale table: this layer's weight scale replaced by the
    next layer's (layer 0 for the last), the most different of the scale words."""
    prog, g = r["lower"].program, r["model"].graph
    L = g.repeat.count
    other = (layer + 1) % L
    weight = {o.outputs[0]: o.inputs[1] for o in g.ops if o.kind == "matmul"}
    best = None
    for at, t, op, word in relocations(r, "scale"):
        if op not in weight or not isinstance(g.tensors[weight[op]].scale, tuple):
            continue
        sc = g.tensors[weight[op]].scale
        ratio = max(sc[layer] / sc[other], sc[other] / sc[layer])
        if best is None or ratio > best[0]:
            best = (ratio, t, word)
    _, t, word = best
    code = prog.tile_code(t).view("<u4")
    ptr = int(code[(word - int(prog.code_addr[t])) // 4])             # member 0's scale in the table blob
    off = int(prog.table_off[t]) + ptr - int(prog.table_addr[t])

    def swap(table):
        table[off + 4 * layer:off + 4 * layer + 4] = table[off + 4 * other:off + 4 * other + 4].copy()
    return _table_changed(r, swap)


def overlapping_buffers(r, layer):
    """The allocator bug: two buffers on one tile that one exchange of the Repeat body fills
    and the next superstep's kernels read (a matmul's received operand and another) given
    one address, relowered (the body's program is every iteration's)."""
    tg, pl = r["place"].tilegraph, r["place"]
    req, addr = tg.req, pl.placement.addr.copy()
    nm = names(r)
    best = None
    for t in range(int(req["tile"].max()) + 1):
        rows = [i for i in np.flatnonzero(req["tile"] == t) if req["count"][i] == 1 and req["end"][i] > 0
                and in_body(r, int(req["start"][i]))]
        for i in rows:
            for j in rows:
                if i != j and nm[i].endswith(".a") and req["start"][i] == req["start"][j] \
                        and read_in_step(r, int(req["start"][i]) + 1, t, int(j)) \
                        and req["region"][i] == req["region"][j] and addr[i] % req["align"][j] == 0:
                    best = best or (t, i, j)
    t, i, j = best
    addr[j] = addr[i]
    p2 = dataclasses.replace(pl, placement=dataclasses.replace(pl.placement, addr=addr))
    cfg = r["cfg"]
    return Plant(lower=lower(p2, r["schedule"], target_of(cfg), cfg["policy"].get("exchange_table_cap", 81920)))


# ---- the kinds, and running one ------------------------------------------------------

@dataclass(frozen=True)
class Kind:
    name: str
    where: str                  # device | fp8 | nan | model
    plant: Callable             # device kinds: plant(trial, layer) -> Plant; model: plant(cfg) -> context
    per_layer: bool = True      # planted in one chosen layer (else program-wide, or the model itself)
    fp8_only: bool = False      # FP8 activations only (the casts it changes exist only there)


KINDS = [
    Kind("stale exchange (156 B of one tile's received rows)", "device", stale_exchange),
    Kind("exchange drops a row", "device", dropped_row),
    Kind("exchange swaps two rows", "device", swapped_rows),
    Kind("matmul skips a k-group (1/4 of k, one tile)", "device", skipped_k_group),
    Kind("kernel skips a k-group (operand intact in memory)", "device", kernel_skips_k_group),
    Kind("one tile skips a compute superstep", "device", tile_skips_superstep),
    Kind("op output column unwritten", "device", zeroed_output_column),
    Kind("wrong byte in one tile's weights (fc1)", "device", wrong_weight_byte),
    Kind("2 of fc2's k-rows zeroed in the stream", "device", zeroed_k_rows),
    Kind("proj bias dropped", "device", dropped_bias),
    Kind("relocation stride 0 (one tile, weights)", "device", relocation_stride_zero, per_layer=False),
    Kind("overlapping live buffers (allocator)", "device", overlapping_buffers, per_layer=False),
    Kind("FP8 weight scale from the wrong layer (one tile)", "fp8", scale_from_wrong_layer),
    Kind("NaN in an op output", "nan", nan_in_output),
    Kind("NaN in a weight (fc2 bias)", "nan", nan_in_weight),
    Kind("FP8 clipping activation scales (1/16)", "model", clipping_scale, per_layer=False, fp8_only=True),
    Kind("attention scale 1/sqrt(d+1)", "model", attention_scale, per_layer=False),
    Kind("GELU tanh for erf", "model", gelu_tanh, per_layer=False),
    Kind("pos_embed missing", "model", missing_pos_embed, per_layer=False),
    Kind("LayerNorm eps 1e-2", "model", layernorm_eps, per_layer=False),
    Kind("q and k swapped", "model", qk_swapped, per_layer=False),
    Kind("MAP head latent zero", "model", map_latent, per_layer=False),
]
BY_NAME = {k.name: k for k in KINDS}

TOWER = dict(name="vit", preset="custom", scope="tower", width=32, hidden=64, heads=2, image=42, patch=14,
             layers=3)           # 9 tokens (+1 masked padding row), 3 layers: a first, a middle and a last


# FP8 accuracy budgets of the tiny tower (policy.fp8_budget_*; the defaults are the So400m
# tower's): its 32-wide FP8 casts err more, measured up to 9.7 % (embedding) / 8.9 % (features)
# against the FP16-activation twin over 3 seeds x 3 photos (experiments/model_margin/README.md)
TINY_FP8_BUDGET = dict(fp8_budget_embedding=0.2, fp8_budget_features=0.2)


def trial(target: dict, fp8: bool, model: dict | None = None, check: str | None = None) -> dict:
    cfg = dict(model=dict(model or TOWER, **({"fp8_activations": True} if fp8 else {})), target=target,
               policy=({} if check is None else {"check": check}) | ({} if model else TINY_FP8_BUDGET))
    r = compile_trial(cfg)
    r["cfg"] = cfg
    return r


def checks_failed(m: dict) -> list[str]:
    """Which checks a run's metrics say failed."""
    by = []
    if m.get("ops_failed", 0) > 0:
        by.append("op read-back")
    if not m.get("max_abs_error", 0.0) <= m.get("tolerance", 0.0):
        by.append("end to end")
    if m.get("layers_failed", 0) > 0:
        by.append("layer output")
    if m.get("exchanges_failed", 0) > 0:
        by.append("exchange")
    if "model:" in m.get("failed", ""):
        by.append("model")
    if "fp8 accuracy" in m.get("failed", ""):
        by.append("fp8 accuracy")
    return by


def outcome(r: dict, kind: Kind, layer: int | None) -> dict:
    """Plant `kind` in Repeat iteration `layer` of trial r (or the model kinds: rebuild
    the trial with the builder patched) and run it: what caught it, naming what."""
    cfg = r["cfg"]
    try:
        if kind.where == "model":
            with kind.plant(cfg):
                res = compile_trial(cfg)["run"]
        else:
            p = kind.plant(r, layer)
            pol = policy_of(cfg)
            res = run(p.lower or r["lower"], r["model"], target_of(cfg), cfg["policy"].get("check", "all"),
                      p.streams, p.inject, ref=r["reference"],
                      fp8_budget=(pol.fp8_budget_embedding, pol.fp8_budget_features))
    except MachineFault as e:
        return dict(caught=True, by=["machine"], op="-", iteration=e.step, tile=e.tile, error=None, bound=None,
                    message=str(e))
    m = res.metrics()
    by = checks_failed(m)
    fails = [f for f in (m.get("first_failed_op"), m.get("first_failed_layer"), m.get("first_failed_exchange")) if f]
    f = min(fails, key=lambda f: f["iteration"]) if fails else {}      # the earliest iteration's
    if "buffer" in f:                       # an exchange: the buffer it fills, and how many bytes were wrong
        f = dict(f, op=f["buffer"], error=f["bytes_wrong"], bound=0)
    return dict(caught=bool(by) and not res.validated, by=by, op=f.get("op", "-"), iteration=f.get("iteration"),
                tile=f.get("tile"), error=f.get("error", m.get("max_abs_error")),
                bound=f.get("bound", f.get("tolerance", m.get("tolerance"))),
                e2e=(m.get("max_abs_error"), m.get("tolerance")),
                model=m.get("model_rms_rel_error"), exchange=m.get("first_failed_exchange"),
                view=f.get("view", "rows" if "kind" in f else None))
