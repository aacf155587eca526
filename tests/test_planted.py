"""The planted-bug table's fast subset (experiments/planted: the full table, its README):
under the default `policy.check`, a bug planted in the middle layer of a 3-layer tower only
(iteration 1 of 3) must fail the run op by op, naming that iteration and a tile, in both
activation modes; program-wide bugs must fail from iteration 1 on; NaN anywhere fails.
The model-definition kinds must not trip the device checks (the reference is built from
the same patched graph): only the independent timm-model check may catch them."""
import sys

import pytest

from conftest import REPO
from helpers import target_cfg

sys.path.insert(0, str(REPO / "experiments" / "planted"))
import plants  # noqa: E402

MIDDLE = 1
DEVICE = ["stale exchange (156 B of one tile's received rows)", "exchange drops a row",
          "matmul skips a k-group (1/4 of k, one tile)", "kernel skips a k-group (operand intact in memory)",
          "one tile skips a compute superstep",
          "wrong byte in one tile's weights (fc1)", "FP8 weight scale from the wrong layer (one tile)",
          "NaN in an op output", "NaN in a weight (fc2 bias)"]


@pytest.fixture(scope="module", params=["fp16", "fp8"])
def trial(request):
    return plants.trial(target_cfg("tiny"), request.param == "fp8")


def test_default_check_and_clean_trial(trial):
    """The default mode reads every iteration back (on sampled rows) and the clean trial passes."""
    from compiler.policy import Policy
    assert Policy().check == "rows"
    m = trial["run"].metrics()
    assert trial["run"].validated and m["ops_failed"] == 0 and m["layers_failed"] == 0, m
    g = trial["model"].graph
    first, stop = g.body()
    body, count = stop - first, g.repeat.count
    assert m["ops_checked"] == len(g.ops) - body + body * count and m["ops_unchecked"] == 0, m
    assert m["layers_checked"] == count


@pytest.mark.parametrize("name", DEVICE)
def test_bug_in_the_middle_layer_is_caught_there(trial, name):
    o = plants.outcome(trial, plants.BY_NAME[name], MIDDLE)
    assert o["caught"] and "op read-back" in o["by"], o
    assert o["iteration"] == MIDDLE and o["tile"] is not None and o["op"] != "-", o


@pytest.mark.parametrize("name", ["relocation stride 0 (one tile, weights)", "overlapping live buffers (allocator)"])
def test_program_wide_bugs(trial, name):
    o = plants.outcome(trial, plants.BY_NAME[name], MIDDLE)
    assert o["caught"] and "op read-back" in o["by"] and o["tile"] is not None, o


def test_model_kind_leaves_the_device_checks_quiet(trial):
    """q and k swapped in the builder: device and reference agree (both built from the
    patched graph), so op read-back, end to end and the layer outputs pass; only a check
    written from timm's definition ("model") may fail it."""
    o = plants.outcome(trial, plants.BY_NAME["q and k swapped"], None)
    assert set(o["by"]) <= {"model"}, o


@pytest.mark.parametrize("name", ["GELU tanh for erf", "MAP head latent zero"])
def test_model_kind_is_caught_by_the_model_check(trial, name):
    """A model-definition bug (the builder patched: device, reference and every device check
    agree) fails the run by the independent-model check alone, in both activation modes:
    GELU's tanh form errs by less than the f16 rounding noise, so only the unrounded
    evaluation's bound (model_check.UNROUNDED) sees it; a zero MAP latent is in the weights
    the device holds, so only the weights' check against their source sees it."""
    o = plants.outcome(trial, plants.BY_NAME[name], None)
    assert o["caught"] and o["by"] == ["model"], o


def test_clipping_fp8_casts_fail_the_fp8_accuracy_budget(trial):
    """FP8 activation scales /16 (they clip): device and reference clip alike, and the casts
    are out of the model check's FP16-activation twin; the FP8 accuracy budget (device vs
    that twin, policy.fp8_budget_*) fails it, naming "fp8 accuracy"."""
    if not trial["cfg"]["model"].get("fp8_activations"):
        pytest.skip("FP8 activations only")
    o = plants.outcome(trial, plants.BY_NAME["FP8 clipping activation scales (1/16)"], None)
    assert o["caught"] and o["by"] == ["fp8 accuracy"], o
