"""The program that runs inside the sandbox: check one bundle, write the report.

    python -m service._sandbox_main BUNDLE --report-fd 3 [--select GG1 ...] [--seed 0]

It imports :mod:`checker`, calls ``checker.check(bundle, ...)`` and writes the
report's JSON to the file descriptor the parent gave it (a pipe the parent
reads with a size cap). Everything else it prints goes to stdout/stderr, which
the parent also caps. Exit status: 0 when a report was written, 3 when the
checker itself failed (the traceback is on stderr).

This module imports only the standard library at the top: it must start fast
and must not pull in anything of the service (database, settings, secrets).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="service._sandbox_main")
    parser.add_argument("bundle")
    parser.add_argument("--report-fd", type=int, required=True)
    parser.add_argument("--select", action="append", default=None)
    parser.add_argument("--ignore", action="append", default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-examples", type=int, default=None)
    return parser.parse_args(argv)


def _check(args: argparse.Namespace) -> str:
    import checker

    check = getattr(checker, "check", None)
    if check is None:  # the checker core predates `check`: say so in a valid report
        from checker.report import LoadFailure, Report

        report = Report(
            load_errors=[LoadFailure(path=args.bundle, traceback="checker.check is not available in this installation")],
            settings={"seed": args.seed, "max_examples": args.max_examples, "select": args.select, "ignore": args.ignore},
        )
    else:
        report = check(args.bundle, select=args.select, ignore=args.ignore, seed=args.seed, max_examples=args.max_examples)
    return report.to_json()


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    # The report channel must not leak into anything the rules start.
    os.set_inheritable(args.report_fd, False)
    try:
        text = _check(args)
    except BaseException:  # noqa: BLE001 - the parent reports the last line
        traceback.print_exc()
        sys.stderr.flush()
        return 3
    data = text.encode()
    with os.fdopen(args.report_fd, "wb", closefd=True) as out:
        out.write(data)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: threads a rule started must not keep us alive.
    os._exit(code)
