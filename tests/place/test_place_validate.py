"""Fault injection: each kind of illegal placement must be caught by the
independent validator, and a legal one must pass."""
import pytest

from compiler.place import Problem, validate

B, E = 0x4C000, 1024
R0, TOP = B + 2 * E, B + 4 * E   # region 0: 2 elements; region 1: one pair


def prob(**kw):
    d = dict(size=[256, 256], align=[64, 64], start=[0, 0], end=[2, 2], region=[0, 0])
    d.update(kw)
    return Problem(B, R0, TOP, E, names=[f"t{i}" for i in range(len(d["size"]))], **d)


def test_legal_placement_passes():
    p = prob(bank_edges=[[0, 1]])
    assert validate(p, [B, B + E]) == []


@pytest.mark.parametrize("case,addr,needle", [
    ("overlap", [B, B + 128], "overlaps t1"),
    ("misaligned", [B + 8, B + 512], "not aligned"),
    ("below memory", [B - 256, B + 512], "outside memory"),
    ("above memory", [B, TOP - 128], "outside memory"),
    ("straddle", [R0 - 128, B], "straddles"),
    ("unplaced", [B, -1], "not placed"),
])
def test_basic_faults(case, addr, needle):
    errs = validate(prob(), addr)
    assert any(needle in e for e in errs), (case, errs)


def test_overlap_ok_when_lifetimes_disjoint():
    p = prob(start=[0, 2], end=[2, 4])
    assert validate(p, [B, B]) == []


def test_region_classes():
    p = prob(region=[2, 1])  # code, interleaved
    assert validate(p, [B, R0]) == []
    assert any("code request" in e for e in validate(p, [R0 + 512, R0]))
    assert any("interleaved request" in e for e in validate(p, [B, B + 512]))


def test_bank_separation_region0_and_pair_unit_in_region1():
    p = prob(bank_edges=[[0, 1]])
    errs = validate(p, [B, B + 512])           # same 1 KiB element in region 0
    assert any("t0 and t1 share memory unit" in e for e in errs)
    # region 1: the two elements of a pair are ONE unit, so this is a conflict too
    errs = validate(p, [R0, R0 + E])
    assert any("bank separation" in e for e in errs)
    # ...but not if the lifetimes are disjoint
    assert validate(prob(bank_edges=[[0, 1]], start=[0, 2], end=[2, 4]), [B, B + 512]) == []


def test_sequence_extent_stride_and_ownership():
    # t0 is a sequence of 3 members of 128 B at stride 256: extent 640
    p = prob(count=[3, 1], stride=[256, 0], size=[128, 64])
    assert validate(p, [B, B + 640]) == []
    assert any("overlaps" in e for e in validate(p, [B, B + 128]))   # in a member gap
    p2 = prob(count=[3, 1], stride=[96, 0], size=[64, 64])           # stride breaks align 64
    assert any("member 1" in e for e in validate(p2, [B, B + 512]))
    # a bank-separated sequence owns its units against every live request
    p3 = prob(count=[3, 1, 1], stride=[256, 0, 0], size=[128, 64, 64], align=[64] * 3,
              start=[0] * 3, end=[2] * 3, region=[0] * 3, bank_edges=[[0, 2]])
    errs = validate(p3, [B, B + 640, B + E])
    assert any("t0 and t1 share" in e for e in errs)


def test_reserved_and_max_alloc():
    p = prob(reserved=[[B + 256, B + 320]])
    assert any("reserved" in e for e in validate(p, [B + 128, B + 1024]))
    p = Problem(B, R0, TOP, E, size=[1024], align=[1], start=[0], end=[1], region=[0],
                max_alloc=512)
    assert any("max_alloc" in e for e in validate(p, [B]))


def test_validator_names_requests():
    errs = validate(prob(), [B, B])
    assert "t0" in errs[0] and "t1" in errs[0]
