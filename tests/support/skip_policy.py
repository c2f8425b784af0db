"""A pytest plugin: every skip is reported, and a skip not in the allowed list fails the run.

Installed by tests/conftest.py (:func:`install`). A skip is allowed only when its reason carries the tag of a
condition listed in :data:`support.machine_skips.CONDITIONS` *and* that condition's probe
says this machine really lacks it (so a tag copied onto another skip does not pass). Any
other skip, at collection or in a test, and any xfail (a failure kept quiet) is not
allowed: the terminal summary lists it and the session's exit status becomes 1, even when
every test that ran passed. Deselected tests (``-m "not services"``) are not skips.

It also runs the ``machine`` marker (:func:`support.machine_skips.needs`): before a
marked test's fixtures are set up, the machine is asked for every condition it names.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from support import machine_skips

SECTION = "skips (allowed: tests/support/machine_skips.py)"


@dataclass(frozen=True)
class Skip:
    nodeid: str
    reason: str
    condition: str | None
    """The listed condition the skip is allowed by, None when it is not allowed."""
    why_not: str = ""


def _reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    wasxfail = getattr(report, "wasxfail", None)
    if wasxfail is not None:
        return f"xfail: {wasxfail}" if wasxfail else "xfail"
    longrepr = report.longrepr  # (path, line, "Skipped: <reason>") for every skip
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else longrepr
    return str(text).removeprefix("Skipped: ")


def judge(nodeid: str, reason: str) -> Skip:
    """Whether a skip with this reason is one the list allows."""
    name = machine_skips.condition_of(reason)
    if name is None:
        return Skip(nodeid, reason, None, f"no {machine_skips.TAG}[...] tag")
    if name not in machine_skips.CONDITIONS:
        return Skip(nodeid, reason, None, f"{name!r} is not a listed condition")
    try:
        offered = machine_skips.offers(name)
    except Exception as exc:
        return Skip(nodeid, reason, None, f"the probe of {name!r} failed: {exc!r}")
    if offered:
        return Skip(nodeid, reason, None, f"the machine offers {name!r}: the probe says so")
    return Skip(nodeid, reason, name)


class SkipPolicy:
    def __init__(self) -> None:
        self.skips: list[Skip] = []

    @property
    def not_allowed(self) -> list[Skip]:
        return [skip for skip in self.skips if skip.condition is None]

    def record(self, report: pytest.TestReport | pytest.CollectReport) -> None:
        if report.skipped:
            self.skips.append(judge(report.nodeid, _reason(report)))

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        for mark in item.iter_markers(machine_skips.MARKER):
            machine_skips.require(*mark.args)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.record(report)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self.record(report)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.not_allowed and exitstatus in (
            pytest.ExitCode.OK,
            pytest.ExitCode.NO_TESTS_COLLECTED,
        ):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:  # type: ignore[no-untyped-def]
        if not self.skips:
            return
        write = terminalreporter.write_line
        terminalreporter.write_sep("=", SECTION)
        allowed: dict[str, list[Skip]] = {}
        for skip in self.skips:
            if skip.condition is not None:
                allowed.setdefault(skip.condition, []).append(skip)
        for skips in allowed.values():
            write(f"allowed: {len(skips)} skipped, {skips[0].reason}")
        for skip in self.not_allowed:
            write(f"NOT ALLOWED: {skip.nodeid}: {skip.reason} ({skip.why_not})")
        if self.not_allowed:
            terminalreporter.write_line(
                f"{len(self.not_allowed)} skip(s) not in the allowed list: the run fails "
                "(a machine condition belongs in tests/support/machine_skips.py; "
                "anything else is a failure to fix)",
                red=True,
                bold=True,
            )


PLUGIN_NAME = "agentenvs-skip-policy"


def install(config: pytest.Config) -> SkipPolicy:
    """Register the policy (once) and the ``machine`` marker; call from ``pytest_configure``."""
    config.addinivalue_line(
        "markers",
        f"{machine_skips.MARKER}(*conditions): skip unless the machine offers each condition "
        "of tests/support/machine_skips.py (the only skips the suite allows)",
    )
    policy = config.pluginmanager.get_plugin(PLUGIN_NAME)
    if policy is None:
        policy = SkipPolicy()
        config.pluginmanager.register(policy, PLUGIN_NAME)
    return policy
