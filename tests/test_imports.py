"""The import graph of compiler/ and pipeline/, read from the source with `ast` (nothing is
imported): no module may import one that imports it back, through any chain, whether the
import sits at the top of a file or inside a function ("imported when the phase runs" still
closes a loop: whichever side runs first finds the other half-initialised, and the two can no
longer be read, tested or moved apart); and compiler/ imports nothing from pipeline/, DVC,
Dask or Hydra (DESIGN.md §1: a phase is a plain function a test calls without them).

An edge is what an import statement names: `from . import x` is the submodule x when there is
one, else the package itself; `from .a import b` is a.b when that is a module, else a. The
parent packages Python initialises on the way (importing compiler.sim.run runs
compiler/sim/__init__.py) are not edges: a package's __init__ importing its own submodules is
the normal shape, not a loop. The two self-tests below feed the reader a planted package, so
this check can fail."""
from __future__ import annotations

import ast
from pathlib import Path

from helpers import REPO

ROOTS = ("compiler", "pipeline")
FORBIDDEN_IN_COMPILER = ("pipeline", "dvc", "dask", "distributed", "hydra", "omegaconf")


def modules(root: Path, packages=ROOTS) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under the given top-level packages."""
    out = {}
    for pkg in packages:
        for f in sorted((root / pkg).rglob("*.py")):
            parts = list(f.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = f
    return out


def _imports(name: str, path: Path, known: set[str]):
    """(imported name, line) for every import statement in the file, at any depth; relative
    imports resolved against the module's package, `from p import x` to p.x when x is a module."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module
            for a in node.names:
                sub = f"{mod}.{a.name}"
                yield (sub if sub in known else mod), node.lineno


def import_graph(root: Path = REPO, packages=ROOTS):
    """module -> {imported module: first line}, edges inside the packages only; and every
    import, internal or not, as (module, imported name, line) for the layering rule."""
    mods = modules(root, packages)
    known = set(mods)
    graph, every = {m: {} for m in mods}, []
    for m, f in mods.items():
        for target, line in _imports(m, f, known):
            every.append((m, target, line))
            # the deepest known module the name denotes (`import compiler.sim.run as r` -> compiler.sim.run)
            t = target
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != m:
                graph[m].setdefault(t, line)
    return graph, every


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan, iterative), each as
    one closed path through it (a -> b -> ... -> a) so the message shows the loop to cut."""
    index, low, stack, on, comps, n = {}, {}, [], set(), [], 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = n
        n += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = n
                    n += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        comps.append(_loop(graph, sorted(comp)))
    return comps


def _loop(graph, comp: list[str]) -> list[str]:
    """A shortest closed path from the component's first module back to itself (BFS inside it)."""
    inside, start = set(comp), comp[0]
    prev, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w == start:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return [start] + path[::-1][1:] + [start] if len(path) > 1 else [start, v, start]
                if w in inside and w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return comp


def _describe(graph, loop: list[str]) -> str:
    return " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(loop, loop[1:])) + f" -> {loop[-1]}"


def test_no_import_cycles():
    graph, _ = import_graph()
    found = [_describe(graph, c) for c in cycles(graph)]
    assert not found, "import cycles (cut each, e.g. by moving what both need into a module of its own):\n" + \
        "\n".join(found)


def test_compiler_imports_no_orchestration():
    _, every = import_graph()
    bad = [f"{m} imports {t} (line {line})" for m, t, line in every
           if m.split(".")[0] == "compiler" and t.split(".")[0] in FORBIDDEN_IN_COMPILER]
    assert not bad, "compiler/ must not import pipeline, DVC, Dask or Hydra:\n" + "\n".join(bad)


def test_the_graph_sees_the_known_edges():
    """Anchors: a top-level edge, a function-level one and a relative `from . import x`, so a
    reader that silently saw nothing would fail here, not pass the two checks above."""
    graph, _ = import_graph()
    assert "compiler.target" in graph["compiler.phases"]          # top level: from .target import Target
    assert "compiler.run" in graph["compiler.phases"]             # in _run: from .run import run
    assert "compiler.mapper" in graph["compiler.phases"]          # from . import mapper as mappers
    assert "compiler.sim.oracle" not in graph["compiler.target"]


def test_the_oracles_import_no_cost_model():
    """The independent checks (compiler/sim/oracle.py with its kernel costs oracle_kernels.py,
    link_oracle.py) re-derive the costs from docs/architecture.md §2 alone: none imports
    compiler/costs/ or target.py itself (isa.py,
    which the oracle reads instruction words with, takes two region constants from target.py)."""
    graph, _ = import_graph()
    for m in ("compiler.sim.oracle", "compiler.sim.oracle_kernels", "compiler.sim.link_oracle"):
        bad = sorted(t for t in graph[m] if t == "compiler.target" or t.startswith("compiler.costs"))
        assert not bad, f"{m} imports {bad}"


def test_the_independent_model_imports_nothing_of_the_graph():
    """compiler/timm_model.py is the third level of correct (DESIGN.md §7a): written from timm,
    it may share no code with the graph, its builders or the reference that evaluates it."""
    graph, _ = import_graph()
    bad = sorted(t for t in graph["compiler.timm_model"]
                 if t.startswith(("compiler.models", "compiler.reference", "compiler.ir")))
    assert not bad, f"compiler.timm_model imports {bad}"


def _plant(root: Path, files: dict[str, str]):
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_a_planted_function_level_cycle_is_found(tmp_path):
    _plant(tmp_path, {
        "compiler/__init__.py": "",
        "compiler/a.py": "from . import b\n",
        "compiler/sub/__init__.py": "from .c import f\n",        # a package importing its own part: no loop
        "compiler/sub/c.py": "from . import d\ndef f():\n    pass\n",
        "compiler/sub/d.py": "def g():\n    from ..b import h\n",  # function level, two levels up
        "compiler/b.py": "def h():\n    from .sub import c\n",
        "pipeline/__init__.py": "",
    })
    graph, _ = import_graph(tmp_path)
    found = cycles(graph)
    assert found == [["compiler.b", "compiler.sub.c", "compiler.sub.d", "compiler.b"]], found
    assert "line 2" in _describe(graph, found[0])


def test_a_planted_orchestration_import_is_found(tmp_path):
    _plant(tmp_path, {
        "compiler/__init__.py": "",
        "compiler/a.py": "def f():\n    import dask.array\n    from pipeline.store import Store\n",
        "pipeline/__init__.py": "", "pipeline/store.py": "import compiler.a\n",
    })
    _, every = import_graph(tmp_path)
    bad = {t for m, t, _ in every if m.startswith("compiler") and t.split(".")[0] in FORBIDDEN_IN_COMPILER}
    assert bad == {"dask.array", "pipeline.store"}
