"""`python -m pipeline <phase>`: run one stage of the trial (see pipeline/stages.py).

`--help` (alone, or after a phase) prints what a stage does, what it reads and writes and an
example, and runs nothing."""
import sys
import textwrap

from compiler.phases import PHASES

# what each stage does, in one or two lines (docs/architecture.md §3 has the contracts)
WHAT = {
    "config": "checks every key and value of params.yaml, the input image and weights file it names "
              "(decoded; headers) and the host memory the model needs (the stage DVC runs first, so a "
              "bad value fails before any stage's outputs are deleted)",
    "model": "builds the graph and its data (seeded lazily, or from model.weights / model.input)",
    "reference": "evaluates the graph in numpy: the reference outputs and the tolerance the run is held to",
    "plan": "enumerates, costs and memory-screens tile grids per matmul; beam search over the graph; "
            "ranked candidates",
    "expand": "turns each candidate into a tile graph; exact cycles, exchange-table and code bytes; "
              "keeps the shortlist",
    "place": "places support reservations, then every tile's tensors at addresses",
    "schedule": "bulk-synchronous supersteps and timed activities",
    "lower": "per-tile instruction words, exchange tables, REPEAT relocation, host streams",
    "run": "executes the lowered program on the simulator and validates it against the reference",
    "report": "the headline metrics/trial.json, the plot data and artifacts/report/profile.html",
}

USAGE = """\
usage: python -m pipeline <stage> [--help]

Runs one stage of the trial, as dvc.yaml does (`dvc repro` runs them all, in order). A stage
reads params.yaml (the composed config), checks every key and value, loads its upstream
artifacts/<phase>/result.npz, runs the compiler phase and writes its outputs only when it
succeeds. Bad input: one line `error: ...`, exit 2, the stage's previous outputs untouched.
A trial that does not fit is a result: exit 0, status rejected in metrics/trial.json.

stages (in order):
{stages}

example:
  python -m pipeline config && python -m pipeline model      # what `dvc repro model` runs
  python -m pipeline plan --help

Config: params.yaml (regenerate from conf/ with `python -m pipeline.config write`).
Everything in-process with Hydra overrides: `python -m pipeline.trial --help`."""


def stages_help() -> str:
    return "\n".join(textwrap.fill(WHAT[p], 96, initial_indent=f"  {p:<9} ", subsequent_indent=" " * 12)
                     for p in ("config", *PHASES))


def stage_help(phase: str) -> str:
    from .config import REPO
    from .stages import outputs_of
    if phase == "config":
        reads, writes = "params.yaml", "artifacts/config/checked (the stage harness's sha256: the stages depend on it)"
        upstream = "-"
    else:
        ups = PHASES[phase][0]
        reads = "params.yaml" + "".join(f", artifacts/{u}/result.npz" for u in ups)
        writes = ", ".join(str(p.relative_to(REPO)) for p in outputs_of(phase))
        upstream = ", ".join(ups) or "-"
    return (f"usage: python -m pipeline {phase} [--help]\n\n"
            f"{textwrap.fill(f'{phase}: {WHAT[phase]}.', 96)}\n\n"
            f"  upstream stages: {upstream}\n  reads:  {reads}\n  writes: {writes}\n\n"
            f"Bad input: one line `error: ...`, exit 2, previous outputs untouched.\n\n"
            f"example:\n  python -m pipeline {phase}\n  dvc repro {phase}        # the same, "
            f"with its upstream stages if they changed")


def main(argv: list[str]) -> int:
    helps = {"-h", "--help", "help"}
    if not argv or argv[0] in helps:
        print(USAGE.format(stages=stages_help()), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if any(a in helps for a in argv[1:]):
        if argv[0] not in WHAT:
            print(f"error: unknown stage {argv[0]!r} (one of {', '.join(WHAT)})", file=sys.stderr)
            return 2
        print(stage_help(argv[0]))
        return 0
    if argv == ["config"]:
        from .config import check_stage
        return check_stage()
    from .stages import main as stage_main
    return stage_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
