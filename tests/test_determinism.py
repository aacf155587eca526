"""Same bytes on every machine (issue #24; DESIGN.md §7a "Determinism"): two small trials'
artifacts (every phase's, the run's output.npz) and the default trial's model and reference
artifacts, hashed in three processes that differ in everything that used to change a bit --
OpenBLAS's kernel (three core types of the wheel's DYNAMIC_ARCH), BLAS threads (1, 2),
numba's target CPU (the host's, `generic`: no SSE4/AVX/FMA/F16C), numpy's SIMD dispatch
(NPY_DISABLE_CPU_FEATURES: down to the baseline), and the hash seed (0, 5) -- are equal.

The test can fail: each process also hashes a float32 BLAS product and numpy's float64 exp,
which do change with those settings (checked: the settings took effect), and reports the
kernel threadpoolctl sees. The full default trial under the same settings:
experiments/determinism/run.py (minutes)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

HASHES = REPO / "experiments" / "determinism" / "hashes.py"


def cpu_flags() -> set:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return set(next((ln.split(":", 1)[1] for ln in text.splitlines() if ln.startswith("flags")), "").split())


def numpy_dispatch() -> list[str]:
    """numpy's dispatch targets above its baseline that this CPU has (NPY_DISABLE_CPU_FEATURES
    refuses names the build or the CPU lacks)."""
    code = ("import numpy as np; from numpy._core._multiarray_umath import __cpu_features__ as f, "
            "__cpu_dispatch__ as d; print(' '.join(x for x in d if f.get(x)))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()


def settings() -> list[dict]:
    """Three processes' environments: (core type, numba CPU, BLAS threads, hash seed, numpy
    features disabled). SkylakeX needs AVX-512 (else Sandybridge: AVX), Haswell AVX2."""
    flags = cpu_flags()
    if "avx2" not in flags:
        pytest.skip("needs an x86-64 CPU with AVX2 (three distinct OpenBLAS kernels to compare)")
    third = "SkylakeX" if "avx512f" in flags else "Sandybridge"
    dispatch = numpy_dispatch()
    above_v3 = [x for x in dispatch if x not in ("X86_V3",)]
    return [
        {"OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_NUM_THREADS": "2", "PYTHONHASHSEED": "0"},
        {"OPENBLAS_CORETYPE": "Prescott", "OPENBLAS_NUM_THREADS": "1", "PYTHONHASHSEED": "5",
         "NUMBA_CPU_NAME": "generic", "NPY_DISABLE_CPU_FEATURES": " ".join(dispatch)},
        {"OPENBLAS_CORETYPE": third, "OPENBLAS_NUM_THREADS": "1", "PYTHONHASHSEED": "5",
         "NPY_DISABLE_CPU_FEATURES": " ".join(above_v3)},
    ]


def hashes(env: dict) -> dict:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("OPENBLAS_", "NUMBA_CPU", "NPY_DISABLE", "PYTHONHASHSEED"))}
    r = subprocess.run([sys.executable, str(HASHES), "small", "default-reference"], cwd=REPO,
                       env={**base, **{k: v for k, v in env.items() if v}}, capture_output=True, text=True)
    assert r.returncode == 0, f"{env}: exit {r.returncode}\n{r.stderr[-3000:]}"
    return json.loads(r.stdout)


def test_artifacts_are_the_same_bytes_under_every_setting():
    runs = [hashes(env) for env in settings()]
    arts = [{k: v for k, v in r.items() if k not in ("settings", "canaries")} for r in runs]
    assert set(arts[0]) == {"vit-fp8", "b16-f16", "default-reference"}
    assert all(a == arts[0] for a in arts), json.dumps(arts, indent=1)
    # the settings took effect: three kernels, both numba targets, numpy's exp and BLAS's bits moved
    kernels = [tuple(r["settings"]["blas"][0]) for r in runs]
    assert len({k[0] for k in kernels}) == 3 and {k[1] for k in kernels} == {1, 2}, kernels
    assert [r["settings"]["numba_cpu"] for r in runs] == ["host", "generic", "host"]
    assert [r["settings"]["hash_seed"] for r in runs] == ["0", "5", "5"]
    assert len({r["canaries"]["blas_sgemm"] for r in runs}) >= 2, [r["canaries"] for r in runs]
    assert len({r["canaries"]["numpy_exp"] for r in runs}) >= 2, [r["canaries"] for r in runs]
