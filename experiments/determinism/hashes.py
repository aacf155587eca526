"""sha256 of a trial's artifacts in this process, for comparing machines and settings
(issue #24): `python experiments/determinism/hashes.py WHAT...` prints one JSON object.

WHAT: `small` -- two small trials on the tiny target, every phase in-process (a ViT tower
of 2 layers, FP8 weights and activations, erf GELU; a ViT-B/16-like one with f16 weights,
tanh GELU, class token): each phase's artifact as the stage stores it (pipeline/codec.py)
and artifacts/run/output.npz; `default-reference` -- the default trial's (params.yaml composed
from conf/) model and reference artifacts; `layer-reference` -- the same at one layer
(`model.layers=1`: every op of the tower at full size, a quarter of the work; the test's);
`default` -- the whole default trial (ipu21: minutes).

Besides the hashes it reports what the process ran under, so a caller can check the
settings took effect: OpenBLAS's kernel as threadpoolctl reports it (OPENBLAS_CORETYPE must
be set before numpy loads: set it in the environment), numba's target CPU
(NUMBA_CPU_NAME), numpy's disabled SIMD features (NPY_DISABLE_CPU_FEATURES), the hash
seed; and two canaries that do depend on them -- a float32 BLAS product and numpy's float64
exp -- to show that the settings change what they should (tests/test_determinism.py)."""
from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

SMALL = {
    "vit-fp8": ["target=tiny", "model=vit", "model.preset=custom", "model.width=64", "model.hidden=172",
                "model.heads=2", "model.image=56", "model.patch=14", "model.layers=2", "model.gelu=erf",
                "model.fp8_activations=true"],
    "b16-f16": ["target=tiny", "model=vit", "model.preset=custom", "model.width=64", "model.hidden=256",
                "model.heads=2", "model.image=64", "model.patch=16", "model.layers=2", "model.pool=token",
                "model.classes=12", "model.gelu=tanh", "model.weight_dtype=f16"],
}


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()[:16]


def artifacts(results: dict) -> dict:
    """phase -> sha256 of its stored artifact (what pipeline.stages writes), and the run's
    output.npz."""
    from pipeline import codec
    out = {}
    for phase, res in results.items():
        if phase != "report":               # profile.html: host figures aside, built from these
            out[phase] = sha(codec.dumps(res))
    if "run" in results:
        out["output.npz"] = sha(results["run"].output_npz())
    return out


def canaries() -> dict:
    import numpy as np
    rng = np.random.default_rng(24)
    a, b = rng.standard_normal((257, 1000), np.float32), rng.standard_normal((1000, 301), np.float32)
    x = rng.standard_normal(1 << 16) * 30
    return {"blas_sgemm": sha((a @ b).tobytes()), "numpy_exp": sha(np.exp(x).tobytes())}


def settings() -> dict:
    import numba
    import numpy as np
    from threadpoolctl import threadpool_info
    blas = [(i.get("architecture"), i.get("num_threads")) for i in threadpool_info() if i.get("user_api") == "blas"]
    from numpy._core._multiarray_umath import __cpu_features__ as feats
    return {"blas": blas, "numba_cpu": numba.config.CPU_NAME or "host",
            "numpy_simd": sorted(k for k, v in feats.items() if v and k.startswith(("AVX", "FMA", "X86"))),
            "hash_seed": os.environ.get("PYTHONHASHSEED", "random"), "numpy": np.__version__}


def cpu_flags() -> set:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return set(next((ln.split(":", 1)[1] for ln in text.splitlines() if ln.startswith("flags")), "").split())


def numpy_dispatch() -> list[str]:
    """numpy's dispatch targets above its baseline that this CPU has (NPY_DISABLE_CPU_FEATURES
    refuses names the build or the CPU lacks); asked of a fresh process, whose numpy has no
    features disabled."""
    import subprocess
    code = ("from numpy._core._multiarray_umath import __cpu_features__ as f, __cpu_dispatch__ as d; "
            "print(' '.join(x for x in d if f.get(x)))")
    env = {k: v for k, v in os.environ.items() if k != "NPY_DISABLE_CPU_FEATURES"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout.split()


def environments() -> list[dict] | None:
    """Three processes' settings that differ in everything that used to change a bit: OpenBLAS
    core type (Haswell; Prescott; SkylakeX with AVX-512, else Sandybridge) and threads (2, 1,
    1), numba's target (host, generic, host), numpy's SIMD dispatch (all; none above the
    baseline; none above AVX2), hash seed (0, 5, 5). None on a CPU without AVX2."""
    flags = cpu_flags()
    if "avx2" not in flags:
        return None
    dispatch = numpy_dispatch()
    return [
        {"OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_NUM_THREADS": "2", "PYTHONHASHSEED": "0"},
        {"OPENBLAS_CORETYPE": "Prescott", "OPENBLAS_NUM_THREADS": "1", "PYTHONHASHSEED": "5",
         "NUMBA_CPU_NAME": "generic", "NPY_DISABLE_CPU_FEATURES": " ".join(dispatch)},
        {"OPENBLAS_CORETYPE": "SkylakeX" if "avx512f" in flags else "Sandybridge", "OPENBLAS_NUM_THREADS": "1",
         "PYTHONHASHSEED": "5", "NPY_DISABLE_CPU_FEATURES": " ".join(x for x in dispatch if x != "X86_V3")},
    ]


def in_process(env: dict, whats: list[str]) -> dict:
    """This script's report from a fresh process under `env` (on top of this one's, with the
    settings it names cleared first)."""
    import subprocess
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("OPENBLAS_", "NUMBA_CPU", "NPY_DISABLE", "PYTHONHASHSEED"))}
    r = subprocess.run([sys.executable, __file__, *whats], cwd=REPO, capture_output=True, text=True,
                       env={**base, **{k: v for k, v in env.items() if v}})
    if r.returncode:
        raise RuntimeError(f"{env}: exit {r.returncode}\n{r.stderr[-3000:]}")
    return json.loads(r.stdout)


def main(whats: list[str]) -> dict:
    from compiler.phases import compile_trial, model_phase, reference_phase
    from pipeline.config import compose
    report = {"settings": settings(), "canaries": canaries()}
    for what in whats:
        if what == "small":
            for name, overrides in SMALL.items():
                report[name] = artifacts(compile_trial(compose(overrides)))
        elif what in ("default-reference", "layer-reference"):
            m = model_phase(compose(["model.layers=1"] if what == "layer-reference" else []))
            report[what] = artifacts({"model": m, "reference": reference_phase(m)})
        elif what == "default":
            report[what] = artifacts(compile_trial(compose()))
        else:
            raise SystemExit(f"error: unknown {what!r} (small, default-reference, layer-reference, default)")
    return report


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:] or ["small"]), indent=1, sort_keys=True))
