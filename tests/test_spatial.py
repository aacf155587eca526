"""The spatial pipeline lowered (compiler/spatial.py, compiler/expand/stages.py): a 4-layer
ViT tower in 2 groups of 2 layers on the tiny target, three held-out photos through one
simulator run. Each image's outputs are held to its own reference, every group boundary is
read back against that image's layer output, and the machine's cycles equal expand's and the
independent oracle's. Injected faults (no shift, every step reading the first image) must
fail."""
import numpy as np
import pytest

from compiler import isa, spatial
from compiler.expand import stages
from compiler.expand.tilegraph import XFER, soa
from compiler.models import photos
from compiler.phases import compile_trial, model_phase, run_phase, policy_of, reference_phase, target_of
from compiler.target import ConfigError
from helpers import target_cfg

SIGLIP = dict(name="vit", preset="custom", width=64, hidden=172, heads=2, image=56, patch=14, layers=4, gelu="erf")
NAMES = photos.HELD_OUT[:3]


@pytest.fixture(scope="module")
def images():
    cfgs = [dict(model=dict(SIGLIP, input=photos.PREFIX + n), target=target_cfg("tiny"), policy={}) for n in NAMES]
    models = [model_phase(c) for c in cfgs]
    image, = [n for n, v in models[0].graph.tensors.items() if v.kind == "input"]
    return cfgs[0], models, [reference_phase(m) for m in models], [m.data[image] for m in models]


def compiled(images, groups=2):
    c, models, _, inputs = images
    return spatial.compile_groups(models[0], target_of(c), policy_of(c), groups, len(inputs))


def run(images, compiled_):
    c, models, refs, inputs = images
    return spatial.run_items(models[0], compiled_[3], 2, inputs, refs, target_of(c))


@pytest.fixture(scope="module")
def two(images):
    return compiled(images)


def test_images_through_two_groups(images, two):
    f = run(images, two)
    assert f["validated"], f
    assert f["boundaries_checked"] == 3 and f["boundaries_failed"] == 0
    assert f["ops_checked"] > 0 and f["ops_failed"] == 0
    mv = two[3].moves                                 # every transfer of every step of the 4 pipeline steps
    body = (mv["step"] > two[3].body[0]) & (mv["step"] <= two[3].body[1])
    assert f["exchanges_checked"] == 4 * (len(mv["step"]) + (2 - 1) * int(body.sum())) and f["exchanges_failed"] == 0
    assert len(f["errors"]) == 2 * 3                  # two output streams, three images
    assert f["cycles"] == f["oracle_cycles"] == two[1].finalists[0].analysis["cycles"]
    assert two[3].program.tiles == 64
    refs = images[2]
    # the images differ, so each output is its own image's (not the first one's, say)
    out = next(iter(refs[0].outputs))
    assert not np.array_equal(refs[0].outputs[out], refs[1].outputs[out])


def test_program_shape(two):
    """One outer REPEAT around everything, the layer REPEAT inside; HOST on group 0's tiles
    (image in) and group 1's (outputs out) only."""
    p, tg = two[3].program, two[2].tilegraph
    code = p.tile_code(0).view("<u4").reshape(-1, isa.INSTR_WORDS)
    assert code[0, 0] == isa.REPEAT and code[0, 1] == 4 and code[0, 2] == len(code) - 2    # all but itself and END
    assert (code[:, 0] == isa.REPEAT).sum() == 2
    h = tg.hstep
    assert set(h["tile"][h["dir"] == 0]) <= set(range(32)) and set(h["tile"][h["dir"] == 1]) <= set(range(32, 64))
    assert tg.steps[0] == tg.steps[-2] == "host" and tg.steps[-1] == "exchange"


def test_without_shift_the_boundaries_fail(images, monkeypatch):
    monkeypatch.setattr(stages, "shift_rows", lambda *a, **k: soa(XFER))
    f = run(images, compiled(images))
    assert not f["validated"] and f["boundaries_failed"] == 3


