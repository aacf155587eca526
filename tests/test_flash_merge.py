"""Split-key attention merged by the MERGE kernel (compiler/expand/flash_merge.py) and
`model.attention=auto` (compiler/attn_choice.py), on the tiny target: a batch-2 tower with
flash attention runs on the simulator and validates end to end and op by op (the flash op's
read-back included) with its keys split (MERGE kernels in the program), cycles measured =
expand's; a merge fed the wrong split's partials is caught; auto keeps the variant expand
prices cheaper, its figures are those of each variant compiled alone, and the choice
follows the costs (flipped by making one attention's kernels dear), not the name."""
import numpy as np
import pytest

from compiler import isa
from compiler.expand import flash, flash_merge
from compiler.phases import compile_trial, model_phase, run_phase
from compiler.target import Target
from helpers import target_cfg

TOWER = dict(name="vit", preset="custom", scope="tower", width=64, hidden=172, heads=2, image=56, patch=14,
             pool="map", input="", layers=1, batch=2)


def _cfg(policy=None, **model):
    return dict(model=dict(TOWER, **model), target=target_cfg("tiny"), policy=dict(policy or {}))


@pytest.fixture
def split_keys(monkeypatch):
    """At least 2 key splits per (image, head) group, whatever the tiny target's estimate picks."""
    pick = flash.choose_grid

    def split(t, policy, T, G, *rest):
        nq, ns = pick(t, policy, T, G, *rest)
        ns = max(ns, 3)
        return max(1, min(nq, t.tiles // G // ns)), ns
    monkeypatch.setattr(flash, "choose_grid", split)


def _merges(r) -> int:
    return int((r["place"].tilegraph.kern["op"] == isa.MERGE).sum())


def test_flash_batch_with_merge_validates(split_keys):
    r = compile_trial(_cfg(attention="flash"))
    assert r["run"].validated, r["run"].failed
    assert _merges(r) > 0 and r["run"].metrics()["ops_checked"] > 0
    tg = r["place"].tilegraph
    assert r["run"].cycles_per_step == [int(c) for c in tg.analysis["step_cycles"]] * tg.count


def test_older_merge_still_validates(split_keys):
    r = compile_trial(_cfg(dict(flash_merge=False), attention="flash"))
    assert r["run"].validated, r["run"].failed
    assert _merges(r) == 0


def test_a_merge_of_the_wrong_partials_is_caught(split_keys, monkeypatch):
    """Slot j of every merge receives split j+1's output rows (its statistics stay right)."""
    def wrong(c, x, tile, src0, ss, r, Rb, state, o, ST, OP, d, ns):
        j = np.tile(np.arange(ns), len(tile))
        i = np.repeat(np.arange(len(tile)), ns)
        src, dst = src0[i] + j, tile[i]
        c.bld.add("xfer", step=x, src=src, dst=dst, sreq=state[src], soff=4 * ss[i], s_row_bytes=4 * r[i], s_rows=2,
                  s_stride=4 * Rb[i], dreq=ST[dst], doff=4 * r[i] * j, d_row_bytes=4 * r[i], d_rows=2,
                  d_stride=4 * ns * r[i])
        src = src0[i] + (j + 1) % ns
        c.bld.add("xfer", step=x, src=src, dst=dst, sreq=o[src], soff=2 * d * ss[i], s_row_bytes=2 * d * r[i],
                  s_rows=1, s_stride=2 * d * r[i], dreq=OP[dst], doff=2 * d * r[i] * j, d_row_bytes=2 * d * r[i],
                  d_rows=1, d_stride=2 * d * r[i])
        for b in (state, o):
            c.bld.reads(b[src0[i] + j], x)
    monkeypatch.setattr(flash_merge, "_gather", wrong)
    m = compile_trial(_cfg(attention="flash"))["run"].metrics()
    assert not m["validated"] and m["ops_failed"] > 0
    assert m["first_failed_op"]["kind"] == "flash_attention", m["first_failed_op"]


def _priced(cfg) -> dict:
    """expand's cycles of each variant compiled alone (model, plan, expand)."""
    out = {}
    for v in ("materialized", "flash"):
        c = dict(cfg, model=dict(cfg["model"], attention=v))
        res = {}
        for ph in ("model", "plan", "expand"):
            res[ph] = run_phase(ph, res, c)
        out[v] = int(res["expand"].finalists[0].analysis["cycles"])
    return out


def test_auto_keeps_the_cheaper_by_expand(split_keys):
    cfg = _cfg(attention="auto")
    g = model_phase(cfg).graph
    alone = _priced(cfg)
    assert {v: g.meta[f"attention_cycles.{v}"] for v in alone} == alone
    want = min(alone, key=lambda v: (alone[v], v != "materialized"))
    assert g.meta["attention"] == want
    assert ("flash_attention" in {op.kind for op in g.ops}) == (want == "flash")


@pytest.mark.parametrize("dear", ["softmax_cycles", "merge_cycles"])
def test_auto_follows_the_costs(dear, split_keys, monkeypatch):
    """Make one attention's own kernel 10^6 cycles dearer: the other is chosen."""
    fn = getattr(Target, dear)
    monkeypatch.setattr(Target, dear, lambda self, *a, **k: np.asarray(fn(self, *a, **k)) + 10 ** 6)
    g = model_phase(_cfg(attention="auto")).graph
    assert g.meta["attention"] == ("flash" if dear == "softmax_cycles" else "materialized")


def test_auto_trial_validates(split_keys):
    r = compile_trial(_cfg(attention="auto"))
    assert r["run"].validated, r["run"].failed
    assert r["model"].graph.meta["attention"] in ("materialized", "flash")


def test_the_attention_stage_hands_its_pick_to_the_model_phase(split_keys, monkeypatch):
    """Under DVC (pipeline/attention.py, then the model stage): the stage's document is
    attn_choice.price's; given it, the model phase builds the pick without pricing again;
    a named attention is written as is, at once."""
    import compiler.attn_choice as ac
    from pipeline import attention as stage
    cfg = _cfg(attention="auto")
    doc = stage.choice(cfg)
    assert set(doc) == {"attention", "cycles"} and doc["attention"] in ac.VARIANTS
    monkeypatch.setattr(ac, "price", lambda *a: pytest.fail("priced twice"))
    g = model_phase({**cfg, ac.CHOICE_KEY: doc}).graph
    assert g.meta["attention"] == doc["attention"]
    assert {v: g.meta[f"attention_cycles.{v}"] for v in ac.VARIANTS} == doc["cycles"]
    assert stage.choice(_cfg(attention="flash")) == {"attention": "flash"}
