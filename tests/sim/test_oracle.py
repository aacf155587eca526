"""The independent cycle oracle (compiler/sim/oracle.py) against the simulator: per
superstep, on every workload of the tiny target and 20 random GEMMs; and a cost model
changed behind the oracle's back (target.py's rates) must be caught."""
import math

import numpy as np
import pytest

from compiler import sim
from compiler.phases import compile_trial
from compiler.sim import oracle
from compiler.target import Target
from helpers import cfg, set_cost_term, target_cfg

WORKLOADS = {
    "gemm": dict(name="gemm", m=32, k=64, n=64, dtype="f16", seed=0),
    "gemm-fp8-ragged": dict(name="gemm", m=19, k=72, n=44, dtype="fp8", seed=1),
    "mlp": dict(name="mlp", tokens=24, width=32, hidden=64),
    "mlp-b2-repeat3": dict(name="mlp", tokens=12, batch=2, width=16, hidden=32, repeat=3),
    "mlp-b2-repeat3-f16": dict(name="mlp", tokens=12, batch=2, width=16, hidden=32, repeat=3, weight_dtype="f16"),
    "attention": dict(name="attention", tokens=16, heads=2, head_dim=16),
    "flash-attention": dict(name="flash_attention", tokens=15, heads=2, head_dim=16, block=4),
    "vit": dict(name="vit", preset="custom", width=32, hidden=64, heads=2, tokens=16, layers=2),
    "vit-fp8-activations": dict(name="vit", preset="custom", width=32, hidden=64, heads=2, tokens=15, layers=2,
                                fp8_activations=True),
}
rng = np.random.default_rng(20261130)
GEMMS = []
for i in range(20):
    dtype = ["f16", "fp8"][i % 2]
    w = 4 if dtype == "fp8" else 2
    GEMMS.append(dict(name="gemm", m=int(rng.integers(1, 80)), k=w * int(rng.integers(1, 48)),
                      n=w * int(rng.integers(1, 48)), dtype=dtype, seed=i))

_cache = {}


def compiled(model: dict, **policy):
    key = repr(sorted(model.items())) + repr(sorted(policy.items()))
    if key not in _cache:
        r = compile_trial(dict(model=model, target=target_cfg("tiny"), policy=policy))
        assert r["report"].summary["status"] == "ok", r["report"].summary
        _cache[key] = r
    return _cache[key]


def simulate(r):
    prog = r["lower"].program
    streams = {n: np.ascontiguousarray(r["model"].data[n]).view(np.uint8).ravel() for n in prog.in_streams}
    return sim.run(prog, streams)


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_oracle_equals_simulator_on_every_workload(name):
    r = compiled(WORKLOADS[name])
    prog = r["lower"].program
    assert oracle.step_cycles(prog).tolist() == r["run"].cycles_per_step
    assert oracle.host_cycles(prog) == r["run"].host_cycles


@pytest.mark.parametrize("i", range(len(GEMMS)))
def test_oracle_equals_simulator_on_random_gemms(i):
    r = compiled(GEMMS[i])
    assert oracle.step_cycles(r["lower"].program).tolist() == r["run"].cycles_per_step


def test_repeat_is_walked_count_times():
    r = compiled(WORKLOADS["mlp-b2-repeat3"])
    o = oracle.step_cycles(r["lower"].program)
    assert len(o) == len(r["run"].cycles_per_step) and len(o) % 3 == 0


def _supertile_exchange(self, send, recv):       # the old model: a pair of tiles shares 2 x 4 B/cycle
    send = np.asarray(send, np.int64)
    bus = np.concatenate([send, np.zeros(len(send) % 2, np.int64)]).reshape(-1, 2).sum(1)
    worst = max(int(np.max(recv, initial=0)), math.ceil(int(bus.max(initial=0)) / 2))
    return self.exchange_phase_cycles + math.ceil(worst / self.exchange_bytes_per_cycle)