def test_a_wrong_received_byte_fails_the_exchange_check(images, two, monkeypatch):
    """One byte of what the shift delivered to group 1 flipped in the first pipeline step
    (its item is padding, which no boundary check reads): the exchange check names it."""
    mv = two[3].moves
    j = int(np.flatnonzero(mv["step"] == mv["step"].max())[0])          # the shift, the last superstep
    at = int(mv["dst"][j]), int(mv["daddr"][j])
    real = spatial.Exchanges.__call__
    per = []

    def flip(self, step, mem):
        if step == self.per - 1:
            per.append(step)
            mem.flat[at[0] * mem.tile_bytes + at[1] - mem.base] ^= 1
        real(self, step, mem)
    monkeypatch.setattr(spatial.Exchanges, "__call__", flip)
    f = run(images, two)
    assert per and not f["validated"] and f["exchanges_failed"] == 1
    assert f["first_failed_exchange"]["step"] == int(mv["step"][j]) and f["first_failed_exchange"]["tile"] == at[0]


def test_middle_groups_take_and_give_in_one_shift(images):
    """4 groups of 1 layer: groups 1 and 2 send their y and receive their x in the same shift
    (one block of memory: carried in place), so the exchange check takes the shift's sources
    before it runs; every byte of every exchange still matches, every boundary holds."""
    c, models, refs, inputs = images
    four = compiled(images, groups=4)
    f = spatial.run_items(models[0], four[3], 4, inputs, refs, target_of(c))
    assert f["validated"] and f["exchanges_checked"] > 0 and f["exchanges_failed"] == 0
    assert f["boundaries_checked"] == 3 * 3 and f["ops_checked"] > 0


def test_a_wrong_op_output_inside_a_group_fails_the_op_read_back(images, two, monkeypatch):
    """Group 1's first op of its layer body written wrong on its tiles in pipeline step 1
    (item 0, iteration 0), just as that op completes: the op read-back inside the group
    names the op, the group and the step."""
    lo = two[3]
    d, (b0, b1) = lo.dump, lo.body
    sel = np.flatnonzero((d["group"] == 1) & (d["step"] > b0) & (d["step"] <= b1) & (d["r0"] == 0) & (d["c0"] == 0))
    j = sel[np.argmin(d["step"][sel])]
    op = spatial.group_models(images[1][0], 2, True)[1].graph.ops[int(d["op"][j])].outputs[0]
    real, hit = spatial.Ops.__call__, []

    def corrupt(self, step, mem):
        if step == self.bounds.per + int(d["step"][j]) - 1:
            hit.append(step)
            mem.flat[int(d["tile"][j]) * mem.tile_bytes + int(d["addr"][j]) + 1 - mem.base] ^= 0x04
        real(self, step, mem)
    monkeypatch.setattr(spatial.Ops, "__call__", corrupt)
    f = run(images, two)
    assert hit and not f["validated"] and f["ops_failed"] >= 1
    first = f["first_failed_op"]
    assert (first["op"], first["group"], first["pipeline_step"], first["iteration"]) == (op, 1, 1, 0)


def test_without_item_relocation_every_step_reads_image_0(images):
    """The outer REPEAT's relocation strides zeroed in the program's tables: every step's
    HOSTs move item 0, so images 1 and 2 come out as image 0's."""
    sp = compiled(images)
    p = sp[3].program
    for t in range(p.tiles):
        w = p.tile_code(t).view("<u4").reshape(-1, isa.INSTR_WORDS)[0]
        at = p.table_off[t] + (int(w[3]) - int(p.table_addr[t]))
        rel = p.table[at:at + int(w[4]) * isa.RELOC_BYTES].view("<u4").reshape(-1, isa.RELOC_WORDS)
        rel[:, 1] = 0
    f = run(images, sp)
    assert not f["validated"]
    assert f["boundaries_failed"] >= 1


def test_shift_covers_every_byte(images):
    tg0, tg1 = (stages_group(images, k) for k in (0, 1))
    ys = np.ones(len(tg0.hout["req"]), bool)
    xs = np.asarray(tg1.in_streams)[tg1.hin["stream"]] == "x"
    rb = 64 * 2
    rows = stages.shift_rows(tg0, ys, 0, tg1, xs, 32, rb, (0, 0))
    assert int((rows["s_row_bytes"] * rows["s_rows"]).sum()) == 16 * rb
    xs[np.flatnonzero(xs)[0]] = False
    with pytest.raises(ValueError, match="cover"):
        stages.shift_rows(tg0, ys, 0, tg1, xs, 32, rb, (0, 0))


