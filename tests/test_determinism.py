"""Same bytes on every machine (issue #24; DESIGN.md §7a "Determinism"): two small trials'
artifacts (every phase's, the run's output.npz) and the default trial's model and reference
artifacts at one layer (every op of the tower at full size), hashed in three processes that
differ in everything that used to change a bit --
OpenBLAS's kernel (three core types of the wheel's DYNAMIC_ARCH), BLAS threads (1, 2),
numba's target CPU (the host's, `generic`: no SSE4/AVX/FMA/F16C), numpy's SIMD dispatch
(NPY_DISABLE_CPU_FEATURES: down to the baseline), and the hash seed (0, 5) -- are equal.

The test can fail: each process also hashes a float32 BLAS product and numpy's float64 exp,
which do change with those settings (checked: the settings took effect; numpy's exp only on an
AVX-512 CPU, the only one where numpy has a SIMD float64 exp), and reports the kernel
threadpoolctl sees and numpy's enabled SIMD features. The full default trial under the same settings:
experiments/determinism/run.py (minutes)."""
import importlib.util
import json

import pytest

from conftest import REPO

_spec = importlib.util.spec_from_file_location("det_hashes", REPO / "experiments" / "determinism" / "hashes.py")
hashes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hashes)


def test_artifacts_are_the_same_bytes_under_every_setting():
    envs = hashes.environments()
    if envs is None:
        pytest.skip("needs an x86-64 CPU with AVX2 (three distinct OpenBLAS kernels to compare)")
    runs = [hashes.in_process(env, ["small", "layer-reference"]) for env in envs]
    arts = [{k: v for k, v in r.items() if k not in ("settings", "canaries")} for r in runs]
    assert set(arts[0]) == {"vit-fp8", "b16-f16", "layer-reference"}
    assert all(a == arts[0] for a in arts), json.dumps(arts, indent=1)
    # the settings took effect: three kernels, both numba targets, numpy's exp and BLAS's bits moved
    kernels = [tuple(r["settings"]["blas"][0]) for r in runs]
    assert len({k[0] for k in kernels}) == 3 and {k[1] for k in kernels} == {1, 2}, kernels
    assert [r["settings"]["numba_cpu"] for r in runs] == ["host", "generic", "host"]
    assert [r["settings"]["hash_seed"] for r in runs] == ["0", "5", "5"]
    assert len({r["canaries"]["blas_sgemm"] for r in runs}) >= 2, [r["canaries"] for r in runs]
    # numpy's dispatch was cut down (its features say so) and, where numpy has a SIMD float64 exp
    # (AVX-512 only: on an AVX2 CPU every setting runs the same scalar exp), its bits moved
    assert len({tuple(r["settings"]["numpy_simd"]) for r in runs}) >= 2, [r["settings"] for r in runs]
    if "avx512f" in hashes.cpu_flags():
        assert len({r["canaries"]["numpy_exp"] for r in runs}) >= 2, [r["canaries"] for r in runs]
