"""The interface the place phase calls: PlaceConfig, solve, bad input."""
import pytest

from compiler.place import (INFEASIBLE, PLACED, PlaceConfig, Problem, ProblemError, solve,
                            validate)
from place_cases import random_problem

B, E = 0x4C000, 1024


def test_config_defaults_and_unknown_key():
    cfg = PlaceConfig()
    assert cfg.search and cfg.canonical and cfg.lower_bound and cfg.search_node_budget == 4096
    assert PlaceConfig.from_dict({"search": "false"}).search is False
    with pytest.raises(ValueError, match="serch"):
        PlaceConfig.from_dict({"serch": True})
    with pytest.raises(ValueError, match="search_node_budget"):
        PlaceConfig.from_dict({"search_node_budget": "lots"})


def test_greedy_places_and_validates():
    for seed in range(20):
        p = random_problem(seed, n=10, fill=0.4)
        sol = solve(p)
        if sol.status == PLACED:
            assert validate(p, sol.addr) == [], seed


def test_overcapacity_is_proved_with_figures():
    p = Problem(B, B + 2 * E, B + 4 * E, E, size=[2000, 1500, 1000], align=[8] * 3,
                start=[0, 1, 1], end=[3, 2, 2], region=[0] * 3)
    sol = solve(p)
    assert sol.status == INFEASIBLE
    assert sol.event == 1 and sol.live_bytes == 4500 and sol.available_bytes == 4 * E
    assert sol.deficit == 4500 - 4 * E


def test_interleaved_overcapacity_is_proved():
    # fits overall, but interleaved needs region 1 (2 KiB)
    p = Problem(B, B + 2 * E, B + 4 * E, E, size=[1500, 1500], align=[8, 8], start=[0, 0],
                end=[1, 1], region=[1, 1])
    sol = solve(p)
    assert sol.status == INFEASIBLE and sol.available_bytes == 2 * E


def test_too_big_request_is_proved():
    p = Problem(B, B + 2 * E, B + 4 * E, E, size=[2500], align=[8], start=[0], end=[1],
                region=[2], names=["w"])
    sol = solve(p)
    assert sol.status == INFEASIBLE and sol.request == 0


@pytest.mark.parametrize("kw,needle", [
    (dict(size=[-4]), "size -4"),
    (dict(align=[3]), "not a power of two"),
    (dict(end=[0]), "end <= start"),
    (dict(region=[7]), "region class"),
])
def test_bad_input_is_one_line_naming_request(kw, needle):
    d = dict(size=[64], align=[8], start=[0], end=[1], region=[0])
    d.update(kw)
    p = Problem(B, B + 2 * E, B + 4 * E, E, names=["buf_a"], **d)
    with pytest.raises(ProblemError) as ei:
        solve(p)
    msg = str(ei.value)
    assert "buf_a" in msg and needle in msg and "\n" not in msg


def test_bad_edge_names_unknown_request():
    p = Problem(B, B + 2 * E, B + 4 * E, E, size=[64], align=[8], start=[0], end=[1],
                region=[0], bank_edges=[[0, 5]])
    with pytest.raises(ProblemError, match="unknown request index 5"):
        solve(p)
