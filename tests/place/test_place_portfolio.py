"""`portfolio` (portfolio.py): two forked workers race; the answer is decided by
their deterministic work counts, never by which one finished first. Fake
workers whose speed is inverted between runs must give the same answer; a worker
that can no longer win is stopped; a failing worker is an error, not an unknown.
And end to end: a hard near-zero-slack case through the portfolio gives a valid
placement, and the same bytes on a second run."""
import sys
import time
from pathlib import Path

import pytest

from compiler.place import PLACED, PlaceConfig, solve, validate
from compiler.place import portfolio

pytestmark = pytest.mark.skipif(not portfolio.available(), reason="needs fork")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments" / "placement_corpus"))
import generate  # noqa: E402


def _fake(answers, delays):
    """Worker i: `answers[i]` = (work at its answer, addr) or None (runs to
    work 10**6 without one), reporting progress every 10 work; sleeps delays[i]
    per step (its speed)."""
    def worker(i, hook):
        ans = answers[i]
        for w in range(10, 10**6, 10):
            time.sleep(delays[i])
            if ans is not None and w >= ans[0]:
                return ans[1], "placed", w, ans[0]
            if not hook(w):
                return None, "beaten", w, w
        return None, "budget", 10**6, 10**6
    return worker


@pytest.mark.parametrize("delays", [(0.0, 0.01), (0.01, 0.0)])
def test_least_work_wins_whatever_the_speed(delays):
    answers = [(300, [0]), (100, [1])]      # worker 1 needs less work: it must win
    addr, st, _ = portfolio.race(_fake(answers, delays), 2, time.perf_counter() + 30)
    assert (addr, st) == ([1], "placed")


@pytest.mark.parametrize("delays", [(0.0, 0.01), (0.01, 0.0)])
def test_tie_goes_to_worker_zero(delays):
    answers = [(200, [0]), (200, [1])]
    addr, st, _ = portfolio.race(_fake(answers, delays), 2, time.perf_counter() + 30)
    assert (addr, st) == ([0], "placed")


def test_a_beaten_worker_stops_and_none_is_budget():
    answers = [(50, [0]), None]           # worker 1 never answers: stopped once past 50
    t = time.perf_counter()
    addr, st, nodes = portfolio.race(_fake(answers, (0.01, 0.001)), 2, t + 30)
    assert (addr, st) == ([0], "placed") and time.perf_counter() - t < 10
    addr, st, _ = portfolio.race(_fake([None, None], (0.001, 0.001)), 2,
                                 time.perf_counter() + 0.3)
    assert (addr, st) == (None, "budget")     # the deadline, no answer


def test_a_failing_worker_is_an_error():
    def worker(i, hook):
        if i == 1:
            raise ValueError("injected")
        time.sleep(0.2)
        return None, "budget", 0, 0
    with pytest.raises(RuntimeError, match="portfolio worker 1: ValueError: injected"):
        portfolio.race(worker, 2, time.perf_counter() + 10)


def test_hard_case_through_the_portfolio_is_valid_and_reproducible(monkeypatch):
    # hard heavy-400-nz (seed 20265929): placed by partner folding, after the short
    # attempts, so through the portfolio's two workers
    p, wit = generate.guillotine(20265929, 400, heavy=True, slack=0.01)
    assert validate(p, wit) == []
    cfg = PlaceConfig(time_limit_s=60, canonical_node_budget=0)
    races = []
    real = portfolio.race

    def spy(*a, **kw):
        races.append(1)
        return real(*a, **kw)
    monkeypatch.setattr(portfolio, "race", spy)
    a = solve(p, cfg)
    b = solve(p, cfg)
    assert races == [1, 1]                # both went through the two workers
    assert a.status == PLACED and validate(p, a.addr) == []
    assert (a.addr == b.addr).all()
    assert solve(p, cfg.override(portfolio=False)).status == PLACED
    assert races == [1, 1]                # ...and not with the flag off


def test_placement_does_not_depend_on_which_worker_is_slow(monkeypatch):
    """The real search through the race, with one worker or the other slowed
    (a sleep after each of its failed attempts): the same bytes as unslowed."""
    p, _ = generate.guillotine(20265929, 400, heavy=True, slack=0.01)
    cfg = PlaceConfig(time_limit_s=60, canonical_node_budget=0)
    base = solve(p, cfg)
    assert base.status == PLACED
    real = portfolio.race
    for slow in (0, 1):
        def race(worker, k, deadline):
            def slowed(i, hook):
                def h(work):
                    if i == slow:
                        time.sleep(0.02)
                    return hook(work)
                return worker(i, h)
            return real(slowed, k, deadline)
        monkeypatch.setattr(portfolio, "race", race)
        sol = solve(p, cfg)
        assert sol.status == PLACED and (sol.addr == base.addr).all(), slow
