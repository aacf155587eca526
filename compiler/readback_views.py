"""Which elements the op read-back reads (compiler/readback.py): the iterations a check mode
covers, and check=rows' views of an op: its sampled rows, and a matmul's column stripes.

Apart from readback.py because it is pure index arithmetic over the graph (no memory, no
values): what a view selects can be reasoned about, and tested, without running anything.
Each view is ([(rows, cols) of each input], (rows, cols) of the output, attrs the op is
checked with); None means all."""
from __future__ import annotations

import numpy as np

from .policy import CHECKS

ROW_STRIDE = 32  # check=rows: every 32nd row of an op output, from a different row each iteration
ROW_SAMPLED = ("matmul", "add", "bias", "gelu", "layernorm", "softmax", "cast")   # row-wise, or matmul's rows


def checked_iterations(check: str, count: int) -> set[int]:
    if check not in CHECKS:
        raise ValueError(f"run.check={check!r}: not one of {', '.join(CHECKS)}")
    if check in ("all", "rows"):
        return set(range(count))
    if check == "last_iteration":
        return {count - 1}
    return {0, count // 2, count - 1}


class Views:
    """check=rows' views of the ops of `graph`, cached by (op, iteration phase).
    `col_width(n)`: the narrowest output block a tile holds of op n (from lower's dump)."""

    def __init__(self, graph, col_width):
        self.g, self.col_width = graph, col_width
        self.cache: dict[tuple, tuple | None] = {}

    @staticmethod
    def sample(m: int, i: int) -> np.ndarray:
        """The rows of an m-row output (or matmul group) read in iteration i."""
        return np.arange(m) if m <= ROW_STRIDE else np.arange(i % ROW_STRIDE % m, m, ROW_STRIDE)

    def rows(self, n: int, op, i: int):
        """Row-sampled view of op n in iteration i. Output rows: every ROW_STRIDE-th row from
        offset i mod ROW_STRIDE (so successive iterations read other rows, and other tiles'
        blocks); all rows of a tensor that has at most ROW_STRIDE. A matmul samples its
        groups' rows alike (attention: the same tokens of every head) and maps them to rows
        of `a` (its b whole); row-wise ops take the same rows of every input with the
        output's rows."""
        key = (n, i % ROW_STRIDE)
        if key in self.cache:
            return self.cache[key]
        nrows, pick = self.g.tensors[op.outputs[0]].shape[0], lambda m: self.sample(m, i)
        if op.kind == "matmul":
            m, groups = op.attr("m"), op.attr("groups", ((0, 0, 0, 0, 0, 0),))
            local = pick(m)
            ars, crs = sorted({g[0] for g in groups}), sorted({g[4] for g in groups})
            k = len(local)
            regroup = tuple((ars.index(g[0]) * k, g[1], g[2], g[3], crs.index(g[4]) * k, g[5]) for g in groups)
            ins = [(np.concatenate([ar + local for ar in ars]), None), (None, None)]
            got = (ins, (np.concatenate([cr + local for cr in crs]), None), {"m": k, "groups": regroup})
        else:
            R = pick(nrows)
            got = ([(R if self.g.tensors[x].shape[0] == nrows else None, None) for x in op.inputs], (R, None), {})
        self.cache[key] = got
        return got

    def cols(self, n: int, op, i: int):
        """Column stripes of matmul n in iteration i: every row of a few output columns, so
        that a fault confined to rows the row sample skips -- one tile's kernel skipping k
        terms, a received row gone stale -- still meets a checked element. Columns: every
        w-th of each group's n, w the narrowest output block a tile holds (so every tile's
        block holds one), from offset i mod w; b's matching columns (its rows when
        transposed), `a` whole. None when the stripes cannot be read (below)."""
        nn, groups, tb = op.attr("n"), op.attr("groups", ((0, 0, 0, 0, 0, 0),)), op.attr("transpose_b", False)
        w = max(1, min(nn, self.col_width(n)))
        key = ("cols", n, i % w)
        if key in self.cache:
            return self.cache[key]
        local = np.arange(i % w, nn, w)
        K, at = len(local), 2 if tb else 3                # b's offset: its rows when transposed, else its columns
        bs, cs = sorted({g[at] for g in groups}), sorted({g[5] for g in groups})
        regroup = tuple(tuple(g[:at]) + (bs.index(g[at]) * K,) + tuple(g[at + 1:5]) + (cs.index(g[5]) * K,)
                        for g in groups)
        bsel = np.concatenate([b + local for b in bs])
        ins = [(None, None), (bsel, None) if tb else (None, bsel)] + [(None, None)] * (len(op.inputs) - 2)
        osel = np.concatenate([c + local for c in cs])
        # Snapshot.rows / cols read sorted, distinct indices: groups whose b (or output)
        # ranges interleave get no stripes (none seen: heads' ranges are disjoint)
        ok = (np.diff(bsel) > 0).all() and (np.diff(osel) > 0).all()
        got = self.cache[key] = (ins, (None, osel), {"n": K, "groups": regroup}) if ok else None
        return got
