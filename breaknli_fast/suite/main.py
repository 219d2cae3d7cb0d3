"""``breaknli-fast suite run | list | render | measure`` (and ``python -m breaknli_fast.suite ...`` where the package
is not installed, e.g. on a lent GPU machine that runs a checkout from PYTHONPATH).

    breaknli-fast suite list                                # the entries: measurement, minutes, needs, result file
    breaknli-fast suite run bench-mini ray --smoke          # entries into a new runs/suite-<time> (--results DIR)
    breaknli-fast suite run --update-results                # every entry into the committed benchmarks/results
    breaknli-fast suite render                              # BENCHMARKS.md (and --readme README.md) from the results
    breaknli-fast suite measure                             # the registered measurements
    breaknli-fast suite measure generation --prompts 4 --k 4 --result /tmp/generation.json
    breaknli-fast suite measure generation --help           # its options, from its config's declarations

Every problem with what was asked is one ``error:`` line (exit 2), before anything is measured.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Sequence

from breaknli_fast.errors import UserError

PROG = "breaknli-fast suite"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        self.exit(2, f"error: {message} (see --help)\n")


def _parser() -> argparse.ArgumentParser:
    from breaknli_fast.suite.spec import DEFAULT_SUITE

    ap = _Parser(prog=PROG, description="The benchmark suite (docs/benchmarks.md).", formatter_class=argparse.RawDescriptionHelpFormatter,
                 epilog="\n".join(__doc__.split("\n")[2:11]))
    sub = ap.add_subparsers(dest="command", required=True, parser_class=_Parser)
    suite_file = dict(type=Path, default=None, help=f"the suite file (default {DEFAULT_SUITE.relative_to(DEFAULT_SUITE.parents[1])})")
    run = sub.add_parser("run", help="run entries of the suite, each writing its result file")
    run.add_argument("names", nargs="*", help="entry names (default: all)")
    run.add_argument("--skip", default="", help="entry names not to run")
    run.add_argument("--smoke", action="store_true", help="the smoke sizes: checks the pipeline, figures meaningless")
    run.add_argument("--results", type=Path, default=None, help="the results folder (default: a new runs/suite-<time>)")
    run.add_argument("--update-results", action="store_true", help="write the checkout's committed benchmarks/results")
    run.add_argument("--work", type=Path, default=None, help="scratch folder (default: a new temporary one)")
    run.add_argument("--python", default=sys.executable, help="the interpreter of the entries (default this one)")
    run.add_argument("--print", dest="print_only", action="store_true", help="print each entry's command, run none")
    run.add_argument("--suite-file", **suite_file)
    ls = sub.add_parser("list", help="the entries: measurement, minutes, requirements, result file")
    ls.add_argument("--suite-file", **suite_file)
    render = sub.add_parser("render", help="BENCHMARKS.md (and the README's parity table) from the result files")
    render.add_argument("--results", type=Path, default=None, help="default benchmarks/results")
    render.add_argument("--out", type=Path, default=None, help="default BENCHMARKS.md of the checkout")
    render.add_argument("--readme", type=Path, default=None, help="also rewrite the parity table of this README")
    render.add_argument("--intro", type=Path, default=None, help="default benchmarks/intro.md")
    render.add_argument("--smoke", action="store_true", help="render smoke result files too (the page says so)")
    render.add_argument("--suite-file", **suite_file)
    measure = sub.add_parser("measure", add_help=False,
                             help="one measurement with its options into a result file (NAME --help: its options)")
    measure.add_argument("name", nargs="?", default=None)
    return ap


MEASURE_OWN = ("--result", "--scratch", "--entry")


def _measure(argv: list[str]) -> int:
    """``measure [NAME [OPTIONS...] [--result FILE] [--scratch DIR] [--entry NAME] [--smoke] [-- WORDS...]]``."""
    from breaknli_fast.suite.args import parser
    from breaknli_fast.suite.registry import get_measurement, measurements
    from breaknli_fast.suite.runner import measure

    if not argv or argv[0] in ("-h", "--help"):
        print(f"usage: {PROG} measure NAME [OPTIONS...] --result FILE\n\nThe registered measurements:")
        for m in measurements():
            print(f"  {m.name:<22} {m.summary} (kind {m.kind})")
        return 0
    name, rest = argv[0], argv[1:]
    own: dict[str, str] = {}
    words: list[str] = []
    smoke = False
    i = 0
    while i < len(rest):
        w = rest[i]
        if w == "--":
            words += rest[i:]
            break
        if w in MEASURE_OWN:
            if i + 1 >= len(rest):
                raise UserError(f"{w} needs a value")
            own[w] = rest[i + 1]
            i += 2
            continue
        if w == "--smoke":
            smoke = True
        else:
            words.append(w)
        i += 1
    m = get_measurement(name)
    if "-h" in words or "--help" in words:
        ap = parser(m.arguments({}), f"{PROG} measure {name}", m.summary)
        ap.add_argument("--result", metavar="FILE", help="the result file to write")
        ap.add_argument("--scratch", metavar="DIR", help="its scratch folder (default: a new temporary one)")
        ap.print_help()
        return 0
    return measure(name, words, result=own.get("--result"), scratch=own.get("--scratch"), entry=own.get("--entry"),
                   smoke=smoke)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv[:1] == ["measure"]:
            return _measure(argv[1:])
        args = _parser().parse_args(argv)
        from breaknli_fast.suite.spec import load_suite, DEFAULT_SUITE

        if args.command == "list":
            suite = load_suite(args.suite_file or DEFAULT_SUITE)
            for e in suite.entries:
                print(f"{e.name}\t{e.measurement}\t{e.minutes if e.minutes is not None else '?'} min"
                      + (f"\trequires {','.join(e.requires)}" if e.requires else "") + f"\t{e.result}")
            return 0
        if args.command == "render":
            return _render(args)
        return _run(args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _render(args: argparse.Namespace) -> int:
    from breaknli_fast.suite.document import INTRO, render_folder
    from breaknli_fast.suite.provenance import ROOT

    results = args.results or ROOT / "benchmarks" / "results"
    out = args.out or ROOT / "BENCHMARKS.md"
    n, problems = render_folder(results, out, readme=args.readme, intro=args.intro or INTRO, smoke=args.smoke,
                                suite_file=args.suite_file)
    for line in problems:
        print(f"skipped {line}", file=sys.stderr)
    print(f"{out}: {n} result files" + (f"; {args.readme}: parity table per probe x engine" if args.readme else ""),
          file=sys.stderr)
    return 0


def _run(args: argparse.Namespace) -> int:
    import shlex

    from breaknli_fast.suite.runner import default_results, entry_command, run_entries
    from breaknli_fast.suite.spec import DEFAULT_SUITE, load_suite

    suite = load_suite(args.suite_file or DEFAULT_SUITE)
    names = suite.select(args.names or None, args.skip)
    results = default_results(args.update_results, args.smoke, args.results, suite)
    if args.print_only:
        work = args.work or Path("$WORK")
        for n in names:
            cmd, cwd, _, _ = entry_command(suite, n, python=args.python, results=Path(results), work=Path(work),
                                           smoke=args.smoke, checkout=False)
            print(f"{n}: {shlex.join(cmd)}" + (f"  (from {cwd})" if cwd != suite.path.parent.parent else ""))
        return 0
    work = args.work or Path(tempfile.mkdtemp(prefix="breaknli-suite-"))
    rc = run_entries(suite, names, python=args.python, results=results, work=work, smoke=args.smoke)
    print(f"suite results in {results}" + (" (smoke sizes: each file says so)" if args.smoke else ""), file=sys.stderr)
    return rc
