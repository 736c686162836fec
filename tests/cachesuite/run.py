"""Run the HTTP cache test suite against elastic-cache's read-through and print the counts.

    .venv/bin/python -m tests.cachesuite.run                 # all tests, 5-minute cap
    .venv/bin/python -m tests.cachesuite.run --id vary-syntax-foo-bar --id freshness-max-age
    .venv/bin/python -m tests.cachesuite.run --direct        # no cache: a baseline
    .venv/bin/python -m tests.cachesuite.run --check         # exit 1 below the gate
    .venv/bin/python -m tests.cachesuite.run --id other-age-gen --dump   # every header

Needs node and the suite's npm package (``make cache-tests``). Writes the per-test results
to ``--out`` (default ``.cache-tests/results.json``). See docs/http-cache-suite.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path

from tests.cachesuite.harness import (
    PACKAGE_DIR,
    REPO,
    SUITE_VERSION,
    SuiteError,
    node_available,
    package_installed,
    run_suite,
)
from tests.cachesuite.report import SUITE_PACKAGE, Gate, SuiteReport


def write_results(report: SuiteReport, out: Path) -> None:
    """The per-test results (id, name, kind, required, passed, outcome, message) as JSON."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report.to_json(), indent=2, ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.cachesuite.run",
        description="Run http-cache-tests against elastic-cache's read-through.",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO / ".cache-tests" / "results.json",
        help="per-test results as JSON (default .cache-tests/results.json)",
    )
    parser.add_argument(
        "--cap", type=float, default=300.0, help="stop the client after this many seconds"
    )
    parser.add_argument(
        "--id", action="append", default=[], metavar="TEST", help="run only this test"
    )
    parser.add_argument(
        "--direct", action="store_true", help="no cache: relay to the origin (a baseline)"
    )
    parser.add_argument(
        "--package", type=Path, default=PACKAGE_DIR, help="the installed npm package"
    )
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when the run breaks tests/cachesuite/gate.toml"
    )
    parser.add_argument(
        "--failures", action="store_true", help="also list every required test that failed"
    )
    parser.add_argument(
        "--dump",
        action="store_true",
        help="with --id: print every request and response, as the client and the origin see them",
    )
    args = parser.parse_args(argv)
    if args.dump and not args.id:
        parser.error("--dump needs --id")
    if not node_available():
        print("node is not installed: cannot run the HTTP cache test suite", file=sys.stderr)
        return 2
    if not package_installed(args.package):
        print(
            f"{SUITE_PACKAGE} {SUITE_VERSION} is not installed in {args.package}: "
            "run `make cache-tests`",
            file=sys.stderr,
        )
        return 2
    transcript: list[str] | None = [] if args.dump else None
    with tempfile.TemporaryDirectory(prefix="cachesuite-") as work:
        try:
            report = asyncio.run(
                run_suite(
                    Path(work),
                    package_dir=args.package,
                    cap_seconds=args.cap,
                    test_ids=args.id,
                    direct=args.direct,
                    transcript=transcript,
                )
            )
        except SuiteError as exc:
            print(f"the suite did not run: {exc}", file=sys.stderr)
            return 2
    for line in transcript or ():
        print(line)
    write_results(report, args.out)
    for line in report.summary():
        print(line)
    if args.failures or args.id:
        print("  required tests not passed:" if not args.id else "  the tests run:")
        for test in report.required if not args.id else report.tests:
            if (args.id and test.id in args.id) or (not args.id and not test.passed):
                detail = f" - {test.message}" if test.message else ""
                print(f"    {test.id} [{test.outcome}]{detail}")
    print(f"  per-test results: {args.out}")
    if args.check:
        problems = Gate.load().violations(report)
        for problem in problems:
            print(f"  GATE: {problem}")
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
