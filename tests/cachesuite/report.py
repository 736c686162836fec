"""The results of a run of the HTTP cache test suite, and the regression gate.

`SuiteReport` reads what ``suite.mjs run`` writes, counts the way cache-tests.fyi does
(required tests passed, dependencies honoured), and prints the count beside the published
proxies'; `Gate` is ``tests/cachesuite/gate.toml``.
"""

from __future__ import annotations

import collections
import dataclasses
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SUITE_PACKAGE = "http-cache-tests"
GATE_FILE = Path(__file__).with_name("gate.toml")

#: Required tests passed by reverse proxies, as published at cache-tests.fyi.
PUBLISHED: tuple[tuple[str, int], ...] = (
    ("Apache Traffic Server", 132),
    ("Apache httpd", 131),
    ("Squid", 122),
    ("Caddy", 121),
    ("Varnish", 119),
    ("nginx", 99),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseResult:
    """One test of the suite in one run.

    Attributes:
        id: the suite's test id, e.g. ``freshness-max-age-0``.
        name: what the test checks, in the suite's words.
        suite: the id of the group it belongs to, e.g. ``cc-freshness``.
        kind: ``required`` (a conformance failure if it fails), ``optimal`` (a missed
            chance to cache) or ``check`` (informational).
        browser_only: only run against browsers; never runs here.
        depends_on: tests that must pass for this one to count.
        outcome: the suite's verdict with dependencies honoured, as cache-tests.fyi shows
            it: pass, fail, optional_fail, yes, no, setup_fail, harness_fail,
            dependency_fail, retry or untested.
        outcome_ignoring_dependencies: the same verdict ignoring ``depends_on``.
        error: why it did not pass: ``Assertion``, ``Setup``, or the client's own error
            (``FetchError``, ``AbortError``); "" when it passed.
        message: the client's message when it did not pass.
    """

    id: str
    name: str
    suite: str
    kind: str
    browser_only: bool
    depends_on: tuple[str, ...]
    outcome: str
    outcome_ignoring_dependencies: str
    error: str
    message: str

    @property
    def required(self) -> bool:
        return self.kind == "required"

    @property
    def passed(self) -> bool:
        """Passed, counting dependencies (a ✅, or a "yes" for a check)."""
        return self.outcome in ("pass", "yes")

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["depends_on"] = list(self.depends_on)
        data["required"] = self.required
        data["passed"] = self.passed
        return data


@dataclass(frozen=True, slots=True, kw_only=True)
class SuiteReport:
    """The results of one run of the suite.

    Attributes:
        version: the suite's package version.
        target: ``elastic-cache`` or ``direct`` (no cache between client and origin).
        capped: the run hit its time cap; tests not finished by then count as untested.
        elapsed_seconds: how long the client ran.
        tests: every test the suite defines, run or not.
    """

    version: str
    target: str
    capped: bool
    elapsed_seconds: float
    tests: tuple[CaseResult, ...]

    @classmethod
    def from_driver(cls, data: Mapping[str, Any], *, target: str) -> SuiteReport:
        """Parse what ``suite.mjs run`` wrote."""
        tests = []
        for t in data["tests"]:
            result = t["result"]
            failed = isinstance(result, list)
            tests.append(
                CaseResult(
                    id=t["id"],
                    name=t["name"],
                    suite=t["suite"],
                    kind=t["kind"],
                    browser_only=bool(t["browser_only"]),
                    depends_on=tuple(t["depends_on"]),
                    outcome=t["outcome"],
                    outcome_ignoring_dependencies=t["outcome_ignoring_dependencies"],
                    error=str(result[0]) if failed else "",
                    message=str(result[1]) if failed and len(result) > 1 else "",
                )
            )
        return cls(
            version=str(data["version"]),
            target=target,
            capped=bool(data["capped"]),
            elapsed_seconds=float(data["elapsed_seconds"]),
            tests=tuple(tests),
        )

    @property
    def runnable(self) -> tuple[CaseResult, ...]:
        """The tests a cache (not a browser) is run against."""
        return tuple(t for t in self.tests if not t.browser_only)

    @property
    def required(self) -> tuple[CaseResult, ...]:
        return tuple(t for t in self.runnable if t.required)

    @property
    def required_passed(self) -> int:
        """Required tests passed, dependencies honoured: the figure cache-tests.fyi shows."""
        return sum(t.passed for t in self.required)

    @property
    def required_passed_ignoring_dependencies(self) -> int:
        return sum(t.outcome_ignoring_dependencies == "pass" for t in self.required)

    @property
    def executed(self) -> int:
        return sum(t.outcome != "untested" for t in self.runnable)

    def passed_ids(self) -> frozenset[str]:
        return frozenset(t.id for t in self.runnable if t.passed)

    def summary(self) -> list[str]:
        """Human-readable lines: the counts, and the published proxies beside them."""
        required = self.required
        failures = collections.Counter(t.outcome for t in required if not t.passed)
        why = ", ".join(f"{n} {outcome}" for outcome, n in failures.most_common())
        by_kind = {
            kind: (sum(t.passed for t in self.runnable if t.kind == kind), n)
            for kind, n in collections.Counter(t.kind for t in self.runnable).items()
        }
        name = "elastic-cache read-through" if self.target == "elastic-cache" else self.target
        lines = [
            f"http-cache-tests {self.version} against {name}"
            f" ({self.executed} of {len(self.runnable)} tests run in"
            f" {self.elapsed_seconds:.0f}s{', TIME CAP HIT' if self.capped else ''})",
            f"  required: {self.required_passed} passed, {len(required) - self.required_passed}"
            f" failed of {len(required)}" + (f" ({why})" if why else ""),
            f"  required passed ignoring dependencies: "
            f"{self.required_passed_ignoring_dependencies}",
            f"  all tests passed: {sum(t.passed for t in self.runnable)} of {len(self.runnable)}"
            f" (optimal {by_kind.get('optimal', (0, 0))[0]} of"
            f" {by_kind.get('optimal', (0, 0))[1]},"
            f" check 'yes' {by_kind.get('check', (0, 0))[0]} of"
            f" {by_kind.get('check', (0, 0))[1]})",
            "  required passed, beside the reverse proxies published at cache-tests.fyi:",
        ]
        board = [*PUBLISHED, (name, self.required_passed)]
        board.sort(key=lambda row: -row[1])
        for who, count in board:
            mark = "  <--" if who == name else ""
            lines.append(f"    {count:4d}  {who}{mark}")
        return lines

    def to_json(self) -> dict[str, Any]:
        return {
            "package": SUITE_PACKAGE,
            "version": self.version,
            "target": self.target,
            "capped": self.capped,
            "elapsed_seconds": round(self.elapsed_seconds, 1),
            "required_total": len(self.required),
            "required_passed": self.required_passed,
            "required_passed_ignoring_dependencies": self.required_passed_ignoring_dependencies,
            "all_total": len(self.runnable),
            "all_passed": sum(t.passed for t in self.runnable),
            "published_required_passed": dict(PUBLISHED),
            "tests": [t.to_json() for t in self.tests],
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Gate:
    """The regression gate in ``tests/cachesuite/gate.toml``.

    Attributes:
        required_floor: a run must pass at least this many required tests.
        safety: tests that must pass in every run (once one passes, add it here).
    """

    required_floor: int
    safety: tuple[str, ...]

    @classmethod
    def load(cls, path: Path = GATE_FILE) -> Gate:
        data = tomllib.loads(path.read_text())
        return cls(
            required_floor=int(data["required_floor"]),
            safety=tuple(str(s) for s in data.get("safety", ())),
        )

    def violations(self, report: SuiteReport) -> list[str]:
        """What the run broke; empty when it passes the gate."""
        problems = []
        if report.required_passed < self.required_floor:
            problems.append(
                f"{report.required_passed} required tests passed, the floor is "
                f"{self.required_floor} ({GATE_FILE.name})"
            )
        by_id = {t.id: t for t in report.tests}
        for test_id in self.safety:
            test = by_id.get(test_id)
            if test is None:
                problems.append(f"safety test {test_id!r} is not in the suite")
            elif not test.passed:
                problems.append(
                    f"safety test {test_id} ({test.name}) did not pass: {test.outcome}"
                    + (f" - {test.message}" if test.message else "")
                )
        return problems
