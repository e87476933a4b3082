"""Hooks shared by both Python suites (tests/static, tests/e2e): every test carries exactly one
tier marker (pytest.ini lists them), and its tier matches what its fixtures bring in, so that
`-m static` (what `tests/run --fast` runs) never selects a test that needs a browser or a server.

Helper modules of the suites are imported by plain name (prepend import mode): keep their names
unique across tests/static and tests/e2e, and import helpers from them, never `from conftest`
(there are three conftest modules).
"""

from __future__ import annotations

from pathlib import Path

import pytest

TIERS = ("static", "binary", "chromium", "stack")

# Fixture (tests/e2e/conftest.py, test_stack.py) -> the tiers a test that uses it may carry.
# item.fixturenames is the transitive closure, so `server`, `start_server`, `server_config`,
# `canary_server` and the like show up here as `chromium` and `binaries`.
FIXTURE_TIERS: dict[str, set[str]] = {
    "server_bin": {"binary", "chromium", "stack"},
    "agent_browser_bin": {"chromium", "stack"},
    "binaries": {"chromium", "stack"},
    "web": {"chromium", "stack"},
    "chromium": {"chromium"},
    "stack": {"stack"},
}

STATIC_DIR = Path(__file__).parent / "static"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    problems: list[str] = []
    for item in items:
        tiers = sorted({mark.name for mark in item.iter_markers() if mark.name in TIERS})
        if len(tiers) != 1:
            problems.append(f"{item.nodeid}: tiers {tiers}; mark it with exactly one of {', '.join(TIERS)}")
            continue
        (tier,) = tiers
        wrong = [f for f in item.fixturenames if tier not in FIXTURE_TIERS.get(f, {tier})]
        if wrong:
            needs = sorted(set.intersection(*(FIXTURE_TIERS[f] for f in wrong)))
            problems.append(f"{item.nodeid}: marked {tier}, but uses {', '.join(wrong)} (mark it {' or '.join(needs)})")
        if STATIC_DIR in Path(str(item.path)).parents and tier != "static":
            problems.append(f"{item.nodeid}: tests/static holds static tests only, this one is marked {tier}")
    if problems:
        raise pytest.UsageError("test tier markers:\n  " + "\n  ".join(problems))
