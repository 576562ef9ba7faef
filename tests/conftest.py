"""Every test tree: the hypothesis profiles, registered before pytest loads one, the
fast tier's skipping of modules that are slow as a whole, and the reliability figures
added up over the session (from every worker when the run is split with ``-n``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tests.support.tiers  # noqa: F401 - registers the "fast" profile of `make test-unit`
from tests.security.figures import TALLY

# ``pytestmark = pytest.mark.slow`` (or a one-line list holding it) at a module's top:
# every test of the module is slow.
SLOW_MODULE = re.compile(
    r"^pytestmark\s*=\s*(pytest\.mark\.slow|\[[^\]\n]*\bpytest\.mark\.slow\b[^\]\n]*\])\s*(#.*)?$",
    re.MULTILINE,
)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under ``-m "not slow"`` (``make test-unit``) a module marked slow as a whole is not
    even imported: each of its tests would be deselected, and importing it can cost
    seconds (schemathesis builds its cases at collection). Any other run collects it."""
    if (
        " ".join(str(config.option.markexpr or "").split()) == "not slow"
        and collection_path.suffix == ".py"
        and collection_path.name.startswith("test_")
        and SLOW_MODULE.search(collection_path.read_text(errors="replace"))
    ):
        return True
    return None


def pytest_sessionfinish(session: pytest.Session) -> None:
    """In a pytest-xdist worker: hand this worker's figures to the controller."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["figures"] = dict(TALLY)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """In the pytest-xdist controller: add up a finished worker's figures."""
    TALLY.update(getattr(node, "workeroutput", {}).get("figures", {}))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if TALLY:
        terminalreporter.section("reliability and security figures")
        for key in sorted(TALLY):
            terminalreporter.write_line(f"{key}: {TALLY[key]}")
