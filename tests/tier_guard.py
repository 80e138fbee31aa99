"""A pytest plugin that fails a test tier which ran no test: ``tests/run.sh`` loads it for
every tier (``-p tests.tier_guard``).

pytest exits 0 when every collected test was skipped, so a tier whose machine lacks what it
needs (network namespaces, a GPU) would pass without testing anything. With this plugin a
run in which no test passed ends with exit status 5 (pytest's "no tests ran") and says why,
unless the tier is declared optional on this machine: ``NBACCEL_TIER_OPTIONAL`` set to the
reason (``run.sh`` sets it for the GPU tier where there is no CUDA device), which is printed.
An optional tier still has to collect its tests: one that collects none fails all the same.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

OPTIONAL = "NBACCEL_TIER_OPTIONAL"  # the reason this tier may run no test here


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(TierGuard(), "tier_guard_counts")


class TierGuard:
    """Counts what the run's tests did, and judges the run at its end."""

    def __init__(self) -> None:
        self.passed = self.failed = self.skipped = 0
        self.said: tuple[str, bool] | None = None  # what to say, and whether the run fails

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self.failed += 1
        elif report.skipped:  # in set-up (a skip mark, a fixture's skip) or in the test
            self.skipped += 1
        elif report.when == "call":
            self.passed += 1

    def judge(self, collected: int, exitstatus: int) -> tuple[str, bool] | None:
        """What to say of a run that passed no test, and whether it fails; None: nothing."""
        if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
            return "tier guard: this run collected no test, so it tested nothing", True
        if exitstatus != pytest.ExitCode.OK:
            return None  # an interrupt, a usage or internal error: pytest's status says it
        reason = os.environ.get(OPTIONAL, "").strip()
        if reason:
            return (
                f"tier guard: none of the {collected} tests ran, accepted: this tier is "
                f"optional here: {reason}",
                False,
            )
        return (
            f"tier guard: none of the {collected} collected tests passed ({self.skipped} "
            "skipped): a tier that tests nothing fails. Give this machine what the skips ask "
            f"for, or declare the tier optional here with {OPTIONAL}=<reason>",
            True,
        )

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if session.config.option.collectonly or self.passed or self.failed:
            return
        self.said = self.judge(session.testscollected, exitstatus)
        if self.said is None:
            return
        if self.said[1]:
            session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED
        if session.config.pluginmanager.get_plugin("terminalreporter") is None:
            print(self.said[0], file=sys.stderr)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.said is not None:  # in the summary: on a line of its own
            line, fails = self.said
            terminalreporter.write_line(line, red=fails, yellow=not fails, bold=True)
