"""A communication lower bound per op: the fewest bytes the average tile must receive,
from first principles (Loomis-Whitney), sharing no code with the planner.

A matmul C_g[M, N] = A_g[M, K] · B_g[K, N] over G groups runs W = G·M·K·N MACs on P
tiles. At its compute floor every tile runs w = W / P of them (an unbalanced schedule
computes longer; see README.md). Tile i touches a_i elements of A, b_i of B and c_i of C;
the MACs it runs are a set of (g, m, k, n) points whose three projections are those
sets, so (Loomis-Whitney, summed over groups with Cauchy-Schwarz)

    w² ≤ a_i · b_i · c_i,   and   a_i ≥ w / N,   b_i ≥ w / M,   c_i ≥ w / K

(an A element meets at most N elements of B, and so on). What it must receive:
  * A: every element it touches and did not hold. A exists once when the op starts
    (each producer writes each output element on one tile), so over all tiles
    Σ received A ≥ e_a · (Σ a_i − |A|);
  * B a weight: the elements beyond those resident on the tile, at most R_i bytes of
    its memory per layer: e_b · max(0, b_i − R_i / e_b); B an activation (K, V): as A,
    e_b · (Σ b_i − |B|);
  * C: an output touched by t tiles needs t − 1 partials received (no narrower than
    the f16 output, e_p = 2 B): Σ ≥ e_p · (Σ c_i − |C|).
So Σ_i recv_i ≥ P · ψ(w, R) − e_a|A| − e_p|C| (− e_b|B| for an activation B), where
ψ(w, R) = min over (a, b, c) of the per-tile terms: a convex problem (abc ≥ w² is a
convex set: the geometric mean is concave), solved in closed form over (a, c) and by
golden section over b; ψ is convex in R, so with the tiles' resident bytes R_i summing
to P·R̄ the sum is least at R_i = R̄ (Jensen). The busiest tile receives at least the
average, at exchange_bytes_per_cycle; one exchange phase is paid when any byte moves.

Vector ops (LayerNorm, bias, GELU, softmax, residual add, cast) need no byte moved when
their operands share a layout (bias and LayerNorm parameters resident): exchange 0; their
floor is their bytes at vector_bytes_per_cycle and transcendentals at their rate, spread
over all tiles (as roofline.py's bound).
"""
from __future__ import annotations

import math

GOLD = (math.sqrt(5) - 1) / 2


def h_ac(w: float, b: float, N: int, K: int, ea: float, ep: float) -> float:
    """min ea·a + ep·c subject to a·c ≥ w²/b, a ≥ w/N, c ≥ w/K (closed form: given a, the
    best c is max(w/K, w²/(a b)); the resulting function of a is convex, least at the
    unconstrained optimum clipped into [w/N, max(w/N, (w²/b)/(w/K))])."""
    beta, alpha, gamma = w * w / b, w / N, w / K
    a_star = math.sqrt(beta * ep / ea)
    a = min(max(a_star, alpha), max(alpha, beta / gamma))
    return ea * a + ep * max(gamma, beta / a)


def psi(w: float, G: int, M: int, K: int, N: int, ea: float, eb: float, ep: float,
        resident: float, b_act: bool) -> float:
    """Least bytes a tile running w MACs must touch beyond its resident B (`resident`
    bytes; an activation B has none): min over b of its B cost + h_ac. Convex in b:
    golden section to a bracket of 1e-9 of the range."""
    lo, hi = max(w / M, 1e-9), float(G) * K * N
    if lo >= hi:
        lo = hi

    def f(b):
        cost_b = eb * b if b_act else eb * max(0.0, b - resident / eb)
        return cost_b + h_ac(w, b, N, K, ea, ep)
    return f(_golden(f, lo, hi, 1e-9))


def matmul_recv(op: dict, P: int, resident: float) -> float:
    """Bytes the average tile must receive for matmul `op` (dict: G M K N ea eb ep b_act)
    with `resident` bytes of its weight per tile."""
    G, M, K, N = op["G"], op["M"], op["K"], op["N"]
    w = G * M * K * N / P
    owned = op["ea"] * G * M * K + op["ep"] * G * M * N + (op["eb"] * G * K * N if op["b_act"] else 0)
    total = P * psi(w, G, M, K, N, op["ea"], op["eb"], op["ep"], 0.0 if op["b_act"] else resident, op["b_act"])
    return max(0.0, (total - owned) / P)


def split_budget(ops: dict, P: int, budget: float, lambdas: int = 60) -> tuple[float, dict]:
    """A lower bound on Σ_op recv_op(R_op) over splits Σ R_op ≤ budget of the tile's
    weight bytes (each recv_op is convex and decreasing in R): the Lagrangian dual,
    max over λ ≥ 0 of Σ_op min_R (recv_op(R) + λR) − λ·budget; any λ gives a valid
    bound, the scan takes the best. Returns the bound and, per op, the R at that λ."""
    weights = [n for n, op in ops.items() if not op["b_act"]]
    fixed = sum(matmul_recv(op, P, 0.0) for n, op in ops.items() if op["b_act"])
    best, at = -1.0, {}
    for j in range(lambdas + 1):
        lam = 1.2 * j / lambdas    # a resident byte spares at most one received byte: λ ≤ 1 suffices
        total, pick = fixed - lam * budget, {}
        for n in weights:
            op = ops[n]
            r = _argmin_r(lambda R: matmul_recv(op, P, R) + lam * R, budget)
            pick[n] = r
            total += matmul_recv(op, P, r) + lam * r
        if total > best:
            best, at = total, pick
    return best, at


def _argmin_r(f, hi: float) -> float:
    """Golden section over [0, hi] of a convex f."""
    return _golden(f, 0.0, hi, 1e-6)


def _golden(f, lo: float, hi: float, rel: float) -> float:
    """The argmin of a convex f over [lo, hi] by golden section to a bracket of rel·max(hi, 1),
    the ends included as candidates."""
    a, z = lo, hi
    x1, x2 = z - GOLD * (z - a), a + GOLD * (z - a)
    f1, f2 = f(x1), f(x2)
    while z - a > rel * max(hi, 1.0):
        if f1 <= f2:
            z, x2, f2 = x2, x1, f1
            x1 = z - GOLD * (z - a)
            f1 = f(x1)
        else:
            a, x1, f1 = x1, x2, f2
            x2 = a + GOLD * (z - a)
            f2 = f(x2)
    return min([lo, hi, x1, x2], key=f)
