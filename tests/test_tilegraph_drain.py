"""expand/tilegraph.py drain: the builder's parts concatenated column by column, each part's
column dropped as it is taken (memory only: the same table as concat)."""
import numpy as np

from compiler.expand.tilegraph import Builder, concat, drain


def test_drain_equals_concat_and_empties_the_parts():
    rng = np.random.default_rng(1)
    parts = [{"a": rng.integers(0, 9, n), "b": np.int32(n) * np.ones(n, np.int32)} for n in (3, 0, 5, 1)]
    want = concat([dict(p) for p in parts])
    got = drain(parts)
    assert parts == [] and list(got) == list(want)
    for k in want:
        assert got[k].dtype == np.int64 and np.array_equal(got[k], want[k])


def test_build_leaves_the_builder_spent_not_the_graph():
    b = Builder(4)
    r = b.alloc_rows("x", [0, 1, 2], 64, 8, 0, 1)
    b.add("kern", step=1, tile=[0, 1, 2], op=1, r0=r)
    b.add("xfer", step=1, src=[0, 1], dst=[2, 3], sreq=r[:2], dreq=r[1:], s_row_bytes=8, s_rows=1, d_row_bytes=8, d_rows=1)
    tg = b.build(["compute"], [], {}, "t")
    assert len(tg.req["tile"]) == 3 and list(tg.kern["tile"]) == [0, 1, 2] and list(tg.xfer["dst"]) == [2, 3]
    assert b.req == [] and b.kern == [] and b.xfer == []
