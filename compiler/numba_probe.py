"""numba without its scipy.linalg probe: `njit` to import from here, not from numba.

numba's CPU target, on its first compile or cache load, imports numba.np.arraymath, which
imports scipy.linalg only to learn whether BLAS is there (`_check_blas`): 0.15-0.9 CPU s of
every stage process that runs a compiled kernel (first measured in compiler/place: 40 % of
loading its kernels from the cache, 0.94 of 2.5 s, cProfile, load average 10). No kernel
here uses BLAS (none may decide a stored byte: DESIGN.md §7a), so the probe is made to fail
for that one import, and numba's flag is then set to what it would have found (scipy
installed) for any other numba code in the process; numba's linalg functions import scipy
themselves when typed. Every module of compiler/ that compiles kernels imports numba
through this one, so whichever loads first skips the probe."""
from __future__ import annotations

import importlib.util
import sys


def without_scipy_probe() -> None:
    key = "scipy.linalg.cython_blas"
    if key in sys.modules or "numba.np.arraymath" in sys.modules:
        return
    sys.modules[key] = None          # `import scipy.linalg.cython_blas` -> ImportError
    try:
        import numba.np.arraymath as am
    finally:
        if sys.modules.get(key, 0) is None:
            del sys.modules[key]
    am._HAVE_BLAS = importlib.util.find_spec("scipy") is not None


without_scipy_probe()

from numba import njit, types  # noqa: E402  (after the probe, on purpose)

__all__ = ["njit", "types", "without_scipy_probe"]
