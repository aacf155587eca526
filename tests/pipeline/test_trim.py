"""pipeline/trim.py: malloc_trim on a thread while a stage runs; it must change no byte."""
import numpy as np
import pytest

from pipeline import codec
from pipeline.trim import ENV, Trimmer, period_from_env


def test_trims_while_active_and_stops():
    with Trimmer(0.01) as t:
        blocks = [np.ones(1 << 18) for _ in range(64)]      # 128 MiB, freed while trimming
        del blocks
        import time
        time.sleep(0.1)
    n = t.trims
    assert n >= 2 or t._fn is None           # not glibc: nothing to call
    assert t.trims == n                      # the thread stopped with the block


def test_off_and_bad_period(monkeypatch):
    assert Trimmer(0)._fn is None
    monkeypatch.setenv(ENV, "0")
    assert period_from_env() == 0.0
    monkeypatch.setenv(ENV, "soon")
    with pytest.raises(ValueError, match=ENV):
        period_from_env()


def test_results_encode_the_same_with_trimming():
    rng = np.random.default_rng(0)
    value = {"a": rng.integers(-5, 300, 100_000), "b": rng.standard_normal(1000)}
    plain = codec.dumps(value)
    with Trimmer(0.001):
        for _ in range(20):
            assert codec.dumps(value) == plain
