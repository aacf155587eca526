"""pipeline/numba_cache.py: a DVC temporary checkout (<workspace>/.dvc/tmp/exps/tmpX) takes the
workspace's numba cache when its sources are the workspace's, so numba loads the kernels
instead of compiling them; any differing source, or any other directory, copies nothing."""
import os
import shutil
import subprocess
import sys

from pipeline.numba_cache import queued_from, warm

KERNEL = "from numba import njit\n\n\n@njit(cache=True)\ndef f(x):\n    return x + 1\n"
# the kernel's result and numba's own count of what it loaded and compiled
PROBE = ("import kern.k as k; r = k.f(41); s = k.f.stats; "
         "print(r, sum(s.cache_hits.values()), sum(s.cache_misses.values()))")


def probe(root):
    env = {**os.environ, "PYTHONPATH": str(root)}
    env.pop("NUMBA_CACHE_DIR", None)
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=root, env=env, check=True, capture_output=True, text=True)
    return tuple(map(int, out.stdout.split()))


def checkout(ws, name, source=KERNEL):
    """What DVC's checkout holds: the sources (new mtimes), no __pycache__."""
    d = ws / ".dvc" / "tmp" / "exps" / name      # name: tmpX (queued) or standalone/tmpX (--temp)
    (d / "kern").mkdir(parents=True)
    (d / "kern" / "__init__.py").write_text("")
    (d / "kern" / "k.py").write_text(source)
    for f in (d / "kern").iterdir():
        os.utime(f, ns=(1_000_000_000, 1_000_000_000))      # not the workspace's
    return d


def test_a_queued_checkout_loads_the_workspace_kernels(tmp_path):
    ws = tmp_path / "ws"
    (ws / "kern").mkdir(parents=True)
    (ws / "dvc.yaml").write_text("stages: {}\n")
    (ws / "kern" / "__init__.py").write_text("")
    (ws / "kern" / "k.py").write_text(KERNEL)
    assert probe(ws) == (42, 0, 1)                       # compiled, and cached in the workspace
    warmed, cold = checkout(ws, "tmpwarm"), checkout(ws, "standalone/tmpcold")
    assert queued_from(warmed) == queued_from(cold) == ws.resolve() and queued_from(ws) is None
    assert warm(warmed, ("kern",)) >= 2                  # an index and a data file
    assert warm(warmed, ("kern",)) == 0                  # a later stage: already there
    assert probe(warmed) == (42, 1, 0)                   # loaded, not compiled
    assert probe(cold) == (42, 0, 1)                     # without warm: compiled again
    changed = checkout(ws, "tmpchanged", KERNEL + "# changed\n")
    assert warm(changed, ("kern",)) == 0 and not (changed / "kern" / "__pycache__").exists()
    outside = tmp_path / "elsewhere" / "tmpx"
    shutil.copytree(warmed, outside)
    assert warm(outside, ("kern",)) == 0
