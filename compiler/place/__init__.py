"""Per-tile placement (docs/architecture.md §3 'place'): greedy orders, address-domain search,
canonical search, a live-byte lower bound, an independent validator, dumps.

    from compiler.place import PlaceConfig, Problem, solve, validate
    sol = solve(problem, PlaceConfig())        # status placed | infeasible | unknown
    errors = validate(problem, sol.addr)       # [] when the placement is legal
"""
from .config import PlaceConfig
from .problem import (CODE, INFEASIBLE, INTERLEAVED, PLACED, STANDARD, UNKNOWN, Problem,
                      ProblemError, Solution, check)
from .solve import solve
from .validate import validate

__all__ = ["PlaceConfig", "Problem", "Solution", "ProblemError", "solve", "validate", "check",
           "PLACED", "INFEASIBLE", "UNKNOWN", "STANDARD", "INTERLEAVED", "CODE"]
