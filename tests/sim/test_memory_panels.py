"""host_in's panel rearrangement (load._panel_stream, strided copies into a reused buffer)
against isa.panel_order: full and partial last panels, several matrices, element widths
with and without an unsigned integer type that wide."""
import numpy as np
import pytest

from compiler import isa
from compiler.sim.load import _panel_stream


@pytest.mark.parametrize("R,C,P", [(1, 1, 4), (5, 3, 4), (33, 24, 32), (80, 3, 32), (64, 24, 4), (7, 5, 3)])
@pytest.mark.parametrize("es", [1, 2, 3, 8])
def test_panel_stream_equals_panel_order(R, C, P, es):
    rng = np.random.default_rng(R * 100 + C * 10 + es)
    for M in (1, 3):
        buf = rng.integers(0, 256, M * R * C * es, dtype=np.uint8)
        elem = {1: np.uint8, 2: np.uint16, 8: np.uint64}.get(es, np.dtype((np.void, es)))
        want = np.ascontiguousarray(isa.panel_order(buf.view(elem).reshape(M, R, C), P)).view(np.uint8).ravel()
        scratch = np.full(len(buf) + 7, 0xAB, np.uint8)        # larger than the stream, not zeroed
        assert np.array_equal(_panel_stream(buf, "w", R, C, es, P), want)
        got = _panel_stream(buf, "w", R, C, es, P, out=scratch)
        assert np.shares_memory(got, scratch) and np.array_equal(got, want)
        assert (scratch[len(buf):] == 0xAB).all()