def _groups_only(self, m, k, n, d, da=None, f32_out=False):   # whole channel groups, rows streamed at the peak rate
    d = self.amp_dtype(d, da)
    gi, go = self.amp_in_group[d], self.amp_out_group[d]
    load = -(-(gi * go * {"f16": 2, "fp8": 1, "f32": 4}[d]) // self.amp_weight_load_bytes_per_cycle)
    return 50 + -(-k // gi) * -(-n // go) * (load + -(-(m * gi * go) // self.amp_macs_per_cycle[d]))


MUTANTS = {
    "LayerNorm per byte (the previous model)": ("layernorm_cycles", lambda self, r, c, f=0:
                                                40 + -(-(10 * r * c) // 8) + -(-r // 2)),
    "GELU per byte (the previous model)": ("gelu_cycles", lambda self, n: 40 + -(-(4 * n) // 8) + -(-n // 2)),
    "supertile pair bonus": ("exchange_cycles", _supertile_exchange),
    "no AMP channel groups": ("matmul_cycles", lambda self, m, k, n, d, da=None, f32_out=False:
                              50 + -(-(m * k * n) // self.amp_macs_per_cycle[self.amp_dtype(d, da)])),
    "no worker split (the previous model)": ("matmul_cycles", _groups_only),
}


COST_TERMS = {       # compiler/costs/ terms changed behind the oracle's back, end to end
    "no f32 -> f16 output cast": ("amp_output_cast_cycles", lambda m, n, W, v: 0),
    "weights loaded 64 bits a cycle": ("amp_weight_load_cycles", lambda u, g, b, r: u * g * b // (r // 2)),
    "row reductions one worker": ("reduce_rows_cycles", lambda r, c, W, v: W * (np.asarray(r) * (np.asarray(c) // 4)
                                                                                 + 12 * np.asarray(r) + 17)),
    "GELU op 10 cycles (float)": ("GELU_OP_CYCLES_HALF", 10),
    "BroadcastScalar1D free (softmax scale, var -> invStdDev)": ("broadcast_scalar_1d_cycles", lambda n, e, b, W, v: 0 * np.asarray(n)),
}


# The program the mutants run on: the tiny ViT planned with sends charged per receiver. A
# mutant can only be caught where the program exercises it; with broadcast sends (the
# default) this ViT's plan differs, and two mutants change nothing it runs (no exchange
# step is bound by a sender, which is all the supertile bonus speeds up; nor does its
# one row reduction cost differently on one worker).
def mutated():
    return compiled(WORKLOADS["vit"], broadcast_sends=False)


@pytest.mark.parametrize("term", list(COST_TERMS))
def test_a_changed_cost_term_is_caught_end_to_end(term, monkeypatch):
    r = mutated()
    expected = oracle.step_cycles(r["lower"].program).tolist()
    attr, fn = COST_TERMS[term]
    set_cost_term(monkeypatch, attr, fn)
    assert simulate(r).step_cycles.tolist() != expected


@pytest.mark.parametrize("mutant", list(MUTANTS))
def test_a_changed_rate_in_target_py_is_caught(mutant, monkeypatch):
    """The simulator charges from target.py; change one of its costs after compiling
    and the oracle, which does not read target.py, must disagree."""
    r = mutated()
    expected = oracle.step_cycles(r["lower"].program).tolist()
    assert simulate(r).step_cycles.tolist() == expected          # unchanged: they agree
    attr, fn = MUTANTS[mutant]
    monkeypatch.setattr(Target, attr, fn)
    assert simulate(r).step_cycles.tolist() != expected


def test_a_changed_rate_passed_to_the_simulator_is_caught():
    """The figures the simulator reads from the program differ from the oracle's."""
    r = compiled(WORKLOADS["gemm"])
    prog = r["lower"].program
    expected = oracle.step_cycles(prog).tolist()
    import dataclasses
    fast = dataclasses.replace(prog, target=dict(prog.target, exchange_bytes_per_cycle=8))
    streams = {n: np.ascontiguousarray(r["model"].data[n]).view(np.uint8).ravel() for n in prog.in_streams}
    assert sim.run(fast, streams).step_cycles.tolist() != expected


def test_relocated_size_words_are_costed_per_iteration():
    """A relocation that changes a size (here a COPY's row count, +4 rows per
    iteration) changes an iteration's cost: the oracle re-derives each iteration."""
    from compiler import isa

    from .asm import R0_DATA, R0_DATA2, Asm
    a = Asm()
    rt = a.reloc_table(0, [(a.code_word(0, 1, 4), 4)])
    for t in range(a.T):
        if t == 0:
            a.on(t, isa.REPEAT, 3, 2, rt, 1)
            a.on(t, isa.COPY, R0_DATA2, R0_DATA, 16, 1, 16, 16)
        else:
            a.on(t, isa.REPEAT, 3, 1, 0, 0)
    a.sync()
    prog = a.build()
    got = sim.run(prog, {}).step_cycles.tolist()
    f = dict(prog.target)
    assert got == [f["kernel_overhead_cycles"] + 16 * r // f["copy_bytes_per_cycle"] + f["sync_cycles"]
                   for r in (1, 5, 9)]
    assert oracle.step_cycles(prog).tolist() == got
