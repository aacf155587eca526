"""policy.pipeline_groups=auto (compiler/family.py): the whole chip or a spatial pipeline of G
tile groups, chosen by `policy.objective`. Each candidate's priced figures are held to the
same trial compiled with that family set by hand; the chosen trial runs on the simulator,
validates, and its measured images/s and latency are the priced ones; the DVC stage hands
its pick to the plan phase."""
import json

import pytest

from compiler import mapper as mappers
from compiler.family import FAMILY_KEY, group_counts, price
from compiler.models import photos
from compiler.phases import compile_trial, model_phase, policy_of, run_phase, target_of
from compiler.spatial import SpatialPlan
from compiler.target import ConfigError
from helpers import target_cfg

SIGLIP = dict(name="vit", preset="custom", width=64, hidden=172, heads=2, image=56, patch=14, layers=4, gelu="erf")
INPUTS = [photos.PREFIX + n for n in photos.HELD_OUT[:2]]


def cfg(objective="throughput", **policy):
    return dict(model=dict(SIGLIP, batch=2, input=INPUTS), target=target_cfg("tiny"),
                policy={"pipeline_groups": "auto", "objective": objective, **policy})


@pytest.fixture(scope="module")
def priced():
    c = cfg()
    m = model_phase(c)
    return c, m, price(m, target_of(c), policy_of(c), mappers.serial)


def test_every_candidate_is_the_family_set_by_hand(priced):
    """Candidates: the whole chip and G = 2, 4 (they divide 4 layers); each one's cycles are
    expand's for that family with policy.pipeline_groups set to it."""
    c, m, doc = priced
    assert group_counts(m, 4) == [2, 4] and group_counts(m, 3) == [2]
    assert set(doc["candidates"]) == {"0", "2", "4"}
    for G, fig in doc["candidates"].items():
        hand = dict(c, policy={"pipeline_groups": int(G)})
        r = {"model": m}
        for ph in ("plan", "expand"):
            r[ph] = run_phase(ph, r, hand)
        assert fig["cycles"] == r["expand"].finalists[0].analysis["cycles"], G
        assert isinstance(r["plan"], SpatialPlan) == (G != "0")


def test_the_objective_picks(priced):
    c, m, doc = priced
    figs = {int(G): f for G, f in doc["candidates"].items()}
    assert doc["pipeline_groups"] == max(figs, key=lambda G: (figs[G]["images_per_s"], -G))
    lat = price(m, target_of(c), policy_of(cfg("latency")), mappers.serial)
    assert {G: f["cycles"] for G, f in lat["candidates"].items()} == {G: f["cycles"] for G, f in doc["candidates"].items()}
    assert lat["pipeline_groups"] == min(figs, key=lambda G: (figs[G]["latency_ms"], G))
    # here the two objectives disagree: pipelines stream more images, the whole chip answers sooner
    assert doc["pipeline_groups"] > 0 and lat["pipeline_groups"] == 0


@pytest.mark.parametrize("objective", ["throughput", "latency"])
def test_the_chosen_trial_validates_at_the_priced_figures(priced, objective):
    """Every phase with auto, the family stage's doc handed in as under DVC: the run on the
    simulator validates, and its images/s and latency are what the pricing said."""
    c, m, doc = priced
    c = cfg(objective)
    if objective == "latency":
        doc = price(m, target_of(c), policy_of(c), mappers.serial)
    r = compile_trial({**c, FAMILY_KEY: doc})
    run = r["run"].metrics()
    assert run["validated"], run.get("failed")
    pick = doc["pipeline_groups"]
    assert r["plan"].metrics()["family"]["pipeline_groups"] == pick
    assert isinstance(r["plan"], SpatialPlan) == bool(pick)
    want = doc["candidates"][str(pick)]
    assert (run["cycles"], run["images_per_s"], run["latency_ms"]) == (want["cycles"], want["images_per_s"],
                                                                       want["latency_ms"])
    assert ("boundaries_checked" in run) == bool(pick)


def test_rejected_candidates_lose_with_their_reason(priced):
    """A table cap no program meets: every candidate is rejected, each saying why, and the
    whole chip goes on for the later phases to report."""
    c, m, _ = priced
    doc = price(m, target_of(c), policy_of(cfg(exchange_table_cap=16)), mappers.serial)
    assert doc["pipeline_groups"] == 0
    assert all("exchange_table_cap" in f["rejected"] for f in doc["candidates"].values())


def test_refusals(priced):
    c, m, _ = priced
    for policy, match in (({"objective": "speed"}, "policy.objective"),
                          ({"pipeline_groups": "most"}, "expected a group count"),
                          ({"pipeline_max_groups": 1}, "pipeline_max_groups")):
        with pytest.raises(ConfigError, match=match):
            policy_of({"policy": policy})
    gemm = dict(model=dict(name="gemm", m=32, k=64, n=64), target=target_cfg("tiny"), policy={"pipeline_groups": "auto"})
    with pytest.raises(ConfigError, match="not an image tower"):
        run_phase("plan", {"model": model_phase(gemm)}, gemm)


def test_the_family_stage_hands_its_pick_to_the_plan_phase(priced, tmp_path, monkeypatch):
    """pipeline/family.py writes the priced doc (or the set count at once); the plan stage's
    cfg carries it (pipeline/stages.py priced_choice) so plan does not price again."""
    from pipeline import family as stage
    from pipeline import stages
    c, m, doc = priced
    assert stage.choice(dict(c, policy={"pipeline_groups": 3})) == {"pipeline_groups": 3}
    monkeypatch.setattr(stage, "load_result", lambda phase, lazy=False: m)
    assert stage.choice(c) == doc
    monkeypatch.setattr(stages, "ART", tmp_path)
    (tmp_path / "family").mkdir()
    (tmp_path / "family" / "choice.json").write_text(json.dumps(doc))
    handed = stages.priced_choice(c, "family", FAMILY_KEY, True, "candidates")
    assert handed[FAMILY_KEY] == doc
    monkeypatch.setattr("compiler.family.price", lambda *a: pytest.fail("priced again"))
    assert run_phase("plan", {"model": m}, handed).family == doc
