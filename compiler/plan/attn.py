"""policy.attn_variants: the grouped (attention) matmuls' grids re-ranked in the best
candidate's context and handed to expand as variants of it.

Why (experiments/attention/README.md): the beam prices a grid's operand gathers in the
matmul's own exchange superstep, but expand moves an activation B finished earlier (v
for P·V, produced by the qkv matmul two ops before) into an earlier superstep with room
(policy.early_gathers), and the (image, head) groups' gathers are sender-bound in ways
only the exact per-tile figures show. So the beam's pick for P·V (So400m: 16x5x3x6, each
P block sent to gn = 3 tiles) loses, measured exactly, to a grid that sends every P
element once (16x9x1x10: V's larger blocks ride in the scores' superstep, where the q/k
senders bound the step and the v holders had room): −514 cycles a layer at 4 and 27
layers, −922 with FP8 activations (measured alone, at 39b5d9b's reduce_rows).

For each grouped matmul n (inside the Repeat body when there is one: the layers are what
repeats), two rankings of its grids each give `count` variants (the best candidate with
n's grid replaced): the beam run again with every other matmul held at the best
candidate's grid and n free (plan/beam.py: n's grids costed with their producers'
layouts and their consumers' gathers), and plan/matmul.py's standalone estimate
(senders balanced over every tile, which an early gather into a step with room
approaches; the P·V winner above is its first). expand screens them with the other
candidates (exact cycles) and its compose (policy.compose_candidates) mixes each
matmul's measured-cheapest grid, so variants of two ops combine. Nothing is chosen by
model name or depth: a variant wins only by expand's exact cycles.
"""
from __future__ import annotations

import numpy as np

from ..target import Target
from .beam import Pricing, beam_search
from .layouts import groups_of


def grouped_matmuls(g, choice: tuple) -> list[int]:
    """The matmuls of `choice` with more than one group, inside the Repeat body if any."""
    first, stop = g.body()
    return [n for n, _, _ in choice if first <= n < stop and len(groups_of(g.ops[n])) > 1]


def standalone_order(o) -> list[int]:
    """Grid indices of Options o by plan/matmul.py's standalone estimate (operands
    balanced over every tile), plain grids only (no relay, ring or residency)."""
    plain = np.ones(len(o), bool)
    for f in ("relay", "ring", "still"):
        if f in o.a:
            plain &= o.a[f] == 0
    idx = np.flatnonzero(plain)
    return idx[np.lexsort((idx, o.a["cycles"][idx]))].tolist()


def group_variants(g, target: Target, found: list, count: int, panels: dict, pricing: Pricing = Pricing()) -> list:
    """Entries (cycles, choice, options) like plan's `found`: for each grouped matmul of
    found[0] (the best state), its `count` best other grids by the beam with every other
    matmul held at found[0]'s grid (rotations kept), then its `count` best by the
    standalone estimate (the two err in opposite directions: the first prices every
    gather in its own superstep from the producers' actual layouts, the second assumes
    balanced senders, which a B gather moved into a superstep with room approaches);
    none already in `found`."""
    if not found or count <= 0:
        return []
    _, choice, opts = found[0]
    held = {n: (i, rot) for n, i, rot in choice}
    seen = {tuple(f[1]) for f in found}
    out = []

    def add(n, i, cyc) -> bool:
        new = tuple((m, i if m == n else held[m][0], 0 if m == n else held[m][1]) for m, _, _ in choice)
        if i == held[n][0] or new in seen:
            return False
        seen.add(new)
        out.append((int(cyc), new, opts))
        return True
    for n in grouped_matmuls(g, choice):
        narrowed = {m: (o if m == n else o.take(np.array([held[m][0]]))) for m, o in opts.items()}
        ranked = beam_search(g, target, narrowed, count + 1, count + 1, panels=panels, pricing=pricing)
        context = {dict((m, j) for m, j, _ in ch)[n]: cyc for cyc, ch in ranked}
        mine = 0
        for i, cyc in context.items():
            mine += add(n, i, cyc) if mine < count else 0
        mine = 0
        for i in standalone_order(opts[n]):
            if mine == count:
                break
            # its in-context estimate when the beam ranked it, else the best candidate's
            # (a variant's rank among candidates does not decide: expand measures them all)
            mine += add(n, i, context.get(i, found[0][0]))
    return out
