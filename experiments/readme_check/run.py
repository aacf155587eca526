"""Run every command of README.md, verbatim and in order, on a fresh clone.

    python experiments/readme_check/run.py [--repo PATH] [--rev REV] [--keep] [--list]
                                           [--venv existing|fresh] [--skip PATTERN ...]

Clones the repository (`git clone`, so only what is committed) into a temporary directory,
takes every line of README.md's ```sh blocks (a line ending in `\\` continues; `#` comments
dropped) and runs them one after the other in one bash session in the clone, the way a reader
pastes them. A command ending in `&` (the cluster's scheduler and worker) stays in the
background and is stopped at the end. Placeholders a reader must replace are replaced here:
`SCHEDULER` by 127.0.0.1, `file:///shared/tessera-store` by a store in the clone, `<exp>` and
`<branch>` by example names. It prints each command, its exit code and its wall time, and a
summary; it exits 1 if any command failed. Not a test (the full-size trials take minutes) and
not timed: a script the lead runs before a release.

--venv fresh (the default) runs the install lines as written (pip needs the package index);
--venv existing replaces `python3 -m venv .venv && . .venv/bin/activate && pip install ...`
by the interpreter running this script (its venv must have the project installed, editable).
--skip PATTERN leaves out commands containing PATTERN (say why in your report).
--list prints the commands and runs nothing.
"""
from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
INSTALL = re.compile(r"python3 -m venv \.venv && \. \.venv/bin/activate && pip install [^&]*&& ")
PLACEHOLDERS = {"tcp://SCHEDULER:": "tcp://127.0.0.1:", "file:///shared/tessera-store": "file://$PWD/.shared-store",
                "<exp>": "gemm-64k", "<branch>": "gemm-64k-branch"}


def commands(readme: str) -> list[str]:
    """Every command of the ```sh blocks, in order, comments dropped, continuations joined."""
    out = []
    for block in re.findall(r"```sh\n(.*?)```", readme, re.S):
        line = ""
        for raw in block.splitlines():
            line += raw
            if line.endswith("\\"):
                line = line[:-1] + " "
                continue
            cmd = strip_comment(line).strip()
            line = ""
            if cmd:
                out.append(cmd)
    return out


def strip_comment(line: str) -> str:
    """The line without a trailing `# comment` (a # inside quotes is kept)."""
    quote = None
    for i, c in enumerate(line):
        if c in "'\"" and quote in (None, c):
            quote = None if quote else c
        elif c == "#" and quote is None and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def script(cmds: list[str], venv: str) -> str:
    """One bash session: each command echoed, run, its exit code and seconds reported."""
    # the load before and after: the seconds reported mean little without it (2 shared cores)
    lines = ["set -u", "export DVC_NO_ANALYTICS=1", "fails=0", "echo \"load: $(cut -d' ' -f1-3 /proc/loadavg)\""]
    if venv == "existing":
        lines.append(f"export PATH={shlex.quote(str(Path(sys.executable).parent))}:$PATH")
    for i, c in enumerate(cmds):
        if venv == "existing":
            c = INSTALL.sub("", c)
        for a, b in PLACEHOLDERS.items():
            c = c.replace(a, b)
        bg = c.endswith("&")
        lines += [f"echo; echo {shlex.quote(f'[{i + 1}/{len(cmds)}] $ {c}')}", "t0=$SECONDS"]
        if bg:
            lines += [c, "sleep 5", "echo '[background]'"]
        else:
            lines += [c, "rc=$?", "echo \"[exit $rc, $((SECONDS - t0)) s]\"",
                      "if [ $rc -ne 0 ]; then fails=$((fails + 1)); echo \"FAILED: $rc\"; fi"]
    lines += ["kill $(jobs -p) 2>/dev/null", "echo \"load: $(cut -d' ' -f1-3 /proc/loadavg)\"",
              "echo; echo \"readme_check: $fails failed\"",
              "[ $fails -eq 0 ]"]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--repo", default=str(REPO), help="repository to clone (default: this one)")
    ap.add_argument("--rev", default="HEAD", help="commit to check out (default HEAD)")
    ap.add_argument("--venv", choices=["fresh", "existing"], default="fresh")
    ap.add_argument("--skip", action="append", default=[], metavar="PATTERN")
    ap.add_argument("--keep", action="store_true", help="keep the clone (its path is printed)")
    ap.add_argument("--list", action="store_true", help="print the commands, run nothing")
    args = ap.parse_args(argv)
    cmds = [c for c in commands((Path(args.repo) / "README.md").read_text())
            if not any(p in c for p in args.skip)]
    if args.list:
        print("\n".join(cmds))
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="readme-check-"))
    clone = tmp / "tessera"
    rev = subprocess.run(["git", "rev-parse", args.rev], cwd=args.repo, capture_output=True, text=True,
                         check=True).stdout.strip()
    subprocess.run(["git", "clone", "-q", args.repo, str(clone)], check=True)
    subprocess.run(["git", "checkout", "-q", rev], cwd=clone, check=True)
    print(f"clone: {clone}", flush=True)
    r = subprocess.run(["bash", "-c", script(cmds, args.venv)], cwd=clone)
    if not args.keep:
        subprocess.run(["rm", "-rf", str(tmp)])
    return r.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