def stages_group(images, k):
    """Group k's own tile graph, expanded again as compile_groups does."""
    from compiler.expand import expand
    from compiler.plan import plan
    c, models = images[:2]
    pol = policy_of(c)
    m = spatial.group_models(models[0], 2, pol.deferred_norm)[k]
    tw = spatial.group_target(target_of(c), target_of(c).tiles // 2)
    return expand(m, plan(m, tw, pol), tw, pol).finalists[0].tilegraph


def test_refusals(images):
    c, models = images[:2]
    sp = spatial.plan_phase(models[0], target_of(c), policy_of(c), 3)
    assert sp.rejection.reason == "pipeline_groups" and "does not divide the encoder's 4 layers" in sp.rejection.message
    with pytest.raises(ValueError, match="at least 2"):
        spatial.group_models(models[0], 1, False)
    with pytest.raises(ConfigError, match="pipeline_groups=1"):
        policy_of(dict(c, policy={"pipeline_groups": 1}))
    pod = dict(c, target={**c["target"], "pod": {"chips": 2}}, policy={"pipeline_groups": 2})
    with pytest.raises(ConfigError, match="pod target"):
        run_phase("plan", {"model": models[0]}, pod)


def test_trial_with_pipeline_groups():
    """policy.pipeline_groups=2 as a trial: every phase, the batch (two photos) one item;
    validated end to end, at the group boundary and against the timm-definition model."""
    inputs = [photos.PREFIX + n for n in NAMES[:2]]
    c = dict(model=dict(SIGLIP, batch=2, input=inputs), target=target_cfg("tiny"), policy={"pipeline_groups": 2})
    r = compile_trial(c)
    m = r["run"].metrics()
    assert m["validated"], m.get("failed")
    assert m["boundaries_checked"] == 1 and m["boundaries_failed"] == 0 and m["exchanges_checked"] > 0
    assert m["exchanges_failed"] == 0 and m["ops_checked"] > 0 and m["ops_failed"] == 0
    assert r["report"].summary["status"] == "ok" and r["plan"].metrics()["pipeline_groups"] == 2
    step = m["pipeline_step_cycles"]
    assert m["cycles"] == 2 * step                       # one item and one padding item
    assert m["images_per_s"] == round(2 * 1.5e9 / step, 3)
    # the DVC stages hand each phase's result to the next through the artifact codec
    from pipeline import codec
    from pipeline.codec_read import loads
    back = {n: loads(codec.dumps(r[n])) for n in ("model", "plan", "lower", "reference")}
    assert type(back["plan"]).__name__ == "SpatialPlan" and back["plan"].plans[1].metrics() == r["plan"].plans[1].metrics()
    again = run_phase("run", back, c)
    assert again.metrics() == r["run"].metrics()


def test_align_is_least_against_every_merge():
    """align's two-group merge against an exhaustive enumeration of every merge (each move
    takes the next step of one group or of both, kinds agreeing): valid, and least."""
    import itertools
    rng = np.random.default_rng(7)
    for _ in range(60):
        a, b = ([(("compute", "exchange")[int(rng.integers(2))], int(rng.integers(1, 9))) for _ in
                 range(int(rng.integers(0, 5)))] for _ in range(2))
        kinds, (ia, ib) = stages.align([a, b])
        assert ia == sorted(set(ia)) and ib == sorted(set(ib)) and len(kinds) >= max(len(a), len(b))
        assert all(kinds[p] == a[i][0] for i, p in enumerate(ia)) and all(kinds[p] == b[j][0] for j, p in enumerate(ib))
        got = sum(max([a[i][1] for i, q in enumerate(ia) if q == p] + [b[j][1] for j, q in enumerate(ib) if q == p])
                  for p in range(len(kinds)))
        best = None
        for n in range(max(len(a), len(b)), len(a) + len(b) + 1):
            for moves in itertools.product("AB2", repeat=n):
                i = j = c = 0
                for mv in moves:
                    if mv == "A" and i < len(a):
                        c, i = c + a[i][1], i + 1
                    elif mv == "B" and j < len(b):
                        c, j = c + b[j][1], j + 1
                    elif mv == "2" and i < len(a) and j < len(b) and a[i][0] == b[j][0]:
                        c, i, j = c + max(a[i][1], b[j][1]), i + 1, j + 1
                    else:
                        break
                else:
                    if i == len(a) and j == len(b):
                        best = c if best is None else min(best, c)
        assert got == best, (a, b)
