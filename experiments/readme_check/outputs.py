"""Every output shown in README.md and docs/results.md says where it comes from, and the cheap
ones are rerun and compared (tests/test_readme_outputs.py runs this in CI).

    python experiments/readme_check/outputs.py [--list] [FILE ...]

A fenced block that is not a command block (```sh) and a markdown table are *outputs*; each
must follow, with no other output in between, one marker comment:

  <!-- checked -->             the block holds `$ command` lines, each followed by its output:
                               every command is run in a copy of the repository and the lines
                               shown must appear in its stdout+stderr, in order
  <!-- checked: COMMAND -->    the same for a block of output only, made by COMMAND
  <!-- measured DATE (COMMIT): COMMAND -->
                               too slow for CI (full-size trials, DVC queues, sweeps): the
                               command that made it, when and at which commit
  <!-- reference: WHY -->      not an output (a table of keys or sources): what keeps it true

Comparison ignores what differs on every run: the date-time of a trial directory, the
repository's absolute path, the memory a machine has available, the `host s` column of a
trial table and trailing blanks. Exit 1 (and one line per problem) if an output has no
marker or a checked one differs; `--list` prints every marker and runs nothing."""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FILES = ("README.md", "docs/results.md")
COPY = ("compiler", "pipeline", "conf", "dvc.yaml", "params.yaml", "pyproject.toml")
MARKER = re.compile(r"^<!-- (checked(?::\s*(?P<cmd>.+?))?|measured (?P<when>\S+ \(\w+\)): (?P<mcmd>.+?)|"
                    r"reference: (?P<why>.+?)) -->\s*$")
# what differs on every run, replaced on both sides before comparing
VOLATILE = ((re.compile(r"\d{8}-\d{6}"), "<time>"),
            (re.compile(r"than the [\d.]+ [KMGTP]?i?B available"), "than the <free> available"))


def outputs(text: str) -> list[dict]:
    """Each output (fenced non-sh block or markdown table): its first line number, kind,
    lines, and the marker before it (None if missing)."""
    lines, out, marker, i = text.splitlines(), [], None, 0
    while i < len(lines):
        line = lines[i]
        m = MARKER.match(line)
        if m:
            marker = m
        elif line.startswith("```"):
            j = next(k for k in range(i + 1, len(lines)) if lines[k].startswith("```"))
            if line.strip() != "```sh":
                out.append(dict(line=i + 1, kind="block", lines=lines[i + 1:j], marker=marker))
                marker = None
            i = j
        elif line.startswith("|"):
            j = i
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            out.append(dict(line=i + 1, kind="table", lines=lines[i:j], marker=marker))
            marker, i = None, j - 1
        i += 1
    return out


def normalise(text: str, root: str = "") -> list[str]:
    if root:
        text = text.replace(root.rstrip("/") + "/", "")
    for pat, rep in VOLATILE:
        text = pat.sub(rep, text)
    out = []
    host_col = None
    for line in text.splitlines():
        line = line.rstrip()
        if line.startswith("|"):
            cells = line.split("|")
            if "host s" in [c.strip() for c in cells]:
                host_col = [c.strip() for c in cells].index("host s")
            elif host_col is not None and len(cells) > host_col and not set(cells[host_col].strip()) <= set("-"):
                cells[host_col] = " <s> "
            line = "|".join(cells)
        else:
            host_col = None
        out.append(line)
    return out


def in_order(shown: list[str], got: list[str]) -> str | None:
    """None if every shown line appears in `got` in order; else the first one that does not."""
    k = 0
    for s in shown:
        while k < len(got) and got[k] != s:
            k += 1
        if k == len(got):
            return s
        k += 1
    return None


def copy_repo(dst: Path) -> Path:
    for name in COPY:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dst / name)      # with numba's cache (tests/test_dvc.py copy_repo)
        else:
            shutil.copy(src, dst / name)
    return dst


def run(cmd: str, cwd: Path) -> str:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}", DVC_NO_ANALYTICS="1")
    r = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    return r.stdout + r.stderr


def checks(out: dict) -> list[tuple[str, list[str]]]:
    """(command, the lines shown for it) of a checked output."""
    m = out["marker"]
    if m.group("cmd"):
        return [(m.group("cmd").strip().strip("`"), out["lines"])]
    pairs = []
    for line in out["lines"]:
        if line.startswith("$ "):
            pairs.append((line[2:], []))
        elif pairs:
            pairs[-1][1].append(line)
    return pairs


def check(files=FILES, runner=run) -> list[str]:
    """Problems: outputs without a marker, checked outputs that differ."""
    problems = []
    with tempfile.TemporaryDirectory(prefix="readme-outputs-") as tmp:
        root = None
        for f in files:
            for out in outputs((REPO / f).read_text()):
                where = f"{f}:{out['line']}"
                m = out["marker"]
                if m is None:
                    problems.append(f"{where}: {out['kind']} without a marker (checked / measured / reference)")
                    continue
                if not m.group(0).startswith("<!-- checked"):
                    continue
                if root is None:       # (a test's own runner needs no copy)
                    root = copy_repo(Path(tmp) / "tessera") if runner is run else Path(tmp)
                pairs = checks(out)
                if not pairs:
                    problems.append(f"{where}: `checked` output with no `$ command` line")
                for cmd, shown in pairs:
                    got = normalise(runner(cmd, root), str(root))
                    miss = in_order(normalise("\n".join(shown)), got)
                    if miss is not None:
                        problems.append(f"{where}: `{cmd}` did not print {miss!r}; it printed:\n  " +
                                        "\n  ".join(got[-20:]))
    return problems


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", default=list(FILES))
    ap.add_argument("--list", action="store_true", help="print every output's marker, run nothing")
    args = ap.parse_args(argv)
    if args.list:
        for f in args.files:
            for out in outputs((REPO / f).read_text()):
                m = out["marker"]
                print(f"{f}:{out['line']}: {out['kind']}: {m.group(1) if m else 'NO MARKER'}")
        return 0
    problems = check(args.files)
    print("\n".join(problems) or f"outputs: every output of {', '.join(args.files)} marked, the checked ones as shown")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
